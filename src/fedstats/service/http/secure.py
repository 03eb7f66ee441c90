"""The client endpoints of secure runs: the seed transcript, reveals, and secure-aggregation stages.

Every request is signed by an enrolled device like the other client endpoints (:mod:`fedstats.service.http.device`);
state-changing ones are single-use (their nonce is recorded in the transaction of their effect) and
idempotent at the protocol level (the same message repeated is acknowledged again and stored once).
Stage messages travel as raw bytes (``application/octet-stream``), in the serialization of
:mod:`fedstats.secagg.messages`. A device's stage messages, stage requests and reveal (eleven of its
fifteen requests per run) are direct routes (:func:`~fedstats.service.http.fastpath.direct_route`): a
plain path and query (``wait``, ``members``) skip FastAPI's dependency resolution and parameter models,
about half the server's CPU per such request at n = 500; anything else takes FastAPI's way as before.

============================================================  =====================================
``GET  /v1/client/runs/{run}/seed``                           the seed transcript (:mod:`fedstats.wire.seeding`;
                                                              ``?part=reveals``: the seed and reveals only)
``POST /v1/client/runs/{run}/reveal``                         ``{"value": hex, "seen": hex}`` (``?wait=``:
                                                              answered with the reveals once the seed is fixed)
``GET  /v1/client/runs/{run}/rounds/{r}/secure/{k}/certificates``   the session's members' certificates (ETag;
                                                              ``?members=3,17``: those positions only)
``GET  /v1/client/runs/{run}/rounds/{r}/secure/{k}/{stage}``  the server's stage message to the device
                                                              (``?wait=``: held until the stage opens)
``POST /v1/client/runs/{run}/rounds/{r}/secure/{k}/{stage}``  the device's stage message
                                                              (``?wait=``: answered with the next one)
============================================================  =====================================

A run seeded by its cohort tree (``runs.cohort_head``) answers in the tree form of
:mod:`.secure_tree`: ``?part=committee`` (``&wait=``), signed reveals, and ``members``/``also``
answered by the leaves answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Annotated, Any, Protocol, TypeVar, cast

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from fedstats.errors import FedstatsError
from fedstats.service.domain import runs, secure, secure_devices, secure_tree
from fedstats.service.domain.changes import Changes, Wakeup, check_wait
from fedstats.service.domain.tasks import NotFoundError
from fedstats.service.http import secure_tree as tree_http
from fedstats.service.http.batching import TransactionBatcher, Work
from fedstats.service.http.deps import NonceUse, release_body
from fedstats.service.http.edge import StrictRoute
from fedstats.service.http.fastpath import Handler, direct_route, index_of
from fedstats.service.http.schemas import DEVICE, REVEAL_BODY, STAGE_BODY, IdPath, IndexPath
from fedstats.service.http.secure_batch import StageBatcher, StageUp
from fedstats.service.http.secure_query import plain_query as _plain_query
from fedstats.service.http.secure_query import positions as _positions
from fedstats.service.store import State, Store
from fedstats.wire import seeding

__all__ = [
    "CERTIFICATES",
    "NEXT_WORK",
    "SecureDep",
    "SecureRoutes",
    "add_secure_routes",
    "router",
    "secure_routes",
]

T = TypeVar("T")


class Offloading(Protocol):
    """Runs a blocking store function off the event loop (:class:`fedstats.service.http.fastpath.Offload`)."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]:
        """Await ``fn()`` run on a store thread."""
        ...


Signed = Callable[[Request], Awaitable[tuple[str, bytes, NonceUse | None]]]
NextWork = Callable[[str, str, str, float], Awaitable[tuple[str, bytes] | None]]
UseNonce = Callable[[State, NonceUse | None], None]


