"""The peer of ``benchmarks/service.py``: a minimal Starlette app on the same stack, one INSERT per report.

It serves the two requests a device makes in a local-DP round: ``GET /v1/client/work`` answers a fixed
work list (the one the fedstats server served in the same run, read from ``MINIMAL_WORK``), and
``POST /v1/client/runs/{run}/rounds/{round}/report`` stores the raw body in one transaction with one
INSERT. No authentication, no protocol, no checks: the floor a report costs on this stack (uvicorn with
the same TLS, the same event loop and HTTP parser, SQLAlchemy's pool, the same SQLite pragmas).

Started by the benchmark as ``python -m uvicorn _minimal_app:app`` with ``MINIMAL_DB`` (a SQLAlchemy URL)
and ``MINIMAL_WORK`` (a JSON file) in the environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, text
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

DB = os.environ["MINIMAL_DB"]
WORK = Path(os.environ["MINIMAL_WORK"]).read_bytes()

if DB.startswith("sqlite"):
    engine = create_engine(DB, connect_args={"timeout": 60, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")  # as fedstats: acknowledged once on disk
        cur.close()

    KEY = "INTEGER PRIMARY KEY AUTOINCREMENT"
else:
    engine = create_engine(DB, pool_size=20, max_overflow=10)
    KEY = "BIGSERIAL PRIMARY KEY"

with engine.begin() as _c:
    _c.execute(text(f"CREATE TABLE IF NOT EXISTS minimal_reports (id {KEY}, path TEXT, body TEXT)"))

_INSERT = text("INSERT INTO minimal_reports (path, body) VALUES (:p, :b)")


async def work(_request: Request) -> Response:
    return Response(WORK, media_type="application/json")


def _store(path: str, body: str) -> None:
    with engine.begin() as conn:
        conn.execute(_INSERT, {"p": path, "b": body})


async def report(request: Request) -> Response:
    body = await request.body()
    await run_in_threadpool(_store, request.url.path, body.decode())
    return JSONResponse({"accepted": True})


async def healthz(_request: Request) -> Response:
    return JSONResponse({"status": "ok"})


app = Starlette(
    routes=[
        Route("/healthz", healthz),
        Route("/v1/client/work", work),
        Route("/v1/client/runs/{run_id}/rounds/{index}/report", report, methods=["POST"]),
    ]
)
