"""Group commit of Prio3 uploads (issue 39): a batch gives every upload the answer it gets alone."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from fedstats.client.vdaf import Prio3Task, shard_report
from fedstats.service.domain import vdaf as domain
from fedstats.service.domain.vdaf_group import Upload, upload_reports
from fedstats.service.domain.vdaf_upload import Uploaded
from fedstats.service.store import Store, open_store
from service_helpers import pg_reachable, pg_schema

COUNT = {"type": "count"}


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def twins(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """Two fresh stores of one backend: one takes the batch, the other the same uploads one by one."""
    with ExitStack() as stack:
        if request.param == "memory":
            urls = ["memory://", "memory://"]
        elif request.param == "sqlite":
            urls = [f"sqlite:///{tmp_path / f'{i}.db'}" for i in range(2)]
        else:
            why = pg_reachable()
            if why:
                pytest.skip(why)
            urls = [stack.enter_context(pg_schema()) for _ in range(2)]
        stores = [open_store(u) for u in urls]
        for s in stores:
            stack.callback(s.close)
        yield stores[0], stores[1]


def _outcome(x: Any) -> Any:
    return x if isinstance(x, bool) else (type(x).__name__, str(x))


def test_a_batch_answers_each_upload_as_alone_and_stores_the_same(
    twins: tuple[Store, Store],
) -> None:
    task_id, key, token = secrets.token_hex(32), os.urandom(32), secrets.token_urlsafe(32)
    other = secrets.token_hex(32)
    for s in twins:
        for tid in (task_id, other):
            domain.create_task(
                s,
                task_id=tid,
                role="leader",
                vdaf=COUNT,
                verify_key=key,
                ctx=b"c",
                peer_url="https://helper",
                peer_token=token,
            )
        domain.create_task(  # a task of another population
            s,
            task_id="ab" * 32,
            role="leader",
            vdaf=COUNT,
            verify_key=key,
            ctx=b"c",
            peer_url="https://helper",
            peer_token=token,
            population="other",
        )
    task = Prio3Task(task_id, COUNT, b"c", "https://127.0.0.1:1", "https://127.0.0.1:2")
    reps = [shard_report(task, i % 2) for i in range(6)]
    now = time.time()

    def up(
        i: int, cid: str, nonce: str, *, tid: str = task_id, share: bytes | None = None
    ) -> Upload:
        rid, public, shares = reps[i]
        return Upload(
            tid,
            client_id=cid,
            population="default",
            report_id=rid,
            public_share=public,
            input_share=shares[0] if share is None else share,
            nonce=(cid, nonce, now),
        )

    batch = [
        up(0, "d0", "n0"),
        up(1, "d1", "n1"),
        up(0, "d0", "n2"),  # the same report again: acknowledged again (False)
        up(2, "d0", "n3"),  # the device's second report: refused
        up(3, "d3", "n4", share=b"\x00"),  # a malformed share
        up(4, "d4", "n1"),  # a nonce is per device: d1's nonce name is free for d4 (stored)
        up(5, "d5", "n5", tid="cd" * 32),  # no such task
        up(5, "d5", "n6", tid="ab" * 32),  # another population
        up(2, "d2", "n7", tid=other),  # the same report id in another task: stored
        up(3, "d1", "n1"),  # d1's nonce used again: a replay
    ]
    got = upload_reports(twins[0], batch)
    alone: list[Any] = []
    for u in batch:
        try:
            alone.append(u.run(twins[1]))
        except Exception as exc:
            alone.append(exc)
    assert [_outcome(g) for g in got] == [_outcome(a) for a in alone]
    new = [g.new if isinstance(g, Uploaded) else g for g in got]
    assert new[:3] == [True, True, False] and new[5] is True and new[8] is True
    # the leader's receipts: one per stored or repeated report, the same as alone
    assert all(isinstance(got[i], Uploaded) and got[i].receipt for i in (0, 1, 2, 5, 8))
    assert [type(got[i]).__name__ for i in (3, 4, 6, 7, 9)] == [
        "ConflictError",
        "DataError",
        "NotFoundError",
        "SecurityError",
        "SecurityError",
    ]
    for tid in (task_id, other):
        views = []
        for s in twins:
            with s.transaction(read_only=True) as tx:
                pending = tx.vdaf_pending(tid, 100)
                views.append(
                    sorted(
                        (r.report_id, r.client_id) for r in tx.vdaf_shares(tid, pending).values()
                    )
                )
        assert views[0] == views[1] and views[0]
