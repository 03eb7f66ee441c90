"""The two-aggregator (Prio3) network demo, compared with the in-process engine.

A leader and a helper server process, device processes, and bit pushing and FED-chi^2 computed through
them.

:func:`run_prio3_demo` makes a temporary deployment (a development CA and TLS certificates, an enrollment
authority, one SQLite database and one operator token per aggregator), starts two aggregator processes
(``fedstats server --vdaf``, HTTPS on 127.0.0.1) and runs the analyses with :class:`NetworkPrio3Backend`, an
engine route whose every round is a Prio3 task on the two servers: the operator creates the task on both
(the variant from :func:`fedstats.analyses._prio3.validity_for`, a fresh ``verify_key`` and peer token),
device processes (``python -m fedstats.cli.prio3_demo device JOB``) compute their own reports with the
round's encoder and upload one share to each aggregator in signed requests
(:class:`fedstats.client.vdaf.Prio3Uploader`), the leader aggregates with the helper in batches, and the
collector combines both aggregate shares. The analyses' server-side code is unchanged.

For the comparison each device draws its private randomness from the demo's seed exactly where the
in-process engine would (block ``b`` of round ``r``), so the estimates must agree bit for bit; a
deployment's devices use their own secure randomness (such seeded results are not for release). One
device in the demo cheats (an encoding outside the round's check, with a valid-looking proof): both
aggregators reject its reports, and the in-process comparison leaves it out the same way.

The demo's CLI wiring (``fedstats demo --network --mode prio3``) belongs to ``cli/demo.py``; until it
exists this module runs as ``python -m fedstats.cli.prio3_demo {device,demo}``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import secrets
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedstats.errors import DataError, ParameterError

__all__ = [
    "NetworkPrio3Backend",
    "main",
    "run_prio3_demo",
    "vdaf_spec",
]

# the ``fedstats`` command of this interpreter (its console script may not be on PATH)
_FEDSTATS = [sys.executable, "-c", "from fedstats.cli.app import main; main()"]


def vdaf_spec(vdaf: Any) -> dict[str, Any]:
    """A Prio3 instance's task description (:func:`fedstats.service.domain.vdaf.vdaf_from_spec` form)."""
    kinds = {
        "Prio3Count": "count",
        "Prio3Sum": "sum",
        "Prio3SumVec": "sumvec",
        "Prio3Histogram": "histogram",
        "Prio3MultihotCountVec": "multihot",
    }
    kind = kinds.get(type(vdaf).__name__)
    if kind is None:
        raise ParameterError("vdaf", type(vdaf).__name__, f"one of {sorted(kinds)}")
    return {"type": kind, **vdaf.flp.valid.params()}


@dataclass
class _Deployment:
    root: Path
    ca: Path
    urls: tuple[str, str]
    tokens: tuple[str, str]
    identities: list[Path]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def operator(self, which: int) -> Any:
        import httpx

        return httpx.Client(
            base_url=self.urls[which],
            verify=ssl.create_default_context(cafile=str(self.ca)),
            headers={"Authorization": f"Bearer {self.tokens[which]}"},
            timeout=300,
        )


