"""Performance-gap measurement (Juarez & Korolova 2023): estimators, variances, privacy loss, planning."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from fedstats.analyses.performance_gap import (
    GapMechanism,
    GroupLayout,
    measure_performance_gap,
    optimal_allocation,
    paper_allocation,
    plan_epsilon,
)
from fedstats.analyses.performance_gap.allocation import _variance_curve
from fedstats.analyses.performance_gap.client import perturb
from fedstats.analyses.performance_gap.planning import error_bound
from fedstats.analyses.performance_gap.protocol import report_params
from fedstats.analyses.performance_gap.simulate import simulate_sums
from fedstats.cli.app import app
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RandomSource

# ----------------------------------------------------------------------------- helpers


def _population(sizes: tuple[int, ...], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Fixed groups and values in [-1, 1] (group g has a different mean)."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(len(sizes)), sizes)
    v = np.clip(rng.uniform(-1, 1, g.size) * 0.6 + 0.3 * (g - 0.5), -1, 1)
    return g, v


def _monte_carlo(mech: GapMechanism, g: np.ndarray, v: np.ndarray, runs: int, seed: int) -> tuple:
    """Run the mechanism ``runs`` times on the same clients; return per-run group sums and counts."""
    sums, counts = simulate_sums(g, v, mech, np.random.default_rng(seed), runs=runs)
    return sums, counts.astype(np.float64)


MECHS = [
    GapMechanism("R", 0.8, 1.5),
    GapMechanism("R", 2.0, 0.5, n_groups=3),
    GapMechanism("L", 0.7, 1.2),
    GapMechanism("L", 1.0, 2.0, n_groups=3),
    GapMechanism("L", 0.9, 1.0, k=2 / 3),  # the paper's k != 2: not private, but the variance holds
]

# ----------------------------------------------------------------------------- estimators


@pytest.mark.parametrize("mech", MECHS, ids=lambda m: f"{m.kind}-d{m.n_groups}-k{m.k:.2f}")
def test_group_means_unbiased_and_variance_matches_eqs_19_20(mech: GapMechanism) -> None:
    sizes = (300, 200, 100)[: mech.n_groups]
    g, v = _population(sizes, seed=1)
    runs = 4000
    sums, _ = _monte_carlo(mech, g, v, runs, seed=2)
    K = g.size
    means = sums / (mech.value_gain * np.asarray(sizes))
    for grp in range(mech.n_groups):
        truth = v[g == grp].mean()
        nu2 = float(np.mean(v[g == grp] ** 2))
        var = mech.group_variance(sizes[grp], K, nu2)
        est = means[:, grp]
        # unbiased: sample mean within 5 standard errors
        assert abs(est.mean() - truth) < 5 * math.sqrt(var / runs)
        # variance: sample variance within 6 standard errors of the closed form
        s2 = est.var(ddof=1)
        k4 = stats.kurtosis(est, fisher=False)
        se = var * math.sqrt((k4 - 1 + 2 / (runs - 1)) / runs)
        assert abs(s2 - var) < 6 * se, (grp, s2, var)
    # Theorem 9: the two groups' errors are uncorrelated, so the gap's variance is the sum
    gap = means[:, 0] - means[:, 1]
    nus = [float(np.mean(v[g == i] ** 2)) for i in (0, 1)]
    vgap = mech.gap_variance((sizes[0], sizes[1]), K, (nus[0], nus[1]))
    r = np.corrcoef(means[:, 0], means[:, 1])[0, 1]
    assert abs(r) < 5 / math.sqrt(runs)
    assert abs(gap.var(ddof=1) - vgap) < 6 * vgap * math.sqrt(2.5 / runs)


def test_worst_case_nu2_bounds_the_variance() -> None:
    for mech in MECHS:
        for nu2 in np.linspace(0, 1, 11):
            v = mech.group_variance(100, 250, float(nu2))
            assert v <= mech.group_variance(100, 250) * (1 + 1e-12)


def test_estimated_group_sizes_close_to_unbiased_with_delta_method_se() -> None:
    mech = GapMechanism("R", 1.5, 1.5)
    g, v = _population((3000, 1000), seed=3)
    runs = 800
    sums, counts = _monte_carlo(mech, g, v, runs, seed=4)
    K = g.size
    a, ao = mech.a, mech.a_other
    n_hat = (counts - K * ao) / (a - ao)
    means = sums / (mech.value_gain * n_hat)
    gap = means[:, 0] - means[:, 1]
    truth = v[g == 0].mean() - v[g == 1].mean()
    assert abs(gap.mean() - truth) < 5 * gap.std() / math.sqrt(runs) + 0.01 * gap.std()
    from fedstats.analyses.performance_gap.protocol import GapSums, estimate_gap

    se = [
        estimate_gap(
            GapSums(sums[r], counts[r].astype(np.int64), K),
            mech,
            sizes=None,
            scale="signed",
            nu2=(float(np.mean(v[g == 0] ** 2)), float(np.mean(v[g == 1] ** 2))),
        )["standard_error"]
        for r in range(50)
    ]
    assert abs(np.mean(se) / gap.std() - 1) < 0.15


def test_engine_protocol_is_unbiased_and_ci_covers() -> None:
    rng = np.random.default_rng(5)
    n = 400
    groups = rng.choice(["a", "b"], n, p=[0.6, 0.4])
    rates = np.where(groups == "a", rng.uniform(0.6, 1.0, n), rng.uniform(0.3, 0.9, n))
    zs = []
    cover = 0
    reps = 80
    for mechanism, rep in itertools.product("RL", range(reps // 2)):
        res = measure_performance_gap(
            groups,
            rates,
            mechanism=mechanism,
            epsilon=2.0,
            n_clients=3000,
            randomness=RandomSource(1000 + rep),
        )
        assert res.true_gap is not None and res.standard_error is not None and res.ci is not None
        zs.append((res.gap - res.true_gap) / res.standard_error)
        cover += res.ci[0] <= res.true_gap <= res.ci[1]
        assert res.true_loss <= 2.0 + 1e-9
    zs_arr = np.asarray(zs)
    # the SE is the worst-case-nu2 bound: |mean z| small, var(z) <= 1 (conservative)
    assert abs(zs_arr.mean()) < 5 / math.sqrt(reps)
    assert zs_arr.var() < 1.3
    assert cover / reps > 0.88


def test_same_seed_same_result_and_simulation_is_deterministic() -> None:
    g = np.array(["x", "y"] * 50)
    r = np.linspace(0, 1, 100)
    a = measure_performance_gap(
        g, r, mechanism="L", epsilon=1.0, n_clients=10_000, randomness=RandomSource(7)
    )
    b = measure_performance_gap(
        g, r, mechanism="L", epsilon=1.0, n_clients=10_000, randomness=RandomSource(7)
    )
    assert a.gap == b.gap and a.true_gap == b.true_gap
    assert a.release_note is not None


# ----------------------------------------------------------------------------- privacy loss


def _brute_force_r(mech: GapMechanism, grid: np.ndarray) -> float:
    """max log ratio over inputs (g, v on a grid) and outputs, from Algorithm 1's coins."""
    d = mech.n_groups
    e1, e2 = mech.epsilon1, mech.epsilon2
    a = math.exp(e1) / (math.exp(e1) + d - 1)
    b = math.exp(e2) / (1 + math.exp(e2))
    rows = []
    for g, v in itertools.product(range(d), grid):
        row = []
        for go, vo in itertools.product(range(d), (-1, 1)):
            p_group = a if go == g else (1 - a) / (d - 1)
            vin = v if go == g else 0.0
            p_bit1 = (1 + vin) / 2  # B = 1 with this probability (Harmony)
            p_out1 = p_bit1 * b + (1 - p_bit1) * (1 - b)  # randomized response on B
            row.append(p_group * (p_out1 if vo == 1 else 1 - p_out1))
        rows.append(row)
    logp = np.log(np.asarray(rows))
    return float((logp.max(axis=0) - logp.min(axis=0)).max())


