"""Fault tests of the run driver and the store (issue 27): fencing, takeover, recovery, bad reports.

The drivers run in this process (two :class:`~fedstats.service.domain.driver.Driver` objects on one database
stand for two server processes); devices are simulated by checking in and submitting their reports
through the same store functions the HTTP endpoints call. A *paused* holder is a driver whose crash hook
blocks (outside or inside its write transaction) until the test releases it. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from fedstats import wire
from fedstats.engine.rounds import ClientBatch, Round
from fedstats.errors import DataError
from fedstats.randomness import RandomSource
from fedstats.service.domain import ledger, runs, tasks
from fedstats.service.domain.driver import Driver, excluded_metrics
from fedstats.service.domain.operators import trust_authority
from fedstats.service.http.schemas import SignedTaskIn
from fedstats.service.store import Store, Timeouts, open_store
from fedstats.service.store.tables import Audit, LedgerCharge, Report, RoundRecord, Run, RunMember
from fedstats.wire.enrollment import init_authority, issue_analyst
from fedstats.wire.registry import resolve_encoder
from fedstats.wire.tasks import sign_task
from service_helpers import free_port, pg_reachable, pg_schema

N = 6
VALUES = np.linspace(-0.8, 0.9, N)

EXACT_MEAN = {
    "analysis": "exact-mean",
    "params": {"column": "value", "clip": 1.0, "frac_bits": 16},
    "privacy": {"epsilon": None, "population": "default"},
}
BITPUSHING = {
    "analysis": "bitpushing-mean",
    "params": {
        "column": "value",
        "low": -1.0,
        "high": 1.0,
        "resolution": 1 / 8,
        "method": "adaptive",
    },
    "privacy": {"epsilon": 2.0, "population": "default"},
}


def _db_urls() -> list[str]:
    return ["sqlite", "postgresql"]


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., Store]]:
    """``make_store(kind, timeouts=None)``: a migrated store; further calls open the same database."""
    opened: list[Store] = []
    urls: dict[str, str] = {}
    schemas: list[Any] = []

    def make(kind: str, timeouts: Timeouts | None = None) -> Store:
        if kind not in urls:
            if kind == "postgresql":
                reason = pg_reachable()
                if reason is not None:
                    pytest.skip(reason)
                cm = pg_schema()
                urls[kind] = cm.__enter__()
                schemas.append(cm)
            else:
                urls[kind] = f"sqlite:///{tmp_path / 'faults.db'}"
        st = open_store(urls[kind], timeouts=timeouts)
        opened.append(st)
        return st

    yield make
    for st in opened:
        st.close()
    for cm in schemas:
        cm.__exit__(None, None, None)


def _setup_run(store: Store, root: Path, task: dict[str, Any], **over: Any) -> str:
    """Trust a fresh authority, sign and store ``task``, set budgets, start a run, check in N devices."""
    init_authority(root / "authority")
    analyst = issue_analyst(root / "authority", "analyst-x", ["default"], root / "analyst.json")
    trust_authority(store, (root / "authority" / "authority.pub").read_text().strip())
    body = dict(task) | {
        "cohort_size": N,
        "min_clients": N - 2,
        "max_records_per_client": 1,
        "deadlines": {"checkin": 60.0, "round": 60.0},
        "label": f"faults {time.time()}",
    }
    body.update(over)
    env = SignedTaskIn(**sign_task(body, analyst)).model_dump()
    with store.transaction() as tx:
        ledger.set_budget(tx, "population", "default", epsilon=10, delta=1e-3, actor="t")
        ledger.set_budget(tx, "analyst", "alice", epsilon=10, delta=1e-3, actor="t")
        tid, _ = tasks.create_task(tx, env, "alice")
        rid = runs.create_run(tx, tid, "alice")
    for i in range(N):
        with store.transaction() as tx:
            runs.checkin(tx, rid, f"dev-{i}", 1)
    return rid


def _answer(
    store: Store, rid: str, tamper: Callable[[str, list[int]], list[int]] | None = None
) -> int:
    """Every member without a report in the open round reports; return how many reported."""
    done = 0
    with store.session() as s:
        run = s.get(Run, rid)
        assert run is not None
        rec = s.execute(
            select(RoundRecord).where(RoundRecord.run_id == rid, RoundRecord.status == "open")
        ).scalar_one_or_none()
        if rec is None:
            return 0
        task_id = run.task_id
        members = s.execute(select(RunMember).where(RunMember.run_id == rid)).scalars().all()
        have = set(
            s.execute(
                select(Report.client_id).where(
                    Report.run_id == rid, Report.round_index == rec.index
                )
            ).scalars()
        )
        index, n = rec.index, int(run.n_clients or 0)
        name, encode, params, dim, bound = rec.name, rec.encode, rec.params, rec.dim, rec.bound
        lo, hi = rec.lo, rec.hi
    with store.transaction(read_only=True) as tx:
        cfg = tasks.task_config(tx, task_id)
    spec = Round(
        name,
        resolve_encoder(encode, cfg["analysis"], cfg["version"]),
        wire.decode(json.loads(params)),
        dim=dim,
        bound=bound,
    )
    for m in members:
        a, b = max(m.slot_start, lo), min(m.slot_start + m.slot_count, hi)
        if b <= a or m.client_id in have:
            continue
        batch = ClientBatch({"value": VALUES[a:b]}, start=a, total=n)
        rep = spec.encode_checked(batch, RandomSource(7).generator(m.client_id, index))
        vector = [int(x) for x in rep.sum(axis=0)]
        if tamper is not None:
            vector = tamper(m.client_id, vector)
        with store.transaction() as tx:
            runs.submit_report(tx, rid, index, m.client_id, vector, b - a)
        done += 1
    return done


def _status(store: Store, rid: str) -> str:
    with store.session() as s:
        return str(s.execute(select(Run.status).where(Run.id == rid)).scalar_one())


def _drive(store: Store, drv: Driver, rid: str, timeout: float = 30.0) -> None:
    """Tick ``drv`` and answer rounds until the run is finished (bounded)."""
    deadline = time.monotonic() + timeout
    while _status(store, rid) not in ("done", "aborted"):
        assert time.monotonic() < deadline, "run did not finish in time"
        drv.tick()
        _answer(store, rid)


def _snapshot(store: Store, rid: str) -> dict[str, Any]:
    with store.session() as s:
        rounds = [
            (r.index, r.status, r.params_digest, r.total, r.n_clients)
            for r in s.execute(
                select(RoundRecord).where(RoundRecord.run_id == rid).order_by(RoundRecord.index)
            ).scalars()
        ]
        audit = [
            (a.id, a.action)
            for a in s.execute(
                select(Audit).where(Audit.run_id == rid).order_by(Audit.id)
            ).scalars()
        ]
        charge = s.execute(
            select(LedgerCharge.status).where(LedgerCharge.run_id == rid)
        ).scalar_one_or_none()
        run = s.get(Run, rid)
        assert run is not None
        return {
            "rounds": rounds,
            "audit": audit,
            "charge": charge,
            "status": run.status,
            "result": run.result,
            "owner": run.lease_owner,
            "epoch": run.lease_epoch,
        }


class _Pause:
    """A crash hook that blocks the driver's thread at one event until released (a paused process)."""

    def __init__(self, event: str, run_id: str) -> None:
        self.event = event
        self.run_id = run_id
        self.reached = threading.Event()
        self.release = threading.Event()
        self.fired = False

    def __call__(self, event: str, run_id: str, _index: int) -> None:
        if event == self.event and run_id == self.run_id and not self.fired:
            self.fired = True
            self.reached.set()
            assert self.release.wait(60), "the test never released the paused driver"


