"""The performance gap's fast path (``simulate_sums``) against the protocol's round and the theory."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedstats.analyses.performance_gap import (
    GapMechanism,
    GapSums,
    estimate_gap,
    performance_gap_protocol,
    simulate_sums,
)
from fedstats.analyses.performance_gap.client import GROUP_COLUMN, VALUE_COLUMN
from fedstats.engine.rounds import ClientBatch, RoundSum
from fedstats.errors import ParameterError


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 2, n)
    v = np.clip(rng.uniform(-1, 1, n) * 0.5 + 0.3 * (g - 0.5), -1, 1)
    return g, v


@pytest.mark.parametrize("kind", ["R", "L"])
def test_one_run_gives_the_rounds_sums_and_result_for_the_same_generator(kind: str) -> None:
    g, v = _data(500, seed=6)
    mech = GapMechanism(kind, 0.8, 1.3)
    sizes = np.bincount(g, minlength=2).astype(float).tolist()
    gen = performance_gap_protocol(mech, sizes=sizes, scale="signed")
    rnd = next(gen)
    batch = ClientBatch({GROUP_COLUMN: g, VALUE_COLUMN: v}, 0, g.size)
    total = rnd.encode_checked(batch, np.random.default_rng(11)).sum(axis=0)
    with pytest.raises(StopIteration) as stop:
        gen.send(RoundSum(total, g.size))
    result = stop.value.value
    sums, counts = simulate_sums(g, v, mech, np.random.default_rng(11), runs=1)
    assert np.array_equal(counts[0], total[2:4])
    est = estimate_gap(GapSums(sums[0], counts[0], g.size), mech, sizes=sizes, scale="signed")
    assert est["gap"] == result.gap and est["group_means"] == result.group_means


def test_runs_are_independent_with_the_variance_of_eq_20() -> None:
    g, v = _data(400, seed=7)
    mech = GapMechanism("R", 1.0, 1.0)
    runs = 30_000  # more than one chunk of 20 000
    sums, counts = simulate_sums(g, v, mech, np.random.default_rng(12), runs=runs)
    assert sums.shape == (runs, 2) and (counts.sum(axis=1) == g.size).all()
    n = np.bincount(g, minlength=2)
    means = sums / (mech.value_gain * n)
    for i in (0, 1):
        var = mech.group_variance(float(n[i]), float(g.size), float(np.mean(v[g == i] ** 2)))
        # the mean within 5 standard errors; the sample variance within 5 of its standard errors
        assert abs(means[:, i].mean() - v[g == i].mean()) < 5 * math.sqrt(var / runs)
        assert abs(means[:, i].var() / var - 1) < 5 * math.sqrt(2 / runs)
    # the second chunk is fresh randomness, not a copy of the first
    assert not np.array_equal(sums[:10], sums[20_000:20_010])


def test_bad_runs_and_grid_are_refused() -> None:
    g, v = _data(10, seed=0)
    mech = GapMechanism("L", 1.0, 1.0)
    with pytest.raises(ParameterError, match="runs"):
        simulate_sums(g, v, mech, np.random.default_rng(0), runs=0)
    with pytest.raises(ParameterError, match="resolution_bits"):
        simulate_sums(g, v, mech, np.random.default_rng(0), resolution_bits=1)
