"""Tight accounting end to end (issue 43, item 4): an analysis describes its releases, and the library's
ledger, the device's budget and the server's ledger compose a task's runs by their privacy loss
distributions at the delta target, with one arithmetic.

A bit-pushing mean at epsilon 0.1 is one binary randomized response per record. 100 runs compose to 4.7746
at delta 1e-6 (basic composition: 10), so a budget of epsilon 5 admits 108 runs instead of 50, on each of
the three sides, which report the same spent epsilon after every run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fedstats.client import LocalBudget
from fedstats.errors import BudgetExceededError
from fedstats.privacy.analysis.loss import MechanismSpec, PrivacyLoss
from fedstats.privacy.analysis.pld import pld_epsilon
from fedstats.privacy.ledger import DEFAULT_DELTA_TARGET, PrivacyLedger
from fedstats.service.domain import ledger as server
from fedstats.service.store import Store, open_store
from fedstats.wire.registry import privacy_loss_for
from fedstats.wire.tasks import normalize_task

EPSILON, DELTA = 5.0, 1e-5  # each side's budget
RR = MechanismSpec("randomized_response", 0.1)


def _task(analysis: str, params: dict[str, Any], privacy: dict[str, Any]) -> dict[str, Any]:
    return normalize_task(
        {
            "analysis": analysis,
            "params": params,
            "privacy": {**privacy, "population": "pop"},
            "cohort_size": 100,
            "min_clients": 10,
            "deadlines": {"checkin": 60.0, "round": 60.0},
        }
    )


BP = {"column": "value", "low": -1.0, "high": 1.0, "resolution": 1 / 64}


@pytest.fixture
def store() -> Iterator[Store]:
    st = open_store("memory://")
    yield st
    st.close()


def _fill(spend: Callable[[int], float]) -> list[float]:
    """Charge runs until the budget refuses one; the spent epsilon after each accepted run."""
    spent: list[float] = []
    for i in range(200):
        try:
            spent.append(spend(i))
        except BudgetExceededError:
            return spent
    raise AssertionError("the budget never refused a run")


def test_library_device_and_server_admit_twice_the_runs_with_one_arithmetic(store: Store) -> None:
    loss = privacy_loss_for(_task("bitpushing-mean", BP, {"epsilon": 0.1}))
    assert loss.mechanisms == (RR,)  # the analysis describes its release
    assert (loss.epsilon, loss.delta, loss.rho) == (pytest.approx(0.1, rel=1e-12), 0.0, None)

    library = PrivacyLedger(epsilon_budget=EPSILON, delta_budget=DELTA)

    def lib(i: int) -> float:
        library.spend_loss(loss, label=f"run {i}")
        return library.total().epsilon

    device = LocalBudget(None, epsilon=EPSILON, delta=DELTA)

    def dev(i: int) -> float:
        device.reserve(f"run-{i}", loss)
        return device.spent()[0]

    with store.transaction() as tx:
        for scope, name in (("population", "pop"), ("analyst", "ana")):
            server.set_budget(tx, scope, name, epsilon=EPSILON, delta=DELTA, actor="admin")

    def srv(i: int) -> float:
        with store.transaction() as tx:
            charge = server.Charge.of(loss, f"run {i}")
            server.reserve(tx, run_id=f"run-{i}", population="pop", analyst="ana", charge=charge)
            status = server.budget_status(tx, "population", "pop")
        assert status is not None
        return float(status["spent_epsilon"])

    sides = [_fill(lib), _fill(dev), _fill(srv)]
    assert sides[0] == sides[1] == sides[2]  # the same number after every run, on the three sides
    spent = sides[0]
    assert len(spent) == 108  # basic composition: 50
    assert spent[99] == pytest.approx(4.7746, abs=1e-4)  # 100 runs (10 by basic composition)
    assert spent[-1] == pytest.approx(
        pld_epsilon([RR] * 108, delta=DEFAULT_DELTA_TARGET), rel=1e-12
    )
    assert (
        spent[0] == loss.epsilon
    )  # one run: its own epsilon, at delta 0 (the target is not spent for nothing)
    assert library.total().delta == device.spent()[1] == DEFAULT_DELTA_TARGET


def test_the_delta_target_is_capped_by_the_budget_and_can_be_turned_off(store: Store) -> None:
    loss = privacy_loss_for(_task("bitpushing-mean", BP, {"epsilon": 0.1}))
    pure = PrivacyLedger(epsilon_budget=EPSILON, delta_budget=0.0)  # a pure-DP budget
    device = LocalBudget(None, epsilon=EPSILON, delta=DELTA, delta_target=0.0)
    for i in range(50):
        pure.spend_loss(loss, label=f"run {i}")
        device.reserve(f"run-{i}", loss)
    assert pure.total() == PrivacyLoss(pytest.approx(5.0), 0.0, None)  # type: ignore[arg-type]
    assert device.spent() == (pytest.approx(5.0), 0.0)
    with pytest.raises(BudgetExceededError):
        pure.spend_loss(loss, label="one more")
    # a budget's delta below the target caps it: composed at 1e-8, 100 runs take 5.59, not 4.77
    small = PrivacyLedger(delta_budget=1e-8)
    for i in range(100):
        small.spend_loss(loss, label=f"run {i}")
    assert small.total().delta == 1e-8
    assert small.total().epsilon == pytest.approx(pld_epsilon([RR] * 100, delta=1e-8), rel=1e-12)
    with store.transaction() as tx:
        for scope, name in (("population", "pure"), ("analyst", "ana")):
            server.set_budget(tx, scope, name, epsilon=EPSILON, delta=0.0, actor="admin")
    for i in range(50):
        with store.transaction() as tx:
            charge = server.Charge.of(loss, f"run {i}")
            server.reserve(tx, run_id=f"p-{i}", population="pure", analyst="ana", charge=charge)
    with pytest.raises(BudgetExceededError, match="pure"), store.transaction() as tx:
        server.reserve(
            tx, run_id="p-50", population="pure", analyst="ana", charge=server.Charge.of(loss, "x")
        )


@pytest.mark.parametrize(
    ("analysis", "params", "privacy", "kinds"),
    [
        (
            "bitpushing-mean",
            {**BP, "bits_per_client": 3},
            {"epsilon": 0.6},
            ["randomized_response"] * 3,
        ),
        ("bitpushing-variance", BP, {"epsilon": 1.0}, ["randomized_response"]),
        ("performance-gap", {"mechanism": "R"}, {"epsilon": 2.0}, ["randomized_response"]),
        ("performance-gap", {"mechanism": "L"}, {"epsilon": 2.0}, ["randomized_response"]),
    ],
)
def test_every_pure_dp_task_describes_its_releases(
    analysis: str, params: dict[str, Any], privacy: dict[str, Any], kinds: list[str]
) -> None:
    loss = privacy_loss_for(_task(analysis, params, privacy))
    assert [m.kind for m in loss.mechanisms] == kinds
    # the description is valid for the loss: the releases' pure epsilons add up to it
    assert sum(m.parameter for m in loss.mechanisms) == pytest.approx(loss.epsilon, rel=1e-9)
    assert loss.delta == 0.0
