"""Domain tests on the in-memory store, without HTTP (issue 28, item 1).

Devices are simulated by calling the domain functions the HTTP routes call (check-in, work list,
report), in store transactions; the run driver runs in this process. The memory store
(:mod:`fedstats.service.store.memory`) is proved faithful by :func:`test_same_answers_on_every_store`:
one scripted sequence of domain calls and store queries on the memory store, on SQLite and on
PostgreSQL (when reachable) must give the same return values and the same errors.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedstats import wire
from fedstats.analyses.usefulness import result_warnings
from fedstats.engine.rounds import ClientBatch, Round, RoundSum
from fedstats.errors import BudgetExceededError, DataError, FedstatsError, SecurityError
from fedstats.randomness import RandomSource
from fedstats.service.domain import idempotency, ledger, runs, tasks
from fedstats.service.domain.driver import Driver
from fedstats.service.domain.operators import trust_authority
from fedstats.service.http.schemas import SignedTaskIn
from fedstats.service.store import Store, open_store
from fedstats.service.store.core import CoreQueries
from fedstats.service.store.memory import MemoryCoreQueries, MemoryStore, MemoryTx
from fedstats.service.store.rows import ClientRow, PutReport
from fedstats.wire.enrollment import init_authority, issue_analyst
from fedstats.wire.registry import plan_for, resolve_encoder
from fedstats.wire.tasks import sign_task
from service_helpers import pg_reachable, pg_schema

N = 6
VALUES = np.linspace(-0.8, 0.9, N)
BITPUSHING = {
    "analysis": "bitpushing-mean",
    "params": {"column": "value", "low": -1.0, "high": 1.0, "resolution": 1 / 8, "method": "basic"},
    "privacy": {"epsilon": 2.0, "population": "default"},
}


@pytest.fixture
def memory() -> MemoryStore:
    store = open_store("memory://")
    assert isinstance(store, MemoryStore)
    return store


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[[str], Store]]:
    """``make_store(kind)``: a fresh store of kind memory, sqlite or postgresql (skipped if away)."""
    opened: list[Store] = []
    schemas: list[Any] = []

    def make(kind: str) -> Store:
        if kind == "memory":
            url = "memory://"
        elif kind == "sqlite":
            url = f"sqlite:///{tmp_path / f'domain{len(opened)}.db'}"
        else:
            reason = pg_reachable()
            if reason is not None:
                pytest.skip(reason)
            cm = pg_schema()
            url = cm.__enter__()
            schemas.append(cm)
        st = open_store(url)
        opened.append(st)
        return st

    yield make
    for st in opened:
        st.close()
    for cm in schemas:
        cm.__exit__(None, None, None)


def _analyst(root: Path, store: Store) -> dict[str, Any]:
    """A fresh authority trusted by ``store`` and an analyst credential it issued."""
    init_authority(root / "authority")
    analyst = issue_analyst(root / "authority", "analyst-x", ["default"], root / "analyst.json")
    trust_authority(store, (root / "authority" / "authority.pub").read_text().strip())
    return analyst


def _envelope(analyst: dict[str, Any], label: str, **over: Any) -> dict[str, Any]:
    body = dict(BITPUSHING) | {
        "cohort_size": N,
        "min_clients": N - 2,
        "max_records_per_client": 1,
        "deadlines": {"checkin": 60.0, "round": 60.0},
        "label": label,
        "not_after": NOT_AFTER,  # one task id for analysts certified at different moments
    }
    body.update(over)
    return SignedTaskIn(**sign_task(body, analyst)).model_dump()


NOT_AFTER = int(time.time()) + 86400


def _answer_round(
    store: Store, run_id: str, devices: list[str], drv: Driver | None = None
) -> list[Any]:
    """Each device reads its work list and reports in the round offered; return what submit answered.

    A stored report is noted to ``drv`` as the report route does (the round closes at the next tick).
    """
    out: list[Any] = []
    for cid in devices:
        with store.transaction(read_only=True) as tx:
            work = runs.client_work(tx, cid, "default")
        for item in work["rounds"]:
            if item["run_id"] != run_id:
                continue
            vector, count = _report(item, cid)
            with store.transaction() as tx:
                got = runs.submit_report(tx, run_id, item["round"], cid, vector, count)
            out.append(got)
            if got and drv is not None:
                drv.gate.note(("round", run_id, item["round"]))  # as the report handler does
    return out


def _report(item: dict[str, Any], cid: str) -> tuple[list[int], int]:
    """A device's report of one work item: its records' encoded reports, summed (seeded per device)."""
    spec = Round(
        item["name"],
        resolve_encoder(item["encode"], item["analysis"], item["version"]),
        wire.decode(item["params"]),
        dim=item["dim"],
        bound=item["bound"],
    )
    a, b = item["records"]
    batch = ClientBatch({"value": VALUES[a:b]}, start=a, total=item["n_clients"])
    rep = spec.encode_checked(batch, RandomSource(7).generator(cid, item["round"]))
    return [int(x) for x in rep.sum(axis=0)], b - a


def _library_result(cfg: dict[str, Any], seed: str, slots: dict[str, tuple[int, int]]) -> Any:
    """The library's answer: the same plan driven in-process with the same devices' reports."""
    n = sum(c for _s, c in slots.values())
    gen = plan_for(cfg, n_clients=n, public_seed=bytes.fromhex(seed))
    rnd = next(gen)
    index = 0
    while True:
        total = np.zeros(rnd.dim, dtype=np.int64)
        records = 0
        for cid, (start, count) in slots.items():
            a, b = max(start, rnd.client_range[0]), min(start + count, rnd.client_range[1])
            if b <= a:
                continue
            batch = ClientBatch({"value": VALUES[a:b]}, start=a, total=n)
            rep = rnd.encode_checked(batch, RandomSource(7).generator(cid, index))
            total += rep.sum(axis=0).astype(np.int64)
            records += b - a
        try:
            rnd = gen.send(RoundSum(total, records))
        except StopIteration as stop:
            return stop.value
        index += 1


def _drive(store: Store, drv: Driver, run_id: str, devices: list[str]) -> dict[str, Any]:
    """Tick the driver and let the devices report until the run is finished (bounded)."""
    deadline = time.monotonic() + 60
    while True:
        with store.transaction(read_only=True) as tx:
            view = runs.run_view(tx, run_id)
        if view["status"] in ("done", "aborted"):
            return view
        assert time.monotonic() < deadline, "the run did not finish in time"
        drv.tick()
        _answer_round(store, run_id, devices, drv)


def test_memory_store_implements_every_core_query() -> None:
    """No abstract method of CoreQueries is left to an inherited default."""
    assert CoreQueries.__abstractmethods__
    assert not MemoryCoreQueries.__abstractmethods__
    # the memory classes of a transaction: the core group and its mixins (refusals)
    own = [k for k in MemoryTx.__mro__ if k.__module__.startswith("fedstats.service.store.memory")]
    for name in CoreQueries.__abstractmethods__:
        assert any(name in k.__dict__ for k in own), name


def test_local_dp_run_matches_the_library(memory: MemoryStore, tmp_path: Path) -> None:
    """Devices check in and report, the driver closes the rounds; the result is the library's."""
    analyst = _analyst(tmp_path, memory)
    devices = [f"dev-{i}" for i in range(N)]
    with memory.transaction() as tx:
        ledger.set_budget(tx, "population", "default", epsilon=3, delta=1e-3, actor="t")
        ledger.set_budget(tx, "analyst", "alice", epsilon=10, delta=1e-3, actor="t")
        tid, created = tasks.create_task(tx, _envelope(analyst, "one"), "alice")
        assert created
        rid = runs.create_run(tx, tid, "alice")
    with memory.transaction() as tx:
        (charge,) = tx.charges_on("population", "default")
        assert (charge.run_id, charge.status, charge.epsilon) == (rid, "reserved", 2.0)
        # a second run would need 4 > 3: refused, and nothing of it is written
        with pytest.raises(BudgetExceededError):
            runs.create_run(tx, tid, "alice")
        assert len(tx.page_runs(10, 0)[0]) == 1
    # a device of another population is refused before anything is written, also once checked in
    with memory.transaction() as tx:
        with pytest.raises(SecurityError, match="another population"):
            runs.checkin(tx, rid, devices[0], 1, population="elsewhere")
        assert (tx.cohort(rid).devices, tx.cohort(rid).records) == (0, 0)
    slots = {}
    for cid in devices:
        with memory.transaction() as tx:
            got = runs.checkin(tx, rid, cid, 1, population="default")
            slots[cid] = (got["slot_start"], got["slot_count"])
        with memory.transaction() as tx:  # idempotent
            assert runs.checkin(tx, rid, cid, 3) == got
            with pytest.raises(SecurityError):
                runs.checkin(tx, rid, cid, 1, population="elsewhere")
    assert sorted(s for s, _c in slots.values()) == list(range(N))
    drv = Driver(memory, lease_seconds=30.0, owner="server-a")
    view = _drive(memory, drv, rid, devices)
    assert view["status"] == "done", view
    assert view["devices"] == N and all(r["status"] == "closed" for r in view["rounds"])
    with memory.transaction(read_only=True) as tx:
        cfg = tasks.task_config(tx, tid)
        seed = tx.run(rid).public_seed
        (charge,) = tx.charges_on("population", "default")
        status = ledger.budget_status(tx, "population", "default")
    library = _library_result(cfg, seed, slots)
    expected = library.to_dict()
    assert view["result"]["estimate"] == expected["estimate"]
    # the stored result carries the library's usefulness warnings (issue 43): N devices say little
    assert view["result"]["warnings"] == list(result_warnings(library)) != []
    assert view["result"]["n_clients"] == expected["n_clients"] == N
    assert charge.status == "spent"
    assert status is not None and status["spent_epsilon"] == pytest.approx(2.0)
    assert drv.metrics["runs_done"] == 1 and drv.metrics["rounds_closed"] == len(view["rounds"])


