"""The progress protocol: the library reports rounds and shards; front ends render them.

A base module: every layer may report progress (the engine's routes, the in-process
secure-aggregation driver, the reproductions). The library never prints. Anything long-running takes
a ``progress`` argument implementing :class:`Progress`; the CLI passes one that draws rich progress
bars, tests pass nothing.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["NullProgress", "Progress", "RecordingProgress"]


class Progress(Protocol):
    """Receiver of progress events.

    ``start(task, total)`` opens a task with ``total`` units (blocks of clients, repetitions, ...),
    ``advance(task, n)`` records ``n`` finished units, ``finish(task)`` closes it.
    """

    def start(self, task: str, total: int) -> None:
        """Open ``task`` with ``total`` units (>= 0)."""
        ...

    def advance(self, task: str, n: int = 1) -> None:
        """Record ``n`` finished units of ``task``."""
        ...

    def finish(self, task: str) -> None:
        """Close ``task``."""
        ...


class NullProgress:
    """A :class:`Progress` that ignores every event (the default)."""

    def start(self, task: str, total: int) -> None:
        """Ignore the event."""

    def advance(self, task: str, n: int = 1) -> None:
        """Ignore the event."""

    def finish(self, task: str) -> None:
        """Ignore the event."""


class RecordingProgress:
    """A :class:`Progress` that records events as ``(kind, task, value)`` tuples (for tests)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []

    def start(self, task: str, total: int) -> None:
        """Record a start event."""
        self.events.append(("start", task, total))

    def advance(self, task: str, n: int = 1) -> None:
        """Record an advance event."""
        self.events.append(("advance", task, n))

    def finish(self, task: str) -> None:
        """Record a finish event."""
        self.events.append(("finish", task, 0))