@dataclass
class NetworkPrio3Backend:
    """An engine route whose rounds are Prio3 tasks on two aggregator processes (see the module).

    Parameters
    ----------
    deployment : _Deployment
        The two servers, the operator tokens and the devices' identities.
    seed : int
        The demo's seed: devices draw where the in-process engine with ``RandomSource(seed)`` would.
    processes : int
        Device processes per round (each hosts a share of the devices), >= 1.
    cheaters : list of int
        Devices that send an encoding outside the round's check.
    """

    deployment: _Deployment
    seed: int
    processes: int = 4
    cheaters: list[int] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)

    name = "prio3-network"

    def sum_round(self, job: Any, progress: Any = None) -> Any:
        """Run the round as a Prio3 task on both servers; its sum and number of accepted reports."""
        del progress  # one step per round: the device processes report in their logs
        from fedstats.analyses._prio3 import validity_for
        from fedstats.client.vdaf import Prio3Task, collect
        from fedstats.engine.rounds import RoundSum

        dep = self.deployment
        rnd = job.round
        val = validity_for(rnd)
        spec = vdaf_spec(val.vdaf)
        task_id = secrets.token_hex(32)
        key, token, ctx = os.urandom(32), secrets.token_urlsafe(32), b"fedstats prio3 demo"
        for which, role in ((0, "leader"), (1, "helper")):
            with dep.operator(which) as c:
                r = c.post(
                    "/v1/vdaf/tasks",
                    json={
                        "task_id": task_id,
                        "role": role,
                        "vdaf": spec,
                        "verify_key": key.hex(),
                        "ctx": ctx.hex(),
                        "peer_url": dep.urls[1 - which],
                        "peer_token": token,
                    },
                )
                if r.status_code != 200:
                    raise DataError(f"task creation refused: {r.status_code} {r.text[:300]}")
        task = Prio3Task(task_id, spec, ctx, dep.urls[0], dep.urls[1])
        lo, hi = job.client_range
        gone = {int(i) for i in job.dropped}
        members = [i for i in range(lo, hi) if i not in gone]
        n = job.population.n_clients
        rows = job.population.block(0, n, 0, n, job.randomness)  # handed out one record per device
        t0 = time.perf_counter()
        workers = []
        for k in range(self.processes):
            mine = members[k :: self.processes]
            if not mine:
                continue
            spec_file = dep.root / f"job-{job.round_index}-{k}.pkl"
            spec_file.write_bytes(
                pickle.dumps(
                    {
                        "round": rnd,
                        "round_index": job.round_index,
                        "block_size": job.block_size,
                        "seed": self.seed,
                        "n_clients": job.population.n_clients,
                        "client_range": job.client_range,
                        "task": {
                            "task_id": task_id,
                            "vdaf": spec,
                            "ctx": ctx.hex(),
                            "leader_url": dep.urls[0],
                            "helper_url": dep.urls[1],
                        },
                        "ca": str(dep.ca),
                        "devices": [
                            {
                                "identity": str(dep.identities[i]),
                                "index": i,
                                # the device's own record only
                                "data": {c: np.asarray(rows.column(c))[i] for c in rows.columns},
                                "cheat": i in self.cheaters,
                            }
                            for i in mine
                        ],
                    }
                )
            )
            workers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "fedstats.cli.prio3_demo", "device", str(spec_file)],
                    stderr=open(dep.root / f"device-{job.round_index}-{k}.log", "ab"),
                )
            )
        for w in workers:
            if w.wait(600) != 0:
                raise DataError(f"a device process failed (see {dep.root}/device-*.log)")
        upload_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with dep.operator(0) as leader, dep.operator(1) as helper:
            r = leader.post(f"/v1/vdaf/tasks/{task_id}/aggregate", json={})
            if r.status_code != 200:
                raise DataError(f"aggregation refused: {r.status_code} {r.text[:300]}")
            got = collect(task, leader, helper)
        agg_s = time.perf_counter() - t0
        self.rounds.append(
            {
                "round": rnd.name,
                "variant": val.description,
                "accepted": got.accepted,
                "rejected": got.rejected,
                "device_processes": len(workers),
                "upload_seconds": round(upload_s, 2),
                "aggregate_and_collect_seconds": round(agg_s, 2),
            }
        )
        total = val.from_total(np.asarray(got.result, dtype=object), got.accepted)
        return RoundSum(np.asarray(total, dtype=np.int64), got.accepted)

    def bits_per_entry(self, job: Any) -> int:
        """Not measured here (see :class:`fedstats.analyses._prio3.Prio3Backend`)."""
        del job
        return 0


def _device_main(job_file: str) -> None:
    """A device process: compute each hosted device's report for the round and upload its shares."""
    from fedstats.analyses._prio3 import validity_for
    from fedstats.client.vdaf import Prio3Task, Prio3Uploader
    from fedstats.engine import InMemoryPopulation
    from fedstats.engine.backends import RoundJob
    from fedstats.randomness import RandomSource
    from fedstats.wire.enrollment import load_identity

    spec = pickle.loads(
        Path(job_file).read_bytes()
    )  # written by the demo itself, in its own folder
    rnd = spec["round"]
    t = spec["task"]
    task = Prio3Task(
        t["task_id"], t["vdaf"], bytes.fromhex(t["ctx"]), t["leader_url"], t["helper_url"]
    )
    val = validity_for(rnd)
    vdaf = task.prio3()
    n = int(spec["n_clients"])
    for dev in spec["devices"]:
        i = int(dev["index"])
        # every row holds this device's own record; only row i is used. The encoders' draws are
        # positional, so row i gets what the in-process engine's client i gets from the same seed.
        cols = {c: np.repeat(np.asarray(v)[None, ...], n, axis=0) for c, v in dev["data"].items()}
        job = RoundJob(
            rnd,
            InMemoryPopulation(cols),
            RandomSource(int(spec["seed"])),
            int(spec["round_index"]),
            int(spec["block_size"]),
            tuple(spec["client_range"]),
        )
        b = i // job.block_size
        start = max(job.client_range[0], b * job.block_size)
        report = job.encode_block(b)[i - start]
        up = Prio3Uploader(load_identity(dev["identity"]), ca=spec["ca"])
        up.register(task)
        if dev["cheat"]:
            nonce = os.urandom(16)
            enc = vdaf.flp.valid.encode(val.to_measurements(report[None, :]))
            enc[0, 0] = vdaf.field.array([2])[0]  # not a bit: outside every circuit's range check
            batch = vdaf.shard_encoded(task.ctx, enc, [nonce])
            public = vdaf.encode_public_share(
                None if batch.public_shares is None else batch.public_shares[0]
            )
            shares = [vdaf.encode_input_share(s, 0) for s in batch.input_shares]
            up.upload_shares(task, nonce.hex(), public, shares)
        else:
            up.upload(task, val.to_measurements(report[None, :])[0])
        up.close()


