"""Chi-square feature selection: exact path against scipy/sklearn; federated path's distribution."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
import scipy.stats
from sklearn.feature_selection import chi2 as sklearn_chi2

from fedstats.analyses.feature_selection import (
    batch_decode,
    chi2_scores,
    chi2_scores_from_tables,
    federated_chi2_scores,
    selection_overlap,
    term_class_counts,
    top_k,
)
from fedstats.errors import DataError, ParameterError
from fedstats.sketches.decoders import geometric_mean_estimator, mean_of_squares_estimator


def _corpus(rng: np.random.Generator, n_docs: int = 600, n_terms: int = 80, c: int = 4):
    y = rng.integers(0, c, n_docs)
    rate = rng.uniform(0.02, 0.4, (c, n_terms))
    rate[:, :10] = rate[0, :10]  # first 10 terms independent of the class
    x = (rng.random((n_docs, n_terms)) < rate[y]).astype(np.int64)
    x[:, 5] = 0  # a term in no document
    return scipy.sparse.csr_matrix(x), y


def test_exact_scores_match_scipy_and_sklearn() -> None:
    rng = np.random.default_rng(5)
    x, y = _corpus(rng)
    scores = chi2_scores(x, y)
    dense = x.toarray()
    for t in range(x.shape[1]):
        present = np.bincount(y[dense[:, t] == 1], minlength=4)
        table = np.stack([present, np.bincount(y, minlength=4) - present])
        if t == 5:
            assert scores[t] == 0.0
            continue
        ref = scipy.stats.chi2_contingency(table, correction=False)[0]
        assert scores[t] == pytest.approx(ref, rel=1e-10)
    # sklearn's chi2 is the "present" row only; the "absent" row adds (O-E)^2/(N_c - E_c) per class
    sk, _ = sklearn_chi2(x, y)
    present, totals = term_class_counts(x, y)
    e = present.sum(axis=1, keepdims=True) * totals[None, :] / totals.sum()
    absent_part = np.where(
        totals - e > 0, (present - e) ** 2 / np.where(totals - e > 0, totals - e, 1), 0
    ).sum(axis=1)
    ok = np.arange(x.shape[1]) != 5
    np.testing.assert_allclose(scores[ok], (sk + absent_part)[ok], rtol=1e-9)


def test_tables_helper_and_top_k() -> None:
    t = np.array([[[10, 20], [30, 40]], [[5, 0], [0, 5]], [[3, 3], [0, 0]]])
    s = chi2_scores_from_tables(t)
    assert s[0] == pytest.approx(scipy.stats.chi2_contingency(t[0], correction=False)[0])
    assert s[1] == pytest.approx(10.0)
    assert s[2] == 0.0  # an empty row: no evidence
    assert top_k([1.0, 3.0, 3.0, 2.0], 2).tolist() == [1, 2]
    assert top_k([5.0, 5.0, 5.0], 2).tolist() == [0, 1]
    assert selection_overlap([1, 2, 3, 4], [2, 4, 9, 10]) == 0.5
    with pytest.raises(ParameterError):
        top_k([1.0], 2)


def test_batch_decode_equals_sketch_decoders() -> None:
    rng = np.random.default_rng(8)
    e = rng.normal(0, 3, (5, 17))
    mos = batch_decode(e, "mean-of-squares")
    geo = batch_decode(e, "geometric")
    for i in range(5):
        assert mos[i] == pytest.approx(mean_of_squares_estimator(e[i]).estimate, rel=1e-12)
        assert geo[i] == pytest.approx(geometric_mean_estimator(e[i], 2.0).estimate, rel=1e-12)
    with pytest.raises(ParameterError):
        batch_decode(e[:, :1])


def test_federated_without_dropout_is_unbiased_for_exact() -> None:
    """Mean-of-squares: F_hat / F is chi^2_l / l exactly, for every term (no dropout)."""
    rng = np.random.default_rng(9)
    x, y = _corpus(rng, n_docs=800, n_terms=60)
    owner = rng.integers(0, 20, x.shape[0])
    ell = 40
    ratios = []
    for rep in range(30):
        f = federated_chi2_scores(
            x, y, owner, n_clients=20, encoding_size=ell, randomness=np.random.default_rng(rep)
        )
        ok = f.exact > 0
        ratios.append(f.statistic[ok] / f.exact[ok])
    r = np.concatenate(ratios)
    # r ~ chi2_l / l: mean 1, variance 2 / l
    assert abs(r.mean() - 1.0) < 6 * np.sqrt(2 / ell / r.size)
    assert scipy.stats.kstest(r * ell, scipy.stats.chi2(ell).cdf).pvalue > 1e-6


def test_projection_route_matches_distribution_route() -> None:
    rng = np.random.default_rng(10)
    x, y = _corpus(rng, n_docs=500, n_terms=40)
    owner = rng.integers(0, 10, x.shape[0])
    a, b = [], []
    for rep in range(12):
        for method, out in (("distribution", a), ("projection", b)):
            f = federated_chi2_scores(
                x,
                y,
                owner,
                encoding_size=20,
                dropout=0.2,
                method=method,
                randomness=np.random.default_rng(100 + rep),
            )
            out.append(f.statistic)
    # same dropout draw (same seed) -> same u; compare the two routes' distributions per term
    sa, sb = np.array(a), np.array(b)
    z = (sa.mean(0) - sb.mean(0)) / np.sqrt((sa.var(0, ddof=1) + sb.var(0, ddof=1)) / 12 + 1e-300)
    assert np.abs(z).max() < 6
    assert scipy.stats.ks_2samp((sa / sa.mean(0)).ravel(), (sb / sb.mean(0)).ravel()).pvalue > 1e-6


def test_dropout_and_bad_input() -> None:
    rng = np.random.default_rng(12)
    x, y = _corpus(rng, n_docs=200, n_terms=10)
    owner = np.arange(200) % 10
    f = federated_chi2_scores(x, y, owner, dropout=0.3, randomness=np.random.default_rng(0))
    assert f.n_round2_clients == 7 and f.n_clients == 10
    with pytest.raises(ParameterError):
        federated_chi2_scores(x, y, owner, encoding_size=1, randomness=np.random.default_rng(0))
    with pytest.raises(ParameterError):
        federated_chi2_scores(x, y, owner, dropout=1.0, randomness=np.random.default_rng(0))
    with pytest.raises(DataError):
        federated_chi2_scores(x, y[:-1], owner, randomness=np.random.default_rng(0))
    with pytest.raises(DataError):
        chi2_scores(-x, y)
