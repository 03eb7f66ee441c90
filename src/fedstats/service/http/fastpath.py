"""The device fast path: store threads, request batchers, the work cache and direct routes.

The request path of a device's poll and upload is short (:mod:`fedstats.service.http.device` declares the
routes):

- :class:`Offload`: the store work of device requests runs on a bounded pool of threads, off the event loop;
- :class:`UploadBatcher` / :class:`PollBatcher` (:class:`Batcher`): uploads and polls that arrive while a
  transaction is being written are written or read together, in one transaction, each keeping its own
  answer (group commit);
- :class:`WorkCache`: a device's work list is cached with its ``ETag``, so an unchanged list is answered
  (or 304) without the database; :class:`DeviceWrites` drops the entry of a device that writes;
- :func:`direct_route` / :class:`DirectRoutes`: a device's poll and upload go straight to their handler,
  without the router's linear scan, the app's inner layers and FastAPI's dependency resolution, on
  FastAPI's and Starlette's public interfaces (measured in :mod:`fedstats.service.http.device`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import re
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from fastapi import HTTPException, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.routing import Match, Route

from fedstats.service.domain import runs
from fedstats.service.domain.changes import Changes, Wakeup
from fedstats.service.http.batching import Batcher, TransactionBatcher
from fedstats.service.http.deps import DeviceAuth, SignedRequest
from fedstats.service.http.edge import (
    BadJSON,
    StrictRoute,
    strict_loads,
)
from fedstats.service.http.schemas import MAX_INDEX
from fedstats.service.store import State, Store
from fedstats.wire import auth

__all__ = [
    "WAIT_PARAM",
    "Batcher",
    "DevicePath",
    "DeviceWrites",
    "DirectRoute",
    "DirectRoutes",
    "Handler",
    "Offload",
    "PollBatcher",
    "UploadBatcher",
    "WorkCache",
    "devices_of",
    "direct_route",
    "index_of",
    "json_body",
    "work_json",
]

log = logging.getLogger("fedstats.service")

T = TypeVar("T")
In = TypeVar("In")
Out = TypeVar("Out")


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


class WorkCache:
    """Each device's last work list (its JSON and ``ETag``), valid while nothing it depends on changed.

    An entry is keyed by the device population's generation (:meth:`Changes.generation`: every state
    transition of a run of that population, in this process or, through ``state_version``, in another)
    and by the device's own write counter (bumped at the start and at the end of each of its
    state-changing requests, :meth:`touch`). A poll whose key matches answers from the entry without
    touching the database: ``304`` if the device already has that list (``If-None-Match``). Entries
    older than ``seconds`` are recomputed (a device's write through another server process is not
    seen here).

    Parameters
    ----------
    changes : Changes
    seconds : float
        Longest life of an entry, > 0.
    """

    def __init__(self, changes: Changes, seconds: float) -> None:
        self.changes = changes
        self.seconds = seconds
        self._writes: dict[str, int] = {}
        # client id -> (key, stored at, ETag, body, round to drop from the body: derived lazily)
        self._entries: dict[
            str, tuple[tuple[Any, ...], float, str | None, bytes, tuple[str, int] | None]
        ] = {}
        # population -> client id -> when it last polled (monotonic): the devices a prefetch reads
        self._polled: dict[str, dict[str, float]] = {}
        # client id -> its requests held elsewhere (a secure stage, a check-in): not read ahead
        self._away: dict[str, int] = {}
        # client id -> when it last sent a secure stage message (monotonic): see :meth:`staged`
        self._staged: dict[str, float] = {}

    @contextlib.contextmanager
    def away(self, client_id: str) -> Iterator[None]:
        """Mark the device as held elsewhere: no prefetch reads its list meanwhile.

        A device waiting in a held request that answers its next step (a secure stage's message, a
        check-in's commitment list) will not poll for its list, and a list read ahead for it would be
        discarded at the next state change.
        """
        self._away[client_id] = self._away.get(client_id, 0) + 1
        try:
            yield
        finally:
            left = self._away.pop(client_id, 1) - 1
            if left > 0:
                self._away[client_id] = left

    def staged(self, client_id: str) -> None:
        """The device sent a secure stage message: its session's requests, not its list, say what is next.

        :meth:`unanswered` leaves it out until it polls again (a list read ahead would go unread).
        """
        if len(self._staged) > 200_000:
            self._staged.clear()
        self._staged[client_id] = time.monotonic()

    def key(self, client_id: str, population: str) -> tuple[Any, ...]:
        """What an entry of ``client_id`` must match to be valid now."""
        return (*self.changes.generation(population), self._writes.get(client_id, 0))

    def polled(self, client_id: str, population: str) -> None:
        """The device polled now (it is one of the devices :meth:`unanswered` may name)."""
        seen = self._polled.setdefault(population, {})
        if len(seen) > 200_000:
            seen.clear()
        seen.pop(client_id, None)  # kept in order of their last poll
        seen[client_id] = time.monotonic()

    def unanswered(self, population: str, seconds: float, before: float) -> list[str]:
        """Devices of ``population`` to read ahead: no valid entry now, a poll in the last ``seconds``.

        Not those that polled since ``before`` (monotonic; their next poll reads its own list), nor
        those held elsewhere (:meth:`away`), nor those in a secure session since their last poll
        (:meth:`staged`). Most recent first.
        """
        now = time.monotonic()
        gen = self.changes.generation(population)
        staged, out = self._staged, []
        for cid, at in reversed(self._polled.get(population, {}).items()):
            if now - at > seconds:
                break
            if at >= before or cid in self._away:  # it polled since, or waits elsewhere
                continue
            if staged.get(cid, -1.0) > at:  # in a session: its stage requests say what is next
                continue
            got = self._entries.get(cid)
            key = (*gen, self._writes.get(cid, 0))  # self.key without the lock per device
            if got is None or got[0] != key or now - got[1] > self.seconds:
                out.append(cid)
        return out

    def touch(self, client_id: str) -> None:
        """The device sent a state-changing request: its entry is no longer valid.

        The entry is kept (its key no longer matches) so that :meth:`after_report` can derive the next
        one from it.
        """
        if len(self._writes) > 200_000:
            self._writes.clear()
            self._entries.clear()
        self._writes[client_id] = self._writes.get(client_id, 0) + 1

    def after_report(self, client_id: str, population: str, run_id: str, index: int) -> None:
        """The device's report of round ``index`` of ``run_id`` committed: derive its next work list.

        If the entry held before this request was valid until the request's own write (the same
        generation, exactly one write since), the list is now that one without the round (the only
        thing a plain report changes in it): the entry is re-keyed without reading the database, and
        the list is derived at the device's next poll (most devices never poll again in the round).
        Otherwise nothing is stored and the next poll reads the list.
        """
        got = self._entries.get(client_id)
        if got is None or time.monotonic() - got[1] > self.seconds:
            return
        key = self.key(client_id, population)
        if got[0] != (*key[:-1], key[-1] - 1):
            return
        self._entries[client_id] = (key, time.monotonic(), None, got[3], (run_id, index))

    def get(self, client_id: str, key: tuple[Any, ...]) -> tuple[str, bytes] | None:
        """``(etag, body)`` of the device's valid entry for ``key``, or None."""
        got = self._entries.get(client_id)
        if got is None or got[0] != key or time.monotonic() - got[1] > self.seconds:
            return None
        tag, body, drop = got[2], got[3], got[4]
        if drop is not None:  # a list to derive (see after_report): the old one without the round
            work = json.loads(body)
            work["rounds"] = [
                r
                for r in work["rounds"]
                if not (
                    r["run_id"] == drop[0] and r["round"] == drop[1] and r.get("secure") is None
                )
            ]
            body = json.dumps(work, separators=(",", ":")).encode()
            tag = self.put(client_id, key, body)
        assert tag is not None
        return tag, body

    def put(self, client_id: str, key: tuple[Any, ...], body: bytes) -> str:
        """Store the work list computed under ``key`` (if ``key`` is still current); return its tag."""
        tag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        if len(self._entries) > 100_000:
            self._entries.clear()
        self._entries[client_id] = (key, time.monotonic(), tag, body, None)
        return tag