def test_reports_are_idempotent_and_a_conflicting_one_is_refused(
    memory: MemoryStore, tmp_path: Path
) -> None:
    analyst = _analyst(tmp_path, memory)
    with memory.transaction() as tx:
        ledger.set_budget(tx, "population", "default", epsilon=10, delta=1e-3, actor="t")
        ledger.set_budget(tx, "analyst", "alice", epsilon=10, delta=1e-3, actor="t")
        tid, _ = tasks.create_task(tx, _envelope(analyst, "idem"), "alice")
        rid = runs.create_run(tx, tid, "alice")
    for i in range(N):
        with memory.transaction() as tx:
            runs.checkin(tx, rid, f"dev-{i}", 1)
    drv = Driver(memory, lease_seconds=30.0, owner="server-a")
    drv.tick()  # closes the check-in (a full cohort)
    drv.tick()  # opens round 0
    with memory.transaction(read_only=True) as tx:
        (item,) = runs.client_work(tx, "dev-0", "default")["rounds"]
        # the JSON a poll answers (its shared parts encoded once) is the same list, for every device
        for cid in ("dev-0", "dev-1", "dev-0"):
            got = json.loads(runs.client_work_json(tx, cid, "default"))
            assert got == runs.client_work(tx, cid, "default"), cid
        assert json.loads(runs.client_work_json(tx, "dev-1", "default"))["rounds"][0] != item
    vector, count = _report(item, "dev-0")
    with memory.transaction() as tx:
        assert runs.submit_report(tx, rid, 0, "dev-0", vector, count) is True
    with memory.transaction() as tx:  # the same report again: accepted, not stored twice
        assert runs.submit_report(tx, rid, 0, "dev-0", vector, count) is False
    other = [v + 1 if j == 0 else v for j, v in enumerate(vector)]
    with memory.transaction() as tx, pytest.raises(tasks.ConflictError, match="different report"):
        runs.submit_report(tx, rid, 0, "dev-0", other, count)
    with memory.transaction() as tx, pytest.raises(DataError):
        runs.submit_report(tx, rid, 0, "dev-1", vector[:-1], count)
    with memory.transaction(read_only=True) as tx:
        assert tx.round_counts(rid, 0, 0, N)[1] == 1
        assert [r.vector for r in tx.round_reports(rid, 0)] == [json.dumps(vector)]
        # the device no longer sees the round it reported in
        assert runs.client_work(tx, "dev-0", "default")["rounds"] == []


