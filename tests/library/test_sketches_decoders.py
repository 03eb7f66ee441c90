"""Decoders of F_alpha: unbiasedness, variance and interval coverage by Monte Carlo (SE-based tolerances)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from fedstats.errors import DataError, ParameterError
from fedstats.sketches.decoders import (
    geometric_mean_estimator,
    geometric_relative_standard_error,
    log_abs_stable_mean,
    log_abs_stable_variance,
    mean_of_squares_estimator,
)
from fedstats.sketches.stable import sample_symmetric_stable

R = 3000
F = 3.7


def _draws(alpha: float, ell: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return F ** (1 / alpha) * sample_symmetric_stable(alpha, (R, ell), rng)


def test_mean_of_squares_has_exact_scaled_chi2_distribution() -> None:
    ell = 20
    e = _draws(2.0, ell, 1)
    est = np.array([mean_of_squares_estimator(row).estimate for row in e])
    # ell * F_hat / F ~ chi2_ell exactly
    assert scipy.stats.kstest(ell * est / F, scipy.stats.chi2(ell).cdf).pvalue > 1e-6
    assert mean_of_squares_estimator(e[0]).relative_standard_error == pytest.approx(
        math.sqrt(2 / ell)
    )


@pytest.mark.parametrize("alpha", [2.0, 1.05, 0.95, 0.5])
def test_geometric_mean_unbiased_with_predicted_variance(alpha: float) -> None:
    ell = 50
    e = _draws(alpha, ell, 2)
    est = np.array([geometric_mean_estimator(row, alpha).estimate for row in e])
    rse = geometric_relative_standard_error(alpha, ell)
    # bias: within 6 standard errors of the Monte Carlo mean
    assert abs(est.mean() - F) < 6 * rse * F / math.sqrt(R)
    # variance: compare with Var(s^2) ~ (m4 - s^4) / R
    s2 = est.var(ddof=1)
    m4 = float(((est - est.mean()) ** 4).mean())
    assert abs(s2 - (rse * F) ** 2) < 6 * math.sqrt((m4 - s2 * s2) / R)


def test_mean_of_squares_beats_geometric_at_alpha_two() -> None:
    ell = 50
    ratio = geometric_relative_standard_error(2.0, ell) ** 2 / (2 / ell)
    assert 2.2 < ratio < 2.8  # about pi^2 / 4


@pytest.mark.parametrize(
    ("decoder", "alpha", "ell"),
    [("mos", 2.0, 50), ("geo", 2.0, 50), ("geo", 2.0, 10), ("geo", 1.05, 50), ("geo", 0.95, 200)],
)
def test_interval_coverage(decoder: str, alpha: float, ell: int) -> None:
    e = _draws(alpha, ell, 3)
    hits = 0
    for row in e:
        r = (
            mean_of_squares_estimator(row)
            if decoder == "mos"
            else geometric_mean_estimator(row, alpha)
        )
        hits += r.ci[0] <= F <= r.ci[1]
    cov = hits / R
    assert abs(cov - 0.95) < 6 * math.sqrt(0.95 * 0.05 / R)


def test_log_abs_moments_match_simulation() -> None:
    rng = np.random.default_rng(4)
    for alpha in (0.7, 1.0, 1.6, 2.0):
        x = np.log(np.abs(sample_symmetric_stable(alpha, 200_000, rng)))
        sd = math.sqrt(log_abs_stable_variance(alpha))
        assert abs(x.mean() - log_abs_stable_mean(alpha)) < 6 * sd / math.sqrt(x.size)
        assert x.var() == pytest.approx(sd * sd, rel=0.03)


def test_decoders_reject_bad_input() -> None:
    with pytest.raises(ParameterError, match="encoding_size"):
        mean_of_squares_estimator([1.0])
    with pytest.raises(ParameterError, match="encoding_size"):
        geometric_mean_estimator(np.array([2.0]), 2.0)
    with pytest.raises(DataError):
        mean_of_squares_estimator([1.0, np.inf])
    with pytest.raises(ParameterError, match="alpha"):
        geometric_mean_estimator([1.0, 2.0], 2.5)
    with pytest.raises(ParameterError, match="confidence"):
        mean_of_squares_estimator([1.0, 2.0], confidence=1.0)


def test_geometric_mean_log_space_handles_extreme_scales() -> None:
    e = np.full(5000, 1e100)  # prod |e_k| overflows; the log-space estimator does not
    r = geometric_mean_estimator(e, 2.0)
    assert math.isfinite(r.estimate)
    # log D_l -> alpha E log|S| as l grows, so F_hat -> e^2 / exp(2 E log|S|)
    assert r.estimate == pytest.approx(1e200 / math.exp(2 * log_abs_stable_mean(2.0)), rel=1e-3)


def test_geometric_mean_reads_a_rounded_zero_as_quarter_resolution() -> None:
    e = np.array([1.0, -2.0, 0.0, 3.0, 0.5])
    assert geometric_mean_estimator(e, 2.0).estimate == 0.0
    res = 2.0**-8
    got = geometric_mean_estimator(e, 2.0, resolution=res).estimate
    e2 = e.copy()
    e2[2] = res / 4
    assert got == pytest.approx(geometric_mean_estimator(e2, 2.0).estimate) and got > 0
