"""Deadlines measured on the monotonic clock: a wall-clock step neither ends nor extends a stage.

Deadlines are stored as Unix seconds (``runs.checkin_deadline``, ``rounds.deadline``): every server
process, and a restarted one, reads the same value. Within a process each deadline is measured on the
monotonic clock (:data:`monotonic`, which an NTP step or an operator's ``date -s`` does not move): the
first time the process meets a deadline it anchors it, ``monotonic() + (deadline - wall())``, or, when
it sets the deadline itself (a run created, a round opened), ``monotonic() + seconds``; from then on the
deadline has passed when the monotonic clock reaches the anchor, whatever the wall clock does.
:meth:`Deadlines.as_wall` translates an anchored deadline back to the wall clock of this moment, for
code that compares with ``time.time()``.

A deadline first met after a wall-clock step (a process started after it) is anchored from the stepped
clock: only a process that was running across the step is immune to it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Final

__all__ = ["DEADLINES", "Deadlines", "monotonic", "wall"]

wall: Callable[[], float] = time.time
"""The wall clock (Unix seconds) deadlines are stored in; tests step it."""
monotonic: Callable[[], float] = time.monotonic
"""The monotonic clock deadlines are measured on."""

_MAX_ANCHORS: Final = 100_000


class Deadlines:
    """Stored (wall-clock) deadlines anchored to this process's monotonic clock (see the module)."""

    def __init__(self) -> None:
        self._anchors: dict[Hashable, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def set(self, key: Hashable, seconds: float) -> float:
        """Start a deadline ``seconds`` from now; return its wall-clock value (to store)."""
        now_wall, now_mono = wall(), monotonic()
        deadline = now_wall + float(seconds)
        with self._lock:
            self._put(key, (deadline, now_mono + float(seconds)))
        return deadline

    def _put(self, key: Hashable, anchor: tuple[float, float]) -> None:
        if len(self._anchors) >= _MAX_ANCHORS:  # a long-lived server: re-anchored when met again
            self._anchors.clear()
        self._anchors[key] = anchor

    def remaining(self, key: Hashable, deadline: float) -> float:
        """Seconds left before the stored ``deadline`` of ``key``, on the monotonic clock (< 0: passed)."""
        with self._lock:
            got = self._anchors.get(key)
            if got is None or got[0] != deadline:  # first met (or changed): anchored now
                got = (deadline, monotonic() + (float(deadline) - wall()))
                self._put(key, got)
        return got[1] - monotonic()

    def passed(self, key: Hashable, deadline: float) -> bool:
        """Whether the stored ``deadline`` of ``key`` has passed, on the monotonic clock."""
        return self.remaining(key, deadline) <= 0

    def as_wall(self, key: Hashable, deadline: float) -> float:
        """The deadline of ``key`` on the wall clock as it reads now (for code comparing with it)."""
        return wall() + self.remaining(key, deadline)


DEADLINES = Deadlines()
"""This process's deadlines (the driver and the request handlers share them)."""
