"""The server's generic CPU per device request, in process: the app's ASGI stack without TLS and uvicorn.

A device's requests cross the same layers whatever they ask (the edge's limits, counters and access
log, the direct routes, the request's MAC or signature check), and at n = 1,000 a secure run's device
sends about 15 of them (``benchmarks/service_secagg.py``). This measures those layers on three
requests, each sent ``--requests`` times straight to the app (``await app(scope, receive, send)`` on
one event loop, SQLite store, access log on and written to ``/dev/null``, as a server does):

* ``work_304``: ``GET /v1/client/work`` of an enrolled device whose list it already has
  (``If-None-Match``): answered 304 from the work cache, authenticated by a request key's MAC;
* ``stage_up_404``: ``POST`` of a secure stage message with a ``members`` list of 900 positions
  (``%2C``-separated, as a device sends it) for a run that does not exist: 404 after the MAC check;
* ``request_key``: ``POST /v1/client/request-key`` signed with the device's Ed25519 key (a FastAPI
  route with dependencies; one write of its nonce).

Reported per request kind: the process's CPU (user + system) per request in microseconds, for the
source tree being measured and, with ``--base DIR``, for another one (``git archive main | tar -x -C
DIR``), the two run alternately ``--repeats`` times in fresh processes; the median of each.

    python benchmarks/device_requests.py --base /tmp/base --output device_requests
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KINDS = ("work_304", "stage_up_404", "request_key")


def _measure(requests: int) -> dict[str, float]:
    """CPU microseconds per request of each kind, in this process (the tree on ``sys.path``)."""
    import asyncio
    import logging
    import tempfile

    from fastapi.testclient import TestClient

    from fedstats.client import Device
    from fedstats.randomness import RandomSource
    from fedstats.service.domain.operators import trust_authority
    from fedstats.service.http.app import ServerSettings, create_app
    from fedstats.service.http.edge import JsonLogFormatter
    from fedstats.service.store import open_store
    from fedstats.wire import auth
    from fedstats.wire.enrollment import init_authority, issue_identity

    handler = logging.FileHandler(os.devnull)
    handler.setFormatter(JsonLogFormatter())
    service_log = logging.getLogger("fedstats.service")
    service_log.addHandler(handler)
    service_log.setLevel(logging.INFO)
    service_log.propagate = False

    root = Path(tempfile.mkdtemp(prefix="device_requests_"))
    init_authority(root / "authority")
    store = open_store(f"sqlite:///{root / 'store.db'}")
    trust_authority(store, (root / "authority" / "authority.pub").read_text().strip())
    app = create_app(store, ServerSettings(rate=1e9, burst=1e9), run_driver=False)
    ident = issue_identity(root / "authority", "dev-0", "default", root / "dev-0.json")
    device = Device("https://127.0.0.1", ident, {"value": [0.5]}, randomness=RandomSource(0))
    with TestClient(app) as http:
        device._http = http
        device.register()
        key = http.post(
            "/v1/client/request-key",
            content=b"",
            headers=auth.sign_request(device._key, "dev-0", "POST", "/v1/client/request-key", b""),
        ).json()
    key_id, mac_key = key["key_id"], bytes.fromhex(key["key"])
    device_auth = app.state.device_auth

    def scope(method: str, path: str, query: bytes, headers: dict[str, str], size: int) -> Any:
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        raw += [
            (b"host", b"127.0.0.1:8443"),
            (b"user-agent", b"python-httpx/0.28.1"),
            (b"accept", b"*/*"),
            (b"accept-encoding", b"gzip, deflate"),
            (b"connection", b"keep-alive"),
            (b"content-length", str(size).encode()),
        ]
        if size:
            raw.append((b"content-type", b"application/json"))
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "scheme": "https",
            "method": method,
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": query,
            "headers": raw,
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8443),
            "state": {},
            "app": app,
        }

    async def call(s: Any, body: bytes) -> int:
        sent = False
        got: list[int] = []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                await asyncio.sleep(3600)
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                got.append(message["status"])

        await app(s, receive, send)
        return got[0]

    members = ",".join(str(i) for i in range(1, 901)).replace(",", "%2C")
    up_path = "/v1/client/runs/no-such-run/rounds/0/secure/1/0"
    up_body = json.dumps({"message": "00" * 64}).encode()

    def make(kind: str) -> tuple[Any, bytes, int]:
        if kind == "work_304":
            h = auth.sign_request_with_key(key_id, mac_key, "dev-0", "GET", "/v1/client/work", b"")
            return scope("GET", "/v1/client/work", b"", {**h, "if-none-match": etag}, 0), b"", 304
        if kind == "stage_up_404":
            h = auth.sign_request_with_key(key_id, mac_key, "dev-0", "POST", up_path, up_body)
            q = f"wait=0&members={members}".encode()
            return scope("POST", up_path, q, h, len(up_body)), up_body, 404
        path = "/v1/client/request-key"
        h = auth.sign_request(device._key, "dev-0", "POST", path, b"")
        return scope("POST", path, b"", h, 0), b"", 200

    out: dict[str, float] = {}

    async def main() -> None:
        nonlocal etag
        h = auth.sign_request_with_key(key_id, mac_key, "dev-0", "GET", "/v1/client/work", b"")
        etag = ""
        got: list[Any] = []

        async def send(message: dict[str, Any]) -> None:
            got.append(message)

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        await app(scope("GET", "/v1/client/work", b"", h, 0), receive, send)
        etag = dict(got[0]["headers"])[b"etag"].decode()
        for kind in KINDS:
            todo = [make(kind) for _ in range(requests)]  # signed beforehand: the device's work
            for s, body, want in todo[:20]:  # warm-up
                got_status = await call(s, body)
                assert got_status == want, (kind, got_status)
            todo = [make(kind) for _ in range(requests)]
            row = device_auth.known["dev-0"][0]
            device_auth.remember(
                row
            )  # trusted for the next seconds, as between a device's requests
            t0 = time.process_time()
            for s, body, want in todo:
                status = await call(s, body)
                if status != want:
                    raise AssertionError(f"{kind}: {status}, not {want}")
            out[kind] = 1e6 * (time.process_time() - t0) / requests

    etag = ""
    with TestClient(app):  # the app's lifespan (its pools), as a server runs it
        asyncio.run(main())
    store.close()
    return out


def _run(src: Path, requests: int) -> dict[str, float]:
    """One measurement in a fresh process whose ``fedstats`` is the one under ``src``."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE.parent / 'tests'}"}
    got = subprocess.run(
        [sys.executable, __file__, "--inner", "--requests", str(requests)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(got.stdout.strip().splitlines()[-1]))


def main() -> None:
    """Parse the options; measure this tree (and ``--base``) alternately; write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--base", type=Path, help="the base's source tree (its src/ is used)")
    parser.add_argument("--output", default="device_requests")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(_measure(args.requests)))
        return
    trees = {"head": HERE.parent / "src"}
    if args.base is not None:
        trees["base"] = args.base / "src"
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.repeats):
        for name, src in trees.items():
            runs[name].append(_run(src, args.requests))
            print(name, runs[name][-1], flush=True)
    median = {
        name: {k: round(statistics.median(r[k] for r in got), 1) for k in KINDS}
        for name, got in runs.items()
    }
    result = {
        "benchmark": "device_requests",
        "command": " ".join(["python", "benchmarks/device_requests.py", *sys.argv[1:]]),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "requests": args.requests,
        "unit": "server CPU microseconds per request (in process, no TLS)",
        "median": median,
        "runs": runs,
    }
    path = HERE / "results" / f"{args.output}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(median, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