class UploadBatcher(Batcher[runs.Upload, "bool | None"]):
    """Group commit of device report uploads: the uploads that arrive together share one transaction.

    The uploads that arrived while the previous batch was written are checked together (the encoder's
    output check vectorized per round, :func:`fedstats.service.domain.runs.screen_uploads`) and written
    in one transaction, set-based (:func:`~fedstats.service.domain.runs.put_uploads`), with one
    commit and one hand-off to a store thread instead of one per upload (:class:`Batcher`). Each upload
    is acknowledged only once its transaction committed; awaiting the batcher returns True if stored,
    False if the same report was already stored, None if its nonce was used (a replay), and raises what
    :func:`~fedstats.service.domain.runs.upload_report` raises.

    An upload the one-statement path cannot decide (its round or slots not seen by this process, a report
    refused by the checks, the round closed meanwhile, a retry of a stored report) takes the exact path
    of :func:`~fedstats.service.domain.runs.upload_report` in a transaction of its own, after the batch
    was written without it; so does every upload of a batch whose transaction failed. An upload's
    answer (or error) is therefore the one it would get alone.
    """

    def write(self, uploads: list[runs.Upload]) -> list[bool | BaseException | None]:
        """Write ``uploads`` (blocking, on a store thread); per upload its answer or its error."""
        screened = runs.screen_uploads(uploads)

        def bulk(tx: State, todo: list[int]) -> dict[int, bool | BaseException | None]:
            got = runs.put_uploads(tx, [uploads[i] for i in todo], [screened[i] for i in todo])
            return {
                i: cast(bool | None, r) for i, r in zip(todo, got, strict=True) if r != runs.EXACT
            }

        def alone(tx: State, i: int) -> bool | None:
            u = uploads[i]
            return runs.upload_report(
                tx, u.nonce, u.run_id, u.index, u.client_id, u.vector, u.count
            )

        exact = {i for i, got in enumerate(screened) if got is None}
        return self.write_bulk(len(uploads), exact, bulk, alone)


