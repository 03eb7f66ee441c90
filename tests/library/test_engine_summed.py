"""The per-client route's lean paths (issue 16) give exactly the reference's sums for the same seed.

A round's summed encoder (``Round.encode_sum``) must equal the sum of its encoder's reports bit for bit and
leave the generator where the encoder leaves it (the same draws); the engine must give the same totals with
and without it, on every per-client route and under dropout (which falls back to ``encode``). The
resampled population's segment-wise generation must give the clients of the per-client search it replaced.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from fedstats.analyses.performance_gap import GapMechanism, performance_gap_protocol
from fedstats.analyses.performance_gap.client import (
    GROUP_COLUMN,
    VALUE_COLUMN,
    encode_gap_report,
    sum_gap_reports,
)
from fedstats.analyses.performance_gap.protocol import report_params
from fedstats.engine import (
    ClientBatch,
    Dropout,
    Engine,
    InMemoryPopulation,
    ResampledPopulation,
    Round,
    SerialBackend,
)
from fedstats.engine.backends import warm_heap
from fedstats.engine.populations import _resample
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RNG, RandomSource


def _state(rng: RNG) -> Any:
    """The generator's position: the next words it would give (works for both kinds of generator)."""
    return np.asarray(rng.random(4)).tolist()


def _gap_batch(n: int, d: int, seed: int) -> ClientBatch:
    r = np.random.default_rng(seed)
    g = r.integers(0, d, n)
    v = np.clip(r.uniform(-1.0, 1.0, n), -1.0, 1.0)
    v[: min(n, 3)] = [-1.0, 1.0, 0.0][: min(n, 3)]  # the extremes: p = 0, 1 and 1/2
    return ClientBatch({GROUP_COLUMN: g, VALUE_COLUMN: v}, 0, n)


@pytest.mark.parametrize("kind", ["R", "L"])
@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("secure", [False, True])
def test_summed_gap_reports_equal_the_reports_sum(kind: str, d: int, secure: bool) -> None:
    params = report_params(GapMechanism(kind, 0.7, 1.3, n_groups=d))
    source = RandomSource(None if secure else 21)
    for n in (1, 2, 17, 5000):
        batch = _gap_batch(n, d, seed=n + d)
        ref_rng = source.generator("gap", kind, d, n)
        fast_rng = source.generator("gap", kind, d, n)
        ref = encode_gap_report(batch, params, ref_rng).sum(axis=0)
        fast = sum_gap_reports(batch, params, fast_rng)
        assert fast.dtype == np.int64
        np.testing.assert_array_equal(fast, ref)
        assert _state(fast_rng) == _state(ref_rng)  # the same draws, no more, no fewer


def test_summed_gap_reports_of_l_with_huge_clip_stay_exact() -> None:
    # a tiny epsilon2 makes n * clip exceed 2^53: the sums are taken in int64, not float64
    params = report_params(GapMechanism("L", 0.5, 1e-6))
    assert 5000 * params["clip"] >= 2**53
    batch = _gap_batch(5000, 2, seed=3)
    ref = encode_gap_report(batch, params, np.random.default_rng(4)).sum(axis=0)
    np.testing.assert_array_equal(sum_gap_reports(batch, params, np.random.default_rng(4)), ref)


def test_summed_gap_reports_refuse_bad_groups_like_the_encoder() -> None:
    params = report_params(GapMechanism("R", 0.7, 1.3))
    batch = ClientBatch({GROUP_COLUMN: np.array([0, 2]), VALUE_COLUMN: np.zeros(2)}, 0, 2)
    for fn in (encode_gap_report, sum_gap_reports):
        with pytest.raises(DataError, match="integers in"):
            fn(batch, params, np.random.default_rng(0))


def _gap_round(kind: str, d: int, summed: bool) -> Round:
    rnd = next(
        performance_gap_protocol(GapMechanism(kind, 0.9, 1.1, n_groups=d), sizes=None, pair=(0, 1))
    )
    assert rnd.encode_sum is sum_gap_reports
    return rnd if summed else Round(rnd.name, rnd.encode, rnd.params, dim=rnd.dim, bound=rnd.bound)


