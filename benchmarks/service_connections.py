"""Server memory per open connection: plain HTTP and TLS, after an empty request and after an upload.

Issue 40 asks for at most 300 MiB of server memory in a whole secure run at n = 1,000, where every device
keeps one connection open through the run (long polls, and a TLS handshake saved per request). This
measures what one open connection holds in the server process: ``fedstats server`` (SQLite, the same
arguments as the secure-run benchmark's) is started once per row, its RSS read from ``/proc`` before and
after ``--connections`` clients each open one connection, send one request and keep the connection open.
The request is ``GET /healthz``, or a ``POST`` of ``--body`` bytes (the size of a device's share upload at
n = 1,000) to ``/healthz``: the route answers 405 without reading the body, but its bytes have come
through the connection's TLS and HTTP layers, which is what this measures, not an upload's handling.
The difference divided by the connections is the row's KiB per connection.

Run: ``python benchmarks/service_connections.py [--connections 1000] [--body 30000]`` (writes
``benchmarks/results/service_connections.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _util import free_port, loaded_server_argv, proc_status_kib, write_results

SRC = Path(__file__).resolve().parents[1] / "src"


async def _open(n: int, port: int, body: int, context: ssl.SSLContext | None) -> list[Any]:
    """``n`` connections, each after one request and its answer, kept open."""
    request = (
        b"POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n" % body
        + b"x" * body
        if body
        else b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
    )
    kept: list[Any] = []

    async def one() -> None:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="localhost" if context else None
        )
        writer.write(request)
        await writer.drain()
        await reader.read(1024)
        kept.append(writer)

    for start in range(
        0, n, 100
    ):  # 100 handshakes at a time: the server's accept queue stays short
        await asyncio.gather(*(one() for _ in range(min(100, n - start))))
    return kept


def measure(n: int, body: int, tls: bool, certs: dict[str, Path], workdir: Path) -> dict[str, Any]:
    """One row: the server's RSS before and with ``n`` open connections."""
    port = free_port()
    db = f"sqlite:///{workdir / f'conn-{port}.db'}"
    argv = loaded_server_argv(db, port, certs if tls else None)
    argv += ["--max-connections", str(4 * n + 100)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    log = workdir / f"server-{port}.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fedstats", *argv],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    try:
        deadline = time.monotonic() + 60
        while b"listening" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {log.read_text()[-500:]}")
            time.sleep(0.2)
        time.sleep(1.0)
        before = proc_status_kib(proc.pid, "VmRSS")
        context = ssl.create_default_context(cafile=str(certs["ca"])) if tls else None

        async def hold() -> int:
            kept = await _open(n, port, body, context)
            await asyncio.sleep(2.0)  # the server settles (its heap trimmer runs every few seconds)
            with_open = proc_status_kib(proc.pid, "VmRSS")
            for writer in kept:
                writer.close()
            return with_open

        with_open = asyncio.run(hold())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "transport": "tls" if tls else "plain",
        "request": f"POST {body} B" if body else "GET",
        "connections": n,
        "rss_before_mib": round(before / 1024, 1),
        "rss_with_connections_mib": round(with_open / 1024, 1),
        "kib_per_connection": round((with_open - before) / n, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--body", type=int, default=30000, help="upload size of the POST rows, bytes")
    ap.add_argument("--output", default="service_connections")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.connections + 256)), hard)
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="fedstats-conn-") as tmp:
        workdir = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "fedstats", "server", "dev-certs", "--out", str(workdir)],
            check=True,
            capture_output=True,
            env=dict(os.environ, PYTHONPATH=str(SRC)),
        )
        certs = {
            "cert": workdir / "server.pem",
            "key": workdir / "server-key.pem",
            "ca": workdir / "ca.pem",
        }
        for tls in (False, True):
            for body in (0, args.body):
                row = measure(args.connections, body, tls, certs, workdir)
                print(row, flush=True)
                rows.append(row)
    path = write_results(
        args.output,
        {
            "command": "python benchmarks/service_connections.py " + " ".join(sys.argv[1:]),
            "what": "server RSS per open connection (KiB), plain HTTP and TLS, after one empty request "
            "and after one upload",
            "load_average_at_start": os.getloadavg(),
            "rows": rows,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
