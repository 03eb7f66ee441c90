"""The two-aggregator mode's endpoints (Prio3, DAP-like): one router for the leader and the helper.

Who calls what (every route under ``/v1/vdaf/tasks``; JSON bodies, bytes as hex):

========================================  ==========================  =======================================
route                                     caller, authentication       effect
========================================  ==========================  =======================================
``POST /``                                operator (bearer token)      store an analyst's signed Prio3 task
                                                                       with this aggregator's secrets; 403
                                                                       if the envelope does not verify
``POST /{task_id}/rounds``                operator (the collector)     open the task's next round (derived)
``POST /{task_id}/abandon``               operator                     abandon it, release its reservation
``POST /{task_id}/join``                  device (signed request)      the envelope, the device's slot (the
                                                                       leader's), the rounds announced
``GET /{task_id}``                        operator                     the task (signed task: its charge
                                                                       and rounds; round: counts by fate)
``POST /{task_id}/reports``               device (signed request)      store this aggregator's report share;
                                                                       the leader answers a receipt that the
                                                                       helper requires (``leader_receipt``)
``POST /{task_id}/reports/bulk``          a relay of devices' signed   up to 1000 such uploads in one request,
                                          uploads (each verified)      each answered as alone
``POST /{task_id}/aggregate``             operator, on the leader      run aggregation jobs with the helper
``POST /{task_id}/jobs``                  the leader (peer token)      the helper's side of one job
``POST /{task_id}/collect``               operator (the collector)     freeze, return the noised share; 409
                                                                       while a report was never in a job
``GET /``                                 operator                     the signed tasks, their batches'
                                                                       counts and released results
``GET /{task_id}/summary``                operator                     one signed task, as listed
``POST /{task_id}/result``                operator, on the leader      keep the collector's released result
``POST /{task_id}/close``                 operator                     close it after its last collection
``GET /v1/vdaf/work?wait=S``              device (signed request)      its open Prio3 tasks and rounds,
                                                                       long-polled (``ETag``)
========================================  ==========================  =======================================

A device long-polls ``GET /v1/vdaf/work``: with ``If-None-Match`` naming the list it has, the request is
held up to ``wait`` seconds (at most :data:`MAX_WAIT`) until the list differs (a round opened or was
collected, a task was created or closed), else answered 304; the list is read again when this process
opens or closes something and every :data:`RECHECK` seconds (another process on the same database).

Device requests are signed as the device API's (:func:`fedstats.wire.auth.sign_request`) and checked by
the app's :class:`~fedstats.service.http.deps.DeviceAuth` dependency: an enrolled, unrevoked device of the
task's population (registered through ``POST /v1/client/register`` on each aggregator), timestamp inside
the server's replay window, nonce single-use (recorded in the upload's transaction, with the report).
Errors of the domain (:class:`~fedstats.errors.FedstatsError`) are mapped to statuses by the app's one
error map (:func:`fedstats.service.http.edge.status_of`); each request's store work is one transaction.
The aggregator-to-aggregator bearer token is shared by the two aggregators only (the helper stores its
SHA-256); both servers listen with TLS (``fedstats server --tls-cert``), so the token and the shares travel
encrypted. The domain logic is :mod:`fedstats.service.domain.vdaf`.

The routers are module-level (:data:`router`, :data:`work_router`); :func:`add_vdaf_routes` includes them
in an app of :func:`~fedstats.service.http.app.create_app` and keeps what they share in
``app.state.vdaf`` (a :class:`VdafContext`: the transport to the helper, the job size, the upload
batcher, the work-list wake-ups). Handlers receive the store (:data:`~fedstats.service.http.context.StoreDep`),
the operator (:data:`~fedstats.service.http.context.Operator`) and this context (:data:`Vdaf`) as
dependencies; the request bodies' schemas are in :mod:`fedstats.service.http.vdaf_schemas`.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from fedstats.errors import DataError, FedstatsError, ParameterError, UnavailableError
from fedstats.randomness import SecureGenerator
from fedstats.service.domain import vdaf as domain
from fedstats.service.domain import vdaf_admin
from fedstats.service.domain.changes import Changes, check_wait
from fedstats.service.domain.tasks import NotFoundError
from fedstats.service.domain.vdaf_group import Upload, upload_reports
from fedstats.service.http.batching import Batcher
from fedstats.service.http.context import Operator, StoreDep
from fedstats.service.http.deps import DeviceAuth, Signed, SignedRequest
from fedstats.service.http.edge import BadJSON, status_of, strict_loads
from fedstats.service.http.fastpath import Offload, direct_route
from fedstats.service.http.schemas import DEVICE
from fedstats.service.http.vdaf_schemas import (
    AGGREGATE_BODY,
    BULK_BODY,
    CREATE_BODY,
    JOB_BODY,
    JOIN_BODY,
    MAX_BULK,
    RESULT_BODY,
    ROUND_BODY,
    UPLOAD_BODY,
)
from fedstats.service.store import Store

__all__ = [
    "MAX_WAIT",
    "RECHECK",
    "Prio3UploadBatcher",
    "Transport",
    "Vdaf",
    "VdafContext",
    "add_vdaf_routes",
    "helper_transport",
    "router",
    "work_router",
]

MAX_WAIT = 25.0
"""Longest a device's ``GET /v1/vdaf/work`` is held (seconds)."""
RECHECK = 2.0
"""Seconds between two reads of a held work list (changes made by another server process)."""