@pytest.mark.parametrize("kind", ["R", "L"])
@pytest.mark.parametrize("dropout", [None, Dropout(0.2, 0)])
def test_engine_gives_the_same_totals_with_and_without_the_summed_encoder(
    kind: str, dropout: Dropout | None
) -> None:
    r = np.random.default_rng(5)
    rows = {GROUP_COLUMN: r.integers(0, 3, 60), VALUE_COLUMN: r.uniform(-1, 1, 60)}
    pop = ResampledPopulation(rows, 30_011, strata=GROUP_COLUMN)
    totals = []
    for summed in (True, False):
        for shard in (1000, 1 << 20):
            eng = Engine(
                SerialBackend(shard_size=shard), RandomSource(8), block_size=4096, dropout=dropout
            )
            rnd = _gap_round(kind, 3, summed)
            totals.append(eng.run(_one_round(rnd), pop))
    for t in totals[1:]:
        np.testing.assert_array_equal(t, totals[0])


def _one_round(rnd: Round) -> Any:
    s = yield rnd
    return np.asarray(s.total)


def _bad_sum(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    return np.full(params["dim"], params["value"])


def _ones(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    return np.ones((batch.n, params["dim"]), dtype=np.int64)


def test_summed_encoder_output_is_checked() -> None:
    batch = ClientBatch({"x": np.zeros(10)}, 0, 10)
    rng = np.random.default_rng(0)
    ok = Round("r", _ones, {"dim": 2, "value": 20}, dim=2, bound=2, encode_sum=_bad_sum)
    np.testing.assert_array_equal(ok.encode_sum_checked(batch, rng), [20, 20])
    with pytest.raises(ParameterError, match="summed report entry"):
        Round(
            "r", _ones, {"dim": 2, "value": 21}, dim=2, bound=2, encode_sum=_bad_sum
        ).encode_sum_checked(batch, rng)
    with pytest.raises(ParameterError, match="shape"):
        Round("r", _ones, {"dim": 3, "value": 1}, dim=2, encode_sum=_bad_sum).encode_sum_checked(
            batch, rng
        )
    with pytest.raises(ParameterError, match="integer"):
        Round("r", _ones, {"dim": 2, "value": 0.5}, dim=2, encode_sum=_bad_sum).encode_sum_checked(
            batch, rng
        )
    with pytest.raises(ParameterError, match="summed encoder"):
        Round("r", _ones, {}, dim=2).encode_sum_checked(batch, rng)
    # the engine checks the summed form on its route
    with pytest.raises(ParameterError, match="summed report entry"):
        Engine(SerialBackend(), RandomSource(1), block_size=4).sum_round(
            Round("r", _ones, {"dim": 1, "value": 5}, dim=1, encode_sum=_bad_sum),
            InMemoryPopulation({"x": np.zeros(10)}),
            0,
        )


def _resample_reference(
    start: int, n: int, params: Mapping[str, Any], rng: RNG
) -> dict[str, np.ndarray]:
    """The per-client search the segment-wise generation replaced (fedstats before issue 16)."""
    bounds = params["client_bounds"]
    idx = np.arange(start, start + n, dtype=np.int64)
    stratum = np.searchsorted(bounds, idx, side="right") - 1
    u = rng.random(n)
    count = params["row_count"][stratum]
    rows = params["row_start"][stratum] + np.minimum((u * count).astype(np.int64), count - 1)
    out = {k: v[rows] for k, v in params["columns"].items()}
    out["_stratum"] = stratum
    return out


def test_resampled_blocks_equal_the_per_client_search() -> None:
    r = np.random.default_rng(2)
    rows = {"s": r.choice(["a", "b", "c", "d"], 50), "v": r.uniform(0, 1, 50)}
    for stratum_clients in (None, {"a": 0, "b": 5, "c": 0, "d": 995}, {"a": 1, "b": 0, "c": 999}):
        pop = ResampledPopulation(rows, 1000, strata="s", stratum_clients=stratum_clients)
        for start, n in ((0, 1000), (0, 1), (4, 1), (5, 1), (3, 300), (999, 1), (250, 750)):
            got = _resample(start, n, pop._params, np.random.default_rng(start + n))
            ref = _resample_reference(start, n, pop._params, np.random.default_rng(start + n))
            assert got.keys() == ref.keys()
            for k in ref:
                np.testing.assert_array_equal(got[k], ref[k])
    flat = ResampledPopulation({"v": np.arange(7.0)}, 100)
    got = _resample(10, 90, flat._params, np.random.default_rng(0))
    ref = _resample_reference(10, 90, flat._params, np.random.default_rng(0))
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])


def test_warm_heap_runs_once_per_process() -> None:
    warm_heap()
    warm_heap()  # a no-op the second time


