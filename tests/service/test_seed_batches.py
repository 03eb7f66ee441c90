"""A secure run's check-ins and reveals batched in one transaction (issue 40): the batch's devices' rows are
read once and its rows written together (:mod:`fedstats.service.domain.batched`), and every request
gets the answer it would get alone, on every store kind.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import HTTPException

from fedstats.errors import SecurityError
from fedstats.service.domain import runs, secure_devices
from fedstats.service.domain.tasks import ConflictError
from fedstats.service.http.batching import TransactionBatcher, Work
from fedstats.service.http.deps import NonceUse
from fedstats.service.store import Store
from fedstats.service.store.rows import ClientRow
from fedstats.wire import seeding
from service_helpers import fresh_store


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A fresh, empty store of each kind (PostgreSQL in a schema of its own; skipped if away)."""
    with fresh_store(request.param, tmp_path) as st:
        yield st


class Counting:
    """A transaction whose query calls are counted (by method name) into ``calls``."""

    def __init__(self, tx: Any, calls: Counter[str]) -> None:
        self._tx, self._calls = tx, calls

    def __getattr__(self, name: str) -> Any:
        self._calls[name] += 1
        return getattr(self._tx, name)


def _secure_run(store: Store, devices: list[str], cohort: int = 20) -> tuple[str, str]:
    """A secure task (an unsigned row) of population ``pop`` and a run of it open for check-in."""
    task_id, run_id = uuid.uuid4().hex * 2, str(uuid.uuid4())
    config = {
        "analysis": "x",
        "cohort_size": cohort,
        "max_records_per_client": 1,
        "privacy": {"population": "pop"},
        "secure_aggregation": {},
    }
    with store.transaction() as tx:
        tx.add_task(task_id, json.dumps(config), "alice", 100.0)
        tx.add_run(
            id=run_id,
            task_id=task_id,
            analyst="alice",
            status="checkin",
            created_at=time.time(),
            checkin_deadline=time.time() + 3600,
            secret="s" * 64,
        )
        for i, cid in enumerate(devices):
            tx.add_client(ClientRow(cid, f"{i:064x}", "pop", "fp", 2e9, False, None), 1.0)
    return task_id, run_id


def _value(cid: str) -> bytes:
    return cid.encode().ljust(32, b".")


def test_member_rows_and_withholders_among(store: Store) -> None:
    """The two queries a batch reads its devices' rows with answer as the one-device queries do."""
    task_id, run_id = _secure_run(store, ["a", "b", "c"])
    with store.transaction() as tx:
        tx.add_member(run_id, "a", 0, 1, 1.0, "aa" * 32)
        tx.add_member(run_id, "b", 1, 1, 1.0, "bb" * 32)
        tx.set_reveal(run_id, "b", "0b" * 32)
        tx.add_withholders(task_id, "another-run", ["c"], 1.0)
    with store.transaction(read_only=True) as tx:
        got = tx.member_rows(run_id, ["a", "b", "c", "z"])
        assert got == {k: tx.member_row(run_id, k) for k in ("a", "b")}
        assert got["b"].reveal == "0b" * 32 and got["a"].slot_start == 0
        assert tx.member_rows("no-run", ["a"]) == {}
        assert tx.withholders_among(task_id, ["a", "c", "z"]) == {"c"}
        assert tx.withholders_among("other-task", ["c"]) == set()


