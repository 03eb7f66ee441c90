"""The two-aggregator mode's endpoints (Prio3, DAP-like): one router for the leader and the helper.

Who calls what (every route under ``/v1/vdaf/tasks``; JSON bodies, bytes as hex):

========================================  ==========================  =======================================
route                                     caller, authentication       effect
========================================  ==========================  =======================================
``POST /``                                operator (bearer token)      create the task on this aggregator
``GET /{task_id}``                        operator                     the task, its report counts by fate
``POST /{task_id}/reports``               device (signed request)      store this aggregator's report share
``POST /{task_id}/aggregate``             operator, on the leader      run aggregation jobs with the helper
``POST /{task_id}/jobs``                  the leader (peer token)      the helper's side of one job
``POST /{task_id}/collect``               operator (the collector)     freeze, return the noised share
========================================  ==========================  =======================================

Device requests are signed as the device API's (:func:`fedstats.wire.auth.sign_request`): an enrolled,
unrevoked device of the task's population (registered through ``POST /v1/client/register`` on each
aggregator), timestamp inside the replay window, nonce single-use (recorded in the upload's transaction).
The aggregator-to-aggregator bearer token is shared by the two aggregators only (the helper stores its
SHA-256); both servers listen with TLS (``fedstats server --tls-cert``), so the token and the shares travel
encrypted. The domain logic is :mod:`fedstats.service.domain.vdaf`.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, FastAPI, Header, HTTPException, Request
from sqlalchemy import select

from fedstats.errors import DataError, FedstatsError, ParameterError, SecurityError
from fedstats.randomness import SecureGenerator
from fedstats.service.domain import vdaf as domain
from fedstats.service.domain.tasks import ConflictError, NotFoundError
from fedstats.service.http.edge import BadJSON, strict_loads
from fedstats.service.store import Store
from fedstats.service.store.tables import Client, Operator
from fedstats.wire import auth

__all__ = ["Transport", "add_vdaf_routes", "helper_transport", "vdaf_router"]

# send(task_id, job) -> the helper's answer
Send = Callable[[str, dict[str, Any]], dict[str, Any]]
# (peer_url, peer_token) -> send
Transport = Callable[[str, str], Send]


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
        :class:`~fedstats.errors.DataError` when the helper refuses the job or is unreachable.
    """
    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cafile=str(ca)) if ca is not None else True
    )

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
            except httpx.HTTPError as exc:
                raise DataError(f"helper unreachable: {exc}") from None
            if r.status_code != 200:
                raise DataError(f"helper refused the job: {r.status_code} {r.text[:300]}")
            out: dict[str, Any] = r.json()
            return out

        return send

    return transport


def _status(exc: FedstatsError) -> int:
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, SecurityError):
        return 403
    return 422


