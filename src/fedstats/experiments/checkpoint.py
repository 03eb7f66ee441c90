"""Checkpointed experiment cells: each completed cell is saved at once, and a rerun resumes.

Long reproductions are grids of independent *cells* (a parameter setting, or one repetition). A
:class:`CheckpointStore` keeps one JSON line per completed cell in ``<folder>/<name>.cells.jsonl``; a rerun
skips the cells already there, so an interrupted experiment loses at most the cell in progress and never
recomputes a finished one. Each cell's randomness must be keyed by the cell (``randomness.child(key)``),
so the resumed run's results equal an uninterrupted one's.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from fedstats._io import atomic_write_text
from fedstats.progress import NullProgress, Progress
from fedstats.results import to_jsonable

__all__ = ["CheckpointStore", "run_cells", "write_json_atomic", "write_text_atomic"]


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and an atomic rename."""
    atomic_write_text(path, text)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` (made JSON-ready with :func:`to_jsonable`) atomically, indented."""
    write_text_atomic(path, json.dumps(to_jsonable(data), indent=2) + "\n")


def _digest(settings: Mapping[str, Any]) -> str:
    text = json.dumps(to_jsonable(dict(settings)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class CheckpointStore:
    """Completed cells of one experiment, persisted as JSON lines.

    Parameters
    ----------
    folder : pathlib.Path
        Where to keep ``<name>.cells.jsonl`` (created if needed).
    name : str
        Experiment name.
    settings : mapping, optional
        Every setting that changes a cell's value (seed, repetitions, grid options). Each line records
        their digest, and lines saved under other settings are ignored (recomputed), so a rerun with
        another seed or repetition count never reuses cells computed for different settings.

    Notes
    -----
    Each line is appended and flushed with ``fsync`` before the cell counts as done; a torn last line
    (from a crash mid-write) is ignored on reading.
    """

    def __init__(self, folder: Path, name: str, settings: Mapping[str, Any] | None = None) -> None:
        self.path = Path(folder) / f"{name}.cells.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.settings_key = _digest(settings or {})
        self._done: dict[str, Any] = {}
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if rec.get("settings", _digest({})) == self.settings_key:
                    self._done[rec["key"]] = rec["value"]

    def __contains__(self, key: str) -> bool:
        return key in self._done

    def __len__(self) -> int:
        return len(self._done)

    def get(self, key: str) -> Any:
        """The saved value of cell ``key``."""
        return self._done[key]

    def put(self, key: str, value: Any) -> None:
        """Save cell ``key`` durably."""
        value = to_jsonable(value)
        with open(self.path, "a", encoding="utf-8") as fh:
            rec = {"key": key, "settings": self.settings_key, "value": value}
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self._done[key] = value

    def values(self) -> dict[str, Any]:
        """All saved cells, by key."""
        return dict(self._done)


def run_cells(
    cells: Iterable[tuple[str, Callable[[], Any]]],
    store: CheckpointStore | None = None,
    progress: Progress | None = None,
    task: str = "cells",
) -> dict[str, Any]:
    """Run each ``(key, compute)`` cell not yet in ``store`` and return every cell's value by key.

    Parameters
    ----------
    cells : iterable of (str, callable)
        Unique keys and zero-argument functions computing a JSON-ready value.
    store : CheckpointStore, optional
        Where completed cells are saved; without it nothing is persisted.
    progress : Progress, optional
        One unit per cell.

    Returns
    -------
    dict
        ``{key: value}`` for every cell, in the order given.
    """
    progress = progress or NullProgress()
    cells = list(cells)
    progress.start(task, len(cells))
    out: dict[str, Any] = {}
    for key, compute in cells:
        if store is not None and key in store:
            out[key] = store.get(key)
        else:
            value = compute()
            if store is not None:
                store.put(key, value)
                value = store.get(key)
            out[key] = value
        progress.advance(task)
    progress.finish(task)
    return out