class PollBatcher(Batcher[tuple[SignedRequest, tuple[Any, ...]], tuple[str, bytes]]):
    """The work lists of the polls that arrive together, read on one store thread and one connection.

    A poll whose device's cached list is not valid (:class:`WorkCache`) reads the database: the polls
    that arrived while the previous batch was read are read together (:class:`Batcher`): each stale
    device row confirmed, then every device's runs in one statement
    (:meth:`~fedstats.service.store.core.CoreQueries.device_runs_many`), then each device's
    :func:`~fedstats.service.domain.runs.client_work` from its rows, the list cached under the key it
    was computed for. Awaiting the batcher with
    ``(request, key)`` returns ``(etag, body)`` or raises the poll's own error.

    Parameters
    ----------
    store, offload
        As :class:`Batcher`.
    device : DeviceAuth
    cache : WorkCache
    """

    PREFETCH_CHUNK = 500
    """Devices whose lists one prefetch statement reads."""

    def __init__(
        self,
        store: Store,
        offload: Offload,
        device: DeviceAuth,
        cache: WorkCache,
        prefetch_seconds: float = 600.0,
    ) -> None:
        super().__init__(store, offload)
        self.device = device
        self.cache = cache
        self.prefetch_seconds = prefetch_seconds
        self.prefetched = 0  # lists read ahead of their device's poll (for tests)
        # population -> (generation prefetched, when its first prefetch began, when the last did)
        self._generation: dict[str, tuple[tuple[int, int], float, float]] = {}
        self._ahead: dict[str, asyncio.Future[None]] = {}  # client id -> its prefetch chunk
        self._tasks: set[asyncio.Task[None]] = set()

    async def answer(self, req: SignedRequest, key: tuple[Any, ...]) -> tuple[str, bytes]:
        """The device's ``(etag, body)`` for ``key``: from the cache, its prefetch, or a read.

        A read (the device's list changed since it was cached: a run's state moved, or the device
        wrote) starts a prefetch of the population's other recent devices (:meth:`prefetch`); a device
        whose list that prefetch is reading waits for it rather than reading it again.

        Parameters
        ----------
        req : SignedRequest
            The verified poll.
        key : tuple
            :meth:`WorkCache.key` of the device, taken before any read.

        Returns
        -------
        tuple of (str, bytes)
            The list's ``ETag`` and its JSON.

        Raises
        ------
        HTTPException
            What the poll's own read raises (a stale device row that no longer holds).
        """
        cid = req.client_id
        got = self.cache.get(cid, key)
        if got is not None:
            return got
        ahead = self._ahead.get(cid)
        if ahead is not None:
            await asyncio.shield(ahead)
            got = self.cache.get(cid, key)
            if got is not None:
                return got
        got = await self((req, key))
        self.prefetch(req.population)
        return got

    def prefetch(self, population: str) -> None:
        """Read ahead the lists of ``population``'s devices that polled lately and have none valid.

        When a run's state moves (a round opens, check-in closes: a new generation of the population,
        :meth:`Changes.generation`), every device of the population polls for its new list. Read
        :data:`PREFETCH_CHUNK` at a time (one statement each,
        :meth:`~fedstats.service.store.core.CoreQueries.device_runs_many`), a device's list costs a
        row of a shared statement instead of a statement and a store hand-off of its own. The devices are those that polled in the last ``prefetch_seconds`` but not yet
        in this generation (most recent first); each list is cached under the key it was read for, so
        a device that writes meanwhile reads its own. Once per generation, and again for the devices
        still to poll when the lists read expire (the cache's ``seconds``, its bound on what another
        server process may have changed). Stops when the generation moves on. Non-blocking: the reads
        run on the store threads; a failed read is logged and ends the read ahead (the devices then
        read their own lists).

        Parameters
        ----------
        population : str
            The population whose devices' lists to read.
        """
        gen = self.cache.changes.generation(population)
        now = time.monotonic()
        got = self._generation.get(population)
        if got is not None and got[0] == gen:
            if now - got[2] <= self.cache.seconds:
                return
            began = got[1]
        else:
            began = now
        self._generation[population] = (gen, began, now)
        ids = self.cache.unanswered(population, self.prefetch_seconds, began)
        if not ids:
            return
        chunks = [ids[i : i + self.PREFETCH_CHUNK] for i in range(0, len(ids), self.PREFETCH_CHUNK)]
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in chunks]
        for chunk, fut in zip(chunks, futures, strict=True):
            for cid in chunk:
                self._ahead[cid] = fut
        task = loop.create_task(self._prefetch(population, gen, chunks, futures))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _prefetch(
        self,
        population: str,
        gen: tuple[int, int],
        chunks: list[list[str]],
        futures: list[asyncio.Future[None]],
    ) -> None:
        try:
            for chunk, fut in zip(chunks, futures, strict=True):
                if self.cache.changes.generation(population) != gen:
                    return
                todo = [(cid, self.cache.key(cid, population)) for cid in chunk]
                try:
                    await self.offload(self._read_ahead, population, todo)
                except Exception:  # only a read ahead: each device's own poll reads its list
                    log.warning("work-list prefetch of %d devices failed", len(todo), exc_info=True)
                    return
                finally:
                    self._release(chunk, fut)
        finally:  # stopped early: the devices still waiting read their own lists
            for chunk, fut in zip(chunks, futures, strict=True):
                self._release(chunk, fut)

    def _release(self, chunk: list[str], fut: asyncio.Future[None]) -> None:
        """The prefetch of ``chunk`` is over (done or not): wake its waiters, forget its devices."""
        if not fut.done():
            fut.set_result(None)
        for cid in chunk:
            if self._ahead.get(cid) is fut:
                del self._ahead[cid]

    def _read_ahead(self, population: str, todo: list[tuple[str, tuple[Any, ...]]]) -> None:
        """Read and cache the lists of ``todo`` (client id, key): one statement (blocking)."""
        with self.store.transaction(read_only=True, snapshot=False) as tx:
            found = tx.device_runs_many([cid for cid, _ in todo])
            for cid, key in todo:
                self.cache.put(cid, key, work_json(tx, cid, population, found[cid]))
        self.prefetched += len(todo)

    def write(
        self, items: list[tuple[SignedRequest, tuple[Any, ...]]]
    ) -> list[tuple[str, bytes] | BaseException]:
        """Read the work list of each ``(request, key)`` (blocking); per poll its answer or error."""
        out: list[tuple[str, bytes] | BaseException | None] = [None] * len(items)
        # independent reads (no BEGIN, no COMMIT): per device its row if stale, then every device's
        # runs in one statement, then per device its list (from those rows and per-run caches)
        with self.store.transaction(read_only=True, snapshot=False) as tx:
            todo = []
            for i, (req, _key) in enumerate(items):
                try:
                    self.device.confirm(tx, req)
                    todo.append(i)
                except Exception as exc:
                    out[i] = exc
            found: dict[str, Any] = {}
            if todo:
                try:
                    found = tx.device_runs_many([items[i][0].client_id for i in todo])
                except Exception as exc:
                    for i in todo:
                        out[i] = exc
                    todo = []
            for i in todo:
                req, key = items[i]
                try:
                    body = work_json(tx, req.client_id, req.population, found[req.client_id])
                    out[i] = (self.cache.put(req.client_id, key, body), body)
                except Exception as exc:
                    out[i] = exc
        self.batches += 1
        return cast(list[tuple[str, bytes] | BaseException], out)