# send(task_id, job) -> the helper's answer
Send = Callable[[str, dict[str, Any]], dict[str, Any]]
# (peer_url, peer_token) -> send
Transport = Callable[[str, str], Send]


RETRY_AFTER = 5.0
"""Seconds an operator is told to wait (``Retry-After``) when the Prio3 helper cannot be reached."""


def _retry_after(value: str | None) -> float:
    """The helper's own ``Retry-After`` in seconds (1 to 3600), else :data:`RETRY_AFTER`."""
    try:
        return min(3600.0, max(1.0, float(value))) if value else RETRY_AFTER
    except ValueError:
        return RETRY_AFTER


def _uploaded(done: domain.Uploaded) -> dict[str, Any]:
    """An upload's answer: accepted, whether it repeated an identical upload, the leader's receipt."""
    receipt = None if done.receipt is None else done.receipt.hex()
    return {"accepted": True, "duplicate": not done.new, "receipt": receipt}


class Prio3UploadBatcher(Batcher[Upload, domain.Uploaded]):
    """Group commit of Prio3 uploads (:func:`fedstats.service.domain.vdaf_group.upload_reports`).

    The uploads that arrive while the previous batch is written are written together, in one
    transaction (one commit), each with the answer or error it would get alone; a quiet server writes
    each upload at once (:class:`~fedstats.service.http.batching.Batcher`).
    """

    def write(self, items: list[Upload]) -> list[domain.Uploaded | BaseException]:
        """Write ``items`` (blocking, on the batcher's store thread)."""
        return upload_reports(self.store, items)


def helper_transport(ca: Path | str | None = None, *, timeout: float = 120.0) -> Transport:
    """The leader's HTTP transport to the helper (httpx, TLS verified against ``ca`` or the system store).

    Parameters
    ----------
    ca : path, optional
        CA certificate of the helper's TLS certificate (default: the system's trust store).
    timeout : float
        Seconds per job request.

    Returns
    -------
    callable
        ``transport(peer_url, peer_token)`` -> ``send(task_id, job) -> answer``; ``send`` raises
        :class:`~fedstats.errors.UnavailableError` when the helper cannot be reached or answers 429,
        502, 503 or 504 (the app answers 503 with ``Retry-After``; the job is retried by the next
        aggregation), :class:`~fedstats.errors.DataError` when it refuses the job.

    Raises
    ------
    ParameterError
        If ``ca`` is not a readable CA certificate.
    """
    verify: ssl.SSLContext | bool = True
    if ca is not None:
        try:
            verify = ssl.create_default_context(cafile=str(ca))
        except (OSError, ssl.SSLError):
            raise ParameterError("peer_ca", str(ca), "a readable CA certificate (PEM)") from None

    def transport(peer_url: str, token: str) -> Send:
        def send(task_id: str, job: dict[str, Any]) -> dict[str, Any]:
            try:
                r = httpx.post(
                    f"{peer_url}/v1/vdaf/tasks/{task_id}/jobs",
                    json=job,
                    headers={"Authorization": f"Bearer {token}"},
                    verify=verify,
                    timeout=timeout,
                )
            except httpx.HTTPError as exc:  # down, partitioned, timed out: retry later (503)
                raise UnavailableError(
                    f"Prio3 helper unreachable ({type(exc).__name__}: {exc}); the job is kept "
                    "and sent again when aggregation is retried",
                    retry_after=RETRY_AFTER,
                ) from None
            if r.status_code in (429, 502, 503, 504):  # the helper (or its proxy) is overloaded
                raise UnavailableError(
                    f"Prio3 helper unavailable: {r.status_code} {r.text[:300]}",
                    retry_after=_retry_after(r.headers.get("retry-after")),
                )
            if r.status_code != 200:
                raise DataError(f"helper refused the job: {r.status_code} {r.text[:300]}")
            out: dict[str, Any] = r.json()
            return out

        return send

    return transport


