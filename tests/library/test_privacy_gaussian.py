"""Gaussian calibration against an independent 60-digit mpmath solver; discrete Gaussian; zCDP."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from fedstats.errors import ParameterError
from fedstats.privacy.analysis import (
    PrivacyWarning,
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    compose_zcdp,
    gaussian_rho,
    zcdp_to_approx_dp,
)
from fedstats.privacy.analysis.discrete_gaussian import (
    discrete_gaussian_delta,
    discrete_gaussian_sigma,
)

EPSILONS = [1e-3, 1e-2, 0.1, 1.0, 5.0, 20.0, 100.0, 1e3]
DELTAS = [1e-300, 1e-100, 1e-20, 1e-8, 1e-5, 1e-2, 0.5, 0.999]


@pytest.fixture(autouse=True, scope="module")
def _mp_precision() -> Iterator[None]:
    """60 digits for this module's tests only (a module-level setting leaked into the next module)."""
    with mp.workdps(60):
        yield


def mp_delta(eps: float, sigma: mp.mpf, sens: float) -> mp.mpf:
    """Balle & Wang Thm. 8 evaluated with 60 significant digits (independent of the library)."""
    e, d = mp.mpf(eps), mp.mpf(sens)
    a = d / (2 * sigma)
    b = e * sigma / d
    return mp.ncdf(a - b) - mp.exp(e) * mp.ncdf(-a - b)


def mp_sigma(eps: float, delta: float, sens: float, guess: float) -> mp.mpf:
    """Root of log delta(sigma) = log delta by the Illinois method on a bracket around ``guess``."""
    target = mp.log(mp.mpf(delta))

    def f(t: mp.mpf) -> mp.mpf:
        return mp.log(mp_delta(eps, mp.exp(t), sens)) - target

    lo, hi = mp.log(guess) - mp.mpf("0.05"), mp.log(guess) + mp.mpf("0.05")
    while f(lo) < 0:
        lo -= 1
    while f(hi) > 0:
        hi += 1
    return mp.exp(mp.findroot(f, (lo, hi), solver="illinois", tol=mp.mpf(10) ** -40))


@pytest.mark.parametrize("eps", EPSILONS)
def test_analytic_sigma_matches_mpmath_and_never_exceeds_delta(eps: float) -> None:
    for delta in DELTAS:
        for sens in (1.0, 0.37):
            sigma = analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=sens)
            ref = mp_sigma(eps, delta, sens, sigma)
            rel = abs(mp.mpf(sigma) / ref - 1)
            assert rel <= 1e-10, (eps, delta, sens, sigma, float(ref))
            # the returned sigma is never below the exact one: achieved delta <= target
            assert mp_delta(eps, mp.mpf(sigma), sens) <= mp.mpf(delta) * (1 + mp.mpf(10) ** -30)


def test_paper_far_tail_case_is_private() -> None:
    # Paper notes: (1 + erf)/2 implementations return a sigma 0.475% too small here.
    sigma = analytic_gaussian_sigma(epsilon=20.0, delta=1e-8, sensitivity=1.0)
    ref = mp_sigma(20.0, 1e-8, 1.0, sigma)
    assert sigma >= ref * (1 - mp.mpf(10) ** -15)
    naive = 0.995 * sigma
    assert mp_delta(20.0, mp.mpf(naive), 1.0) > 1.2e-8  # the naive sigma is not private


@pytest.mark.parametrize("eps", [1e-3, 0.5, 3.0, 50.0, 900.0])
def test_delta_and_epsilon_inverses(eps: float) -> None:
    for delta in (1e-250, 1e-12, 1e-4, 0.3):
        sigma = analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=2.0)
        d = analytic_gaussian_delta(epsilon=eps, sigma=sigma, sensitivity=2.0)
        assert d <= delta and d >= delta * (1 - 1e-8)
        e = analytic_gaussian_epsilon(delta=delta, sigma=sigma, sensitivity=2.0)
        assert abs(e / eps - 1) <= 1e-8
        # rounding direction: the returned epsilon meets the target delta
        assert mp_delta(e, mp.mpf(sigma), 2.0) <= mp.mpf(delta) * (1 + mp.mpf(10) ** -12)