def _started(store: Store, root: Path, label: str) -> str:
    """A run of the bit-pushing task with generous budgets, no device checked in yet."""
    analyst = _analyst(root, store)
    with store.transaction() as tx:
        ledger.set_budget(tx, "population", "default", epsilon=10, delta=1e-3, actor="t")
        ledger.set_budget(tx, "analyst", "alice", epsilon=10, delta=1e-3, actor="t")
        tid, _ = tasks.create_task(tx, _envelope(analyst, label), "alice")
        return runs.create_run(tx, tid, "alice")


def test_one_task_id_in_two_stores_keeps_each_stores_envelope(tmp_path: Path) -> None:
    """One configuration signed by two analysts of two authorities has one id (``NOT_AFTER`` pins the
    second it ends), stored in two stores of one process: each store offers its own envelope, the one its
    devices' pinned authority verifies. Before the fix the process cached the first envelope by id, and
    the second store's devices refused the task ("certificate issued by an untrusted authority")."""
    first, second = open_store("memory://"), open_store("memory://")
    envelopes = []
    for name, store in (("a", first), ("b", second)):
        envelope = _envelope(_analyst(tmp_path / name, store), "one id")
        envelopes.append(envelope)
        with store.transaction() as tx:
            tid, _ = tasks.create_task(tx, envelope, "alice")
            assert tasks.task_envelope(tx, tid) == envelope
    for store, envelope in zip((first, second), envelopes, strict=True):
        with store.transaction(read_only=True) as tx:
            assert tasks.task_envelope(tx, tid) == envelope
            assert tasks.task_config(tx, tid) == envelope["task"]
    assert envelopes[0]["certificate"] != envelopes[1]["certificate"]


