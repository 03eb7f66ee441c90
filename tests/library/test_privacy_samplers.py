"""Every sampler and randomizer against its exact distribution: chi-square / KS at alpha = 1e-6."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import scipy.stats as st

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
)
from fedstats.randomness import RNG, SecureGenerator

ALPHA = 1e-6
N = 200_000


def generators() -> list[tuple[str, RNG]]:
    return [
        ("numpy", np.random.default_rng(20261120)),
        # secure: an AES-CTR keystream, with a fixed key so the test is deterministic
        ("secure", SecureGenerator(bytes(range(32)))),
    ]


def chi2_integer(
    samples: np.ndarray,
    cdf: Callable[[np.ndarray], np.ndarray],
    n_bins: int = 60,
    quantile: Callable[[np.ndarray], np.ndarray] | None = None,
) -> float:
    """Chi-square p-value of integer samples against an exact CDF, bins of about equal probability.

    Bin edges are integer quantiles (from ``quantile``, an approximate inverse CDF, or else by scanning the
    CDF over the samples' range); the bin probabilities are differences of the exact CDF at the edges.
    """
    targets = np.linspace(0, 1, n_bins + 1)[1:-1]
    if quantile is None:
        lo, hi = int(samples.min()), int(samples.max())
        grid = np.arange(lo - 1, hi + 1)
        edges = np.unique(grid[np.searchsorted(cdf(grid), targets)])
    else:
        edges = np.unique(np.floor(quantile(targets)).astype(np.int64))
    # bins: (-inf, e0], (e0, e1], ..., (e_last, inf)
    cdf_edges = cdf(edges)
    probs = np.diff(np.concatenate(([0.0], cdf_edges, [1.0])))
    counts = np.bincount(np.searchsorted(edges, samples, side="left"), minlength=edges.size + 1)
    keep = probs * samples.size >= 5
    assert keep.sum() >= 2
    # merge small bins into the neighbouring one (only tails can be small here)
    obs = counts[keep].astype(float)
    exp = probs[keep] * samples.size
    obs[-1] += counts[~keep].sum()
    exp[-1] += probs[~keep].sum() * samples.size
    return float(st.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def dlap_cdf(t: float) -> Callable[[np.ndarray], np.ndarray]:
    a = -1.0 / t
    q = math.exp(a)

    def cdf(k: np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=float)
        # P(Y <= k) = 1 - q^(k+1)/(1+q) for k >= 0, q^(-k)/(1+q) below (expm1/exp for large t)
        return np.where(
            k >= 0,
            -np.expm1(a * (k + 1)) + np.exp(a * (k + 1)) * (1 - 1 / (1 + q)),
            np.exp(a * -k) / (1 + q),
        )

    return cdf


def dlap_quantile(t: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda p: np.asarray(st.laplace(scale=t).ppf(p))


def dgauss_cdf(sigma2: float) -> Callable[[np.ndarray], np.ndarray]:
    sigma = math.sqrt(sigma2)
    if sigma > 1000:
        # Poisson summation: P(Y <= k) = Phi((k + 1/2)/sigma) up to exp(-2 pi^2 sigma^2), i.e. exactly here
        return lambda k: np.asarray(st.norm.cdf((np.asarray(k, dtype=float) + 0.5) / sigma))
    span = int(40 * sigma) + 40
    ks = np.arange(-span, span + 1)
    w = np.exp(-(ks.astype(float) ** 2) / (2 * sigma2))
    c = np.cumsum(w) / w.sum()

    def cdf(k: np.ndarray) -> np.ndarray:
        idx = np.clip(np.asarray(k) + span, -1, ks.size - 1)
        return np.where(idx < 0, 0.0, c[np.maximum(idx, 0)])

    return cdf


def dgauss_quantile(sigma2: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda p: np.asarray(st.norm(scale=math.sqrt(sigma2)).ppf(p))


@pytest.mark.parametrize("scale", [0.3, 1.0, 7.5, 1e4, 2.0**40])
def test_discrete_laplace_chi_square(scale: float) -> None:
    for name, rng in generators():
        x = sample_discrete_laplace(scale, N, rng)
        assert x.dtype == np.int64 and x.shape == (N,)
        assert chi2_integer(x, dlap_cdf(scale), quantile=dlap_quantile(scale)) > ALPHA, name


@pytest.mark.parametrize("sigma2", [0.09, 1.0, 20.0, 2.5e5, 2.0**80])
def test_discrete_gaussian_chi_square(sigma2: float) -> None:
    for name, rng in generators():
        x = sample_discrete_gaussian(sigma2, (N // 2, 2), rng)
        assert x.shape == (N // 2, 2)
        p = chi2_integer(x.ravel(), dgauss_cdf(sigma2), quantile=dgauss_quantile(sigma2))
        assert p > ALPHA, name


def test_discrete_laplace_wrong_scale_is_detected() -> None:
    x = sample_discrete_laplace(7.5, N, np.random.default_rng(1))
    assert chi2_integer(x, dlap_cdf(7.0)) < ALPHA


def test_float_laplace_and_gaussian_ks() -> None:
    for _, rng in generators():
        lap = LaplaceMechanism(epsilon=0.7, sensitivity=2.0, resolution_bits=None)
        y = lap.randomize(np.full(N, 0.25), rng)
        assert st.kstest(y, st.laplace(loc=0.25, scale=2.0 / 0.7).cdf).pvalue > ALPHA
        g = GaussianMechanism(epsilon=1.0, delta=1e-6, sensitivity=1.0, resolution_bits=None)
        y = g.randomize(np.full(N, -0.5), rng)
        assert st.kstest(y, st.norm(loc=-0.5, scale=g.sigma).cdf).pvalue > ALPHA


def test_grid_noise_is_the_discrete_distribution() -> None:
    for _, rng in generators():
        lap = LaplaceMechanism(epsilon=1.0, sensitivity=1.0, resolution_bits=3)
        y = lap.randomize(np.full(N, 0.3), rng)
        k = y / lap.grid
        assert np.array_equal(k, np.round(k))  # released on the grid exactly
        snapped = math.floor(0.3 / lap.grid + 0.5)
        noise = (k - snapped).astype(np.int64)
        assert chi2_integer(noise, dlap_cdf(lap.integer_scale)) > ALPHA
        g = GaussianMechanism(epsilon=1.0, delta=1e-5, sensitivity=1.0, resolution_bits=2)
        y = g.randomize(np.full(N, 0.3), rng)
        noise = (y / g.grid - math.floor(0.3 / g.grid + 0.5)).astype(np.int64)
        assert chi2_integer(noise, dgauss_cdf(g.integer_sigma**2)) > ALPHA


def binary_chi2(hits: int, n: int, p: float) -> float:
    return float(st.chisquare([hits, n - hits], [n * p, n * (1 - p)]).pvalue)


@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0])
def test_randomized_response_chi_square(eps: float) -> None:
    p = math.exp(eps) / (1 + math.exp(eps))
    for _, rng in generators():
        rr = RandomizedResponse(epsilon=eps)
        bits = np.repeat(np.array([0, 1], dtype=np.uint8), N // 2)
        y = rr.randomize(bits, rng)
        assert binary_chi2(int(y[: N // 2].sum()), N // 2, 1 - p) > ALPHA
        assert binary_chi2(int(y[N // 2 :].sum()), N // 2, p) > ALPHA


@pytest.mark.parametrize(("eps", "k"), [(0.5, 2), (1.0, 5), (3.0, 17)])
def test_generalized_randomized_response_chi_square(eps: float, k: int) -> None:
    p = math.exp(eps) / (math.exp(eps) + k - 1)
    q = 1 / (math.exp(eps) + k - 1)
    for _, rng in generators():
        grr = GeneralizedRandomizedResponse(epsilon=eps, k=k)
        true = k // 2
        y = grr.randomize(np.full(N, true), rng)
        expected = np.full(k, q * N)
        expected[true] = p * N
        assert st.chisquare(np.bincount(y, minlength=k), expected).pvalue > ALPHA


@pytest.mark.parametrize("cls", [Harmony, DuchiMechanism])
def test_harmony_and_duchi_chi_square(cls: type[Harmony]) -> None:
    eps = 0.8
    c = (math.exp(eps) + 1) / (math.exp(eps) - 1)
    for _, rng in generators():
        m = cls(epsilon=eps)
        for t in (-1.0, -0.3, 0.0, 0.9):
            y = m.randomize(np.full(N // 4, t), rng)
            assert np.unique(y).size <= 2 and np.allclose(np.abs(y), c, rtol=1e-14, atol=0)
            # Wang et al. 2019 Alg. 1: P(+C) = (e^eps - 1) t / (2 e^eps + 2) + 1/2
            p_plus = (math.exp(eps) - 1) * t / (2 * math.exp(eps) + 2) + 0.5
            assert binary_chi2(int((y > 0).sum()), y.size, p_plus) > ALPHA


def piecewise_cdf(eps: float, t: float) -> Callable[[np.ndarray], np.ndarray]:
    """CDF of the Piecewise mechanism from Wang et al. 2019, Eq. (4) (written independently)."""
    h = math.exp(eps / 2)
    big_c = (h + 1) / (h - 1)
    left = (big_c + 1) / 2 * t - (big_c - 1) / 2
    right = left + big_c - 1
    p = (math.exp(eps) - h) / (2 * h + 2)
    low = p / math.exp(eps)

    def cdf(y: np.ndarray) -> np.ndarray:
        y = np.clip(y, -big_c, big_c)
        return (
            low * (np.minimum(y, left) + big_c)
            + p * np.clip(y - left, 0, right - left)
            + low * np.clip(y - right, 0, None)
        )

    assert abs(float(cdf(np.array([big_c]))[0]) - 1) < 1e-12
    return cdf


@pytest.mark.parametrize("eps", [0.5, 2.0, 6.0])
def test_piecewise_ks(eps: float) -> None:
    for _, rng in generators():
        m = PiecewiseMechanism(epsilon=eps)
        for t in (-1.0, 0.2, 1.0):
            y = m.randomize(np.full(N // 4, t), rng)
            assert st.kstest(y, piecewise_cdf(eps, t)).pvalue > ALPHA


@pytest.mark.parametrize("bit_depth", [1, 3])
def test_dithering_error_is_uniform(bit_depth: int) -> None:
    for _, rng in generators():
        d = SubtractiveDithering(bit_depth=bit_depth, low=-2.0, high=6.0)
        x = np.linspace(-2.0, 6.0, N)
        err = d.randomize(x, rng) - x
        half = 8.0 / (2 * d.levels)
        assert st.kstest(err, st.uniform(loc=-half, scale=2 * half).cdf).pvalue > ALPHA
        h = d.sample_dither(N, rng)
        q = d.encode(x, h)
        assert q.min() >= 0 and q.max() <= d.levels


def test_secure_generator_uniforms_after_in_place_keystream() -> None:
    g = SecureGenerator(bytes(range(1, 33)))
    raw = g.random_raw(1000)
    raw[0] = 0  # writable, fresh array
    u = np.asarray(g.random(N))
    assert u.min() >= 0 and u.max() < 1
    assert np.all(u * 2.0**53 == np.floor(u * 2.0**53))  # 53-bit grid
    assert st.kstest(u, st.uniform.cdf).pvalue > ALPHA