class SecureRoutes:
    """What the secure-run routes share in one app (``app.state.secure``, the :data:`SecureDep` dependency).

    The app's store and callbacks, and the caches and batchers that make a session of ``n`` devices cost
    less than ``n`` times one device: immutable answers serialized once, the reveals and the stage messages
    that arrive together committed together, and the look at the store that every held request of a
    session needs after the same state change made once.

    Parameters
    ----------
    store : Store
    signed : callable
        Verifies a signed request; returns ``(client_id, body, nonce)``.
    use_nonce : callable
        Records a nonce inside a transaction, refusing a replay.
    parse_json : callable
        Parses a JSON body (HTTP 422 on malformed input).
    counters : dict
        The server's metrics counters.
    wakeup : Wakeup
        Told of each committed reveal or stage message: wakes the driver if it may close what it waits for.
    changes : Changes
        The run driver's state transitions, which wake a held request for a stage message.
    population_of : callable
        The population of an enrolled device (by client id).
    max_wait : float
        The longest a request for a stage message is held, seconds.
    offload : callable
        Runs a blocking store function on the server's store threads (:class:`fedstats.service.http.fastpath.Offload`).
    next_work : callable, optional
        ``(client_id, population, run_id, wait)``: the device's next work list that gives it something
        to do (``(etag, json)``), held up to ``wait`` seconds, or None; the answer to a held last stage
        (see :func:`up`).
    away : callable, optional
        ``away(client_id)``: a context in which the device is held here, not polling its work list
        (:meth:`fedstats.service.http.fastpath.WorkCache.away`: its list is not read ahead).
    staged : callable, optional
        ``staged(client_id)``: called once a device's stage message is stored (it is in a session
        until it polls again: :meth:`fedstats.service.http.fastpath.WorkCache.staged`).
    """

    def __init__(
        self,
        store: Store,
        signed: Signed,
        use_nonce: UseNonce,
        parse_json: Callable[[bytes], Any],
        counters: dict[str, float],
        wakeup: Wakeup,
        *,
        changes: Changes,
        population_of: Callable[[str], Awaitable[str]],
        max_wait: float,
        offload: Offloading,
        next_work: NextWork | None = None,
        away: Callable[[str], AbstractContextManager[None]] | None = None,
        staged: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.signed = signed
        self.use_nonce = use_nonce
        self.parse_json = parse_json
        self.counters = counters
        self.wakeup = wakeup
        self.changes = changes
        self.population_of = population_of
        self.max_wait = max_wait
        self.offload = offload
        self.next_work = next_work
        self.away = away or (lambda _cid: contextlib.nullcontext())
        self.staged = staged or (lambda _cid: None)
        # immutable answers, serialized once (off the event loop): a session's certificates, and a seed
        # transcript once the seed is fixed; every device of a 1000-device session asks for them
        self.cache: dict[tuple[str, ...], bytes] = {}
        self.tags: dict[bytes, str] = {}  # ETag of a cached certificate list

        def on_thread(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
            return offload(functools.partial(fn, *args))

        # the reveals of a run lock its row: those that arrive together share one transaction
        self.together = TransactionBatcher(store, on_thread)
        # the stage messages that arrive together: one transaction (one statement on PostgreSQL)
        self.stages = StageBatcher(store, on_thread)
        # a state change wakes every held request of a session at once: those that need the same look
        # at the store (has the stage opened? is the session over?) share one, not one transaction each
        self.probes: dict[tuple[str, ...], asyncio.Future[Any]] = {}

    def cached(self, key: tuple[str, ...], build: Callable[[], Any]) -> bytes:
        """The JSON of ``build()``, kept under ``key`` (an immutable answer: built once)."""
        got = self.cache.get(key)
        if got is None:
            got = json.dumps(build()).encode()
            if len(self.cache) > 256:
                self.cache.clear()
            self.cache[key] = got
        return got

    def etag(self, body: bytes) -> str:
        """The ETag of a cached (immutable) body, computed once."""
        tag = self.tags.get(body)
        if tag is None:
            tag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            if len(self.tags) > 256:
                self.tags.clear()
            self.tags[body] = tag
        return tag

    async def shared(self, key: tuple[str, ...], look: Callable[[], T]) -> T:
        """``await offload(look)``, shared with the requests that ask for the same ``key`` meanwhile."""
        probes = self.probes
        fut = probes.get(key)
        if fut is None:
            fut = asyncio.ensure_future(self.offload(look))
            probes[key] = fut

            def done(f: asyncio.Future[Any], key: tuple[str, ...] = key) -> None:
                if probes.get(key) is f:
                    del probes[key]
                if not f.cancelled():
                    f.exception()  # retrieved here too: its waiters may all have gone

            fut.add_done_callback(done)
        return await asyncio.shield(fut)

    def seed_answer(self, run_id: str, cid: str, part: str | None) -> bytes:
        """The seed transcript (or its reveals) as ``GET .../seed`` answers it (a store thread's work)."""
        with self.store.transaction(read_only=True) as s:
            run = runs.load_run(s, run_id)
            if run.cohort_head is not None:  # a tree run: its member's leaf (secure_tree)
                return json.dumps(secure_tree.seed_json(s, run, cid, None)).encode()
            secure_devices.member_of(s, run_id, cid)
            if part == "reveals" and run.public_seed is not None:
                return self.cached(("reveals", run_id), lambda: secure_devices.seed_reveals(s, run))
            if run.public_seed is None:
                if run.status == "seeding":  # the commitment list: fixed, every member asks
                    return self.cached(
                        ("commitments", run_id), lambda: secure_devices.seed_transcript(s, run)
                    )
                return json.dumps(secure_devices.seed_transcript(s, run)).encode()
            return self.cached(("seed", run_id), lambda: secure_devices.seed_transcript(s, run))

    async def member_certificates(
        self, run_id: str, index: int, number: int, cid: str, indices: list[int]
    ) -> bytes:
        """The JSON list of the certificates of the session's members at ``indices`` (in that order).

        Raises
        ------
        NotFoundError, SecurityError
            As :func:`fedstats.service.domain.secure_devices.certificates` (not a member, no session).
        """
        fast = secure_devices.cached_certificates_json(run_id, index, number, cid, indices)
        if fast is not None:  # a session's certificates never change: no transaction
            return fast

        def some() -> bytes:
            # a stage's requests arrive together: those queued behind the first find them cached
            got = secure_devices.cached_certificates_json(run_id, index, number, cid, indices)
            if got is not None:
                return got
            with self.store.transaction(read_only=True) as tx:
                return json.dumps(
                    secure_devices.certificates(tx, run_id, index, number, cid, indices)
                ).encode()

        # a session's devices all ask as its stage 1 opens: they wait for one read to fill the cache
        with contextlib.suppress(Exception):  # its error is its own: the others ask alone below
            await self.shared(("certificates", run_id, str(index), str(number)), some)
        fast = secure_devices.cached_certificates_json(run_id, index, number, cid, indices)
        if fast is not None:
            return fast
        return await self.offload(some)

    async def held_commitments(
        self, run_id: str, population: str, wait: float, since: tuple[int, int] | None
    ) -> bytes | None:
        """The commitment list once the run's check-in closed, held up to ``wait`` seconds.

        What ``GET .../seed`` answers a member while the run is seeding (the list it reveals against),
        for a device whose check-in (secure, with a commitment) was just accepted: it is in the cohort,
        which only grows until check-in closes. Held only until the first change of the device's
        population after ``since`` (another run offered or moving on must not wait for this one): None
        if check-in is still open then or after ``wait``, or if the run moved on otherwise (no longer
        seeding, or its seed already fixed); the device's work list then says what is next.
        """
        looks = 0

        def look() -> bytes | None:
            with self.store.transaction(read_only=True) as tx:
                run = runs.load_run(tx, run_id)
                if run.status == "checkin":
                    return None
                if run.status != "seeding" or run.public_seed is not None:
                    return b""
                if run.cohort_head is not None:  # a tree run: each device gets its own leaf
                    return tree_http.TREE_MARK
                return self.cached(
                    ("commitments", run_id), lambda: secure_devices.seed_transcript(tx, run)
                )

        async def attempt() -> bytes | None:
            nonlocal looks
            looks += 1
            got = self.cache.get(("commitments", run_id))
            if got is None:  # every held check-in wakes at the same change: one look for all
                got = await self.shared(("checkin", run_id), look)
            # a change came (after `since`, or after the first look) and check-in is still open
            return b"" if got is None and (since is not None or looks > 1) else got

        got = self.cache.get(("commitments", run_id))  # a retried check-in while seeding
        if got is None:
            got = await self.changes.hold(
                population, min(wait, self.max_wait), attempt, since=since
            )
        return got or None

    async def held_reveals(
        self, run_id: str, population: str, wait: float, since: tuple[int, int] | None
    ) -> bytes | None:
        """The run's reveals (``?part=reveals``) once its seed is fixed, held up to ``wait`` seconds."""

        def look() -> bytes | None:
            with self.store.transaction(read_only=True) as tx:
                run = runs.load_run(tx, run_id)
                if run.public_seed is None:
                    return None
                return self.cached(
                    ("reveals", run_id), lambda: secure_devices.seed_reveals(tx, run)
                )

        async def attempt() -> bytes | None:
            got = self.cache.get(("reveals", run_id))
            if got is not None:
                return got
            # one look for the reveals woken by the same change (not one begun before it)
            generation = self.changes.generation(population)
            return await self.shared(("reveals", run_id, *map(str, generation)), look)

        return await self.changes.hold(population, min(wait, self.max_wait), attempt, since=since)

    async def next_message(
        self,
        run_id: str,
        index: int,
        number: int,
        stage: int,
        cid: str,
        wait: float,
        *,
        population: str | None = None,
        since: tuple[int, int] | None = None,
    ) -> bytes | None:
        """The device's ``stage`` message, held up to ``wait`` seconds while the session is before it.

        None if the stage has not opened by then; :class:`NotFoundError` if it opened without a message
        for this device (a dropout), or at once without ``wait``. ``wait`` was checked by the endpoint.
        ``since``: a generation of the device's ``population`` at which the stage was known not to be
        open (:meth:`Changes.hold`): the first look waits for a change after it.
        """
        store = self.store

        def go() -> bytes | None:
            with store.transaction(read_only=True) as s:
                if wait > 0:
                    return secure_devices.held_down(s, run_id, index, number, stage, cid)
                return secure_devices.down_message(s, run_id, index, number, stage, cid)

        def probe() -> str:
            with store.transaction(read_only=True) as tx:
                return secure_devices.probe_stage(tx, run_id, index, number, stage)

        async def attempt() -> bytes | None:
            got = secure_devices.cached_down(run_id, index, number, stage, cid)
            if got is not None:  # journaled and cached: served without a transaction
                return got
            if wait > 0 and secure_devices.known_member(run_id, index, number, cid):
                # every held request of the session wakes at the same change: one look for all
                key = ("stage", run_id, str(index), str(number), str(stage))
                if await self.shared(key, probe) == "pending":
                    return None
                got = secure_devices.cached_down(run_id, index, number, stage, cid)
                if got is not None:
                    return got
            return await self.offload(go)

        if population is None:
            population = await self.population_of(cid) if wait > 0 else ""
        with self.away(cid):
            return await self.changes.hold(
                population, min(wait, self.max_wait), attempt, since=since
            )

    async def session_over(
        self,
        run_id: str,
        index: int,
        number: int,
        stage: int,
        population: str,
        wait: float,
        since: Any,
    ) -> None:
        """Hold up to ``wait`` seconds (at most ``max_wait``) while the session is open at ``stage``."""

        def go() -> bool | None:
            with self.store.transaction(read_only=True) as tx:
                if secure_devices.stage_pending(tx, run_id, index, number, stage + 1):
                    return None
                return True

        async def attempt() -> bool | None:
            # one look for every held request of the session (they wake at the same change)
            return await self.shared(("over", run_id, str(index), str(number), str(stage)), go)

        await self.changes.hold(population, min(wait, self.max_wait), attempt, since=since)

    async def store_up(
        self, run_id: str, index: int, number: int, stage: int, request: Request, wait: float
    ) -> tuple[str, bool, bool, str, tuple[int, int]]:
        """Verify and journal a device's stage message: ``(client_id, new, at_stage, population, before)``.

        ``before`` is the population's generation read before the message was stored (a change after it
        may have opened the next stage); ``population`` is empty without ``wait``.
        """
        # in flight from here until stored: the quiet rule does not take the wait for silence
        with secure.TRAFFIC.arriving((run_id, index, number, stage)):
            cid, body, nonce = await self.signed(request)
            check_wait(wait)  # before anything is stored
            population = await self.population_of(cid) if wait > 0 else ""
            before = self.changes.generation(population)

            def go() -> tuple[bool, bool]:
                with self.store.transaction() as tx:
                    self.use_nonce(tx, nonce)
                    return secure_devices.submit_up_at(tx, run_id, index, number, stage, cid, body)

            if nonce is None:
                new, at_stage = await self.offload(go)
            else:  # group-committed with the stage's other messages (one statement on PostgreSQL)
                new, at_stage = await self.stages(
                    StageUp(nonce, run_id, index, number, stage, cid, body)
                )
        # journaled: the request may now be held (for the next stage's message) without its body
        release_body(request)
        self.wakeup.arrived(("stage", run_id, index, number, stage))  # a pass if it may be the last
        self.staged(cid)
        self.counters["secure_messages_accepted" if new else "secure_messages_duplicate"] += 1
        return cid, new, at_stage, population, before


async def secure_routes(request: Request) -> SecureRoutes:
    """The app's :class:`SecureRoutes` (``app.state.secure``): the secure routes' dependency."""
    routes: SecureRoutes = request.app.state.secure
    return routes


SecureDep = Annotated[SecureRoutes, Depends(secure_routes)]
"""A route parameter of this type is the app's :class:`SecureRoutes`."""

router = APIRouter(route_class=StrictRoute)
"""The secure-run client endpoints (see the module docstring); needs ``app.state.secure``."""

BASE = "/v1/client/runs/{run_id}"
CERTIFICATES = "fedstats-certificates"
"""The header of an answer that carries certificates before the stage message: their JSON's length."""
NEXT_WORK = "fedstats-next-work"
"""A last stage's header asking for the device's next work list in the held acknowledgement (``1``)."""
STAGE_PATH = BASE + "/rounds/{index}/secure/{number}/{stage}"


def _plain_path(params: dict[str, Any], indices: tuple[str, ...]) -> list[int] | None:
    """The path's indices (``index``, ``number``, ``stage``) if the path is plain, else None."""
    if not 0 < len(params.get("run_id", "")) <= 128:
        return None
    got = [index_of(params.get(name, "")) for name in indices]
    return None if None in got else cast(list[int], got)


_STAGE_INDICES = ("index", "number", "stage")
_UP_QUERY = (b"wait", b"members", b"also")


def _plain_stage(
    request: Request, names: tuple[bytes, ...]
) -> tuple[str, list[int], dict[bytes, str], SecureRoutes] | None:
    """A plain stage request's run, ``[index, number, stage]``, query and routes; else None."""
    query = _plain_query(request.scope, names)
    got = _plain_path(request.path_params, _STAGE_INDICES)
    if query is None or got is None:
        return None
    return request.path_params["run_id"], got, query, request.app.state.secure


def _plain_up(scope: Any, params: dict[str, Any]) -> bool:
    return _plain_path(params, _STAGE_INDICES) is not None and (
        _plain_query(scope, _UP_QUERY) is not None
    )


def _plain_wait(scope: Any, params: dict[str, Any]) -> bool:
    """A reveal's or a stage message's request (path and ``wait``) that a direct route parses itself."""
    indices = _STAGE_INDICES if "stage" in params else ()
    return _plain_path(params, indices) is not None and (
        _plain_query(scope, (b"wait",)) is not None
    )


@router.get(BASE + "/seed", **DEVICE)
async def seed(
    run_id: IdPath, request: Request, ctx: SecureDep, part: str | None = None, wait: float = 0.0
) -> Response:
    """The seed transcript; ``?part=reveals``: only the seed and the reveals in list order.

    A device that revealed holds the commitment list (ids, commitments, slots, keys) it saw; once
    the seed is fixed it needs only the reveals beside it (a third of the bytes). A run seeded by its
    cohort tree answers as :mod:`.secure_tree` says (``?part=committee[&wait=]``: its committee, with
    ``Fedstats-Next-Work: 1`` also the device's next work list and its ``ETag``).
    """
    cid, _, _ = await ctx.signed(request)
    if part not in (None, "reveals", secure_tree.COMMITTEE):
        raise HTTPException(422, "part must be 'reveals', 'committee' or absent")
    check_wait(wait)
    if part == secure_tree.COMMITTEE or secure_tree.known_tree(run_id):
        carry = request.headers.get(NEXT_WORK) == "1"
        return await tree_http.seed(ctx, run_id, cid, part, wait, carry)
    fast = ctx.cache.get(("reveals", run_id)) if part == "reveals" else None
    if fast is not None and secure_devices.cached_member(run_id, cid):
        return Response(fast, media_type="application/json")  # fixed: no transaction
    body = await ctx.offload(functools.partial(ctx.seed_answer, run_id, cid, part))
    return Response(body, media_type="application/json")


async def reveal(run_id: IdPath, request: Request, ctx: SecureDep, wait: float = 0.0) -> Response:
    """Record the device's reveal; with ``wait``, also answer with the reveals once the seed is fixed.

    The acknowledgement is ``{"accepted": true, "duplicate": bool}``. With ``wait`` > 0 it is held
    until the run's seed is fixed (every member revealed), up to ``wait`` seconds (at most
    ``max_wait``), and then also carries ``"revealed"``: what ``GET .../seed?part=reveals`` answers
    (the seed and every reveal in list order), one request fewer per device. In a tree run only the
    seed committee reveals, with ``"signature"`` (:func:`fedstats.wire.tree_seeding.signed_reveal`;
    409 off the committee), and ``"revealed"`` is what ``GET .../seed?part=committee`` answers; with
    ``Fedstats-Next-Work: 1`` the acknowledgement also carries the member's next work list.
    """
    cid, body, nonce = await ctx.signed(request)
    check_wait(wait)
    data = ctx.parse_json(body)
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), str) for k in ("value", "seen")
    ):
        raise HTTPException(422, 'body must be {"value": hex, "seen": hex}')
    population = await ctx.population_of(cid) if wait > 0 else ""
    before = ctx.changes.generation(population)  # the seed was not fixed then (see below)

    def go(tx: State, held: dict[Any, Any]) -> tuple[bool, bool]:
        run = runs.locked_run(tx, run_id, held)  # record_reveal does not write the run row
        if run.cohort_head is not None:  # a tree run: only its committee reveals, signed
            return secure_tree.record_reveal(tx, run, cid, data, held), True
        return secure_devices.record_reveal(tx, run, cid, data["value"], data["seen"], held), False

    # with the reveals that arrive meanwhile: one transaction (the nonce recorded first)
    end = time.monotonic() + min(wait, ctx.max_wait)
    new, tree = await ctx.together(Work(nonce, go))
    ctx.wakeup.arrived(("reveal", run_id))  # a driver pass if it may be the last reveal
    ack, work = b'{"accepted":true,"duplicate":' + (b"false" if new else b"true"), None
    if wait > 0:
        # a new reveal was stored while the run was seeding: its seed was not fixed at `before`
        since = before if new else None
        got = await (
            tree_http.held_committee(ctx, run_id, population, wait, since)
            if tree
            else ctx.held_reveals(run_id, population, wait, since)
        )
        if got is not None:
            ack += b',"revealed":' + got
        if got is not None and tree and request.headers.get(NEXT_WORK) == "1":  # the first round
            work = await tree_http.next_work(ctx, run_id, cid, population, end)
    return tree_http.with_work(ack + b"}", work)


