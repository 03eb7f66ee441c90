"""Stable sampler against scipy's levy_stable, and the properties of the public stable projection."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.sparse
import scipy.stats

from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RandomSource
from fedstats.sketches.stable import StableProjection, sample_symmetric_stable

KS_ALPHA = 1e-6


def _gof_pvalue(x: np.ndarray, cdf: Callable[[np.ndarray], Any], bins: int = 40) -> float:
    """Chi-square goodness of fit on ``bins`` equiprobable (sample-quantile) bins.

    scipy's levy_stable cdf costs milliseconds per point, so it is evaluated only at the bin edges; with
    data-dependent equiprobable bins the statistic is still asymptotically chi-square (Moore 1971).
    """
    edges = np.quantile(x, np.linspace(0, 1, bins + 1)[1:-1])
    probs = np.diff(np.concatenate([[0.0], np.asarray(cdf(edges)), [1.0]]))
    counts = np.bincount(np.searchsorted(edges, x, side="right"), minlength=bins)
    stat = float(((counts - x.size * probs) ** 2 / (x.size * probs)).sum())
    return float(scipy.stats.chi2.sf(stat, bins - 1))


@pytest.mark.parametrize("alpha", [0.5, 0.95, 1.0, 1.05, 1.5, 2.0])
def test_sampler_matches_scipy(alpha: float) -> None:
    rng = np.random.default_rng(11)
    x = sample_symmetric_stable(alpha, 40000, rng)
    ref = scipy.stats.levy_stable(alpha, 0.0)
    assert _gof_pvalue(x, ref.cdf) > KS_ALPHA
    # and a wrong stability is detected
    assert _gof_pvalue(x, scipy.stats.levy_stable(alpha * 0.9, 0.0).cdf) < KS_ALPHA


def test_alpha_two_is_normal_with_variance_two() -> None:
    rng = np.random.default_rng(12)
    x = sample_symmetric_stable(2.0, 50000, rng)
    assert scipy.stats.kstest(x, scipy.stats.norm(0, math.sqrt(2)).cdf).pvalue > KS_ALPHA
    # and not N(0, 1): a wrong scale is detected
    assert scipy.stats.kstest(x, scipy.stats.norm(0, 1).cdf).pvalue < KS_ALPHA


def test_sampler_works_with_secure_generator() -> None:
    g = RandomSource().generator("x")
    x = sample_symmetric_stable(1.5, 2000, g)
    assert x.shape == (2000,) and np.isfinite(x).all()
    assert _gof_pvalue(x, scipy.stats.levy_stable(1.5, 0.0).cdf, bins=20) > KS_ALPHA


@pytest.mark.parametrize("alpha", [0.0, -1.0, 2.5, float("nan")])
def test_sampler_rejects_bad_alpha(alpha: float) -> None:
    with pytest.raises(ParameterError, match="alpha"):
        sample_symmetric_stable(alpha, 10, np.random.default_rng(0))


@pytest.mark.parametrize("alpha", [0.95, 2.0])
def test_projection_entries_are_stable(alpha: float) -> None:
    p = StableProjection(123, 40, alpha)
    x = p.columns(np.arange(1000)).ravel()
    cdf = scipy.stats.levy_stable(alpha, 0.0).cdf if alpha != 2 else scipy.stats.norm(0, 2**0.5).cdf
    assert _gof_pvalue(x, cdf) > KS_ALPHA


def test_projection_columns_are_counter_based() -> None:
    p = StableProjection(5, 8, 2.0)
    full = p.matrix(50)
    assert full.shape == (8, 50)
    # any subset of columns, in any order, reproduces the same entries
    cols = np.array([49, 3, 17])
    np.testing.assert_array_equal(p.columns(cols), full[:, cols].T)
    # a longer encoding extends a shorter one (first l rows do not depend on l)
    np.testing.assert_array_equal(
        StableProjection(5, 12, 2.0).columns(cols)[:, :8], p.columns(cols)
    )
    # another seed gives another matrix; neighbouring columns are uncorrelated
    assert not np.allclose(StableProjection(6, 8, 2.0).matrix(50), full)
    big = StableProjection(9, 200, 2.0).columns(np.arange(2))
    r = np.corrcoef(big[0], big[1])[0, 1]
    assert abs(r) < 6 / math.sqrt(200)


def test_projection_same_seed_couples_alphas() -> None:
    a = StableProjection(5, 400, 1.05).columns(np.arange(5)).ravel()
    b = StableProjection(5, 400, 0.95).columns(np.arange(5)).ravel()
    rho = scipy.stats.spearmanr(a, b)[0]
    assert rho > 0.95


def test_project_dense_sparse_and_cells_agree() -> None:
    rng = np.random.default_rng(3)
    x = rng.random((4, 30)) * (rng.random((4, 30)) < 0.2)
    p = StableProjection(77, 10, 2.0)
    dense = p.project(x)
    np.testing.assert_allclose(dense, x @ p.matrix(30).T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(p.project(scipy.sparse.csr_matrix(x)), dense, rtol=1e-12)
    k = int((x != 0).sum(axis=1).max())
    idx = np.zeros((4, k), dtype=np.int64)
    vals = np.zeros((4, k))
    for i in range(4):
        nz = np.flatnonzero(x[i])
        idx[i, : nz.size] = nz
        vals[i, : nz.size] = x[i, nz]
    np.testing.assert_allclose(p.project((idx, vals), m=30), dense, rtol=1e-12, atol=1e-12)


def test_project_streams_when_matrix_does_not_fit() -> None:
    m = 400_000  # l * m = 2e7 > MAX_DENSE_ENTRIES: streamed, never materialized
    p = StableProjection(1, 50, 2.0)
    with pytest.raises(ParameterError, match="encoding_size"):
        p.matrix(m)
    idx = np.array([5, 123_456, 399_999])
    vals = np.array([1.0, -2.0, 0.5])
    e = p.project((idx, vals), m=m)
    np.testing.assert_allclose(e[0], vals @ p.columns(idx), rtol=1e-12)


def test_project_rejects_bad_input() -> None:
    p = StableProjection(1, 4, 2.0)
    with pytest.raises(DataError):
        p.project(np.array([[1.0, np.nan]]))
    with pytest.raises(DataError):
        p.project((np.array([0, 7]), np.array([1.0, 1.0])), m=5)
    with pytest.raises(ParameterError, match="encoding_size"):
        StableProjection(1, 0, 2.0)