def test_check_ins_of_a_batch_read_their_devices_once_and_answer_as_alone(store: Store) -> None:
    """One member read and one withholder read for a batch; a repeat, a withholder and a replay alone."""
    devices = [f"dev-{i}" for i in range(8)]
    task_id, run_id = _secure_run(store, devices)
    with store.transaction() as tx:
        tx.add_withholders(task_id, "an-earlier-run", ["dev-5"], 1.0)
    batcher = TransactionBatcher(store, None)
    calls: Counter[str] = Counter()

    def checkin(cid: str, nonce: str) -> Work:
        def go(tx: Any, held: dict[Any, Any]) -> Any:
            commitment = seeding.commitment(run_id, cid, _value(cid))
            return runs.checkin(
                Counting(tx, calls), run_id, cid, 1, commitment, population="pop", held=held
            )

        return Work(NonceUse(cid, nonce, time.time()), go)

    got = batcher.write([checkin(f"dev-{i}", f"n{i}") for i in range(4)])
    assert got == [{"slot_start": i, "slot_count": 1} for i in range(4)]
    assert batcher.batches == 1
    assert (calls["member_rows"], calls["member_row"], calls["member"]) == (1, 0, 0)
    assert (calls["withholders_among"], calls["is_withholder"]) == (1, 0)
    assert calls["add_member"] == 0  # the batch's members written together (add_members)
    # the same device twice in one batch (two requests): the second finds the first's slots
    got = batcher.write([checkin("dev-4", "n4"), checkin("dev-4", "n4b")])
    assert got == [{"slot_start": 4, "slot_count": 1}] * 2 and batcher.batches == 2
    # a withholder of the task in a batch: refused as alone, the others of its batch written once
    got = batcher.write([checkin("dev-6", "n6"), checkin("dev-5", "n5"), checkin("dev-7", "n7")])
    assert got[0] == {"slot_start": 5, "slot_count": 1} and got[2] == {
        "slot_start": 6,
        "slot_count": 1,
    }
    assert isinstance(got[1], ConflictError) and "did not reveal" in str(got[1])
    # a replayed nonce in a batch: 401 for it alone, the repeat of an accepted check-in its slots again
    got = batcher.write([checkin("dev-0", "n0"), checkin("dev-1", "n1c")])
    assert isinstance(got[0], HTTPException) and got[0].status_code == 401
    assert got[1] == {"slot_start": 1, "slot_count": 1}
    with store.transaction(read_only=True) as tx:
        assert tx.cohort(run_id).devices == 7
        assert tx.member_row(run_id, "dev-5") is None


def test_reveals_of_a_batch_read_their_members_once_and_answer_as_alone(store: Store) -> None:
    """One member read for a batch; a repeat in the batch is a duplicate; a bad one fails alone."""
    devices = [f"dev-{i}" for i in range(6)]
    _, run_id = _secure_run(store, devices)
    with store.transaction() as tx:
        for i, cid in enumerate(devices):
            tx.add_member(run_id, cid, i, 1, 1.0, seeding.commitment(run_id, cid, _value(cid)))
        tx.update_run(run_id, status="seeding")
    with store.transaction(read_only=True) as tx:
        run = runs.load_run(tx, run_id)
        seen = secure_devices.seed_transcript(tx, run)["commitments_digest"]
    batcher = TransactionBatcher(store, None)
    calls: Counter[str] = Counter()

    def reveal(cid: str, nonce: str, value: bytes | None = None) -> Work:
        hexed = (_value(cid) if value is None else value).hex()

        def go(tx: Any, held: dict[Any, Any]) -> Any:
            counted = Counting(tx, calls)
            run = runs.locked_run(counted, run_id, held)
            return secure_devices.record_reveal(counted, run, cid, hexed, seen, held)

        return Work(NonceUse(cid, nonce, time.time()), go)

    got = batcher.write([reveal("dev-0", "r0"), reveal("dev-1", "r1"), reveal("dev-0", "r0b")])
    assert got == [True, True, False] and batcher.batches == 1  # the repeat: a duplicate
    assert (calls["member_rows"], calls["member_row"], calls["set_reveal"]) == (1, 0, 0)
    # a value that does not open the commitment fails alone; the others of its batch are stored
    got = batcher.write(
        [reveal("dev-2", "r2"), reveal("dev-3", "r3", bytes(32)), reveal("dev-4", "r4")]
    )
    assert got[0] is True and got[2] is True
    assert isinstance(got[1], SecurityError) and "does not open" in str(got[1])
    # a replayed nonce: 401 for it, the others as alone (a stored reveal again: a duplicate)
    got = batcher.write([reveal("dev-1", "r1"), reveal("dev-2", "r2b"), reveal("dev-5", "r5")])
    assert isinstance(got[0], HTTPException) and got[0].status_code == 401
    assert got[1:] == [False, True]
    with store.transaction(read_only=True) as tx:
        revealed = {m.client_id: m.reveal for m in tx.members_in_order(run_id)}
    assert revealed == {c: None if c == "dev-3" else _value(c).hex() for c in devices}