@dataclass(frozen=True)
class DevicePath:
    """What the device routes share, made once per app and kept in ``app.state.devices``.

    The routes of :mod:`fedstats.service.http.device` are module-level; they receive this through the
    :data:`fedstats.service.http.context.Devices` dependency (or, on a direct route, read it from the
    app's state: :func:`devices_of`).

    Parameters
    ----------
    store : Store
    settings : ServerSettings
        The server's settings (long-poll bound ``max_wait``).
    counters : dict
        The server's metrics counters.
    changes : Changes
        The run driver's state transitions (they wake long-polling devices).
    wakeup : Wakeup
        Set after a device's message committed, so the driver closes a round or stage at once.
    offload : Offload
    auth : DeviceAuth
        Verifies the devices' signed requests.
    cache : WorkCache
    uploads : UploadBatcher
    polls : PollBatcher
    checkins : TransactionBatcher
        The check-ins of a run lock its row: those that arrive together share one transaction.
    writes : TransactionBatcher
        Signed writes whose effect is their nonce (a request key's): those that arrive together share
        one transaction (a run's devices open their keys together as it starts).
    """

    store: Store
    settings: Any
    counters: dict[str, float]
    changes: Changes
    wakeup: Wakeup
    offload: Offload
    auth: DeviceAuth
    cache: WorkCache
    uploads: UploadBatcher
    polls: PollBatcher
    checkins: TransactionBatcher
    writes: TransactionBatcher

    @classmethod
    def build(
        cls,
        store: Store,
        settings: Any,
        counters: dict[str, float],
        changes: Changes,
        wakeup: Wakeup,
        offload: Offload,
        key_secret: bytes,
    ) -> DevicePath:
        """The device path of an app: its device check, work cache and batchers made over ``store``.

        ``settings`` gives the replay window and the cache's life (``work_cache_seconds``, default
        60); ``key_secret`` is the secret of the devices' request keys.
        """
        cache = WorkCache(changes, float(getattr(settings, "work_cache_seconds", 60.0)))
        device = DeviceAuth(
            store, settings.replay_window, offload, on_write=cache.touch, key_secret=key_secret
        )
        uploads = UploadBatcher(store, offload)
        polls = PollBatcher(store, offload, device, cache)
        checkins = TransactionBatcher(store, offload)
        writes = TransactionBatcher(store, offload)
        return cls(
            store,
            settings,
            counters,
            changes,
            wakeup,
            offload,
            device,
            cache,
            uploads,
            polls,
            checkins,
            writes,
        )