@pytest.mark.parametrize(
    ("e1", "e2", "d"),
    [(1.0, 1.0, 2), (0.1, 2.0, 2), (3.0, 0.2, 2), (0.5, 0.5, 3), (2.0, 1.0, 5), (0.0, 1.0, 2)],
)
def test_mr_loss_matches_brute_force(e1: float, e2: float, d: int) -> None:
    mech = GapMechanism("R", e1, e2, n_groups=d)
    brute = _brute_force_r(mech, np.linspace(-1, 1, 9))
    assert mech.true_loss() == pytest.approx(brute, rel=1e-12, abs=1e-12)
    assert mech.closed_form_loss() == pytest.approx(brute, rel=1e-12, abs=1e-12)
    if e1 == e2:
        # Theorem 5 claims max(e1, e2): wrong by log(2b) > 0
        assert brute > mech.paper_loss() + 0.1 * min(e1, e2)


def test_mr_sampler_follows_the_analysed_distribution() -> None:
    mech = GapMechanism("R", 0.7, 1.1, n_groups=3)
    params = report_params(mech, 16, 40.0)
    log_p = mech.log_probability_matrix()
    rng = np.random.default_rng(11)
    n = 60_000
    for g, v in [(0, -1.0), (1, 1.0), (2, 0.3)]:
        new_g, y, _ = perturb(np.full(n, g), np.full(n, v), params, rng)
        cell = 2 * new_g + (y > 0)
        obs = np.bincount(cell, minlength=6)
        # expected probabilities: linear interpolation between the v = -1 and v = 1 rows
        p = (1 - v) / 2 * np.exp(log_p[2 * g]) + (1 + v) / 2 * np.exp(log_p[2 * g + 1])
        assert stats.chisquare(obs, p * n).pvalue > 1e-6


