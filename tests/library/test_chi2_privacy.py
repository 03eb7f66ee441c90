"""FED-chi^2 with central DP (discrete Gaussian on both sums): unbiased, honest p-values, calibrated noise.

Monte Carlo tolerances come from standard errors (fixed seeds); the sensitivities are checked on random
neighbouring tables; the ledger is charged once or not at all; the CLI says what was released.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fedstats.analyses.chi2 import fed_chi2
from fedstats.analyses.chi2.client import encode_marginals, encode_projection, expected_counts
from fedstats.analyses.chi2.estimator import projection_norms
from fedstats.analyses.chi2.privacy import plan_chi2_privacy
from fedstats.cli.app import app
from fedstats.engine.rounds import ClientBatch
from fedstats.errors import BudgetExceededError, DataError
from fedstats.privacy.analysis import zcdp_to_approx_dp
from fedstats.privacy.analysis.discrete_gaussian import (
    discrete_gaussian_rho,
    discrete_gaussian_variance,
)
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.randomness import RandomSource
from fedstats.sketches.stable import StableProjection

runner = CliRunner()


def _tables(n: int, seed: int, dependent: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, n)
    y = (
        (x + (rng.random(n) < 0.5) * rng.integers(0, 3, n)) % 3
        if dependent
        else rng.integers(0, 3, n)
    )
    t = np.zeros((n, 3, 3), dtype=np.int64)
    t[np.arange(n), x, y] = 1
    return t


@pytest.mark.slow
def test_the_noisy_statistic_is_unbiased() -> None:
    """The server subtracts tau = sigma_e^2 / 2: the mean over runs is the exact statistic (4 SE).

    400 clients, not 2,000: tau shrinks with the cohort faster than the sketch's own spread, so at 2,000
    clients (120 runs, 10 s) a server that forgot tau was off by only 1.1 SE and passed; at 400 (80 runs,
    3 s) it is off by about 22 SE, and the test below also checks that it would be caught. The released
    statistic is clipped at 0 (3 of these 80 runs): an upward bias of about 0.1 SE here.
    """
    t = _tables(400, 1, dependent=True)
    reps = 80
    runs = [
        fed_chi2(t, epsilon=1.0, delta=1e-6, null_replicates=99, randomness=RandomSource(s))
        for s in range(reps)
    ]
    stats = np.array([r.statistic for r in runs])
    exact = fed_chi2(t, randomness=RandomSource(0)).exact_statistic
    assert exact is not None
    se = stats.std(ddof=1) / math.sqrt(reps)
    assert abs(stats.mean() - exact) <= 4 * se, (stats.mean(), exact, se)
    # the power: without the subtraction of tau the mean would be off by far more than the tolerance
    tau = runs[0].details["privacy"]["noise_offset"]
    assert tau > 10 * se, (tau, se)


@pytest.mark.slow
def test_p_value_accounts_for_the_noise_under_independence() -> None:
    """At epsilon = 0.3 the noise dominates: the simulated p-value keeps the level (3 binomial SE), the
    paper's p-value, which reads the noisy statistic as exact, rejects far more often."""
    reps, level = 200, 0.05
    sketch, paper = [], []
    for s in range(reps):
        r = fed_chi2(
            _tables(1000, 1000 + s, dependent=False),
            epsilon=0.3,
            delta=1e-6,
            randomness=RandomSource(s),
            null_replicates=99,
        )
        assert r.details["privacy"]["noise_offset"] > 0
        assert r.p_value_sketch == r.p_value and r.p_value_method == "parametric-bootstrap"
        sketch.append(r.p_value)
        paper.append(r.p_value_paper)
    se = math.sqrt(level * (1 - level) / reps)
    assert np.mean(np.array(sketch) <= level) <= level + 3 * se
    assert np.mean(np.array(paper) < level) >= 0.2


def test_each_round_achieves_its_share_of_the_budget() -> None:
    plan = plan_chi2_privacy(epsilon=0.7, delta=1e-7, max_records=5, round1_fraction=0.3)
    assert plan.rho_marginals + plan.rho_projection == pytest.approx(plan.rho, rel=1e-12)
    assert zcdp_to_approx_dp(rho=plan.rho, delta=1e-7) <= 0.7 * (1 + 1e-9)
    r1 = discrete_gaussian_rho(sigma=plan.marginal_sigma, sensitivity=plan.marginal_sensitivity)
    assert r1 <= plan.rho_marginals * (1 + 1e-12)
    for c, f in ((0.3, 20), (2.0, 40), (50.0, 52)):
        k, sigma = plan.projection_release(c, f, 50)
        exact = 2.0**f * 2 * 5 * c + 2 * math.sqrt(50)
        sens = exact / 2**k + (math.sqrt(50) if k else 0.0)
        assert sigma <= 2.0**24
        assert discrete_gaussian_rho(sigma=sigma, sensitivity=sens) <= plan.rho_projection * (
            1 + 1e-12
        )
    assert plan.loss().epsilon <= 0.7 * (1 + 1e-9)


def test_discrete_gaussian_variance() -> None:
    for s in (0.3, 1.0, 4.0):
        k = np.arange(-200, 201, dtype=float)
        w = np.exp(-(k**2) / (2 * s * s))
        assert discrete_gaussian_variance(s) == pytest.approx(
            (k * k * w).sum() / w.sum(), rel=1e-12
        )
    assert discrete_gaussian_variance(0.3) < 0.09
    assert discrete_gaussian_variance(50.0) == 2500.0


