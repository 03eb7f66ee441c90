"""Partitioners: exact (every count preserved), reproducible, and distributed as documented."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats import datasets as D
from fedstats.datasets import partition as P
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RandomSource

ALPHA = 1e-6  # false-failure rate of the statistical tests


# --------------------------------------------------------------------------- row partitioners


def test_one_per_client() -> None:
    np.testing.assert_array_equal(D.one_per_client(5), np.arange(5))
    with pytest.raises(ParameterError, match="n_rows"):
        D.one_per_client(0)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), k_frac=st.floats(0, 1), seed=st.integers(0, 2**32))
def test_iid_partition_sizes_differ_by_at_most_one(n: int, k_frac: float, seed: int) -> None:
    k = 1 + int(k_frac * (n - 1))
    a = D.iid_partition(n, k, rng=np.random.default_rng(seed))
    assert a.shape == (n,) and a.dtype == np.int64
    sizes = np.bincount(a, minlength=k)
    assert sizes.size == k and sizes.sum() == n
    assert sizes.max() - sizes.min() <= 1 and sizes.min() >= 1
    parts = D.client_indices(a, k)
    assert sorted(np.concatenate(parts).tolist()) == list(range(n))


def test_iid_partition_is_keyed_by_the_randomness() -> None:
    a = D.iid_partition(1000, 10, rng=RandomSource(7))
    b = D.iid_partition(1000, 10, rng=RandomSource(7))
    c = D.iid_partition(1000, 10, rng=RandomSource(8))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    s = D.iid_partition(1000, 10, rng=RandomSource())  # the secure default works too
    assert np.bincount(s).tolist() == [100] * 10
    with pytest.raises(ParameterError, match="n_clients"):
        D.iid_partition(5, 6, rng=RandomSource(1))


def test_iid_partition_is_uniform_over_clients() -> None:
    # each row lands on each of 4 clients with probability 1/4
    gen = np.random.default_rng(11)
    counts = np.zeros((8, 4))
    for _ in range(4000):
        counts[np.arange(8), D.iid_partition(8, 4, rng=gen)] += 1
    stat, p = scipy.stats.chisquare(counts.ravel())
    assert p > ALPHA, stat


@settings(max_examples=80, deadline=None)
@given(
    total=st.integers(0, 10**6),
    w=st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=12).filter(
        lambda v: sum(v) > 0
    ),
)
def test_allocate_counts_is_exact_and_within_one_of_the_quota(total: int, w: list[float]) -> None:
    counts = D.allocate_counts(total, w)
    assert counts.sum() == total and (counts >= 0).all()
    quota = total * np.asarray(w) / sum(w)
    assert np.all(np.abs(counts - quota) < 1 + 1e-9)


def test_parse_label_ratios() -> None:
    r = D.parse_label_ratios("91:1:1:1:1:1:1:1:1:1")
    assert r.tolist() == [91.0] + [1.0] * 9
    assert D.parse_label_ratios([99, 1]).tolist() == [99.0, 1.0]
    for bad in ("", "1:x", "1:-1", "0:0", "nan:1"):
        with pytest.raises(ParameterError, match="ratios"):
            D.parse_label_ratios(bad)


def test_label_ratio_sample_follows_paper_000_design() -> None:
    labels = np.repeat(np.arange(10), 6000)  # like Fashion-MNIST train: 6,000 per class
    rng = np.random.default_rng(3)
    labels = rng.permutation(labels)
    idx = D.label_ratio_sample(labels, "91:1:1:1:1:1:1:1:1:1", fraction=0.02, rng=rng)
    # 2% of 60,000 = 1,200 = 91 parts of 1,092 and 9 parts of 12
    assert idx.size == 1200 and np.unique(idx).size == 1200
    assert np.all(np.diff(idx) > 0)
    assert np.bincount(labels[idx]).tolist() == [1092] + [12] * 9
    idx = D.label_ratio_sample(labels, "1:1:1:1:1:1:1:1:1:1", size=1200, rng=rng)
    assert np.bincount(labels[idx]).tolist() == [120] * 10
    # ratio for an explicit label order: label 7 gets the 99 parts
    two = np.array([3] * 500 + [7] * 500)
    idx = D.label_ratio_sample(two, "99:1", size=100, label_order=[7, 3], rng=rng)
    assert (two[idx] == 7).sum() == 99 and (two[idx] == 3).sum() == 1


@settings(max_examples=50, deadline=None)
@given(
    per_label=st.lists(st.integers(1, 60), min_size=1, max_size=6),
    weights=st.lists(st.integers(0, 9), min_size=6, max_size=6),
    size_frac=st.floats(0.01, 1.0),
    seed=st.integers(0, 2**32),
)
def test_label_ratio_sample_counts_are_exact(
    per_label: list[int], weights: list[int], size_frac: float, seed: int
) -> None:
    w = np.asarray(weights[: len(per_label)], dtype=float)
    if w.sum() == 0:
        w[0] = 1.0
    labels = np.random.default_rng(seed).permutation(
        np.repeat(np.arange(len(per_label)), per_label)
    )
    # largest feasible size so that no label runs short: bounded by n_k / share_k
    share = w / w.sum()
    feasible = int(min(n / s for n, s in zip(per_label, share, strict=True) if s > 0))
    size = max(1, min(labels.size, int(size_frac * feasible)))
    want = D.allocate_counts(size, w)
    if np.any(want > np.asarray(per_label)):
        return  # rounding pushed one label over its supply; covered by the error test
    idx = D.label_ratio_sample(labels, w.tolist(), size=size, rng=np.random.default_rng(seed))
    assert idx.size == size and np.unique(idx).size == size
    np.testing.assert_array_equal(np.bincount(labels[idx], minlength=len(per_label)), want)


def test_label_ratio_sample_errors() -> None:
    labels = np.array([0] * 10 + [1] * 10)
    rng = np.random.default_rng(0)
    with pytest.raises(DataError, match="label 0"):
        D.label_ratio_sample(labels, "9:1", size=20, rng=rng)
    with pytest.raises(ParameterError, match="ratios"):
        D.label_ratio_sample(labels, "1:1:1", size=4, rng=rng)
    with pytest.raises(ParameterError):
        D.label_ratio_sample(labels, "1:1", rng=rng)
    with pytest.raises(ParameterError):
        D.label_ratio_sample(labels, "1:1", size=4, fraction=0.1, rng=rng)
    with pytest.raises(ParameterError, match="label_order"):
        D.label_ratio_sample(labels, "1:1", size=4, label_order=[0, 5], rng=rng)


def test_label_ratio_sample_is_uniform_within_labels() -> None:
    labels = np.array([0] * 10 + [1] * 10)
    gen = np.random.default_rng(5)
    hits = np.zeros(20)
    reps = 6000
    for _ in range(reps):
        hits[D.label_ratio_sample(labels, "1:1", size=4, rng=gen)] += 1
    # every row is picked with probability 2/10; 6 standard errors
    se = np.sqrt(reps * 0.2 * 0.8)
    assert np.all(np.abs(hits - reps * 0.2) < 6 * se)


# --------------------------------------------------------------------------- Dirichlet


@pytest.mark.parametrize("shape", [0.05, 0.3, 1.0, 5.5])
@pytest.mark.parametrize("secure", [False, True])
def test_gamma_sampler_matches_scipy(shape: float, secure: bool) -> None:
    rs = RandomSource(None if secure else 123)
    logs = P._log_standard_gamma(rs.generator("gamma"), shape, 20000)
    res = scipy.stats.kstest(logs, lambda x: scipy.stats.gamma.cdf(np.exp(x), shape))
    assert res.pvalue > ALPHA, res


def test_dirichlet_proportions_marginal_is_beta() -> None:
    alpha, k = 0.5, 4
    p = D.dirichlet_proportions(alpha, 5000, k, rng=np.random.default_rng(9))
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-12)
    res = scipy.stats.kstest(p[:, 0], scipy.stats.beta(alpha, (k - 1) * alpha).cdf)
    assert res.pvalue > ALPHA, res
    tiny = D.dirichlet_proportions(0.001, 100, 10, rng=np.random.default_rng(9))
    assert np.all(np.isfinite(tiny)) and np.allclose(tiny.sum(axis=1), 1.0)


@settings(max_examples=40, deadline=None)
@given(
    labels=st.lists(st.integers(0, 5), min_size=1, max_size=300),
    k=st.integers(1, 20),
    alpha=st.floats(0.01, 100),
    seed=st.integers(0, 2**32),
)
def test_dirichlet_partition_assigns_every_row_once(
    labels: list[int], k: int, alpha: float, seed: int
) -> None:
    y = np.asarray(labels)
    a = D.dirichlet_partition(y, k, alpha, rng=np.random.default_rng(seed))
    assert a.shape == y.shape and a.dtype == np.int64
    assert a.min() >= 0 and a.max() < k
    # per (client, label) counts add back up to each label's count exactly
    table = np.zeros((k, y.max() + 1), dtype=np.int64)
    np.add.at(table, (a, y), 1)
    np.testing.assert_array_equal(table.sum(axis=0), np.bincount(y))


def test_dirichlet_partition_skew_follows_alpha_and_min_size() -> None:
    y = np.repeat(np.arange(10), 1000)

    def max_label_share(alpha: float) -> float:
        a = D.dirichlet_partition(y, 20, alpha, rng=RandomSource(4))
        t = np.zeros((20, 10))
        np.add.at(t, (a, y), 1)
        share = t.max(axis=1) / np.maximum(t.sum(axis=1), 1)
        return float(share.mean())

    assert max_label_share(0.05) > 0.7  # nearly one label per client
    assert max_label_share(1000.0) < 0.2  # nearly IID: ~0.1 per label
    a = D.dirichlet_partition(y, 20, 0.5, rng=RandomSource(4), min_size=100)
    assert np.bincount(a, minlength=20).min() >= 100
    with pytest.raises(DataError, match="min_size"):
        D.dirichlet_partition(y[:40], 20, 0.01, rng=RandomSource(4), min_size=2, max_tries=2)
    with pytest.raises(ParameterError, match="alpha"):
        D.dirichlet_partition(y, 20, 0.0, rng=RandomSource(4))


# --------------------------------------------------------------------------- contingency tables


@settings(max_examples=60, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 6), st.integers(1, 6)),
    k=st.integers(1, 30),
    big=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_split_contingency_table_sums_exactly(
    shape: tuple[int, int], k: int, big: bool, seed: int
) -> None:
    gen = np.random.default_rng(seed)
    table = gen.integers(0, 2**40 if big else 20, size=shape)
    parts = D.split_contingency_table(table, k, rng=gen)
    assert parts.shape == (k, *shape) and parts.dtype == np.int64
    assert (parts >= 0).all()
    np.testing.assert_array_equal(parts.sum(axis=0), table)


def test_split_contingency_table_cut_points_are_uniform() -> None:
    # 2 clients: client 0's share of a count c is uniform on {0, ..., c}
    c = 6
    parts = D.split_contingency_table(np.full((100, 100), c), 2, rng=np.random.default_rng(1))
    obs = np.bincount(parts[0].ravel(), minlength=c + 1)
    assert scipy.stats.chisquare(obs).pvalue > ALPHA
    # 3 clients: client 0 gets the smaller of two uniform cuts, P(min = m) = ((c+1-m)^2-(c-m)^2)/(c+1)^2
    parts = D.split_contingency_table(np.full((100, 100), c), 3, rng=RandomSource(2))
    obs = np.bincount(parts[0].ravel(), minlength=c + 1)
    m = np.arange(c + 1)
    expected = ((c + 1 - m) ** 2 - (c - m) ** 2) / (c + 1) ** 2 * parts[0].size
    assert scipy.stats.chisquare(obs, expected).pvalue > ALPHA


def test_split_contingency_table_bad_input() -> None:
    rng = np.random.default_rng(0)
    for bad, match in (
        ([[1, -1]], "negative"),
        ([[1.5, 2.0]], "integer"),
        ([[np.nan, 1.0]], "NaN"),
        (np.zeros((0, 3)), "empty"),
    ):
        with pytest.raises(DataError, match=match):
            D.split_contingency_table(bad, 3, rng=rng)
    with pytest.raises(ParameterError, match="n_clients"):
        D.split_contingency_table([[1, 2]], 0, rng=rng)
    assert D.split_contingency_table([[1, 2]], 1, rng=rng).tolist() == [[[1, 2]]]


def test_contingency_table_counts() -> None:
    df = pd.DataFrame({"x": ["b", "a", "b", "b", "?"], "y": [1, 2, 1, 2, 1]})
    ct = D.contingency_table(df, "x", "y")
    assert ct.x_labels == ("?", "a", "b") and ct.y_labels == (1, 2)
    assert ct.counts.tolist() == [[1, 0], [0, 1], [2, 1]]
    counts, xl, yl = D.contingency_table(df, "x", "y", x_categories=["b", "a", "?", "z"])
    assert yl == (1, 2)
    assert xl == ("b", "a", "?", "z") and counts.tolist() == [[2, 1], [0, 1], [1, 0], [0, 0]]
    with pytest.raises(DataError, match="missing column 'q'"):
        D.contingency_table(df, "x", "q")
    with pytest.raises(DataError, match="missing"):
        D.contingency_table(df.assign(y=[1.0, None, 2.0, 1.0, 1.0]), "x", "y")
    with pytest.raises(DataError, match="not among"):
        D.contingency_table(df, "x", "y", x_categories=["a", "b"])
    with pytest.raises(DataError):
        D.contingency_table(df.iloc[:0], "x", "y")


def test_contingency_tables_by_client_sum_to_the_global_table(shared_data: Path) -> None:
    adult = D.load_adult("train", shared_data)
    ct = D.contingency_table(adult, "occupation", "native_country")
    # data README: 15 occupations and 42 countries, "?" kept as a category in both
    assert ct.counts.shape == (15, 42) and ct.counts.sum() == 32561
    assert "?" in ct.x_labels and "?" in ct.y_labels
    assign = D.iid_partition(len(adult), 100, rng=RandomSource(1))
    tables, xl, yl = D.contingency_tables_by_client(
        adult, "occupation", "native_country", assign, 100
    )
    assert tables.shape == (100, 15, 42) and (xl, yl) == (ct.x_labels, ct.y_labels)
    np.testing.assert_array_equal(tables.sum(axis=0), ct.counts)
    np.testing.assert_array_equal(tables.sum(axis=(1, 2)), np.bincount(assign))
    split = D.split_contingency_table(ct.counts, 100, rng=RandomSource(1))
    np.testing.assert_array_equal(split.sum(axis=0), ct.counts)


def test_client_indices_and_the_secure_generator() -> None:
    parts = D.client_indices(np.array([2, 0, 2]), 4)
    assert [p.tolist() for p in parts] == [[1], [], [0, 2], []]
    with pytest.raises(ParameterError, match="n_clients"):
        D.client_indices(np.array([0]), 0)
    with pytest.raises(DataError, match="outside"):
        D.client_indices(np.array([0, 3]), 2)
    secure = RandomSource()  # AES-CTR generator: only its documented subset of methods is used
    y = np.repeat(np.arange(4), 50)
    assert np.bincount(D.dirichlet_partition(y, 7, 0.3, rng=secure), minlength=7).sum() == 200
    assert np.bincount(y[D.label_ratio_sample(y, "5:1:1:1", size=40, rng=secure)]).tolist() == [
        25,
        5,
        5,
        5,
    ]
    table = np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(
        D.split_contingency_table(table, 9, rng=secure).sum(axis=0), table
    )
    with pytest.raises(ParameterError, match="rng"):
        D.iid_partition(10, 2, rng=123)  # type: ignore[arg-type]
