"""The two-aggregator (Prio3) network demo, compared with the in-process engine.

A leader and a helper server process, device processes, and bit pushing and FED-chi^2 run as **signed
Prio3 tasks** through them.

:func:`run_prio3_demo` makes a temporary deployment (a development CA and TLS certificates, an enrollment
authority, an analyst certified by it, one SQLite database, one operator token and one privacy budget per
aggregator), starts two aggregator processes (``fedstats server --vdaf``, HTTPS on 127.0.0.1) and, per
analysis:

1. the analyst signs the task (analysis, options, privacy, cohort, and its ``prio3`` route: the two
   aggregators, their noise); the operator posts the envelope to both aggregators with each one's
   secrets (the shared ``verify_key``, the peer token), and each verifies it and reserves the task's
   privacy loss on its ledger;
2. every device (:class:`EngineSeededDevice`, a :class:`fedstats.client.vdaf.Prio3Device`) joins: it
   verifies the envelope, checks its policy, reserves the loss in its budget file and gets its slot;
3. the collector (:func:`fedstats.client.vdaf.collect_signed`) opens each round on both aggregators (each
   derives the round and its Prio3 variant itself), device processes (``python -m fedstats.cli.prio3_demo
   device JOB``) derive the round from the signed task, compare it with both announcements and upload one
   share to each aggregator, the leader aggregates with the helper, and the collector combines both
   aggregate shares and feeds the sum into the plan.

For the comparison each device draws its private randomness from the demo's seed exactly where the
in-process engine would (block ``b`` of round ``r``, its slot as its position), so the estimates must
agree bit for bit; a deployment's devices use their own secure randomness (such seeded results are not
for release). One device in the demo cheats (an encoding outside the round's check, with a valid-looking
proof): both aggregators reject its reports, and the in-process comparison leaves it out the same way.

``fedstats demo --network --mode prio3`` runs it; ``python -m fedstats.cli.prio3_demo demo`` takes the
options.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedstats.analyses._prio3_tasks import vdaf_spec
from fedstats.cli.network_demo import server_argv
from fedstats.client.vdaf import Prio3Device
from fedstats.errors import DataError, ParameterError

__all__ = [
    "EngineSeededDevice",
    "main",
    "run_prio3_demo",
    "vdaf_spec",
]

# the ``fedstats`` command of this interpreter (its console script may not be on PATH)
_FEDSTATS = [sys.executable, "-c", "from fedstats.cli.app import main; main()"]
_BLOCK_SIZE = 65536  # the in-process engine's block size (keys the devices' seeded draws)


@dataclass
class _Deployment:
    root: Path
    ca: Path
    urls: tuple[str, str]
    tokens: tuple[str, str]
    identities: list[Path]
    analyst: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def operator(self, which: int) -> Any:
        import httpx

        return httpx.Client(
            base_url=self.urls[which],
            verify=ssl.create_default_context(cafile=str(self.ca)),
            headers={"Authorization": f"Bearer {self.tokens[which]}"},
            timeout=300,
        )


class EngineSeededDevice(Prio3Device):
    """A :class:`~fedstats.client.vdaf.Prio3Device` whose report is drawn where the engine would draw it.

    Everything else (verification, policy, budget, derivation, refusals) is the unmodified device's. Its
    report for a derived round is what the in-process engine's client ``slot`` gets with
    ``RandomSource(seed)`` (block ``slot // block_size`` of the round), so the demo's results agree bit
    for bit with the engine's; ``cheat`` makes it send an encoding outside the round's check instead.

    Parameters
    ----------
    seed : int
        The demo's seed.
    cheat : bool
        Send a first encoded element of 2 (outside every circuit's range check) with an honest proof.
    block_size : int
        The engine's block size.
    **kwargs
        As :class:`~fedstats.client.vdaf.Prio3Device`.
    """

    def __init__(
        self,
        *args: Any,
        seed: int,
        cheat: bool = False,
        block_size: int = _BLOCK_SIZE,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.seed = int(seed)
        self.cheat = bool(cheat)
        self.block_size = int(block_size)

    def _report(self, acc: Any, derived: Any) -> np.ndarray:
        from fedstats.engine import InMemoryPopulation
        from fedstats.engine.backends import RoundJob
        from fedstats.randomness import RandomSource

        n = derived.n_clients
        # every row holds this device's own record; only its slot's row is used. The encoders' draws are
        # positional, so that row gets what the in-process engine's client gets from the same seed.
        cols = {c: np.repeat(np.asarray(v)[None, ...], n, axis=0) for c, v in self.record.items()}
        job = RoundJob(
            derived.round,
            InMemoryPopulation(cols),
            RandomSource(self.seed),
            derived.index,
            self.block_size,
            derived.client_range,
        )
        b = acc.slot // self.block_size
        start = max(derived.client_range[0], b * self.block_size)
        out: np.ndarray = job.encode_block(b)[acc.slot - start]
        return out

    def _upload(self, acc: Any, derived: Any, measurement: Any) -> None:
        if not self.cheat:
            super()._upload(acc, derived, measurement)
            return
        from fedstats.client.vdaf import Prio3Task

        task = Prio3Task(derived.task_id, derived.spec, derived.ctx, acc.leader, acc.helper)
        vdaf = task.prio3()
        nonce = os.urandom(16)
        enc = vdaf.flp.valid.encode(np.asarray(measurement)[None, ...])
        enc[0, 0] = vdaf.field.array([2])[0]  # not a bit: outside every circuit's range check
        batch = vdaf.shard_encoded(task.ctx, enc, [nonce])
        public = vdaf.encode_public_share(
            None if batch.public_shares is None else batch.public_shares[0]
        )
        shares = [vdaf.encode_input_share(sh, 0) for sh in batch.input_shares]
        self.uploader.upload_shares(task, nonce.hex(), public, shares)


def _device_main(job_file: str) -> None:
    """A device process: each hosted device joins (again: same slot) and answers the round."""
    from fedstats.client.policy import LocalBudget, Policy
    from fedstats.wire.enrollment import load_identity

    spec = json.loads(Path(job_file).read_text())  # written by the demo itself, in its own folder
    for dev in spec["devices"]:
        device = EngineSeededDevice(
            load_identity(dev["identity"]),
            {k: np.asarray(v) for k, v in dev["record"].items()},
            policy=Policy(**spec["policy"]),
            budget=LocalBudget(Path(dev["budget"])),
            ca=spec["ca"],
            seed=int(spec["seed"]),
            cheat=bool(dev["cheat"]),
        )
        try:
            if not device.join(spec["leader"], spec["task_id"]):
                raise DataError(f"device refused the task: {device.refused}")
            device.answer(spec["task_id"], int(spec["round"]))
            if spec["task_id"] in device.refused:
                raise DataError(f"device refused the round: {device.refused}")
        finally:
            device.close()


def _start(root: Path, n_devices: int, batch_size: int) -> _Deployment:
    import httpx

    from fedstats.service.domain import ledger
    from fedstats.service.domain.operators import add_operator
    from fedstats.service.http.tls import make_dev_certificates
    from fedstats.service.store import open_store
    from fedstats.wire.enrollment import init_authority, issue_analyst, issue_identity

    certs = make_dev_certificates(root / "tls", ["127.0.0.1"])
    init_authority(root / "authority")
    ports, tokens, procs = [], [], []
    for role in ("leader", "helper"):
        db = f"sqlite:///{root / f'{role}.db'}"
        store = open_store(db)
        tokens.append(add_operator(store, "operator"))
        with (
            store.transaction() as tx
        ):  # each aggregator's ledger: the population's and the operator's
            for scope, name in (("population", "default"), ("analyst", "operator")):
                ledger.set_budget(tx, scope, name, epsilon=100.0, delta=1e-3, actor="demo")
        store.close()
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        ports.append(port)
        procs.append(
            subprocess.Popen(
                [
                    *_FEDSTATS,
                    *server_argv(db, port, certs, root / "authority" / "authority.pub"),
                    "--vdaf",
                    "--vdaf-peer-ca",
                    str(certs["ca"]),
                    "--vdaf-batch-size",
                    str(batch_size),
                ],
                stdout=subprocess.DEVNULL,
                stderr=open(root / f"{role}.log", "ab"),
            )
        )
    urls = (f"https://127.0.0.1:{ports[0]}", f"https://127.0.0.1:{ports[1]}")
    ctx = ssl.create_default_context(cafile=str(certs["ca"]))
    for proc, url in zip(procs, urls, strict=True):
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise DataError(f"aggregator {url} exited (see {root})")
            try:
                if httpx.get(f"{url}/healthz", verify=ctx, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise DataError(f"aggregator {url} did not start")
            time.sleep(0.2)
    ids = []
    for i in range(n_devices):
        out = root / "ids" / f"device-{i}.json"
        out.parent.mkdir(exist_ok=True)
        issue_identity(root / "authority", f"device-{i}", "default", out)
        ids.append(out)
    analyst = root / "analyst.json"
    issue_analyst(root / "authority", "analyst", ["default"], analyst)
    return _Deployment(root, certs["ca"], urls, (tokens[0], tokens[1]), ids, analyst, procs)


def _run_task(
    dep: _Deployment,
    config: dict[str, Any],
    records: list[dict[str, Any]],
    *,
    seed: int,
    processes: int,
    cheaters: list[int],
    policy: dict[str, Any],
) -> tuple[Any, list[dict[str, Any]], float, dict[str, Any]]:
    """Sign ``config``, create it on both aggregators, join every device, collect every round.

    Returns the result, the rounds, the seconds taken and the signed task (it carries the ``not_after``
    signing gave it, hence its id).
    """
    from fedstats.client.policy import LocalBudget, Policy
    from fedstats.client.vdaf import collect_signed
    from fedstats.wire.enrollment import load_identity
    from fedstats.wire.tasks import sign_task, task_id

    envelope = sign_task(config, dep.analyst)
    tid = task_id(envelope["task"])
    key, token = os.urandom(32), secrets.token_urlsafe(32)
    for which, role in ((0, "leader"), (1, "helper")):
        with dep.operator(which) as c:
            r = c.post(
                "/v1/vdaf/tasks",
                json={
                    "envelope": envelope,
                    "role": role,
                    "verify_key": key.hex(),
                    "peer_token": token,
                },
            )
            if r.status_code != 200:
                raise DataError(f"task creation refused: {r.status_code} {r.text[:300]}")
    budgets = dep.root / "budgets" / tid[:16]
    budgets.mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(dep.identities):  # in slot order: device i gets slot i
        device = EngineSeededDevice(
            load_identity(path),
            records[i],
            policy=Policy(**policy),
            budget=LocalBudget(budgets / f"device-{i}.json"),
            ca=dep.ca,
            seed=seed,
        )
        try:
            if not device.join(dep.urls[0], tid):
                raise DataError(f"device {i} refused the task: {device.refused}")
            if device.tasks[tid].slot != i:
                raise DataError(f"device {i} got slot {device.tasks[tid].slot}")
        finally:
            device.close()
    timings: list[float] = []

    def on_round(index: int, announced: Mapping[str, Any]) -> None:
        del announced  # each device reads both aggregators' announcements itself
        t0 = time.perf_counter()
        workers = []
        for k in range(processes):
            mine = list(range(len(dep.identities)))[k::processes]
            if not mine:
                continue
            job = dep.root / f"job-{tid[:8]}-{index}-{k}.json"
            job.write_text(
                json.dumps(
                    {
                        "task_id": tid,
                        "round": index,
                        "leader": dep.urls[0],
                        "seed": seed,
                        "ca": str(dep.ca),
                        "policy": policy,
                        "devices": [
                            {
                                "identity": str(dep.identities[i]),
                                "record": {
                                    c: np.asarray(v).tolist() for c, v in records[i].items()
                                },
                                "budget": str(budgets / f"device-{i}.json"),
                                "cheat": i in cheaters,
                            }
                            for i in mine
                        ],
                    }
                )
            )
            workers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "fedstats.cli.prio3_demo", "device", str(job)],
                    stderr=open(dep.root / f"device-{index}-{k}.log", "ab"),
                )
            )
        for w in workers:
            if w.wait(600) != 0:
                raise DataError(f"a device process failed (see {dep.root}/device-*.log)")
        timings.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    with dep.operator(0) as leader, dep.operator(1) as helper:
        result, rounds = collect_signed(envelope["task"], tid, leader, helper, on_round)
    for r, t in zip(rounds, timings, strict=True):
        r["device_processes"] = processes
        r["upload_seconds"] = round(t, 2)
    return result, rounds, time.perf_counter() - t0, envelope["task"]


def run_prio3_demo(
    *,
    n_devices: int = 40,
    processes: int = 4,
    seed: int = 29,
    cheaters: int = 1,
    batch_size: int = 16,
    workdir: Path | None = None,
) -> list[dict[str, Any]]:
    """Run bit pushing and FED-chi^2 as signed Prio3 tasks over two aggregator processes; compare.

    Parameters
    ----------
    n_devices : int
        Devices, one Adult record each (its age for bit pushing, its (race, sex) for FED-chi^2), >= 12.
    processes : int
        Device processes per round, >= 1.
    seed : int
        The comparison's seed (see the module docstring).
    cheaters : int
        Devices that send an invalid encoding, in ``[0, n_devices - 10]`` (each batch keeps the default
        ``min_batch_size`` of 10 valid reports); their reports are rejected.
    batch_size : int
        Reports per aggregation job.
    workdir : path, optional
        Folder of the deployment (default: a temporary one, removed afterwards).

    Returns
    -------
    list of dict
        One row per analysis: ``analysis``, ``network`` and ``engine`` estimates, ``agree`` (bit for bit),
        the rounds (variant, accepted, rejected, timings), ``task_id``, ``transport`` and process counts.

    Raises
    ------
    ParameterError
        If an option is out of range.
    """
    from fedstats.analyses._prio3 import Prio3Backend
    from fedstats.analyses._prio3_tasks import plan_on_route
    from fedstats.datasets import load_adult
    from fedstats.engine import Engine, InMemoryPopulation
    from fedstats.randomness import RandomSource
    from fedstats.wire.tasks import DEFAULT_MIN_BATCH_SIZE, task_id

    if n_devices < DEFAULT_MIN_BATCH_SIZE + 2:
        raise ParameterError("n_devices", n_devices, f"an integer >= {DEFAULT_MIN_BATCH_SIZE + 2}")
    if processes < 1:
        raise ParameterError("processes", processes, "an integer >= 1")
    # every batch keeps at least the default min_batch_size of honest reports (the devices' floor)
    most = n_devices - DEFAULT_MIN_BATCH_SIZE
    if not 0 <= cheaters <= most:
        raise ParameterError("cheaters", cheaters, f"an integer in [0, {most}]")
    adult = load_adult("train")
    rng = np.random.default_rng(seed)
    rows_of = rng.choice(len(adult), n_devices, replace=False)
    ages = adult["age"].to_numpy(dtype=np.float64)[rows_of]
    race = adult["race"].astype("category").cat.codes.to_numpy()[rows_of].astype(np.int64)
    sex = adult["sex"].astype("category").cat.codes.to_numpy()[rows_of].astype(np.int64)
    m_race = int(adult["race"].astype("category").cat.categories.size)
    m_sex = int(adult["sex"].astype("category").cat.categories.size)
    bad = list(range(1, 1 + cheaters))
    with tempfile.TemporaryDirectory(prefix="fedstats-prio3-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        dep = _start(root, n_devices, batch_size)
        route = {"leader": dep.urls[0], "helper": dep.urls[1], "noise": None}  # default batch floor
        common = {
            "cohort_size": n_devices,
            "min_clients": n_devices - cheaters,
            "max_records_per_client": 1,
            "prio3": route,
            "label": f"prio3 demo {secrets.token_hex(4)}",
        }
        analyses: list[tuple[str, dict[str, Any], dict[str, np.ndarray], dict[str, Any], Any]] = [
            (
                "bitpushing-mean (age, basic, epsilon 2)",  # truth: the honest devices' mean
                {
                    **common,
                    "analysis": "bitpushing-mean",
                    "params": {"column": "value", "low": 0.0, "high": 127.0, "method": "basic"},
                    "privacy": {"epsilon": 2.0, "population": "default"},
                },
                {"value": ages},
                {"max_epsilon": 4.0},
                lambda res: float(res.estimate),
            ),
            (
                "fed-chi2 (race x sex, one record per device)",
                {
                    **common,
                    "analysis": "fed-chi2",
                    "params": {"shape": [m_race, m_sex], "encoding_size": 50, "drop_empty": True},
                    "privacy": {"epsilon": None, "population": "default"},
                },
                {"x": race, "y": sex},
                {"allow_non_private": True},
                lambda res: float(res.statistic),
            ),
        ]
        honest = np.setdiff1d(np.arange(n_devices), bad)
        truths = [float(ages[honest].mean()), _chi2_exact(race[honest], sex[honest])]
        try:
            rows = []
            for (name, config, cols, policy, value), truth in zip(analyses, truths, strict=True):
                records = [{c: v[i] for c, v in cols.items()} for i in range(n_devices)]
                got, rounds, seconds, task = _run_task(
                    dep,
                    config,
                    records,
                    seed=seed,
                    processes=processes,
                    cheaters=bad,
                    policy=policy,
                )
                tid = task_id(task)  # the signed task: normalize_task(config) with its not_after
                local = Prio3Backend(cheaters=bad)
                want = Engine(
                    backend=local, randomness=RandomSource(seed), block_size=_BLOCK_SIZE
                ).run(
                    plan_on_route(task, tid),
                    InMemoryPopulation(cols),
                )
                rows.append(
                    {
                        "analysis": name,
                        "task_id": tid,
                        "epsilon": task["privacy"]["epsilon"],
                        "network": value(got),
                        "engine": value(want),
                        "agree": value(got) == value(want),
                        "truth": truth,
                        "rounds": rounds,
                        "rejected_in_process": local.rejected,
                        "seconds": round(seconds, 2),
                        "transport": "https",
                        "aggregator_processes": 2,
                        "device_processes": processes,
                        "devices": n_devices,
                    }
                )
            return rows
        finally:
            for p in dep.procs:
                p.terminate()
            for p in dep.procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


def _chi2_exact(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's chi-square of the table of ``(x, y)``, empty rows and columns dropped (the truth)."""
    table = np.zeros((int(x.max()) + 1, int(y.max()) + 1))
    np.add.at(table, (x, y), 1.0)
    table = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / table.sum()
    return float(((table - expected) ** 2 / expected).sum())


def main(argv: list[str] | None = None) -> None:
    """``python -m fedstats.cli.prio3_demo {device,demo}``."""
    parser = argparse.ArgumentParser(prog="python -m fedstats.cli.prio3_demo")
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("device", help="a device process (JOB written by the demo)")
    d.add_argument("job")
    m = sub.add_parser("demo", help="the whole demo; prints JSON rows")
    m.add_argument("--devices", type=int, default=40)
    m.add_argument("--processes", type=int, default=4)
    m.add_argument("--seed", type=int, default=29)
    m.add_argument("--cheaters", type=int, default=1)
    a = parser.parse_args(argv)
    if a.cmd == "device":
        _device_main(a.job)
    else:
        rows = run_prio3_demo(
            n_devices=a.devices, processes=a.processes, seed=a.seed, cheaters=a.cheaters
        )
        print(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
