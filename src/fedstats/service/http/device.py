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

The routes are module-level (:data:`router`); what they share (the store, the device check, the batchers
and the work cache: :class:`~.fastpath.DevicePath`) comes through the
:data:`~fedstats.service.http.context.Devices` dependency, or, on the poll's and the upload's direct
routes, from the app's state (:func:`~.fastpath.devices_of`).

**The fast path's gain, measured.** The poll and the upload (and the check-in and the request key,
which every device of a run sends together as it starts) are direct routes (:func:`~.fastpath.direct_route`
and :class:`~.fastpath.DirectRoutes`, on FastAPI's and Starlette's public interfaces): a well-formed
request is answered without FastAPI's dependency resolution and parameter models. ``python
benchmarks/service.py --db sqlite --clients 1000 --procs 1 --concurrency 1 --skip-minimal`` (one request
at a time: the fixed server CPU per report), run alternately on one machine shared with other
engineers' work (load averages 8 to 160): with the fast path 1.82-2.34 ms per report (median 1.93 of
5 runs), as before these routes were module-level (1.88-2.24, median 1.94 of 5); without it (both
routes plain FastAPI routes) 2.23-2.76 (median 2.32 of 4): the fast path saves about 17% of the
server's CPU per report. The middleware's own share is not measurable apart from that noise (the fast
handlers behind the router: 1.88 and 1.98 ms in 2 runs).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from fedstats._validation import IDENTIFIER_RULE, is_identifier
from fedstats.errors import SecurityError
from fedstats.service.domain import devices, runs
from fedstats.service.domain.changes import Changes, Wakeup, check_wait
from fedstats.service.http import refusals
from fedstats.service.http.batching import Work
from fedstats.service.http.context import Devices
from fedstats.service.http.deps import NonceUse, Signed, SignedRequest, use_nonce
from fedstats.service.http.edge import StrictRoute, request_headers
from fedstats.service.http.fastpath import (
    WAIT_PARAM,
    DevicePath,
    Handler,
    Offload,
    WorkCache,
    devices_of,
    direct_route,
    index_of,
    json_body,
)
from fedstats.service.http.schemas import (
    CHECKIN_BODY,
    DEVICE,
    REGISTER_BODY,
    REPORT_BODY,
    IdPath,
    IndexPath,
)
from fedstats.service.http.secure import NEXT_WORK, SecureRoutes, add_secure_routes
from fedstats.service.http.secure_tree import (
    TREE_MARK,
    checkin_committee,
    checkin_leaf,
    with_work,
)
from fedstats.service.store import State, Store
from fedstats.service.store.rows import ClientRow
from fedstats.wire import auth

__all__ = ["add_client_routes", "request_key_secret", "router"]

log = logging.getLogger("fedstats.service")

T = TypeVar("T")


router = APIRouter(route_class=StrictRoute)
"""The device endpoints: register, request key, work, check-in, report (see the module docstring)."""


@router.post("/v1/client/register", openapi_extra=REGISTER_BODY, **DEVICE)
async def register(request: Request, path: Devices) -> dict[str, Any]:
    """Enroll this device under its certificate, issued by a trusted authority."""
    data = json_body(await request.body())
    if not isinstance(data, dict):
        raise HTTPException(422, "body must be an object")
    cert = auth.Certificate.from_dict(data.get("certificate"))
    store = path.store

    def trust() -> dict[str, str]:
        with store.transaction(read_only=True) as tx:
            return tx.authorities()

    try:
        auth.verify_certificate(cert, await path.offload(trust))
    except SecurityError as exc:
        raise HTTPException(401, str(exc)) from None
    if request.headers.get(auth.HEADER_CLIENT) != cert.body["client_id"]:
        raise HTTPException(401, "client id does not match the certificate")
    for name in ("client_id", "population"):  # identifiers (a NUL cannot be stored)
        if not is_identifier(cert.body.get(name)):
            raise HTTPException(422, f"certificate.{name}: an identifier is {IDENTIFIER_RULE}")
    got = await path.auth.check(request, str(cert.body["public_key"]))
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
        version = path.auth.version  # the devices' counter before the row is read (DeviceAuth)
        with store.transaction() as tx:
            use_nonce(tx, got.nonce)
            enrolled = devices.enroll_device(tx, row, time.time())
        # the row as committed: the device's next request is checked without reading it again
        path.auth.remember(enrolled, version)

    await path.offload(store_client)
    return {"client_id": cert.body["client_id"], "population": cert.body["population"]}


