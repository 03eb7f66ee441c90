"""The round engine: exact sums, independence from shard size, keyed randomness, populations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.analyses.exact import chi_square_protocol, federated_mean
from fedstats.engine import (
    ClientBatch,
    Engine,
    FixedPoint,
    GeneratedPopulation,
    InMemoryPopulation,
    RecordingProgress,
    ResampledPopulation,
    Round,
    RoundSum,
    SerialBackend,
)
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RNG, RandomSource


def encode_noisy(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Value plus a random coin per client, and a count."""
    v = batch.column("v").astype(np.int64)
    coin = rng.integers(0, 2, size=batch.n)
    return np.stack([v, coin, np.ones(batch.n, dtype=np.int64)], axis=1)


def generate_ints(start: int, n: int, params: Mapping[str, Any], rng: RNG) -> dict[str, np.ndarray]:
    return {"v": rng.integers(0, params["high"], size=n)}


def _sum(pop: Any, seed: int, *, block: int, shard: int, rnd: Round | None = None) -> np.ndarray:
    eng = Engine(SerialBackend(shard_size=shard), RandomSource(seed), block_size=block)
    rnd = rnd or Round("r", encode_noisy, {}, dim=3, bound=1000)
    return eng.sum_round(rnd, pop, 0).total


def test_sum_is_exact_and_independent_of_shard_size() -> None:
    values = np.arange(10_007) % 1000
    pop = InMemoryPopulation({"v": values})
    sums = [_sum(pop, 1, block=256, shard=s) for s in (1, 256, 1000, 5000, 10**6)]
    for s in sums[1:]:
        np.testing.assert_array_equal(s, sums[0])
    assert sums[0][0] == values.sum()
    assert sums[0][2] == values.size


def test_same_seed_same_result_other_seed_differs() -> None:
    pop = GeneratedPopulation(50_000, generate_ints, {"high": 1000})
    a = _sum(pop, 7, block=4096, shard=4096)
    b = _sum(pop, 7, block=4096, shard=40_000)
    c = _sum(pop, 8, block=4096, shard=4096)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_secure_default_is_not_reproducible() -> None:
    pop = GeneratedPopulation(10_000, generate_ints, {"high": 10**6})
    rnd = Round("r", encode_noisy, {}, dim=3, bound=10**6)
    e1, e2 = Engine(block_size=1024), Engine(block_size=1024)
    assert not e1.randomness.reproducible
    assert not np.array_equal(e1.sum_round(rnd, pop, 0).total, e2.sum_round(rnd, pop, 0).total)


def encode_big(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    return np.full((batch.n, 1), params["value"], dtype=np.int64)


def test_wide_sums_stay_exact_beyond_int64() -> None:
    value = 2**60
    pop = GeneratedPopulation(20, generate_ints, {"high": 2})
    eng = Engine(randomness=RandomSource(0), block_size=2)
    total = eng.sum_round(
        Round("big", encode_big, {"value": value}, dim=1, bound=value), pop, 0
    ).total
    assert int(total[0]) == 20 * value  # > 2**63: accumulated as Python ints


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 3000), block=st.integers(1, 700), lo_frac=st.floats(0, 0.9))
def test_client_range_reads_the_same_clients(n: int, block: int, lo_frac: float) -> None:
    pop = GeneratedPopulation(n, generate_ints, {"high": 1000})
    lo = int(lo_frac * n)
    eng = Engine(randomness=RandomSource(3), block_size=block)
    rnd = Round("r", encode_big, {"value": 1}, dim=1, bound=1)
    part = eng.sum_round(rnd, pop, 0, client_range=(lo, n))
    assert part.n_clients == n - lo
    assert int(part.total[0]) == n - lo


def test_generated_population_blocks_do_not_depend_on_slicing() -> None:
    pop = GeneratedPopulation(1000, generate_ints, {"high": 10**9})
    rs = RandomSource(11)
    whole = pop.block(1, 300, 300, 600, rs).column("v")
    part = pop.block(1, 300, 450, 500, rs).column("v")
    np.testing.assert_array_equal(part, whole[150:200])


def test_resampled_population_strata_counts_and_support() -> None:
    cols = {"g": np.array([0, 0, 0, 1, 1]), "x": np.array([1.0, 2.0, 3.0, 10.0, 20.0])}
    pop = ResampledPopulation(cols, 10_000, strata="g", stratum_clients={0: 3000, 1: 7000})
    batch = pop.block(0, 10_000, 0, 10_000, RandomSource(5))
    g, x = batch.column("g"), batch.column("x")
    assert (g[:3000] == 0).all() and (g[3000:] == 1).all()
    assert set(np.unique(x[:3000])) == {1.0, 2.0, 3.0}
    assert set(np.unique(x[3000:])) == {10.0, 20.0}
    # uniform resampling within a stratum: chi-square at alpha 1e-6
    counts = np.array([(x[:3000] == v).sum() for v in (1.0, 2.0, 3.0)])
    assert scipy.stats.chisquare(counts).pvalue > 1e-6
    with pytest.raises(ParameterError, match="stratum_clients"):
        ResampledPopulation(cols, 10, strata="g", stratum_clients={0: 3, 1: 3})


def test_progress_reports_every_block() -> None:
    pop = InMemoryPopulation({"v": np.arange(1000)})
    prog = RecordingProgress()
    eng = Engine(SerialBackend(shard_size=300), RandomSource(1), block_size=100, progress=prog)
    eng.sum_round(Round("r", encode_noisy, {}, dim=3, bound=1000), pop, 0)
    advanced = sum(v for kind, _, v in prog.events if kind == "advance")
    assert advanced == 10
    assert prog.events[0] == ("start", "round 0 (r)", 10)


