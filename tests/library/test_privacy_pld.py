"""The privacy-loss-distribution accountant (fedstats.privacy.analysis.pld).

Against Google's ``dp_accounting`` (an optional test dependency in the ``dev`` extra, or
``pip install dp-accounting``) on a grid of 54 compositions, against closed forms (the binomial composition of randomized response, Balle & Wang's
exact Gaussian delta, single releases), for the properties every privacy curve has, and for invalid input.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from fedstats.errors import ParameterError
from fedstats.privacy.analysis.gaussian import analytic_gaussian_delta
from fedstats.privacy.analysis.loss import MechanismSpec
from fedstats.privacy.analysis.pld import pld_delta, pld_epsilon, pld_pmf
from fedstats.privacy.analysis.zcdp import zcdp_to_approx_dp

M = MechanismSpec

# (releases, delta): 24 specs x 2 deltas + 3 mixtures x 2 deltas = 54 cases
_SPECS: list[tuple[MechanismSpec, int]] = [
    *[
        (M("randomized_response", e, categories=k), n)
        for e in (1.0, 2.0)
        for k in (2, 5)
        for n in (5, 40)
    ],
    *[(M("laplace", b, sampling_rate=q), 20) for b in (1.0, 4.0) for q in (1.0, 0.1)],
    *[(M("gaussian", s, sampling_rate=q), 10) for s in (2.0, 6.0) for q in (1.0, 0.2)],
    *[(M("discrete_laplace", a, sampling_rate=q), 10) for a in (0.3, 1.0) for q in (1.0, 0.2)],
    *[
        (M("discrete_gaussian", s, sensitivity=2, sampling_rate=q), 10)
        for s in (3.0, 8.0)
        for q in (1.0, 0.2)
    ],
]
_MIXES: list[tuple[tuple[MechanismSpec, int], ...]] = [
    ((M("randomized_response", 1.0), 10), (M("laplace", 2.0), 5)),
    ((M("gaussian", 3.0), 5), (M("discrete_laplace", 0.5), 5)),
    ((M("gaussian", 4.0, sampling_rate=0.1), 20), (M("laplace", 2.0, sampling_rate=0.1), 20)),
]
CASES = [(((s, n),), d) for s, n in _SPECS for d in (1e-5, 1e-9)] + [
    (mix, d) for mix in _MIXES for d in (1e-5, 1e-9)
]


def _name(s: MechanismSpec, n: int) -> str:
    return (
        f"{n}x{s.kind}({s.parameter:g},k={s.categories},d={s.sensitivity:g},q={s.sampling_rate:g})"
    )


def _dp_pld(spec: MechanismSpec) -> Any:
    pld = pytest.importorskip(
        "dp_accounting.pld.privacy_loss_distribution",
        reason="dp_accounting (the test oracle) is not installed: pip install dp-accounting "
        "(it is in fedstats' dev extra)",
    )
    q = spec.sampling_rate
    if spec.kind == "randomized_response":
        k = spec.categories
        return pld.from_randomized_response(k / (math.exp(spec.parameter) + k - 1), k)
    if spec.kind == "laplace":
        return pld.from_laplace_mechanism(spec.parameter, sampling_prob=q)
    if spec.kind == "gaussian":
        return pld.from_gaussian_mechanism(spec.parameter, sampling_prob=q)
    if spec.kind == "discrete_laplace":
        return pld.from_discrete_laplace_mechanism(
            spec.parameter, sampling_prob=q, use_connect_dots=True
        )
    return pld.from_discrete_gaussian_mechanism(
        spec.parameter, sensitivity=int(spec.sensitivity), sampling_prob=q, use_connect_dots=True
    )


@functools.cache
def _dp_composed(groups: tuple[tuple[MechanismSpec, int], ...]) -> Any:
    out = None
    for spec, n in groups:
        one = _dp_pld(spec).self_compose(n)
        out = one if out is None else out.compose(one)
    return out


def test_the_grid_has_at_least_50_cases() -> None:
    assert len(CASES) >= 50


@pytest.mark.parametrize(
    ("groups", "delta"),
    CASES,
    ids=[f"{'+'.join(_name(s, n) for s, n in g)}-{d:g}" for g, d in CASES],
)
def test_epsilon_within_1e3_of_dp_accounting(
    groups: tuple[tuple[MechanismSpec, int], ...], delta: float
) -> None:
    want = _dp_composed(groups).get_epsilon_for_delta(delta)
    got = pld_epsilon([s for s, n in groups for _ in range(n)], delta=delta)
    assert got == pytest.approx(want, rel=1e-3, abs=1e-9)


def test_randomized_response_composes_to_the_binomial_exact_value() -> None:
    # n releases of binary RR: the loss is (2J - n) eps with J ~ Binomial(n, e^eps / (1 + e^eps))
    eps, n, delta = 0.1, 100, 1e-6
    j = np.arange(n + 1)
    prob = stats.binom.pmf(j, n, math.exp(eps) / (1 + math.exp(eps)))
    loss = (2 * j - n) * eps

    def excess(e: float) -> float:
        return float(np.sum(prob * np.clip(1 - np.exp(e - loss), 0, None))) - delta

    exact = optimize.brentq(excess, 0.0, n * eps)
    got = pld_epsilon([M("randomized_response", eps)] * n, delta=delta)
    assert exact == pytest.approx(4.7746, abs=1e-4)  # the example (10 by basic composition)
    assert exact - 1e-9 <= got <= exact * (1 + 1e-6)


@pytest.mark.parametrize(("eps", "k"), [(0.1, 2), (1.0, 2), (0.7, 7), (3.0, 3)])
def test_one_randomized_response_release_has_its_epsilon(eps: float, k: int) -> None:
    spec = M("randomized_response", eps, categories=k)
    # within one grid step (h = 1e-4) above: eps / h is not exactly an integer in floating point
    assert eps - 1e-12 <= pld_epsilon([spec], delta=0.0) <= eps + 1.01e-4
    # at delta > 0: delta(e) = P[true answer] (1 - e^(e - eps)), solved for e
    delta = 1e-3
    p_true = math.exp(eps) / (math.exp(eps) + k - 1)
    assert pld_epsilon([spec], delta=delta) == pytest.approx(
        eps + math.log1p(-delta / p_true), abs=2e-4
    )


@pytest.mark.parametrize(("sigma", "n"), [(1.0, 1), (2.0, 4), (5.0, 30), (0.8, 3)])
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_gaussian_composition_is_balle_wang_exact_delta(
    sigma: float, n: int, epsilon: float
) -> None:
    # n Gaussian releases with sigma compose exactly as one with sigma / sqrt(n) (Balle & Wang 2018, Thm. 8)
    exact = analytic_gaussian_delta(epsilon=epsilon, sigma=sigma / math.sqrt(n), sensitivity=1.0)
    got = pld_delta([M("gaussian", sigma)] * n, epsilon=epsilon)
    assert exact * (1 - 1e-9) - 1e-15 <= got <= exact * (1 + 2e-3) + 1e-12


def test_one_laplace_release_has_epsilon_sensitivity_over_scale() -> None:
    assert pld_epsilon([M("laplace", 2.0, sensitivity=3.0)], delta=0.0) == pytest.approx(
        1.5, abs=1e-4
    )


def test_pld_is_never_looser_than_basic_composition_or_zcdp() -> None:
    for spec, eps1 in ((M("randomized_response", 0.3), 0.3), (M("laplace", 2.0), 0.5)):
        for n in (1, 10, 200):
            assert pld_epsilon([spec] * n, delta=1e-7) <= n * eps1 + 1e-3
    rho = 10 * 1 / (2 * 3.0**2)
    assert pld_epsilon([M("gaussian", 3.0)] * 10, delta=1e-7) < zcdp_to_approx_dp(
        rho=rho, delta=1e-7
    )


def test_monotone_in_delta_count_and_sampling_rate() -> None:
    g = M("gaussian", 2.0)
    eps = [pld_epsilon([g] * 5, delta=d) for d in (1e-3, 1e-6, 1e-9, 1e-12)]
    assert eps == sorted(eps)
    counts = [pld_epsilon([g] * n, delta=1e-6) for n in (1, 2, 5, 20)]
    assert counts == sorted(counts)
    rates = [
        pld_epsilon([M("laplace", 1.0, sampling_rate=q)] * 10, delta=1e-6)
        for q in (0.01, 0.1, 0.5, 1.0)
    ]
    assert rates == sorted(rates) and rates[0] < rates[-1] / 5


def test_pmfs_are_distributions_and_gaussian_has_no_finite_pure_epsilon() -> None:
    for spec in (
        M("gaussian", 1.0, sampling_rate=0.3),
        M("discrete_gaussian", 2.0),
        M("randomized_response", 1.0, categories=4),
    ):
        for first, probs, inf_mass in pld_pmf(spec).values():
            assert isinstance(first, int) and (probs >= 0).all()
            # exact up to the rounding of the delta differences in the bulk (never in the tail)
            assert probs.sum() + inf_mass == pytest.approx(1.0, abs=1e-6)
    assert pld_epsilon([M("gaussian", 1.0)], delta=0.0) == math.inf


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(
        ["randomized_response", "laplace", "gaussian", "discrete_laplace", "discrete_gaussian"]
    ),
    parameter=st.one_of(
        st.floats(max_value=0.0), st.just(math.nan), st.just(math.inf), st.floats(min_value=1e7)
    ),
)
def test_invalid_parameter_is_refused_naming_it(kind: str, parameter: float) -> None:
    if kind in ("laplace", "gaussian") and math.isfinite(parameter) and parameter > 0:
        parameter = -parameter  # any finite scale is valid for the continuous mechanisms
    with pytest.raises(ParameterError, match="parameter"):
        M(kind, parameter)


@settings(max_examples=40, deadline=None)
@given(
    field=st.sampled_from(["sampling_rate", "categories", "sensitivity"]),
    value=st.one_of(
        st.floats(max_value=0.0), st.floats(min_value=1.0001, max_value=1e3), st.just(math.nan)
    ),
)
def test_invalid_fields_are_refused_naming_them(field: str, value: float) -> None:
    kind = "randomized_response" if field in ("categories", "sensitivity") else "gaussian"
    if field == "categories" and value >= 2 and float(value).is_integer():
        value += 0.5
    with pytest.raises(ParameterError, match=field):
        M(kind, 1.0, **{field: value})


@settings(max_examples=30, deadline=None)
@given(delta=st.one_of(st.floats(max_value=-1e-300), st.floats(min_value=1.0), st.just(math.nan)))
def test_invalid_delta_and_empty_input_are_refused(delta: float) -> None:
    with pytest.raises(ParameterError, match="delta"):
        pld_epsilon([M("laplace", 1.0)], delta=delta)
    with pytest.raises(ParameterError, match="mechanisms"):
        pld_epsilon([], delta=1e-6)
    with pytest.raises(ParameterError, match="mechanisms"):
        pld_epsilon([0.5], delta=1e-6)  # type: ignore[list-item]


def test_spec_round_trips_through_its_dict() -> None:
    spec = M("discrete_gaussian", 3.5, sensitivity=2, sampling_rate=0.25)
    assert M.from_dict(spec.as_dict()) == spec
    with pytest.raises(ParameterError, match="mechanism"):
        M.from_dict({"parameter": 1.0})


def test_extreme_parameters_give_a_bound_not_an_error() -> None:
    assert pld_epsilon([M("discrete_gaussian", 0.01)] * 3, delta=1e-6) == math.inf  # not private
    assert pld_epsilon([M("randomized_response", 50.0)] * 3, delta=1e-6) <= 150.0 + 1e-3
    assert 0.0 < pld_epsilon([M("gaussian", 1e5)] * 3, delta=1e-6) < 1e-3
    assert 0.0 < pld_epsilon([M("gaussian", 0.5, sampling_rate=1e-6)] * 3, delta=1e-6) < 1e-3
    assert math.isfinite(pld_epsilon([M("discrete_gaussian", 0.2, sensitivity=3)] * 3, delta=1e-6))


def _binomial_epsilon(eps: float, n: int, delta: float) -> float:
    """Exact epsilon of n binary randomized responses at eps: loss (2J - n) eps, J ~ Binomial."""
    p = math.exp(eps) / (1 + math.exp(eps))
    sd = math.sqrt(n * p * (1 - p))  # beyond 40 sd of the mean the mass is below 1e-300
    j = np.arange(max(0, math.floor(n * p - 40 * sd)), min(n, math.ceil(n * p + 40 * sd)) + 1)
    logp = stats.binom.logpmf(j, n, p)
    loss = (2 * j - n) * eps

    def excess(e: float) -> float:
        top = loss > e
        return float(np.sum(np.exp(logp[top]) * -np.expm1(e - loss[top]))) - delta

    return float(optimize.brentq(excess, 0.0, n * eps, xtol=1e-13, rtol=1e-14))


@pytest.mark.parametrize("n", [10**5, 10**6, 10**7])
def test_millions_of_releases_stay_tight(n: int) -> None:
    # a grid coarser than randomized response's own losses would bound 10^7 releases at 0.1 by four
    # times their epsilon: there the window grows instead (to 2^16 points here)
    exact = _binomial_epsilon(0.1, n, 1e-6)
    got = pld_epsilon({M("randomized_response", 0.1): n}, delta=1e-6)
    assert exact * (1 - 1e-7) <= got <= exact * (1 + 1e-5)  # (below: the FFT's rounding only)


@pytest.mark.parametrize("eps", [0.07, 0.13, 0.7, 2.1, 3.7])
@pytest.mark.parametrize("n", [12, 40, 300])
def test_randomized_response_on_a_coarse_grid_stays_exact(eps: float, n: int) -> None:
    # the grid is aligned to eps (eps / m): no discretization error where few releases of a large
    # epsilon put the answer among the largest losses (40 x 2.1 at 1e-9 was 7.6e-4 too high unaligned)
    for delta in (1e-5, 1e-9):
        exact = _binomial_epsilon(eps, n, delta)
        got = pld_epsilon({M("randomized_response", eps): n}, delta=delta)
        assert exact * (1 - 1e-12) <= got <= exact * (1 + 1e-5)


def test_counts_compose_as_repeated_releases_and_bad_counts_are_refused() -> None:
    rr, g = M("randomized_response", 0.3), M("gaussian", 4.0)
    assert pld_epsilon({rr: 30, g: 5, M("laplace", 1.0): 0}, delta=1e-6) == pld_epsilon(
        [rr] * 30 + [g] * 5, delta=1e-6
    )
    for bad in ({rr: -1}, {rr: 1.5}, {rr: True}, {0.3: 2}, {rr: 0}):
        with pytest.raises(ParameterError, match="mechanisms"):
            pld_epsilon(bad, delta=1e-6)  # type: ignore[arg-type]


MIXTURE = {
    M("randomized_response", 0.1): 400,
    M("laplace", 20.0): 300,
    M("gaussian", 30.0): 200,
    M("laplace", 2.0, sampling_rate=0.1): 100,
}


def test_1000_releases_compose_in_one_window_of_at_most_2_15_points_and_a_next_charge_reuses_it() -> (
    None
):
    from fedstats.privacy.analysis import pld

    pld._clear_caches()
    eps = pld_epsilon(MIXTURE, delta=1e-6)
    h, pmfs = pld._composed(pld._groups(MIXTURE), pld.DISCRETIZATION)
    assert len(pmfs) == 2 and all(p[1].size <= 1 << 15 for p in pmfs)  # remove and add
    # one transform per distinct release and adjacency (the symmetric ones serve both): 5
    assert pld._transform.cache_info().currsize == 5
    built = (pld._transform.cache_info().misses, pld._bounds.cache_info().misses)
    more = {**MIXTURE, M("randomized_response", 0.1): 401}  # a ledger's next charge
    assert pld_epsilon(more, delta=1e-6) > eps
    # the same grid and window size: no release's PLD, transform or bound is built again, only the
    # changed group's power is raised
    assert (pld._transform.cache_info().misses, pld._bounds.cache_info().misses) == built
    assert pld._composed(pld._groups(more), pld.DISCRETIZATION)[0] == h


def test_the_epsilon_does_not_depend_on_what_the_caches_hold() -> None:
    # one arithmetic: a device (cold) and a server (warm, after other compositions) get the same bits
    from fedstats.privacy.analysis import pld

    pld._clear_caches()
    cold = [pld_epsilon({**MIXTURE, M("gaussian", 30.0): n}, delta=1e-6) for n in (200, 201)]
    pld._clear_caches()
    pld_epsilon({M("gaussian", 30.0): 150, M("randomized_response", 0.1): 700}, delta=1e-6)
    warm = [pld_epsilon({**MIXTURE, M("gaussian", 30.0): n}, delta=1e-6) for n in (201, 200)]
    assert cold == warm[::-1]


@pytest.mark.parametrize(
    "groups",
    [((M("laplace", 20.0), 1000),), ((M("gaussian", 30.0), 1000),)],
    ids=["1000xlaplace(20)", "1000xgaussian(30)"],
)
def test_1000_releases_on_the_coarse_grid_stay_within_1e3_of_dp_accounting(
    groups: tuple[tuple[MechanismSpec, int], ...],
) -> None:
    want = _dp_composed(groups).get_epsilon_for_delta(1e-6)
    got = pld_epsilon(dict(groups), delta=1e-6)
    assert got == pytest.approx(want, rel=1e-3)
    assert got >= want * (1 - 1e-6)  # an upper bound as dp_accounting's (up to its own grid)
