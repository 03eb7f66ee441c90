"""The service tests' time scale (tests/deadlines.py): 1 when idle, larger under load, bounded, overridable."""

from __future__ import annotations

import pytest

import deadlines

# in this process, no database or server process: part of make test-fast
pytestmark = pytest.mark.memory_state


@pytest.fixture(autouse=True)
def _fresh() -> None:
    deadlines.time_scale.cache_clear()
    yield
    deadlines.time_scale.cache_clear()


def test_idle_machine_scale_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(deadlines.ENV, raising=False)
    monkeypatch.setattr(deadlines, "_contention", lambda: 1.2)
    monkeypatch.setattr(deadlines, "_load_per_cpu", lambda: 0.3)
    assert deadlines.time_scale() == 1.0
    assert deadlines.scaled(12.0) == 12.0  # no test waits longer on an idle machine


@pytest.mark.parametrize(
    ("contention", "load", "want"),
    [(2.5, 0.5, 2.5), (1.1, 3.0, 3.0), (9.0, 50.0, deadlines.MAX_SCALE)],
)
def test_loaded_machine_scale_is_the_larger_measure_bounded(
    monkeypatch: pytest.MonkeyPatch, contention: float, load: float, want: float
) -> None:
    monkeypatch.delenv(deadlines.ENV, raising=False)
    monkeypatch.setattr(deadlines, "_contention", lambda: contention)
    monkeypatch.setattr(deadlines, "_load_per_cpu", lambda: load)
    assert deadlines.time_scale() == pytest.approx(want)
    assert deadlines.scaled(12.0) == pytest.approx(12.0 * want)


def test_environment_variable_overrides_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        deadlines, "_contention", lambda: pytest.fail("measured despite the override")
    )
    monkeypatch.setenv(deadlines.ENV, "6.5")
    assert deadlines.time_scale() == 6.5
    for bad in ("0", "nan", "abc", "100"):
        deadlines.time_scale.cache_clear()
        monkeypatch.setenv(deadlines.ENV, bad)
        with pytest.raises(ValueError, match=deadlines.ENV):
            deadlines.time_scale()


def test_the_contention_loop_measures_wall_over_cpu_quickly() -> None:
    """The real loop: at least about 1 (wall >= CPU time), and it costs well under a second of CPU."""
    import time

    t0 = time.process_time()
    ratio = deadlines._contention()
    assert ratio >= 0.9
    assert time.process_time() - t0 < 0.5