class _Recording(SerialBackend):
    """The serial route, keeping every round it sums."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[Round] = []

    def sum_round(self, job: Any, progress: Any = None) -> Any:
        self.rounds.append(job.round)
        return super().sum_round(job, progress)


@pytest.mark.parametrize(
    "options",
    [
        {"method": "adaptive"},
        {"method": "adaptive", "allocation": "random"},
        {"method": "basic", "epsilon": None, "no_privacy": True},
        {"method": "weighted", "allocation": "random", "epsilon": None, "no_privacy": True},
        {"method": "basic", "bits_per_client": 2},
        {"method": "weighted", "allocation": "random", "bits_per_client": 3},
    ],
)
def test_summed_bits_equal_the_reports_sum(options: dict[str, Any]) -> None:
    from fedstats.analyses.bitpushing import BitEncoding, mean
    from fedstats.analyses.bitpushing.client import encode_bits, sum_bits

    opts = {"epsilon": 1.0, **options}
    backend = _Recording()
    values = np.random.default_rng(3).uniform(-2.0, 130.0, 3000)  # some out of range: clipped
    mean(
        values,
        BitEncoding(0, 127, resolution=0.5, out_of_range="clip"),
        engine=Engine(backend, RandomSource(4), block_size=512),
        **opts,
    )
    assert backend.rounds and all(r.encode_sum is sum_bits for r in backend.rounds)
    for rnd in backend.rounds:
        for start, n in ((0, 1), (5, 700), (1000, 2000)):
            batch = ClientBatch({"value": values[start : start + n]}, start, values.size)
            for source in (RandomSource(9), RandomSource(None)):
                ref_rng = source.generator("bits", start)
                fast_rng = source.generator("bits", start)
                ref = encode_bits(batch, rnd.params, ref_rng).sum(axis=0, dtype=np.int64)
                fast = sum_bits(batch, rnd.params, fast_rng)
                assert fast.dtype == np.int64
                np.testing.assert_array_equal(fast, ref)
                assert _state(fast_rng) == _state(ref_rng)


def test_gap_truth_from_the_rounds_reads_equals_a_second_read() -> None:
    from fedstats.analyses.performance_gap.api import _ObservedPopulation, simulated_truth

    r = np.random.default_rng(8)
    rows = {GROUP_COLUMN: r.integers(0, 3, 40), VALUE_COLUMN: r.uniform(-1, 1, 40)}
    pop = ResampledPopulation(rows, 10_007, strata=GROUP_COLUMN)
    rnd = _gap_round("R", 3, True)
    for client_range in (None, (0, 5000)):
        seen = _ObservedPopulation(pop, 3)
        eng = Engine(SerialBackend(), RandomSource(2), block_size=1000)
        eng.sum_round(rnd, seen, 0, client_range=client_range)
        assert bool(seen.recorded(1000, eng.randomness)) == (client_range is None)
        assert not seen.recorded(999, eng.randomness)
        got = simulated_truth(seen, eng, 3)
        ref = simulated_truth(pop, Engine(SerialBackend(), RandomSource(2), block_size=1000), 3)
        for a, b in zip(got, ref, strict=True):
            assert a.tobytes() == b.tobytes()
    # another engine's randomness is not taken for this one's
    other = Engine(SerialBackend(), RandomSource(3), block_size=1000)
    assert not seen.recorded(1000, other.randomness)


def test_summed_gap_reports_with_a_non_finite_value_follow_the_encoder() -> None:
    # populations refuse NaN, but the summed form must not depend on that: it takes perturb's selection
    params = report_params(GapMechanism("R", 0.2, 1.0))
    g = np.array([0, 1, 0, 1] * 50)
    v = np.linspace(-1, 1, 200)
    v[::7] = np.nan
    batch = ClientBatch({GROUP_COLUMN: g, VALUE_COLUMN: v}, 0, 200)
    ref = encode_gap_report(batch, params, np.random.default_rng(1)).sum(axis=0)
    np.testing.assert_array_equal(sum_gap_reports(batch, params, np.random.default_rng(1)), ref)


@pytest.mark.parametrize("size", [1, 2, 8, 16, 17, 53])
def test_count_at_or_below_is_searchsorted(size: int) -> None:
    from fedstats.analyses.bitpushing.client import _count_at_or_below

    r = np.random.default_rng(size)
    cum = np.sort(r.integers(0, 50, size))  # with repeats
    x = r.integers(-2, 53, 1000)
    np.testing.assert_array_equal(_count_at_or_below(cum, x), np.searchsorted(cum, x, side="right"))
    cum_f = np.sort(r.uniform(0, 1, size))
    u = np.concatenate([r.uniform(0, 1, 1000), cum_f])  # ties on the entries themselves
    got = _count_at_or_below(cum_f, u)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.searchsorted(cum_f, u, side="right"))
