"""The analyses on Prio3 (fedstats.analyses._prio3): the same results as the in-process engine, cheating
clients rejected and counted, and the aggregators' DP noise unbiased and of the calibrated scale."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fedstats.analyses._prio3 import (
    AggregatorNoise,
    Prio3Backend,
    bit_pushing_noise,
    calibrate_discrete_gaussian,
    validity_for,
)
from fedstats.analyses.bitpushing import BitEncoding, mean
from fedstats.analyses.chi2 import fed_chi2
from fedstats.analyses.exact.client import encode_value
from fedstats.engine import Engine, InMemoryPopulation
from fedstats.engine.backends import RoundJob, SerialBackend
from fedstats.engine.rounds import Round
from fedstats.errors import ParameterError
from fedstats.privacy.analysis.discrete_gaussian import discrete_gaussian_sigma
from fedstats.privacy.analysis.zcdp import zcdp_to_approx_dp
from fedstats.randomness import RandomSource
from fedstats.sketches.stable import StableProjection

ENC = BitEncoding(0, 15)


def _values(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 15.0, n)


@pytest.mark.parametrize(
    ("method", "privacy", "options"),
    [
        ("basic", {"no_privacy": True}, {}),
        ("adaptive", {"epsilon": 2.0}, {}),
        ("basic", {"epsilon": 1.0}, {"allocation": "random", "bits_per_client": 2}),
    ],
)
def test_bit_pushing_on_prio3_is_the_engine_s_estimate(
    method: str, privacy: dict[str, float], options: dict[str, object]
) -> None:
    x = _values(240, 1)
    kw = {"method": method, "truth": False, **privacy, **options}
    plain = mean(x, ENC, engine=Engine(randomness=RandomSource(7)), **kw)  # type: ignore[arg-type]
    be = Prio3Backend()
    got = mean(x, ENC, engine=Engine(backend=be, randomness=RandomSource(7)), **kw)  # type: ignore[arg-type]
    assert got.estimate == plain.estimate
    assert got.n_clients == plain.n_clients
    assert be.stats and all("MultihotCountVec" in s.variant for s in be.stats)
    assert sum(s.accepted for s in be.stats) == 240 and be.rejected == 0


def _job(rnd: Round, values: np.ndarray, seed: int, dropped: list[int] | None = None) -> RoundJob:
    pop = InMemoryPopulation({"value": values})
    gone = np.asarray(sorted(dropped or []), dtype=np.int64)
    return RoundJob(rnd, pop, RandomSource(seed), 0, 64, (0, values.size), gone)


def _bit_round(n: int) -> Round:
    """The round bit pushing yields for ``n`` clients (exact allocation, one bit each)."""
    from fedstats.analyses.bitpushing.bit_stages import bit_round
    from fedstats.analyses.bitpushing.stages import CodeSpec

    spec = CodeSpec.for_mean("value", ENC)
    p = np.full(spec.bit_depth, 1.0 / spec.bit_depth)
    rnd: Round = next(bit_round("bits", spec, p, (0, n), 3))
    return rnd


def test_cheating_clients_are_rejected_counted_and_left_out() -> None:
    n = 150
    x = _values(n, 2)
    cheaters = [0, 17, 64, 149]  # in several blocks of 64
    rnd = _bit_round(n)
    be = Prio3Backend(cheaters=cheaters, batch_size=40)
    got = be.sum_round(_job(rnd, x, 5))
    # the sum of the honest clients' reports, with the same client randomness
    want = SerialBackend().sum_round(_job(rnd, x, 5, dropped=cheaters))
    assert np.array_equal(np.asarray(got.total, dtype=np.int64), want.total)
    assert got.n_clients == want.n_clients == n - len(cheaters)
    assert (be.stats[-1].accepted, be.stats[-1].rejected) == (n - 4, 4)
    # without the check the cheaters' 2s would have entered the sum
    assert not np.array_equal(
        np.asarray(got.total, dtype=np.int64),
        SerialBackend().sum_round(_job(rnd, x, 5)).total,
    )


def test_the_generic_check_bounds_signed_reports() -> None:
    rnd = Round(
        "v", encode_value, {"column": "value", "frac_bits": 4, "clip": 15.0}, dim=2, bound=240
    )
    x = _values(90, 3)
    v = validity_for(rnd)
    assert "shifted 240" in v.description
    be = Prio3Backend(cheaters=[5])
    got = be.sum_round(_job(rnd, x - 7.0, 1))
    want = SerialBackend().sum_round(_job(rnd, x - 7.0, 1, dropped=[5]))
    assert np.array_equal(np.asarray(got.total, dtype=np.int64), want.total)
    assert be.rejected == 1


def validity_for_bound(variant: str) -> int:
    """The shift ``B`` of a ``SumVec(..., shifted B)`` description."""
    return int(variant.rsplit("shifted ", 1)[1].rstrip(")"))


def _direct_statistic(table: np.ndarray, seed: int, ell: int) -> float:
    """||P w||^2 / (2 l) from the global table, unquantized."""
    t = table.astype(np.float64)
    vbar = np.outer(t.sum(1), t.sum(0)) / t.sum()
    w = ((t - vbar) / np.sqrt(vbar)).ravel()
    e = StableProjection(seed, ell, 2.0).project(w[None, :])[0]
    return float(e @ e / (2 * ell))


def test_fed_chi2_on_prio3_is_the_engine_s_and_within_the_quantization_error() -> None:
    rng = np.random.default_rng(4)
    n = 80
    tables = rng.multinomial(30, rng.dirichlet(np.ones(12)), size=n).reshape(n, 3, 4)
    plain = fed_chi2(tables, bits=64, projection_seed=9, engine=Engine(randomness=RandomSource(3)))
    be = Prio3Backend(batch_size=50)
    got = fed_chi2(
        tables, bits=64, projection_seed=9, engine=Engine(backend=be, randomness=RandomSource(3))
    )
    assert got.statistic == plain.statistic
    assert [s.accepted for s in be.stats] == [n, n] and be.rejected == 0
    assert "SumVec(length=7" in be.stats[0].variant and "shifted" in be.stats[1].variant
    # range-checked at the client's clipping bound, far inside the 64-bit residues
    assert validity_for_bound(be.stats[1].variant) < 2**62
    # the stated error: each of n coordinates off by at most 2^-f, sd sqrt(n)/2 2^-f; the statistic is
    # the mean of squares of l = 50 such coordinates e_k ~ sqrt(2 stat)
    direct = _direct_statistic(tables.sum(0), 9, 50)
    err_e = 6 * math.sqrt(n) / 2 * 2.0**-got.frac_bits
    assert abs(got.statistic - direct) <= 2 * math.sqrt(2 * direct) * err_e + err_e**2


def test_calibration_of_the_aggregators_noise() -> None:
    one = calibrate_discrete_gaussian(epsilon=1.0, delta=1e-6, l2_sensitivity=1, dim=1)
    sigma = discrete_gaussian_sigma(epsilon=1.0, delta=1e-6, sensitivity=1)
    assert one.parameter == pytest.approx(sigma**2)
    vec = calibrate_discrete_gaussian(epsilon=1.0, delta=1e-6, l2_sensitivity=math.sqrt(3), dim=4)
    s = math.sqrt(vec.parameter)
    assert zcdp_to_approx_dp(rho=3 / (2 * s * s), delta=1e-6) <= 1.0
    assert zcdp_to_approx_dp(rho=3 / (2 * (0.999 * s) ** 2), delta=1e-6) > 1.0
    with pytest.raises(ParameterError, match="mechanism"):
        AggregatorNoise("gaussian", 1.0)
    with pytest.raises(ParameterError, match="epsilon"):
        calibrate_discrete_gaussian(epsilon=0.0, delta=1e-6, l2_sensitivity=1.0, dim=2)


@pytest.mark.parametrize("mechanism", ["discrete_gaussian", "discrete_laplace"])
def test_each_aggregator_adds_its_noise_and_the_sum_stays_unbiased(mechanism: str) -> None:
    # 20 clients (the noise does not depend on them; a round's Prio3 cost mostly does not either) and 100
    # runs: the variance bounds below are then 2 sigma^2 (1 -+ 0.35); one aggregator's noise alone (half
    # the variance) or noise added twice (double) falls outside them (150 runs: 1 -+ 0.29; these seeds
    # measure 1.01 and 0.89 of 2 sigma^2 for the Gaussian and the Laplace)
    n = 20
    x = _values(n, 6)
    rnd = _bit_round(n)
    exact = SerialBackend().sum_round(_job(rnd, x, 8)).total.astype(np.float64)
    noise = AggregatorNoise(mechanism, 16.0 if mechanism == "discrete_gaussian" else 3.0)
    reps = 100
    draws = np.empty((reps, rnd.dim))
    for r in range(reps):
        be = Prio3Backend(noise={"bits": noise}, randomness=RandomSource(1000 + r))
        draws[r] = np.asarray(be.sum_round(_job(rnd, x, 8)).total, dtype=np.float64)
    diff = draws - exact
    # unbiased: every entry's mean within 4.5 standard errors of 0
    se = diff.std(axis=0, ddof=1) / math.sqrt(reps)
    assert np.all(np.abs(diff.mean(axis=0)) <= 4.5 * se)
    # two aggregators' noise: the variance is twice one aggregator's (chi-square bounds, 4 entries pooled)
    pooled = float((diff**2).mean())
    want = 2 * noise.variance_bound
    k = reps * rnd.dim
    assert want * (1 - 5 / math.sqrt(k / 2)) <= pooled <= want * (1 + 5 / math.sqrt(k / 2))


def test_bit_pushing_with_the_aggregators_noise_is_unbiased() -> None:
    x = _values(120, 9)
    kw = {"method": "basic", "no_privacy": True, "truth": False}
    exact = mean(x, ENC, engine=Engine(randomness=RandomSource(2)), **kw).estimate  # type: ignore[arg-type]
    noise = bit_pushing_noise(epsilon=2.0, delta=1e-5)
    bits = _bit_round(120)
    calibrated = noise(bits)
    assert calibrated is not None and noise(Round("other", encode_value, dim=2)) is None
    # one client changes one entry by 1 of a vector of bit_depth entries: the zCDP calibration
    s2 = calibrated.parameter
    assert zcdp_to_approx_dp(rho=1 / (2 * s2), delta=1e-5) <= 2.0
    reps = 60
    est = np.empty(reps)
    for r in range(reps):
        be = Prio3Backend(noise=noise, randomness=RandomSource(50 + r))
        est[r] = mean(x, ENC, engine=Engine(backend=be, randomness=RandomSource(2)), **kw).estimate  # type: ignore[arg-type]
    se = est.std(ddof=1) / math.sqrt(reps)
    assert se > 0
    assert abs(est.mean() - exact) <= 4.5 * se


def test_fed_h_heterogeneity_and_the_gap_on_prio3_are_the_engine_s() -> None:
    from fedstats.analyses.entropy import fed_entropy
    from fedstats.analyses.heterogeneity import heterogeneity
    from fedstats.analyses.performance_gap.api import measure_performance_gap

    rng = np.random.default_rng(12)
    hist = rng.integers(0, 30, size=(25, 60))
    x = rng.uniform(0.0, 1.0, (60, 3))
    g, v = rng.integers(0, 3, 400), rng.integers(0, 2, 400).astype(float)
    runs: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = [
        (fed_entropy, (hist,), {"encoding_size": 40, "projection_seed": 77, "bits": 32}),
        (heterogeneity, (x,), {"no_privacy": True, "statistic": "all"}),
        (measure_performance_gap, (g, v), {"mechanism": "R", "epsilon": 2.0, "pair": (0, 2)}),
        (measure_performance_gap, (g, v), {"mechanism": "L", "epsilon": 2.0, "pair": (0, 2)}),
    ]
    variants = []
    for fn, args, kw in runs:
        plain = fn(*args, engine=Engine(randomness=RandomSource(7)), **kw)
        be = Prio3Backend()
        got = fn(*args, engine=Engine(backend=be, randomness=RandomSource(7)), **kw)
        assert got.estimate == plain.estimate, fn
        assert be.rejected == 0
        variants += [s.variant for s in be.stats]
    # FED-H's projection is range-checked at its clipping bound, not modulo 2^32; M_R is a histogram
    assert any(
        s.startswith("SumVec(length=80") and "shifted" in s and "2147483648" not in s
        for s in variants
    )
    assert "Histogram(length=6) of (group, outcome)" in variants


def test_a_gap_report_outside_m_r_is_rejected() -> None:
    from fedstats.analyses.performance_gap.api import measure_performance_gap

    rng = np.random.default_rng(13)
    g, v = rng.integers(0, 2, 300), rng.integers(0, 2, 300).astype(float)
    be = Prio3Backend(cheaters=[4, 200])
    res = measure_performance_gap(
        g, v, mechanism="R", epsilon=2.0, engine=Engine(backend=be, randomness=RandomSource(3))
    )
    assert be.stats[-1].variant.startswith("Histogram") and be.rejected == 2
    assert res.n_clients == 298
