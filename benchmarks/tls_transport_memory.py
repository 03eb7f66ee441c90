"""Memory per open TLS connection of the event loop's transport alone: uvloop against asyncio.

``benchmarks/service_connections.py`` measures what one kept-alive TLS connection holds in ``fedstats
server`` (131 KiB after a 30 kB upload, 37 KiB without TLS); issue 40's memory goal (300 MiB at
n = 1,000, every device keeping its connection through the run) turns on it. This isolates the event
loop's share: a bare TLS server (no HTTP stack, no fedstats) answers each connection's ``--body``-byte
upload and keeps the connection open, its RSS read from ``/proc`` before and after ``--connections``
connections, for each loop:

* ``uvloop``: uvicorn's default where installed (its SSL protocol reads into a 256 KiB buffer it
  allocates per connection, resident as far as a read reached, and keeps OpenSSL's memory BIOs);
* ``asyncio``: the standard library's SSL protocol (a 256 KiB ``bytearray`` per connection, zeroed,
  so all of it resident);
* ``asyncio-16k``: the same with ``asyncio.sslproto.SSLProtocol.max_size`` set to 16 KiB (its read
  buffer, and so the most it writes into the incoming BIO at once).

Run: ``python benchmarks/tls_transport_memory.py [--connections 1000] [--body 30000]`` (writes
``benchmarks/results/tls_transport_memory.json``). The server side runs as ``--serve LOOP PORT CERT KEY``
in a child process.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _util import free_port, proc_status_kib, write_results

LOOPS = ("uvloop", "asyncio", "asyncio-16k")


def serve(loop: str, port: int, cert: str, key: str) -> None:
    """The bare TLS server (child process): answer each upload with 2 bytes, keep the connection."""
    if loop == "uvloop":
        import uvloop

        uvloop.install()
    elif loop == "asyncio-16k":
        from asyncio import sslproto

        sslproto.SSLProtocol.max_size = 16 * 1024  # type: ignore[attr-defined]

    class Answer(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport, self.got = transport, 0

        def data_received(self, data: bytes) -> None:
            self.got += len(data)
            if b"\r\n\r\n" in data and self.got >= int(data.split(b"\r\n")[0].split()[-1]):
                self.transport.write(b"ok")
                self.got = 0

    async def main() -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        await asyncio.get_running_loop().create_server(
            Answer, "127.0.0.1", port, ssl=context, backlog=2048
        )
        print("listening", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())


def measure(loop: str, connections: int, body: int, cert: Path, key: Path) -> dict[str, Any]:
    """One row: the bare server's RSS before and with ``connections`` open after one upload each."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", loop, str(port), str(cert), str(key)],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # "listening"
        time.sleep(0.5)
        before = proc_status_kib(proc.pid, "VmRSS")
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        # the upload's size is its first line's last word (the server reads it there)
        upload = b"UPLOAD %d\r\n\r\n" % body
        upload += b"x" * max(0, body - len(upload))
        row: dict[str, Any] = {"loop": loop, "connections": connections, "body_bytes": body}

        async def run() -> list[Any]:
            kept: list[Any] = []

            async def one() -> None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
                writer.write(upload)
                await writer.drain()
                await reader.readexactly(2)
                kept.append(writer)

            for start in range(0, connections, 100):
                await asyncio.gather(*(one() for _ in range(min(100, connections - start))))
            await asyncio.sleep(1.0)
            row["rss_with_connections_mib"] = proc_status_kib(proc.pid, "VmRSS") / 1024
            return kept

        asyncio.run(run())
        row["rss_before_mib"] = before / 1024
        row["kib_per_connection"] = round(
            (1024 * row["rss_with_connections_mib"] - before) / connections, 1
        )
        return row
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    """Measure each loop (or serve, as the child process)."""
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--body", type=int, default=30000, help="upload size, bytes")
    ap.add_argument("--output", default="tls_transport_memory")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tls-memory-") as tmp:
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        subprocess.run(
            [
                *(
                    "openssl",
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                ),
                *("-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1"),
                *("-subj", "/CN=localhost"),
            ],
            check=True,
            capture_output=True,
        )
        rows = [measure(loop, args.connections, args.body, cert, key) for loop in LOOPS]
    for row in rows:
        print(row)
    command = "python benchmarks/tls_transport_memory.py " + " ".join(sys.argv[1:])
    path = write_results(
        args.output,
        {
            "command": command.strip(),
            "what": "RSS per open TLS connection of a bare server (no HTTP stack), by event loop, "
            "after one upload each",
            "rows": rows,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