def test_concurrent_checkins_get_disjoint_slots(memory: MemoryStore, tmp_path: Path) -> None:
    """Transactions are serialized: of 2N concurrent check-ins N get distinct slots, N are refused."""
    rid = _started(memory, tmp_path, "concurrent")
    answers: list[Any] = []
    gate = threading.Barrier(2 * N)

    def join(cid: str) -> None:
        gate.wait(10)
        try:
            with memory.transaction() as tx:
                answers.append(runs.checkin(tx, rid, cid, 1)["slot_start"])
        except tasks.ConflictError as exc:
            answers.append(str(exc))

    threads = [threading.Thread(target=join, args=(f"dev-{i}",)) for i in range(2 * N)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    slots = sorted(a for a in answers if isinstance(a, int))
    assert slots == list(range(N))
    assert sum("full cohort" in str(a) for a in answers) == N
    with memory.transaction(read_only=True) as tx:
        assert (tx.cohort(rid).devices, tx.cohort(rid).records) == (N, N)


def test_a_driver_that_lost_its_lease_writes_nothing(memory: MemoryStore, tmp_path: Path) -> None:
    """Fencing on the memory store: after a takeover the old holder's write transaction stops."""
    rid = _started(memory, tmp_path, "fencing")
    devices = [f"dev-{i}" for i in range(N)]
    for cid in devices:
        with memory.transaction() as tx:
            runs.checkin(tx, rid, cid, 1)
    a = Driver(memory, lease_seconds=0.2, owner="server-a")
    b = Driver(memory, lease_seconds=30.0, owner="server-b")
    a.tick()  # claims the run (epoch 1) and closes the check-in
    with memory.transaction(read_only=True) as tx:
        run = tx.run(rid)
        assert (run.lease_owner, run.lease_epoch, run.status) == ("server-a", 1, "running")
    time.sleep(0.3)  # a's lease expires (a paused process)
    b.tick()  # takes the run over with a new epoch
    with memory.transaction(read_only=True) as tx:
        run = tx.run(rid)
        assert (run.lease_owner, run.lease_epoch) == ("server-b", 2)
        before = (run.status, tx.rounds_of(rid), tx.audit_log(rid, 100))
    a._advance(rid)  # a resumes where it paused, still believing it holds epoch 1
    assert a.metrics["fenced_writes"] == 1
    with memory.transaction(read_only=True) as tx:
        run = tx.run(rid)
        assert (run.status, tx.rounds_of(rid), tx.audit_log(rid, 100)) == before
    view = _drive(memory, b, rid, devices)
    assert view["status"] == "done"


def test_idempotency_keys_replay_the_first_answer(memory: MemoryStore) -> None:
    calls: list[int] = []

    def write(tx: Any) -> idempotency.Answer:
        calls.append(1)
        ledger.set_budget(tx, "analyst", "bob", epsilon=1.0 + len(calls), delta=0, actor="op")
        return idempotency.Answer(201, {"epsilon": 1.0 + len(calls)})

    body = {"epsilon": 2}
    first = idempotency.run_once(memory, "op", "k1", "put", "/b", body, write)
    again = idempotency.run_once(memory, "op", "k1", "PUT", "/b", body, write)
    assert (first.status, first.body, first.replayed) == (201, {"epsilon": 2.0}, False)
    assert (again.status, again.body, again.replayed) == (201, {"epsilon": 2.0}, True)
    assert len(calls) == 1
    with pytest.raises(FedstatsError):  # the key with another request
        idempotency.run_once(memory, "op", "k1", "PUT", "/b", {"epsilon": 3}, write)
    other = idempotency.run_once(
        memory, "op2", "k1", "PUT", "/b", body, write
    )  # keys are per actor
    assert other.replayed is False and len(calls) == 2


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_idempotency_keys_are_purged_after_their_retention(
    make_store: Callable[[str], Store], kind: str
) -> None:
    store = make_store(kind)
    calls: list[str] = []

    def write(tx: Any) -> idempotency.Answer:
        calls.append("w")
        return idempotency.Answer(201, {"n": len(calls)})

    idempotency.run_once(store, "op", "old", "PUT", "/b", {"x": 1}, write)
    written = time.time()
    # an hour later a second key; a day after the first, purge what is older than a day
    assert idempotency.purge(store, 86400.0, now=written + 3600.0) == 0
    with store.transaction() as tx:
        tx.claim_key("op", "new", "PUT", "/b", "h", written + 3600.0)
        tx.store_answer("op", "new", 201, "{}")
    assert idempotency.purge(store, 86400.0, now=written + 86400.0 + 1.0) == 1
    with store.transaction(read_only=True) as tx:
        assert tx.idempotent_answer("op", "old") is None
        assert tx.idempotent_answer("op", "new") is not None
    # a retry after the retention is a new request: it is written again
    again = idempotency.run_once(store, "op", "old", "PUT", "/b", {"x": 1}, write)
    assert (again.replayed, calls) == (False, ["w", "w"])
    with pytest.raises(FedstatsError, match="retention"):
        idempotency.purge(store, 0.0)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_operators_are_added_rotated_and_removed(
    make_store: Callable[[str], Store], kind: str
) -> None:
    from fedstats.service.domain import operators
    from fedstats.service.domain.tasks import ConflictError, NotFoundError
    from fedstats.wire import auth

    store = make_store(kind)
    with store.transaction() as tx:
        a = operators.add(tx, "ann")
        b = operators.add(tx, "bob", actor="ann")
    with store.transaction(read_only=True) as tx:
        assert tx.operator_of(auth.hash_token(a)) == "ann"
        assert tx.operator_of(auth.hash_token(b)) == "bob"
    with pytest.raises(FedstatsError, match="exists"), store.transaction() as tx:
        operators.add(tx, "bob")
    for bad in ("", "x" * 129, "tab\there"):
        with pytest.raises(FedstatsError, match="name"), store.transaction() as tx:
            operators.add(tx, bad)
    with store.transaction() as tx:
        b2 = operators.rotate(tx, "bob", actor="ann")
    with store.transaction(read_only=True) as tx:
        assert tx.operator_of(auth.hash_token(b)) is None
        assert tx.operator_of(auth.hash_token(b2)) == "bob"
    with pytest.raises(NotFoundError), store.transaction() as tx:
        operators.rotate(tx, "nobody")
    with pytest.raises(ConflictError, match="itself"), store.transaction() as tx:
        operators.remove(tx, "ann", actor="ann")
    with pytest.raises(NotFoundError), store.transaction() as tx:
        operators.remove(tx, "nobody", actor="ann")
    with store.transaction() as tx:
        operators.remove(tx, "bob", actor="ann")
    with store.transaction(read_only=True) as tx:
        assert tx.operator_of(auth.hash_token(b2)) is None and not tx.operator_exists("bob")
        assert tx.page_operators(10, 0)[1] == 1
        actions = [a.action for a in tx.audit_log(None, 100)]
    assert actions == ["add-operator", "rotate-operator", "remove-operator"]


def test_a_failed_transaction_leaves_nothing(memory: MemoryStore) -> None:
    with memory.transaction() as tx:
        tx.put_budget("population", "p", 1.0, 0.0)
        tx.add_audit(1.0, "t", "a", None, "{}")
    with pytest.raises(RuntimeError, match="boom"), memory.transaction() as tx:
        tx.put_budget("population", "p", 5.0, 0.0)
        tx.put_budget("population", "q", 5.0, 0.0)
        tx.add_audit(2.0, "t", "b", None, "{}")
        tx.bump_version()
        raise RuntimeError("boom")
    with memory.transaction() as tx:
        assert [(b.name, b.epsilon) for b in tx.budgets()] == [("p", 1.0)]
        assert [a.action for a in tx.audit_log(None, 10)] == ["a"]
        assert tx.version() == 0
        tx.add_audit(3.0, "t", "c", None, "{}")
        assert [a.ts for a in tx.recent_audit(("a", "c"), 10)] == [3.0, 1.0]


# -- the same answers on every store


class Unordered(list[Any]):
    """A query's answer whose order the SQL leaves unspecified: compared sorted, once normalized."""


def _norm(value: Any, ids: dict[str, str]) -> Any:
    """``value`` with run ids numbered in order of appearance and wall-clock times replaced."""
    if isinstance(value, Unordered):
        return sorted((_norm(v, ids) for v in value), key=repr)
    if isinstance(value, dict):
        return {k: _norm(v, ids) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_norm(v, ids) for v in value)
    if isinstance(value, float) and value > 1e9:
        return "<time>"
    if isinstance(value, str):
        for found in _UUID.findall(value):
            ids.setdefault(found, f"<run{len(ids)}>")
            value = value.replace(found, ids[found])
        return _TS.sub("<time>", value)
    if hasattr(value, "__dataclass_fields__"):
        fields = {f: getattr(value, f) for f in value.__dataclass_fields__}
        return (type(value).__name__, _norm(fields, ids))
    return value


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
_TS = re.compile(r"\b1[0-9]{9}\.[0-9]+")


def _device_runs_many(tx: Any) -> list[Any]:
    """``device_runs_many`` of members, a stranger and a repeated id: each as its ``device_runs``."""
    ids = ["dev-1", "dev-2", "dev-x", "dev-1", "dev-0"]
    got = tx.device_runs_many(ids)
    assert list(got) == ["dev-1", "dev-2", "dev-x", "dev-0"]
    out = []
    for cid, (live, finished) in got.items():
        one = tx.device_runs(cid)
        assert sorted(map(repr, live)) == sorted(map(repr, one[0]))
        assert sorted(map(repr, finished)) == sorted(map(repr, one[1]))
        out.append([cid, Unordered(live), Unordered(finished)])
    return out


def _script(store: Store, root: Path) -> list[tuple[str, Any]]:
    """A scripted sequence of domain calls and store queries; every answer (or error), in order."""
    log: list[tuple[str, Any]] = []

    def step(name: str, fn: Callable[[Any], Any], *, read_only: bool = False) -> Any:
        try:
            with store.transaction(read_only=read_only) as tx:
                got = fn(tx)
        except FedstatsError as exc:
            log.append((name, ("error", type(exc).__name__, str(exc))))
            return None
        log.append((name, got))
        return got

    analyst = _analyst(root, store)
    step(
        "budget-pop",
        lambda tx: ledger.set_budget(tx, "population", "default", epsilon=5, delta=1e-3, actor="t"),
    )
    step(
        "budget-ana",
        lambda tx: ledger.set_budget(tx, "analyst", "alice", epsilon=50, delta=1e-3, actor="t"),
    )
    step(
        "budget-low",
        lambda tx: ledger.set_budget(tx, "analyst", "alice", epsilon=-1, delta=0, actor="t"),
    )
    env = _envelope(analyst, "same answers")
    tid = step("task", lambda tx: tasks.create_task(tx, env, "alice"))[0]
    step("task-again", lambda tx: tasks.create_task(tx, env, "alice"))
    step("task-missing", lambda tx: tasks.task_config(tx, "0" * 64))
    step(
        "tasks",
        lambda tx: [(t.task_id, t.created_by) for t in tx.page_tasks(100, 0)[0]],
        read_only=True,
    )
    for i in range(4):
        cid = f"dev-{i}"
        row = ClientRow(cid, "ab" * 32, "default" if i < 3 else "other", "fp", 2e9, False, None)
        step(f"enroll-{i}", lambda tx, row=row: tx.add_client(row, 1e9 + 1))
    step("revoke", lambda tx: tx.update_client("dev-3", revoked_at=1e9 + 5))
    step("nonce", lambda tx: [tx.use_nonce("dev-0", "n1", 10.0), tx.use_nonce("dev-0", "n1", 10.0)])
    step("nonce-purge", lambda tx: [tx.use_nonce("dev-0", "n2", 30.0), tx.purge_nonces(20.0)])
    step("operator", lambda tx: [tx.add_operator("op", "h" * 64, 1.0), tx.operator_of("h" * 64)])
    step(
        "operator-token",
        lambda tx: [tx.set_operator_token("op", "i" * 64), tx.set_operator_token("x", "j")],
    )
    step("operators", lambda tx: tx.page_operators(10, 0), read_only=True)
    rids = [step(f"run-{k}", lambda tx: runs.create_run(tx, tid, "alice")) for k in range(3)]
    step("charges", lambda tx: tx.charges_on("population", "default"), read_only=True)
    step("cancel", lambda tx: runs.cancel_run(tx, rids[1], "alice"))
    step("cancel-again", lambda tx: runs.cancel_run(tx, rids[1], "alice"))
    step("run-3", lambda tx: runs.create_run(tx, tid, "alice"))
    step("reserved", lambda tx: tx.reserved_charges("population", "default"), read_only=True)
    step("status", lambda tx: ledger.budget_status(tx, "population", "default"), read_only=True)
    rid = rids[0]
    devices = [f"dev-{i}" for i in range(N)]
    for i, cid in enumerate(devices):
        step(f"checkin-{cid}", lambda tx, cid=cid, i=i: runs.checkin(tx, rid, cid, 1 + i % 2))
    step("checkin-again", lambda tx: runs.checkin(tx, rid, "dev-0", 5))
    step("checkin-full", lambda tx: runs.checkin(tx, rid, "dev-late", 1))
    step("checkin-bad", lambda tx: runs.checkin(tx, rid, "dev-0", 0))
    step(
        "work-before",
        lambda tx: Unordered(
            o["run_id"] for o in runs.client_work(tx, "dev-x", "default")["offers"]
        ),
    )
    assert step(  # the offers as a poll answers them (each encoded once) are the same list
        "work-json-before",
        lambda tx: (
            json.loads(runs.client_work_json(tx, "dev-x", "default"))
            == runs.client_work(tx, "dev-x", "default")
            and len(runs.client_work(tx, "dev-x", "default")["offers"]) > 0
        ),
    )
    step("checked-in", lambda tx: tx.checked_in_by_population(), read_only=True)
    step("unclaimed-before", lambda tx: tx.unclaimed_runs(time.time()), read_only=True)
    step("populations", lambda tx: Unordered(tx.population_counts()), read_only=True)
    drv = Driver(store, lease_seconds=30.0, owner="server-a")
    for k in range(2):
        log.append((f"tick-{k}", drv.tick()))  # the driver opens its own transactions
        step(f"live-{k}", lambda tx: Unordered(tx.live_runs("dev-0")), read_only=True)
    step("held", lambda tx: Unordered(tx.held_runs("server-a")), read_only=True)
    step("unclaimed-after", lambda tx: tx.unclaimed_runs(time.time()), read_only=True)
    with store.transaction(read_only=True) as tx:
        (item,) = runs.client_work(tx, "dev-0", "default")["rounds"]
    log.append(("work", {k: v for k, v in item.items() if k != "deadline"}))
    vector, count = _report(item, "dev-0")
    step("report", lambda tx: runs.submit_report(tx, rid, 0, "dev-0", vector, count))
    step("report-again", lambda tx: runs.submit_report(tx, rid, 0, "dev-0", vector, count))
    step(
        "report-conflict",
        lambda tx: runs.submit_report(tx, rid, 0, "dev-0", [*vector[:-1], vector[-1] + 1], count),
    )
    step("report-stranger", lambda tx: runs.submit_report(tx, rid, 0, "dev-x", vector, count))
    step("report-no-round", lambda tx: runs.submit_report(tx, rid, 9, "dev-0", vector, count))
    # the upload in one statement (put_report): stored only while round and slots are as expected
    with store.transaction(read_only=True) as tx:
        (item1,) = runs.client_work(tx, "dev-1", "default")["rounds"]
        digest = tx.round_for_report(rid, 0).params_digest
        start, slots = tx.member(rid, "dev-1")
    v1, c1 = _report(item1, "dev-1")

    def put1(nonce: str, expect: tuple[str, int, int], cid: str = "dev-1") -> Any:
        item = PutReport((nonce, 11.0), expect, rid, 0, cid, json.dumps(v1), c1, "d" * 64)
        return lambda tx: tx.put_report(item, 1e9 + 7)

    step("put-digest", put1("p1", ("0" * 64, start, slots)))
    step("put-slots", put1("p2", (digest, start + 1, slots)))
    step("put-stranger", put1("p3", (digest, start, slots), "dev-x"))
    step("put-replay", put1("p1", (digest, start, slots)))
    step("put", put1("p4", (digest, start, slots)))
    step("put-again", put1("p5", (digest, start, slots)))
    step("device-runs", lambda tx: [Unordered(x) for x in tx.device_runs("dev-1")], read_only=True)
    # the same cases set-based (put_reports, one call): each answered as put_report answers it alone
    with store.transaction(read_only=True) as tx:
        m = {d: tx.member(rid, d) for d in ("dev-3", "dev-4", "dev-5")}
        reps = {d: _report(runs.client_work(tx, d, "default")["rounds"][0], d) for d in m}

    def put_many(tx: Any) -> Any:
        def put(nonce: str, cid: str, expect: tuple[str, int, int], index: int = 0) -> PutReport:
            v, c = reps.get(cid, (v1, c1))
            return PutReport((nonce, 13.0), expect, rid, index, cid, json.dumps(v), c, "e" * 64)

        return tx.put_reports(
            [
                put("m1", "dev-3", ("0" * 64, *m["dev-3"])),  # another round digest: not stored
                put("m2", "dev-4", (digest, m["dev-4"][0] + 1, m["dev-4"][1])),  # other slots
                put("m3", "dev-x", (digest, *m["dev-5"])),  # not a member
                put("p1", "dev-1", (digest, start, slots)),  # a replayed nonce: nothing written
                put("m4", "dev-5", (digest, *m["dev-5"])),  # stored
                put("m5", "dev-1", (digest, start, slots)),  # dev-1 already reported
                put("m6", "dev-4", (digest, *m["dev-4"]), index=9),  # no such round
            ],
            1e9 + 8,
        )

    step("put-many", put_many)
    step("put-many-replay", put_many)  # every nonce now used
    step("device-runs-many", _device_runs_many, read_only=True)
    # the domain's upload: the fast path after a poll, the reads otherwise, a replay refused
    with store.transaction(read_only=True) as tx:
        (item2,) = runs.client_work(tx, "dev-2", "default")["rounds"]
    v2, c2 = _report(item2, "dev-2")
    step("upload", lambda tx: runs.upload_report(tx, ("u1", 12.0), rid, 0, "dev-2", v2, c2))
    step("upload-replay", lambda tx: runs.upload_report(tx, ("u1", 12.0), rid, 0, "dev-2", v2, c2))
    step("upload-again", lambda tx: runs.upload_report(tx, ("u2", 12.0), rid, 0, "dev-2", v2, c2))
    step(
        "upload-bad",
        lambda tx: runs.upload_report(tx, ("u3", 12.0), rid, 0, "dev-3", [*v2[:-1], -5], c2),
    )
    step("counts", lambda tx: tx.round_counts(rid, 0, 0, 100), read_only=True)
    view = _drive(store, drv, rid, devices)
    log.append(("view", view))
    step("finished", lambda tx: Unordered(tx.finished_runs("dev-1")), read_only=True)
    step("finished-many", _device_runs_many, read_only=True)
    step("closed", lambda tx: tx.closed_rounds(rid), read_only=True)
    step("totals", lambda tx: tx.closed_totals(rid, 99), read_only=True)
    step("rounds", lambda tx: tx.rounds_of(rid), read_only=True)
    step("slots", lambda tx: sorted(tx.slots_of(rid)), read_only=True)
    step("members", lambda tx: tx.member_slots(rid), read_only=True)
    step(
        "any-closed",
        lambda tx: [tx.any_closed_round(rid), tx.any_closed_round(rids[1])],
        read_only=True,
    )
    step("runs-page", lambda tx: tx.page_runs(2, 1, analyst="alice"), read_only=True)
    step("runs-done", lambda tx: tx.page_runs(10, 0, status="done"), read_only=True)
    step(
        "recent",
        lambda tx: Unordered((r.run_id, r.task_id) for r in tx.recent_runs(10)),
        read_only=True,
    )
    step(
        "budgets",
        lambda tx: [tx.budgets(), tx.page_budgets(1, 1), tx.page_budgets(5, 0, scope="analyst")],
        read_only=True,
    )
    step(
        "devices",
        lambda tx: [
            tx.page_devices(2, 1),
            tx.page_devices(10, 0, status="revoked"),
            tx.device_for_update("dev-3"),
        ],
        read_only=True,
    )
    step("audit", lambda tx: [tx.audit_log(None, 100), tx.audit_log(rid, 3)], read_only=True)
    step(
        "recent-audit",
        lambda tx: tx.recent_audit(("cancel", "release", "abort"), 5),
        read_only=True,
    )
    step(
        "status-after", lambda tx: ledger.budget_status(tx, "population", "default"), read_only=True
    )
    step("version", lambda tx: [tx.bump_version(), tx.bump_version(), tx.version()])
    return log


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_same_answers_on_every_store(
    make_store: Callable[[str], Store],
    tmp_path: Path,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scripted sequence answers the same on the memory store as on ``kind``."""
    seeds = itertools.count()
    monkeypatch.setattr(runs, "new_public_seed", lambda: f"{next(seeds):064x}")
    answers = {}
    for k in ("memory", kind):
        seeds = itertools.count()
        ids: dict[str, str] = {}
        answers[k] = [(name, _norm(got, ids)) for name, got in _script(make_store(k), tmp_path / k)]
    mem, sql = answers["memory"], answers[kind]
    assert [n for n, _ in mem] == [n for n, _ in sql]
    for (name, a), (_n, b) in zip(mem, sql, strict=True):
        assert a == b, name
    # the script really ran a run to its end and refused what it must refuse
    got = dict(mem)
    assert got["view"]["status"] == "done"
    assert got["report-conflict"][0] == "error" and got["checkin-full"][0] == "error"
    assert got["run-2"][0] == "error" and got["run-3"] != got["run-2"]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_check_ins_batched_in_one_transaction_answer_as_each_alone(
    make_store: Callable[[str], Store], tmp_path: Path, kind: str
) -> None:
    """:class:`TransactionBatcher`: the batch's nonces in one write, the run row and cohort read once.

    Check-ins written together get the slots they would get one by one; a nonce used before, or one
    sent twice in the batch, sends the batch's requests alone (the replay refused 401, the others
    written once); a request whose work fails gets its own error.
    """
    from fastapi import HTTPException

    from fedstats.service.domain.tasks import ConflictError
    from fedstats.service.http.batching import TransactionBatcher, Work
    from fedstats.service.http.deps import NonceUse

    C = 12  # the cohort size
    store = make_store(kind)
    analyst = _analyst(tmp_path, store)
    with store.transaction() as tx:
        ledger.set_budget(tx, "population", "default", epsilon=3, delta=1e-3, actor="t")
        ledger.set_budget(tx, "analyst", "alice", epsilon=10, delta=1e-3, actor="t")
        tid, _ = tasks.create_task(
            tx, _envelope(analyst, "batched", cohort_size=C, min_clients=C - 2), "alice"
        )
        rid = runs.create_run(tx, tid, "alice")
    batcher = TransactionBatcher(store, None)
    helds: list[dict[Any, Any]] = []

    def checkin(cid: str, nonce: str, records: int = 1) -> Work:
        def go(tx: Any, held: dict[Any, Any]) -> Any:
            helds.append(held)
            return runs.checkin(tx, rid, cid, records, population="default", held=held)

        return Work(NonceUse(cid, nonce, time.time()), go)

    got = batcher.write([checkin(f"dev-{i}", f"n{i}") for i in range(4)])
    assert got == [{"slot_start": i, "slot_count": 1} for i in range(4)]
    assert batcher.batches == 1 and all(h is helds[0] for h in helds)  # one transaction, one memo
    # a nonce of the first batch again (a replay) and one nonce twice: every request alone
    helds.clear()
    got = batcher.write(
        [
            checkin("dev-4", "n4"),
            checkin("dev-0", "n0"),
            checkin("dev-5", "n5"),
            checkin("dev-5", "n5"),
        ]
    )
    assert got[0] == {"slot_start": 4, "slot_count": 1} and got[2] == {
        "slot_start": 5,
        "slot_count": 1,
    }
    assert isinstance(got[1], HTTPException) and got[1].status_code == 401
    assert isinstance(got[3], HTTPException) and got[3].status_code == 401  # the copy: a replay
    assert batcher.batches == 1 and len({id(h) for h in helds}) == len(helds)  # alone: a memo each
    # a device of another population fails alone; the others of its batch are written once
    bad = Work(
        NonceUse("dev-7", "n7", time.time()),
        lambda tx, held: runs.checkin(tx, rid, "dev-7", 1, population="elsewhere", held=held),
    )
    got = batcher.write([checkin("dev-8", "n8"), bad, checkin("dev-9", "n9")])
    assert got[0] == {"slot_start": 6, "slot_count": 1} and got[2] == {
        "slot_start": 7,
        "slot_count": 1,
    }
    assert isinstance(got[1], SecurityError)
    # the cohort read once per batch is still the cohort: full at N devices, in a batch too
    got = batcher.write([checkin(f"dev-{i}", f"m{i}") for i in range(10, 10 + C - 7)])
    assert [g["slot_start"] for g in got[: C - 8]] == list(range(8, C))
    assert isinstance(got[-1], ConflictError) and "full cohort" in str(got[-1])
    with store.transaction() as tx:
        assert (tx.cohort(rid).devices, tx.cohort(rid).records) == (C, C)
        assert not tx.use_nonce("dev-0", "n0", time.time())  # the batches' nonces are recorded
        assert tx.use_nonce("dev-7", "n7", time.time())  # the failed request's is not
