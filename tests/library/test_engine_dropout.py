"""Simulated dropout belongs to the route: drawn once per run, excluded from the sum and the client count,
identical on every backend (the secure route leaves the dropped clients out of its sessions), never
in a round's parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.engine import ClientBatch, Engine, InMemoryPopulation, Round, RoundSum, SerialBackend
from fedstats.engine.core import Dropout, ProtocolGenerator
from fedstats.engine.dask import DaskBackend, ProcessPoolBackend
from fedstats.errors import ParameterError
from fedstats.randomness import RNG, RandomSource

N = 3000
BLOCK = 256


def encode(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Value, a one, and a private random bit (so survivors' randomness is part of the check)."""
    x = batch.column("x")
    return np.stack([x, np.ones(batch.n, dtype=np.int64), rng.integers(0, 2, size=batch.n)], axis=1)


def two_rounds() -> ProtocolGenerator[tuple[RoundSum, RoundSum]]:
    """Two identical rounds; returns both sums."""
    r = Round("r", encode, {}, dim=3, bound=1000)
    s1 = yield r
    s2 = yield r
    return s1, s2


def _population() -> InMemoryPopulation:
    return InMemoryPopulation({"x": np.arange(N, dtype=np.int64) % 1000})


def _run(backend: Any, dropout: Dropout | None, seed: int = 5) -> tuple[RoundSum, RoundSum]:
    eng = Engine(backend, RandomSource(seed), block_size=BLOCK, dropout=dropout)
    return eng.run(two_rounds(), _population())


def test_dropped_clients_leave_the_sum_and_the_count_from_the_chosen_round() -> None:
    full1, full2 = _run(SerialBackend(), None)
    s1, s2 = _run(SerialBackend(), Dropout(0.25))
    np.testing.assert_array_equal(s1.total, full1.total)  # round 0: everyone answers
    assert s1.n_clients == N and s2.n_clients == N - 750
    dropped = Dropout(0.25).draw(N, RandomSource(5), 0)
    x = np.arange(N) % 1000
    assert int(s2.total[0]) == int(x.sum() - x[dropped].sum())
    assert int(s2.total[1]) == N - 750
    # the survivors' private draws do not depend on who dropped out
    bits = np.concatenate(
        [
            RandomSource(5).generator("round", 1, "block", b).integers(0, 2, size=BLOCK)
            for b in range(N // BLOCK + 1)
        ]
    )[:N]
    keep = np.setdiff1d(np.arange(N), dropped)
    assert int(s2.total[2]) == int(bits[keep].sum())
    assert int(full2.total[2]) == int(bits.sum())


def test_from_round_zero_applies_to_every_round() -> None:
    s1, s2 = _run(SerialBackend(), Dropout(0.1, from_round=0))
    assert s1.n_clients == s2.n_clients == N - 300
    np.testing.assert_array_equal(s1.total[:2], s2.total[:2])


def test_draw_is_without_replacement_keeps_a_survivor_and_changes_per_run() -> None:
    d = Dropout(0.5)
    a = d.draw(101, RandomSource(1), 0)
    assert a.size == 50 and np.unique(a).size == 50 and np.all(np.diff(a) > 0)
    assert a.min() >= 0 and a.max() < 101
    np.testing.assert_array_equal(a, d.draw(101, RandomSource(1), 0))
    assert not np.array_equal(a, d.draw(101, RandomSource(1), 1))
    assert Dropout(0.999).draw(7, RandomSource(2), 0).size == 6
    assert Dropout(0.0).draw(7, RandomSource(2), 0).size == 0
    eng = Engine(SerialBackend(), RandomSource(3), block_size=BLOCK, dropout=Dropout(0.2))
    first = eng.run(two_rounds(), _population())[1]
    second = eng.run(two_rounds(), _population())[1]
    assert first.n_clients == second.n_clients == N - 600
    assert not np.array_equal(first.total, second.total)  # a new dropped set per run


# dask's route is slow (a LocalCluster of 2 workers starts and stops: 4-8 s; make test runs it)
@pytest.mark.parametrize("route", ["process", pytest.param("dask", marks=pytest.mark.slow)])
def test_every_parallel_route_gives_the_serial_result(route: str) -> None:
    serial = _run(SerialBackend(), Dropout(0.3))
    backend: Any = (
        ProcessPoolBackend(workers=2, shard_size=3 * BLOCK)
        if route == "process"
        else DaskBackend(workers=2, shard_size=2 * BLOCK)
    )
    with backend as be:
        other = _run(be, Dropout(0.3))
    for a, b in zip(serial, other, strict=True):
        np.testing.assert_array_equal(a.total, b.total)
        assert a.n_clients == b.n_clients


def test_secure_route_leaves_out_the_same_dropped_clients() -> None:
    """Engine-dropped clients never join the secure session: the secure sum equals the serial one."""
    from fedstats.engine.secure import SecureAggregationBackend

    n = 120
    pop = InMemoryPopulation({"x": np.arange(n, dtype=np.int64) % 1000})

    def run(backend: Any) -> tuple[RoundSum, RoundSum]:
        eng = Engine(backend, RandomSource(5), block_size=BLOCK, dropout=Dropout(0.2))
        return eng.run(two_rounds(), pop)

    serial = run(SerialBackend())
    secure = run(SecureAggregationBackend(cohort_size=60))
    for a, b in zip(serial, secure, strict=True):
        assert a.n_clients == b.n_clients
        np.testing.assert_array_equal(a.total[:2], b.total[:2])  # values and counts: exact


@settings(max_examples=40, deadline=None)
@given(
    fraction=st.one_of(
        st.floats(max_value=-1e-12), st.floats(min_value=1.0), st.just(float("nan"))
    ),
)
def test_bad_fraction_is_refused(fraction: float) -> None:
    with pytest.raises(ParameterError, match="fraction"):
        Dropout(fraction)


def test_bad_from_round_and_type_are_refused() -> None:
    with pytest.raises(ParameterError, match="from_round"):
        Dropout(0.1, from_round=-1)
    with pytest.raises(ParameterError, match="dropout"):
        Engine(dropout=0.1)  # type: ignore[arg-type]
