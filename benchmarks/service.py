"""Benchmark of the aggregation server: a one-round local-DP task answered by many simulated clients.

A real ``fedstats server`` process (HTTPS on 127.0.0.1) runs a weighted one-round bit-pushing mean at
epsilon = 1; ``--clients`` enrolled devices (one record each), simulated by asyncio tasks in ``--procs``
processes, register and check in (not timed), then each polls for the round, encodes its record with the
registered encoder, and uploads its signed report (timed). Reported: accepted reports per second over the
round, p50/p99 latency of an upload, the server's CPU seconds and peak memory during the run (from
``/metrics``), for SQLite and PostgreSQL (skipped if unreachable).

Full numbers: ``python benchmarks/service.py --clients 10000 --procs 4``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from _util import write_results
from fedstats import wire
from fedstats.engine.rounds import ClientBatch, Round
from fedstats.randomness import RandomSource
from fedstats.service.http.app import add_operator, trust_authority
from fedstats.service.http.tls import make_dev_certificates
from fedstats.service.store import open_store
from fedstats.wire import auth
from fedstats.wire.registry import resolve_encoder

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


async def _client(
    http: httpx.AsyncClient,
    key: Any,
    cid: str,
    cert: dict[str, Any],
    value: float,
    sem: asyncio.Semaphore,
    phase: str,
    out: list[float],
) -> None:
    async def req(method: str, path: str, payload: Any = None) -> Any:
        body = b"" if payload is None else json.dumps(payload).encode()
        for _ in range(50):
            h = auth.sign_request(key, cid, method, path, body)
            h["content-type"] = "application/json"
            try:
                r = await http.request(method, path, content=body, headers=h)
            except httpx.TransportError:
                await asyncio.sleep(0.2)
                continue
            if r.status_code in (429, 503):
                await asyncio.sleep(0.1)
                continue
            r.raise_for_status()
            return r.json()
        raise RuntimeError("gave up")

    async with sem:
        if phase == "join":
            await req("POST", "/v1/client/register", {"certificate": cert})
            while True:
                work = await req("GET", "/v1/client/work")
                if work["offers"]:
                    rid = work["offers"][0]["run_id"]
                    await req("POST", f"/v1/client/runs/{rid}/checkin", {"records": 1})
                    return
                await asyncio.sleep(0.2)
        while True:
            work = await req("GET", "/v1/client/work")
            if work["rounds"]:
                break
            await asyncio.sleep(0.2)
        rnd = work["rounds"][0]
        fn = resolve_encoder(rnd["encode"], rnd["analysis"], rnd["version"])
        a, _b = rnd["records"]
        spec = Round(
            rnd["name"], fn, wire.decode(rnd["params"]), dim=rnd["dim"], bound=rnd["bound"]
        )
        rep = spec.encode_checked(
            ClientBatch({"value": np.array([value])}, start=a, total=rnd["n_clients"]),
            RandomSource().generator("c"),
        )
        t0 = time.perf_counter()
        await req(
            "POST",
            f"/v1/client/runs/{rnd['run_id']}/rounds/{rnd['round']}/report",
            {"vector": [int(x) for x in rep.sum(axis=0)], "count": 1},
        )
        out.append(time.perf_counter() - t0)


def _worker(
    args: tuple[str, str, list[tuple[str, str, dict[str, Any], float]], str, Any],
) -> list[float]:
    url, ca, clients, phase, _ = args

    async def main() -> list[float]:
        lat: list[float] = []
        sem = asyncio.Semaphore(100)
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(
            base_url=url, verify=ssl.create_default_context(cafile=ca), timeout=120, limits=limits
        ) as http:
            await asyncio.gather(
                *(
                    _client(http, auth.private_key_from_hex(k), cid, cert, v, sem, phase, lat)
                    for cid, k, cert, v in clients
                )
            )
        return lat

    return asyncio.run(main())


def bench(db: str, n: int, procs: int, root: Path) -> dict[str, Any]:
    certs = make_dev_certificates(root / "tls", ["127.0.0.1"])
    store = open_store(db)
    token = add_operator(store, "bench")
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    authority = Ed25519PrivateKey.generate()
    trust_authority(store, auth.public_key_hex(authority))
    store.close()
    rng = np.random.default_rng(0)
    values = rng.uniform(0, 100, n)
    clients = []
    for i in range(n):
        k = Ed25519PrivateKey.generate()
        cert = auth.issue_certificate(
            authority, client_id=f"b{i}", public_key=auth.public_key_hex(k), population="bench"
        )
        clients.append((f"b{i}", auth.private_key_hex(k), cert.as_dict(), float(values[i])))
    port = _port()
    url = f"https://127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("fedstats")),
            "server",
            "--db",
            db,
            "--port",
            str(port),
            "--tls-cert",
            str(certs["cert"]),
            "--tls-key",
            str(certs["key"]),
            "--rate",
            "1000000",
            "--burst",
            "1000000",
            "--tick",
            "0.2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ctx = ssl.create_default_context(cafile=str(certs["ca"]))
    admin = httpx.Client(
        base_url=url, verify=ctx, headers={"Authorization": f"Bearer {token}"}, timeout=120
    )
    try:
        for _ in range(300):
            try:
                if admin.get("/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        admin.put("/v1/admin/budgets/population/bench", json={"epsilon": 10.0, "delta": 0.0})
        admin.put("/v1/admin/budgets/analyst/bench", json={"epsilon": 10.0, "delta": 0.0})
        task = {
            "analysis": "bitpushing-mean",
            "params": {"column": "value", "low": 0.0, "high": 127.0, "method": "weighted"},
            "privacy": {"epsilon": 1.0, "population": "bench"},
            "cohort_size": n,
            "deadlines": {"checkin": 3600.0, "round": 3600.0},
        }
        # signed by an analyst key the authority certified (the server holds no analyst key)
        from fedstats.wire.tasks import sign_task

        analyst_key = Ed25519PrivateKey.generate()
        analyst = {
            "private_key": auth.private_key_hex(analyst_key),
            "certificate": auth.issue_analyst_certificate(
                authority,
                analyst="bench",
                public_key=auth.public_key_hex(analyst_key),
                populations=["bench"],
            ).as_dict(),
        }
        r = admin.post("/v1/admin/tasks", json=sign_task(task, analyst))
        r.raise_for_status()
        tid = r.json()["task_id"]
        rid = admin.post("/v1/admin/runs", json={"task_id": tid}).json()["run_id"]
        parts = [clients[i::procs] for i in range(procs)]
        with mp.get_context("spawn").Pool(procs) as pool:
            pool.map(_worker, [(url, str(certs["ca"]), p, "join", None) for p in parts])
            before = admin.get("/metrics").text
            t0 = time.perf_counter()
            lats = pool.map(_worker, [(url, str(certs["ca"]), p, "report", None) for p in parts])
        while admin.get(f"/v1/admin/runs/{rid}").json()["status"] not in ("done", "aborted"):
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
        after = admin.get("/metrics").text
        view = admin.get(f"/v1/admin/runs/{rid}").json()
    finally:
        admin.close()
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    lat = np.concatenate([np.asarray(x) for x in lats]) * 1000.0
    return {
        "db": db.split(":")[0],
        "clients": n,
        "client_processes": procs,
        "status": view["status"],
        "accepted": int(_metric(after, "fedstats_reports_accepted_total")),
        "accepted_per_second": n / elapsed,
        "round_seconds": elapsed,
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
        "server_cpu_seconds": _metric(after, "fedstats_process_cpu_seconds_total")
        - _metric(before, "fedstats_process_cpu_seconds_total"),
        "server_peak_rss_mib": _metric(after, "fedstats_process_max_rss_bytes") / 2**20,
        "estimate": view["result"]["estimate"] if view["result"] else None,
        "truth": float(values.mean()),
    }


def main() -> None:
    """Run the benchmark, print one JSON line per database, write ``results/service.json``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=10000)
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    a = p.parse_args()
    rows: list[dict[str, Any]] = []
    for kind in ["sqlite", "postgresql"] if a.db == "both" else [a.db]:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            if kind == "sqlite":
                db = f"sqlite:///{root / 'bench.db'}"
                rows.append(bench(db, a.clients, a.procs, root))
                print(json.dumps(rows[-1]), flush=True)
                continue
            import uuid

            import psycopg

            schema = "fedstats_bench_" + uuid.uuid4().hex[:8]
            try:
                conn = psycopg.connect(
                    "host=127.0.0.1 port=5432 dbname=test user=postgres", autocommit=True
                )
            except psycopg.OperationalError as exc:
                rows.append({"db": "postgresql", "skipped": str(exc)})
                print(json.dumps(rows[-1]), flush=True)
                continue
            conn.execute(f"CREATE SCHEMA {schema}")
            try:
                db = f"{PG}?options=-csearch_path%3D{schema}"
                rows.append(bench(db, a.clients, a.procs, root))
                print(json.dumps(rows[-1]), flush=True)
            finally:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
                conn.close()
    out = write_results(
        "service",
        {"command": " ".join(["python", "benchmarks/service.py", *sys.argv[1:]]), "runs": rows},
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