async def _request_key(path: DevicePath, req: SignedRequest) -> dict[str, Any]:
    """Open a request key for the verified device (see :func:`request_key`)."""
    if req.keyed:
        raise HTTPException(
            401, "request key: a request key is opened by a request signed with the device key"
        )
    # the nonce (a replayed request opens no key), group-committed with the requests that arrive with it
    await path.writes(Work(req.nonce, lambda tx, _held: path.auth.confirm(tx, req)))
    return path.auth.open_key(req.client_id)


async def _request_key_direct(request: Request, _slow: Handler) -> Response:
    """:func:`request_key` without FastAPI's dependency resolution (it has no parameters to parse)."""
    path = devices_of(request)
    return JSONResponse(await _request_key(path, await path.auth(request)))


async def request_key(req: Signed, path: Devices) -> dict[str, Any]:
    """A request key for this device (:func:`fedstats.wire.auth.open_request_key`).

    The request must be signed with the device's Ed25519 key (a request key does not open another).
    The answer ``{"key_id", "key", "expires"}`` lets the device authenticate its next requests, until
    ``expires`` (Unix seconds), with an HMAC instead of a signature; the key is valid on this server
    process only.
    """
    return await _request_key(path, req)


router.add_api_route(
    "/v1/client/request-key",
    request_key,
    methods=["POST"],
    route_class_override=direct_route(_request_key_direct, lambda _scope, _params: True),
    **DEVICE,
)


def _signed_write(
    path: DevicePath, req: SignedRequest, effect: Callable[[State], T] | None
) -> T | None:
    """In one transaction (blocking): the request's nonce, its device row re-read if stale, ``effect``."""
    with path.store.transaction() as tx:
        use_nonce(tx, req.nonce)
        path.auth.confirm(tx, req)
        return None if effect is None else effect(tx)


async def _work(path: DevicePath, req: SignedRequest, request: Request, wait: float) -> Response:
    """The device's work list (JSON, with an ``ETag``), long-polled (see :func:`work`)."""
    cid, population, cache = req.client_id, req.population, path.cache
    check_wait(wait)
    headers = request_headers(request.scope)
    known = headers.get("if-none-match")
    key = None
    if not req.keyed and headers.get(auth.HEADER_OPEN_KEY) == "1":
        # a request key asked for in the answer (auth.HEADER_OPEN_KEY), opened before the poll is
        # held as POST .../request-key opens it: this poll is then single-use (its nonce recorded)
        use = NonceUse(cid, headers[auth.HEADER_NONCE], float(headers[auth.HEADER_TIMESTAMP]))
        key = await _request_key(path, dataclasses.replace(req, nonce=use))
    if req.stale:  # a cached answer needs a confirmed device row: read the list fresh once
        cache.touch(cid)
    cache.polled(cid, population)

    async def differs() -> Response | None:
        tag, body = await path.polls.answer(req, cache.key(cid, population))
        if tag == known:
            return None
        return Response(body, media_type="application/json", headers={"ETag": tag})

    got = await path.changes.hold(population, min(wait, path.settings.max_wait), differs)
    answer = got if got is not None else Response(status_code=304, headers={"ETag": str(known)})
    if key is not None:
        answer.headers[auth.HEADER_OPEN_KEY] = json.dumps(key, separators=(",", ":"))
        answer.headers["Cache-Control"] = "no-store"
    return answer


async def _work_direct(request: Request, slow: Handler) -> Response:
    """:func:`work` without FastAPI's parameter models (a plain ``wait``; anything else goes ``slow``)."""
    query = request.scope.get("query_string", b"")
    wait = 0.0
    if query:
        m = WAIT_PARAM.fullmatch(query)
        if m is None:  # anything but one plain ``wait``: FastAPI's parsing and its errors
            return await slow(request)
        wait = float(m[1])
    path = devices_of(request)
    return await _work(path, await path.auth(request), request, wait)


def _plain_wait(scope: Any, _params: dict[str, str]) -> bool:
    query = scope.get("query_string")
    return not query or WAIT_PARAM.fullmatch(query) is not None


