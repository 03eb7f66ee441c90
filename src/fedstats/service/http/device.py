"""The client endpoints of the server: registration, work, check-in and reports (signed by devices).

Every request is signed by an enrolled device (:mod:`fedstats.wire.auth`); the secure-run endpoints are added by
:mod:`fedstats.service.http.secure`. They are in the OpenAPI description (tag ``device``) with their raw bodies declared
(:data:`.schemas.DEVICE`), so that schema-driven tests exercise them signed.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from fedstats.errors import SecurityError
from fedstats.service.domain import runs, tasks
from fedstats.service.domain.changes import Changes, Wakeup, check_wait
from fedstats.service.http.edge import BadJSON, strict_loads
from fedstats.service.http.schemas import (
    CHECKIN_BODY,
    DEVICE,
    REGISTER_BODY,
    REPORT_BODY,
    IdPath,
    IndexPath,
)
from fedstats.service.http.secure import add_secure_routes
from fedstats.service.store import Store
from fedstats.service.store.tables import Authority, Client, Nonce
from fedstats.wire import auth

__all__ = ["Offload", "add_client_routes"]

T = TypeVar("T")

_REREAD = 5.0  # seconds an enrolled device's cached row (key, revocation) is trusted


class Offload:
    """Runs the blocking store work of device requests on a bounded pool of threads.

    The event loop never waits on the database; at most ``threads`` requests' store work runs at once,
    the rest queue here. Fewer threads contend less for the interpreter lock: the store work is short
    (local transactions of a few statements) and mostly holds that lock. ``fedstats server
    --store-threads`` sets the number; ``benchmarks/service_secagg.py --store-threads`` measures it.

    Parameters
    ----------
    threads : int
        Threads in the pool, >= 1.
    """

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a pool thread; the caller awaits its result (or exception)."""
        if self._pool is None:  # first use, or the app was started again after a stop (tests do)
            self._pool = ThreadPoolExecutor(
                max_workers=self._threads, thread_name_prefix="fedstats-store"
            )
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, functools.partial(fn, *args)
        )

    def close(self) -> None:
        """Stop the pool's threads once their current work is done (queued work is dropped)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def add_client_routes(
    app: FastAPI,
    store: Store,
    cfg: Any,
    counters: dict[str, float],
    *,
    changes: Changes,
    wakeup: Wakeup,
    offload: Offload,
) -> None:
    """Add the client endpoints (and the secure-run ones) to ``app``.

    Parameters
    ----------
    app : FastAPI
    store : Store
    cfg : ServerSettings
        The server's settings (replay window, long-poll bounds).
    counters : dict
        The server's metrics counters.
    changes : Changes
        The run driver's state transitions, which wake long-polling ``GET /v1/client/work`` requests.
    wakeup : Wakeup
        Set after each device message is committed, so the driver closes a round or stage at once.
    offload : Offload
        Runs the requests' blocking store work.
    """
    # -- client side (signed requests; not part of the admin OpenAPI description)
    # enrolled clients: id -> (public key, not_after, population, revoked, read at); an operator may
    # revoke or re-key a device (admin API), so an entry is re-read after _REREAD seconds, and dropped
    # at once when this process revoked it (app.state.forget_client)
    known: dict[str, tuple[str, float, str, bool, float]] = {}
    app.state.forget_client = lambda cid: known.pop(cid, None)

    def _client(cid: str) -> tuple[str, float, str, bool, float] | None:
        got = known.get(cid)
        if got is None or time.monotonic() - got[4] > _REREAD:
            with store.session() as s:
                c = s.get(Client, cid)
            if c is None:
                return None
            got = (
                c.public_key,
                float(c.not_after),
                c.population,
                c.revoked_at is not None,
                time.monotonic(),
            )
            if len(known) > 100_000:
                known.clear()
            known[cid] = got
        return got

    async def enrolled(cid: str) -> tuple[str, float, str, bool, float]:
        """The enrolled row of a client whose request was just verified (the cache may have been cleared)."""
        got = known.get(cid)
        if got is None:
            got = await offload(_client, cid)
        if got is None:  # pragma: no cover - rows are never deleted
            raise HTTPException(401, "unknown client")
        return got

    def _verify(
        method: str, path: str, headers: Any, body: bytes, public_key: str | None
    ) -> tuple[str, Nonce | None]:
        """Check a signed request; return the client id and the nonce row to record.

        For a state-changing request the handler adds the nonce row in the transaction of the
        request's effect (single use); for a GET it is None.
        """
        cid = headers.get(auth.HEADER_CLIENT)
        ts = headers.get(auth.HEADER_TIMESTAMP)
        nonce = headers.get(auth.HEADER_NONCE)
        sig = headers.get(auth.HEADER_SIGNATURE)
        revoked = False
        if not (cid and ts and nonce and sig) or len(nonce) > 64 or len(cid) > 128:
            raise HTTPException(401, "signed request headers required")
        try:  # a finite number of seconds inside the replay window (NaN never is)
            t = auth.check_timestamp(ts, cfg.replay_window)
        except SecurityError as exc:
            raise HTTPException(401, str(exc)) from None
        if public_key is None:
            c = _client(cid)
            if c is None:
                raise HTTPException(401, "unknown client")
            if c[1] < time.time():
                raise HTTPException(401, "client certificate expired")
            public_key, revoked = c[0], c[3]
        try:
            auth.verify_signature(
                public_key, auth.signing_payload(method, path, ts, nonce, body), sig
            )
        except SecurityError:
            raise HTTPException(401, "bad signature") from None
        if revoked:  # told only to the device itself (its signature verified)
            raise HTTPException(403, "device revoked by an operator")
        # state-changing requests are single-use: the nonce is recorded inside the window, in the
        # transaction of the request's effect (one commit, and a request cut off before its effect
        # committed leaves its nonce unused for the retry). GETs are read-only (a replay learns nothing
        # TLS did not already protect), so polls cost no write.
        return str(cid), (None if method == "GET" else Nonce(client_id=cid, nonce=nonce, ts=t))

    def _use(s: Session, nonce: Nonce | None) -> None:
        """Record ``nonce`` in the open transaction of ``s``, or refuse the request as a replay."""
        if nonce is None:
            return
        # no savepoint: a replay fails the whole request, whose transaction then rolls back
        try:
            s.execute(
                insert(Nonce).values(client_id=nonce.client_id, nonce=nonce.nonce, ts=nonce.ts)
            )
        except IntegrityError:
            raise HTTPException(401, "replayed request (nonce already used)") from None

    async def signed(
        request: Request, public_key: str | None = None
    ) -> tuple[str, bytes, Nonce | None]:
        body = await request.body()
        args = (request.method, request.url.path, request.headers, body, public_key)
        cached = known.get(request.headers.get(auth.HEADER_CLIENT) or "")
        if public_key is None and cached is not None and time.monotonic() - cached[4] <= _REREAD:
            # an enrolled device seen before: no database access, one signature check (about
            # 0.1 ms), done on the event loop rather than through a worker thread
            cid, nonce = _verify(*args)
        else:
            cid, nonce = await offload(_verify, *args)
        return cid, body, nonce

    def _json(body: bytes) -> Any:
        try:  # finite numbers only, bounded nesting (422 naming the field)
            return strict_loads(body or b"{}")
        except BadJSON as exc:
            raise HTTPException(422, str(exc)) from None

    @app.post("/v1/client/register", openapi_extra=REGISTER_BODY, **DEVICE)
    async def register(request: Request) -> dict[str, Any]:
        body = await request.body()
        data = _json(body)
        if not isinstance(data, dict):
            raise HTTPException(422, "body must be an object")
        cert = auth.Certificate.from_dict(data.get("certificate"))

        def trust() -> dict[str, str]:
            with store.session() as s:
                return {a.id: a.public_key for a in s.execute(select(Authority)).scalars()}

        try:
            auth.verify_certificate(cert, await offload(trust))
        except SecurityError as exc:
            raise HTTPException(401, str(exc)) from None
        if request.headers.get(auth.HEADER_CLIENT) != cert.body["client_id"]:
            raise HTTPException(401, "client id does not match the certificate")
        _, nonce = await offload(
            _verify,
            request.method,
            request.url.path,
            request.headers,
            body,
            str(cert.body["public_key"]),
        )

        def store_client() -> None:
            with store.session() as s, s.begin():
                _use(s, nonce)
                c = s.get(Client, cert.body["client_id"])
                if c is not None and c.revoked_at is not None:
                    raise SecurityError("device revoked by an operator")
                if c is not None and c.public_key != cert.body["public_key"]:
                    raise SecurityError("a different key is enrolled under this client id")
                if c is None:
                    s.add(
                        Client(
                            id=str(cert.body["client_id"]),
                            public_key=str(cert.body["public_key"]),
                            population=str(cert.body["population"]),
                            authority=str(cert.body["authority"]),
                            not_after=float(cert.body["not_after"]),
                            enrolled_at=time.time(),
                            certificate=json.dumps(cert.as_dict()),
                        )
                    )
                elif c.certificate is None:  # enrolled before certificates were kept
                    c.certificate = json.dumps(cert.as_dict())

        await offload(store_client)
        return {"client_id": cert.body["client_id"], "population": cert.body["population"]}

    @app.get("/v1/client/work", **DEVICE)
    async def work(request: Request, wait: float = 0.0) -> Response:
        """The device's work list (JSON, with an ``ETag``), long-polled.

        With ``If-None-Match`` naming the list the device already has, the request is held up to ``wait``
        seconds (at most ``max_wait``) until the list differs; if it still does not, the answer is 304.
        """
        cid, _, _ = await signed(request)
        c = await enrolled(cid)
        check_wait(wait)
        known = request.headers.get("if-none-match")

        def get() -> bytes:
            with store.session() as s:
                return json.dumps(runs.client_work(s, cid, c[2]), separators=(",", ":")).encode()

        async def differs() -> Response | None:
            body = await offload(get)
            tag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            if tag == known:
                return None
            return Response(body, media_type="application/json", headers={"ETag": tag})

        got = await changes.hold(c[2], min(wait, cfg.max_wait), differs)
        return got if got is not None else Response(status_code=304, headers={"ETag": str(known)})

    @app.post("/v1/client/runs/{run_id}/checkin", openapi_extra=CHECKIN_BODY, **DEVICE)
    async def checkin(run_id: IdPath, request: Request) -> dict[str, Any]:
        cid, body, nonce = await signed(request)
        data = _json(body)
        records = data.get("records") if isinstance(data, dict) else None
        if not isinstance(records, int) or isinstance(records, bool) or not 1 <= records <= 10**9:
            raise HTTPException(422, "records must be an integer in [1, 10^9]")
        commitment = data.get("commitment")
        population = (await enrolled(cid))[2]

        def go() -> dict[str, Any]:
            with store.session() as s, s.begin():
                _use(s, nonce)
                conf = tasks.task_config(s, runs.load_run(s, run_id).task_id)
                if conf["privacy"]["population"] != population:
                    raise SecurityError("this run is for another population")
                return runs.checkin(s, run_id, cid, records, commitment)

        out = dict(await offload(go))
        wakeup.set()  # the cohort may be complete: let the driver close check-in now
        return out

    @app.post("/v1/client/runs/{run_id}/rounds/{index}/report", openapi_extra=REPORT_BODY, **DEVICE)
    async def report(run_id: IdPath, index: IndexPath, request: Request) -> dict[str, Any]:
        cid, body, nonce = await signed(request)
        data = _json(body)
        count = data.get("count") if isinstance(data, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= 10**9:
            raise HTTPException(422, "body must be {vector: [int], count: int in [0, 10^9]}")

        def go() -> bool:
            with store.session() as s, s.begin():
                _use(s, nonce)
                return runs.submit_report(s, run_id, index, cid, data.get("vector"), data["count"])

        new = await offload(go)
        wakeup.set()  # the round may be complete
        counters["reports_accepted" if new else "reports_duplicate"] += 1
        # the transaction has committed: only now is the report acknowledged
        return {"accepted": True, "duplicate": not new}

    async def population_of(cid: str) -> str:
        return (await enrolled(cid))[2]

    add_secure_routes(
        app,
        store,
        signed,
        _use,
        _json,
        counters,
        wakeup,
        changes=changes,
        population_of=population_of,
        max_wait=cfg.max_wait,
        offload=offload,
    )