def _brute_force_l(mech: GapMechanism, y: np.ndarray) -> float:
    d = min(mech.n_groups, 3)
    a = math.exp(mech.epsilon1) / (math.exp(mech.epsilon1) + mech.n_groups - 1)
    ao = (1 - a) / (mech.n_groups - 1)
    s, t = 2 / mech.epsilon2, mech.k / mech.epsilon2
    worst = 0.0
    inputs = [(g, v) for g in range(d) for v in np.linspace(-1, 1, 11)]
    for go in range(d):
        dens = []
        for g, v in inputs:
            if go == g:
                dens.append(np.log(a / (2 * s)) - np.abs(y - v) / s)
            else:
                dens.append(np.log(ao / (2 * t)) - np.abs(y) / t)
        arr = np.asarray(dens)
        worst = max(worst, float((arr.max(axis=0) - arr.min(axis=0)).max()))
    return worst


@pytest.mark.parametrize(("e1", "e2", "d"), [(0.5, 1.0, 2), (2.0, 1.0, 2), (0.1, 3.0, 3)])
def test_ml_loss_matches_brute_force_for_k2(e1: float, e2: float, d: int) -> None:
    mech = GapMechanism("L", e1, e2, n_groups=d)
    brute = _brute_force_l(mech, np.linspace(-60, 60, 24001))
    assert mech.true_loss() == pytest.approx(brute, rel=1e-9)
    assert mech.closed_form_loss() == pytest.approx(brute, rel=1e-9)


def test_ml_with_k_not_2_has_unbounded_loss() -> None:
    for k in (2 / 3, 1.0, 3.0):
        mech = GapMechanism("L", 0.5, 1.0, k=k)
        assert mech.true_loss() == math.inf
        losses = [_brute_force_l(mech, np.linspace(-T, T, 4001)) for T in (10, 100, 1000)]
        # grows without bound, linearly in the output range: |1/s - 1/t| * T
        slope = abs(1 / (2 / mech.epsilon2) - 1 / (k / mech.epsilon2))
        assert losses[0] < losses[1] < losses[2]
        assert losses[2] > 0.9 * slope * 1000
        assert mech.paper_loss() < math.inf


def test_ml_sampler_noise_scales() -> None:
    mech = GapMechanism("L", 0.4, 0.8, k=1.0)
    params = report_params(mech, 12, 40.0)
    rng = np.random.default_rng(12)
    n = 200_000
    new_g, y, _ = perturb(np.zeros(n, dtype=np.int64), np.full(n, 0.5), params, rng)
    vals = y / params["half"]
    kept, flip = vals[new_g == 0], vals[new_g == 1]
    assert abs(kept.mean() - 0.5) < 6 * math.sqrt(8 / 0.8**2 / kept.size)
    assert abs(flip.mean()) < 6 * math.sqrt(2 * (1 / 0.8) ** 2 / flip.size)
    # Laplace variance 2 s^2 (kurtosis 6: SE of the variance ~ var * sqrt(5/n))
    for x, s in ((kept, 2 / 0.8), (flip, 1 / 0.8)):
        assert abs(x.var() / (2 * s * s) - 1) < 6 * math.sqrt(5 / x.size)
    assert (new_g == 0).mean() == pytest.approx(mech.a, abs=6 * math.sqrt(0.25 / n))


