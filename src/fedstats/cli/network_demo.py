"""``fedstats demo --network``: the demo's analyses through a real server and client processes on loopback.

A temporary folder gets a development CA, an enrollment authority (which also certifies the demo's analyst
key: every task is signed with it, and devices accept only signed tasks), an SQLite store and an operator
token; a ``fedstats server`` process listens on 127.0.0.1 (HTTPS). The embedded real data is split into one shard
per client process: every process holds a shard of each population (Adult ages, Adult test-set
predictions, scikit-learn digits) as one enrolled device per population, and answers the rounds with
:class:`fedstats.client.Device`. The operator creates one task per analysis and reads the results; each
row carries ``"transport": "https"`` and ``"client_processes"``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedstats.errors import FedstatsError, ProtocolAbortError
from fedstats.randomness import RandomSource
from fedstats.wire.enrollment import init_authority, issue_analyst, issue_identity
from fedstats.wire.tasks import default_min_session_size, sign_task

__all__ = ["run_network_demo"]

_EPSILON = 2.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _populations() -> dict[str, dict[str, np.ndarray]]:
    from fedstats.datasets import load_adult
    from fedstats.experiments.demo_performance_gap import _correct_predictions
    from fedstats.experiments.heterogeneity_data import load_image_vectors

    ages = load_adult("all")["age"].to_numpy(dtype=np.float64)
    sex, correct = _correct_predictions()
    x, _, _ = load_image_vectors("digits")
    return {
        "adult": {"value": ages},
        "adult-test": {"group": (sex == "Male").astype(np.int64), "value": 2.0 * correct - 1.0},
        "digits": {"x": x},
    }


def _tasks(
    pops: dict[str, dict[str, np.ndarray]], deadline: float, n_devices: int = 20
) -> list[dict[str, Any]]:
    n_adult = len(pops["adult"]["value"])
    n_test = len(pops["adult-test"]["value"])
    n_digits = len(pops["digits"]["x"])
    base = {"deadlines": {"checkin": deadline, "round": deadline}}

    def cohort(n_records: int) -> dict[str, int]:
        # cohort_size counts devices; each contributes every record of its shard
        return {"cohort_size": n_devices, "max_records_per_client": -(-n_records // n_devices)}

    return [
        {
            **base,
            "label": "mean age (exact, federated sum)",
            "analysis": "exact-mean",
            "params": {"column": "value", "clip": 128.0},
            "privacy": {"epsilon": None, "population": "adult"},
            **cohort(n_adult),
        },
        {
            **base,
            "label": "mean age, adaptive bit pushing + RR",
            "analysis": "bitpushing-mean",
            "params": {"column": "value", "low": 0.0, "high": 127.0, "method": "adaptive"},
            "privacy": {"epsilon": _EPSILON, "population": "adult"},
            **cohort(n_adult),
        },
        {
            **base,
            "label": "accuracy gap F-M (M_R, LDP)",
            "analysis": "performance-gap",
            "params": {"mechanism": "R", "scale": "rate"},
            "privacy": {"epsilon": _EPSILON, "population": "adult-test"},
            **cohort(n_test),
        },
        {
            **base,
            "label": "heterogeneity dispersion (distributed discrete Gaussian)",
            "analysis": "heterogeneity",
            "params": {"dim": int(pops["digits"]["x"].shape[1]), "statistic": "dispersion"},
            "privacy": {"epsilon": 4.0, "delta": 1e-5, "population": "digits"},
            **cohort(n_digits),
            # distributed noise shares are private only inside the secure sum
            "secure_aggregation": {
                "max_session": 1000,
                "min_session_size": max(2, default_min_session_size(n_devices)),
            },
        },
    ]


def _truths(pops: dict[str, dict[str, np.ndarray]]) -> list[float]:
    from fedstats.analyses.heterogeneity.protocol import HeterogeneityResult
    from fedstats.engine import Engine, InMemoryPopulation
    from fedstats.wire.registry import plan_for

    ages = pops["adult"]["value"]
    g, v = pops["adult-test"]["group"], pops["adult-test"]["value"]
    gap = float(((v[g == 0] + 1) / 2).mean() - ((v[g == 1] + 1) / 2).mean())
    x = pops["digits"]["x"]
    exact = {  # the non-private dispersion: the truth the network run's estimate is compared with
        "analysis": "heterogeneity",
        "version": 1,
        "params": {"dim": int(x.shape[1]), "statistic": "dispersion"},
        "privacy": {"epsilon": None, "delta": None},
    }
    seed = bytes(RandomSource().public("plan", "seed").integers(0, 256, size=32).tolist())
    het = Engine(randomness=RandomSource()).run(
        plan_for(exact, n_clients=len(x), public_seed=seed), InMemoryPopulation({"x": x})
    )
    assert isinstance(het, HeterogeneityResult) and het.dispersion is not None
    mean = float(ages.mean())
    return [mean, mean, gap, float(het.dispersion.estimate)]


def _write_shards(root: Path, pops: dict[str, dict[str, np.ndarray]], n: int) -> None:
    import pandas as pd

    for pop, cols in pops.items():
        flat: dict[str, Any] = {}
        for k, arr in cols.items():
            if arr.ndim == 2:
                for i in range(arr.shape[1]):
                    flat[f"{k}[{i}]"] = arr[:, i]
            else:
                flat[k] = arr
        df = pd.DataFrame(flat)
        for i, idx in enumerate(np.array_split(np.arange(len(df)), n)):
            df.iloc[idx].to_csv(root / f"{pop}-{i}.csv", index=False)


def worker(spec_path: str) -> None:
    """Entry of one client process: one device per population, each on its own shard, in threads."""
    from fedstats.client import Device, LocalBudget, Policy

    spec = json.loads(Path(spec_path).read_text())
    policy = Policy(
        max_epsilon=4.0,
        max_delta=1e-5,
        allow_non_private=True,
        min_session_size=int(spec.get("min_session_size", 10)),
    )
    stop = time.monotonic() + float(spec["max_seconds"])

    def one(ident: str, data: str) -> None:
        dev = Device(
            spec["url"],
            ident,
            data,
            policy=policy,
            budget=LocalBudget(None, epsilon=100.0, delta=1e-3),
            ca=spec["ca"],
        )
        want = int(spec["runs"][Path(ident).stem.split("@")[0]])
        try:
            dev.run(
                poll=0.2,
                until=lambda d: len(getattr(d, "finished", ())) >= want,
                max_seconds=max(1.0, stop - time.monotonic()),
            )
        finally:
            dev.close()

    threads = [threading.Thread(target=one, args=(ident, data)) for ident, data in spec["devices"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run_network_demo(
    n_processes: int = 20, *, timeout: float = 600.0, progress: Any = None
) -> list[dict[str, Any]]:
    """Run the network demo and return its rows.

    Parameters
    ----------
    n_processes : int
        Client processes, >= 2 (default 20).
    timeout : float
        Seconds before the demo gives up.
    progress : Progress, optional
        Receives one unit per finished analysis.

    Returns
    -------
    list of dict
        Rows with ``name``, ``dataset``, ``estimate``, ``truth``, ``error``, ``epsilon``, ``delta``, ``ci``,
        ``transport`` and ``client_processes``.

    Raises
    ------
    ProtocolAbortError
        If the server does not start or a run aborts.
    """
    import httpx

    fedstats_bin = str(Path(sys.executable).with_name("fedstats"))
    pops = _populations()
    tasks = _tasks(pops, deadline=timeout / 2, n_devices=n_processes)
    with tempfile.TemporaryDirectory(prefix="fedstats-net-") as tmp:
        root = Path(tmp)
        certs, analyst, db, token = _setup(root, pops)
        _write_shards(root, pops, n_processes)
        port = _free_port()
        url = f"https://127.0.0.1:{port}"
        log = open(root / "server.log", "wb")
        server = subprocess.Popen(
            [
                fedstats_bin,
                *server_argv(db, port, certs, root / "authority" / "authority.pub"),
                *("--rate", "1000", "--burst", "1000"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        workers: list[subprocess.Popen[bytes]] = []
        try:
            ctx = ssl.create_default_context(cafile=str(certs["ca"]))
            admin = httpx.Client(
                base_url=url, verify=ctx, headers={"Authorization": f"Bearer {token}"}, timeout=60
            )
            t_end = time.monotonic() + timeout
            wait_healthy(lambda: admin.get("/healthz"), server, t_end, "the demo server")
            for pop in pops:
                admin.put(
                    f"/v1/admin/budgets/population/{pop}", json={"epsilon": 20.0, "delta": 1e-4}
                )
            admin.put("/v1/admin/budgets/analyst/demo", json={"epsilon": 50.0, "delta": 1e-3})
            spec = {"url": url, "ca": str(certs["ca"]), "max_seconds": timeout}
            _start_workers(workers, root, pops, tasks, n_processes, spec)
            run_ids = []
            for t in tasks:
                r = admin.post("/v1/admin/tasks", json=sign_task(t, analyst))
                r.raise_for_status()
                r = admin.post("/v1/admin/runs", json={"task_id": r.json()["task_id"]})
                r.raise_for_status()
                run_ids.append(r.json()["run_id"])
            results = _await_runs(admin, run_ids, t_end, timeout, progress)
            admin.close()
        finally:
            stop_processes(workers)
            stop_processes([server])
            log.close()
    return _rows(tasks, results, _truths(pops), n_processes)


def server_argv(db: str, port: int, certs: dict[str, Path], authority: Path) -> list[str]:
    """``fedstats server``'s arguments for a demo server on 127.0.0.1: its database, port, TLS, authority."""
    return [
        "server",
        "--db",
        db,
        "--port",
        str(port),
        "--tls-cert",
        str(certs["cert"]),
        "--tls-key",
        str(certs["key"]),
        "--authority",
        str(authority),
    ]