def devices_of(request: Request) -> DevicePath:
    """The app's :class:`DevicePath` (``app.state.devices``)."""
    got: DevicePath = request.app.state.devices
    return got


class DeviceWrites:
    """ASGI middleware: after each state-changing ``/v1/client/...`` request, drop the device's work list.

    The dependency drops it before the request's effect (:class:`~.deps.DeviceAuth`); this drops it
    again once the effect committed, so a poll computed in between is not kept.
    """

    def __init__(self, app: Any, cache: WorkCache) -> None:
        self.app = app
        self.cache = cache
        self._header = auth.HEADER_CLIENT.lower().encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Pass the request on; then touch the device's entry if it was a device's write."""
        await self.app(scope, receive, send)
        if (
            scope["type"] == "http"
            and scope["method"] != "GET"
            and scope["path"].startswith("/v1/client/")
            and not scope.get("fedstats.work_cached")
        ):
            for name, value in scope.get("headers", ()):
                if name == self._header:
                    self.cache.touch(value.decode("latin-1"))
                    break


def json_body(body: bytes) -> Any:
    """A request body as JSON: finite numbers, bounded nesting; else 422 naming the field."""
    try:  # finite numbers only, bounded nesting (422 naming the field)
        return strict_loads(body or b"{}")
    except BadJSON as exc:
        raise HTTPException(422, str(exc)) from None


def work_json(tx: State, client_id: str, population: str, device_runs: Any = None) -> bytes:
    """A device's work list as compact JSON bytes (:func:`fedstats.service.domain.runs.client_work_json`)."""
    return runs.client_work_json(tx, client_id, population, device_runs)


