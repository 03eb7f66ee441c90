"""The client endpoints of the server: registration, work, check-in and reports (signed by devices).

Every request is signed by an enrolled device (:mod:`fedstats.wire.auth`); the secure-run endpoints are added by
:mod:`fedstats.service.http.secure`. They are in the OpenAPI description (tag ``device``) with their raw bodies declared
(:data:`.schemas.DEVICE`), so that schema-driven tests exercise them signed.

The request path is short: the signature is checked by one dependency (:mod:`.deps`, on the event loop for a
device seen recently); each poll or upload is one store transaction (the nonce recorded in the transaction
of the request's effect); a device's work list is cached with its ``ETag`` (:class:`.fastpath.WorkCache`), so an
unchanged list is answered (or 304) without the database, and the list after a report is derived from
the cached one. When a run's state moves, the first poll that reads its list reads ahead the lists of the
population's other recent devices (:meth:`.fastpath.PollBatcher.prefetch`), so that their polls read nothing.
The batchers, the cache and the direct routes are in :mod:`fedstats.service.http.fastpath`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, cast

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from fedstats.errors import SecurityError
from fedstats.service.domain import runs
from fedstats.service.domain.changes import Changes, Wakeup, check_wait
from fedstats.service.http.batching import TransactionBatcher
from fedstats.service.http.deps import DeviceAuth, Signed, SignedRequest, use_nonce
from fedstats.service.http.edge import (
    CONTROL,
    StrictRoute,
    request_headers,
)
from fedstats.service.http.fastpath import (
    WAIT_PARAM,
    Handler,
    Offload,
    PollBatcher,
    UploadBatcher,
    WorkCache,
    direct_route,
    index_of,
    json_body,
)
from fedstats.service.http.refusals import refusal_router
from fedstats.service.http.schemas import (
    CHECKIN_BODY,
    DEVICE,
    REGISTER_BODY,
    REPORT_BODY,
    IdPath,
    IndexPath,
)
from fedstats.service.http.secure import SecureRoutes, add_secure_routes
from fedstats.service.store import State, Store
from fedstats.service.store.core import ClientRow
from fedstats.wire import auth

__all__ = ["add_client_routes", "device_router"]

log = logging.getLogger("fedstats.service")


def device_router(
    store: Store,
    cfg: Any,
    counters: dict[str, float],
    *,
    changes: Changes,
    wakeup: Wakeup,
    offload: Offload,
    device: DeviceAuth,
    cache: WorkCache,
    uploads: UploadBatcher | None = None,
    polls: PollBatcher | None = None,
) -> APIRouter:
    """The device endpoints: register, work, check-in, report (see :func:`add_client_routes`)."""
    if uploads is None:
        uploads = UploadBatcher(store, offload)
    if polls is None:
        polls = PollBatcher(store, offload, device, cache)
    router = APIRouter(route_class=StrictRoute)
    # the check-ins of a run lock its row: those that arrive together share one transaction
    checkins = TransactionBatcher(store, offload)

    @router.post("/v1/client/register", openapi_extra=REGISTER_BODY, **DEVICE)
    async def register(request: Request) -> dict[str, Any]:
        body = await request.body()
        data = json_body(body)
        if not isinstance(data, dict):
            raise HTTPException(422, "body must be an object")
        cert = auth.Certificate.from_dict(data.get("certificate"))

        def trust() -> dict[str, str]:
            with store.transaction(read_only=True) as tx:
                return tx.authorities()

        try:
            auth.verify_certificate(cert, await offload(trust))
        except SecurityError as exc:
            raise HTTPException(401, str(exc)) from None
        if request.headers.get(auth.HEADER_CLIENT) != cert.body["client_id"]:
            raise HTTPException(401, "client id does not match the certificate")
        for name in ("client_id", "population"):  # identifiers (a NUL cannot be stored)
            if CONTROL.search(str(cert.body.get(name, ""))):
                raise HTTPException(
                    422, f"certificate.{name}: control characters are not allowed in identifiers"
                )
        got = await device.check(request, str(cert.body["public_key"]))
        row = ClientRow(
            id=str(cert.body["client_id"]),
            public_key=str(cert.body["public_key"]),
            population=str(cert.body["population"]),
            authority=str(cert.body["authority"]),
            not_after=float(cert.body["not_after"]),
            revoked=False,
            certificate=json.dumps(cert.as_dict()),
        )

        def store_client() -> None:
            with store.transaction() as tx:
                use_nonce(tx, got.nonce)
                c = tx.client(row.id)
                if c is not None and c.revoked:
                    raise SecurityError("device revoked by an operator")
                if c is not None and c.public_key != row.public_key:
                    raise SecurityError("a different key is enrolled under this client id")
                if c is None:
                    tx.add_client(row, time.time())
                elif c.certificate is None:  # enrolled before certificates were kept
                    assert row.certificate is not None
                    tx.set_client_certificate(row.id, row.certificate)

        await offload(store_client)
        return {"client_id": cert.body["client_id"], "population": cert.body["population"]}

    @router.post("/v1/client/request-key", **DEVICE)
    async def request_key(req: Signed) -> dict[str, Any]:
        """A request key for this device (:func:`fedstats.wire.auth.open_request_key`).

        The request must be signed with the device's Ed25519 key (a request key does not open another).
        The answer ``{"key_id", "key", "expires"}`` lets the device authenticate its next requests, until
        ``expires`` (Unix seconds), with an HMAC instead of a signature; the key is valid on this server
        process only.
        """
        if req.keyed:
            raise HTTPException(
                401, "request key: a request key is opened by a request signed with the device key"
            )

        def go() -> None:
            with store.transaction() as tx:  # the nonce: a replayed request opens no key
                use_nonce(tx, req.nonce)
                device.confirm(tx, req)

        await offload(go)
        return device.open_key(req.client_id)

    async def work_effect(req: SignedRequest, request: Request, wait: float) -> Response:
        """The device's work list (JSON, with an ``ETag``), long-polled (see :func:`work`)."""
        cid, population = req.client_id, req.population
        check_wait(wait)
        known = request_headers(request.scope).get("if-none-match")

        if req.stale:  # a cached answer needs a confirmed device row: read the list fresh once
            cache.touch(cid)

        cache.polled(cid, population)

        async def differs() -> Response | None:
            tag, body = await polls.answer(req, cache.key(cid, population))
            if tag == known:
                return None
            return Response(body, media_type="application/json", headers={"ETag": tag})

        got = await changes.hold(population, min(wait, cfg.max_wait), differs)
        return got if got is not None else Response(status_code=304, headers={"ETag": str(known)})

    async def work_fast(request: Request, slow: Handler) -> Response:
        query = request.scope.get("query_string", b"")
        wait = 0.0
        if query:
            m = WAIT_PARAM.fullmatch(query)
            if m is None:  # anything but one plain ``wait``: FastAPI's parsing and its errors
                return await slow(request)
            wait = float(m[1])
        return await work_effect(await device(request), request, wait)

    async def work(req: Signed, request: Request, wait: float = 0.0) -> Response:
        """The device's work list (JSON, with an ``ETag``), long-polled.

        With ``If-None-Match`` naming the list the device already has, the request is held up to ``wait``
        seconds (at most ``max_wait``) until the list differs; if it still does not, the answer is 304.
        A list still valid in the cache (:class:`WorkCache`) is answered without the database.
        """
        return await work_effect(req, request, wait)

    router.add_api_route(
        "/v1/client/work",
        work,
        methods=["GET"],
        route_class_override=direct_route(
            work_fast,
            lambda scope, _p: (
                not scope.get("query_string")
                or WAIT_PARAM.fullmatch(scope["query_string"]) is not None
            ),
        ),
        **DEVICE,
    )

    @router.post("/v1/client/runs/{run_id}/checkin", openapi_extra=CHECKIN_BODY, **DEVICE)
    async def checkin(run_id: IdPath, req: Signed) -> dict[str, Any]:
        data = json_body(req.body)
        records = data.get("records") if isinstance(data, dict) else None
        if not isinstance(records, int) or isinstance(records, bool) or not 1 <= records <= 10**9:
            raise HTTPException(422, "records must be an integer in [1, 10^9]")
        commitment = data.get("commitment")

        def go(tx: State) -> dict[str, Any]:
            use_nonce(tx, req.nonce)
            device.confirm(tx, req)
            return runs.checkin(
                tx, run_id, req.client_id, records, commitment, population=req.population
            )

        out = dict(await checkins(go))  # with the check-ins that arrive meanwhile: one transaction
        wakeup.set()  # the cohort may be complete: let the driver close check-in now
        return out

    async def report_effect(
        run_id: str, index: int, req: SignedRequest, request: Request
    ) -> dict[str, Any]:
        data = json_body(req.body)
        count = data.get("count") if isinstance(data, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= 10**9:
            raise HTTPException(422, "body must be {vector: [int], count: int in [0, 10^9]}")
        cid, population = req.client_id, req.population

        def go() -> bool:
            with store.transaction() as tx:  # one transaction: the nonce and the report
                use_nonce(tx, req.nonce)
                device.confirm(tx, req)
                return runs.submit_report(tx, run_id, index, cid, data.get("vector"), count)

        if req.nonce is not None and not req.stale:  # the common case: group-committed
            got = await uploads(
                runs.Upload(
                    (req.nonce.nonce, req.nonce.ts), run_id, index, cid, data.get("vector"), count
                )
            )
            if got is None:
                raise HTTPException(401, "replayed request (nonce already used)")
            new = got
        else:
            new = await offload(go)
        # the driver is woken only when the round may be complete (not at every report)
        if new and request.app.state.driver.note_report(run_id, index):
            wakeup.set()
        # the device's next poll is answered from the cache, without the database
        cache.after_report(cid, population, run_id, index)
        request.scope["fedstats.work_cached"] = True  # DeviceWrites: the entry is already fresh
        counters["reports_accepted" if new else "reports_duplicate"] += 1
        # the transaction has committed: only now is the report acknowledged
        return {"accepted": True, "duplicate": not new}

    async def report_fast(request: Request, slow: Handler) -> Response:
        run_id = request.path_params.get("run_id", "")
        index = index_of(request.path_params.get("index", ""))
        if index is None or len(run_id) > 128:  # FastAPI's validation and its 422
            return await slow(request)
        got = await report_effect(run_id, index, await device(request), request)
        return JSONResponse(got)

    async def report(
        run_id: IdPath, index: IndexPath, req: Signed, request: Request
    ) -> dict[str, Any]:
        """Upload the device's report of a round (the sum of its records' reports, and their count)."""
        return await report_effect(run_id, index, req, request)

    router.add_api_route(
        "/v1/client/runs/{run_id}/rounds/{index}/report",
        report,
        methods=["POST"],
        route_class_override=direct_route(
            report_fast,
            lambda _s, p: (
                index_of(p.get("index", "")) is not None and len(p.get("run_id", "")) <= 128
            ),
        ),
        openapi_extra=REPORT_BODY,
        **DEVICE,
    )

    return router


REQUEST_KEY_SECRET = "request-key"
"""The name of the request-key secret in the state (``server_secrets``)."""


def request_key_secret(store: Store, given: bytes | None) -> bytes:
    """The secret devices' request keys are derived under (:func:`fedstats.wire.auth.open_request_key`).

    ``given`` (``fedstats server --request-key-secret``) if set; else the one kept in the state, drawn
    (32 random bytes) by the first server process that needed it: every process on the database, and a
    restarted one, derives the same keys, so a restart costs no device a refused request.
    """
    if given is not None:
        return given
    with store.transaction() as tx:
        return tx.server_secret(REQUEST_KEY_SECRET, os.urandom(32), time.time())


def add_client_routes(
    app: FastAPI,
    store: Store,
    cfg: Any,
    counters: dict[str, float],
    *,
    changes: Changes,
    wakeup: Wakeup,
    offload: Offload,
) -> WorkCache:
    """Add the client endpoints (and the secure-run ones) to ``app``; return the work-list cache.

    Parameters
    ----------
    app : FastAPI
    store : Store
    cfg : ServerSettings
        The server's settings (replay window, long-poll bounds, work-list cache life).
    counters : dict
        The server's metrics counters.
    changes : Changes
        The run driver's state transitions, which wake long-polling ``GET /v1/client/work`` requests.
    wakeup : Wakeup
        Set after each device message is committed, so the driver closes a round or stage at once.
    offload : Offload
        Runs the requests' blocking store work.

    Returns
    -------
    WorkCache
        The devices' cached work lists; wrap the app in :class:`DeviceWrites` with it.
    """
    cache = WorkCache(changes, float(getattr(cfg, "work_cache_seconds", 60.0)))
    device = DeviceAuth(
        store,
        cfg.replay_window,
        offload,
        on_write=cache.touch,
        key_secret=request_key_secret(store, cfg.request_key_secret),
    )
    app.state.forget_client = device.forget
    app.state.device_auth = device
    app.state.upload_batcher = uploads = UploadBatcher(store, offload)
    app.state.poll_batcher = polls = PollBatcher(store, offload, device, cache)
    router = device_router(
        store,
        cfg,
        counters,
        changes=changes,
        wakeup=wakeup,
        offload=offload,
        device=device,
        cache=cache,
        uploads=uploads,
        polls=polls,
    )
    app.include_router(router)
    app.include_router(refusal_router(store, device, offload, wakeup))

    async def population_of(cid: str) -> str:
        row = device._fresh(cid) or await offload(device.client, cid)
        if row is None:  # pragma: no cover - rows are never deleted
            raise HTTPException(401, "unknown client")
        return row.population

    secure_routes = SecureRoutes(
        store,
        cast(Any, device.signed),
        cast(Any, use_nonce),
        json_body,
        counters,
        wakeup,
        changes=changes,
        population_of=population_of,
        max_wait=cfg.max_wait,
        offload=offload,
    )
    add_secure_routes(app, secure_routes)
    return cache
