"""Wake-ups inside one server process: long-polling devices on state changes, the run driver on messages.

Devices long-poll ``GET /v1/client/work`` (:mod:`fedstats.service.http.device`) and their next secure stage message
(:mod:`fedstats.service.http.secure`): the request is held (:meth:`Changes.hold`) until the device's work list differs
from the one it already has, or the stage opens, instead of the device asking again every fraction of a
second.
Two signals make that cheap and prompt:

* :class:`Changes` counts the run driver's state transitions (a run opened, seeded, finished; a round or a
  secure stage opened or closed) per population and wakes the waiting polls of the devices of that
  population, which then recompute their work (other populations' devices sleep on);
* :class:`Wakeup` is set by the handlers of device messages (check-in, reveal, report, stage message), so
  the driver closes a round or a stage as soon as its last message is in rather than at its next timed
  pass; its :class:`ArrivalGate` (shared with the driver) wakes the driver only when a message may be the
  last one of what it waits for, not at every message (each pass reads the run under its row lock).

Across server processes on one database (scale-out), every transition also increments the one-row
``state_version`` counter (:func:`record_change`); each process reads it every ``ServerSettings.recheck``
seconds (:func:`read_version`, one query per process, not per device) and wakes its own waiting polls
when another process moved it. The driver sees other processes' changes at its next timed pass
(``ServerSettings.tick``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Collection
from typing import TypeVar

from fedstats.errors import ParameterError
from fedstats.service.store import Store

__all__ = [
    "ArrivalGate",
    "ArrivalKey",
    "Changes",
    "Wakeup",
    "check_wait",
    "read_version",
    "record_change",
]

T = TypeVar("T")


def record_change(store: Store) -> int:
    """Increment the shared ``state_version`` counter in its own transaction; return its new value."""
    with store.transaction() as tx:
        return tx.bump_version()


def read_version(store: Store) -> int:
    """The shared ``state_version`` counter."""
    with store.transaction(read_only=True) as tx:
        return tx.version()


class Changes:
    """Generation counters, one per population, whose increments wake coroutines waiting in :meth:`wait`.

    A device's work list only lists runs of its own population, so a state change of a run wakes only
    that population's waiting polls; a change that may concern any population (another server process
    moved the shared counter) wakes them all. :meth:`bump` may be called from any thread (the run driver
    runs in a worker thread); :meth:`wait` is awaited on the server's event loop, bound by :meth:`bind`
    when the app starts.
    """

    def __init__(self) -> None:
        self._all = 0  # bumps of every population
        self._of: dict[str, int] = {}  # bumps of one population
        self._seen: int | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: dict[str, asyncio.Event] = {}  # touched on the loop only

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the event loop the waiters run on (called once, at startup, on that loop)."""
        self._loop = loop

    def generation(self, population: str) -> tuple[int, int]:
        """What :meth:`wait` compares: it changes at every bump that concerns ``population``.

        Parameters
        ----------
        population : str

        Returns
        -------
        tuple of int
            ``(bumps of every population, bumps of this one)``.
        """
        with self._lock:
            return self._all, self._of.get(population, 0)

    def bump(self, populations: Collection[str] | None = None) -> None:
        """Record a state change of ``populations``' runs and wake their waiters.

        Thread-safe; the wake-up is a no-op before :meth:`bind`.

        Parameters
        ----------
        populations : collection of str or None
            The populations whose runs changed; None: any (wakes every waiter).
        """
        with self._lock:
            if populations is None:
                self._all += 1
            else:
                for p in populations:
                    self._of[p] = self._of.get(p, 0) + 1
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is shutting down
                loop.call_soon_threadsafe(self._fire, populations)

    def observe(self, version: int) -> bool:
        """Note the shared counter's value; return whether it moved since the last value noted."""
        with self._lock:
            moved = self._seen is not None and version != self._seen
            self._seen = version
        return moved

    def _fire(self, populations: Collection[str] | None) -> None:
        names = list(self._events) if populations is None else populations
        for p in names:
            event = self._events.pop(p, None)
            if event is not None:
                event.set()

    async def wait(self, population: str, timeout: float) -> bool:
        """Wait for the next bump of ``population`` (or of all).

        Parameters
        ----------
        population : str
        timeout : float
            Seconds, at most; <= 0 (or before :meth:`bind`) returns at once.

        Returns
        -------
        bool
            Whether a bump came.
        """
        if self._loop is None or timeout <= 0:
            return False
        event = self._events.get(population)
        if event is None:
            event = self._events[population] = asyncio.Event()
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def hold(
        self,
        population: str,
        seconds: float,
        attempt: Callable[[], Awaitable[T | None]],
        *,
        since: tuple[int, int] | None = None,
    ) -> T | None:
        """A held request: ``attempt()`` now, and again after each change of ``population``.

        Parameters
        ----------
        population : str
            The requesting device's population (whose changes may change the answer).
        seconds : float
            The longest the request is held, >= 0 (0: one attempt).
        attempt : callable
            Computes the answer, or None while there is none yet.
        since : tuple of int, optional
            A :meth:`generation` of ``population`` at which the caller knows ``attempt()`` gives None
            (e.g. read before the transaction that found the stage not open yet): the first attempt
            is made only after a change since then, not at once (it would cost a database read for
            nothing). With ``seconds`` 0 and no change, no attempt is made at all.

        Returns
        -------
        object or None
            The first answer, or None if there was none within ``seconds``.
        """
        end = time.monotonic() + seconds
        known = since
        while True:
            if known is not None:  # the answer is known to be None as of that generation
                generation, got, known = known, None, None
            else:
                generation = self.generation(population)
                got = await attempt()
            if got is not None:
                return got
            left = end - time.monotonic()
            if left <= 0:
                return None
            if self.generation(population) == generation:  # else: changed while attempt ran
                await self.wait(population, left)


