"""The two-aggregator (Prio3) mode's queries in SQL (:class:`SqlVdafQueries`, SQLAlchemy Core).

The tables and the interface are in :mod:`fedstats.service.store.vdaf`; the memory implementation is
:mod:`fedstats.service.store.memory_vdaf` (the parity test holds them to the same answers).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from fedstats.service.store.sql_writes import SqlRowWrites
from fedstats.service.store.vdaf import (
    ReportCount,
    VdafJob,
    VdafQueries,
    VdafShareRow,
    VdafSignedRow,
    VdafTaskRow,
    row_of,
    vdaf_jobs,
    vdaf_reports,
    vdaf_signed,
    vdaf_slots,
    vdaf_tasks,
)

__all__ = ["SqlVdafQueries"]


_T = vdaf_tasks.c
_R = vdaf_reports.c
_J = vdaf_jobs.c
_S = vdaf_signed.c
_L = vdaf_slots.c


_JOB_COLUMNS = (_J.job_id, _J.report_ids, _J.response, _J.status, _J.lease_owner, _J.lease_epoch)


def _job(r: Any) -> VdafJob:
    job_id, ids, response, status, owner, epoch = r
    return VdafJob(
        str(job_id),
        [str(x) for x in json.loads(ids)],
        response,
        str(status),
        owner,
        int(epoch or 0),
    )


class SqlVdafQueries(SqlRowWrites, VdafQueries):
    """:class:`VdafQueries` on SQLAlchemy (``self.conn``: the transaction's connection)."""

    conn: Connection

    def vdaf_task(
        self, task_id: str, *, lock: bool = False, share: bool = False
    ) -> VdafTaskRow | None:
        """See :meth:`VdafQueries.vdaf_task`."""
        q = select(vdaf_tasks).where(_T.id == task_id)
        if lock:
            q = q.with_for_update()
        elif share:
            q = q.with_for_update(read=True)
        r = self.conn.execute(q).mappings().first()
        if r is None:
            return None
        return row_of(VdafTaskRow, r)

    def vdaf_report_counts(self, task_id: str) -> list[ReportCount]:
        """See :meth:`VdafQueries.vdaf_report_counts`."""
        rows = self.conn.execute(
            select(_R.status, _R.reason, func.count())
            .where(_R.task_id == task_id)
            .group_by(_R.status, _R.reason)
        ).all()
        return [
            ReportCount(str(s), None if why is None else str(why), int(n)) for s, why, n in rows
        ]

    def _share(self, r: Any) -> VdafShareRow:
        return VdafShareRow(
            str(r.report_id),
            str(r.client_id),
            bytes(r.public_share),
            bytes(r.input_share),
            None if r.job_id is None else str(r.job_id),
        )

    def vdaf_report_of(self, task_id: str, report_id: str, client_id: str) -> VdafShareRow | None:
        """See :meth:`VdafQueries.vdaf_report_of`."""
        r = self.conn.execute(
            select(_R.report_id, _R.client_id, _R.public_share, _R.input_share, _R.job_id)
            .where(_R.task_id == task_id, (_R.report_id == report_id) | (_R.client_id == client_id))
            .limit(1)
        ).first()
        return None if r is None else self._share(r)

    def vdaf_reports_of_many(
        self, task_id: str, report_ids: Sequence[str], client_ids: Sequence[str]
    ) -> list[VdafShareRow]:
        """See :meth:`VdafQueries.vdaf_reports_of_many`."""
        if not report_ids and not client_ids:
            return []
        rows = self.conn.execute(
            select(_R.report_id, _R.client_id, _R.public_share, _R.input_share, _R.job_id).where(
                _R.task_id == task_id,
                _R.report_id.in_(list(report_ids)) | _R.client_id.in_(list(client_ids)),
            )
        ).all()
        return [self._share(r) for r in rows]

    def vdaf_shares(self, task_id: str, report_ids: Sequence[str]) -> dict[str, VdafShareRow]:
        """See :meth:`VdafQueries.vdaf_shares`."""
        if not report_ids:
            return {}
        rows = self.conn.execute(
            select(_R.report_id, _R.client_id, _R.public_share, _R.input_share, _R.job_id).where(
                _R.task_id == task_id, _R.report_id.in_(list(report_ids))
            )
        ).all()
        return {str(r.report_id): self._share(r) for r in rows}

    def vdaf_pending(self, task_id: str, limit: int) -> list[str]:
        """See :meth:`VdafQueries.vdaf_pending`."""
        got = self.conn.execute(
            select(_R.report_id)
            .where(_R.task_id == task_id, _R.status == "pending", _R.job_id.is_(None))
            .order_by(_R.received_at, _R.report_id)
            .limit(limit)
        ).scalars()
        return [str(r) for r in got]

    def take_vdaf_reports(self, task_id: str, report_ids: Sequence[str], job_id: str) -> int:
        """See :meth:`VdafQueries.take_vdaf_reports`."""
        got = self.conn.execute(
            update(vdaf_reports)
            .where(_R.task_id == task_id, _R.report_id.in_(list(report_ids)), _R.job_id.is_(None))
            .values(job_id=job_id)
        )
        return int(getattr(got, "rowcount", 0) or 0)

    def set_vdaf_fates(
        self, task_id: str, report_ids: Sequence[str], job_id: str, reason: str | None
    ) -> None:
        """See :meth:`VdafQueries.set_vdaf_fates`."""
        if not report_ids:
            return
        self.conn.execute(
            update(vdaf_reports)
            .where(_R.task_id == task_id, _R.report_id.in_(list(report_ids)))
            .values(
                status="accepted" if reason is None else "rejected", reason=reason, job_id=job_id
            )
        )

    def vdaf_claimable_job(self, task_id: str, now: float) -> VdafJob | None:
        """See :meth:`VdafQueries.vdaf_claimable_job`."""
        r = self.conn.execute(
            select(*_JOB_COLUMNS)
            .where(
                _J.task_id == task_id,
                _J.status == "running",
                _J.lease_owner.is_(None) | _J.lease_until.is_(None) | (_J.lease_until < now),
            )
            .order_by(_J.created_at, _J.job_id)
            .limit(1)
        ).first()
        return None if r is None else _job(r)

    def lease_vdaf_job(
        self, task_id: str, job_id: str, *, owner: str | None, until: float | None, epoch: int
    ) -> None:
        """See :meth:`VdafQueries.lease_vdaf_job`."""
        self.conn.execute(
            update(vdaf_jobs)
            .where(_J.task_id == task_id, _J.job_id == job_id)
            .values(lease_owner=owner, lease_until=until, lease_epoch=epoch)
        )

    def vdaf_job(self, task_id: str, job_id: str) -> VdafJob | None:
        """See :meth:`VdafQueries.vdaf_job`."""
        r = self.conn.execute(
            select(*_JOB_COLUMNS).where(_J.task_id == task_id, _J.job_id == job_id)
        ).first()
        return None if r is None else _job(r)

    def vdaf_signed(self, signed_id: str, *, lock: bool = False) -> VdafSignedRow | None:
        """See :meth:`VdafQueries.vdaf_signed`."""
        q = select(vdaf_signed).where(_S.id == signed_id)
        if lock:
            q = q.with_for_update()
        r = self.conn.execute(q).mappings().first()
        return None if r is None else row_of(VdafSignedRow, r)

    def vdaf_rounds_of(self, signed_id: str) -> list[VdafTaskRow]:
        """See :meth:`VdafQueries.vdaf_rounds_of`."""
        rows = (
            self.conn.execute(
                select(vdaf_tasks).where(_T.signed_id == signed_id).order_by(_T.round_index)
            )
            .mappings()
            .all()
        )
        return [row_of(VdafTaskRow, r) for r in rows]

    def vdaf_slot(self, signed_id: str, client_id: str) -> int | None:
        """See :meth:`VdafQueries.vdaf_slot`."""
        got = self.conn.execute(
            select(_L.slot).where(_L.signed_id == signed_id, _L.client_id == client_id)
        ).scalar()
        return None if got is None else int(got)

    def add_vdaf_slot(self, signed_id: str, client_id: str) -> int:
        """See :meth:`VdafQueries.add_vdaf_slot`."""
        top = self.conn.execute(select(func.max(_L.slot)).where(_L.signed_id == signed_id)).scalar()
        slot = 0 if top is None else int(top) + 1
        self.conn.execute(
            insert(vdaf_slots).values(signed_id=signed_id, client_id=client_id, slot=slot)
        )
        return slot

    def finish_vdaf_job(self, task_id: str, job_id: str, response: str | None) -> bool:
        """See :meth:`VdafQueries.finish_vdaf_job`."""
        got = self.conn.execute(
            update(vdaf_jobs)
            .where(_J.task_id == task_id, _J.job_id == job_id, _J.status == "running")
            .values(status="done", response=response)
        )
        return int(getattr(got, "rowcount", 0) or 0) == 1

    def count_vdaf_jobs(self, task_id: str, status: str) -> int:
        """See :meth:`VdafQueries.count_vdaf_jobs`."""
        got = self.conn.execute(
            select(func.count())
            .select_from(vdaf_jobs)
            .where(_J.task_id == task_id, _J.status == status)
        ).scalar_one()
        return int(got)
