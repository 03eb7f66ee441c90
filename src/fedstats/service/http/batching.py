"""Group commit: the blocking store work of requests that arrive together, run as one batch.

:class:`Batcher` is the base of the device endpoints' batchers (report uploads and work polls in
:mod:`fedstats.service.http.fastpath`; secure check-ins and stage messages in
:mod:`fedstats.service.http.secure_batch`).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fedstats.service.domain.batched import BATCH_CLIENTS, write_batch
from fedstats.service.http.deps import NonceUse, use_nonce
from fedstats.service.store import State, Store

__all__ = ["Batcher", "TransactionBatcher", "Work"]

In = TypeVar("In")
Out = TypeVar("Out")

Offload = Callable[..., Awaitable[Any]]
"""``await offload(fn, *args)``: ``fn(*args)`` on a store thread (:class:`fedstats.service.http.fastpath.Offload`)."""


class Batcher(ABC, Generic[In, Out]):
    """Runs the blocking store work of requests that arrive together as one batch on one store thread.

    A request waits only while the batches before it are being processed (at most ``max_inflight`` at
    once): under load the requests that arrived meanwhile are handled together by :meth:`write`
    (one hand-off to a store thread, one connection, set-based work where the subclass can), and alone
    at once when the server is quiet (no added delay).

    Parameters
    ----------
    store : Store
    offload : callable
        Where the blocking store work runs.
    max_batch : int
        Most requests in one batch, >= 1.
    max_inflight : int
        Most batches processed at once, >= 1 (1: the requests that arrive meanwhile wait for the batch
        in flight; more: reads that wait on the database overlap).
    """

    def __init__(
        self, store: Store, offload: Offload, max_batch: int = 256, max_inflight: int = 1
    ) -> None:
        self.store = store
        self.offload = offload
        self.max_batch = max_batch
        self.max_inflight = max_inflight
        self._pending: list[tuple[In, asyncio.Future[Out]]] = []
        self._running = 0  # batches in flight
        self.batches = 0  # batches written (for tests)

    async def __call__(self, item: In) -> Out:
        """Process ``item`` with the others pending; its outcome (or its error, raised here)."""
        fut: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._pending.append((item, fut))
        if self._running < self.max_inflight:
            self._running += 1
            asyncio.get_running_loop().create_task(self._drain())
        return await fut

    @abstractmethod
    def write(self, items: list[In]) -> list[Out | BaseException]:
        """Process ``items`` (blocking, on a store thread); per item its outcome or its error."""

    def write_bulk(
        self,
        count: int,
        exact: set[int],
        bulk: Callable[[State, list[int]], dict[int, Out | BaseException]],
        alone: Callable[[State, int], Out],
    ) -> list[Out | BaseException | None]:
        """Write items set-based in one transaction; those the bulk write cannot decide, each alone.

        The items not in ``exact`` are written together by ``bulk(tx, todo)``, which answers the
        positions of ``todo`` it decided. If it left some undecided, the transaction is rolled back
        (their nonces must not stay used by this batch) and the batch is written again without them;
        each retry drops at least one item, and a third means contention: every item left goes alone.
        If the batch fails as a whole, every item of it goes alone, with its own error. An item goes
        alone by ``alone(tx, i)`` in a transaction of its own, so its answer (or error) is the one it
        would get outside a batch.

        Parameters
        ----------
        count : int
            How many items, >= 0 (positions ``0 .. count - 1``).
        exact : set of int
            The positions that must go alone from the start (the set is updated).
        bulk : callable
            ``bulk(tx, todo) -> {position: answer}`` in the batch's transaction.
        alone : callable
            ``alone(tx, position) -> answer`` in a transaction of its own.

        Returns
        -------
        list
            Per position its answer, or the error it raised alone.
        """
        out: list[Out | BaseException | None] = [None] * count
        for _ in range(3):  # each retry drops at least one item; a third means contention
            todo = [i for i in range(count) if i not in exact]
            if not todo:
                break
            try:
                with self.store.transaction() as tx:
                    got = bulk(tx, todo)
                    redo = {i for i in todo if i not in got}
                    if redo:  # roll back: their nonces must not stay used by this batch
                        raise _Redo(redo)
                self.batches += 1
                for i, answer in got.items():
                    out[i] = answer
                break
            except _Redo as again:
                exact |= again.exact
            except Exception:  # the batch failed as a whole: every item alone, with its own error
                exact |= set(todo)
                break
        else:
            exact |= {i for i in range(count) if i not in exact}
        for i in sorted(exact):
            try:
                with self.store.transaction() as tx:
                    out[i] = alone(tx, i)
            except Exception as exc:
                out[i] = exc
        return out

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
                outcomes: list[Out | BaseException]
                try:
                    outcomes = await self.offload(self.write, [u for u, _ in batch])
                except asyncio.CancelledError:  # the server is stopping: nobody waits any more
                    for _, fut in batch + self._pending:
                        fut.cancel()
                    self._pending.clear()
                    raise
                except Exception as exc:  # the pool is gone (shutdown): fail this batch only
                    outcomes = [exc] * len(batch)
                for (_, fut), got in zip(batch, outcomes, strict=True):
                    if fut.done():  # the request was cancelled (client gone); its write stands
                        continue
                    if isinstance(got, BaseException):
                        fut.set_exception(got)
                    else:
                        fut.set_result(got)
        finally:
            self._running -= 1


class _Redo(Exception):
    """A batch must be written again without some items (see :meth:`Batcher.write_bulk`)."""

    def __init__(self, exact: set[int]) -> None:
        super().__init__()
        self.exact = exact


class _Replayed(Exception):
    """A batch's nonce was used before: its requests go alone (the replay is refused there)."""


