"""Deadlines that hold on a loaded machine: one time scale for every service test's deadlines and waits.

A service test gives its devices and servers deadlines (a secure stage waits ``round`` seconds for the
devices that stopped) and waits for them (``wait_run(..., timeout=...)``). On a machine shared with other
jobs the same work takes longer in wall-clock time, and a fixed 12 s stage deadline aborted runs whose
devices were only slow. Every such number goes through :func:`scaled`, which multiplies it by
:func:`time_scale`, measured once per process when first needed:

* the **contention** of a short CPU-bound loop: its wall-clock time over its CPU time (1 on an idle core,
  about 2 when another process competes for it); this does not depend on the CPU's speed;
* the **load** of the machine: the one-minute load average per CPU (``os.getloadavg()`` over
  ``os.cpu_count()``);

the larger of the two, bounded to ``[1, MAX_SCALE]`` (1 below ``IDLE_BELOW``, timer noise). On an idle machine the scale is 1: no test waits
longer than before. ``FEDSTATS_TEST_TIME_SCALE`` overrides the measurement (a number in ``[0.5, 20]``,
e.g. ``FEDSTATS_TEST_TIME_SCALE=3`` on a slow CI runner).
"""

from __future__ import annotations

import functools
import hashlib
import os
import time

__all__ = ["ENV", "MAX_SCALE", "measure_time_scale", "scaled", "time_scale"]

ENV = "FEDSTATS_TEST_TIME_SCALE"
"""Environment variable that sets the scale instead of measuring it."""

MAX_SCALE = 4.0
"""Largest measured scale: a machine busier than this fails tests rather than making them crawl."""

ENV_RANGE = (0.5, 20.0)
"""Accepted values of :data:`ENV`."""

IDLE_BELOW = 1.25
"""A measured scale below this is timer noise on an idle machine: the scale is then exactly 1."""

CALIBRATION_CPU_SECONDS = 0.05
"""CPU time of the contention loop (about 50 ms: negligible beside any service test)."""


def _contention(cpu_seconds: float = CALIBRATION_CPU_SECONDS) -> float:
    """Wall-clock time over CPU time of a CPU-bound loop of ``cpu_seconds`` (>= 1 up to timer noise)."""
    block = b"\0" * 4096
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.process_time() - cpu0 < cpu_seconds:
        for _ in range(50):
            block = hashlib.sha256(block).digest() * 128
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return wall / cpu if cpu > 0 else 1.0


def _load_per_cpu() -> float:
    """One-minute load average per CPU (0 where the platform has no load average)."""
    try:
        return os.getloadavg()[0] / max(1, os.cpu_count() or 1)
    except (AttributeError, OSError):
        return 0.0


def measure_time_scale() -> float:
    """Measure the scale now: the larger of the loop's contention and the load per CPU, in [1, MAX_SCALE].

    Below :data:`IDLE_BELOW` it is exactly 1 (an idle machine's timer noise lengthens nothing).

    Returns
    -------
    float
    """
    measured = max(_contention(), _load_per_cpu())
    return 1.0 if measured < IDLE_BELOW else min(MAX_SCALE, measured)


@functools.cache
def time_scale() -> float:
    """The factor every service-test deadline and wait is multiplied by (measured once per process).

    Returns
    -------
    float
        :data:`ENV` when set (checked to lie in :data:`ENV_RANGE`), else :func:`measure_time_scale`.

    Raises
    ------
    ValueError
        If :data:`ENV` is set to something other than a number in :data:`ENV_RANGE`.
    """
    text = os.environ.get(ENV, "").strip()
    if text:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        low, high = ENV_RANGE
        if not low <= value <= high:  # also refuses nan
            raise ValueError(f"{ENV}={text!r}: expected a number in [{low:g}, {high:g}]")
        return value
    return measure_time_scale()


def scaled(seconds: float) -> float:
    """``seconds`` times :func:`time_scale`: a deadline or a wait of a service test.

    Parameters
    ----------
    seconds : float
        The value on an idle machine.

    Returns
    -------
    float
    """
    return float(seconds) * time_scale()