# ----------------------------------------------------------------------------- allocation


def test_paper_allocation_is_labelled_with_its_true_loss() -> None:
    r = paper_allocation("R", 1.0)
    assert (r.epsilon1, r.epsilon2) == (1.0, 1.0)
    assert r.true_loss == pytest.approx(1.0 + math.log(2 * math.e / (1 + math.e)))
    assert paper_allocation("L", 0.5).true_loss == math.inf  # k = 2/3
    assert paper_allocation("L", 1.0).k == 1.0 and paper_allocation("L", 1.0).true_loss == math.inf
    k2 = paper_allocation("L", 1.0, variant="k2")
    assert (k2.epsilon1, k2.k, k2.true_loss) == (0.5, 2.0, pytest.approx(1.0))
    # App. B: eps1 = ln 3 - eps/2 below 2/3, ln(2/eps) + eps - 1 above
    assert paper_allocation("L", 0.5).epsilon1 == pytest.approx(math.log(3) - 0.25)
    assert paper_allocation("L", 2.5).epsilon1 == pytest.approx(math.log(2 / 2.5) + 1.5)


@pytest.mark.parametrize("kind", ["R", "L"])
@pytest.mark.parametrize("eps", [0.05, 3.0])
def test_optimal_allocation_respects_true_loss_and_beats_a_grid(kind: str, eps: float) -> None:
    layout = GroupLayout((3000.0, 1000.0, 500.0), (0, 1))
    alloc = optimal_allocation(kind, eps, layout)
    assert alloc.true_loss <= eps * (1 + 1e-9)
    v_opt = layout.gap_variance(alloc.mechanism)
    # brute force over every feasible (eps1, eps2) on a fine grid
    best = math.inf
    for e2 in np.linspace(eps / 150, eps, 150):
        for e1 in np.linspace(0, eps, 100):
            m = GapMechanism(kind, float(e1), float(e2), 3)
            if m.closed_form_loss() <= eps:
                best = min(best, layout.gap_variance(m))
    assert v_opt <= best * (1 + 1e-6)
    assert float(
        _variance_curve(kind, eps, np.array([alloc.epsilon2]), layout)[0]
    ) == pytest.approx(v_opt)


# ----------------------------------------------------------------------------- planning

# The paper's Table 1 (minimum epsilon, alpha, K, probability 0.99), as printed.
TABLE1 = {
    ("R", 1e5): ("1.86", "-", "-"),
    ("R", 1e6): ("0.63", "-", "-"),
    ("R", 1e7): ("0.23", "1.86", "-"),
    ("R", 1e8): ("0.08", "0.63", "-"),
    ("R", 1e9): ("0.02", "0.23", "1.86"),
    ("L", 1e5): ("2.56", "17.89", "178.89"),
    ("L", 1e6): ("0.71", "6.32", "56.57"),
    ("L", 1e7): ("0.21", "2.56", "17.89"),
    ("L", 1e8): ("0.07", "0.71", "6.32"),
    ("L", 1e9): ("0.02", "0.21", "2.56"),
}


@pytest.mark.parametrize(("key", "printed"), list(TABLE1.items()), ids=str)
def test_table1_paper_accounting_to_printed_digits(key: tuple, printed: tuple) -> None:
    kind, K = key
    for alpha, want in zip((0.1, 0.01, 0.001), printed, strict=True):
        plan = plan_epsilon(int(K), alpha, 0.99, kind, accounting="paper")
        got = "-" if plan.epsilon is None else f"{plan.epsilon:.2f}"
        assert got == want, (kind, K, alpha)


@pytest.mark.parametrize("kind", ["R", "L"])
@pytest.mark.parametrize("accounting", ["exact", "paper"])
@pytest.mark.parametrize("bound", ["chebyshev", "normal"])
def test_planner_matches_closed_form(kind: str, accounting: str, bound: str) -> None:
    K, alpha, p = 10**7, 0.01, 0.95
    plan = plan_epsilon(K, alpha, p, kind, accounting=accounting, bound=bound)
    assert plan.epsilon is not None and plan.allocation is not None
    layout = GroupLayout.balanced(K)
    var = layout.gap_variance(plan.allocation.mechanism)
    if bound == "chebyshev":
        assert var == pytest.approx((1 - p) * alpha**2, rel=1e-6)
    else:
        assert math.sqrt(var) * stats.norm.ppf((1 + p) / 2) == pytest.approx(alpha, rel=1e-6)
    # smallest: a slightly smaller budget misses the target
    smaller = plan.epsilon * (1 - 1e-4)
    from fedstats.analyses.performance_gap.allocation import allocate

    v2 = layout.gap_variance(allocate(kind, smaller, layout, accounting=accounting).mechanism)
    assert error_bound(v2, p, bound=bound) > alpha
    if accounting == "exact":
        assert plan.allocation.true_loss <= plan.epsilon * (1 + 1e-9)


