"""Group commit of Prio3 report uploads: the uploads that arrive together share one transaction.

A Prio3 upload (:func:`fedstats.service.domain.vdaf.upload_report`) alone is a transaction of four or
five statements and one commit; the commit (an ``fsync`` on SQLite, a round trip and a WAL flush on
PostgreSQL) and the statements were most of an aggregator's CPU per report. :func:`upload_reports` writes
a batch set-based, in one transaction: per task one read of the task and one of the reports that would
clash (same report id or device), per upload its request nonce, then one multi-row insert.

Every upload keeps the answer or error it would get alone: an upload this path cannot decide as
``upload_report`` would (a malformed share, a task not open or of another population, a device out of
its round's range, a replayed nonce, a report id or device already seen, a stale device row that fails
its check) is left out of the batch and then goes through ``upload_report`` itself, in a transaction of
its own; so does every upload of a batch whose transaction failed. The checks below are
``upload_report``'s: a change there must be mirrored here (the exact path stays the reference). An upload
is acknowledged only once the transaction holding it committed.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fedstats.service.domain.vdaf_tasks import vdaf_from_spec
from fedstats.service.domain.vdaf_upload import (
    Uploaded,
    _check_round_member,
    upload_receipt,
    upload_report,
)
from fedstats.service.store import State, Store
from fedstats.service.store.vdaf import VdafTaskRow

__all__ = ["Upload", "upload_reports"]

_HEX = frozenset("0123456789abcdefABCDEF")


@dataclass(frozen=True)
class Upload:
    """The arguments of one :func:`~fedstats.service.domain.vdaf.upload_report` call."""

    task_id: str
    client_id: str
    population: str
    report_id: Any
    public_share: bytes
    input_share: bytes
    leader_receipt: bytes | None = None
    nonce: tuple[str, str, float] | None = None
    confirm: Callable[[State], None] | None = None

    def run(self, store: Store) -> Uploaded:
        """``upload_report`` of this upload on ``store``."""
        return upload_report(store, **vars(self))


def _put(
    tx: State, uploads: Sequence[Upload], receipts: dict[int, bytes | None]
) -> tuple[list[int], set[int]]:
    """The set-based write of a batch in ``tx``: (stored upload indices, indices left for the exact path).

    ``receipts`` receives, per upload checked, the leader's receipt (None on the helper).
    """
    exact: set[int] = set()
    by_task: dict[str, list[int]] = {}
    tasks: dict[str, VdafTaskRow | None] = {}
    for i, u in enumerate(uploads):
        rid = u.report_id
        if not (isinstance(rid, str) and len(rid) == 32 and set(rid) <= _HEX):
            exact.add(i)
            continue
        if u.task_id not in tasks:
            tid = u.task_id
            ok = isinstance(tid, str) and len(tid) == 64 and set(tid) <= _HEX
            row = tx.vdaf_task(tid) if ok else None
            if row is not None and row.role == "leader":
                # as upload_report: the leader's uploads hold the task row in share mode, so its
                # collection (which locks the row for update) sees every receipt given before it
                row = tx.vdaf_task(tid, share=True)
            tasks[tid] = row
        task = tasks[u.task_id]
        if task is None or task.status != "open" or task.population != u.population:
            exact.add(i)
            continue
        try:
            if u.confirm is not None:
                u.confirm(tx)
            vdaf = vdaf_from_spec(json.loads(task.vdaf))
            vdaf.decode_public_share(u.public_share)
            vdaf.decode_input_shares(0 if task.role == "leader" else 1, [u.input_share])
            receipt = upload_receipt(task.verify_key, u.task_id, rid, u.client_id, u.public_share)
            if task.role == "helper" and (
                not isinstance(u.leader_receipt, bytes)
                or not secrets.compare_digest(u.leader_receipt, receipt)
            ):
                exact.add(i)  # upload_report refuses it (SecurityError)
                continue
            receipts[i] = receipt if task.role == "leader" else None
            if task.signed_id is not None:
                _check_round_member(tx, task, u.client_id)
        except Exception:  # FedstatsError, or the HTTP layer's confirm refusing a stale device row
            exact.add(i)
            continue
        by_task.setdefault(u.task_id, []).append(i)
    stored: list[int] = []
    now = time.time()
    for tid, idx in by_task.items():
        clash = tx.vdaf_reports_of_many(
            tid, [uploads[i].report_id for i in idx], [uploads[i].client_id for i in idx]
        )
        seen = {r.report_id for r in clash} | {r.client_id for r in clash}
        rows = []
        for i in idx:
            u = uploads[i]
            if u.report_id in seen or u.client_id in seen:
                # a repeat, a second report, or one a job counted missing at the helper:
                # upload_report decides
                exact.add(i)
                continue
            if u.nonce is not None and not tx.use_nonce(*u.nonce):
                exact.add(i)  # a replay (nothing written): upload_report refuses it
                continue
            seen |= {u.report_id, u.client_id}
            rows.append((u.report_id, u.client_id, u.public_share, u.input_share))
            stored.append(i)
        tx.add_vdaf_reports(tid, rows, now)
    return stored, exact


def upload_reports(store: Store, uploads: Sequence[Upload]) -> list[Uploaded | BaseException]:
    """Store a batch of uploads in one transaction; per upload its answer (as ``upload_report``) or error.

    Parameters
    ----------
    store : Store
        This aggregator's database.
    uploads : sequence of Upload
        The batch (any tasks and devices).

    Returns
    -------
    list
        Per upload, in order: its :class:`~fedstats.service.domain.vdaf_upload.Uploaded` (``new``: False
        for a repeated identical upload; the leader's receipt), or the exception
        :func:`~fedstats.service.domain.vdaf.upload_report` raises for it alone.
    """
    out: list[Uploaded | BaseException | None] = [None] * len(uploads)
    receipts: dict[int, bytes | None] = {}
    try:
        with store.transaction() as tx:
            stored, exact = _put(tx, uploads, receipts)
    except Exception:  # the batch failed as a whole (a concurrent insert, the commit): each alone
        stored, exact = [], set(range(len(uploads)))
    for i in stored:
        out[i] = Uploaded(True, receipts.get(i))
    for i in sorted(exact):
        try:
            out[i] = uploads[i].run(store)
        except Exception as exc:
            out[i] = exc
    return [x if x is not None else RuntimeError("upload not processed") for x in out]
