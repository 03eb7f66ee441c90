"""Resource guards: estimate a request's memory and time before starting, refuse what cannot fit.

A command estimates its peak memory from the shapes it will allocate and its time from a measured
per-client rate, then calls :func:`check_memory` (refuses above the memory this machine has available, with
the estimate in the message) and :func:`duration_warning` (a sentence to show when a run will take more
than a few minutes).
"""

from __future__ import annotations

import os
from typing import Any

from fedstats.errors import ParameterError

__all__ = ["available_memory", "check_memory", "duration_warning", "human_bytes", "human_seconds"]

WARN_SECONDS = 180.0
"""Runs expected to take longer than this get a warning before they start."""


def available_memory() -> int:
    """Bytes of memory available to a new allocation now (``MemAvailable``; total RAM as a fallback).

    Returns
    -------
    int
        Available bytes, >= 0.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def human_bytes(n: float) -> str:
    """Format a byte count with a binary unit (``"1.5 GiB"``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover - the loop returns


def human_seconds(s: float) -> str:
    """Format a duration (``"42 s"``, ``"3.5 min"``, ``"2.1 h"``, ``"4.0 days"``)."""
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def check_memory(
    needed: float, *, parameter: str, value: Any, what: str, limit: float | None = None
) -> None:
    """Refuse a request whose estimated peak memory exceeds what is available.

    Parameters
    ----------
    needed : float
        Estimated peak bytes of the request.
    parameter : str
        The user's parameter that drives the size (named in the error).
    value : object
        Its value.
    what : str
        What takes the memory, in words (``"the l x m projection"``).
    limit : float, optional
        Bytes available (default :func:`available_memory`).

    Raises
    ------
    ParameterError
        If ``needed`` exceeds the limit; the message gives the estimate and the limit.
    """
    avail = float(available_memory() if limit is None else limit)
    if needed > avail:
        raise ParameterError(
            parameter,
            value,
            f"a smaller value: {what} needs about {human_bytes(needed)}, and this machine has "
            f"{human_bytes(avail)} available",
        )


def duration_warning(seconds: float, *, what: str) -> str | None:
    """A warning sentence when ``seconds`` exceeds :data:`WARN_SECONDS`, else None.

    Parameters
    ----------
    seconds : float
        Estimated duration (from a measured per-client rate).
    what : str
        What runs (``"10^12 simulated clients on the serial route"``).

    Returns
    -------
    str or None
    """
    if seconds <= WARN_SECONDS:
        return None
    return (
        f"warning: {what} will take about {human_seconds(seconds)} on this machine "
        "(Ctrl-C stops it; see --backend aggregate or fewer clients for faster runs)"
    )
