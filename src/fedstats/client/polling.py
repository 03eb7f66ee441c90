"""The clock of a device's polling loop: how long a poll may be held, when to retry, when to stop.

:class:`~fedstats.client.Device` (core and secure runs) and :class:`~fedstats.client.vdaf_runs.Prio3Runs`
(Prio3 tasks) poll the same way: a poll is held by the server at most ``wait`` seconds and never past
``max_seconds``; a failed poll is retried after ``poll`` seconds; after each poll the loop stops when its
goal is met, ``until`` says so or the time is up, and otherwise polls again at once (long polling) or
after ``poll`` seconds (``wait`` 0).
"""

from __future__ import annotations

import time

__all__ = ["PollClock"]


class PollClock:
    """The time of a polling loop, started at construction.

    Parameters
    ----------
    max_seconds : float or None
        Stop after this long (None: no limit).
    """

    def __init__(self, max_seconds: float | None) -> None:
        self.max_seconds = max_seconds
        self.t0 = time.monotonic()

    def out_of_time(self) -> bool:
        """Whether more than ``max_seconds`` have passed."""
        return self.max_seconds is not None and time.monotonic() - self.t0 > self.max_seconds

    def hold(self, wait: float) -> float:
        """``wait`` seconds, cut to what is left of ``max_seconds`` (>= 0)."""
        if self.max_seconds is None:
            return wait
        return max(0.0, min(wait, self.max_seconds - (time.monotonic() - self.t0)))

    def retry(self, poll: float) -> bool:
        """After a failed poll: False when out of time, else True after sleeping ``poll`` seconds."""
        if self.out_of_time():
            return False
        time.sleep(poll)
        return True

    def done(self, stop: bool, *, wait: float, poll: float) -> bool:
        """After a poll: True when the loop ends (``stop``, or out of time).

        Otherwise False, after sleeping ``poll`` seconds when ``wait`` is 0 (no long polling).
        """
        if stop or self.out_of_time():
            return True
        if wait <= 0:
            time.sleep(poll)
        return False
