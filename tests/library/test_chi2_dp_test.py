"""FED-chi^2 with central DP: the decision comes from the null distribution of the released statistic.

Under independence the rejection rate at level 0.05 stays within 3 binomial standard errors of 0.05 (z = 3,
so a correct test fails this bound with probability about 1e-3 per cell), and the p-values pass a KS test
of uniformity at threshold 1e-3; under strong dependence the test keeps its power; every noise scale is
rounded up (the realised zCDP loss is at most its share, as exact rationals). Most runs go through the fast
path (:func:`simulate_fed_chi2`, the same release and p-value code as the protocol); a few go end to end
through :func:`fed_chi2` and the CLI.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fedstats.analyses.chi2 import fed_chi2, plan_chi2_privacy, simulate_fed_chi2
from fedstats.analyses.chi2 import privacy as chi2_privacy
from fedstats.analyses.chi2.null import mc_p_value
from fedstats.cli.app import app
from fedstats.datasets import contingency_table, load_adult
from fedstats.privacy.analysis import zcdp_to_approx_dp
from fedstats.randomness import RandomSource

LEVEL = 0.05
RUNS = 400
B = 99  # null replicates per run in the Monte Carlo tests (the default is 999)


def _bound(runs: int) -> float:
    return LEVEL + 3.0 * math.sqrt(LEVEL * (1 - LEVEL) / runs)


def _independent_runs(eps: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """p-values and decisions of RUNS fresh independent 3 x 4 tables (1,000 records, 1,000 clients)."""
    rng = np.random.default_rng(seed)
    p = np.outer([0.5, 0.3, 0.2], [0.4, 0.3, 0.2, 0.1]).ravel()
    ps, rej = [], []
    for r in range(RUNS):
        table = rng.multinomial(1000, p).reshape(3, 4)
        res = simulate_fed_chi2(
            table,
            1000,
            epsilon=eps,
            delta=1e-6,
            max_records=1,
            null_replicates=B,
            randomness=RandomSource(seed * 10_000 + r),
        )
        ps.append(res.p_value)
        rej.append(res.rejected)
    return np.array(ps), np.array(rej)


# the noisiest and the least noisy epsilon in make test-fast; the one between them (8-11 s) in make test
@pytest.mark.parametrize("eps", [0.5, pytest.param(2.0, marks=pytest.mark.slow), 8.0])
def test_size_and_uniformity_under_independence(eps: float) -> None:
    ps, rej = _independent_runs(eps, int(eps * 10))
    assert rej.mean() <= _bound(RUNS), rej.mean()
    assert (rej == (ps <= LEVEL)).all()
    # (1 + #)/(B + 1) lives on a grid of 1/(B + 1): a KS distance of at most 0.01 from that alone
    assert scipy.stats.kstest(ps, "uniform").pvalue > 1e-3
    assert (ps == 1.0).mean() < 0.05  # no atom at 1 (the old p_value_sketch: 36-57% of runs)


@pytest.mark.slow  # 400 runs (5-18 s): the size on synthetic tables runs in make test-fast
def test_size_on_adult_with_a_permuted_column() -> None:
    """Adult sex x race with race permuted (independence with Adult's margins), 2,000 clients, epsilon 1."""
    adult = load_adult("all")
    x = np.asarray(contingency_table(adult, "sex", "race").counts)
    sex = np.repeat(np.arange(x.shape[0]), x.sum(axis=1))
    race = np.repeat(np.arange(x.shape[1]), x.sum(axis=0))
    rng = np.random.default_rng(7)
    ps = []
    for r in range(RUNS):
        table = np.zeros_like(x)
        np.add.at(table, (sex, rng.permutation(race)), 1)
        res = simulate_fed_chi2(
            table,
            2000,
            epsilon=1.0,
            delta=1e-6,
            null_replicates=B,
            randomness=RandomSource(70_000 + r),
        )
        ps.append(res.p_value)
    arr = np.array(ps)
    assert (arr <= LEVEL).mean() <= _bound(RUNS)
    assert scipy.stats.kstest(arr, "uniform").pvalue > 1e-3


def _dependent(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, n)
    y = np.where(rng.random(n) < 0.5, x, rng.integers(0, 3, n))
    t = np.zeros((n, 3, 3), dtype=np.int64)
    t[np.arange(n), x, y] = 1
    return t


def test_power_under_strong_dependence() -> None:
    """y = x half of the time (Cramer's V about 0.5), 1,000 one-record clients, epsilon 2: rejects >= 90%."""
    t = _dependent(1000, 3).sum(axis=0)
    rej = [
        simulate_fed_chi2(
            t, 1000, epsilon=2.0, delta=1e-6, max_records=1, null_replicates=B,
            randomness=RandomSource(r),
        ).rejected
        for r in range(100)
    ]  # fmt: skip
    assert np.mean(rej) >= 0.9


# epsilon 0.5 (the wider noise) in make test-fast, 2 in make test (300 runs each, 5-17 s)
@pytest.mark.parametrize("eps", [0.5, pytest.param(2.0, marks=pytest.mark.slow)])
def test_interval_covers_the_exact_statistic(eps: float) -> None:
    """n = 300 one-record clients, y = x 30% of the time: the 95% interval (conservative: Bonferroni over
    the decoder's interval and the simulated marginal-noise shift) covers the exact statistic in at least
    95% - 3 SE of 300 runs, and the estimate and interval are >= 0."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 3, 300)
    y = np.where(rng.random(300) < 0.3, x, rng.integers(0, 3, 300))
    t = np.zeros((3, 3), dtype=np.int64)
    np.add.at(t, (x, y), 1)
    hits = 0
    for r in range(300):
        res = simulate_fed_chi2(
            t, 300, epsilon=eps, delta=1e-6, max_records=1, null_replicates=B,
            randomness=RandomSource(90_000 + r),
        )  # fmt: skip
        assert res.ci is not None and res.exact_statistic is not None
        assert 0.0 <= res.ci[0] <= res.statistic <= res.ci[1]
        hits += res.ci[0] <= res.exact_statistic <= res.ci[1]
    assert hits / 300 >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / 300), hits


def test_end_to_end_matches_the_fast_path() -> None:
    """fed_chi2 (engine, one-record clients) and simulate_fed_chi2 give the same law of the statistic and
    of the noise offset (two-sample KS at 1e-3 over 40 runs each), and the result exposes the simulated
    p-value with its Monte Carlo error."""
    t = _dependent(600, 5)
    full, fast, tau_full, tau_fast = [], [], [], []
    for r in range(40):
        a = fed_chi2(t, epsilon=2.0, delta=1e-6, null_replicates=B, randomness=RandomSource(r))
        b = simulate_fed_chi2(
            t.sum(axis=0), 600, epsilon=2.0, delta=1e-6, max_records=1, null_replicates=B,
            randomness=RandomSource(500 + r),
        )  # fmt: skip
        full.append(a.statistic)
        fast.append(b.statistic)
        tau_full.append(a.details["privacy"]["noise_offset"])
        tau_fast.append(b.details["privacy"]["noise_offset"])
        for res in (a, b):
            assert res.p_value_method == "parametric-bootstrap" and res.null_replicates == B
            assert res.p_value == res.p_value_sketch
            assert res.p_value_mc_error == pytest.approx(
                math.sqrt(res.p_value * (1 - res.p_value) / B)
            )
            assert res.rejected == (res.p_value <= res.level)
            assert res.ci is not None and 0.0 <= res.ci[0] <= res.statistic <= res.ci[1]
            assert res.p_value_ci is not None and 0.0 <= res.p_value_ci[0] <= res.p_value_ci[1] <= 1
    assert scipy.stats.ks_2samp(full, fast).pvalue > 1e-3
    assert scipy.stats.ks_2samp(tau_full, tau_fast).pvalue > 1e-3


def test_seeded_runs_are_reproducible() -> None:
    t = _dependent(300, 6)
    a = fed_chi2(t, epsilon=1.0, delta=1e-6, null_replicates=B, randomness=RandomSource(11))
    b = fed_chi2(t, epsilon=1.0, delta=1e-6, null_replicates=B, randomness=RandomSource(11))
    assert (a.statistic, a.p_value) == (b.statistic, b.p_value)


def test_mc_p_value_counts_ties_and_is_valid() -> None:
    sim = np.sort(np.array([0.5, 1.0, 1.0, 2.0]))
    assert mc_p_value(1.0, sim) == 4 / 5  # 1 + #{>= 1} = 1 + 3
    assert mc_p_value(3.0, sim) == 1 / 5
    assert mc_p_value(0.0, sim) == 1.0
    # exchangeable null draws: P(p <= a) <= a exactly, for every a on the grid
    rng = np.random.default_rng(0)
    draws = rng.standard_normal((20_000, 20))
    p = np.array([mc_p_value(d[0], np.sort(d[1:])) for d in draws])
    for a in (0.05, 0.1, 0.5):
        assert (p <= a).mean() <= a + 3 * math.sqrt(a * (1 - a) / p.size)


def test_cli_prints_the_simulated_p_value_and_agrees_with_the_api() -> None:
    from fedstats.cli import _tables as _t
    from fedstats.datasets import iid_partition
    from fedstats.engine import Engine

    args = ["--seed", "3", "--json", "chi2", "adult", "--x", "sex", "--y", "race"]
    args += ["--clients", "300", "--no-secure", "--epsilon", "2", "--delta", "1e-6"]
    args += ["--null-replicates", str(B)]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.stderr
    d: dict[str, Any] = json.loads(out.stdout)
    assert d["p_value_method"] == "parametric-bootstrap" and d["null_replicates"] == B
    assert d["rejected"] == (d["p_value"] <= 0.05)
    assert "simulated through both rounds' noise" in d["privacy"]
    # the same seed and options through the Python API
    rs = RandomSource(3)
    df = _t.load_frame("adult", None, None)
    assign = iid_partition(df.shape[0], 300, rng=rs.child("cli", "clients"))
    tables = _t.tables(df, ("sex", "race"), assign, 300, None)
    res = fed_chi2(
        tables,
        epsilon=2.0,
        delta=1e-6,
        null_replicates=B,
        engine=Engine(randomness=rs),
        randomness=rs,
    )
    assert res.statistic == pytest.approx(d["statistic"], rel=1e-12)
    assert res.p_value == d["p_value"]
    text = CliRunner().invoke(app, args[:2] + args[3:])
    assert text.exit_code == 0 and "Monte Carlo" in text.stdout


def test_the_sampler_gets_the_exact_square_of_a_rounded_up_sigma(monkeypatch: Any) -> None:
    seen: list[Any] = []
    real = chi2_privacy.sample_discrete_gaussian

    def spy(sigma2: Any, size: Any, rng: Any) -> np.ndarray:
        seen.append(sigma2)
        return real(sigma2, size, rng)

    monkeypatch.setattr(chi2_privacy, "sample_discrete_gaussian", spy)
    chi2_privacy.add_discrete_gaussian(np.zeros(3, dtype=np.int64), 1.1, np.random.default_rng(0))
    assert seen == [Fraction(1.1) ** 2] and isinstance(seen[0], Fraction)
    assert Fraction(1.1) ** 2 != Fraction(1.1 * 1.1)  # the float product is rounded


@settings(max_examples=150, deadline=None)
@given(
    eps=st.floats(0.01, 20.0),
    log_delta=st.floats(-20.0, -2.0),
    t=st.integers(1, 10_000),
    frac=st.floats(0.01, 0.99),
    c=st.floats(1e-3, 1e3),
    f=st.integers(0, 52),
    ell=st.integers(2, 2000),
)
def test_noise_scales_round_up(
    eps: float, log_delta: float, t: int, frac: float, c: float, f: int, ell: int
) -> None:
    """The realised loss never exceeds the budget, as exact rationals (no tolerance)."""
    plan = plan_chi2_privacy(
        epsilon=eps, delta=10.0**log_delta, max_records=t, round1_fraction=frac
    )
    assert Fraction(plan.rho_marginals) + Fraction(plan.rho_projection) <= Fraction(plan.rho)
    assert zcdp_to_approx_dp(rho=plan.rho, delta=10.0**log_delta) <= eps
    assert plan.loss().epsilon <= eps
    s1 = plan.marginal_sigma
    assert Fraction(plan.marginal_sensitivity) ** 2 / (2 * Fraction(s1) ** 2) <= Fraction(
        plan.rho_marginals
    )
    k, s2 = plan.projection_release(c, f, ell)
    k2, sens = plan.projection_sensitivity(c, f, ell)
    assert k == k2
    # the sensitivity covers the real-number one (2^f 2 T c + 2 sqrt(l) on the grid 2^-f; sqrt(l) when k>0)
    real = Fraction(2) ** f * 2 * t * Fraction(c) + 2 * Fraction(math.sqrt(ell)) * (
        1 + Fraction(1, 2**50)
    )
    if k:
        real = real / 2**k + Fraction(math.sqrt(ell)) * (1 + Fraction(1, 2**50))
    assert Fraction(sens) >= real
    assert Fraction(sens) ** 2 / (2 * Fraction(s2) ** 2) <= Fraction(plan.rho_projection)