Handler = Callable[[Request], Awaitable[Response]]

WAIT_PARAM = re.compile(rb"wait=([0-9]{1,6}(?:\.[0-9]{1,6})?)")


def index_of(raw: str) -> int | None:
    """A round index written canonically (``0``, ``17``; no sign, no leading zero), else None."""
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10) or (raw[0] == "0" and raw != "0"):
        return None
    index = int(raw)
    return index if index <= MAX_INDEX else None


class DirectRoute(StrictRoute):
    """A FastAPI route whose requests go to a fast handler first (made by :func:`direct_route`).

    Built on FastAPI's documented extension point, a custom :class:`~fastapi.routing.APIRoute` class
    overriding ``get_route_handler`` ("Custom Request and APIRoute class" in FastAPI's documentation);
    reached through the router, or straight from :class:`DirectRoutes`.
    """

    direct: Callable[[Request], Coroutine[Any, Any, Response]]
    """The route's handler, which :class:`DirectRoutes` calls."""

    @staticmethod
    @abstractmethod
    def fast(request: Request, slow: Handler) -> Awaitable[Response]:
        """Answer ``request``, or hand it to ``slow`` (FastAPI's own handler of the endpoint).

        Abstract: each class :func:`direct_route` makes defines it.
        """

    @staticmethod
    @abstractmethod
    def accepts(scope: Any, path_params: dict[str, Any]) -> bool:
        """Whether :meth:`fast` answers this request itself (else FastAPI's layers are needed).

        Abstract: each class :func:`direct_route` makes defines it.
        """

    def serves(self, scope: Any) -> bool:
        """Whether the route's own path and methods match the request (Starlette's ``Route.matches``).

        Not so for a route of a router included under a prefix: :class:`DirectRoutes` takes none.
        """
        return Route.matches(self, scope)[0] is Match.FULL

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler of the endpoint, behind :meth:`fast`."""
        slow = super().get_route_handler()
        fast = self.fast

        async def handler(request: Request) -> Response:
            known = request.scope.get(DirectRoutes.SCOPE_KEY)
            if known is not None and self not in known and self.serves(request.scope):
                known.append(self)  # reached through the router: DirectRoutes takes it from now on
            return await fast(request, slow)

        self.direct = handler
        return handler


def direct_route(
    fast: Callable[[Request, Handler], Awaitable[Response]],
    wellformed: Callable[[Any, dict[str, Any]], bool],
) -> type[APIRoute]:
    """A route class whose requests go to ``fast(request, slow)`` instead of FastAPI's handler.

    The route stays a FastAPI route (its parameters, body and answers are in ``/openapi.json``, and
    schema-driven tests see it as declared); only its request handling is replaced: ``fast`` handles a
    well-formed request itself (no dependency resolution, no parameter models, no response model) and
    hands anything else to ``slow``, FastAPI's own handler of the declared endpoint, which answers
    exactly as before (a malformed path parameter: the same 422). Errors ``fast`` raises are answered by
    the app's exception handlers, as an endpoint's are. ``wellformed(scope, path_params)`` tells
    :class:`DirectRoutes` which requests ``fast`` answers itself (the others need FastAPI's layers).
    """
    return type(
        "DirectRoute",
        (DirectRoute,),
        {"fast": staticmethod(fast), "accepts": staticmethod(wellformed)},
    )


class DirectRoutes:
    """ASGI middleware that hands the requests of :func:`direct_route` routes straight to their handler.

    A device's poll and upload would otherwise cross the app's inner layers (exception middleware,
    exit stack, the router's linear scan of every route, FastAPI's request wrapper) for nothing: a
    direct route's handler needs none of them. Only public interfaces are used: the direct routes are
    those given (the device routes, :data:`fedstats.service.http.device.router`), and any other one at its
    first request through the router (it adds itself to the list this middleware puts in the scope under
    :data:`SCOPE_KEY`: a route of a router made per app, such as the Prio3 upload's); from then on a
    request it matches (Starlette's ``route.matches(scope)``:
    method, path and the route's own converters) and accepts goes to its handler, with what the router
    would have set in the scope (``route``, ``endpoint``, ``path_params``), and an exception it raises
    is answered by the app's handler for it (``app.exception_handlers``), as the exception middleware
    would (anything without a handler propagates, as before). Every other request goes on unchanged.

    Its gain, with :func:`direct_route`, is measured in :mod:`fedstats.service.http.device` (about 17% of
    the server's CPU per report, ``benchmarks/service.py``).

    Parameters
    ----------
    app : ASGI app
        The app's inner stack.
    routes : sequence of routes, optional
        Routes known at once; those built by :func:`direct_route` are taken.
    """

    SCOPE_KEY = "fedstats.direct_routes"

    def __init__(self, app: Any, routes: Sequence[Any] = ()) -> None:
        self.app = app
        self.routes: list[DirectRoute] = [r for r in routes if isinstance(r, DirectRoute)]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Answer a direct route's request through its handler; pass anything else on."""
        if scope["type"] == "http":
            method = scope["method"]
            # a route of another method, or whose pattern the path does not match, cannot match FULL:
            # skipped before its ``matches`` (the path is the route path when no root path is set)
            path = None if scope.get("root_path") else scope["path"]
            for route in self.routes:
                if (route.methods and method not in route.methods) or (
                    path is not None and route.path_regex.match(path) is None
                ):
                    continue
                match, child = route.matches(scope)
                if match is not Match.FULL:
                    continue
                if not route.accepts(scope, child["path_params"]):  # FastAPI's parsing, its errors
                    break
                scope.update(child)
                request = Request(scope, receive, send)
                try:
                    response = await route.direct(request)
                except Exception as exc:
                    handler = _handler_for(scope["app"], exc)
                    if handler is None:
                        raise
                    response = await handler(request, exc)
                await response(scope, receive, send)
                return
            scope[self.SCOPE_KEY] = self.routes
        await self.app(scope, receive, send)


def _handler_for(app: Any, exc: Exception) -> Any:
    """The app's exception handler for ``exc`` (the nearest class in its MRO), or None.

    A handler of ``Exception`` itself is the server-error middleware's, not the exception middleware's:
    not taken (the exception propagates, as it would through the exception middleware).
    """
    handlers = getattr(app, "exception_handlers", {})
    for cls in type(exc).__mro__:
        if cls is not Exception and cls in handlers:
            return handlers[cls]
    return None
