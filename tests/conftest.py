"""Shared fixtures: the location of ../shared/data and seeded randomness."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fedstats.randomness import RandomSource

_REPO = Path(__file__).resolve().parents[1]


def _shared_data_dir() -> Path:
    env = os.environ.get("FEDSTATS_DATA")
    return Path(env) if env else _REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of the real datasets (``../shared/data`` or ``$FEDSTATS_DATA``); skips when absent."""
    path = _shared_data_dir()
    if not (path / "SHA256SUMS").is_file():
        pytest.skip(
            f"real datasets not found at {path} (set FEDSTATS_DATA or place ../shared/data)"
        )
    return path


@pytest.fixture()
def randomness() -> RandomSource:
    """A seeded, reproducible RandomSource for tests."""
    return RandomSource(seed=20261120)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the ``xdist_group`` tests first (stable order otherwise).

    Under ``--dist loadgroup`` the ``machine-load`` group (the 100-process Adult test and the tests whose
    deadlines must not run beside it) runs on one worker, one test after the other (about 400 s in CI);
    started first, it overlaps the rest of the suite on the other worker instead of trailing it.
    """
    first = [it for it in items if it.get_closest_marker("xdist_group") is not None]
    if first:
        rest = [it for it in items if it.get_closest_marker("xdist_group") is None]
        items[:] = first + rest
