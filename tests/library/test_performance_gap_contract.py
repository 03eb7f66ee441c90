"""The performance gap on the issue-12 contract: client/protocol/api split, ledger, aggregate route.

The aggregate form of M_R's round is compared with the per-client encoder by the two-sample test of
``tests/library/test_aggregate_route.py``: means (Welch z) and variances (log variance ratio) of every coordinate
of the round's sum at |z| < 3.89 (alpha = 1e-4), with the power of R = 45,000 runs per side (28,125
aggregate runs beside 112,500 per-client ones: the same 1 / R_agg + 1 / R_per), so that a 5% variance
error gives |z| ~ 5.2 and is caught (``make test``); ``make test-fast`` runs R = 5,000, where a 15%
variance error gives |z| ~ 4.9 (a wrong probability or a misassembled sum is caught by either).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from fedstats.analyses.performance_gap import (
    GapMechanism,
    PerformanceGapResult,
    measure_performance_gap,
    performance_gap_protocol,
)
from fedstats.analyses.performance_gap.client import (
    aggregate_gap_report,
    encode_gap_report,
    outcome_probabilities,
)
from fedstats.analyses.performance_gap.protocol import report_params
from fedstats.cli.app import app
from fedstats.engine import Engine, InMemoryPopulation
from fedstats.engine.rounds import ClientBatch, InputHistogram
from fedstats.errors import BudgetExceededError, ParameterError
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.randomness import RandomSource

Z = 3.89  # two-sided alpha = 1e-4


def _same_distribution(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(z of the mean difference, z of the log variance ratio) of two samples."""
    z_mean = (a.mean() - b.mean()) / math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    z_var = math.log(a.var(ddof=1) / b.var(ddof=1)) / math.sqrt(2 / (a.size - 1) + 2 / (b.size - 1))
    return z_mean, z_var


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    groups = np.repeat(np.array(["a", "b"]), [300, 200])
    rates = np.where(groups == "a", rng.uniform(0.5, 1.0, 500), rng.uniform(0.2, 0.8, 500))
    return groups, rates


def test_client_module_imports_no_heavy_library() -> None:
    code = (
        "import sys, fedstats.analyses.performance_gap.client\n"
        "bad = [m for m in ('scipy.stats', 'pandas', 'pyarrow', 'typer', 'rich', 'dask') "
        "if m in sys.modules]\nprint(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("sizes_known", [True, False])
def test_protocol_returns_a_result_that_says_whether_exact_sizes_are_released(
    sizes_known: bool,
) -> None:
    mech = GapMechanism("R", 1.0, 1.5)
    g = np.repeat([0, 1], [400, 600])
    v = np.where(g == 0, 0.4, -0.2)
    sizes = [400.0, 600.0] if sizes_known else None
    res = Engine(randomness=RandomSource(4)).run(
        performance_gap_protocol(mech, sizes=sizes, labels=["x", "y"], scale="signed"),
        InMemoryPopulation({"group": g, "value": v}),
    )
    assert isinstance(res, PerformanceGapResult)
    assert res.analysis == "performance_gap" and res.pair == ("x", "y")
    assert res.epsilon == mech.privacy_loss().epsilon == res.true_loss
    assert res.exact_group_sizes_released is sizes_known
    assert res.estimate_sizes is not sizes_known
    if sizes_known:
        assert res.group_sizes == [400.0, 600.0]
        assert "not privately" in res.details["sizes"]
    else:
        assert res.group_sizes != [400.0, 600.0]
    doc = res.to_dict()
    assert doc["exact_group_sizes_released"] is sizes_known
    json.dumps(doc)


def test_privacy_loss_is_the_true_loss_not_the_papers() -> None:
    m = GapMechanism("R", 1.0, 1.0)
    assert m.privacy_loss().epsilon == pytest.approx(1.0 + math.log(2 * math.e / (1 + math.e)))
    assert m.privacy_loss().epsilon > m.paper_loss()
    assert math.isinf(GapMechanism("L", 0.5, 1.0, k=3.0).privacy_loss().epsilon)


def test_ledger_is_charged_the_mechanisms_true_loss() -> None:
    groups, rates = _data()
    ledger = PrivacyLedger()
    res = measure_performance_gap(
        groups,
        rates,
        mechanism="R",
        epsilon=1.0,
        accounting="paper",
        randomness=RandomSource(1),
        ledger=ledger,
    )
    assert len(ledger.entries) == 1
    assert ledger.entries[0].epsilon == res.epsilon == res.true_loss
    assert res.epsilon > 1.0  # the paper's split costs more than its budget


def test_refused_charge_runs_nothing() -> None:
    groups, rates = _data()
    ledger = PrivacyLedger(epsilon_budget=1.0)
    ledger.spend(epsilon=0.5, label="earlier")
    engine = Engine(randomness=RandomSource(2))
    with pytest.raises(BudgetExceededError):
        measure_performance_gap(
            groups, rates, mechanism="L", epsilon=1.0, engine=engine, ledger=ledger
        )
    assert len(ledger.entries) == 1 and len(engine.log) == 0


def test_a_mechanism_that_is_not_dp_cannot_be_charged() -> None:
    groups, rates = _data()
    ledger = PrivacyLedger()
    # the paper's M_L opt. uses k != 2: not epsilon-LDP for any finite epsilon
    with pytest.raises(ParameterError, match="loss"):
        measure_performance_gap(
            groups, rates, mechanism="L", epsilon=1.0, accounting="paper", ledger=ledger
        )
    assert len(ledger.entries) == 0


def test_randomness_alone_reproduces_a_run_and_truth_is_the_datas() -> None:
    groups, rates = _data()
    a, b = (
        measure_performance_gap(
            groups, rates, mechanism="L", epsilon=2.0, randomness=RandomSource(9)
        )
        for _ in range(2)
    )
    assert a.gap == b.gap
    assert a.truth == pytest.approx(rates[groups == "a"].mean() - rates[groups == "b"].mean())
    assert a.release_note is not None and "not for release" in a.release_note


def test_outcome_probabilities_match_the_encoder() -> None:
    params = report_params(GapMechanism("R", 0.7, 1.3, n_groups=3))
    g = np.array([0, 2, 1])
    v = np.array([0.5, -1.0, 0.0])
    probs = outcome_probabilities(g, v, params)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-12)
    n = 200_000
    rng = RandomSource(8).generator("encode")
    for row in range(3):
        batch = ClientBatch({"group": np.full(n, g[row]), "value": np.full(n, v[row])}, 0, n)
        rep = encode_gap_report(batch, params, rng)
        h = rep[:, 3:6].argmax(axis=1)
        bit = (rep[np.arange(n), h] > 0).astype(int)
        freq = np.bincount(2 * h + bit, minlength=6) / n
        se = np.sqrt(probs[row] * (1 - probs[row]) / n)
        assert np.all(np.abs(freq - probs[row]) < Z * se + 1e-12)


