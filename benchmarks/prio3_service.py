"""Benchmark: Prio3 through two real aggregator processes (leader and helper), CPU per report (issue 39).

Usage (from the repository root)::

    python benchmarks/prio3_service.py [--n 10000] [--procs 2] [--db both] [--variants count,sum,histogram]
        [--upload both] [--single-n N] [--batch-size 1000] [--shard-n 300] [--ref-n 20] [--quick]
        [--shard-only] [--profile DIR] [--output prio3_service]

For each store (SQLite, and PostgreSQL at 127.0.0.1:5432, database ``test``, two fresh schemas) and each
variant (Prio3Count, Prio3Sum with ``max_measurement`` 255, i.e. 8 bits, Prio3Histogram with 100 buckets
and ``chunk_length`` 10):

1. two ``fedstats server --vdaf`` processes (HTTPS on 127.0.0.1, each on its own database) hold the same
   Prio3 task (:func:`fedstats.service.domain.vdaf.create_task`, leader and helper); ``--n`` devices are
   enrolled in both databases beforehand (their rows inserted as ``POST /v1/client/register`` would:
   not measured);
2. **upload**: ``--procs`` client processes play the devices: each device shards its measurement as a
   device does (:func:`fedstats.client.vdaf.shard_report`, one report at a time) and uploads the leader's
   share to the leader and the helper's to the helper, each in a request signed with its Ed25519 key (as
   :class:`fedstats.client.vdaf.Prio3Uploader`); the client processes' CPU is not counted. With
   ``--upload bulk`` the same signed uploads reach each aggregator relayed in
   ``POST /v1/vdaf/tasks/{id}/reports/bulk`` requests (an aggregator's ingestion front end);
   ``--upload both`` (the default) measures both ways, ``--single-n`` caps the single-request cases;
3. **aggregate**: the operator's ``POST /v1/vdaf/tasks/{id}/aggregate`` on the leader, which runs the
   aggregation jobs (``--batch-size`` reports each) with the helper: both prepare, decide, aggregate and
   store;
4. **collect** both aggregate shares; the result must equal the true sum (else the run fails).

``cpu_ms_per_report`` of each aggregator is the CPU (user + system, ``/proc`` of the server PIDs and their
children) of phases 2 and 3 over ``--n``; the phases are reported apart too. Beside it, in the same run,
the device's **single-report shard** time (``Prio3.shard``, CPU per report over ``--shard-n`` reports)
against the CFRG reference implementation's ``shard`` (``--ref-n`` reports in its own Python 3.12
environment, set up as :mod:`prio3` says: ``python benchmarks/prio3.py --setup-ref GIT_DIR``), run
just before ours: ``shard_speedup`` is the reference's CPU over ours.

``--quick``: 1000 reports, 100 shards, 5 reference shards, SQLite only unless ``--db`` is given. The
machine is shared: the load average is recorded with the results (``benchmarks/results/<output>.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import secrets
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import free_port, loaded_server_argv, write_results

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
POPULATION = "bench"
CTX = b"fedstats prio3 service benchmark"

VARIANTS: dict[str, tuple[dict[str, Any], int, str]] = {
    # name -> (task's vdaf spec, measurement upper bound (exclusive), reference constructor)
    "count": ({"type": "count"}, 2, "Prio3Count(2)"),
    "sum": ({"type": "sum", "max_measurement": 255}, 256, "Prio3Sum(2, 255)"),
    "histogram": (
        {"type": "histogram", "length": 100, "chunk_length": 10},
        100,
        "Prio3Histogram(2, 100, 10)",
    ),
}

REF_SHARD = r"""
import json, os, random, sys, time
sys.path.insert(0, sys.argv[1])
from vdaf_poc.vdaf_prio3 import Prio3Count, Prio3Histogram, Prio3Sum
vdaf = eval(sys.argv[2])
n, high = int(sys.argv[3]), int(sys.argv[4])
ctx = b"fedstats prio3 service benchmark"
cpu = 0.0
for _ in range(n):
    nonce, rand, m = os.urandom(16), os.urandom(vdaf.RAND_SIZE), random.randrange(high)
    c0 = time.process_time()
    vdaf.shard(ctx, m, nonce, rand)
    cpu += time.process_time() - c0