def _start(root: Path, n_devices: int, batch_size: int) -> _Deployment:
    import httpx

    from fedstats.service.http.app import add_operator
    from fedstats.service.http.tls import make_dev_certificates
    from fedstats.service.store import open_store
    from fedstats.wire.enrollment import init_authority, issue_identity

    certs = make_dev_certificates(root / "tls", ["127.0.0.1"])
    init_authority(root / "authority")
    ports, tokens, procs = [], [], []
    for role in ("leader", "helper"):
        db = f"sqlite:///{root / f'{role}.db'}"
        store = open_store(db)
        tokens.append(add_operator(store, "operator"))
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
                    str(root / "authority" / "authority.pub"),
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
    return _Deployment(root, certs["ca"], urls, (tokens[0], tokens[1]), ids, procs)


def run_prio3_demo(
    *,
    n_devices: int = 40,
    processes: int = 4,
    seed: int = 29,
    cheaters: int = 1,
    batch_size: int = 16,
    workdir: Path | None = None,
) -> list[dict[str, Any]]:
    """Run bit pushing and FED-chi^2 over a leader and a helper process and compare with the engine.

    Parameters
    ----------
    n_devices : int
        Devices (one record each: an Adult age for bit pushing, a table of Adult records for FED-chi^2),
        >= 8.
    processes : int
        Device processes per round, >= 1.
    seed : int
        The comparison's seed (see the module docstring).
    cheaters : int
        Devices that send an invalid encoding, in ``[0, n_devices - 4]``; their reports are rejected.
    batch_size : int
        Reports per aggregation job.
    workdir : path, optional
        Folder of the deployment (default: a temporary one, removed afterwards).

    Returns
    -------
    list of dict
        One row per analysis: ``analysis``, ``network`` and ``engine`` estimates, ``agree`` (bit for bit),
        the rounds (variant, accepted, rejected, timings), ``transport`` and process counts.

    Raises
    ------
    ParameterError
        If an option is out of range.
    """
    from fedstats.analyses._prio3 import Prio3Backend
    from fedstats.analyses.bitpushing import BitEncoding, mean
    from fedstats.analyses.chi2 import fed_chi2
    from fedstats.datasets import contingency_table, load_adult, split_contingency_table
    from fedstats.engine import Engine
    from fedstats.randomness import RandomSource

    if n_devices < 8:
        raise ParameterError("n_devices", n_devices, "an integer >= 8")
    if processes < 1:
        raise ParameterError("processes", processes, "an integer >= 1")
    if not 0 <= cheaters <= n_devices - 4:
        raise ParameterError("cheaters", cheaters, f"an integer in [0, {n_devices - 4}]")
    adult = load_adult("train")
    rng = np.random.default_rng(seed)
    ages = rng.choice(adult["age"].to_numpy(dtype=np.float64), n_devices, replace=False)
    table = np.asarray(contingency_table(adult, "race", "sex").counts)
    tables = split_contingency_table(table, n_devices, rng=RandomSource(seed))
    bad = list(range(1, 1 + cheaters))
    with tempfile.TemporaryDirectory(prefix="fedstats-prio3-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        dep = _start(root, n_devices, batch_size)
        try:
            rows = []
            analyses: list[tuple[str, Any]] = [
                (
                    "bitpushing.mean (age, basic, no privacy)",
                    lambda eng: (
                        mean(
                            ages,
                            BitEncoding(0, 127),
                            method="basic",
                            no_privacy=True,
                            truth=False,
                            shuffle=False,
                            engine=eng,
                        ).estimate
                    ),
                ),
                (
                    "chi2 (race x sex, bits=64)",
                    lambda eng: (
                        fed_chi2(tables, bits=64, projection_seed=seed, engine=eng).statistic
                    ),
                ),
            ]
            for name, run in analyses:
                net = NetworkPrio3Backend(dep, seed, processes, bad)
                t0 = time.perf_counter()
                got = run(Engine(backend=net, randomness=RandomSource(seed)))
                seconds = time.perf_counter() - t0
                local = Prio3Backend(cheaters=bad)
                want = run(Engine(backend=local, randomness=RandomSource(seed)))
                rows.append(
                    {
                        "analysis": name,
                        "network": got,
                        "engine": want,
                        "agree": got == want,
                        "rounds": net.rounds,
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
