"""Checkpointed cells: an interrupted run resumes without recomputing finished cells."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedstats._io import atomic_write_text
from fedstats.experiments.checkpoint import CheckpointStore, run_cells


def test_interrupted_run_resumes_without_recomputing(tmp_path: Path) -> None:
    calls: list[str] = []

    def cell(k: str, fail: bool = False) -> tuple[str, object]:
        def compute() -> dict[str, int]:
            if fail:
                raise KeyboardInterrupt
            calls.append(k)
            return {"value": len(k)}

        return k, compute

    store = CheckpointStore(tmp_path, "exp")
    with pytest.raises(KeyboardInterrupt):
        run_cells([cell("a"), cell("bb"), cell("ccc", fail=True)], store)
    assert calls == ["a", "bb"]
    resumed = run_cells([cell("a"), cell("bb"), cell("ccc")], CheckpointStore(tmp_path, "exp"))
    assert calls == ["a", "bb", "ccc"]
    assert resumed == {"a": {"value": 1}, "bb": {"value": 2}, "ccc": {"value": 3}}


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "exp")
    store.put("x", 1.5)
    with open(store.path, "a", encoding="utf-8") as fh:
        fh.write('{"key": "y", "val')
    again = CheckpointStore(tmp_path, "exp")
    assert "x" in again and "y" not in again and again.get("x") == 1.5


def test_atomic_write_leaves_no_partial_file(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    atomic_write_text(target, "old")

    class Boom(str):
        def encode(self, *args: object, **kwargs: object) -> bytes:  # type: ignore[override]
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write_text(target, Boom("new"))
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_atomic_write_gives_normal_permissions(tmp_path: Path) -> None:
    import os

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "r.json", "{}")
        assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644
        os.chmod(tmp_path / "r.json", 0o640)
        atomic_write_text(tmp_path / "r.json", "{}")  # a replaced file keeps its mode
        assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