def test_analytic_delta_against_mpmath_on_random_points() -> None:
    rng = np.random.default_rng(3)
    for _ in range(40):
        eps = float(10 ** rng.uniform(-3, 3))
        s = float(10 ** rng.uniform(-2, 3))
        ref = mp_delta(eps, mp.mpf(s), 1.0)
        got = analytic_gaussian_delta(epsilon=eps, sigma=s, sensitivity=1.0)
        if ref < mp.mpf(1e-300):
            assert got < 1e-290
        else:
            assert abs(mp.mpf(got) / ref - 1) <= 1e-9, (eps, s, got, float(ref))


def test_epsilon_zero_when_sigma_huge() -> None:
    assert analytic_gaussian_epsilon(delta=0.5, sigma=10.0, sensitivity=1.0) == 0.0


def test_classical_refuses_large_epsilon_then_warns() -> None:
    with pytest.raises(ParameterError, match="epsilon"):
        classical_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0)
    with pytest.warns(PrivacyWarning):
        s = classical_gaussian_sigma(
            epsilon=5.0, delta=0.1, sensitivity=1.0, allow_large_epsilon=True
        )
    assert s == pytest.approx(math.sqrt(2 * math.log(12.5)) / 5.0, rel=1e-15)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        small = classical_gaussian_sigma(epsilon=0.5, delta=1e-5, sensitivity=1.0)
    # classical is valid (delta achieved below target) but larger than analytic for eps < 1
    assert analytic_gaussian_delta(epsilon=0.5, sigma=small, sensitivity=1.0) <= 1e-5
    assert small > analytic_gaussian_sigma(epsilon=0.5, delta=1e-5, sensitivity=1.0)
    # at eps = 10 the classical sigma is below the optimum: not private (paper notes)
    with pytest.warns(PrivacyWarning):
        s10 = classical_gaussian_sigma(
            epsilon=10.0, delta=1e-5, sensitivity=1.0, allow_large_epsilon=True
        )
    assert analytic_gaussian_delta(epsilon=10.0, sigma=s10, sensitivity=1.0) > 1e-5


def mp_discrete_delta(eps: float, sigma: float, sens: int) -> mp.mpf:
    """CKS 2020 Thm. 7 by explicit 60-digit summation (small sigma only)."""
    s = mp.mpf(sigma)
    span = int(40 * sigma) + 40
    w = {k: mp.exp(-(mp.mpf(k) ** 2) / (2 * s * s)) for k in range(-span, span + 1)}
    z = mp.fsum(w.values())
    m = eps * s * s / sens - mp.mpf(sens) / 2
    t1 = mp.fsum(v for k, v in w.items() if k > m)
    t2 = mp.fsum(v for k, v in w.items() if k > m + sens)
    return (t1 - mp.exp(eps) * t2) / z


@pytest.mark.parametrize(
    ("eps", "sigma", "sens"),
    [(1.0, 3.3, 1), (0.5, 10.0, 2), (3.0, 0.8, 1), (1.0, 25.0, 9), (0.5, 5.0, 8), (1e-3, 3.0, 10)],
)
def test_discrete_gaussian_delta_matches_mpmath(eps: float, sigma: float, sens: int) -> None:
    ref = mp_discrete_delta(eps, sigma, sens)
    got = discrete_gaussian_delta(epsilon=eps, sigma=sigma, sensitivity=sens)
    assert abs(mp.mpf(got) / ref - 1) <= 1e-12