async def work(req: Signed, request: Request, path: Devices, wait: float = 0.0) -> Response:
    """The device's work list (JSON, with an ``ETag``), long-polled.

    With ``If-None-Match`` naming the list the device already has, the request is held up to ``wait``
    seconds (at most ``max_wait``) until the list differs; if it still does not, the answer is 304.
    A list still valid in the cache (:class:`WorkCache`) is answered without the database. A poll
    signed with the device key and sent with ``Fedstats-Request-Key: 1`` is also answered a request
    key, in that header (:data:`fedstats.wire.auth.HEADER_OPEN_KEY`): its nonce is recorded, as a
    ``POST /v1/client/request-key`` is, so a replayed poll is refused (401).
    """
    return await _work(path, req, request, wait)


router.add_api_route(
    "/v1/client/work",
    work,
    methods=["GET"],
    route_class_override=direct_route(_work_direct, _plain_wait),
    **DEVICE,
)


async def _checkin(
    path: DevicePath, run_id: str, req: SignedRequest, request: Request, wait: float
) -> Response:
    """Check the device in (see :func:`checkin`); the answer."""
    check_wait(wait)
    data = json_body(req.body)
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, int) or isinstance(records, bool) or not 1 <= records <= 10**9:
        raise HTTPException(422, "records must be an integer in [1, 10^9]")
    commitment = data.get("commitment")
    before = path.changes.generation(req.population)  # check-in was open then (if it succeeds)

    def go(tx: State, held: dict[Any, Any]) -> dict[str, Any]:
        path.auth.confirm(tx, req)
        return runs.checkin(
            tx, run_id, req.client_id, records, commitment, population=req.population, held=held
        )

    # with the check-ins that arrive meanwhile: one transaction (the nonce recorded first)
    out = dict(await path.checkins(Work(req.nonce, go)))
    path.wakeup.arrived(("checkin", run_id))  # if the cohort may be complete: close check-in now
    body, work = json.dumps(out).encode(), None
    if wait > 0 and commitment is not None:
        secure: SecureRoutes = request.app.state.secure
        end = time.monotonic() + min(wait, path.settings.max_wait)
        with path.cache.away(req.client_id):  # it reveals next, without a work poll
            got = await secure.held_commitments(run_id, req.population, wait, before)
            if got == TREE_MARK:  # a tree run: the device's own leaf (http.secure_tree)
                leaf = await checkin_leaf(secure, run_id, req.client_id)
                body = body[:-1] + b',"tree":' + leaf + b"}"
                carried = None
                if request_headers(request.scope).get(NEXT_WORK) == "1":  # off the committee
                    carried = await checkin_committee(
                        secure, run_id, req.client_id, req.population, end
                    )
                if carried is not None:  # its committee, and its first round if in time
                    body = body[:-1] + b',"revealed":' + carried[0] + b"}"
                    work = carried[1]
            elif got is not None:
                body = body[:-1] + b',"transcript":' + got + b"}"
    return with_work(body, work)


async def _checkin_direct(request: Request, slow: Handler) -> Response:
    """:func:`checkin` without FastAPI's parameter models (anything but a plain ``wait`` goes ``slow``)."""
    if not _plain_checkin(request.scope, request.path_params):  # FastAPI's parsing and its errors
        return await slow(request)
    m = WAIT_PARAM.fullmatch(request.scope.get("query_string") or b"")
    path = devices_of(request)
    req = await path.auth(request)
    run_id = request.path_params["run_id"]
    return await _checkin(path, run_id, req, request, 0.0 if m is None else float(m[1]))


def _plain_checkin(scope: Any, params: dict[str, str]) -> bool:
    """A check-in whose run id and query (at most one plain ``wait``) the direct route parses itself."""
    return _plain_wait(scope, params) and 0 < len(params.get("run_id", "")) <= 128


async def checkin(
    run_id: IdPath, req: Signed, path: Devices, request: Request, wait: float = 0.0
) -> Response:
    """Check in to a run: the device's record count (1..10^9) and its optional commitment.

    The answer is ``{"slot_start", "slot_count"}``. With ``wait`` > 0 a secure check-in (with a
    commitment) is held until the run's check-in closes, up to ``wait`` seconds (at most
    ``max_wait``), and then also carries ``"transcript"``: the commitment list ``GET .../seed``
    answers while the run is seeding, which the device reveals against (no work poll and no
    request for the list in between); for a run seeded by its cohort tree, ``"tree"`` instead: the
    head and the device's leaf proof (:func:`fedstats.wire.tree_seeding.leaf_answer`).
    """
    return await _checkin(path, run_id, req, request, wait)


router.add_api_route(
    "/v1/client/runs/{run_id}/checkin",
    checkin,
    methods=["POST"],
    route_class_override=direct_route(_checkin_direct, _plain_checkin),
    openapi_extra=CHECKIN_BODY,
    **DEVICE,
)