async def _reveal_direct(request: Request, slow: Handler) -> Response:
    """:func:`reveal` without FastAPI's parameter models (anything but a plain ``wait`` goes ``slow``)."""
    query = _plain_query(request.scope, (b"wait",))
    params = request.path_params
    if query is None or _plain_path(params, ()) is None:
        return await slow(request)
    ctx: SecureRoutes = request.app.state.secure
    return await reveal(params["run_id"], request, ctx, float(query.get(b"wait", 0.0)))


router.add_api_route(
    BASE + "/reveal",
    reveal,
    methods=["POST"],
    route_class_override=direct_route(_reveal_direct, _plain_wait),
    openapi_extra=REVEAL_BODY,
    **DEVICE,
)


@router.get(BASE + "/rounds/{index}/secure/{number}/certificates", **DEVICE)
async def certificates(
    run_id: IdPath,
    index: IndexPath,
    number: IndexPath,
    request: Request,
    ctx: SecureDep,
    members: str | None = None,
    also: str | None = None,
) -> Response:
    """The certificates of the session's members: all (ETag), or ``?members=3,17,...`` only.

    A device asks for its neighbours' and a few audited members' (positions in roster order), so
    a session of ``n`` costs ``n (k + a)`` certificates served, not ``n^2``. In a tree run
    ``members`` (and ``also``) are answered by the leaves answer (:mod:`.secure_tree`).
    """
    cid, _, _ = await ctx.signed(request)
    store = ctx.store
    indices = None if members is None else _positions(members)
    if indices is not None:
        more = None if also is None else _positions(also)
        got = await tree_http.checked(ctx, run_id, index, number, cid, indices, more)
        return Response(got, media_type="application/json")

    def go() -> bytes:
        with store.transaction(read_only=True) as s:
            secure_devices.session_member(s, run_id, index, number, cid)
            return ctx.cached(
                ("certificates", run_id, str(index), str(number)),
                lambda: secure_devices.certificates(s, run_id, index, number, cid),
            )

    body = await ctx.offload(go)
    # a device names the list it already holds (the same members as in its previous round): 304
    tag = ctx.etag(body)
    if request.headers.get("if-none-match") == tag:
        return Response(status_code=304, headers={"ETag": tag})
    return Response(body, media_type="application/json", headers={"ETag": tag})


