"""The persistent ledger: concurrent reservations cannot double-spend (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedstats.errors import BudgetExceededError
from fedstats.service.domain import ledger
from fedstats.service.domain.runs import create_run
from fedstats.service.domain.tasks import create_task
from fedstats.service.store import Store, open_store
from fedstats.wire.enrollment import init_authority, issue_analyst
from fedstats.wire.tasks import sign_task
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


def _signed(store: Store) -> dict[str, object]:
    """``TASK`` signed by an analyst of an authority the store trusts."""
    import tempfile

    from fedstats.service.domain.operators import trust_authority

    root = Path(tempfile.mkdtemp(prefix="fedstats-ledger-"))
    trust_authority(store, init_authority(root / "authority"))
    return sign_task(TASK, issue_analyst(root / "authority", "ana", ["pop"], root / "ana.json"))


def _budgets(store: Store, eps: float) -> str:
    envelope = _signed(store)
    with store.transaction() as s:
        s.put_budget("population", "pop", eps, 0.0)
        for a in ("a0", "a1"):
            s.put_budget("analyst", a, 10.0, 0.0)
        tid, _ = create_task(s, envelope, "admin")
    return tid


def test_concurrent_reservations_never_exceed_the_budget(store: Store) -> None:
    tid = _budgets(store, 1.0)  # room for 3 runs of epsilon 0.3
    barrier = threading.Barrier(12)
    outcomes: list[str] = []

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            with store.transaction() as s:
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
    with store.transaction(read_only=True) as s:
        charges = s.charges_on("population", "pop")
        st = ledger.budget_status(s, "population", "pop")
    assert len(charges) == 3 and {c.status for c in charges} == {"reserved"}
    assert st is not None and st["spent_epsilon"] == pytest.approx(0.9)


def test_spend_and_release_are_idempotent_and_audited(store: Store) -> None:
    tid = _budgets(store, 1.0)
    with store.transaction() as s:
        r1 = create_run(s, tid, "a0")
        r2 = create_run(s, tid, "a0")
    with store.transaction() as s:
        assert ledger.spend(s, r1) is True
        assert ledger.spend(s, r1) is False
        assert ledger.release(s, r2, reason="test") is True
        assert ledger.release(s, r2) is False
        assert ledger.release(s, r1) is False  # a spent charge is never given back
    with store.transaction(read_only=True) as s:
        st = ledger.budget_status(s, "population", "pop")
        acts = [a.action for a in s.audit_log(None, 1000)]
    assert st is not None and st["spent_epsilon"] == pytest.approx(0.3)
    assert acts.count("reserve") == 2 and acts.count("spend") == 1 and acts.count("release") == 1


def test_missing_budget_refuses(store: Store) -> None:
    envelope = _signed(store)
    with store.transaction() as s:
        tid, _ = create_task(s, envelope, "admin")
    with pytest.raises(BudgetExceededError, match="no privacy budget for population 'pop'"):
        with store.transaction() as s:
            create_run(s, tid, "a0")


def test_a_released_charge_cannot_be_spent(store: Store) -> None:
    """spend() of a released charge is refused: it would count again with no budget check."""
    tid = _budgets(store, 0.6)  # room for 2 runs of epsilon 0.3
    with store.transaction() as s:
        r1 = create_run(s, tid, "a0")
    with store.transaction() as s:
        assert ledger.release(s, r1, reason="test") is True
    with store.transaction() as s:  # the budget is used by two other runs meanwhile
        create_run(s, tid, "a0")
        create_run(s, tid, "a1")
    with pytest.raises(BudgetExceededError, match=f"run '{r1}'.*was released"):
        with store.transaction() as s:
            ledger.spend(s, r1)
    with store.transaction(read_only=True) as s:
        c = s.charge_of(r1)
        st = ledger.budget_status(s, "population", "pop")
        acts = [a.action for a in s.audit_log(None, 1000)]
    assert c is not None and c.status == "released"
    assert st is not None and st["spent_epsilon"] == pytest.approx(0.6) and st["charges"] == 2
    assert "spend" not in acts


def test_a_budget_below_what_is_spent_is_refused(store: Store) -> None:
    tid = _budgets(store, 1.0)
    with store.transaction() as s:
        r1 = create_run(s, tid, "a0")
        create_run(s, tid, "a1")
    with store.transaction() as s:
        ledger.spend(s, r1)
    with pytest.raises(BudgetExceededError) as info:  # 0.6 is reserved or spent
        with store.transaction() as s:
            ledger.set_budget(s, "population", "pop", epsilon=0.5, delta=0.0, actor="admin")
    msg = str(info.value)
    assert "population 'pop'" in msg and "requested epsilon=0.5" in msg
    assert "already spent or reserved: epsilon=0.6" in msg
    with store.transaction(read_only=True) as s:
        st = ledger.budget_status(s, "population", "pop")
    assert st is not None and st["epsilon_budget"] == 1.0
    assert st["remaining_epsilon"] == pytest.approx(0.4)
    # the spent amount itself, a higher budget and a new budget are accepted
    with store.transaction() as s:
        ledger.set_budget(s, "population", "pop", epsilon=0.6, delta=0.0, actor="admin")
    with store.transaction(read_only=True) as s:
        st = ledger.budget_status(s, "population", "pop")
    assert st is not None and st["remaining_epsilon"] == pytest.approx(0.0, abs=1e-12)
    with store.transaction() as s:
        ledger.set_budget(s, "population", "pop", epsilon=2.0, delta=1e-6, actor="admin")
        ledger.set_budget(s, "analyst", "a2", epsilon=0.1, delta=0.0, actor="admin")
    with store.transaction(read_only=True) as s:
        st = ledger.budget_status(s, "population", "pop")
        acts = [a.action for a in s.audit_log(None, 1000)]
    assert st is not None and st["remaining_epsilon"] == pytest.approx(1.4)
    assert acts.count("budget") == 3


def test_a_budget_already_below_its_charges_reads_and_refuses_clearly(store: Store) -> None:
    """A database written before lower budgets were refused: status and new runs name the budget."""
    tid = _budgets(store, 1.0)
    with store.transaction() as s:
        create_run(s, tid, "a0")
        create_run(s, tid, "a1")
    with store.transaction() as s:  # as the old endpoint did, with no check
        b = s.budget("population", "pop", lock=True)
        assert b is not None
        s.put_budget(b.scope, b.name, 0.4, b.delta)
    with store.transaction(read_only=True) as s:
        st = ledger.budget_status(s, "population", "pop")
    assert st is not None and st["spent_epsilon"] == pytest.approx(0.6)
    assert st["remaining_epsilon"] == 0.0
    with pytest.raises(BudgetExceededError, match=r"population 'pop'.*epsilon_budget=0\.4") as info:
        with store.transaction() as s:
            create_run(s, tid, "a0")
    assert "release 'run" not in str(info.value)  # not blamed on an old run


@pytest.mark.filterwarnings("ignore:Using `httpx`")
def test_budget_endpoint_refuses_a_budget_below_what_is_spent(tmp_path: Path) -> None:
    """PUT /v1/admin/budgets: 409 naming the budget, the spent and the requested amounts."""
    import time

    from fastapi.testclient import TestClient

    from fedstats.service.http.app import create_app
    from fedstats.service.store.tables import Operator
    from fedstats.wire.auth import hash_token

    st = open_store(f"sqlite:///{tmp_path / 'api.db'}")
    try:
        with st.session() as s, s.begin():
            s.add(Operator(name="admin", token_hash=hash_token("tok"), created_at=time.time()))
        tid = _budgets(st, 1.0)
        with st.transaction() as s:
            create_run(s, tid, "a0")
        h = {"Authorization": "Bearer tok"}
        with TestClient(create_app(st, run_driver=False)) as http:
            r = http.put(
                "/v1/admin/budgets/population/pop", json={"epsilon": 0.2, "delta": 0.0}, headers=h
            )
            assert r.status_code == 409
            msg = r.json()["detail"]
            assert "population 'pop'" in msg and "requested epsilon=0.2" in msg
            assert "spent or reserved: epsilon=0.3" in msg
            got = http.get("/v1/admin/budgets/population/pop", headers=h).json()
            assert got["epsilon_budget"] == 1.0 and got["spent_epsilon"] == pytest.approx(0.3)
            r = http.put(
                "/v1/admin/budgets/population/pop", json={"epsilon": 0.5, "delta": 0.0}, headers=h
            )
            assert r.status_code == 200 and r.json()["remaining_epsilon"] == pytest.approx(0.2)
    finally:
        st.close()