def test_sharper_bounds_need_less_budget_and_rate_scale_halves() -> None:
    K = 10**7
    eps = {
        b: plan_epsilon(K, 0.01, 0.99, "R", bound=b).epsilon
        for b in ("chebyshev", "bernstein", "normal")
    }
    assert eps["normal"] < eps["bernstein"] < eps["chebyshev"]  # type: ignore[operator]
    rate = plan_epsilon(K, 0.005, 0.99, "R", scale="rate").epsilon
    assert rate == pytest.approx(eps["chebyshev"])
    none = plan_epsilon(10**5, 0.01, 0.99, "R")
    assert none.epsilon is None and none.floor > 0.01
    with pytest.raises(ParameterError, match="bound"):
        plan_epsilon(K, 0.01, 0.99, "L", bound="bernstein")


def test_normal_and_bernstein_bounds_hold_by_simulation() -> None:
    mech = GapMechanism("R", 1.0, 1.0)
    g, v = _population((500, 500), seed=8)
    runs = 4000
    sums, _ = _monte_carlo(mech, g, v, runs, seed=9)
    means = sums / (mech.value_gain * 500)
    err = (means[:, 0] - means[:, 1]) - (v[g == 0].mean() - v[g == 1].mean())
    var = mech.gap_variance((500, 500), 1000, tuple(float(np.mean(v[g == i] ** 2)) for i in (0, 1)))
    for p in (0.9, 0.99):
        a_norm = error_bound(var, p, bound="normal")
        miss = float(np.mean(np.abs(err) >= a_norm))
        assert abs(miss - (1 - p)) < 5 * math.sqrt(p * (1 - p) / runs) + 0.003
        m = (1 + mech.value_gain) / (mech.value_gain * 500)
        a_b = error_bound(var, p, bound="bernstein", bernstein_m=m)
        assert float(np.mean(np.abs(err) >= a_b)) <= (1 - p)


# ----------------------------------------------------------------------------- bad input


def test_bad_input_api() -> None:
    g = np.array(["a", "b"] * 10)
    r = np.linspace(0, 1, 20)
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        measure_performance_gap(g, r + 0.5, mechanism="R", epsilon=1.0)
    with pytest.raises(DataError, match=r"\[-1, 1\]"):
        measure_performance_gap(g, r * 3 - 1.5, mechanism="R", epsilon=1.0, scale="signed")
    with pytest.raises(DataError, match="two groups"):
        measure_performance_gap(np.array(["a"] * 20), r, mechanism="R", epsilon=1.0)
    with pytest.raises(ParameterError, match="epsilon"):
        measure_performance_gap(g, r, mechanism="R", epsilon=0.0)
    with pytest.raises(ParameterError, match="epsilon"):
        measure_performance_gap(g, r, mechanism="L", epsilon=-1.0)
    with pytest.raises(ParameterError, match="clients"):
        measure_performance_gap(g, r, mechanism="R", epsilon=1.0, n_clients=1)
    with pytest.raises(ParameterError, match="mechanism"):
        measure_performance_gap(g, r, mechanism="Q", epsilon=1.0)
    with pytest.raises(DataError, match="NaN"):
        measure_performance_gap(g, np.where(r > 0.5, np.nan, r), mechanism="R", epsilon=1.0)
    with pytest.raises(ParameterError, match="clients"):
        plan_epsilon(1, 0.1, 0.99, "R")
    with pytest.raises(ParameterError, match="alpha"):
        plan_epsilon(100, 0.0, 0.99, "R")
    with pytest.raises(ParameterError, match="probability"):
        plan_epsilon(100, 0.1, 1.0, "R")
    with pytest.raises(ParameterError, match="pair"):
        measure_performance_gap(
            np.array(["a", "b", "c"] * 5), np.linspace(0, 1, 15), mechanism="R", epsilon=1.0
        )