async def down(
    run_id: IdPath,
    index: IndexPath,
    number: IndexPath,
    stage: IndexPath,
    request: Request,
    ctx: SecureDep,
    wait: float = 0.0,
) -> Response:
    """The device's stage message; with ``wait``, held until its open session reaches the stage.

    A device whose stage-``s`` message was acknowledged without the next one (see :func:`up`) asks
    for stage ``s + 1`` with ``wait``: the request is held while the session is open and before that
    stage, up to ``wait`` seconds (at most ``max_wait``); 204 if the stage has not opened by then,
    404 at once if it opened without a message for this device (a dropout).
    """
    cid, _, _ = await ctx.signed(request)
    check_wait(wait)
    data = await ctx.next_message(run_id, index, number, stage, cid, wait)
    if data is None:
        return Response(status_code=204)  # the stage did not open in time
    return Response(data, media_type="application/octet-stream")


async def _down_direct(request: Request, slow: Handler) -> Response:
    """:func:`down` without FastAPI's parameter models (a malformed path or query goes ``slow``)."""
    got = _plain_stage(request, (b"wait",))
    if got is None:
        return await slow(request)
    run_id, (index, number, stage), query, ctx = got
    return await down(run_id, index, number, stage, request, ctx, float(query.get(b"wait", 0)))


