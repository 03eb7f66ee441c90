"""Give the C allocator's free memory back to the operating system (glibc ``malloc_trim``).

A long-lived server process allocates and frees large transient buffers (a secure stage's messages, a
statement's parameters, TLS records): glibc keeps the freed memory in its arenas, so the process's
resident memory stays at its highest point even when the memory is no longer used. :func:`trim` returns
the free pages of every arena to the operating system (``malloc_trim(0)``) and :func:`limit_arenas` keeps
the arenas few; elsewhere than glibc they do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
import time
from collections.abc import Callable

from fedstats.errors import ParameterError

__all__ = ["ARENAS", "Trimmer", "limit_arenas", "trim"]

ARENAS = 2
"""The C allocator's arenas in a server process (:func:`limit_arenas`)."""

_M_ARENA_MAX = -8  # mallopt's parameter number (glibc's malloc.h)

_LOCK = threading.Lock()
_LIBC: ctypes.CDLL | None = None
_LOADED = False


def _glibc() -> ctypes.CDLL | None:
    """The C library if it has glibc's ``malloc_trim`` and ``mallopt`` (loaded once), else None."""
    global _LIBC, _LOADED
    with _LOCK:
        if not _LOADED:
            _LOADED = True
            if sys.platform.startswith("linux"):
                try:
                    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                    libc.malloc_trim.argtypes = [ctypes.c_size_t]
                    libc.malloc_trim.restype = ctypes.c_int
                    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
                    libc.mallopt.restype = ctypes.c_int
                    _LIBC = libc
                except (OSError, AttributeError):  # musl and others
                    _LIBC = None
        return _LIBC


def _malloc_trim() -> Callable[[int], int] | None:
    libc = _glibc()
    return None if libc is None else libc.malloc_trim


def limit_arenas(count: int = ARENAS) -> bool:
    """Let the C allocator use at most ``count`` arenas (call it before the process starts threads).

    glibc gives threads that contend for the allocator arenas of their own, up to eight per core; a
    server's many short-lived pool threads then leave freed memory scattered over many arenas, none of
    which can give it back. Returns whether the limit was set (False where glibc is not used).

    Parameters
    ----------
    count : int
        Arenas, >= 1.

    Raises
    ------
    ParameterError
        If ``count`` < 1.
    """
    if count < 1:
        raise ParameterError("count", count, "an integer >= 1")
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_ARENA_MAX, int(count)))


def trim() -> bool:
    """Return the allocator's free pages to the operating system.

    Returns
    -------
    bool
        Whether memory was released (False also where glibc's ``malloc_trim`` is not available).
    """
    fn = _malloc_trim()
    if fn is None:
        return False
    return bool(fn(0))


class Trimmer:
    """Calls :func:`trim` at most once per ``interval`` seconds (its cost grows with the heap's size).

    Parameters
    ----------
    interval : float
        Seconds, >= 0.
    """

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = float(interval)
        self._last = -float("inf")

    def due(self) -> bool:
        """Whether ``interval`` seconds have passed since the last trim (the next call would trim)."""
        return time.monotonic() - self._last >= self.interval

    def __call__(self) -> bool:
        """Trim unless the last trim was less than ``interval`` seconds ago; whether it trimmed."""
        now = time.monotonic()
        if now - self._last < self.interval:
            return False
        self._last = now
        trim()
        return True
