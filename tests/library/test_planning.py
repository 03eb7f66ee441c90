"""Planners (issue 43, item 2): each prediction against a simulation of the estimator at the planned size.

Every test plans a size for a target, runs the analysis there with fixed seeds, and checks that the
achieved mean interval width (or rejection rate) is within Monte Carlo error of the target: the tolerance is
``4 * SE`` of the simulated mean plus, where the planner models a random quantity by its expectation, a
stated relative slack.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import fedstats
from fedstats.analyses.chi2.planning import alternative_table, plan_chi2, power
from fedstats.analyses.chi2.simulate import simulate_fed_chi2
from fedstats.analyses.entropy.simulate import simulate_fed_entropy
from fedstats.cli.app import app
from fedstats.errors import FedstatsError, ParameterError
from fedstats.randomness import RandomSource


def _ages(n: int) -> np.ndarray:
    rng = RandomSource(seed=1).generator("test", "ages")
    return np.asarray(np.clip(rng.normal(40.0, 13.0, n), 17, 90).round())


def _within(sim: np.ndarray, target: float, slack: float = 0.0) -> None:
    se = float(sim.std(ddof=1) / math.sqrt(sim.size)) if sim.size > 1 else 0.0
    assert abs(float(sim.mean()) - target) <= 4.0 * se + slack * target + 1e-6 * target


@pytest.mark.parametrize("method", ["adaptive", "basic"])
def test_mean_plan_matches_simulated_width(method: str) -> None:
    vals = _ages(50_000)
    plan = fedstats.plan_mean(10.0, low=0, high=100, epsilon=1.0, values=vals[:5000], method=method)
    assert plan.solved_for == "n_clients" and plan.achieved is not None and plan.achieved <= 10.0
    enc = fedstats.BitEncoding(0, 100)
    rng = RandomSource(seed=2).generator("test", "draw")
    widths = []
    for s in range(20):
        x = vals[rng.choice(vals.size, int(plan.value), replace=False)]  # type: ignore[arg-type]
        r = fedstats.mean(x, enc, epsilon=1.0, method=method, randomness=RandomSource(seed=s))
        lo, hi = r.ci  # bit pushing releases the unbiased estimate and its normal interval
        widths.append(hi - lo)
    # adaptive: round 2 is allocated from round 1's noisy bit means, the plan from the sample's
    slack = 0.02 if method == "adaptive" else 0.0
    _within(np.array(widths), float(plan.achieved), slack=slack)  # type: ignore[arg-type]


def test_variance_plan_matches_simulated_width() -> None:
    vals = _ages(50_000)
    plan = fedstats.plan_variance(40.0, low=0, high=100, epsilon=2.0, values=vals[:5000])
    enc = fedstats.BitEncoding(0, 100)
    rng = RandomSource(seed=3).generator("test", "draw")
    widths = []
    for s in range(10):
        x = vals[rng.choice(vals.size, int(plan.value), replace=False)]  # type: ignore[arg-type]
        r = fedstats.variance(x, enc, epsilon=2.0, randomness=RandomSource(seed=s))
        lo, hi = r.ci
        widths.append(hi - lo)
    _within(np.array(widths), float(plan.achieved), slack=0.02)  # type: ignore[arg-type]


def test_mean_plan_epsilon_is_the_smallest() -> None:
    plan = fedstats.plan_mean(10.0, low=0, high=100, n_clients=3000)
    assert plan.solved_for == "epsilon" and plan.value is not None
    below = fedstats.plan_mean(10.0, low=0, high=100, epsilon=plan.value * 0.99)
    assert below.value is not None and below.value > 3000


def test_gap_plan_matches_simulated_error() -> None:
    plan = fedstats.plan_gap(0.2, epsilon=2.0, scale="rate")
    n = int(plan.value)  # type: ignore[arg-type]
    rng = RandomSource(seed=5).generator("test", "gap")
    widths, errors = [], []
    for s in range(20):
        g = np.repeat([0, 1], n // 2)
        v = rng.integers(0, 2, g.size).astype(float)  # rates at 1/2: the worst-case nu^2
        r = fedstats.measure_performance_gap(
            g, v, epsilon=2.0, scale="rate", estimate_sizes=False, randomness=RandomSource(seed=s)
        )
        widths.append(2 * 1.959964 * r.standard_error)
        errors.append(r.details["unclipped"]["gap"] - r.truth)
    _within(np.array(widths), float(plan.achieved))  # type: ignore[arg-type]
    # the realised errors' spread: 2 z sd within the sd's sampling error (20 draws: about 16%)
    assert 2 * 1.959964 * np.std(errors, ddof=1) <= 0.2 * 1.5


def test_entropy_plan_matches_simulated_width() -> None:
    plan = fedstats.plan_entropy(0.4, m=6)
    ell = int(plan.value)  # type: ignore[arg-type]
    # the decoder's interval: the planned one. The released interval is clipped to [0, log m] and only
    # narrower (here, uniform proportions, H = log m, about half of it is cut off)
    widths = [
        np.subtract(
            *simulate_fed_entropy(
                np.full(6, 500), encoding_size=ell, randomness=RandomSource(seed=100 + s)
            ).details["unclipped_ci"][::-1]
        )
        for s in range(30)
    ]
    # slack: the pilot's own error, about 0.4%
    _within(np.array(widths), float(plan.achieved), slack=0.01)  # type: ignore[arg-type]


def test_heterogeneity_plan_matches_released_width() -> None:
    plan = fedstats.plan_heterogeneity(0.1, dim=3, epsilon=1.0)
    n = int(plan.value)  # type: ignore[arg-type]
    x = RandomSource(seed=4).generator("test", "het").uniform(0, 1, (n, 3))
    r = fedstats.heterogeneity(x, epsilon=1.0, delta=1e-6, randomness=RandomSource(seed=0))
    assert r.dispersion is not None and r.dispersion.interval is not None
    lo, hi = r.dispersion.interval
    assert hi - lo == pytest.approx(plan.achieved, rel=1e-6)
    assert plan.achieved is not None and plan.achieved <= 0.1
    smaller = fedstats.plan_heterogeneity(0.1, dim=3, n_clients=n - 1)
    assert smaller.value is not None and smaller.value > 1.0


def test_chi2_power_matches_simulated_rejections() -> None:
    plan = plan_chi2(effect=0.2, shape=(2, 2), epsilon=1.0, delta=1e-6)
    n = int(plan.value)  # type: ignore[arg-type]
    assert plan.achieved is not None and plan.achieved >= 0.8
    p = alternative_table(0.2, (2, 2))
    rejected = []
    for s in range(60):
        table = RandomSource(seed=s).generator("test", "table").multinomial(n, p.ravel())
        r = simulate_fed_chi2(
            table.reshape(2, 2),
            n,
            epsilon=1.0,
            delta=1e-6,
            max_records=1,
            null_replicates=99,
            randomness=RandomSource(seed=1000 + s),
        )
        rejected.append(float(r.rejected))
    sim = np.array(rejected)
    se = math.sqrt(plan.achieved * (1 - plan.achieved) / sim.size)
    assert abs(sim.mean() - plan.achieved) <= 4 * se


def test_chi2_power_grows_with_the_effect() -> None:
    low = power(0.05, n_records=1000, dof=1)
    high = power(0.2, n_records=1000, dof=1)
    assert low < 0.5 < high


def test_chi2_power_is_remembered_with_the_value_it_computes() -> None:
    """power() remembers its simulation (a fixed public seed): the same value as computed afresh, for
    Python and numpy arguments alike; invalid arguments still refuse."""
    from fedstats.analyses.chi2.planning import _power

    for w, n, k, ell, dec, lev, t in [
        (0.2, 1000.0, 1, 50, "mean-of-squares", 0.05, 0.0),
        (0.1, 5000.0, 4, 10, "geometric", 0.01, 3.5),
    ]:
        fresh = _power.__wrapped__(w, n, k, ell, dec, lev, t)  # the simulation, not remembered
        kw = {"encoding_size": ell, "tau": t, "level": lev, "decoder": dec}
        assert power(w, n_records=n, dof=k, **kw) == fresh
        hits = _power.cache_info().hits
        again = power(np.float64(w), n_records=np.float64(n), dof=np.int64(k), **kw)
        assert again == fresh and _power.cache_info().hits == hits + 1
    with pytest.raises(ParameterError):
        power(0.0, n_records=1000, dof=1)


# --- warnings ---------------------------------------------------------------------------------------


def test_twenty_device_mean_warns_api_and_cli(tmp_path: object) -> None:
    ages = _ages(20)
    r = fedstats.mean(ages, fedstats.BitEncoding(0, 100), epsilon=1.0, randomness=RandomSource(3))
    assert any("declared range" in w for w in r.warnings)
    assert r.to_dict()["warnings"] == list(r.warnings)
    wide = fedstats.mean(
        _ages(200_000), fedstats.BitEncoding(0, 100), epsilon=1.0, randomness=RandomSource(3)
    )
    assert wide.warnings == ()
    out = CliRunner().invoke(
        app,
        [
            "--seed",
            "1",
            "mean",
            "adult",
            "--column",
            "age",
            "--low",
            "0",
            "--high",
            "100",
            "--epsilon",
            "1",
            "--clients",
            "20",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "warning: the 95% interval" in out.stderr
    import json

    assert any("declared range" in w for w in json.loads(out.stdout)["warnings"])


def test_hundred_client_chi2_warns_api_and_cli() -> None:
    rng = RandomSource(seed=6).generator("test", "chi2")
    p = alternative_table(0.3, (3, 3))
    records = rng.multinomial(1, p.ravel(), size=20_000).reshape(-1, 3, 3)
    tables = records.reshape(100, 200, 3, 3).sum(axis=1)  # 100 clients of 200 records
    r = fedstats.fed_chi2(
        tables, epsilon=1.0, delta=1e-6, null_replicates=99, randomness=RandomSource(seed=1)
    )
    assert any("power" in w for w in r.warnings)
    plain = fedstats.fed_chi2(tables, randomness=RandomSource(seed=1))
    assert not any("power" in w for w in plain.warnings)  # 20,000 records, no noise: power ~1
    out = CliRunner().invoke(
        app,
        [
            "--seed",
            "1",
            "chi2",
            "adult",
            "--x",
            "education",
            "--y",
            "income",
            "--epsilon",
            "1",
            "--delta",
            "1e-6",
            "--null-replicates",
            "99",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "warning: the test has power" in out.stderr


def test_result_warnings_exported() -> None:
    r = fedstats.mean(
        _ages(20), fedstats.BitEncoding(0, 100), epsilon=1.0, randomness=RandomSource(3)
    )
    assert fedstats.result_warnings(r) == r.warnings


# --- invalid input ------------------------------------------------------------------------------------

_BAD = st.one_of(st.floats(max_value=0.0), st.just(math.nan), st.just(-math.inf))


@settings(max_examples=15, deadline=None)
@given(width=_BAD)
def test_planners_refuse_a_bad_width(width: float) -> None:
    for call in (
        lambda: fedstats.plan_mean(width, low=0, high=1, epsilon=1.0),
        lambda: fedstats.plan_variance(width, low=0, high=1, epsilon=1.0),
        lambda: fedstats.plan_gap(width, epsilon=1.0),
        lambda: fedstats.plan_entropy(width, m=4),
        lambda: fedstats.plan_heterogeneity(width, dim=2, epsilon=1.0),
    ):
        with pytest.raises(ParameterError, match="width"):
            call()


@settings(max_examples=15, deadline=None)
@given(effect=_BAD, clients=st.integers(max_value=1))
def test_chi2_planner_refuses_bad_input(effect: float, clients: int) -> None:
    with pytest.raises(ParameterError, match="effect"):
        plan_chi2(effect=effect, epsilon=1.0)
    with pytest.raises(ParameterError, match="n_clients"):
        plan_chi2(n_clients=clients)


def test_planner_needs_exactly_one_unknown() -> None:
    with pytest.raises(FedstatsError, match="n_clients"):
        fedstats.plan_mean(1.0, low=0, high=1)
    with pytest.raises(FedstatsError, match="n_clients"):
        fedstats.plan_mean(1.0, low=0, high=1, n_clients=10, epsilon=1.0)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["mean", "--width", "-1", "--low", "0", "--high", "1", "--epsilon", "1"], "--width"),
        (["mean", "--width", "1", "--low", "0", "--high", "1"], "--clients/--epsilon"),
        (["variance", "--width", "1", "--low", "2", "--high", "1", "--epsilon", "1"], "--high"),
        (["gap", "--width", "0.1", "--clients", "1"], "--clients"),
        (["chi2", "--effect", "0", "--epsilon", "1"], "--effect"),
        (["chi2", "--rows", "1", "--epsilon", "1"], "--rows"),
        (["entropy", "--width", "0.1", "--categories", "1"], "--categories"),
        (["heterogeneity", "--width", "0.1", "--dim", "0", "--epsilon", "1"], "--dim"),
    ],
)
def test_plan_cli_bad_input_exits_2(args: list[str], flag: str) -> None:
    out = CliRunner().invoke(app, ["plan", *args])
    assert out.exit_code == 2
    assert out.stderr.startswith("error: ") and flag in out.stderr and "Traceback" not in out.output


def test_gap_plan_alias_runs_the_same_code() -> None:
    args = ["--clients", "100000", "--alpha", "0.05", "--bound", "normal", "--json"]
    old = CliRunner().invoke(app, ["gap-plan", *args])
    new = CliRunner().invoke(app, ["plan", "gap", *args])
    assert old.exit_code == new.exit_code == 0
    assert old.stdout == new.stdout and "deprecated" in old.stderr


def test_every_analysis_warns_when_its_interval_covers_most_of_the_range() -> None:
    src = RandomSource(seed=8)
    rng = src.generator("test", "warn")
    var = fedstats.variance(_ages(20), fedstats.BitEncoding(0, 100), epsilon=1.0, randomness=src)
    g = np.repeat([0, 1], 10)
    gap = fedstats.measure_performance_gap(
        g, rng.integers(0, 2, 20).astype(float), epsilon=0.5, randomness=src
    )
    ent = fedstats.fed_entropy(
        rng.multinomial(5, np.full(4, 0.25), size=30), encoding_size=4, randomness=src
    )
    het = fedstats.heterogeneity(
        rng.uniform(0, 1, (10, 3)), epsilon=0.5, delta=1e-6, randomness=src
    )
    for res in (var, gap, ent, het):
        assert any("declared range" in w for w in res.warnings), (res.analysis, res.ci)
    # and a result whose interval is narrow says nothing
    big = fedstats.heterogeneity(
        rng.uniform(0, 1, (20_000, 3)), epsilon=4.0, delta=1e-6, randomness=src
    )
    assert big.ci is not None and big.ci[1] - big.ci[0] < 0.5 and big.warnings == ()


@settings(max_examples=10, deadline=None)
@given(width=st.one_of(st.floats(max_value=0.0, allow_nan=False), st.just(math.nan)))
def test_plan_cli_refuses_a_bad_width_with_exit_2(width: float) -> None:
    for sub in (
        ["mean", "--low", "0", "--high", "1", "--epsilon", "1"],
        ["entropy", "--categories", "4"],
    ):
        out = CliRunner().invoke(app, ["plan", sub[0], "--width", repr(width), *sub[1:]])
        assert out.exit_code == 2 and out.stderr.startswith("error: --width"), out.stderr