@pytest.mark.parametrize("runs", [pytest.param(45_000, marks=pytest.mark.slow), 5_000])
def test_aggregate_form_has_the_per_client_distribution(runs: int) -> None:
    mech = GapMechanism("R", 0.9, 1.2, n_groups=3)
    params = report_params(mech)
    groups = np.array([0, 0, 1, 2, 1])
    values = np.array([0.6, -0.3, 1.0, -1.0, 0.2])
    counts = np.array([2, 1, 3, 1, 2])
    rs = RandomSource(17)
    # ``runs`` per side in power: the z statistics' variances go as 1 / R_agg + 1 / R_per = 2 / runs, with
    # R_agg = 5 runs / 8 aggregate calls (the loop, about 0.15 ms each) and R_per = 4 R_agg per-client
    # runs (vectorized, nine clients each: cheap)
    r_agg, r_per = 5 * runs // 8, 5 * runs // 2
    assert 1 / r_agg + 1 / r_per == pytest.approx(2 / runs, rel=1e-3)
    # per-client side: every run is one batch of the histogram's clients
    g_cl = np.tile(np.repeat(groups, counts), r_per)
    v_cl = np.tile(np.repeat(values, counts), r_per)
    rep = encode_gap_report(
        ClientBatch({"group": g_cl, "value": v_cl}, 0, g_cl.size),
        params,
        rs.generator("per-client"),
    )
    per_client = rep.reshape(r_per, int(counts.sum()), -1).sum(axis=1)
    hist = InputHistogram({"group": groups, "value": values}, counts, int(counts.sum()))
    rng = rs.generator("aggregate")
    agg = np.stack([aggregate_gap_report(hist, params, rng) for _ in range(r_agg)])
    assert agg.shape[1:] == per_client.shape[1:]
    assert (agg[:, -1] == 0).all() and (per_client[:, -1] == 0).all()  # M_R never clips
    for j in range(agg.shape[1] - 1):
        zm, zv = _same_distribution(per_client[:, j].astype(float), agg[:, j].astype(float))
        assert abs(zm) < Z and abs(zv) < Z, (j, zm, zv)


def test_cli_aggregate_route_runs_a_trillion_clients_in_about_a_second(tmp_path: Path) -> None:
    groups, rates = _data()
    table = tmp_path / "gap.csv"
    pd.DataFrame({"group": groups, "rate": rates}).to_csv(table, index=False)
    args = ["--seed", "3", "--json", "gap", str(table), "--group-column", "group", "--epsilon", "1"]
    args += ["--value-column", "rate", "--clients", "1000000000000", "--backend", "aggregate"]
    t0 = time.perf_counter()
    res = CliRunner().invoke(app, args)
    seconds = time.perf_counter() - t0
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["n_clients"] == 10**12
    assert seconds < 20  # about a second on an idle core; a loaded shared machine is slower
    # at 1e12 clients the estimate sits on the simulated clients' gap
    assert abs(doc["gap"] - doc["true_gap"]) < 5 * doc["standard_error"] + 1e-12
    assert doc["standard_error"] < 1e-4


def test_aggregate_route_refuses_m_l() -> None:
    groups, rates = _data()
    from fedstats.engine.aggregate import AggregateBackend

    engine = Engine(randomness=RandomSource(5), backend=AggregateBackend())
    with pytest.raises(ParameterError, match="serial"):
        measure_performance_gap(
            groups, rates, mechanism="L", epsilon=1.0, n_clients=10_000, engine=engine
        )
