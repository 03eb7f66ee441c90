"""Mechanisms: exact privacy loss, unbiasedness and variance (6 SE), release grids, invalid parameters."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from fedstats.errors import DataError, OverflowRiskError, ParameterError
from fedstats.privacy.analysis import (
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    continuous_privacy_loss,
    discrete_privacy_loss,
    gaussian_rho,
    mixed_privacy_loss,
    zcdp_to_approx_dp,
)
from fedstats.privacy.mechanisms import (
    DuchiMechanism,
    GaussianMechanism,
    GeneralizedRandomizedResponse,
    Harmony,
    LaplaceMechanism,
    PiecewiseMechanism,
    RandomizedResponse,
    SubtractiveDithering,
    sample_discrete_gaussian,
    sample_discrete_laplace,
    snap_to_grid,
)

N = 200_000


# ---------------------------------------------------------------- exact privacy loss
@pytest.mark.parametrize("eps", [1e-3, 0.5, 2.0, 30.0, 500.0])
def test_randomized_response_loss_is_exact(eps: float) -> None:
    assert RandomizedResponse(epsilon=eps).privacy_loss().epsilon == pytest.approx(eps, rel=1e-12)
    assert Harmony(epsilon=min(eps, 300.0)).privacy_loss().epsilon == pytest.approx(
        min(eps, 300.0), rel=1e-9
    )


@pytest.mark.parametrize("k", [2, 3, 7, 40])
def test_grr_loss_matches_brute_force_matrix(k: int) -> None:
    for eps in (0.2, 1.0, 5.0):
        m = GeneralizedRandomizedResponse(epsilon=eps, k=k)
        full = discrete_privacy_loss(m.probabilities())
        assert m.privacy_loss().epsilon == pytest.approx(full, rel=1e-12)
        assert full == pytest.approx(eps, rel=1e-12)


def test_harmony_loss_over_all_inputs() -> None:
    m = Harmony(epsilon=1.3)
    probs = m.probabilities(np.linspace(-1, 1, 201))
    assert discrete_privacy_loss(probs) == pytest.approx(1.3, rel=1e-12)


@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0])
def test_piecewise_loss_numerically_over_dense_inputs(eps: float) -> None:
    m = PiecewiseMechanism(epsilon=eps)
    inputs = np.linspace(-1, 1, 41)
    grid = np.linspace(-m.C, m.C, 4001)
    dense = continuous_privacy_loss(m.log_density, inputs, grid)
    assert dense == pytest.approx(eps, rel=1e-12)
    assert m.privacy_loss().epsilon == pytest.approx(eps, rel=1e-12)


def test_grid_laplace_loss_from_pmf() -> None:
    m = LaplaceMechanism(epsilon=0.9, sensitivity=1.0, resolution_bits=2)
    d, t = m.integer_sensitivity, m.integer_scale
    ks = np.arange(-60 * d, 60 * d)
    rows = [-np.abs(ks - shift) / t for shift in (0, d)]
    logp = np.array([r - np.log(np.exp(r).sum()) for r in rows])
    # truncated support: renormalised rows are within 1e-20 of the true ones
    assert discrete_privacy_loss(logp, log_space=True) == pytest.approx(
        m.privacy_loss().epsilon, rel=1e-9
    )
    assert m.privacy_loss().epsilon == pytest.approx(0.9, rel=1e-12)


@given(
    x=hs.floats(-1e3, 1e3),
    gap=hs.floats(0, 1),
    sens=hs.floats(1e-3, 50),
    bits=hs.integers(1, 30),
)
@settings(max_examples=200, deadline=None)
def test_snapping_keeps_integer_sensitivity(x: float, gap: float, sens: float, bits: int) -> None:
    m = LaplaceMechanism(epsilon=1.0, sensitivity=sens, resolution_bits=bits)
    a, b = np.array([x]), np.array([x + gap * sens])
    diff = abs(float(snap_to_grid(b, m.grid)[0] - snap_to_grid(a, m.grid)[0]))
    assert diff <= m.integer_sensitivity
    assert 2 ** (bits - 1) <= sens / m.grid <= 2**bits


def test_loss_helpers_support_and_validation() -> None:
    assert discrete_privacy_loss([[0.5, 0.5, 0.0], [0.4, 0.3, 0.3]]) == math.inf
    assert discrete_privacy_loss([[0.5, 0.5, 0.0], [0.25, 0.75, 0.0]]) == pytest.approx(math.log(2))
    with pytest.raises(DataError):
        discrete_privacy_loss([[0.5, 0.6]])
    with pytest.raises(DataError):
        discrete_privacy_loss([0.5, 0.5])
    with pytest.raises(DataError):
        discrete_privacy_loss([[-0.5, 1.5]])

    def lap(x: Any, y: np.ndarray) -> np.ndarray:
        return -np.abs(y - x) / 2.0 - math.log(4.0)

    # Laplace with scale 2, inputs 0 and 1: epsilon = 1/2, attained in the tails
    assert continuous_privacy_loss(lap, [0.0, 1.0], np.linspace(-5, 6, 111)) == pytest.approx(0.5)

    def gauss(x: Any, y: np.ndarray) -> np.ndarray:
        return -((y - x) ** 2) / 2.0

    # the Gaussian's loss is unbounded: it grows with the grid
    assert continuous_privacy_loss(gauss, [0.0, 1.0], np.linspace(-20, 20, 11)) > 19


def test_mixed_loss_detects_laplace_scale_mismatch() -> None:
    """Paper 003 note: Laplace noise of different scales per group has an unbounded density ratio."""
    a = math.e / (1 + math.e)

    def log_density(x: Any, o: np.ndarray, y: np.ndarray) -> np.ndarray:
        g, v = x
        p_group = np.where(o == g, math.log(a), math.log(1 - a))
        scale = np.where(o == g, 2.0, 1.5)
        return p_group - np.abs(y - v) / scale - np.log(2 * scale)

    inputs = [(g, v) for g in (0, 1) for v in (-1.0, 1.0)]
    narrow = mixed_privacy_loss(log_density, inputs, [0, 1], np.linspace(-5, 5, 101))
    wide = mixed_privacy_loss(log_density, inputs, [0, 1], np.linspace(-500, 500, 1001))
    assert wide > narrow + 10  # unbounded

    def same_scale(x: Any, o: np.ndarray, y: np.ndarray) -> np.ndarray:
        g, v = x
        p_group = np.where(o == g, math.log(a), math.log(1 - a))
        return p_group - np.abs(y - v) / 2.0 - math.log(4.0)

    # group RR (eps 1) + Laplace scale 2 on range 2 (eps 1): total 2, attained
    assert mixed_privacy_loss(
        same_scale, inputs, [0, 1], np.linspace(-50, 50, 1001)
    ) == pytest.approx(2.0)


# ---------------------------------------------------------------- unbiasedness and variance
def check_mean_var(est: np.ndarray, truth: float, var: float) -> None:
    n = est.size
    assert abs(est.mean() - truth) <= 6 * math.sqrt(var / n)
    m4 = float(np.mean((est - est.mean()) ** 4))
    assert abs(est.var() - var) <= 6 * math.sqrt(max(m4 - var**2, 1e-300) / n)


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_unbiased_estimators_and_variances(eps: float) -> None:
    rng = np.random.default_rng(7)
    rr = RandomizedResponse(epsilon=eps)
    bits = (np.arange(N) % 3 == 0).astype(np.uint8)
    y = rr.randomize(bits, rng)
    assert abs(rr.debias_mean(y.mean()) - bits.mean()) <= 6 * math.sqrt(rr.variance() / N)
    check_mean_var(rr.debias_mean(y[bits == 1].astype(float)), 1.0, rr.variance())

    grr = GeneralizedRandomizedResponse(epsilon=eps, k=6)
    vals = np.arange(N) % 4  # frequencies 1/4 on 0..3, 0 on 4, 5
    freq = grr.estimate_frequencies(np.bincount(grr.randomize(vals, rng), minlength=6), N)
    for v, f in enumerate([0.25, 0.25, 0.25, 0.25, 0.0, 0.0]):
        assert abs(freq[v] - f) <= 6 * math.sqrt(grr.variance(f) / N)

    for mech in (
        Harmony(epsilon=eps),
        DuchiMechanism(epsilon=eps),
        PiecewiseMechanism(epsilon=eps),
    ):
        for t in (-0.8, 0.0, 0.6):
            check_mean_var(mech.randomize(np.full(N // 2, t), rng), t, float(mech.variance(t)))

    for lap in (
        LaplaceMechanism(epsilon=eps, sensitivity=2.0),
        LaplaceMechanism(epsilon=eps, sensitivity=2.0, resolution_bits=None),
    ):
        x = 0.3
        check_mean_var(lap.randomize(np.full(N, x), rng), x + float(lap.bias(x)), lap.variance())
    for g in (
        GaussianMechanism(epsilon=eps, delta=1e-6, sensitivity=1.0, resolution_bits=3),
        GaussianMechanism(epsilon=eps, delta=1e-6, sensitivity=1.0),
        GaussianMechanism(epsilon=eps, delta=1e-6, sensitivity=1.0, resolution_bits=None),
    ):
        x = 0.3
        check_mean_var(g.randomize(np.full(N, x), rng), x + float(g.bias(x)), g.variance())

    d = SubtractiveDithering(bit_depth=1)
    check_mean_var(d.randomize(np.full(N, 0.3), rng), 0.3, 1 / 12)


def test_discrete_sampler_variances() -> None:
    rng = np.random.default_rng(11)
    t = 3.0
    q = math.exp(-1 / t)
    check_mean_var(sample_discrete_laplace(t, N, rng).astype(float), 0.0, 2 * q / (1 - q) ** 2)
    x = sample_discrete_gaussian(9.0, N, rng).astype(float)
    check_mean_var(x, 0.0, 9.0)  # variance below 9 by a relative exp(-2 pi^2 9) only


def test_gaussian_mechanism_privacy_is_consistent() -> None:
    g = GaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=1.0, resolution_bits=None)
    loss = g.privacy_loss()
    assert loss.delta <= 1e-5 and loss.rho == pytest.approx(
        gaussian_rho(sigma=g.sigma, sensitivity=1.0)
    )
    assert g.sigma == analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0)
    grid = GaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=1.0)
    assert grid.privacy_loss().delta <= 1e-5
    assert grid.sigma == pytest.approx(g.sigma, rel=1e-5)  # the grid costs almost nothing
    assert grid.floating_point_safe and not g.floating_point_safe
    with pytest.warns(UserWarning):
        c = GaussianMechanism(
            epsilon=2.0, delta=1e-5, sensitivity=1.0, analytic=False, allow_large_epsilon=True
        )
    assert (
        c.privacy_loss().delta
        <= analytic_gaussian_delta(epsilon=2.0, sigma=c.sigma, sensitivity=1.0) * 1.01
    )


def test_grid_release_refuses_values_beyond_exact_range() -> None:
    m = LaplaceMechanism(epsilon=1.0, sensitivity=1.0, resolution_bits=20)
    with pytest.raises(OverflowRiskError):
        m.randomize(np.array([2.0**40]), np.random.default_rng(0))
    with pytest.raises(DataError):
        m.randomize(np.array([np.nan]), np.random.default_rng(0))


def test_explain_is_complete() -> None:
    for m in (
        RandomizedResponse(epsilon=1.0),
        GaussianMechanism(epsilon=1.0, delta=1e-6, sensitivity=1.0),
        PiecewiseMechanism(epsilon=1.0),
    ):
        info = m.explain()
        assert {
            "epsilon",
            "delta",
            "variance_worst_case",
            "release_grid",
            "floating_point_safe",
        } <= set(info)


# ---------------------------------------------------------------- invalid parameters
BAD_POSITIVE = hs.one_of(
    hs.floats(max_value=0.0),
    hs.just(math.nan),
    hs.just(math.inf),
    hs.just("1.0"),
    hs.just(True),
    hs.none(),
)
BAD_DELTA = hs.one_of(
    hs.floats(max_value=0.0), hs.floats(min_value=1.0), hs.just(math.nan), hs.just("0.1")
)


@given(bad=BAD_POSITIVE)
@settings(max_examples=60, deadline=None)
def test_invalid_epsilon_and_sensitivity_rejected(bad: Any) -> None:
    ctors = [
        lambda: RandomizedResponse(epsilon=bad),
        lambda: GeneralizedRandomizedResponse(epsilon=bad, k=3),
        lambda: Harmony(epsilon=bad),
        lambda: PiecewiseMechanism(epsilon=bad),
        lambda: LaplaceMechanism(epsilon=bad, sensitivity=1.0),
        lambda: GaussianMechanism(epsilon=bad, delta=1e-5, sensitivity=1.0),
        lambda: analytic_gaussian_sigma(epsilon=bad, delta=1e-5, sensitivity=1.0),
        lambda: classical_gaussian_sigma(epsilon=bad, delta=1e-5, sensitivity=1.0),
    ]
    for make in ctors:
        with pytest.raises(ParameterError) as info:
            make()
        assert info.value.name == "epsilon"
    for make in (
        lambda: LaplaceMechanism(epsilon=1.0, sensitivity=bad),
        lambda: GaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=bad),
        lambda: analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=bad),
    ):
        with pytest.raises(ParameterError) as info:
            make()
        assert info.value.name == "sensitivity"
    with pytest.raises(ParameterError):
        analytic_gaussian_delta(epsilon=1.0, sigma=bad, sensitivity=1.0)
    with pytest.raises(ParameterError):
        sample_discrete_laplace(bad, 3, np.random.default_rng(0))
    with pytest.raises(ParameterError):
        sample_discrete_gaussian(bad, 3, np.random.default_rng(0))
    with pytest.raises(ParameterError):
        gaussian_rho(sigma=bad, sensitivity=1.0)


@given(bad=BAD_DELTA)
@settings(max_examples=40, deadline=None)
def test_invalid_delta_rejected(bad: Any) -> None:
    for make in (
        lambda: GaussianMechanism(epsilon=1.0, delta=bad, sensitivity=1.0),
        lambda: analytic_gaussian_sigma(epsilon=1.0, delta=bad, sensitivity=1.0),
        lambda: analytic_gaussian_epsilon(delta=bad, sigma=1.0, sensitivity=1.0),
        lambda: zcdp_to_approx_dp(rho=0.1, delta=bad),
    ):
        with pytest.raises(ParameterError) as info:
            make()
        assert info.value.name == "delta"


@given(k=hs.one_of(hs.integers(max_value=1), hs.just(2.5), hs.just("3")))
@settings(max_examples=20, deadline=None)
def test_invalid_k_and_bits_rejected(k: Any) -> None:
    with pytest.raises(ParameterError):
        GeneralizedRandomizedResponse(epsilon=1.0, k=k)
    with pytest.raises(ParameterError):
        SubtractiveDithering(bit_depth=k)
    with pytest.raises(ParameterError):
        LaplaceMechanism(epsilon=1.0, sensitivity=1.0, resolution_bits=k)


def test_invalid_data_rejected() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(DataError):
        RandomizedResponse(epsilon=1.0).randomize([0, 2], rng)
    with pytest.raises(DataError):
        GeneralizedRandomizedResponse(epsilon=1.0, k=3).randomize([0, 3], rng)
    with pytest.raises(DataError):
        Harmony(epsilon=1.0).randomize([1.5], rng)
    with pytest.raises(DataError):
        PiecewiseMechanism(epsilon=1.0).randomize([-1.01], rng)
    with pytest.raises(DataError):
        SubtractiveDithering().randomize([1.2], rng)
    with pytest.raises(ParameterError):
        SubtractiveDithering(low=1.0, high=1.0)


def test_vector_gaussian_grid_path_accounts_for_snapping() -> None:
    from fedstats.privacy.analysis import approx_dp_to_zcdp

    d = 64
    sens = math.sqrt(d) / 1000  # mean of 1000 vectors in [0, 1]^64
    g = GaussianMechanism(epsilon=1.0, delta=1e-6, sensitivity=sens, dimension=d)
    loss = g.privacy_loss()
    assert loss.epsilon <= 1.0 + 1e-12 and loss.delta == 1e-6
    assert g.integer_sensitivity == pytest.approx(sens / g.grid + 8.0)
    # zCDP calibration costs some noise against the exact float calibration, but not much
    flt = GaussianMechanism(
        epsilon=1.0, delta=1e-6, sensitivity=sens, dimension=d, resolution_bits=None
    )
    assert flt.sigma < g.sigma < 1.4 * flt.sigma
    rho = approx_dp_to_zcdp(epsilon=1.0, delta=1e-6)
    assert zcdp_to_approx_dp(rho=rho, delta=1e-6) <= 1.0
    assert zcdp_to_approx_dp(rho=rho * (1 + 1e-9), delta=1e-6) > 1.0 - 1e-9
    rng = np.random.default_rng(3)
    x = np.full((20_000, d), 0.25)
    y = g.randomize(x, rng)
    assert y.shape == x.shape and np.array_equal(y / g.grid, np.round(y / g.grid))
    assert abs(float(y.var()) / g.variance() - 1) <= 6 * math.sqrt(2 / y.size)
    with pytest.raises(DataError):
        g.randomize(np.zeros((3, d + 1)), rng)


def test_the_zcdp_calibration_is_remembered_with_the_value_it_computes() -> None:
    """approx_dp_to_zcdp remembers its bisection (a pure function of the validated floats): the same
    value as computed afresh, for Python and numpy floats alike; invalid budgets still refuse."""
    from fedstats.privacy.analysis import approx_dp_to_zcdp
    from fedstats.privacy.analysis.zcdp import _approx_dp_to_zcdp

    for eps, delta in ((4.0, 1e-5), (2.0, 1e-5), (0.3, 1e-9), (1e-3, 0.5)):
        fresh = _approx_dp_to_zcdp.__wrapped__(eps, delta)  # the bisection itself, not remembered
        hits = _approx_dp_to_zcdp.cache_info().hits
        assert approx_dp_to_zcdp(epsilon=eps, delta=delta) == fresh
        assert approx_dp_to_zcdp(epsilon=np.float64(eps), delta=np.float64(delta)) == fresh
        assert _approx_dp_to_zcdp.cache_info().hits >= hits + 1  # the second call was remembered
        assert zcdp_to_approx_dp(rho=fresh, delta=delta) <= eps
    for bad in ({"epsilon": 0.0, "delta": 1e-5}, {"epsilon": 1.0, "delta": 1.0}):
        with pytest.raises(ParameterError):
            approx_dp_to_zcdp(**bad)


def test_grid_release_depends_only_on_the_snapped_integer() -> None:
    """Mironov 2012: on the grid path two inputs with the same grid point give bit-identical releases."""
    for mech in (
        LaplaceMechanism(epsilon=1.0, sensitivity=1.0, resolution_bits=8),
        GaussianMechanism(epsilon=1.0, delta=1e-6, sensitivity=1.0, resolution_bits=8),
    ):
        grid = mech.grid
        x = np.array([0.1, 0.1 + grid / 3, 0.1 - grid / 3])
        idx = snap_to_grid(x, grid)
        same = np.flatnonzero(idx == idx[0])
        assert same.size >= 2
        outs = [mech.randomize(np.full(1000, x[i]), np.random.default_rng(9)) for i in same]
        for o in outs[1:]:
            assert np.array_equal(o, outs[0])
    # the float path leaks: the same noise on different inputs gives different low-order bits
    flt = LaplaceMechanism(epsilon=1.0, sensitivity=1.0, resolution_bits=None)
    a = flt.randomize(np.full(1000, 0.1), np.random.default_rng(9))
    b = flt.randomize(np.full(1000, 0.1 + 1e-12), np.random.default_rng(9))
    assert not np.array_equal(a, b)


def test_piecewise_on_grid_is_unbiased_and_safe() -> None:
    m = PiecewiseMechanism(epsilon=1.0, resolution_bits=4)
    assert m.floating_point_safe and m.privacy_loss().epsilon == pytest.approx(1.0, rel=1e-12)
    rng = np.random.default_rng(12)
    y = m.randomize(np.full(N, 0.4), rng)
    k = y / m.grid
    assert np.array_equal(k, np.round(k))
    exact = PiecewiseMechanism(epsilon=1.0).variance(0.4)
    assert abs(y.mean() - 0.4) <= 6 * math.sqrt(m.variance(0.4) / N)
    # rounding adds between 0 and grid^2 / 4 to the variance
    se = 6 * math.sqrt(float(np.mean((y - y.mean()) ** 4)) / N)
    assert exact - se <= y.var() <= float(m.variance(0.4)) + se


@given(
    x=hs.lists(hs.floats(-100, 100), min_size=3, max_size=3),
    direction=hs.lists(hs.floats(-1, 1), min_size=3, max_size=3),
    sens=hs.floats(1e-2, 10),
)
@settings(max_examples=150, deadline=None)
def test_vector_snapping_sensitivities(x: list[float], direction: list[float], sens: float) -> None:
    a = np.array(x)
    v = np.array(direction)
    if float(np.abs(v).max()) < 1e-6:  # no direction to move in
        return
    lap = LaplaceMechanism(epsilon=1.0, sensitivity=sens, resolution_bits=6, dimension=3)
    b = a + v / np.abs(v).sum() * sens  # L1 distance exactly sens (up to rounding)
    diff = np.abs(snap_to_grid(b, lap.grid) - snap_to_grid(a, lap.grid)).sum()
    assert diff <= lap.integer_sensitivity
    g = GaussianMechanism(epsilon=1.0, delta=1e-6, sensitivity=sens, resolution_bits=6, dimension=3)
    b = a + v / np.linalg.norm(v) * sens
    diff2 = float(np.linalg.norm(snap_to_grid(b, g.grid) - snap_to_grid(a, g.grid)))
    assert diff2 <= g.integer_sensitivity * (1 + 1e-12)
