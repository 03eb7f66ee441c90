"""The persistent ledger: concurrent reservations cannot double-spend (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from fedstats.errors import BudgetExceededError
from fedstats.service import ledger
from fedstats.service.models import Audit, Budget, LedgerCharge
from fedstats.service.runs import create_run
from fedstats.service.store import Store, open_store
from fedstats.service.tasks import create_task
from service_helpers import pg_reachable, pg_schema

TASK = {
    "analysis": "bitpushing-mean",
    "params": {"column": "v", "low": 0.0, "high": 15.0, "method": "weighted"},
    "privacy": {"epsilon": 0.3, "population": "pop"},
    "cohort_size": 100,
}


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


def _budgets(store: Store, eps: float) -> str:
    with store.session() as s, s.begin():
        s.add(Budget(scope="population", name="pop", epsilon=eps, delta=0.0))
        for a in ("a0", "a1"):
            s.add(Budget(scope="analyst", name=a, epsilon=10.0, delta=0.0))
        tid, _ = create_task(s, TASK, "admin")
    return tid


def test_concurrent_reservations_never_exceed_the_budget(store: Store) -> None:
    tid = _budgets(store, 1.0)  # room for 3 runs of epsilon 0.3
    barrier = threading.Barrier(12)
    outcomes: list[str] = []

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            with store.session() as s, s.begin():
                create_run(s, tid, f"a{i % 2}")
            outcomes.append("ok")
        except BudgetExceededError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert outcomes.count("ok") == 3
    refused = [o for o in outcomes if o != "ok"]
    assert len(refused) == 9
    assert all("spent epsilon=0.9" in o and "remaining epsilon=0.1" in o for o in refused)
    with store.session() as s:
        charges = s.execute(select(LedgerCharge)).scalars().all()
        st = ledger.budget_status(s, "population", "pop")
    assert len(charges) == 3 and {c.status for c in charges} == {"reserved"}
    assert st is not None and st["spent_epsilon"] == pytest.approx(0.9)


def test_spend_and_release_are_idempotent_and_audited(store: Store) -> None:
    tid = _budgets(store, 1.0)
    with store.session() as s, s.begin():
        r1 = create_run(s, tid, "a0")
        r2 = create_run(s, tid, "a0")
    with store.session() as s, s.begin():
        assert ledger.spend(s, r1) is True
        assert ledger.spend(s, r1) is False
        assert ledger.release(s, r2, reason="test") is True
        assert ledger.release(s, r2) is False
        assert ledger.release(s, r1) is False  # a spent charge is never given back
    with store.session() as s:
        st = ledger.budget_status(s, "population", "pop")
        acts = [a.action for a in s.execute(select(Audit).order_by(Audit.id)).scalars()]
    assert st is not None and st["spent_epsilon"] == pytest.approx(0.3)
    assert acts.count("reserve") == 2 and acts.count("spend") == 1 and acts.count("release") == 1


def test_missing_budget_refuses(store: Store) -> None:
    with store.session() as s, s.begin():
        tid, _ = create_task(s, TASK, "admin")
    with pytest.raises(BudgetExceededError, match="no privacy budget for population 'pop'"):
        with store.session() as s, s.begin():
            create_run(s, tid, "a0")