router.add_api_route(
    STAGE_PATH,
    down,
    methods=["GET"],
    route_class_override=direct_route(_down_direct, _plain_wait),
    **DEVICE,
)


async def up(
    run_id: IdPath,
    index: IndexPath,
    number: IndexPath,
    stage: IndexPath,
    request: Request,
    ctx: SecureDep,
    wait: float = 0.0,
    members: str | None = None,
    also: str | None = None,
) -> Response:
    """Journal the device's stage message; with ``wait``, answer with its next stage's message.

    The acknowledgement is ``{"accepted": true, "duplicate": bool}`` (JSON). With ``wait`` > 0 and a
    later stage, once the message is committed the request is held like a ``GET`` of stage
    ``stage + 1`` with that ``wait``, and if that message comes in time it is the answer instead
    (``application/octet-stream``, the acknowledgement in the ``Fedstats-Duplicate`` header): one
    request per stage instead of two. Otherwise (not open in time, or opened without this device)
    the answer is the JSON acknowledgement, and the device's work list says what is next. At the
    last stage, ``wait`` > 0 holds the acknowledgement until the session is over (or ``wait``
    passed): the device's next work poll then finds the next round (or the end), not the same
    round one stage on. With the header ``Fedstats-Next-Work: 1`` it is held further, within the
    same ``wait``, until the device's work list gives it something to do (the next round's setup,
    an offer, the run's end), and carries that list (``"work"``, its ``ETag`` in the header): the
    device handles it as its next poll's answer, one work poll fewer per round.

    At stage 0, ``?members=3,17,...`` asks for those members' certificates with the answer (as ``GET
    .../certificates?members=`` answers them): with ``wait`` and the next message, their JSON followed
    by the message, the JSON's length in the ``Fedstats-Certificates`` header; without the message (no
    ``wait``, or stage 1 not open in time), in the JSON acknowledgement's ``"certificates"``. A device
    checks them before it sends its shares, its first secret (:mod:`fedstats.client.secure`).
    """
    indices = None if members is None else _positions(members)  # 422 before anything is stored
    more = None if also is None else _positions(also)  # a tree run's two-hop keys (secure_tree)
    if (indices is not None or more is not None) and stage != 0:
        raise HTTPException(422, "members is asked for with the stage-0 message only")
    cid, new, at_stage, population, before = await ctx.store_up(
        run_id, index, number, stage, request, wait
    )
    # stored while the session was at this stage: the next cannot have opened before `before`
    since = before if at_stage else None
    if wait > 0 and stage + 1 < len(seeding.STAGES):
        try:
            data = await ctx.next_message(
                run_id, index, number, stage + 1, cid, wait, population=population, since=since
            )
        except NotFoundError:
            data = None
        if data is not None:
            headers = {"Fedstats-Duplicate": "true" if not new else "false"}
            if indices is not None:
                try:
                    certs = await tree_http.checked(ctx, run_id, index, number, cid, indices, more)
                except (FedstatsError, HTTPException):  # e.g. a bad position: the device asks
                    certs = None
                if certs is not None:
                    headers[CERTIFICATES] = str(len(certs))
                    data = certs + data
            return Response(data, media_type="application/octet-stream", headers=headers)
    elif wait > 0:  # the last stage: acknowledged once the session is over (or after wait)
        end = time.monotonic() + min(wait, ctx.max_wait)
        with ctx.away(cid):
            await ctx.session_over(run_id, index, number, stage, population, wait, since)
        if request.headers.get(NEXT_WORK) == "1":  # its next work list, not to poll for
            got = await tree_http.next_work(ctx, run_id, cid, population, end, bounded=False)
            if got is not None:
                ack = b'{"accepted":true,"duplicate":' + (b"false" if new else b"true")
                return tree_http.with_work(ack + b"}", got)
    if indices is not None:  # the certificates asked for, with the acknowledgement (also unheld)
        try:
            certs = await tree_http.checked(ctx, run_id, index, number, cid, indices, more)
        except (FedstatsError, HTTPException):
            certs = None
        if certs is not None:
            ack = b'{"accepted":true,"duplicate":' + (b"false" if new else b"true")
            return Response(ack + b',"certificates":' + certs + b"}", media_type="application/json")
    return JSONResponse({"accepted": True, "duplicate": not new})