@pytest.mark.parametrize("kind", _db_urls())
def test_holder_paused_past_its_lease_writes_nothing_after_it_resumes(
    make_store: Callable[..., Store], tmp_path: Path, kind: str
) -> None:
    """A pauses after journaling round 0; B takes the run over, finishes it; A then writes nothing."""
    store = make_store(kind)
    rid = _setup_run(store, tmp_path, BITPUSHING)
    pause = _Pause("journaled", rid)
    a = Driver(make_store(kind), pause, lease_seconds=1.0, owner="server-a")
    b = Driver(make_store(kind), lease_seconds=1.0, owner="server-b")
    deadline = time.monotonic() + 30
    t: threading.Thread | None = None
    while not pause.reached.is_set():  # A runs the check-in and round 0 until it journals the sum
        assert time.monotonic() < deadline, "A never journaled round 0"
        _answer(store, rid)
        t = threading.Thread(target=a.tick, daemon=True)
        t.start()
        while t.is_alive() and not pause.reached.wait(0.02):
            pass
    assert t is not None
    # A is paused now, between committing round 0's sum and using it; its lease expires and B claims
    # the run (a new epoch) before it writes anything itself
    held = _snapshot(store, rid)
    assert held["owner"] == "server-a"
    time.sleep(1.3)
    assert b._claim() == [rid]
    claimed = _snapshot(store, rid)
    assert claimed["epoch"] == held["epoch"] + 1 and claimed["owner"] == "server-b"
    pause.release.set()  # A resumes with its stale generator: it would open round 1 now
    t.join(30)
    assert not t.is_alive()
    assert _snapshot(store, rid) == claimed  # A wrote nothing: no round 1, no audit line
    _drive(store, b, rid)  # B rebuilds the run from the journal and finishes it
    before = _snapshot(store, rid)
    assert before["status"] == "done" and before["charge"] == "spent", before
    assert len(before["rounds"]) >= 2  # B journaled rounds after A's pause
    for _ in range(3):
        a.tick()
    after = _snapshot(store, rid)
    assert after == before  # nothing written by A after it resumed
    assert a.metrics["fenced_writes"] >= 1  # A tried, and the fencing check refused it
    indexes = [r[0] for r in after["rounds"]]
    assert indexes == sorted(set(indexes))  # each round journaled once
    assert [x for _i, x in after["audit"]].count("spend") == 1  # one spend
    assert after["charge"] == "spent"