def check_wait(wait: float) -> None:
    """Refuse a held request's ``wait`` outside [0, 3600] seconds (NaN too).

    Raises
    ------
    ParameterError
        Naming the accepted range (HTTP 422).
    """
    if not 0.0 <= wait <= 3600.0:
        raise ParameterError("wait", wait, "a number of seconds in [0, 3600]")


ArrivalKey = tuple[str | int, ...]
"""What an arrival counts toward: ``("checkin", run_id)`` (a check-in or a refused offer),
``("reveal", run_id)`` (a seed reveal), ``("round", run_id, round_index)`` (a plain round's report) or
``("stage", run_id, round_index, session, stage)`` (a secure stage message)."""


class ArrivalGate:
    """Whether a device's message may complete what the run driver waits for: one pass per close, not per message.

    At each look at something that waits for messages (the check-in, the seeding, a plain round, a
    secure session's stage), the driver records how many more it needs (:meth:`looked`); each message handler notes its
    arrival (:meth:`note`), which says whether that many have arrived since, i.e. whether a pass may close
    it now. A key the driver has not looked at is always due. Closes by deadline or by quiet
    (``quiet_seconds``), and messages taken by other server processes, are seen at the driver's timed
    passes (``ServerSettings.tick``).

    Thread use: :meth:`note` on the event loop, the rest in the driver's thread, one pass at a time; not
    locked, since a lost increment only delays a close to the next timed pass. Arrivals counted twice (a
    message stored after :meth:`begin` and before the look's count, or a duplicate) only wake a pass early.
    """

    def __init__(self) -> None:
        self._left: dict[ArrivalKey, int] = {}  # key -> messages still needed at the last look
        self._arrived: dict[ArrivalKey, int] = {}  # key -> arrivals noted since that look
        self._before: dict[ArrivalKey, int] = {}  # arrivals noted when the current pass began

    def note(self, key: ArrivalKey) -> bool:
        """Note one arrival toward ``key``; return whether a driver pass may now close it (:meth:`due`).

        Parameters
        ----------
        key : ArrivalKey
            What the arrival counts toward (:data:`ArrivalKey`).

        Returns
        -------
        bool
        """
        self._arrived[key] = self._arrived.get(key, 0) + 1
        return self.due(key)

    def due(self, key: ArrivalKey) -> bool:
        """Whether as many arrivals toward ``key`` were noted since the last look as it still needed.

        Parameters
        ----------
        key : ArrivalKey

        Returns
        -------
        bool
            True also for a key the driver has not looked at.
        """
        left = self._left.get(key)
        return left is None or self._arrived.get(key, 0) >= left

    def begin(self) -> None:
        """Mark the start of a driver pass: arrivals noted until now are in the counts it reads."""
        self._before = dict(self._arrived)

    def looked(self, key: ArrivalKey, left: int) -> None:
        """Record that the current pass read ``key``'s count and still needs ``left`` messages.

        Parameters
        ----------
        key : ArrivalKey
        left : int
            Messages still needed, >= 1 (the caller closes what needs none).
        """
        self._left[key] = left
        self._arrived[key] = self._arrived.get(key, 0) - self._before.pop(key, 0)

    def forget(self, run_id: str) -> None:
        """Drop what is known of ``run_id`` (it ended, or another process holds it)."""
        for d in (self._left, self._arrived, self._before):
            for key in [k for k in d if k[1] == run_id]:
                del d[key]


class Wakeup:
    """A coalescing wake-up for the run driver's loop: many :meth:`set` calls make one early pass.

    Parameters
    ----------
    gate : ArrivalGate, optional
        Shared with the driver: :meth:`arrived` then wakes it only when a message may complete what it
        waits for (default: a gate of its own, which wakes it at every message).
    """

    def __init__(self, gate: ArrivalGate | None = None) -> None:
        self._event: asyncio.Event | None = None
        self.gate = ArrivalGate() if gate is None else gate

    def arrived(self, key: ArrivalKey) -> None:
        """A device's message toward ``key`` was stored: wake the driver if it may now close ``key``."""
        if self.gate.note(key):
            self.set()

    def bind(self) -> None:
        """Create the event on the running loop (called once, at startup)."""
        self._event = asyncio.Event()

    def set(self) -> None:
        """Ask for a driver pass soon (call on the event loop, e.g. from a request handler)."""
        if self._event is not None:
            self._event.set()

    async def wait(self, timeout: float) -> None:
        """Return when :meth:`set` was called since the last return, or after ``timeout`` seconds."""
        if self._event is None:
            await asyncio.sleep(timeout)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
        self._event.clear()
