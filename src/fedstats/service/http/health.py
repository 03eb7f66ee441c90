"""Health endpoints: ``/livez`` (the process answers), ``/healthz`` and ``/readyz`` (the store can write).

``/livez`` touches nothing but the HTTP stack: it is what a device asks before its first signed request
(:meth:`fedstats.client.Device.run`: is the server reachable, does TLS hold), once per device start, so
that a population starting at once does not cost the store one write per device. It is a direct route
(:func:`~fedstats.service.http.fastpath.direct_route`): answered on the event loop, without FastAPI's
dependency resolution or a hop to its thread pool (where a plain ``def`` endpoint runs).

A server whose database cannot be written (a read-only file system, a full disk, a lost PostgreSQL) would
accept requests it cannot store; both endpoints then answer 503 with the reason, so a load balancer or an
orchestrator stops sending it traffic. The probe is a write rolled back (:meth:`.store.Store.writable`);
a failed probe reopens the store's connections, so the endpoints answer 200 again as soon as the cause
is gone, without a restart.

A request whose transaction fails on the store's side (a PostgreSQL lock or statement timeout, a lost
connection, a SQLite file that cannot be written) answers 503 with ``Retry-After`` instead of an opaque
500: nothing was committed, and devices retry 503 with backoff.
"""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from fedstats.service.http.fastpath import Handler, direct_route
from fedstats.service.store import Store, StoreUnavailable

__all__ = ["add_health_routes"]

log = logging.getLogger("fedstats.service")

_ALIVE = JSONResponse({"status": "ok"}).body
"""The body of ``/livez``'s answer, rendered once (``{"status":"ok"}``)."""


async def _livez_direct(_request: Request, _slow: Handler) -> Response:
    """``/livez``'s answer, without FastAPI's layers (nothing of the request is read)."""
    return Response(_ALIVE, media_type="application/json")


async def livez() -> JSONResponse:
    """Liveness of the process alone: 200 whenever it answers HTTP (the store is not asked)."""
    return JSONResponse({"status": "ok"})


def add_health_routes(app: FastAPI, store: Store) -> None:
    """Mount ``GET /livez``, ``GET /healthz`` and ``GET /readyz`` on ``app``; answer store failures with 503.

    Parameters
    ----------
    app : FastAPI
    store : Store
        The server's store, probed by a rolled-back write at each request.
    """

    async def store_unavailable(request: Request, exc: Exception) -> JSONResponse:
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]
        log.warning(
            json.dumps({"event": "store_unavailable", "path": request.url.path, "error": reason})
        )
        return JSONResponse(
            {"detail": "the store is busy or unavailable; nothing was stored, retry later"},
            status_code=503,
            headers={"Retry-After": "1"},
        )

    app.add_exception_handler(StoreUnavailable, store_unavailable)

    def probe() -> JSONResponse:
        why = store.writable()
        if why is not None:
            return JSONResponse(
                {"status": "unavailable", "detail": f"the store cannot write: {why}"},
                status_code=503,
            )
        return JSONResponse({"status": "ok"})

    app.router.add_api_route(  # as ``@app.get("/livez", tags=["ops"])``, answered by ``_livez_direct``
        "/livez",
        livez,
        methods=["GET"],
        tags=["ops"],
        route_class_override=direct_route(_livez_direct, lambda _scope, _params: True),
    )

    @app.get("/healthz", tags=["ops"], responses={503: {"description": "the store cannot write"}})
    def healthz() -> JSONResponse:
        """Liveness: the process answers and its store can write (503 otherwise)."""
        return probe()

    @app.get("/readyz", tags=["ops"], responses={503: {"description": "the store cannot write"}})
    def readyz() -> JSONResponse:
        """Readiness: the store can write now (a rolled-back write; 503 with the reason otherwise)."""
        return probe()