def test_holder_paused_inside_a_write_transaction_is_taken_over(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    """A stops inside its round-closing transaction (row locked); B takes over within the timeouts.

    Check-ins through B on the locked run fail fast (lock timeout, a retryable error) instead of
    hanging; other runs are unaffected; A's transaction is ended by ``idle_in_transaction`` and A
    writes nothing after it resumes.
    """
    t_lock, t_idle, lease = 1.0, 2.0, 1.0
    timeouts = Timeouts(lock=t_lock, statement=10.0, idle_in_transaction=t_idle)
    # the runs are set up and answered through a store without the short timeouts: on a loaded machine
    # this process can sit longer than t_idle inside a set-up transaction, which PostgreSQL then ends
    plain = make_store("postgresql")
    store = make_store("postgresql", timeouts)
    rid = _setup_run(plain, tmp_path, BITPUSHING)
    other = _setup_run(plain, tmp_path / "other", BITPUSHING, label="other run")
    pause = _Pause("locked", rid)
    a = Driver(make_store("postgresql", timeouts), pause, lease_seconds=lease, owner="server-a")
    b = Driver(make_store("postgresql", timeouts), lease_seconds=lease, owner="server-b")
    deadline = time.monotonic() + 30
    while _snapshot(store, rid)["rounds"] == []:  # A closes the check-in and opens round 0
        assert time.monotonic() < deadline
        a.tick()
    _answer(plain, rid)
    t = threading.Thread(target=a.tick, daemon=True)
    t.start()
    assert pause.reached.wait(30), "A did not reach its transaction"
    t0 = time.monotonic()
    # a check-in on the locked run waits at most the lock timeout, then fails with a retryable error
    with pytest.raises(OperationalError), store.transaction() as tx:
        runs.checkin(tx, rid, "late-device", 1)
    assert time.monotonic() - t0 < t_lock + 2.0
    # the other run is not blocked at all
    t1 = time.monotonic()
    with store.transaction() as tx:
        assert runs.load_run(tx, other, lock=True).id == other  # its row lock is free
    assert time.monotonic() - t1 < 1.0
    taken = None
    while taken is None:
        assert time.monotonic() - t0 < 30, "B never took the run over"
        b.tick()
        if _snapshot(store, rid)["owner"] == "server-b":
            taken = time.monotonic() - t0
        time.sleep(0.05)
    # the lock goes when PostgreSQL ends A's idle transaction; the lease expired before that
    assert taken < max(lease, t_idle) + t_lock + 2.0, taken
    _drive(store, b, rid)
    before = _snapshot(store, rid)
    assert before["status"] == "done" and before["charge"] == "spent"
    pause.release.set()
    t.join(30)
    assert not t.is_alive()
    a.tick()
    assert _snapshot(store, rid) == before
    assert [x for _i, x in before["audit"]].count("spend") == 1


def test_a_run_the_claim_skipped_is_claimed_at_the_next_pass(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    """A run whose row a check-in holds locked when the driver claims is claimed at the next pass.

    The claim skips locked rows (``SKIP LOCKED``); with an hour between claims, a skipped run used to
    wait that hour: a loaded CI run's round did not open in 120 s.
    """
    store = make_store("postgresql")
    rid = _setup_run(store, tmp_path, BITPUSHING)
    drv = Driver(make_store("postgresql"), lease_seconds=14400.0, recheck=3600.0, owner="server-a")
    with store.transaction() as tx:
        runs.load_run(tx, rid, lock=True)  # the row lock a device's check-in takes
        drv.tick()  # another connection: skips the locked run, does not wait
    assert _snapshot(store, rid)["owner"] is None
    drv.tick()
    view = _snapshot(store, rid)
    assert view["owner"] == "server-a" and view["epoch"] == 1, view
    deadline = time.monotonic() + 30
    while not _snapshot(store, rid)["rounds"]:  # and advanced: the check-in closes, round 0 opens
        assert time.monotonic() < deadline, "the run was not advanced"
        drv.tick()


@pytest.mark.parametrize("kind", _db_urls())
def test_malformed_report_is_excluded_and_the_run_completes(
    make_store: Callable[..., Store], tmp_path: Path, kind: str
) -> None:
    """A report with a bad count entry is refused (422); one stored anyway is excluded at close time."""
    store = make_store(kind)
    rid = _setup_run(store, tmp_path, EXACT_MEAN)
    drv = Driver(make_store(kind), lease_seconds=30.0, owner="server-a")
    deadline = time.monotonic() + 30
    while not _snapshot(store, rid)["rounds"]:
        assert time.monotonic() < deadline
        drv.tick()

    def zero_count(cid: str, v: list[int]) -> list[int]:  # the exact mean's (value, 1): count 0
        return [v[0], 0] if cid == "dev-0" else v

    # refused at submission: the count entry does not match the record count
    with pytest.raises(DataError, match="total_mismatch"):
        _answer(store, rid, zero_count)
    # a bad report stored without that check (an older server): the driver excludes it
    with store.session() as s, s.begin():
        s.add(
            Report(
                run_id=rid,
                round_index=0,
                client_id="dev-0",
                vector=json.dumps([5, -1]),
                count=1,
                digest="x" * 64,
                received_at=time.time(),
            )
        )
    assert _answer(store, rid) == N - 1
    _drive(store, drv, rid)
    view = _snapshot(store, rid)
    assert view["status"] == "done", view
    result = json.loads(view["result"])
    # the others' exact mean, device 0 left out
    others = VALUES[1:]
    assert result["n_clients"] == N - 1
    assert result["estimate"] == pytest.approx(float(np.mean(others)), abs=2**-15)
    with store.session() as s:
        rep = s.get(Report, (rid, 0, "dev-0"))
        assert rep is not None and rep.excluded is not None and "total_mismatch" in rep.excluded
    assert drv.excluded == {"total_mismatch": 1}
    assert 'fedstats_reports_excluded_total{reason="total_mismatch"} 1' in excluded_metrics(drv)


_READONLY_SCRIPT = r"""
import json, os, subprocess, sys
from fedstats.service.store import open_store
from fedstats.service.http.app import create_app
from starlette.testclient import TestClient

d, mode = sys.argv[1], sys.argv[2]
url = f"sqlite:///{d}/x.db"
store = open_store(url)
app = create_app(store, run_driver=False)
out = {}

def lock(on):
    files = [os.path.join(d, f) for f in sorted(os.listdir(d)) if not f.endswith("-shm")] + [d]
    if mode == "chattr":  # root ignores permissions: make the files immutable instead
        subprocess.run(["chattr", "+i" if on else "-i", *files], check=True)
    else:
        for f in files:
            os.chmod(f, (0o555 if on else 0o755) if os.path.isdir(f) else (0o444 if on else 0o644))

with TestClient(app) as http:
    out["before"] = [http.get("/healthz").status_code, http.get("/readyz").status_code]
    lock(True)
    try:
        out["during"] = [http.get("/healthz").status_code, http.get("/readyz").status_code]
        out["livez"] = [http.get("/livez").status_code, http.get("/livez").json()]
        # connections opened during the read-only period (a pool that grows) open read-only
        conns = [store.engine.connect() for _ in range(3)]
        for c in conns:
            try:
                with c.begin():
                    c.exec_driver_sql("UPDATE state_version SET version = version + 1")
            except Exception:
                pass
        for c in conns:
            c.close()
        try:
            open_store(url, require_writable=True)
            out["open"] = "opened"
        except Exception as exc:
            out["open"] = f"{type(exc).__name__}: {exc}"
    finally:
        lock(False)
    out["after"] = [http.get("/healthz").status_code, http.get("/readyz").status_code]
    conns = [store.engine.connect() for _ in range(3)]  # every pooled connection writes again
    try:
        for c in conns:
            with c.begin():
                c.exec_driver_sql("UPDATE state_version SET version = version + 1")
        out["write"] = "ok"
    except Exception as exc:
        out["write"] = str(exc)[:200]
    for c in conns:
        c.close()
print(json.dumps(out))
"""


def test_sqlite_recovers_from_a_read_only_period_without_restart(tmp_path: Path) -> None:
    """/healthz and /readyz answer 503 while the database cannot be written, 200 again after.

    /livez (the devices' probe) asks nothing of the store: 200 throughout.
    """
    if os.geteuid() == 0 and shutil.which("chattr") is None:
        pytest.fail("running as root needs chattr (e2fsprogs) to make the database read-only")
    mode = "chattr" if os.geteuid() == 0 else "chmod"
    d = tmp_path / "db"
    d.mkdir()
    script = tmp_path / "readonly.py"
    script.write_text(_READONLY_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        proc = subprocess.run(
            [sys.executable, str(script), str(d), mode],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    finally:
        if mode == "chattr":
            subprocess.run(["chattr", "-R", "-i", str(d)], check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["before"] == [200, 200]
    assert out["during"] == [503, 503]
    assert out["livez"] == [200, {"status": "ok"}]
    assert out["open"].startswith("DataError") and "read-only" in out["open"], out
    assert out["after"] == [200, 200]
    assert out["write"] == "ok"


def test_server_refuses_to_start_on_a_read_only_database(tmp_path: Path) -> None:
    """``fedstats server`` on a read-only database: one line on stderr, exit 2, no traceback."""
    d = tmp_path / "db"
    d.mkdir()
    url = f"sqlite:///{d / 'x.db'}"
    open_store(url).close()
    fedstats = str(Path(sys.executable).with_name("fedstats"))
    root = os.geteuid() == 0
    files = [str(p) for p in d.iterdir()] + [str(d)]
    if root:
        subprocess.run(["chattr", "+i", *files], check=True)
    else:
        for f in files:
            os.chmod(f, 0o555 if os.path.isdir(f) else 0o444)
    try:
        proc = subprocess.run(
            [fedstats, "server", "--db", url, "--port", str(free_port())],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        if root:
            subprocess.run(["chattr", "-i", *files], check=False)
        else:
            for f in files:
                os.chmod(f, 0o755 if os.path.isdir(f) else 0o644)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr
    assert any("read-only" in ln for ln in lines), proc.stderr


def test_a_lock_timeout_is_a_503_with_retry_after(make_store: Callable[..., Store]) -> None:
    """A request blocked on a row lock past ``lock_timeout`` answers 503 + Retry-After, not 500."""
    from starlette.testclient import TestClient

    from fedstats.service.domain.operators import add_operator
    from fedstats.service.http.app import create_app
    from fedstats.service.store.tables import Budget

    timeouts = Timeouts(lock=0.5, statement=10.0, idle_in_transaction=10.0)
    store = make_store("postgresql", timeouts)
    with store.transaction() as tx:
        ledger.set_budget(tx, "population", "locked", epsilon=1.0, delta=0.0, actor="t")
    token = add_operator(store, "op")
    holder = make_store("postgresql", timeouts)
    app = create_app(store, run_driver=False)
    auth_h = {"Authorization": f"Bearer {token}"}
    with TestClient(app) as http:
        with holder.session() as s, s.begin():
            s.execute(select(Budget).where(Budget.name == "locked").with_for_update()).scalar_one()
            t0 = time.monotonic()
            r = http.put(
                "/v1/admin/budgets/population/locked",
                json={"epsilon": 2.0, "delta": 0.0},
                headers=auth_h,
            )
            assert time.monotonic() - t0 < 5.0
            assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
        # the lock is gone: the same request succeeds
        r = http.put(
            "/v1/admin/budgets/population/locked",
            json={"epsilon": 2.0, "delta": 0.0},
            headers=auth_h,
        )
        assert r.status_code == 200, r.text


def _backend_pid(store: Store) -> int:
    from sqlalchemy import text

    with store.engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(pid: int) -> None:
    import psycopg

    with psycopg.connect(
        "host=127.0.0.1 port=5432 dbname=test user=postgres", autocommit=True
    ) as c:
        assert c.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    deadline = time.monotonic() + 10
    with psycopg.connect(
        "host=127.0.0.1 port=5432 dbname=test user=postgres", autocommit=True
    ) as c:
        while c.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, "the terminated backend did not exit"
            time.sleep(0.05)


def test_a_pooled_connection_the_database_dropped_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A connection idle past PING_AFTER_IDLE is pinged at checkout and replaced if dead (the request does
    not see it); one returned a moment ago is used unpinged: if the database dropped it meanwhile its
    request fails (503 at the HTTP edge, retried by devices) and the pool reconnects for the next."""
    why = pg_reachable()
    if why is not None:
        pytest.skip(why)
    import fedstats.service.store as store_module

    with pg_schema() as url:
        store = open_store(url)
        try:
            pid = _backend_pid(store)
            assert _backend_pid(store) == pid  # one pooled connection, reused
            monkeypatch.setattr(store_module, "PING_AFTER_IDLE", 0.0)  # every checkout pings
            _terminate(pid)
            replaced = _backend_pid(store)  # the ping failed: a fresh connection, no error
            assert replaced != pid
            monkeypatch.setattr(store_module, "PING_AFTER_IDLE", 3600.0)  # no checkout pings
            _terminate(replaced)
            with pytest.raises(OperationalError):
                _backend_pid(store)
            assert _backend_pid(store) not in (pid, replaced)  # the pool reconnected
        finally:
            store.close()


def test_a_transaction_may_be_given_a_longer_idle_limit_never_a_shorter_one(
    make_store: Callable[..., Store],
) -> None:
    # the run driver closes a secure stage in one transaction that computes between its statements
    # (the unmasking: over 30 s at n = 5,000 under load, which ended the n = 5,000 benchmark's run with
    # IdleInTransactionSessionTimeout); it asks for the round deadline as its idle limit
    store = make_store("postgresql", Timeouts(lock=5.0, statement=30.0, idle_in_transaction=30.0))

    def limit(**kw: Any) -> str:
        with store.transaction(**kw) as tx:
            return str(tx.conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar())

    assert limit() == "30s"
    assert limit(idle_seconds=600.0) == "10min"
    assert limit(idle_seconds=5.0) == "30s"  # never shortened
    assert (
        limit() == "30s"
    )  # SET LOCAL: the next transaction on the pooled connection has the default
    off = make_store("postgresql", Timeouts(lock=5.0, statement=30.0, idle_in_transaction=0.0))
    with off.transaction(idle_seconds=600.0) as tx:  # 0 (no limit) stays no limit
        assert tx.conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar() == "0"


def test_a_transaction_ended_by_the_idle_limit_is_the_store_unavailable_and_the_next_one_runs(
    make_store: Callable[..., Store],
) -> None:
    # PostgreSQL ends a transaction idle past idle_in_transaction_session_timeout with SQLSTATE 25P03,
    # which psycopg raises as an InternalError: the run driver treated it as a broken run and aborted
    # it; it is the store being unavailable (nothing committed, connection gone), which the driver
    # retries from the journal, and the pool must hand out a live connection afterwards
    # the store's own limits (a short one would also end its migrations on a loaded machine), and a
    # short one for this transaction alone
    store = make_store("postgresql")
    with pytest.raises(OperationalError) as err:
        with store.transaction() as tx:
            tx.conn.exec_driver_sql("SET LOCAL idle_in_transaction_session_timeout = '500ms'")
            time.sleep(2.0)
            tx.conn.exec_driver_sql("SELECT 1")
    assert getattr(err.value.orig, "sqlstate", None) == "25P03"
    with store.transaction() as tx:
        assert tx.conn.exec_driver_sql("SELECT 2").scalar() == 2
