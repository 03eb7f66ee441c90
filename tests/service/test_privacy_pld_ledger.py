"""One arithmetic, three sides: the library's ledger, the device's budget and the server's ledger report the
tightest of basic composition, zCDP and privacy-loss-distribution (PLD) composition.

The worked example of docs/privacy.md: pure randomized-response releases at epsilon 0.1, composed at the
delta target 1e-6 (``DEFAULT_DELTA_TARGET``), compose to about 4.77 where basic composition gives 10.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fedstats.client import LocalBudget
from fedstats.errors import BudgetExceededError, ParameterError
from fedstats.privacy.analysis.loss import MechanismSpec, PrivacyLoss
from fedstats.privacy.analysis.pld import pld_epsilon
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.service.domain import ledger as server
from fedstats.service.store import Store, open_store
from service_helpers import pg_reachable, pg_schema

RR = MechanismSpec("randomized_response", 0.1)
RR_LOSS = PrivacyLoss(0.1, 0.0, None, (RR,))


def test_ledger_reports_the_pld_where_it_is_tighter() -> None:
    ledger = PrivacyLedger()
    for i in range(100):
        ledger.spend_loss(RR_LOSS, label=f"rr {i}")
    total = ledger.total()
    assert total.delta == pytest.approx(1e-6)
    assert total.epsilon == pytest.approx(pld_epsilon([RR] * 100, delta=total.delta), rel=1e-12)
    assert 4.77 < total.epsilon < 4.78  # basic composition: 10
    assert ledger.as_dict()["entries"][0]["mechanisms"] == [RR.as_dict()]
    assert "randomized response (0.1)" in ledger.explain()


def test_ledger_keeps_basic_composition_where_the_pld_is_not_tighter() -> None:
    ledger = PrivacyLedger()
    ledger.spend(epsilon=0.1, label="pure", mechanisms=[RR])  # two releases: the PLD gains nothing
    ledger.spend(epsilon=0.1, label="pure again", mechanisms=[RR])
    assert ledger.total() == PrivacyLoss(0.2, 0.0, None)  # basic, at delta 0 (the target not spent)
    pure = PrivacyLedger(delta_target=0.0)  # no delta target: pure releases compose by their sum
    for i in range(100):
        pure.spend_loss(RR_LOSS, label=f"rr {i}")
    assert pure.total().epsilon == pytest.approx(10.0) and pure.total().delta == 0.0


def test_undescribed_releases_add_to_the_pld_of_the_described_ones() -> None:
    ledger = PrivacyLedger()
    for i in range(50):
        ledger.spend_loss(RR_LOSS, label=f"rr {i}")
    ledger.spend(epsilon=0.5, delta=1e-7, label="an undescribed release")
    # composed at the delta target 1e-6: the undescribed release keeps its 1e-7, the PLD the rest
    want = pld_epsilon([RR] * 50, delta=1e-6 - 1e-7) + 0.5
    assert ledger.total().epsilon == pytest.approx(want, rel=1e-12)
    assert ledger.total().delta == pytest.approx(1e-6)


def test_parallel_composition_charges_each_client_only_its_releases() -> None:
    ledger = PrivacyLedger()
    for i in range(40):
        ledger.spend_loss(RR_LOSS, label=f"a {i}", clients=range(0, 10))
    for i in range(60):
        ledger.spend_loss(RR_LOSS, label=f"b {i}", clients=range(10, 20))
    assert ledger.total().epsilon == pytest.approx(pld_epsilon([RR] * 60, delta=1e-6), rel=1e-12)


def test_overlapping_client_sets_charge_the_clients_in_both() -> None:
    ledger = PrivacyLedger()
    for i in range(40):
        ledger.spend_loss(RR_LOSS, label=f"a {i}", clients=range(0, 10))
    for i in range(30):
        ledger.spend_loss(RR_LOSS, label=f"b {i}", clients=np.array([7, 8, 30]))
    ledger.spend(epsilon=0.05, label="undescribed", clients=range(8, 9))
    # client 8 has all of them; clients 7 (70 described) and 30 (30) have fewer; the undescribed pure
    # release composes as randomized response at its epsilon (it dominates every 0.05-DP mechanism)
    want = pld_epsilon([RR] * 70 + [MechanismSpec("randomized_response", 0.05)], delta=1e-6)
    assert ledger.total().epsilon == pytest.approx(want, rel=1e-8)


def test_a_budget_admits_what_the_pld_composes_within_it() -> None:
    ledger = PrivacyLedger(epsilon_budget=5.0, delta_budget=1e-5)
    for i in range(100):  # 10 by basic composition: all refused after the 50th without the PLD
        ledger.spend_loss(RR_LOSS, label=f"rr {i}")
    with pytest.raises(BudgetExceededError, match="refused"):
        for i in range(100):
            ledger.spend_loss(RR_LOSS, label=f"more {i}")
    assert ledger.total().epsilon <= 5.0 * (1 + 1e-12)


def test_device_budget_composes_as_the_ledger_and_keeps_mechanisms(tmp_path: Path) -> None:
    path = tmp_path / "budget.json"
    budget = LocalBudget(path, epsilon=5.0, delta=1e-5)
    for i in range(100):
        budget.reserve(f"run-{i}", RR_LOSS)
    budget.spend("run-0", RR_LOSS)
    ref = PrivacyLedger()
    for i in range(100):
        ref.spend_loss(RR_LOSS, label=f"run {i}")
    assert budget.total() == ref.total()
    again = LocalBudget(path, epsilon=5.0, delta=1e-5)
    assert again.total() == ref.total()
    assert again.charges["run-0"]["mechanisms"] == [RR.as_dict()]
    # a file written before mechanisms were kept: its pure charges compose as randomized response at
    # their epsilon (which dominates every epsilon-DP mechanism), so to the same total
    data = json.loads(path.read_text())
    for c in data["charges"].values():
        del c["mechanisms"]
    path.write_text(json.dumps(data))
    old = LocalBudget(path, epsilon=50.0, delta=1e-5)
    assert old.total() == ref.total()
    # without a delta target the device composes pure charges by their sum
    assert LocalBudget(path, epsilon=50.0, delta=1e-5, delta_target=0.0).spent() == (
        pytest.approx(10.0),
        0.0,
    )


def test_bad_mechanisms_are_refused_naming_them(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="mechanisms"):
        PrivacyLedger().spend(epsilon=0.1, label="x", mechanisms=[0.5])  # type: ignore[list-item]
    path = tmp_path / "budget.json"
    LocalBudget(path, epsilon=5.0, delta=1e-5).reserve("run", RR_LOSS)
    data = json.loads(path.read_text())
    data["charges"]["run"]["mechanisms"] = [{"kind": "laplace", "parameter": -1.0}]
    path.write_text(json.dumps(data))
    with pytest.raises(ParameterError, match="budget file"):
        LocalBudget(path, epsilon=5.0, delta=1e-5)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "postgresql":
        reason = pg_reachable()
        if reason is not None:
            pytest.skip(reason)
        with pg_schema() as url:
            st = open_store(url)
            yield st
            st.close()
    else:
        st = open_store(f"sqlite:///{tmp_path / 'l.db'}")
        yield st
        st.close()


def test_server_ledger_stores_mechanisms_and_composes_as_the_library(store: Store) -> None:
    with store.transaction() as s:
        for scope, name in (("population", "pop"), ("analyst", "ana")):
            server.set_budget(s, scope, name, epsilon=5.0, delta=1e-5, actor="admin")
    for i in range(60):  # basic composition would refuse the 51st
        with store.transaction() as s:
            server.reserve(
                s,
                run_id=f"run-{i}",
                population="pop",
                analyst="ana",
                charge=server.Charge.of(RR_LOSS, f"rr {i}"),
            )
    with store.transaction() as s:
        server.reserve(
            s,
            run_id="undescribed",
            population="pop",
            analyst="ana",
            charge=server.Charge(0.1, 1e-8, None, "a charge without mechanisms (an old row)"),
        )
        status = server.budget_status(s, "population", "pop")
    ref = PrivacyLedger()
    for i in range(60):
        ref.spend_loss(RR_LOSS, label=f"run {i}")
    ref.spend(epsilon=0.1, delta=1e-8, label="undescribed")
    assert status is not None
    assert (status["spent_epsilon"], status["spent_delta"]) == (
        ref.total().epsilon,
        ref.total().delta,
    )
    assert status["spent_epsilon"] < 5.0 and status["charges"] == 61
    with pytest.raises(BudgetExceededError, match="pop"), store.transaction() as s:
        server.reserve(
            s,
            run_id="too-much",
            population="pop",
            analyst="ana",
            charge=server.Charge(2.0, 0.0, None, "over the budget"),
        )
    assert not math.isnan(status["remaining_epsilon"])
