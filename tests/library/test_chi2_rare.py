"""FED-chi^2 with rare categories (issue 43): warnings naming them, --merge-below, the power at w = 0.1."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fedstats.analyses.chi2 import fed_chi2
from fedstats.analyses.chi2.client import record_tables
from fedstats.analyses.chi2.config import FedChi2Config
from fedstats.analyses.chi2.estimator import chi_square_statistic
from fedstats.analyses.chi2.rare import (
    effect_probabilities,
    merge_groups,
    merge_tables,
    rare_categories,
)
from fedstats.cli.app import app
from fedstats.errors import ParameterError
from fedstats.randomness import RandomSource

runner = CliRunner()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=5000), min_size=2, max_size=12),
    st.integers(min_value=0, max_value=3000),
)
def test_merge_groups_pools_the_small_ones_and_keeps_two_categories(
    counts: list[int], below: int
) -> None:
    v = np.asarray(counts, dtype=np.float64)
    g = merge_groups(v, below)
    k = int(g.max()) + 1
    assert sorted(set(g.tolist())) == list(range(k))  # onto [0, k)
    if k == v.size:
        return  # nothing merged: the identity
    assert k >= 2
    pooled = np.bincount(g, weights=v)
    assert (g[v < below] == k - 1).all()  # every small category is in the pool, which comes last
    assert (pooled[:-1] >= below).all()  # the others are at least the threshold
    if pooled[-1] >= below:  # absorbing stopped as soon as the pool reached the threshold
        absorbed = v[(g == k - 1) & (v >= below)]
        assert absorbed.size == 0 or pooled[-1] - absorbed.max() < below


def test_merge_groups_edges_and_bad_input() -> None:
    assert merge_groups([10, 20, 30], 0).tolist() == [0, 1, 2]
    assert merge_groups([10, 20, 30], 5).tolist() == [0, 1, 2]
    assert merge_groups([600, 16, 900], 500).tolist() == [1, 1, 0]  # one rare: joins the smallest
    assert merge_groups([10, 20, 30], 1000).tolist() == [0, 1, 2]  # one category would remain
    with pytest.raises(ParameterError, match="merge_below"):
        merge_groups([1, 2], -1)
    with pytest.raises(ParameterError, match="merge_below"):
        FedChi2Config(shape=(2, 2), merge_below=-3)
    t = np.arange(24).reshape(2, 3, 4)
    m = merge_tables(t, ([0, 1, 1], [0, 0, 1, 2]))
    assert m.shape == (2, 2, 3) and m.sum() == t.sum() and m[1, 1, 0] == t[1, 1:, :2].sum()


def test_effect_probabilities_keep_the_margins_and_have_effect_w() -> None:
    vx, vy = np.array([500.0, 300, 40]), np.array([100.0, 700, 400, 50])
    p1, w = effect_probabilities(vx, vy, 0.1)
    t = p1.reshape(3, 4)
    assert math.isclose(w, 0.1, rel_tol=1e-12)
    np.testing.assert_allclose(t.sum(axis=1), vx / vx.sum(), atol=1e-12)
    np.testing.assert_allclose(t.sum(axis=0), vy / vy.sum(), atol=1e-12)
    assert rare_categories(vx) == []  # 40 is not below 0.1 x the median 300
    assert [i for i, _, _ in rare_categories(vy)] == []
    assert [i for i, _, _ in rare_categories([900, 800, 16, 700])] == [2]


def _records(n: int, seed: int, rare: int) -> tuple[np.ndarray, float]:
    """A dependent 4 x 4 table of ``n`` one-record clients whose x category 3 has ``rare`` people."""
    rng = np.random.default_rng(seed)
    x = rng.choice(3, n, p=[0.45, 0.35, 0.2])  # category 2 is the smallest of the others
    y = (x + rng.integers(0, 3, n)) % 4
    x[:rare] = 3
    return record_tables(x, y, (4, 4)), float(n)


def test_a_rare_category_is_named_and_merging_restores_the_power() -> None:
    """One category of 12 people among 5,000 at epsilon 1: named; merging it gives the power back."""
    t, _ = _records(5000, 0, 12)
    labels = (["a", "b", "c", "tiny"], ["p", "q", "r", "s"])
    kw = {"epsilon": 1.0, "delta": 1e-6, "max_records": 1, "labels": labels}
    plain = fed_chi2(t, randomness=RandomSource(1), **kw)  # type: ignore[arg-type]
    assert any("rare categories of x: 'tiny'" in w for w in plain.warnings)
    assert plain.details["power"]["power"] < 0.5 and any("power is" in w for w in plain.warnings)
    assert plain.dof == 9 and "merged" not in plain.details
    merged = fed_chi2(t, randomness=RandomSource(1), merge_below=100, **kw)  # type: ignore[arg-type]
    assert merged.details["merged"] == {"x": [["c", "tiny"]], "y": []}
    assert any("'c' + 'tiny'" in w for w in merged.warnings)
    assert not any("rare categories" in w for w in merged.warnings)  # the rare one was merged
    assert merged.details["power"]["power"] > 0.9 and not any(
        "power is" in w for w in merged.warnings
    )
    assert merged.dof == 6  # 3 x 4
    exact, dof = chi_square_statistic(merge_tables(t.sum(axis=0), ([0, 1, 2, 2], [0, 1, 2, 3])))
    assert merged.exact_statistic == pytest.approx(exact) and dof == 6


def test_merging_without_dp_tests_the_merged_table() -> None:
    t, _ = _records(3000, 2, 30)
    res = fed_chi2(t, merge_below=200, encoding_size=400, randomness=RandomSource(4))
    assert res.details["merged"]["x"] == [["#2", "#3"]]
    exact, dof = chi_square_statistic(merge_tables(t.sum(axis=0), ([0, 1, 2, 2], [0, 1, 2, 3])))
    assert res.dof == dof == 6 and res.exact_statistic == pytest.approx(exact)
    # the sketch of the merged table: l = 400, relative SD sqrt(2 / 400) = 0.07
    assert abs(res.statistic / exact - 1) < 5 * math.sqrt(2 / 400)


@pytest.mark.slow  # 30 runs of fed_chi2 on 2,000 clients (10-24 s); fewer would leave no test at all
def test_the_reported_power_matches_the_rejection_rate() -> None:
    """The power at w = 0.1 is the rejection rate of the real protocol on tables drawn at that effect.

    30 runs of ``fed_chi2`` (3 x 3, 2,000 one-record clients, epsilon 1, B = 99) on tables drawn from
    :func:`effect_probabilities`: the mean reported power and the observed rejection rate agree within
    4 standard errors of their difference (300 runs of the same setting, /tmp script of the commit:
    rejection rate 0.333, mean reported power 0.333).
    """
    vx, vy = np.array([800.0, 700, 500]), np.array([900.0, 600, 500])
    p1, _ = effect_probabilities(vx, vy, 0.1)
    runs, rejected, power = 30, 0, []
    for r in range(runs):
        cells = np.random.default_rng(100 + r).choice(9, size=2000, p=p1)
        res = fed_chi2(
            record_tables(cells // 3, cells % 3, (3, 3)),
            epsilon=1.0,
            delta=1e-6,
            max_records=1,
            null_replicates=99,
            randomness=RandomSource(r),
        )
        rejected += bool(res.rejected)
        power.append(res.details["power"]["power"])
    p = float(np.mean(power))
    se = math.sqrt(p * (1 - p) / runs + np.var(power) / runs)
    assert 0.1 < p < 0.9  # a setting where the power is informative
    assert abs(rejected / runs - p) < 4 * se, (rejected / runs, p, se)


def test_cli_default_clients_warn_about_power_and_merge_below_reports() -> None:
    """``fedstats chi2`` with the default 100 clients (about 490 records each) has power ~ its size."""
    args = ["--seed", "1", "chi2", "adult", "--x", "sex", "--y", "race", "--epsilon", "1"]
    res = runner.invoke(app, [*args, "--delta", "1e-6", "--json", "--null-replicates", "99"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["details"]["power"]["power"] < 0.5
    assert any("power is" in w for w in d["details"]["warnings"]) and "power is" in res.stderr
    bad = runner.invoke(app, [*args, "--delta", "1e-6", "--merge-below", "-1"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --merge-below"), bad.stderr
    g = runner.invoke(app, ["chi2", "adult", "--x", "sex", "--y", "race", "--test", "g",
                            "--merge-below", "5"])  # fmt: skip
    assert g.exit_code == 2 and "--merge-below" in g.stderr