print(json.dumps({"reports": n, "shard_cpu_s": cpu / n}))
"""


def _cpu(pid: int) -> float:
    """User + system CPU seconds of a process and its children, from ``/proc`` (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in task.read_text().split():
            total += _cpu(int(child))
    return total


@contextmanager
def _databases(kind: str, root: Path) -> Iterator[list[str] | None]:
    """Two fresh databases (leader, helper): SQLite files, or PostgreSQL schemas (None if unreachable)."""
    if kind == "sqlite":
        yield [f"sqlite:///{root / f'{role}.db'}" for role in ("leader", "helper")]
        return
    import psycopg

    try:
        conn = psycopg.connect(
            "host=127.0.0.1 port=5432 dbname=test user=postgres", autocommit=True
        )
    except psycopg.OperationalError:
        yield None
        return
    schemas = [f"fedstats_p3bench_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for s in schemas:
        conn.execute(f"CREATE SCHEMA {s}")
    try:
        yield [f"{PG}?options=-csearch_path%3D{s}" for s in schemas]
    finally:
        for s in schemas:
            conn.execute(f"DROP SCHEMA {s} CASCADE")
        conn.close()


# -- the devices (client processes) -----------------------------------------------------------------


BULK_BYTES = 900_000  # a relayed bulk request stays under the server's 1 MiB body limit


def _relay_worker(
    args: tuple[dict[str, Any], list[tuple[str, str, int]], str, int],
) -> dict[str, Any]:
    """The devices' signed uploads, sharded and signed as each device does, relayed in bulk requests.

    Per aggregator the uploads go in ``POST /reports/bulk`` requests of at most :data:`BULK_BYTES`
    (an ingestion front end of that aggregator); returns shard CPU seconds and failures.
    """
    task_d, devices, ca, concurrency = args
    from fedstats.client.vdaf import Prio3Task, shard_report
    from fedstats.wire import auth

    task = Prio3Task(
        task_d["task_id"],
        task_d["vdaf"],
        bytes.fromhex(task_d["ctx"]),
        task_d["leader"],
        task_d["helper"],
    )
    task.prio3()
    path = f"/v1/vdaf/tasks/{task.task_id}/reports"
    shard_cpu = 0.0
    sharded: list[tuple[str, Any, str, bytes, list[bytes]]] = []
    for cid, key_hex, m in devices:
        key = auth.private_key_from_hex(key_hex)
        c0 = time.process_time()
        rid, public, shares = shard_report(task, m)
        shard_cpu += time.process_time() - c0
        sharded.append((cid, key, rid, public, shares))

    def signed(j: int, receipts: list[str | None]) -> list[dict[str, Any]]:
        """Aggregator ``j``'s signed uploads (the helper's with the leader's receipts)."""
        items = []
        for (cid, key, rid, public, shares), receipt in zip(sharded, receipts, strict=True):
            d = {"report_id": rid, "public_share": public.hex(), "input_share": shares[j].hex()}
            if j == 1:
                d["leader_receipt"] = str(receipt)
            body = json.dumps(d, separators=(",", ":"))
            headers = auth.sign_request(key, cid, "POST", path, body.encode())
            items.append({"headers": headers, "body": body})
        return items

    failures: list[str] = []
    retries: dict[str, int] = {}

    def bulks(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        out: list[list[dict[str, Any]]] = [[]]
        size = 0
        for it in items:
            n = len(it["body"]) + 400
            if out[-1] and (size + n > BULK_BYTES or len(out[-1]) >= 1000):
                out.append([])
                size = 0
            out[-1].append(it)
            size += n
        return out

    async def main() -> None:
        ctx = ssl.create_default_context(cafile=ca)
        sem = asyncio.Semaphore(max(1, concurrency // 16))
        async with (
            httpx.AsyncClient(base_url=task.leader_url, verify=ctx, timeout=600) as lead,
            httpx.AsyncClient(base_url=task.helper_url, verify=ctx, timeout=600) as helper,
        ):

            async def send(http: httpx.AsyncClient, chunk: list[dict[str, Any]]) -> list[Any]:
                async with sem:
                    for _ in range(50):
                        try:
                            r = await http.post(path + "/bulk", json={"reports": chunk})
                        except httpx.TransportError as exc:
                            retries[type(exc).__name__] = retries.get(type(exc).__name__, 0) + 1
                            await asyncio.sleep(0.2)
                            continue
                        if r.status_code in (429, 503):
                            retries[str(r.status_code)] = retries.get(str(r.status_code), 0) + 1
                            await asyncio.sleep(0.2)
                            continue
                        if r.status_code != 200:
                            failures.append(f"{r.status_code} {r.text[:200]}")
                            return [{}] * len(chunk)
                        results: list[Any] = r.json()["results"]
                        failures.extend(str(x) for x in results if x["status"] != 200)
                        return results
                    failures.append("gave up")
                    return [{}] * len(chunk)

            # the leader first: the helper takes a report only with the leader's receipt
            answers = await asyncio.gather(
                *(send(lead, c) for c in bulks(signed(0, [None] * len(sharded))))
            )
            receipts = [a.get("receipt") for chunk in answers for a in chunk]
            await asyncio.gather(*(send(helper, c) for c in bulks(signed(1, receipts))))

    asyncio.run(main())
    return {"shard_cpu_s": shard_cpu, "failures": failures, "retries": retries}


def _device_worker(
    args: tuple[dict[str, Any], list[tuple[str, str, int]], str, int],
) -> dict[str, Any]:
    """Shard and upload each device's report (both shares); returns shard CPU seconds and failures."""
    task_d, devices, ca, concurrency = args
    from fedstats.client.vdaf import Prio3Task, shard_report
    from fedstats.wire import auth

    task = Prio3Task(
        task_d["task_id"],
        task_d["vdaf"],
        bytes.fromhex(task_d["ctx"]),
        task_d["leader"],
        task_d["helper"],
    )
    task.prio3()  # built once per process, as a device keeps its task
    path = f"/v1/vdaf/tasks/{task.task_id}/reports"

    async def main() -> dict[str, Any]:
        sem = asyncio.Semaphore(concurrency)
        ctx = ssl.create_default_context(cafile=ca)
        limits = httpx.Limits(max_connections=concurrency)
        clients = [
            httpx.AsyncClient(base_url=u, verify=ctx, timeout=300, limits=limits)
            for u in (task.leader_url, task.helper_url)
        ]
        shard_cpu = 0.0
        failures: list[str] = []
        retries: dict[str, int] = {}

        async def post(http: httpx.AsyncClient, key: Any, cid: str, body: bytes) -> dict[str, Any]:
            for _ in range(50):
                h = auth.sign_request(key, cid, "POST", path, body)
                h["content-type"] = "application/json"
                try:
                    r = await http.post(path, content=body, headers=h)
                except httpx.TransportError as exc:
                    retries[type(exc).__name__] = retries.get(type(exc).__name__, 0) + 1
                    await asyncio.sleep(0.2)
                    continue
                if r.status_code in (429, 503):
                    retries[str(r.status_code)] = retries.get(str(r.status_code), 0) + 1
                    await asyncio.sleep(0.1)
                    continue
                if r.status_code != 200:
                    failures.append(f"{r.status_code} {r.text[:200]}")
                    return {}
                answer: dict[str, Any] = r.json()
                return answer
            failures.append("gave up")
            return {}

        async def device(cid: str, key_hex: str, m: int) -> None:
            nonlocal shard_cpu
            async with sem:
                key = auth.private_key_from_hex(key_hex)
                c0 = time.process_time()
                rid, public, shares = shard_report(task, m)
                shard_cpu += time.process_time() - c0
                receipt = None  # the leader's, which the helper requires
                for http, share in zip(clients, shares, strict=True):
                    d = {"report_id": rid, "public_share": public.hex(), "input_share": share.hex()}
                    if receipt is not None:
                        d["leader_receipt"] = receipt
                    body = json.dumps(d, separators=(",", ":")).encode()
                    receipt = (await post(http, key, cid, body)).get("receipt")

        try:
            await asyncio.gather(*(device(*d) for d in devices))
        finally:
            for c in clients:
                await c.aclose()
        return {"shard_cpu_s": shard_cpu, "failures": failures, "retries": retries}

    return asyncio.run(main())


# -- one run: a store, a variant --------------------------------------------------------------------


def _wait_healthy(url: str, ctx: ssl.SSLContext, proc: subprocess.Popen[bytes]) -> None:
    with httpx.Client(base_url=url, verify=ctx, timeout=5) as h:
        for _ in range(600):
            if proc.poll() is not None:
                raise RuntimeError(f"server at {url} exited")
            try:
                if h.get("/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    raise RuntimeError(f"server at {url} did not start")


def run_case(
    kind: str,
    name: str,
    n: int,
    procs: int,
    batch_size: int,
    concurrency: int,
    root: Path,
    profile: Path | None = None,
    upload: str = "single",
) -> dict[str, Any] | None:
    """One store and variant through two aggregator processes; None if PostgreSQL is unreachable."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from fedstats.client.vdaf import Prio3Task, unshard
    from fedstats.service.domain import vdaf as domain
    from fedstats.service.domain.operators import add_operator, trust_authority
    from fedstats.service.http.tls import make_dev_certificates
    from fedstats.service.store import open_store
    from fedstats.service.store.rows import ClientRow
    from fedstats.wire import auth

    spec, high, _ = VARIANTS[name]
    root.mkdir(parents=True, exist_ok=True)
    certs = make_dev_certificates(root / "tls", ["127.0.0.1"])
    ca = str(certs["ca"])
    authority = Ed25519PrivateKey.generate()
    rng = np.random.default_rng(0)
    values = [int(v) for v in rng.integers(0, high, n)]
    devices, rows = [], []
    now = time.time()
    for i in range(n):
        k = Ed25519PrivateKey.generate()
        cert = auth.issue_certificate(
            authority, client_id=f"d{i}", public_key=auth.public_key_hex(k), population=POPULATION
        )
        body = cert.as_dict()["body"]
        rows.append(
            ClientRow(
                id=f"d{i}",
                public_key=auth.public_key_hex(k),
                population=POPULATION,
                authority=str(body["authority"]),
                not_after=float(body["not_after"]),
                revoked=False,
                certificate=json.dumps(cert.as_dict()),
            )
        )
        devices.append((f"d{i}", auth.private_key_hex(k), values[i]))
    ports = [free_port(), free_port()]
    urls = [f"https://127.0.0.1:{p}" for p in ports]
    task_id, verify_key, peer_token = (
        secrets.token_hex(32),
        os.urandom(32),
        secrets.token_urlsafe(32),
    )
    with _databases(kind, root) as dbs:
        if dbs is None:
            return None
        tokens = []
        for role, db in zip(("leader", "helper"), dbs, strict=True):
            store = open_store(db)
            tokens.append(add_operator(store, "bench"))
            trust_authority(store, auth.public_key_hex(authority))
            with store.transaction() as tx:
                for r in rows:
                    tx.add_client(r, now)
            domain.create_task(
                store,
                task_id=task_id,
                role=role,
                vdaf=spec,
                verify_key=verify_key,
                ctx=CTX,
                peer_url=urls[1] if role == "leader" else urls[0],
                peer_token=peer_token,
                population=POPULATION,
                min_batch_size=1,
            )
            store.close()
        head = [str(Path(sys.executable).with_name("fedstats"))]
        env = dict(os.environ)
        if profile is not None:  # the servers under cProfile (thread CPU), as service_secagg.py's
            from service_secagg import _SERVER_MAIN

            head = [sys.executable, "-c", _SERVER_MAIN]
        servers = [
            subprocess.Popen(
                [
                    *head,
                    *loaded_server_argv(db, port, certs),
                    "--no-access-log",
                    "--vdaf",
                    "--vdaf-peer-ca",
                    ca,
                    "--vdaf-batch-size",
                    str(batch_size),
                ],
                stdout=subprocess.DEVNULL,
                stderr=open(root / f"server-{port}.log", "ab"),
                env=env
                if profile is None
                else {**env, "FEDSTATS_BENCH_PROFILE": str(profile / f"{kind}_{name}_{role}.prof")},
            )
            for db, port, role in zip(dbs, ports, ("leader", "helper"), strict=True)
        ]
        ctx = ssl.create_default_context(cafile=ca)
        ops = [
            httpx.Client(
                base_url=u, verify=ctx, timeout=3600, headers={"Authorization": f"Bearer {t}"}
            )
            for u, t in zip(urls, tokens, strict=True)
        ]
        try:
            for u, s in zip(urls, servers, strict=True):
                _wait_healthy(u, ctx, s)
            pids = [s.pid for s in servers]
            task_d = {
                "task_id": task_id,
                "vdaf": spec,
                "ctx": CTX.hex(),
                "leader": urls[0],
                "helper": urls[1],
            }
            parts = [devices[i::procs] for i in range(procs)]
            if profile is not None:
                for srv in servers:
                    srv.send_signal(signal.SIGUSR1)  # profile the measured phases only
            c0 = [_cpu(p) for p in pids]
            t0 = time.perf_counter()
            with mp.get_context("spawn").Pool(procs) as pool:
                worker = _relay_worker if upload == "bulk" else _device_worker
                outs = pool.map(worker, [(task_d, p, ca, concurrency) for p in parts])
            t1 = time.perf_counter()
            c1 = [_cpu(p) for p in pids]
            failures = [f for o in outs for f in o["failures"]]
            if failures:
                raise RuntimeError(f"{len(failures)} uploads failed, e.g. {failures[0]}")
            r = ops[0].post(f"/v1/vdaf/tasks/{task_id}/aggregate", json={})
            r.raise_for_status()
            jobs = r.json()
            t2 = time.perf_counter()
            c2 = [_cpu(p) for p in pids]
            answers = []
            for op in ops:
                r = op.post(f"/v1/vdaf/tasks/{task_id}/collect")
                r.raise_for_status()
                answers.append(r.json())
            task = Prio3Task(task_id, spec, CTX, urls[0], urls[1])
            got = unshard(task, answers[0], answers[1])
        finally:
            for op in ops:
                op.close()
            for s in servers:
                s.send_signal(signal.SIGTERM)
            for s in servers:
                try:
                    s.wait(30 if profile is None else 120)
                except subprocess.TimeoutExpired:
                    s.kill()
    if name == "histogram":
        truth: Any = np.bincount(values, minlength=100).tolist()
    else:
        truth = [sum(values)]
    if got.result != truth or got.accepted != n:
        raise RuntimeError(f"{kind} {name}: wrong result ({got.accepted} accepted)")
    out: dict[str, Any] = {
        "db": kind,
        "variant": name,
        "upload": upload,
        "vdaf": spec,
        "reports": n,
        "jobs": jobs,
    }
    for j, role in enumerate(("leader", "helper")):
        up, agg = c1[j] - c0[j], c2[j] - c1[j]
        out[role] = {
            "cpu_ms_per_report": 1000.0 * (up + agg) / n,
            "upload_cpu_ms_per_report": 1000.0 * up / n,
            "aggregate_cpu_ms_per_report": 1000.0 * agg / n,
        }
    retried: dict[str, int] = {}
    for o in outs:
        for why, k in o["retries"].items():
            retried[why] = retried.get(why, 0) + k
    out["upload_retries"] = retried  # requests sent again (429/503 or a transport error)
    out["upload_seconds"] = t1 - t0
    out["aggregate_seconds"] = t2 - t1
    out["device_shard_cpu_ms_per_report_under_load"] = (
        1000.0 * sum(o["shard_cpu_s"] for o in outs) / n
    )
    return out


# -- the device's single-report shard against the reference ------------------------------------------


def shard_times(
    name: str, shard_n: int, ref_n: int, ref_python: Path, ref_src: Path
) -> dict[str, Any]:
    """CPU per single-report ``shard`` of fedstats and (run just before) of the CFRG reference."""
    from fedstats.service.domain.vdaf import vdaf_from_spec

    spec, high, ref_ctor = VARIANTS[name]
    row: dict[str, Any] = {}
    if ref_python.exists() and ref_src.is_dir():
        proc = subprocess.run(
            [str(ref_python), "-c", REF_SHARD, str(ref_src), ref_ctor, str(ref_n), str(high)],
            capture_output=True,
            text=True,
            check=True,
        )
        row["reference"] = json.loads(proc.stdout.strip().splitlines()[-1])
    vdaf = vdaf_from_spec(spec)
    rng = np.random.default_rng(1)
    ms = [int(x) for x in rng.integers(0, high, shard_n + 10)]
    for m in ms[:10]:  # warm-up (caches of the first call)
        vdaf.shard(CTX, m, os.urandom(16))
    cpu = 0.0
    for m in ms[10:]:
        nonce, rand = (
            os.urandom(16),
            os.urandom(vdaf.RAND_SIZE),
        )  # drawn untimed, as the reference's
        c0 = time.process_time()
        vdaf.shard(CTX, m, nonce, rand)
        cpu += time.process_time() - c0
    row["fedstats"] = {"reports": shard_n, "shard_cpu_s": cpu / shard_n}
    if "reference" in row:
        row["shard_speedup"] = row["reference"]["shard_cpu_s"] / row["fedstats"]["shard_cpu_s"]
    return row


def main() -> None:
    """Run every case, print one JSON line each, write ``benchmarks/results/<output>.json``."""
    from prio3 import REF_ROOT

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--n", type=int, default=None, help="reports per case (default 10000; --quick 1000)"
    )
    ap.add_argument("--procs", type=int, default=2, help="client (device) processes")
    ap.add_argument(
        "--concurrency", type=int, default=32, help="devices at once per client process"
    )
    ap.add_argument("--db", choices=["sqlite", "postgresql", "both"], default=None)
    ap.add_argument("--variants", default="count,sum,histogram")
    ap.add_argument(
        "--upload",
        choices=["single", "bulk", "both"],
        default="both",
        help="single: one HTTPS request per upload (a device's own); bulk: the devices' signed uploads "
        "relayed to each aggregator in POST /reports/bulk requests (an ingestion front end)",
    )
    ap.add_argument(
        "--single-n",
        type=int,
        default=None,
        help="reports per case with one request per upload (default --n; on a loaded machine they "
        "take minutes per thousand)",
    )
    ap.add_argument("--batch-size", type=int, default=1000, help="reports per aggregation job")
    ap.add_argument(
        "--shard-n", type=int, default=None, help="single-report shards timed (300; --quick 100)"
    )
    ap.add_argument(
        "--ref-n", type=int, default=None, help="reference shards timed (20; --quick 5)"
    )
    ap.add_argument("--ref-src", type=Path, default=REF_ROOT / "poc")
    ap.add_argument("--ref-python", type=Path, default=REF_ROOT / ".venv" / "bin" / "python")
    ap.add_argument("--quick", action="store_true", help="1000 reports, fewer shards, SQLite only")
    ap.add_argument(
        "--output", default="prio3_service", help="results name under benchmarks/results/"
    )
    ap.add_argument("--no-write", dest="write", action="store_false")
    ap.add_argument(
        "--shard-only",
        action="store_true",
        help="time the single-report shards against the reference only (no servers)",
    )
    ap.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="directory: run the servers under cProfile (thread CPU) into DIR/<db>_<variant>_<role>.prof "
        "(the CPU numbers then include the profiler's overhead)",
    )
    a = ap.parse_args()
    n = a.n or (1000 if a.quick else 10_000)
    shard_n = a.shard_n or (100 if a.quick else 300)
    ref_n = a.ref_n or (5 if a.quick else 20)
    db = a.db or ("sqlite" if a.quick else "both")
    names = [v.strip() for v in a.variants.split(",") if v.strip()]
    for v in names:
        if v not in VARIANTS:
            raise SystemExit(f"error: --variants: {v!r} is not one of {sorted(VARIANTS)}")
    load0 = os.getloadavg()
    shards = {}
    for name in names:
        shards[name] = shard_times(name, shard_n, ref_n, a.ref_python, a.ref_src)
        print(json.dumps({"shard": name, **shards[name]}), flush=True)
    runs = []
    modes = [] if a.shard_only else ["bulk", "single"] if a.upload == "both" else [a.upload]
    kinds = ["sqlite", "postgresql"] if db == "both" else [db]
    for kind, mode, name in [(k, m, v) for k in kinds for m in modes for v in names]:
        with tempfile.TemporaryDirectory() as tmp:
            prof = None
            if a.profile is not None:
                a.profile.mkdir(parents=True, exist_ok=True)
                prof = a.profile.resolve()
            size = n if mode == "bulk" else min(n, a.single_n or n)
            row = run_case(
                kind, name, size, a.procs, a.batch_size, a.concurrency, Path(tmp), prof, mode
            )
        if row is None:
            row = {
                "db": kind,
                "variant": name,
                "upload": mode,
                "skipped": "PostgreSQL unreachable at 127.0.0.1:5432",
            }
        row["load_average"] = os.getloadavg()
        runs.append(row)
        print(json.dumps(row), flush=True)
    goals = {
        "cpu_ms_per_report_per_aggregator": {"count": 2.0, "histogram": 5.0},
        "shard_speedup_vs_reference_at_least": {"count": 10.0, "histogram": 10.0},
    }
    met = {}
    for r in runs:
        limit = goals["cpu_ms_per_report_per_aggregator"].get(r["variant"])
        if limit is not None and "leader" in r:
            met[f"{r['db']}/{r['upload']}/{r['variant']}/cpu"] = (
                max(r["leader"]["cpu_ms_per_report"], r["helper"]["cpu_ms_per_report"]) <= limit
            )
    for name, s in shards.items():
        floor = goals["shard_speedup_vs_reference_at_least"].get(name)
        if floor is not None and "shard_speedup" in s:
            met[f"{name}/shard"] = s["shard_speedup"] >= floor
    result = {
        "command": " ".join(["python", "benchmarks/prio3_service.py", *sys.argv[1:]]),
        "what": "CPU ms per report of each aggregator process (upload + aggregation jobs); device "
        "single-report shard CPU against the CFRG reference (draft-irtf-cfrg-vdaf-20) in the same run",
        "load_average_at_start": load0,
        "cpus": os.cpu_count(),
        "goals": goals,
        "goals_met": met,
        "shard": shards,
        "runs": runs,
    }
    print(json.dumps({"goals_met": met}))
    if a.write:
        print(f"wrote {write_results(a.output, result)}")


if __name__ == "__main__":
    main()