@dataclass(frozen=True)
class Work:
    """A request's store work in a :class:`TransactionBatcher`: its nonce, then ``fn(tx, held)``.

    Attributes
    ----------
    nonce : NonceUse or None
        The request's nonce, recorded in the transaction before ``fn`` runs (a replay is refused 401 and
        nothing of the request is written).
    fn : callable
        ``fn(tx, held) -> answer`` in the open transaction; ``held`` is a dict the requests of one
        transaction share (:func:`fedstats.service.domain.runs.locked_run`), empty for a request alone
        and, for a batch, starting with the set of its requests' client ids
        (:mod:`fedstats.service.domain.batched`).
    """

    nonce: NonceUse | None
    fn: Callable[[Any, dict[Any, Any]], Any]


class TransactionBatcher(Batcher[Work, Any]):
    """Runs the store work of requests that arrive together in one transaction (group commit).

    For requests whose work is a few statements behind a lock they all take (a run's check-ins and
    reveals lock the run row): one transaction, one lock, one commit and one hand-off to a store thread
    for the batch instead of one each; their nonces are recorded first, in one statement
    (:meth:`~fedstats.service.store.core.CoreQueries.use_nonces`). Each request is answered only once
    its transaction committed. If a nonce was used before or any request's work raises, the transaction
    is rolled back and every request of the batch is run alone in a transaction of its own, so each gets
    the answer (or the error) it would get alone.
    """

    LOCK_BATCH = 32
    """Most requests per transaction: the batch holds the lock they share (the run driver waits for
    it, and at n = 5,000 batches of 256 check-ins made its lock timeouts expire)."""

    def __init__(self, store: Store, offload: Offload) -> None:
        super().__init__(store, offload, max_batch=self.LOCK_BATCH)

    def write(self, items: list[Work]) -> list[Any]:
        """Run ``items`` (blocking, on a store thread); per item its answer or its error."""
        nonces = [
            (w.nonce.client_id, w.nonce.nonce, w.nonce.ts) for w in items if w.nonce is not None
        ]
        # two requests with one nonce: one of them is a replay, found alone below
        if len(items) > 1 and len({(c, n) for c, n, _ in nonces}) == len(nonces):
            try:
                with self.store.transaction() as tx:
                    if not tx.use_nonces(nonces):
                        raise _Replayed  # a replay among them: each alone below
                    # the batch's devices: their rows are read once for all (BATCH_CLIENTS)
                    held: dict[Any, Any] = {BATCH_CLIENTS: {c for c, _, _ in nonces}}
                    got = [w.fn(tx, held) for w in items]
                    write_batch(held)  # the rows they queued, each kind in one statement
                self.batches += 1
                return got
            except Exception:  # each one alone below, with its own error
                pass
        out: list[Any] = []
        for w in items:
            try:
                with self.store.transaction() as tx:
                    use_nonce(tx, w.nonce)
                    out.append(w.fn(tx, {}))
            except Exception as exc:
                out.append(exc)
        return out