@pytest.fixture()
def csv_path(tmp_path):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    n = 300
    g = rng.choice(["F", "M"], n)
    acc = np.where(g == "F", 0.8, 0.6) + rng.uniform(-0.1, 0.1, n)
    p = tmp_path / "clients.csv"
    p.write_text("sex,acc,one\n" + "".join(f"{a},{b},F\n" for a, b in zip(g, acc, strict=True)))
    bad = tmp_path / "bad.csv"
    bad.write_text("sex,acc\n" + "".join(f"{a},{b + 1}\n" for a, b in zip(g, acc, strict=True)))
    return p, bad


def test_cli_gap_and_plan_json(csv_path) -> None:  # type: ignore[no-untyped-def]
    good, _ = csv_path
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "--seed",
            "1",
            "gap",
            str(good),
            "--group-column",
            "sex",
            "--value-column",
            "acc",
            "--mechanism",
            "L",
            "--epsilon",
            "2",
            "--clients",
            "20000",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    for key in ("gap", "ci", "true_loss", "true_gap"):
        assert key in out
    assert out["true_loss"] == pytest.approx(2.0)
    assert abs(out["gap"] - out["true_gap"]) < 6 * out["standard_error"]
    res = runner.invoke(
        app,
        [
            "gap-plan",
            "--clients",
            "10000000",
            "--alpha",
            "0.01",
            "--probability",
            "0.99",
            "--mechanism",
            "L",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert (
        plan["epsilon"] > 0
        and plan["k"] == 2.0
        and plan["true_loss"] <= plan["epsilon"] * (1 + 1e-9)
    )
    res = runner.invoke(
        app,
        [
            "gap-plan",
            "--clients",
            "100000",
            "--alpha",
            "0.001",
            "--mechanism",
            "R",
            "--accounting",
            "paper",
            "--json",
        ],
    )
    assert res.exit_code == 0 and json.loads(res.stdout)["epsilon"] is None
    res = runner.invoke(
        app,
        [
            "gap-plan",
            "--clients",
            "1000000",
            "--alpha",
            "0.1",
            "--mechanism",
            "L",
            "--accounting",
            "paper",
            "--json",
        ],
    )
    out = json.loads(res.stdout)
    assert out["true_loss"] is None and out["non_finite"]["true_loss"] == "inf"


def test_cli_bad_input_exit_2_one_line(csv_path) -> None:  # type: ignore[no-untyped-def]
    good, bad = csv_path
    runner = CliRunner()
    base = ["gap", "--group-column", "sex", "--value-column", "acc"]
    cases = [
        [*base, str(bad), "--epsilon", "1"],  # values outside [0, 1]
        [*base[:1], str(good), "--group-column", "one", "--value-column", "acc"],  # one group
        [*base, str(good), "--epsilon", "0"],
        [*base, str(good), "--epsilon", "1", "--clients", "1"],
        ["gap-plan", "--clients", "1", "--alpha", "0.1"],
        ["gap-plan", "--clients", "100", "--alpha", "-1"],
    ]
    for args in cases:
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        lines = [x for x in res.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), (args, res.stderr)


def test_three_groups_with_pair_and_estimated_sizes() -> None:
    rng = np.random.default_rng(21)
    n = 600
    groups = rng.choice(["x", "y", "z"], n, p=[0.5, 0.3, 0.2])
    rates = {"x": 0.9, "y": 0.6, "z": 0.75}
    r = np.clip(np.array([rates[x] for x in groups]) + rng.uniform(-0.1, 0.1, n), 0, 1)
    zs = []
    reps = 12
    for rep in range(reps):
        res = measure_performance_gap(
            groups,
            r,
            mechanism="R",
            epsilon=3.0,
            pair=("z", "y"),
            estimate_sizes=True,
            n_clients=60_000,
            randomness=RandomSource(500 + rep),
        )
        assert res.pair == ("z", "y") and len(res.group_means) == 3
        assert res.true_loss <= 3.0 + 1e-9 and res.allocation["epsilon2"] <= 3.0
        assert res.standard_error is not None and res.true_gap is not None
        zs.append((res.gap - res.true_gap) / res.standard_error)
    assert abs(float(np.mean(zs))) < 5 / math.sqrt(reps)
    assert 0.3 < float(np.std(zs)) < 1.6
