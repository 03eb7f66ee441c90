"""A budget's spent epsilon reads exactly what its charges add up to (issue 42, readouts).

Four epsilon-1 tasks of the walkthrough (bitpushing mean, variance, performance gap: pure; heterogeneity:
calibrated in zCDP to epsilon 1, delta 1e-6) showed ``spent_epsilon 3.999999999999744``: the heterogeneity
task's charge was 0.999999999999744, the zCDP round trip of a calibration bisected only to a relative
1e-12 (``approx_dp_to_zcdp``). The calibration now bisects to adjacent floats, so the round trip gives the
target itself and the budget shows 4.0, on the server's ledger and the library's alike (one arithmetic).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from fedstats.privacy.analysis.zcdp import approx_dp_to_zcdp, zcdp_to_approx_dp
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.service.domain import ledger
from fedstats.service.store import open_store
from fedstats.wire.registry import privacy_loss_for
from fedstats.wire.tasks import normalize_task

TASKS: list[dict[str, Any]] = [
    {
        "analysis": "bitpushing-mean",
        "params": {"column": "v", "low": 0.0, "high": 1.0, "method": "weighted"},
        "privacy": {"epsilon": 1.0, "population": "clinic"},
    },
    {
        "analysis": "bitpushing-variance",
        "params": {"column": "v", "low": 0.0, "high": 8.0, "mean_fraction": 0.3},
        "privacy": {"epsilon": 1.0, "population": "clinic"},
    },
    {
        "analysis": "performance-gap",
        "params": {"mechanism": "R", "n_groups": 2, "pair": [0, 1]},
        "privacy": {"epsilon": 1.0, "population": "clinic"},
    },
    {
        "analysis": "heterogeneity",
        "params": {"column": "v", "dim": 4, "statistic": "dispersion"},
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "population": "clinic"},
        "secure_aggregation": {"max_session": 100},
    },
]


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(1.0, 1e-6), (0.5, 5e-7), (0.1, 1e-9), (0.7, 1e-6), (2.0, 1e-5), (3.0, 1e-6), (8.0, 1e-5)],
)
def test_the_zcdp_calibration_round_trip_is_exact(epsilon: float, delta: float) -> None:
    rho = approx_dp_to_zcdp(epsilon=epsilon, delta=delta)
    assert zcdp_to_approx_dp(rho=rho, delta=delta) == epsilon
    # still the largest such rho, to a few float steps: above it the conversion exceeds epsilon
    assert zcdp_to_approx_dp(rho=math.nextafter(rho, math.inf) * (1 + 1e-15), delta=delta) > epsilon


def test_four_epsilon_1_tasks_spend_exactly_4() -> None:
    losses = [privacy_loss_for(normalize_task({"cohort_size": 20, **t})) for t in TASKS]
    assert [loss.epsilon for loss in losses] == [1.0, 1.0, 1.0, 1.0]
    store = open_store("memory://")
    try:
        with store.transaction() as tx:
            for scope, name in (("population", "clinic"), ("analyst", "ana")):
                ledger.set_budget(tx, scope, name, epsilon=10.0, delta=1e-5, actor="root")
            for k, loss in enumerate(losses):
                charge = ledger.Charge.of(loss, f"task {k}")
                ledger.reserve(
                    tx, run_id=f"run-{k}", population="clinic", analyst="ana", charge=charge
                )
        with store.transaction(read_only=True) as tx:
            status = ledger.budget_status(tx, "population", "clinic")
    finally:
        store.close()
    assert status is not None
    assert status["spent_epsilon"] == 4.0, status
    assert status["remaining_epsilon"] == 6.0, status
    # the library's ledger charged the same losses reads the same (the one arithmetic)
    lib = PrivacyLedger(epsilon_budget=10.0, delta_budget=1e-5)
    for k, loss in enumerate(losses):
        lib.spend_loss(loss, label=f"task {k}")
    assert lib.total().epsilon == status["spent_epsilon"]