async def _up_direct(request: Request, slow: Handler) -> Response:
    """:func:`up` without FastAPI's parameter models (a malformed path or query goes ``slow``).

    A device sends ten stage messages per run, most of its requests: FastAPI's dependency resolution and
    parameter models cost about as much server CPU as the rest of such a request.
    """
    got = _plain_stage(request, _UP_QUERY)
    if got is None:
        return await slow(request)
    run_id, (index, number, stage), query, ctx = got
    wait = float(query.get(b"wait", 0))
    members, also = query.get(b"members"), query.get(b"also")
    return await up(run_id, index, number, stage, request, ctx, wait, members, also)


router.add_api_route(
    STAGE_PATH,
    up,
    methods=["POST"],
    route_class_override=direct_route(_up_direct, _plain_up),
    openapi_extra=STAGE_BODY,
    **DEVICE,
)


def add_secure_routes(app: FastAPI, routes: SecureRoutes) -> None:
    """Add the secure-run client endpoints (:data:`router`) to ``app``, sharing ``routes``.

    ``routes`` is kept in ``app.state.secure`` (the :data:`SecureDep` of the endpoints) and its stage
    batcher in ``app.state.stage_batcher``.
    """
    app.state.secure = routes
    app.state.stage_batcher = routes.stages
    app.include_router(router)
