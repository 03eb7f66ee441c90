"""The server process's background work, started and stopped with the app (its ASGI lifespan).

:class:`Publisher` publishes a state change of some populations' runs: to the run driver (claim a new run
at its next pass), to the store's change counter (other server processes' long polls) and to this
process's long-polling devices. :class:`Background` runs, for as long as the app serves:

- the run driver's loop (:meth:`fedstats.service.domain.driver.Driver.tick` in a worker thread; woken
  early by a device's message, else every ``tick`` seconds), with a purge of expired nonces and idempotency
  keys at most every :data:`PURGE_SECONDS`, and after a pass that changed a run the C allocator's free
  memory returned to the operating system (at most every :data:`TRIM_SECONDS`);
- a watcher thread reading the store's state and device versions every ``recheck`` seconds: a change made
  by another server process wakes this one's polls, and an unchanged device version keeps the cached
  device rows trusted (:meth:`fedstats.service.http.deps.DeviceAuth.observe`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fedstats.service.domain import driver, idempotency
from fedstats.service.domain.changes import Changes, Wakeup, record_change
from fedstats.service.http.fastpath import Offload
from fedstats.service.http.heap import Trimmer
from fedstats.service.http.settings import ServerSettings
from fedstats.service.store import Store, StoreError

__all__ = ["PURGE_SECONDS", "TRIM_SECONDS", "Background", "Publisher", "fault_hook"]

log = logging.getLogger("fedstats.service")

PURGE_SECONDS = 30.0
"""Expired nonces and idempotency keys are deleted at most this often (seconds)."""

TRIM_SECONDS = 5.0
"""The run driver's loop returns the allocator's free memory to the operating system
(:func:`fedstats.service.http.heap.trim`) once every this many seconds (whether its passes changed a
run or not): a trim's CPU grows with the heap's size, and the pages it returns are faulted in again
when reused."""


def fault_hook(crash_after: str | None) -> Callable[[str, str, int], None]:
    """The run driver's fault injection for tests: SIGKILL this process at ``"EVENT:ROUND"``.

    ``EVENT`` is ``journaled``, ``opened`` or ``stageS`` (a secure session of the round journaled its
    stage-``S`` messages, S = 1..5, 5 = done); None injects nothing.
    """

    def hook(event: str, run_id: str, index: int) -> None:
        if crash_after and crash_after == f"{event}:{index}":
            log.info(json.dumps({"event": "fault_injection", "at": crash_after, "run_id": run_id}))
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


class Publisher:
    """Publishes a state change of ``populations``' runs (None: any) to all server processes' polls.

    Parameters
    ----------
    store : Store
    changes : Changes
        This process's long-poll wake-ups.
    """

    def __init__(self, store: Store, changes: Changes) -> None:
        self.store = store
        self.changes = changes
        self.runner: driver.Driver | None = None  # set once the driver exists (it publishes too)

    def __call__(self, populations: set[str] | None) -> None:
        """Publish the change (never raises for an unreachable store: local devices still learn it)."""
        if self.runner is not None:
            self.runner.poke()  # a run created or cancelled: claim it at the next pass
        try:
            self.changes.observe(record_change(self.store))
        except StoreError:  # the database is away: this process's devices still learn of it
            log.exception("cannot record a state change")
        self.changes.bump(populations)


class Background:
    """The app's background work (module docstring), as its lifespan (:meth:`lifespan`).

    Parameters
    ----------
    store : Store
    settings : ServerSettings
        ``tick``, ``recheck``, ``replay_window`` and ``idempotency_retention`` are used.
    runner : Driver
    changes : Changes
    wakeup : Wakeup
    offload : Offload
        The device requests' store threads, closed at shutdown.
    run_driver : bool
        Run the driver's loop (False: only the watcher).
    """

    def __init__(
        self,
        store: Store,
        settings: ServerSettings,
        runner: driver.Driver,
        changes: Changes,
        wakeup: Wakeup,
        offload: Offload,
        *,
        run_driver: bool = True,
    ) -> None:
        self.store = store
        self.cfg = settings
        self.runner = runner
        self.changes = changes
        self.wakeup = wakeup
        self.offload = offload
        self.run_driver = run_driver

    def purge(self) -> None:
        """Delete the kept nonces and idempotency keys that can no longer be needed."""
        with self.store.transaction() as tx:
            tx.purge_nonces(time.time() - 2 * self.cfg.replay_window)
        idempotency.purge(self.store, self.cfg.idempotency_retention)

    async def _drive(self, stop: asyncio.Event) -> None:
        purged = 0.0
        trimmer = Trimmer(TRIM_SECONDS)
        while not stop.is_set():
            moved = False
            try:
                moved = await asyncio.to_thread(self.runner.tick)
                if trimmer.due():
                    # state changes free their transient buffers (a secure stage's messages, their
                    # statements), and so do the requests between two (a stage's uploads, once
                    # journaled): give the free pages back, so the process's memory follows its use
                    await asyncio.to_thread(trimmer)
                if time.monotonic() - purged > PURGE_SECONDS:
                    await asyncio.to_thread(self.purge)
                    purged = time.monotonic()
            except Exception:
                log.exception("driver tick failed")
            # a transition may enable the next one (check-in closed: open round 0), so pass again
            if not moved:
                await self.wakeup.wait(self.cfg.tick)

    def _watch(self, app: Any, halt: threading.Event) -> None:
        # a thread of its own, not a task: an event loop saturated by requests would delay the reads,
        # and the device rows' trust (DeviceAuth.observe) would lapse under load
        while True:
            try:
                began = time.monotonic()
                with self.store.transaction(read_only=True) as tx:
                    state, devices = tx.version(), tx.devices_version()
                if self.changes.observe(state):
                    self.changes.bump()  # another server process changed a run
                # no device row changed anywhere: the cached ones stay trusted (DeviceAuth)
                app.state.device_auth.observe(devices, began)
            except Exception:  # the store unreachable for a while: keep watching
                log.exception("cannot read the state version")
            if halt.wait(self.cfg.recheck):
                return

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        """Start the driver's loop and the watcher; at shutdown stop both and close the store threads."""
        stop = asyncio.Event()
        self.changes.bind(asyncio.get_running_loop())
        self.wakeup.bind()
        halt = threading.Event()
        task = asyncio.create_task(self._drive(stop)) if self.run_driver else None
        watcher = threading.Thread(
            target=self._watch, args=(app, halt), name="fedstats-versions", daemon=True
        )
        watcher.start()
        yield
        stop.set()
        self.wakeup.set()
        halt.set()
        await asyncio.to_thread(watcher.join, 30)
        if task is not None:
            await task
        self.offload.close()
