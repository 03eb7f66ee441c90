"""DAP-09 endpoints (binary messages, DAP media types) and the interop test design's ``/internal/test`` API.

==========================================================  ===================  ============================
route                                                       caller               body in / out
==========================================================  ===================  ============================
``GET /hpke_config?task_id=``                               anyone               - / ``HpkeConfigList``
``PUT /tasks/{task-id}/reports``                            client               ``Report`` / -
``PUT /tasks/{task-id}/aggregation_jobs/{job-id}``          leader (token)       ``AggregationJobInitReq`` /
                                                                                 ``AggregationJobResp``
``POST /tasks/{task-id}/aggregate_shares``                  leader (token)       ``AggregateShareReq`` /
                                                                                 ``AggregateShare``
``PUT /tasks/{task-id}/collection_jobs/{job-id}``           collector (token)    ``CollectionReq`` / - (201)
``POST /tasks/{task-id}/collection_jobs/{job-id}``          collector (token)    - / ``Collection`` (200) or
                                                                                 nothing yet (202)
==========================================================  ===================  ============================

Ids in paths are unpadded base64url; tokens travel in ``DAP-Auth-Token`` (or ``Authorization: Bearer``).
A refused request is answered with a DAP problem document (``application/problem+json``, type
``urn:ietf:params:ppm:dap:error:<kind>``; DAP-09 §3.2), 503 with ``Retry-After`` when the helper cannot be
reached. The domain logic is :mod:`fedstats.service.domain.dap` and :mod:`~fedstats.service.domain.dap_leader`.

With ``dap_interop`` (off by default) the server also answers the interoperation test design's
provisioning endpoints for one role: ``aggregator`` (``ready``, ``endpoint_for_task``, ``add_task``),
``client`` (``ready``, ``upload``) or ``collector`` (``ready``, ``add_task``, ``collection_start``,
``collection_poll``); they take and return JSON and have no authentication, so they are for test rigs only.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Depends, FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool

from fedstats.dap import messages as m
from fedstats.dap.client import Client
from fedstats.dap.collector import Collector
from fedstats.dap.hpke import HpkeKeypair
from fedstats.dap.task import AUTH_HEADER, b64decode, b64encode
from fedstats.errors import FedstatsError, ParameterError, UnavailableError
from fedstats.service.domain import dap as domain
from fedstats.service.domain import dap_leader
from fedstats.service.domain.vdaf import vdaf_from_spec
from fedstats.service.store import Store

__all__ = ["INTEROP_ROLES", "Dap", "DapContext", "add_dap_routes", "problem", "router"]

INTEROP_ROLES = ("aggregator", "client", "collector")
PROBLEM = "application/problem+json"


def problem(kind: str, detail: str, status: int = 400, task_id: str | None = None) -> Response:
    """A DAP problem document (RFC 7807 with DAP's ``urn:ietf:params:ppm:dap:error:`` types)."""
    body: dict[str, Any] = {
        "type": f"urn:ietf:params:ppm:dap:error:{kind}",
        "title": kind,
        "detail": detail,
    }
    if task_id is not None:
        body["taskid"] = task_id
    headers = {"Retry-After": "5"} if status == 503 else None
    return Response(json.dumps(body), status_code=status, media_type=PROBLEM, headers=headers)


def _token(request: Request) -> str | None:
    got = request.headers.get(AUTH_HEADER)
    bearer = request.headers.get("authorization", "")
    if got is None and bearer.lower().startswith("bearer "):
        got = bearer[7:]
    return got


def _transport(ca: str | None) -> dap_leader.HelperCall:
    verify: ssl.SSLContext | bool = True
    if ca is not None:
        try:
            verify = ssl.create_default_context(cafile=ca)
        except (OSError, ssl.SSLError):
            raise ParameterError("vdaf_peer_ca", ca, "a readable CA certificate (PEM)") from None
    http = httpx.Client(verify=verify, timeout=120.0)

    def call(method: str, url: str, body: bytes, media_type: str, token: str) -> tuple[int, bytes]:
        try:
            resp = http.request(
                method, url, content=body, headers={"Content-Type": media_type, AUTH_HEADER: token}
            )
        except httpx.HTTPError as exc:
            raise UnavailableError(f"the helper at {url} cannot be reached: {exc}") from None
        return resp.status_code, resp.content

    return call


async def _guard(task_text: str, work: Callable[[bytes], Response]) -> Response:
    """Decode the task id, run ``work`` in a thread, map errors to DAP problem documents."""
    try:
        task_id = b64decode(task_text, "task_id", 32)
    except FedstatsError as exc:
        return problem("unrecognizedTask", str(exc), 404)
    try:
        return await run_in_threadpool(work, task_id)
    except domain.DapError as exc:
        return problem(exc.kind, str(exc), exc.status, task_text)
    except UnavailableError as exc:
        return problem("unavailable", str(exc), 503, task_text)
    except FedstatsError as exc:
        return problem("invalidMessage", str(exc), 400, task_text)


def _media(request: Request, want: str) -> Response | None:
    got = request.headers.get("content-type", "").split(";")[0].strip()
    if got != want:
        return problem("invalidMessage", f"Content-Type must be {want}, got {got!r}", 415)
    return None


async def _message(
    task_text: str,
    request: Request,
    media: str,
    work: Callable[[bytes, bytes, str | None], Response],
) -> Response:
    """A peer's message of type ``media`` to a task: ``work(task_id, body, bearer token)`` in :func:`_guard`."""
    bad = _media(request, media)
    body, token = await request.body(), _token(request)
    return bad or await _guard(task_text, lambda tid: work(tid, body, token))


@dataclass(frozen=True)
class DapContext:
    """What the DAP routes of one app share (``app.state.dap``, set by :func:`add_dap_routes`).

    Attributes
    ----------
    store : Store
        This aggregator's store.
    helper : HelperCall
        How the leader reaches the helper.
    batch_size : int
        Reports per aggregation job.
    """

    store: Store
    helper: dap_leader.HelperCall
    batch_size: int


def dap_context(request: Request) -> DapContext:
    """The app's :class:`DapContext` (``app.state.dap``)."""
    ctx: DapContext = request.app.state.dap
    return ctx


Dap = Annotated[DapContext, Depends(dap_context)]

router = APIRouter(include_in_schema=False)
"""The DAP-09 routes (binary bodies: not in ``/openapi.json``)."""


@router.get("/hpke_config")
async def hpke_config(request: Request, dap: Dap) -> Response:
    """The task's HPKE configurations (DAP-09 upload protocol: HPKE configuration; ``?task_id=``, base64url)."""
    text = request.query_params.get("task_id")
    if text is None:
        return problem(
            "missingTaskID",
            "GET /hpke_config needs ?task_id= (this server's configs are per task)",
        )

    def work(task_id: bytes) -> Response:
        body = domain.hpke_config_list(dap.store, task_id).encode()
        return Response(
            body,
            media_type=m.HpkeConfigList.MEDIA_TYPE,
            headers={"Cache-Control": "max-age=86400"},
        )

    return await _guard(text, work)


@router.put("/tasks/{task_id}/reports")
async def upload(task_id: str, request: Request, dap: Dap) -> Response:
    """A client's report (DAP-09 upload protocol): decrypted, checked and stored once per report id."""
    bad = _media(request, m.Report.MEDIA_TYPE)
    body = await request.body()

    def work(tid: bytes) -> Response:
        domain.upload(dap.store, tid, body)
        return Response(status_code=200)

    return bad or await _guard(task_id, work)


@router.put("/tasks/{task_id}/aggregation_jobs/{job_id}")
async def aggregation_job(task_id: str, job_id: str, request: Request, dap: Dap) -> Response:
    """The helper's side of an aggregation job (DAP-09 aggregation protocol; the leader's bearer token)."""

    def work(tid: bytes, body: bytes, token: str | None) -> Response:
        jid = b64decode(job_id, "aggregation-job-id", 16)
        out = domain.helper_init(dap.store, tid, jid, body, token)
        return Response(out, status_code=200, media_type=m.AggregationJobResp.MEDIA_TYPE)

    return await _message(task_id, request, m.AggregationJobInitReq.MEDIA_TYPE, work)


@router.post("/tasks/{task_id}/aggregate_shares")
async def aggregate_share(task_id: str, request: Request, dap: Dap) -> Response:
    """The helper's encrypted aggregate share of a batch (DAP-09 collection protocol).

    Refused unless the leader's report count and checksum equal the helper's.
    """

    def work(tid: bytes, body: bytes, token: str | None) -> Response:
        out = domain.helper_aggregate_share(dap.store, tid, body, token)
        return Response(out, media_type=m.AggregateShare.MEDIA_TYPE)

    return await _message(task_id, request, m.AggregateShareReq.MEDIA_TYPE, work)


@router.put("/tasks/{task_id}/collection_jobs/{job_id}")
async def create_collection(task_id: str, job_id: str, request: Request, dap: Dap) -> Response:
    """A collector's collection job on the leader (DAP-09 collection protocol; 201)."""

    def work(tid: bytes, body: bytes, token: str | None) -> Response:
        jid = b64decode(job_id, "collection-job-id", 16)
        dap_leader.create_collection(dap.store, tid, jid, body, token)
        return Response(status_code=201)

    return await _message(task_id, request, m.CollectionReq.MEDIA_TYPE, work)


@router.post("/tasks/{task_id}/collection_jobs/{job_id}")
async def poll_collection(task_id: str, job_id: str, request: Request, dap: Dap) -> Response:
    """Poll a collection job (DAP-09 collection protocol): 202 with ``Retry-After`` until it is done."""
    token = _token(request)

    def work(tid: bytes) -> Response:
        jid = b64decode(job_id, "collection-job-id", 16)
        out = dap_leader.poll_collection(
            dap.store, tid, jid, token, dap.helper, batch_size=dap.batch_size
        )
        if out is None:
            return Response(status_code=202, headers={"Retry-After": "1"})
        return Response(out, media_type=m.Collection.MEDIA_TYPE)

    return await _guard(task_id, work)


def add_dap_routes(
    app: FastAPI,
    store: Store,
    *,
    interop: str | None = None,
    peer_ca: str | None = None,
    batch_size: int = 1000,
) -> None:
    """Mount the DAP-09 routes (and, with ``interop``, that role's ``/internal/test`` endpoints).

    The routes are module-level (:data:`router`); what they share is kept in ``app.state.dap`` (a
    :class:`DapContext`).

    Raises
    ------
    ParameterError
        If ``interop`` is not None or one of :data:`INTEROP_ROLES`, or ``peer_ca`` is unreadable.
    """
    if interop is not None and interop not in INTEROP_ROLES:
        raise ParameterError("dap_interop", interop, f"one of {list(INTEROP_ROLES)} or none")
    app.state.dap = DapContext(store, _transport(peer_ca), batch_size)
    app.include_router(router)
    if interop is not None:
        _add_interop(app, store, interop)


def _json_route(
    app: FastAPI, path: str, handler: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    async def route(request: Request) -> Response:
        try:
            body = json.loads(await request.body() or b"{}")
            if not isinstance(body, dict):
                raise ParameterError("body", type(body).__name__, "a JSON object")
            out = await run_in_threadpool(handler, body)
        except (FedstatsError, ValueError, KeyError, TypeError) as exc:
            out = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        return Response(json.dumps(out), media_type="application/json")

    app.add_api_route(path, route, methods=["POST"], include_in_schema=False)


def _add_interop(app: FastAPI, store: Store, role: str) -> None:
    """The interop test design's endpoints for ``role`` (in-memory rig state for the collector)."""
    _json_route(app, "/internal/test/ready", lambda _: {})
    if role == "aggregator":
        _json_route(
            app,
            "/internal/test/endpoint_for_task",
            lambda _: {"status": "success", "endpoint": "/"},
        )

        def add_task(body: dict[str, Any]) -> dict[str, Any]:
            domain.add_task(store, body)
            return {"status": "success"}

        _json_route(app, "/internal/test/add_task", add_task)
    elif role == "client":

        def upload(body: dict[str, Any]) -> dict[str, Any]:
            spec = domain.vdaf_spec_from_interop(body["vdaf"])
            client = Client(
                leader=str(body["leader"]),
                helper=str(body["helper"]),
                task_id=b64decode(str(body["task_id"]), "task_id", 32),
                vdaf=vdaf_from_spec(spec),
                time_precision=int(body["time_precision"]),
            )
            measurement = body["measurement"]
            measurement = (
                [int(x) for x in measurement] if isinstance(measurement, list) else int(measurement)
            )
            client.upload(measurement, time=None if body.get("time") is None else int(body["time"]))
            return {"status": "success"}

        _json_route(app, "/internal/test/upload", upload)
    else:
        _add_collector_rig(app)


def _add_collector_rig(app: FastAPI) -> None:
    tasks: dict[str, Collector] = {}
    jobs: dict[str, tuple[Collector, bytes, m.Query]] = {}
    lock = threading.Lock()

    def add_task(body: dict[str, Any]) -> dict[str, Any]:
        task_id = b64decode(str(body["task_id"]), "task_id", 32)
        kp = HpkeKeypair.generate(int.from_bytes(os.urandom(1), "big"))
        collector = Collector(
            leader=str(body["leader"]),
            task_id=task_id,
            auth_token=str(body["collector_authentication_token"]),
            hpke_keypair=kp,
            vdaf=vdaf_from_spec(domain.vdaf_spec_from_interop(body["vdaf"])),
        )
        with lock:
            tasks[str(body["task_id"])] = collector
        return {"status": "success", "collector_hpke_config": b64encode(kp.config.encode())}

    def start(body: dict[str, Any]) -> dict[str, Any]:
        collector = tasks[str(body["task_id"])]
        q = body["query"]
        if int(q["type"]) == m.QUERY_TIME_INTERVAL:
            start_, duration = int(q["batch_interval_start"]), int(q["batch_interval_duration"])
            query = m.Query(1, batch_interval=m.Interval(start_, duration))
        elif int(q["type"]) == m.QUERY_FIXED_SIZE:
            by_id = int(q.get("subtype", 1)) == 0
            batch_id = b64decode(str(q["batch_id"]), "query.batch_id", 32) if by_id else None
            query = m.Query(2, fixed_size_query=m.FixedSizeQuery(batch_id))
        else:
            raise ParameterError("query.type", q["type"], "1 (time_interval) or 2 (fixed_size)")
        job_id = collector.start(query)
        with lock:
            jobs[b64encode(job_id)] = (collector, job_id, query)
        return {"status": "success", "handle": b64encode(job_id)}

    def poll(body: dict[str, Any]) -> dict[str, Any]:
        collector, job_id, query = jobs[str(body["handle"])]
        result = collector.poll(job_id, query)
        if result is None:
            return {"status": "in progress"}
        agg = result.aggregate
        return {
            "status": "complete",
            "batch_id": None if result.batch_id is None else b64encode(result.batch_id),
            "report_count": result.report_count,
            "interval_start": result.interval.start,
            "interval_duration": result.interval.duration,
            "result": [str(x) for x in agg] if isinstance(agg, list) else str(agg),
        }

    _json_route(app, "/internal/test/add_task", add_task)
    _json_route(app, "/internal/test/collection_start", start)
    _json_route(app, "/internal/test/collection_poll", poll)