def bad_shape(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    return np.zeros((batch.n, 2), dtype=np.int64)


def bad_dtype(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    return np.zeros((batch.n, 1))


def test_round_contract_is_enforced() -> None:
    pop = InMemoryPopulation({"v": np.arange(10)})
    eng = Engine(randomness=RandomSource(1))
    with pytest.raises(ParameterError, match="shape"):
        eng.sum_round(Round("r", bad_shape, {}, dim=1), pop, 0)
    with pytest.raises(ParameterError, match="integer"):
        eng.sum_round(Round("r", bad_dtype, {}, dim=1), pop, 0)
    with pytest.raises(ParameterError, match="bound"):
        eng.sum_round(Round("r", encode_big, {"value": 5}, dim=1, bound=4), pop, 0)
    with pytest.raises(ParameterError, match="dim"):
        Round("r", encode_big, {}, dim=0)
    with pytest.raises(ParameterError, match="client_range"):
        eng.sum_round(Round("r", encode_big, {"value": 1}), pop, 0, client_range=(5, 11))


def test_populations_reject_bad_data() -> None:
    with pytest.raises(DataError, match="empty"):
        InMemoryPopulation({"v": np.array([])})
    with pytest.raises(DataError, match="NaN"):
        InMemoryPopulation({"v": np.array([1.0, np.nan])})
    with pytest.raises(DataError, match="lengths"):
        InMemoryPopulation({"a": np.arange(3), "b": np.arange(4)})
    with pytest.raises(DataError, match="negative"):
        InMemoryPopulation.from_tables(-np.ones((2, 2, 2), dtype=int))


def two_round(n_expected: int) -> Any:
    s1: RoundSum = yield Round("one", encode_big, {"value": 1}, dim=1)
    assert s1.n_clients == n_expected
    s2: RoundSum = yield Round(
        "two", encode_big, {"value": int(s1.total[0])}, dim=1, bound=n_expected
    )
    return int(s2.total[0])


def test_protocol_generator_drives_rounds_in_order() -> None:
    pop = InMemoryPopulation({"v": np.arange(37)})
    eng = Engine(randomness=RandomSource(1), block_size=8)
    assert eng.run(two_round(37), pop) == 37 * 37
    assert [r.name for r in eng.log] == ["one", "two"]
    # round one: bound 1 -> ceil(log2 3) = 2 bits; round two: bound 37 -> ceil(log2 75) = 7 bits
    assert [r.bits_per_entry for r in eng.log] == [2, 7]
    assert eng.bytes_per_client == 2


def test_fixed_point_randomized_rounding_is_unbiased() -> None:
    fp = FixedPoint(frac_bits=2, clip=1.0)
    x = np.full(200_000, 0.1)
    q, clipped = fp.encode(x, np.random.default_rng(0))
    assert clipped == 0
    # each q is floor(0.4)=0 or 1 with p = 0.4: mean 0.4, sd sqrt(.24/n)
    se = np.sqrt(0.24 / x.size)
    assert abs(q.mean() - 0.4) < 6 * se
    q2, clipped2 = fp.encode(np.array([2.0, -3.0, 0.5]))
    assert clipped2 == 2
    np.testing.assert_array_equal(q2, [4, -4, 2])


def test_fixed_point_arithmetic_and_its_errors() -> None:
    fp = FixedPoint(frac_bits=5, clip=3.0)
    x = np.random.default_rng(3).normal(0, 2, size=(200, 3))
    q, clipped = fp.encode(x)
    np.testing.assert_array_equal(q, np.rint(np.clip(x, -3, 3) * 32).astype(np.int64))
    assert clipped == int((np.abs(x) > 3).sum())
    qr, _ = fp.encode(x, np.random.default_rng(9))
    scaled = np.clip(x, -3, 3) * 32
    expect = np.floor(scaled) + (
        np.random.default_rng(9).random(x.shape) < scaled - np.floor(scaled)
    )
    np.testing.assert_array_equal(qr, expect.astype(np.int64))
    empty, n_clipped = fp.encode(np.zeros((0, 3)))
    assert empty.shape == (0, 3) and n_clipped == 0
    with pytest.raises(DataError, match="NaN"):
        fp.encode(np.array([1.0, np.nan]))
    with pytest.raises(ParameterError, match="frac_bits"):
        FixedPoint(frac_bits=52, clip=2.0**20)


def test_chi_square_protocol_matches_scipy_on_summed_tables() -> None:
    rng = np.random.default_rng(0)
    tables = rng.integers(0, 4, size=(50, 3, 4))
    eng = Engine(randomness=RandomSource(1), block_size=7)
    res = eng.run(chi_square_protocol((3, 4), max_cell=3), InMemoryPopulation.from_tables(tables))
    stat, p, dof, _ = scipy.stats.chi2_contingency(tables.sum(axis=0), correction=False)
    assert res.statistic == pytest.approx(stat, rel=1e-12)
    assert res.p_value == pytest.approx(p, rel=1e-9)
    assert res.dof == dof == 6
    np.testing.assert_array_equal(res.table, tables.sum(axis=0))


def test_federated_mean_is_exact_to_the_fixed_point_resolution() -> None:
    values = np.random.default_rng(1).uniform(17, 90, size=5000)
    res = federated_mean(values, engine=Engine(randomness=RandomSource(2), block_size=333))
    assert res.n_clients == 5000
    assert abs(res.estimate - values.mean()) <= 2.0**-16
    assert res.truth == pytest.approx(values.mean())