async def _report(
    path: DevicePath, run_id: str, index: int, req: SignedRequest, request: Request
) -> dict[str, Any]:
    """Store the device's report of a round (see :func:`report`); its answer."""
    data = json_body(req.body)
    count = data.get("count") if isinstance(data, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= 10**9:
        raise HTTPException(422, "body must be {vector: [int], count: int in [0, 10^9]}")
    cid, vector = req.client_id, data.get("vector")
    if req.nonce is not None and not req.stale:  # the common case: group-committed
        got = await path.uploads(
            runs.Upload((req.nonce.nonce, req.nonce.ts), run_id, index, cid, vector, count)
        )
        if got is None:
            raise HTTPException(401, "replayed request (nonce already used)")
        new = got
    else:  # one transaction: the nonce and the report

        def submit(tx: State) -> bool:
            return runs.submit_report(tx, run_id, index, cid, vector, count)

        new = bool(await path.offload(_signed_write, path, req, submit))
    # the driver is woken only when the round may be complete (not at every report)
    if new:
        path.wakeup.arrived(("round", run_id, index))
    # the device's next poll is answered from the cache, without the database
    path.cache.after_report(cid, req.population, run_id, index)
    request.scope["fedstats.work_cached"] = True  # DeviceWrites: the entry is already fresh
    path.counters["reports_accepted" if new else "reports_duplicate"] += 1
    # the transaction has committed: only now is the report acknowledged
    return {"accepted": True, "duplicate": not new}


async def _report_direct(request: Request, slow: Handler) -> Response:
    """:func:`report` without FastAPI's parameter models (a malformed path goes ``slow``)."""
    run_id = request.path_params.get("run_id", "")
    index = index_of(request.path_params.get("index", ""))
    if index is None or len(run_id) > 128:  # FastAPI's validation and its 422
        return await slow(request)
    path = devices_of(request)
    return JSONResponse(await _report(path, run_id, index, await path.auth(request), request))


def _plain_report(_scope: Any, params: dict[str, str]) -> bool:
    return index_of(params.get("index", "")) is not None and len(params.get("run_id", "")) <= 128


async def report(
    run_id: IdPath, index: IndexPath, req: Signed, request: Request, path: Devices
) -> dict[str, Any]:
    """Upload the device's report of a round (the sum of its records' reports, and their count)."""
    return await _report(path, run_id, index, req, request)


router.add_api_route(
    "/v1/client/runs/{run_id}/rounds/{index}/report",
    report,
    methods=["POST"],
    route_class_override=direct_route(_report_direct, _plain_report),
    openapi_extra=REPORT_BODY,
    **DEVICE,
)


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
    secret = request_key_secret(store, cfg.request_key_secret)
    path = DevicePath.build(store, cfg, counters, changes, wakeup, offload, secret)
    device = path.auth
    app.state.devices = path
    app.state.forget_client = device.forget
    app.state.device_auth = device
    app.state.upload_batcher = path.uploads
    app.state.poll_batcher = path.polls
    app.include_router(router)
    app.include_router(refusals.router)
    max_wait = cfg.max_wait

    async def next_work(
        cid: str, population: str, run_id: str, wait: float
    ) -> tuple[str, bytes] | None:
        """The device's work list once it has something to do (held up to ``wait`` s), or None.

        Something to do: an offer, a reveal, a round, or ``run_id`` finished (:func:`SecureRoutes`'
        held last stage). The device was verified by the request that asks.
        """
        req = SignedRequest(cid, b"", None, population)
        path.cache.polled(cid, population)

        async def ready() -> tuple[str, bytes] | None:
            tag, body = await path.polls.answer(req, path.cache.key(cid, population))
            work = json.loads(body)
            finished = any(f.get("run_id") == run_id for f in work.get("finished", ()))
            if work["offers"] or work["rounds"] or work.get("reveals") or finished:
                return tag, body
            return None

        return await changes.hold(population, min(wait, max_wait), ready)

    secure_routes = SecureRoutes(
        store,
        cast(Any, device.signed),
        cast(Any, use_nonce),
        json_body,
        counters,
        wakeup,
        changes=changes,
        population_of=device.population_of,
        max_wait=cfg.max_wait,
        offload=offload,
        next_work=next_work,
        away=path.cache.away,
        staged=path.cache.staged,
    )
    add_secure_routes(app, secure_routes)
    return path.cache