@dataclass(frozen=True)
class VdafContext:
    """What the two-aggregator routes of one app share (``app.state.vdaf``, set by :func:`add_vdaf_routes`).

    Attributes
    ----------
    send_to : Transport
        How the leader reaches the helper.
    batch_size : int
        Reports per aggregation job (default of ``POST /{task_id}/aggregate``), in [1, 100000].
    fresh : callable
        A fresh generator for each collection's noise.
    uploads : Prio3UploadBatcher
        The group commit of device uploads (one store thread: batches are written in turn).
    wake : Changes
        This process's changes of signed tasks: wakes the devices' held work polls.
    owner : str
        This process's name in the aggregation jobs' leases.
    """

    send_to: Transport
    batch_size: int
    fresh: Callable[[], Any]
    uploads: Prio3UploadBatcher
    wake: Changes
    owner: str

    async def change(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``fn(*args, **kwargs)`` (a change of signed tasks) off the event loop, then wake the work polls."""
        out: dict[str, Any] = await run(fn, *args, **kwargs)
        self.wake.bump()
        return out


def vdaf_context(request: Request) -> VdafContext:
    """The app's :class:`VdafContext` (``app.state.vdaf``)."""
    ctx: VdafContext = request.app.state.vdaf
    return ctx


Vdaf = Annotated[VdafContext, Depends(vdaf_context)]


def peer_token(authorization: Annotated[str | None, Header()] = None) -> str:
    """The leader's bearer token on the helper's job route (401 without one; checked by the domain)."""
    if not authorization or not authorization.startswith("Bearer "):
        raise HTTPException(401, "bearer token required", {"WWW-Authenticate": "Bearer"})
    return authorization[7:].strip()


PeerToken = Annotated[str, Depends(peer_token)]

router = APIRouter(prefix="/v1/vdaf/tasks", tags=["vdaf"])
"""The routes under ``/v1/vdaf/tasks``."""
work_router = APIRouter(tags=["vdaf"])
"""The devices' ``GET /v1/vdaf/work``."""


async def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn`` in a worker thread (a FedstatsError goes to the app's error map)."""
    return await asyncio.to_thread(fn, *args, **kwargs)


def _json(body: bytes) -> dict[str, Any]:
    try:
        data = strict_loads(body or b"{}")
    except BadJSON as exc:
        raise HTTPException(422, str(exc)) from None
    if not isinstance(data, dict):
        raise HTTPException(422, "body must be an object")
    return data


def _report_fields(d: dict[str, Any]) -> tuple[bytes, bytes, bytes | None]:
    """An upload body's public share, input share and leader receipt (ValueError if not hex)."""
    public = bytes.fromhex(str(d.get("public_share", "")))
    share = bytes.fromhex(str(d.get("input_share", "")))
    receipt = d.get("leader_receipt")
    return public, share, None if receipt is None else bytes.fromhex(str(receipt))


def _upload_of(
    task_id: str, d: dict[str, Any], fields: tuple[bytes, bytes, bytes | None], **who: Any
) -> Upload:
    public, share, leader_receipt = fields
    return Upload(
        task_id,
        report_id=d.get("report_id"),
        public_share=public,
        input_share=share,
        leader_receipt=leader_receipt,
        **who,
    )


def _nonce(use: Any) -> tuple[str, str, int] | None:
    return None if use is None else (use.client_id, use.nonce, use.ts)


@router.post("", openapi_extra=CREATE_BODY)
async def create(request: Request, store: StoreDep, actor: Operator, vdaf: Vdaf) -> dict[str, Any]:
    """Store an analyst's signed Prio3 task with this aggregator's secrets (operator)."""
    d = _json(await request.body())
    try:
        vk = bytes.fromhex(str(d.get("verify_key", "")))
    except ValueError:
        raise HTTPException(422, "verify_key must be hex") from None
    return await vdaf.change(
        domain.create_signed,
        store,
        d.get("envelope"),
        role=d.get("role"),
        verify_key=vk,
        peer_token=d.get("peer_token"),
        actor=actor,
    )


@router.post("/{task_id}/rounds", openapi_extra=ROUND_BODY)
async def open_round(
    task_id: str, request: Request, store: StoreDep, _op: Operator, vdaf: Vdaf
) -> dict[str, Any]:
    """Open the signed task's next round, derived from the task and the public sums (operator)."""
    d = _json(await request.body())
    return await vdaf.change(domain.open_round, store, task_id, d.get("round"), d.get("history"))


@router.post("/{task_id}/abandon")
async def abandon(task_id: str, store: StoreDep, actor: Operator, vdaf: Vdaf) -> dict[str, Any]:
    """Abandon a signed task before any collection: its reservation is released (operator)."""
    return await vdaf.change(domain.abandon_signed, store, task_id, actor)


@router.post("/{task_id}/join", openapi_extra=JOIN_BODY, **DEVICE)
async def join(task_id: str, request: Request, signed: Signed, store: StoreDep) -> dict[str, Any]:
    """A device joins a signed task: the envelope, its slot (leader), the rounds (signed request)."""
    device: DeviceAuth = request.app.state.device_auth
    out: dict[str, Any] = await run(
        domain.join_signed,
        store,
        task_id,
        client_id=signed.client_id,
        population=signed.population,
        nonce=_nonce(signed.nonce),
        confirm=lambda tx: device.confirm(tx, signed),
    )
    return out


def _info(store: Store, task_id: str) -> dict[str, Any]:
    try:
        return domain.task_info(store, task_id)
    except NotFoundError:
        return domain.signed_info(store, task_id)


@router.get("/{task_id}")
async def info(task_id: str, store: StoreDep, _op: Operator) -> dict[str, Any]:
    """A round task (report counts by fate) or a signed task (charge, rounds) (operator)."""
    out: dict[str, Any] = await run(_info, store, task_id)
    return out


async def upload_effect(
    task_id: str, signed: SignedRequest, device: DeviceAuth, vdaf: VdafContext
) -> dict[str, Any]:
    """Store one device's report share (through the group commit); its answer."""
    d = _json(signed.body)
    try:
        fields = _report_fields(d)
    except ValueError:
        raise HTTPException(
            422, "public_share, input_share and leader_receipt must be hex"
        ) from None
    done: domain.Uploaded = await vdaf.uploads(
        _upload_of(
            task_id,
            d,
            fields,
            client_id=signed.client_id,
            population=signed.population,
            nonce=_nonce(signed.nonce),
            confirm=lambda tx: device.confirm(tx, signed),  # a stale cached device row
        )
    )
    return _uploaded(done)


async def upload_fast(request: Request, slow: Any) -> Response:  # noqa: ARG001 - any path
    """The upload route's direct handler: the request's own verification, no dependency resolution."""
    # the route has only a str path parameter: every request is well formed for it
    device: DeviceAuth = request.app.state.device_auth
    task_id = str(request.path_params.get("task_id", ""))
    signed = await device(request)
    return JSONResponse(await upload_effect(task_id, signed, device, vdaf_context(request)))


async def upload(task_id: str, request: Request, signed: Signed, vdaf: Vdaf) -> dict[str, Any]:
    """A device's report share (signed request); the leader answers its receipt."""
    return await upload_effect(task_id, signed, request.app.state.device_auth, vdaf)


# a device's upload goes straight to its handler (DirectRoutes), past the router's scan
router.add_api_route(
    "/{task_id}/reports",
    upload,
    methods=["POST"],
    route_class_override=direct_route(upload_fast, lambda _s, _p: True),
    openapi_extra=UPLOAD_BODY,
    **DEVICE,
)


def _bulk_item(task_id: str, item: Any, device: DeviceAuth) -> Upload:
    """One relayed upload, verified as its own request would be (HTTPException if refused)."""
    if (
        not isinstance(item, dict)
        or not isinstance(item.get("headers"), dict)
        or not isinstance(item.get("body"), str)
    ):
        raise HTTPException(422, "reports[]: objects {headers, body}")
    headers = {str(k).lower(): str(v) for k, v in item["headers"].items()}
    body = item["body"].encode()
    path = f"/v1/vdaf/tasks/{task_id}/reports"  # what each device signed
    cid, use, population = device.verify("POST", path, headers, body, None)
    try:
        d = strict_loads(body)
        if not isinstance(d, dict):
            raise HTTPException(422, "reports[].body must be an object")
        fields = _report_fields(d)
    except (BadJSON, ValueError):
        raise HTTPException(
            422, "reports[].body: JSON with hex public_share, input_share and leader_receipt"
        ) from None
    return _upload_of(task_id, d, fields, client_id=cid, population=population, nonce=_nonce(use))


def _bulk(store: Store, task_id: str, items: list[Any], device: DeviceAuth) -> list[dict[str, Any]]:
    """Verify each relayed upload as its own request would be, then store them as one batch."""
    results: list[dict[str, Any] | None] = [None] * len(items)
    batch: list[Upload] = []
    where: list[int] = []
    for i, item in enumerate(items):
        try:
            batch.append(_bulk_item(task_id, item, device))
        except HTTPException as exc:
            results[i] = {"status": exc.status_code, "detail": exc.detail}
            continue
        where.append(i)
    for i, got in zip(where, upload_reports(store, batch), strict=True):
        if isinstance(got, FedstatsError):
            results[i] = {"status": status_of(got), "detail": str(got)}
        elif isinstance(got, BaseException):
            results[i] = {"status": 500, "detail": "internal error"}
        else:
            results[i] = {"status": 200, **_uploaded(got)}
    return [r if r is not None else {"status": 500, "detail": "not processed"} for r in results]


@router.post("/{task_id}/reports/bulk", openapi_extra=BULK_BODY)
async def upload_bulk(task_id: str, request: Request, store: StoreDep) -> dict[str, Any]:
    """Devices' signed uploads relayed in one request; each verified and answered as alone.

    Each item is a device's ``POST /{task_id}/reports`` as it signed it: its signature headers and
    its body (JSON as a string). An ingestion front end can gather the uploads that reach it and
    forward them here in one request: the aggregator checks every device's signature, nonce and
    report as for the single route and writes the batch with one commit
    (:func:`fedstats.service.domain.vdaf_group.upload_reports`). A relay sees what it relays: one
    that forwards both shares of a report learns the measurement, so each aggregator's uploads go
    through that aggregator's own front end. The answer ``{"results": [...]}`` holds, per item in
    order, ``{"status": 200, "accepted", "duplicate", "receipt"}`` or ``{"status", "detail"}`` (the
    single route's status and message).
    """
    device: DeviceAuth = request.app.state.device_auth
    d = _json(await request.body())
    items = d.get("reports")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BULK:
        raise HTTPException(422, f"reports: a list of 1 to {MAX_BULK} signed uploads")
    out: list[dict[str, Any]] = await run(_bulk, store, task_id, items, device)
    return {"results": out}


@router.post("/{task_id}/aggregate", openapi_extra=AGGREGATE_BODY)
async def aggregate(
    task_id: str, request: Request, store: StoreDep, _op: Operator, vdaf: Vdaf
) -> dict[str, Any]:
    """Run aggregation jobs over the pending reports (operator, on the leader)."""
    d = _json(await request.body())
    size = d.get("batch_size", vdaf.batch_size)
    out: dict[str, Any] = await run(
        domain.aggregate_pending, store, task_id, vdaf.send_to, batch_size=size, owner=vdaf.owner
    )
    return out


@router.post("/{task_id}/jobs", openapi_extra=JOB_BODY)
async def job(task_id: str, request: Request, store: StoreDep, token: PeerToken) -> dict[str, Any]:
    """The helper's side of an aggregation job (the leader, with the peer token)."""
    await run(domain.check_peer_token, store, task_id, token)
    d = _json(await request.body())
    out: dict[str, Any] = await run(domain.helper_job, store, task_id, d)
    return out


@router.post("/{task_id}/collect")
async def collect(task_id: str, store: StoreDep, _op: Operator, vdaf: Vdaf) -> dict[str, Any]:
    """Freeze the task and return this aggregator's noised aggregate share (operator, collector)."""
    return await vdaf.change(
        domain.aggregate_and_collect,
        store,
        task_id,
        vdaf.send_to,
        vdaf.fresh,
        batch_size=vdaf.batch_size,
        owner=vdaf.owner,
    )


@router.get("")
async def list_tasks(
    store: StoreDep, _op: Operator, population: str | None = None
) -> dict[str, Any]:
    """The signed Prio3 tasks: batches (uploaded, aggregated, rejected), results (operator)."""
    items = await run(vdaf_admin.list_signed, store, population)
    return {"items": items, "total": len(items)}


@router.get("/{task_id}/summary")
async def summary(task_id: str, store: StoreDep, _op: Operator) -> dict[str, Any]:
    """One signed Prio3 task as listed (operator)."""
    out: dict[str, Any] = await run(vdaf_admin.signed_summary, store, task_id)
    return out


@router.post("/{task_id}/result", openapi_extra=RESULT_BODY)
async def result(
    task_id: str, request: Request, store: StoreDep, actor: Operator
) -> dict[str, Any]:
    """Keep the collector's released result of a signed task, once (operator, on the leader)."""
    d = _json(await request.body())
    out: dict[str, Any] = await run(vdaf_admin.store_result, store, task_id, d.get("result"), actor)
    return out


@router.post("/{task_id}/close")
async def close(task_id: str, store: StoreDep, actor: Operator, vdaf: Vdaf) -> dict[str, Any]:
    """Close a signed task after its last collection: devices stop answering it (operator)."""
    return await vdaf.change(vdaf_admin.close_signed, store, task_id, actor)


@work_router.get("/v1/vdaf/work", **DEVICE)
async def work(
    request: Request, signed: Signed, store: StoreDep, vdaf: Vdaf, wait: float = 0.0
) -> Response:
    """The device's open Prio3 tasks and rounds (JSON, ``ETag``), long-polled (signed request)."""
    check_wait(wait)
    loop = asyncio.get_running_loop()
    vdaf.wake.bind(loop)
    known = request.headers.get("if-none-match")
    end = loop.time() + min(wait, MAX_WAIT)
    while True:
        tag, body = await run(vdaf_admin.device_work, store, signed.population)
        if tag != known:
            return Response(body, media_type="application/json", headers={"ETag": tag})
        left = end - loop.time()
        if left <= 0:
            return Response(status_code=304, headers={"ETag": tag})
        await vdaf.wake.wait(signed.population, min(left, RECHECK))


def add_vdaf_routes(
    app: FastAPI,
    store: Store,
    *,
    peer_ca: Path | str | None = None,
    transport: Transport | None = None,
    batch_size: int = 1000,
    rng_factory: Callable[[], Any] | None = None,
) -> None:
    """Serve the two-aggregator mode on ``app`` (what ``fedstats server --vdaf`` does).

    Parameters
    ----------
    app : FastAPI
        The server's app (:func:`fedstats.service.http.app.create_app`): its device registration,
        operators and error handling are shared.
    store : Store
        The app's store (``app.state.store``; migrated to ``0008_vdaf_signed``).
    peer_ca : path, optional
        CA certificate of the helper's TLS certificate, when this server leads tasks (default: the
        system's trust store).
    transport : callable, optional
        How the leader reaches the helper (default :func:`helper_transport` with ``peer_ca``).
    batch_size : int
        Reports per aggregation job, in [1, 100000].
    rng_factory : callable, optional
        A fresh generator for each collection's noise (default: :class:`~fedstats.randomness.SecureGenerator`
        keyed from OS entropy); tests pass a seeded one.

    Raises
    ------
    ParameterError
        If ``batch_size`` is out of range, ``store`` is not the app's, or ``peer_ca`` is unreadable.
    """
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or not 1 <= batch_size <= 100_000
    ):
        raise ParameterError("batch_size", batch_size, "an integer in [1, 100000]")
    if getattr(app.state, "store", None) is not store:
        raise ParameterError("store", store, "the app's store (app.state.store)")
    app.state.vdaf = VdafContext(
        send_to=transport or helper_transport(peer_ca),
        batch_size=batch_size,
        fresh=rng_factory or (lambda: SecureGenerator(os.urandom(32))),
        uploads=Prio3UploadBatcher(store, Offload(1)),  # one store thread: batches in turn
        wake=Changes(),
        owner=f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"[:64],
    )
    app.include_router(router)
    app.include_router(work_router)
