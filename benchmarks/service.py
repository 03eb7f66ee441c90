"""Benchmark of the aggregation server beside a minimal app on the same stack (issue 28).

A real ``fedstats server`` process (HTTPS on 127.0.0.1) runs a weighted one-round bit-pushing mean at
epsilon = 1; ``--clients`` enrolled devices (one record each), simulated by asyncio tasks in ``--procs``
load-generator processes, register, check in and open a request key (as the SDK does once enrolled; not
measured), then each polls for its round, encodes its record with the registered encoder and uploads its
report, both requests authenticated by the HMAC of its request key (:func:`fedstats.wire.auth.sign_request_with_key`;
measured: the report phase).

The peer, in the same run and with the same load generator: :mod:`_minimal_app`, a Starlette app under
the same uvicorn and TLS that answers the same work list and stores each report with one INSERT (no
authentication, no protocol). Reported per app and store: the server's CPU per report (``/proc`` of the
server processes, user + system, over the report phase), reports per second, p50/p99 latency of a
device's report phase (poll + upload), and the server's peak RSS; ``cpu_ratio_vs_minimal`` per store
(goal <= 1.5). On PostgreSQL the round is also run on 2 and 4 server processes sharing the database
(``--scale-out``; devices spread over them). PostgreSQL is skipped if unreachable. Linux only (``/proc``).
Both servers run without a log line per request (the minimal app under ``uvicorn --no-access-log``,
fedstats with ``--no-access-log``); ``--access-log`` turns fedstats's JSON access log on.

Full numbers: ``python benchmarks/service.py --clients 10000 --procs 4`` (from ``benchmarks/``).
``--concurrency 1 --procs 1`` offers one device at a time (every batch holds one request): the fixed
cost per report of each app, independent of how busy the machine is; ``--output NAME`` writes
``results/NAME.json`` instead of the issue's file.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import multiprocessing as mp
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from _util import free_port, loaded_server_argv, write_results
from fedstats import wire
from fedstats.cli.server import KEEP_ALIVE_SECONDS
from fedstats.engine.rounds import ClientBatch, Round
from fedstats.randomness import RandomSource
from fedstats.service.domain.operators import add_operator, trust_authority
from fedstats.service.http.tls import make_dev_certificates
from fedstats.service.store import open_store
from fedstats.wire import auth
from fedstats.wire.registry import resolve_encoder

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


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
    out: list[Any],
    request_key: tuple[str, str] | None = None,
) -> None:
    async def req(method: str, path: str, payload: Any = None, keyed: bool = True) -> Any:
        body = b"" if payload is None else json.dumps(payload).encode()
        for _ in range(50):
            if request_key is not None and keyed:  # as the SDK: an HMAC under its request key
                kid, hex_key = request_key
                h = auth.sign_request_with_key(kid, bytes.fromhex(hex_key), cid, method, path, body)
            else:
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
                    # the request key the SDK opens once enrolled (valid an hour, for every run)
                    got = await req("POST", "/v1/client/request-key", keyed=False)
                    out.append((cid, (got["key_id"], got["key"])))
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


def _worker(args: tuple[list[str], str, list[tuple[Any, ...]], str, int | None]) -> list[Any]:
    urls, ca, clients, phase, concurrency = args

    async def main() -> list[Any]:
        lat: list[Any] = []  # latencies (report phase), or (client id, request key) (join phase)
        sem = asyncio.Semaphore(concurrency or 100)
        limits = httpx.Limits(max_connections=100)
        ctx = ssl.create_default_context(cafile=ca)
        https = [
            httpx.AsyncClient(base_url=u, verify=ctx, timeout=120, limits=limits) for u in urls
        ]
        try:
            await asyncio.gather(
                *(
                    _client(
                        https[i % len(https)],
                        auth.private_key_from_hex(k),
                        cid,
                        cert,
                        v,
                        sem,
                        phase,
                        lat,
                        rk[0] if rk else None,
                    )
                    for i, (cid, k, cert, v, *rk) in enumerate(clients)
                )
            )
        finally:
            for h in https:
                await h.aclose()
        return lat

    return asyncio.run(main())


def _proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_peak_rss_mib(pid: int) -> float:
    """Peak resident memory of process ``pid`` (``VmHWM``), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _wait_healthy(url: str, ctx: ssl.SSLContext) -> None:
    with httpx.Client(base_url=url, verify=ctx, timeout=5) as h:
        for _ in range(600):
            try:
                if h.get("/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    raise RuntimeError(f"server at {url} did not start")


def _measure(
    pids: list[int],
    urls: list[str],
    ca: str,
    clients: list[Any],
    procs: int,
    concurrency: int = 100,
) -> dict[str, Any]:
    """Run the report phase against ``urls`` (clients spread over them); CPU and latency of it.

    ``concurrency``: devices in their report phase at once per load-generator process.
    """
    parts = [clients[i::procs] for i in range(procs)]
    cpu0 = sum(_proc_cpu_seconds(p) for p in pids)
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(procs) as pool:
        lats = pool.map(_worker, [(urls, ca, p, "report", concurrency) for p in parts])
    elapsed = time.perf_counter() - t0
    cpu = sum(_proc_cpu_seconds(p) for p in pids) - cpu0
    lat = np.concatenate([np.asarray(x) for x in lats]) * 1000.0
    n = len(clients)
    return {
        "reports": n,
        "reports_per_second": n / elapsed,
        "report_phase_seconds": elapsed,
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
        "server_cpu_seconds": cpu,
        "server_cpu_ms_per_report": 1000.0 * cpu / n,
        "server_peak_rss_mib": max(_proc_peak_rss_mib(p) for p in pids),
    }


def _stop(servers: list[subprocess.Popen[bytes]], wait: float = 30) -> None:
    for s in servers:
        s.send_signal(signal.SIGTERM)
    for s in servers:
        try:
            s.wait(wait)
        except subprocess.TimeoutExpired:
            s.kill()


def bench_fedstats(
    db: str,
    n: int,
    procs: int,
    root: Path,
    n_servers: int = 1,
    profile: Path | None = None,
    access_log: bool = False,
    concurrency: int = 100,
) -> tuple[dict[str, Any], bytes]:
    """One local-DP round on ``n_servers`` fedstats server processes sharing ``db``.

    Returns the measures and the work list a device was served (the minimal app serves the same bytes).
    With ``profile`` the (first) server runs under cProfile timed by each thread's CPU clock (the
    wrapper of :mod:`service_secagg`); the merged statistics are written to ``profile`` on exit.
    """
    certs = make_dev_certificates(root / "tls", ["127.0.0.1"])
    ca = str(certs["ca"])
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
    ports = [free_port() for _ in range(n_servers)]
    urls = [f"https://127.0.0.1:{p}" for p in ports]
    env = dict(os.environ)
    env.pop("FEDSTATS_BENCH_PROFILE", None)
    head = [str(Path(sys.executable).with_name("fedstats"))]
    if profile is not None:
        from service_secagg import _SERVER_MAIN

        env["FEDSTATS_BENCH_PROFILE"] = str(profile)
        head = [sys.executable, "-c", _SERVER_MAIN]
    servers = [
        subprocess.Popen(
            [
                *head,
                *loaded_server_argv(db, port, certs),
                "--tick",
                "0.2",
                # as the minimal app (uvicorn --no-access-log): no log line per request
                "--access-log" if access_log else "--no-access-log",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    ctx = ssl.create_default_context(cafile=ca)
    admin = httpx.Client(
        base_url=urls[0], verify=ctx, headers={"Authorization": f"Bearer {token}"}, timeout=120
    )
    try:
        for url in urls:
            _wait_healthy(url, ctx)
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
            joined = pool.map(_worker, [(urls, ca, p, "join", None) for p in parts])
        keys = dict(pair for part in joined for pair in part)
        clients = [(*c, keys[c[0]]) for c in clients]  # each device reports with its request key
        work = _served_work(urls[0], ctx, clients[0])
        if profile is not None:
            servers[0].send_signal(signal.SIGUSR1)  # profile the report phase only
        row = _measure([s.pid for s in servers], urls, ca, clients, procs, concurrency)
        while admin.get(f"/v1/admin/runs/{rid}").json()["status"] not in ("done", "aborted"):
            time.sleep(0.05)
        view = admin.get(f"/v1/admin/runs/{rid}").json()
        accepted = int(_metric(admin.get("/metrics").text, "fedstats_reports_accepted_total"))
    finally:
        admin.close()
        _stop(servers, 30 if profile is None else 120)  # a profile is merged on exit
    row.update(
        {
            "app": "fedstats",
            "db": db.split(":")[0],
            "server_processes": n_servers,
            "client_processes": procs,
            "concurrency_per_client_process": concurrency,
            "access_log": access_log,
            "status": view["status"],
            "accepted_by_first_process": accepted,
            "estimate": view["result"]["estimate"] if view["result"] else None,
            "truth": float(values.mean()),
        }
    )
    return row, work


def _served_work(url: str, ctx: ssl.SSLContext, client: Any) -> bytes:
    """The work list the server gives ``client`` once its round is open (read-only: a poll)."""
    cid, key_hex = client[0], client[1]
    key = auth.private_key_from_hex(key_hex)
    with httpx.Client(base_url=url, verify=ctx, timeout=60) as h:
        for _ in range(600):
            r = h.get(
                "/v1/client/work",
                headers=auth.sign_request(key, cid, "GET", "/v1/client/work", b""),
            )
            r.raise_for_status()
            if r.json()["rounds"]:
                return r.content
            time.sleep(0.1)
    raise RuntimeError("the round did not open")


def bench_minimal(
    db: str, n: int, procs: int, root: Path, work: bytes, concurrency: int = 100
) -> dict[str, Any]:
    """The same report phase against the minimal app (:mod:`_minimal_app`) on the same TLS stack."""
    certs = make_dev_certificates(root / "tls-minimal", ["127.0.0.1"])
    (root / "work.json").write_bytes(work)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    clients = []
    rng = np.random.default_rng(0)
    for i, v in enumerate(rng.uniform(0, 100, n)):
        k = Ed25519PrivateKey.generate()
        # a request key as fedstats's devices hold (the minimal app ignores it): the same client work
        clients.append((f"b{i}", auth.private_key_hex(k), {}, float(v), (f"0.{i:032x}", "00" * 32)))
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    env = dict(os.environ, MINIMAL_DB=db, MINIMAL_WORK=str(root / "work.json"))
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "_minimal_app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--ssl-certfile",
            str(certs["cert"]),
            "--ssl-keyfile",
            str(certs["key"]),
            "--log-level",
            "warning",
            "--no-access-log",
            # the keep-alive of `fedstats server` (a connection is not closed after 5 s idle)
            "--timeout-keep-alive",
            str(KEEP_ALIVE_SECONDS),
        ],
        cwd=str(Path(__file__).resolve().parent),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_healthy(url, ssl.create_default_context(cafile=str(certs["ca"])))
        row = _measure([server.pid], [url], str(certs["ca"]), clients, procs, concurrency)
    finally:
        _stop([server])
    row.update(
        {
            "app": "minimal",
            "db": db.split(":")[0],
            "server_processes": 1,
            "client_processes": procs,
            "concurrency_per_client_process": concurrency,
        }
    )
    return row


def _with_db(kind: str, root: Path, fn: Any) -> Any:
    """Call ``fn(url)`` on a fresh database of ``kind``; None if PostgreSQL is unreachable."""
    if kind == "sqlite":
        return fn(f"sqlite:///{root / ('bench-' + uuid.uuid4().hex[:8] + '.db')}")
    import psycopg

    schema = "fedstats_bench_" + uuid.uuid4().hex[:8]
    try:
        conn = psycopg.connect(
            "host=127.0.0.1 port=5432 dbname=test user=postgres", autocommit=True
        )
    except psycopg.OperationalError:
        return None
    conn.execute(f"CREATE SCHEMA {schema}")
    try:
        return fn(f"{PG}?options=-csearch_path%3D{schema}")
    finally:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.close()


def _fed(
    db: str,
    *,
    n: int,
    procs: int,
    root: Path,
    n_servers: int = 1,
    profile: Path | None = None,
    access_log: bool = False,
    concurrency: int = 100,
) -> Any:
    root.mkdir(parents=True, exist_ok=True)
    return bench_fedstats(db, n, procs, root, n_servers, profile, access_log, concurrency)


def main() -> None:
    """Run the benchmark, print one JSON line per measurement, write ``results/service.json``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=10000)
    p.add_argument("--procs", type=int, default=4, help="load-generator processes")
    p.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    p.add_argument(
        "--scale-out",
        default="1,2,4",
        help="server process counts to measure on PostgreSQL (comma-separated; '1' for none)",
    )
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="directory: profile the single-process fedstats server per store (cProfile, thread CPU)"
        " into DIR/service_<db>.prof and print its top functions (the CPU numbers then include"
        " the profiler's overhead)",
    )
    p.add_argument(
        "--access-log",
        action="store_true",
        help="run fedstats with its JSON access log on (default off, as the minimal app's uvicorn)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=100,
        help="devices in their report phase at once per load-generator process (1 with --procs 1:"
        " one request at a time, every batch of one: the per-request fixed cost)",
    )
    p.add_argument(
        "--output",
        default="service",
        help="results name under results/ (default service: the issue's numbers)",
    )
    p.add_argument(
        "--skip-minimal",
        action="store_true",
        help="measure fedstats only (for experiments; no ratio is written)",
    )
    a = p.parse_args()
    rows: list[dict[str, Any]] = []
    ratios: dict[str, float] = {}

    def emit(row: dict[str, Any]) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    # the load every measurement of this invocation offers, fedstats and the minimal app alike
    load = {"n": a.clients, "procs": a.procs, "concurrency": a.concurrency}
    for kind in ["sqlite", "postgresql"] if a.db == "both" else [a.db]:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            prof = None
            if a.profile is not None:
                a.profile.mkdir(parents=True, exist_ok=True)
                prof = a.profile.resolve() / f"service_{kind}.prof"
            got = _with_db(
                kind,
                root,
                functools.partial(_fed, **load, root=root, profile=prof, access_log=a.access_log),
            )
            if got is None:
                emit({"db": kind, "skipped": "PostgreSQL unreachable at 127.0.0.1:5432"})
                continue
            ours, work = got
            if prof is not None and prof.exists():
                from service_secagg import profile_summary

                ours["profile"] = str(prof)
                summary = profile_summary(prof, top=25)
                for r in summary["by_own"]:
                    print(f"  own {r['own_s']:8.3f} cum {r['cumulative_s']:8.3f} {r['function']}")
            emit(ours)
            if a.skip_minimal:
                continue
            minimal = _with_db(
                kind,
                root,
                functools.partial(bench_minimal, **load, root=root, work=work),
            )
            emit(minimal)
            ratios[kind] = ours["server_cpu_ms_per_report"] / minimal["server_cpu_ms_per_report"]
            if kind == "postgresql":
                for k in [int(x) for x in a.scale_out.split(",") if x.strip()]:
                    if k == 1:
                        continue
                    row, _ = _with_db(
                        kind,
                        root,
                        functools.partial(
                            _fed,
                            **load,
                            root=root / f"x{k}",
                            n_servers=k,
                            access_log=a.access_log,
                        ),
                    )
                    emit(row)
    out = write_results(
        a.output,
        {
            "command": " ".join(["python", "benchmarks/service.py", *sys.argv[1:]]),
            "cpu_ratio_vs_minimal": ratios,
            "goal_cpu_ratio_vs_minimal": 1.5,
            "fedstats_access_log": a.access_log,
            "runs": rows,
        },
    )
    print(json.dumps({"cpu_ratio_vs_minimal": ratios}))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