def vdaf_router(
    store: Store,
    *,
    replay_window: float = 300.0,
    transport: Transport | None = None,
    batch_size: int = 1000,
    rng_factory: Callable[[], Any] | None = None,
) -> APIRouter:
    """The two-aggregator mode's router over this aggregator's ``store``.

    Parameters
    ----------
    store : Store
        This aggregator's database (migrated to ``0007_vdaf``).
    replay_window : float
        Seconds a signed device request's timestamp may differ from the clock (the server's setting).
    transport : callable, optional
        How the leader reaches the helper (default :func:`helper_transport` with the system trust store).
    batch_size : int
        Reports per aggregation job, in [1, 100000].
    rng_factory : callable, optional
        A fresh generator for each collection's noise (default: :class:`~fedstats.randomness.SecureGenerator`
        keyed from OS entropy); tests pass a seeded one.

    Returns
    -------
    fastapi.APIRouter
        Include it in the app (``app.include_router(vdaf_router(store, ...))``).
    """
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or not 1 <= batch_size <= 100_000
    ):
        raise ParameterError("batch_size", batch_size, "an integer in [1, 100000]")
    send_to = transport or helper_transport()
    fresh = rng_factory or (lambda: SecureGenerator(os.urandom(32)))
    router = APIRouter(prefix="/v1/vdaf/tasks", tags=["vdaf"])

    async def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except FedstatsError as exc:
            raise HTTPException(_status(exc), str(exc)) from None

    def _json(body: bytes) -> Any:
        try:
            data = strict_loads(body or b"{}")
        except BadJSON as exc:
            raise HTTPException(422, str(exc)) from None
        if not isinstance(data, dict):
            raise HTTPException(422, "body must be an object")
        return data

    def _operator(token: str) -> str:
        with store.session() as s:
            name = s.execute(
                select(Operator.name).where(Operator.token_hash == auth.hash_token(token))
            ).scalar()
        if name is None:
            raise SecurityError("unknown token")
        return str(name)

    async def operator(authorization: str | None) -> str:
        if not authorization or not authorization.startswith("Bearer "):
            raise HTTPException(401, "bearer token required", {"WWW-Authenticate": "Bearer"})
        try:
            return str(await asyncio.to_thread(_operator, authorization[7:].strip()))
        except SecurityError:
            raise HTTPException(401, "unknown token", {"WWW-Authenticate": "Bearer"}) from None

    def _device(
        method: str, path: str, headers: Any, body: bytes
    ) -> tuple[str, str, tuple[str, str, float]]:
        """Check a signed device request: (client id, population, nonce row)."""
        cid = headers.get(auth.HEADER_CLIENT)
        ts = headers.get(auth.HEADER_TIMESTAMP)
        nonce = headers.get(auth.HEADER_NONCE)
        sig = headers.get(auth.HEADER_SIGNATURE)
        if not (cid and ts and nonce and sig) or len(nonce) > 64 or len(cid) > 128:
            raise HTTPException(401, "signed request headers required")
        try:
            t = auth.check_timestamp(ts, replay_window)
        except SecurityError as exc:
            raise HTTPException(401, str(exc)) from None
        with store.session() as s:
            c = s.get(Client, cid)
        if c is None:
            raise HTTPException(401, "unknown client")
        if float(c.not_after) < time.time():
            raise HTTPException(401, "client certificate expired")
        try:
            auth.verify_signature(
                c.public_key, auth.signing_payload(method, path, ts, nonce, body), sig
            )
        except SecurityError:
            raise HTTPException(401, "bad signature") from None
        if c.revoked_at is not None:
            raise HTTPException(403, "device revoked by an operator")
        return str(cid), str(c.population), (str(cid), str(nonce), t)

    @router.post("")
    async def create(
        request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> dict[str, Any]:
        """Create a Prio3 task on this aggregator (operator)."""
        await operator(authorization)
        d = _json(await request.body())
        try:
            vk = bytes.fromhex(str(d.get("verify_key", "")))
            ctx = bytes.fromhex(str(d.get("ctx", "")))
        except ValueError:
            raise HTTPException(422, "verify_key and ctx must be hex") from None
        try:
            noise = domain.Noise.from_json(d.get("noise"))
        except ParameterError as exc:
            raise HTTPException(422, str(exc)) from None
        out: dict[str, Any] = await run(
            domain.create_task,
            store,
            task_id=d.get("task_id"),
            role=d.get("role"),
            vdaf=d.get("vdaf") or {},
            verify_key=vk,
            ctx=ctx,
            peer_url=d.get("peer_url"),
            peer_token=d.get("peer_token"),
            population=d.get("population", "default"),
            min_batch_size=d.get("min_batch_size", 1),
            noise=noise,
        )
        return out

    @router.get("/{task_id}")
    async def info(
        task_id: str, authorization: Annotated[str | None, Header()] = None
    ) -> dict[str, Any]:
        """The task and its reports' counts by status and rejection reason (operator)."""
        await operator(authorization)
        out: dict[str, Any] = await run(domain.task_info, store, task_id)
        return out

    @router.post("/{task_id}/reports")
    async def upload(task_id: str, request: Request) -> dict[str, Any]:
        """A device's report share (signed request)."""
        body = await request.body()
        cid, population, nonce = await asyncio.to_thread(
            _device, request.method, request.url.path, request.headers, body
        )
        d = _json(body)
        try:
            public = bytes.fromhex(str(d.get("public_share", "")))
            share = bytes.fromhex(str(d.get("input_share", "")))
        except ValueError:
            raise HTTPException(422, "public_share and input_share must be hex") from None
        new = await run(
            domain.upload_report,
            store,
            task_id,
            client_id=cid,
            population=population,
            report_id=d.get("report_id"),
            public_share=public,
            input_share=share,
            nonce=nonce,
        )
        return {"accepted": True, "duplicate": not new}

    def _drive(task_id: str, size: int) -> dict[str, int]:
        with store.engine.connect() as conn:
            row = domain._task_row(conn, task_id)
        if row["role"] != "leader":
            return {"jobs": 0, "accepted": 0, "rejected": 0}
        send = send_to(str(row["peer_url"]), str(row["peer_token"]))
        return domain.run_leader_jobs(store, task_id, send, batch_size=size)

    @router.post("/{task_id}/aggregate")
    async def aggregate(
        task_id: str, request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> dict[str, Any]:
        """Run aggregation jobs over the pending reports (operator, on the leader)."""
        await operator(authorization)
        d = _json(await request.body())
        out: dict[str, Any] = await run(_drive, task_id, d.get("batch_size", batch_size))
        return out

    @router.post("/{task_id}/jobs")
    async def job(
        task_id: str, request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> dict[str, Any]:
        """The helper's side of an aggregation job (the leader, with the peer token)."""
        if not authorization or not authorization.startswith("Bearer "):
            raise HTTPException(401, "bearer token required", {"WWW-Authenticate": "Bearer"})
        await run(domain.check_peer_token, store, task_id, authorization[7:].strip())
        d = _json(await request.body())
        out: dict[str, Any] = await run(domain.helper_job, store, task_id, d)
        return out

    def _collect(task_id: str) -> dict[str, Any]:
        _drive(task_id, batch_size)  # the leader finishes every job first
        return domain.collect(store, task_id, fresh())

    @router.post("/{task_id}/collect")
    async def collect(
        task_id: str, authorization: Annotated[str | None, Header()] = None
    ) -> dict[str, Any]:
        """Freeze the task and return this aggregator's noised aggregate share (operator, collector)."""
        await operator(authorization)
        out: dict[str, Any] = await run(_collect, task_id)
        return out

    return router


def add_vdaf_routes(
    app: FastAPI,
    store: Store,
    *,
    peer_ca: Path | str | None = None,
    batch_size: int = 1000,
    replay_window: float = 300.0,
) -> None:
    """Serve the two-aggregator mode on ``app`` (what ``fedstats server --vdaf`` does).

    Parameters
    ----------
    app : FastAPI
        The server's app (:func:`fedstats.service.http.app.create_app`): its device registration,
        operators and error handling are shared.
    store : Store
        The app's store.
    peer_ca : path, optional
        CA certificate of the helper's TLS certificate, when this server leads tasks (default: the
        system's trust store).
    batch_size : int
        Reports per aggregation job, in [1, 100000].
    replay_window : float
        The server's replay window for signed device requests (``ServerSettings.replay_window``).
    """
    app.include_router(
        vdaf_router(
            store,
            replay_window=replay_window,
            transport=helper_transport(peer_ca),
            batch_size=batch_size,
        )
    )
