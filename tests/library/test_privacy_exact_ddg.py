"""tau of the distributed discrete Gaussian (Kairouz, Liu, Steinke 2021) against exact summation."""

from __future__ import annotations

import math
from collections.abc import Iterator

import mpmath
import pytest

from fedstats.analyses.heterogeneity import calibration
from fedstats.privacy.analysis.distributed_gaussian import ddg_rho, ddg_share_variance, ddg_tau


@pytest.fixture(autouse=True, scope="module")
def _mp_precision() -> Iterator[None]:
    """50 digits for this module's tests only (a module-level setting leaked into the next module)."""
    with mpmath.workdps(50):
        yield


def exact_tau(s: float, n: int) -> mpmath.mpf:
    """10 sum_{k=1}^{n-1} e^{-c k/(k+1)} = 10 e^{-c} sum_j c^j/j! sum_{i=2}^{n} i^-j (Hurwitz zeta)."""
    c = 2 * mpmath.pi**2 * mpmath.mpf(s) ** 2
    total = mpmath.mpf(n - 1) + c * (mpmath.harmonic(n) - 1)
    term = c
    j = 1
    while True:
        j += 1
        term = term * c / j
        add = term * (mpmath.zeta(j, 2) - mpmath.zeta(j, n + 1))
        total += add
        if add < total * mpmath.mpf(10) ** -40:
            break
    return 10 * mpmath.exp(-c) * total


def direct_tau(s: float, n: int) -> mpmath.mpf:
    c = 2 * mpmath.pi**2 * mpmath.mpf(s) ** 2
    return 10 * mpmath.fsum(mpmath.exp(-c * k / (k + 1)) for k in range(1, n))


@pytest.mark.parametrize(("s", "n"), [(0.5, 2), (0.5, 500), (1.3, 3000), (0.7, 20_000)])
def test_zeta_series_is_the_sum(s: float, n: int) -> None:
    assert abs(exact_tau(s, n) / direct_tau(s, n) - 1) < mpmath.mpf(10) ** -35


@pytest.mark.parametrize("s", [0.5, 0.6, 0.8, 1.0, 1.5, 2.5])
@pytest.mark.parametrize("n", [2, 10, 10_001, 10_002, 50_000, 10**5, 10**6])
def test_tau_is_an_upper_bound_and_tight(s: float, n: int) -> None:
    exact = exact_tau(s, n)
    got = mpmath.mpf(ddg_tau(s, n))
    assert got >= exact  # safe side
    assert got <= exact * (1 + mpmath.mpf(2e-9))  # and tight


def test_the_old_tail_bound_was_on_the_wrong_side() -> None:
    """The terms decrease towards e^{-c}: bounding the tail by (n - 1 - m) e^{-c} is too small."""
    s, n, m = 0.5, 10**6, 10_000
    c = 2 * math.pi**2 * s * s
    head = sum(math.exp(-c * k / (k + 1)) for k in range(1, m + 1))
    old = 10 * (head + (n - 1 - m) * math.exp(-c))
    assert mpmath.mpf(old) < exact_tau(s, n) <= mpmath.mpf(ddg_tau(s, n))


def test_rho_with_bounded_tau_is_never_below_the_exact_rho() -> None:
    for s2, n in [(0.25, 10**6), (0.4, 10**5), (1.0, 10**6)]:
        s = math.sqrt(s2)
        tau = exact_tau(s, n)
        l2, l1, dim = 3.0, 5.0, 7
        ns = mpmath.sqrt(n) * s
        b2 = (l2 * l2 / (n * mpmath.mpf(s2)) + 2 * tau * l1 / ns + tau * tau * dim) / 2
        b3 = (l2 / ns + tau * mpmath.sqrt(dim)) ** 2 / 2
        exact_rho = min(b2, b3)
        rho = ddg_rho(share_variance=s2, n=n, l2=l2, l1=l1, dim=dim)
        assert mpmath.mpf(rho) >= exact_rho and mpmath.mpf(rho) <= exact_rho * (
            1 + mpmath.mpf(1e-8)
        )


def test_share_variance_is_private_and_heterogeneity_delegates() -> None:
    for n in (10, 20_000, 10**6):
        v = ddg_share_variance(rho=0.05, n=n, l2=2.0, l1=4.0, dim=4)
        assert ddg_rho(share_variance=v, n=n, l2=2.0, l1=4.0, dim=4) <= 0.05
        assert (
            ddg_rho(share_variance=v * (1 - 1e-8), n=n, l2=2.0, l1=4.0, dim=4) > 0.05 or v == 0.25
        )
    # heterogeneity uses this accounting itself (one path), not a copy
    assert calibration.ddg_share_variance is ddg_share_variance
    assert calibration.ddg_rho is ddg_rho