def test_discrete_gaussian_euler_maclaurin_matches_direct_sum() -> None:
    import fedstats.privacy.analysis.discrete_gaussian as dg

    cases = [(0.1, 5000.0, 300), (0.01, 3e5, 1000), (1.0, 2000.5, 500), (5.0, 1e5, 10**5)]
    em = [dg.discrete_gaussian_log_delta(e, s, d) for e, s, d in cases]
    direct = []
    for e, s, d in cases:
        big_k = math.floor(e * s * s / d - d / 2) + 1
        k = np.arange(big_k, big_k + int(40 * s) + 50, dtype=np.float64)
        m = e * s * s / d - d / 2
        w = np.exp(-(k * k - float(big_k) ** 2) / (2 * s * s)) * -np.expm1(-d * (k - m) / (s * s))
        direct.append(
            -(float(big_k) ** 2) / (2 * s * s)
            + math.log(w.sum())
            - math.log(s * math.sqrt(2 * math.pi))
        )
    for a, b in zip(em, direct, strict=True):
        assert abs(a - b) <= 1e-11


@pytest.mark.parametrize(
    ("eps", "delta", "sens"), [(1.0, 1e-5, 1), (0.3, 1e-9, 4), (2.0, 1e-6, 2**20)]
)
def test_discrete_gaussian_sigma_is_tight_and_private(eps: float, delta: float, sens: int) -> None:
    s = discrete_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=sens)
    assert discrete_gaussian_delta(epsilon=eps, sigma=s, sensitivity=sens) <= delta
    assert discrete_gaussian_delta(epsilon=eps, sigma=s * (1 - 1e-9), sensitivity=sens) > delta * (
        1 - 1e-6
    )


def test_zcdp_rho_and_composition() -> None:
    assert gaussian_rho(sigma=2.0, sensitivity=1.0) == 0.125
    assert compose_zcdp([0.1, 0.2, 0.3]) == pytest.approx(0.6, abs=1e-16)
    with pytest.raises(ParameterError):
        compose_zcdp([0.1, -0.1])


@pytest.mark.parametrize("sigma", [0.5, 2.0, 10.0, 100.0])
def test_zcdp_conversion_is_valid_and_tighter_than_simple(sigma: float) -> None:
    rho = gaussian_rho(sigma=sigma, sensitivity=1.0)
    for delta in (1e-12, 1e-6, 1e-2):
        eps = zcdp_to_approx_dp(rho=rho, delta=delta)
        # valid: a rho-zCDP Gaussian needs at least its exact epsilon at this delta
        exact = analytic_gaussian_epsilon(delta=delta, sigma=sigma, sensitivity=1.0)
        assert eps >= exact * (1 - 1e-12)
        simple = rho + 2 * math.sqrt(rho * math.log(1 / delta))
        assert eps <= simple
        assert eps < simple or rho == 0
    # CKS 2020 Prop. 12 at alpha = 1 + sqrt(log(1/delta)/rho) is an upper bound on the optimum
    rho, delta = 0.05, 1e-6
    a = 1 + math.sqrt(math.log(1 / delta) / rho)
    at_a = a * rho + (math.log(1 / delta) - math.log(a)) / (a - 1) + math.log(1 - 1 / a)
    assert zcdp_to_approx_dp(rho=rho, delta=delta) <= at_a + 1e-12


@given(
    log_eps=hs.floats(-3, 3),
    log_delta=hs.floats(-300, -1e-4),
    log_sens=hs.floats(-6, 6),
)
@settings(max_examples=150, deadline=None)
def test_sigma_is_private_and_tight_everywhere(
    log_eps: float, log_delta: float, log_sens: float
) -> None:
    eps, delta, sens = 10**log_eps, 10**log_delta, 10**log_sens
    sigma = analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=sens)
    assert analytic_gaussian_delta(epsilon=eps, sigma=sigma, sensitivity=sens) <= delta
    assert analytic_gaussian_delta(
        epsilon=eps, sigma=sigma * (1 - 1e-10), sensitivity=sens
    ) > delta * (1 - 1e-6)