def wait_healthy(get: Any, process: subprocess.Popen[bytes], deadline: float, what: str) -> None:
    """Poll ``get()`` (a ``/healthz`` request) until it answers 200; raise if ``process`` exits or at ``deadline``.

    Raises
    ------
    ProtocolAbortError
        If the server exits or does not answer by ``deadline`` (``time.monotonic()`` seconds).
    """
    import httpx

    while True:
        try:
            if get().status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise ProtocolAbortError(f"{what} did not start")
        time.sleep(0.2)


def stop_processes(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process still running, then wait up to 10 s for each and kill the stragglers."""
    for w in processes:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    for w in processes:
        try:
            w.wait(10)
        except subprocess.TimeoutExpired:
            w.kill()


def _setup(
    root: Path, pops: dict[str, dict[str, np.ndarray]]
) -> tuple[dict[str, Path], dict[str, Any], str, str]:
    """Development TLS certificates, the authority, the analyst's certified key, the store and a token."""
    from fedstats.service.domain.operators import add_operator
    from fedstats.service.http.tls import make_dev_certificates
    from fedstats.service.store import open_store

    certs = make_dev_certificates(root / "tls", ["127.0.0.1"])
    init_authority(root / "authority")
    # the analyst's task-signing key, certified by the authority; it never goes to the server
    analyst = issue_analyst(root / "authority", "demo", list(pops), root / "analyst.json")
    db = f"sqlite:///{root / 'fedstats.db'}"
    store = open_store(db)
    token = add_operator(store, "demo")
    store.close()
    return certs, analyst, db, token


def _start_workers(
    workers: list[subprocess.Popen[bytes]],
    root: Path,
    pops: dict[str, dict[str, np.ndarray]],
    tasks: list[dict[str, Any]],
    n_processes: int,
    spec: dict[str, Any],
) -> None:
    """Enroll one device per population in each client process and start the processes (into ``workers``)."""
    runs_per_pop: dict[str, int] = {}
    for t in tasks:
        p = t["privacy"]["population"]
        runs_per_pop[p] = runs_per_pop.get(p, 0) + 1
    for i in range(n_processes):
        devices = []
        for pop in pops:
            ident = root / f"{pop}@{i}.json"
            issue_identity(root / "authority", f"{pop}-device-{i}", pop, ident)
            devices.append([str(ident), str(root / f"{pop}-{i}.csv")])
        worker_spec = {
            "url": spec["url"],
            "ca": spec["ca"],
            "devices": devices,
            "runs": runs_per_pop,
            "max_seconds": spec["max_seconds"],
            # the devices' floor on secure sessions: the demo's tasks ask for this minimum
            "min_session_size": max(2, default_min_session_size(n_processes)),
        }
        (root / f"worker-{i}.json").write_text(json.dumps(worker_spec))
        workers.append(
            subprocess.Popen(
                [sys.executable, "-m", "fedstats.cli.network_demo", str(root / f"worker-{i}.json")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )


def _await_runs(
    admin: Any, run_ids: list[str], t_end: float, timeout: float, progress: Any
) -> list[dict[str, Any]]:
    """Poll every run until done; raise if one aborts or the demo's time runs out."""
    results = []
    if progress is not None:
        progress.start("demo", len(run_ids))
    for rid in run_ids:
        while True:
            view = admin.get(f"/v1/admin/runs/{rid}").json()
            if view["status"] in ("done", "aborted"):
                break
            if time.monotonic() > t_end:
                raise ProtocolAbortError(f"run {rid} did not finish within {timeout} s")
            time.sleep(0.2)
        if view["status"] != "done":
            raise ProtocolAbortError(f"run {rid} aborted: {view['error']}")
        results.append(view)
        if progress is not None:
            progress.advance("demo")
    if progress is not None:
        progress.finish("demo")
    return results


def _rows(
    tasks: list[dict[str, Any]],
    results: list[dict[str, Any]],
    truths: list[float],
    n_processes: int,
) -> list[dict[str, Any]]:
    """The demo's table: one row a run, its estimate against the truth computed on the whole data."""
    rows = []
    for t, view, truth in zip(tasks, results, truths, strict=True):
        res = view["result"]
        est = res["dispersion"]["estimate"] if t["analysis"] == "heterogeneity" else res["estimate"]
        ci = res["dispersion"]["interval"] if t["analysis"] == "heterogeneity" else res.get("ci")
        rows.append(
            {
                "name": t["label"],
                "dataset": f"{t['privacy']['population']}, {view['n_clients']} records on "
                f"{view['devices']} devices",
                "estimate": est,
                "truth": truth,
                "error": est - truth,
                "epsilon": t["privacy"]["epsilon"],
                "delta": t["privacy"].get("delta"),
                "ci": ci,
                "transport": "https",
                "client_processes": n_processes,
            }
        )
    return rows


if __name__ == "__main__":  # a client process of the demo
    try:
        worker(sys.argv[1])
    except (FedstatsError, KeyboardInterrupt):
        sys.exit(os.EX_SOFTWARE)