@settings(max_examples=60, deadline=None)
@given(
    t_max=st.integers(1, 6),
    cells_a=st.lists(st.integers(0, 8), min_size=1, max_size=6),
    cells_b=st.lists(st.integers(0, 8), min_size=1, max_size=6),
    seed=st.integers(0, 2**32 - 1),
)
def test_neighbouring_reports_differ_by_at_most_the_sensitivity(
    t_max: int, cells_a: list[int], cells_b: list[int], seed: int
) -> None:
    """Two tables of at most T records: marginals within 2T, fixed-point projections within
    2^f 2 T c + 2 sqrt(l) (L2), c from the public projection and expected counts."""
    shape = (3, 3)

    def table(cells: list[int]) -> np.ndarray:
        t = np.zeros(9, dtype=np.int64)
        for c in cells[:t_max]:
            t[c] += 1
        return t.reshape(1, *shape)

    a, b = table(cells_a), table(cells_b)
    params_1 = {"shape": shape, "max_records": t_max}
    rng = np.random.default_rng(seed)
    ma = encode_marginals(ClientBatch({"table": a}, 0, 2), params_1, rng)
    mb = encode_marginals(ClientBatch({"table": b}, 0, 2), params_1, rng)
    assert np.linalg.norm((ma - mb).astype(float)) <= 2 * t_max + 1e-9
    vx = np.array([40, 25, 35])
    vy = np.array([10, 60, 30])
    ell, f = 20, 16
    proj = StableProjection(seed, ell, 2.0)
    sq = np.sqrt(expected_counts(vx, vy))
    params = {
        **params_1,
        "rows": [0, 1, 2],
        "cols": [0, 1, 2],
        "row_marginals": vx.tolist(),
        "col_marginals": vy.tolist(),
        "max_cell": 8,
        "offset": np.zeros(ell).tolist(),
        "seed": seed,
        "encoding_size": ell,
        "frac_bits": f,
        "clip": 1e6,
        "bits": 64,
    }
    qa = encode_projection(ClientBatch({"table": a}, 0, 2), params, rng).astype(float)
    qb = encode_projection(ClientBatch({"table": b}, 0, 2), params, rng).astype(float)
    c = projection_norms(proj, sq)[2]
    assert np.linalg.norm(qa - qb) <= 2.0**f * 2 * t_max * c + 2 * math.sqrt(ell)


def test_clients_refuse_tables_above_max_records() -> None:
    t = np.zeros((1, 2, 2), dtype=np.int64)
    t[0, 0, 0] = 3
    with pytest.raises(DataError, match="max_records=2"):
        encode_marginals(
            ClientBatch({"table": t}, 0, 1),
            {"shape": (2, 2), "max_records": 2},
            np.random.default_rng(0),
        )


def test_the_ledger_is_charged_once_and_a_refusal_charges_nothing() -> None:
    t = _tables(500, 2, dependent=True)
    ledger = PrivacyLedger(epsilon_budget=1.2, delta_budget=1e-5)  # two runs compose above 1.2
    r = fed_chi2(t, epsilon=1.0, delta=1e-6, ledger=ledger, randomness=RandomSource(1))
    assert r.epsilon is not None and r.epsilon <= 1.0 * (1 + 1e-9) and r.delta == 1e-6
    assert len(ledger.entries) == 1
    assert ledger.entries[0].rho == pytest.approx(r.details["privacy"]["rho"])
    with pytest.raises(BudgetExceededError):
        fed_chi2(t, epsilon=1.0, delta=1e-6, ledger=ledger, randomness=RandomSource(2))
    assert len(ledger.entries) == 1
    # without epsilon nothing is charged
    fed_chi2(t, ledger=ledger, randomness=RandomSource(3))
    assert len(ledger.entries) == 1


def test_cli_chi2_with_epsilon_says_what_it_released() -> None:
    args = ["--seed", "1", "--json", "chi2", "adult", "--x", "sex", "--y", "income"]
    args += ["--clients", "500", "--no-secure", "--epsilon", "1", "--delta", "1e-6"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    assert 0 < d["epsilon"] <= 1.0 and d["delta"] == 1e-6
    assert d["privacy"].startswith("(1, 1e-06)-DP: central discrete Gaussian")
    assert d["details"]["privacy"]["max_records"] >= 1
    text = runner.invoke(app, args[:2] + args[3:])
    assert text.exit_code == 0 and "Monte Carlo" in text.stdout


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--epsilon", "1"], "--epsilon/--delta"),
        (["--epsilon", "1", "--delta", "1e-6", "--test", "g"], "--epsilon"),
        (["--max-records", "3"], "--max-records"),
        (["--epsilon", "-1", "--delta", "1e-6"], "--epsilon"),
        (
            ["--epsilon", "1", "--delta", "1e-6", "--max-records", "1", "--clients", "50"],
            "max_records",
        ),
    ],
)
def test_cli_chi2_privacy_errors_are_one_line(extra: list[str], flag: str) -> None:
    res = runner.invoke(app, ["chi2", "adult", "--x", "sex", "--y", "income", *extra])
    assert res.exit_code == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and flag in lines[0], lines
