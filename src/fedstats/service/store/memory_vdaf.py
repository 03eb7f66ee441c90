"""The Prio3 query group on Python containers, with the semantics of the SQL stores.

Same answers as :class:`~fedstats.service.store.sql_vdaf.SqlVdafQueries`: tasks, signed tasks, slots,
report shares and aggregation jobs keyed like the tables' primary keys, with their unique constraints
(a device's second report share in a task, a slot given twice) raising
:class:`sqlalchemy.exc.IntegrityError` as the databases do; the same orderings and counts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from fedstats.service.store.memory_tables import MemoryTables, Row
from fedstats.service.store.vdaf import (
    ReportCount,
    VdafJob,
    VdafQueries,
    VdafShareRow,
    VdafSignedRow,
    VdafTaskRow,
    row_of,
)
from fedstats.service.store.vdaf_results import VdafResultQueries, VdafResultRow

__all__ = ["MemoryVdafQueries"]


def _share(r: Row) -> VdafShareRow:
    return VdafShareRow(
        str(r.report_id), str(r.client_id), bytes(r.public_share), bytes(r.input_share), r.job_id
    )


def _job(j: Row) -> VdafJob:
    return VdafJob(
        str(j.job_id),
        [str(x) for x in json.loads(j.report_ids)],
        j.response,
        str(j.status),
        j.lease_owner,
        int(j.lease_epoch or 0),
    )


class MemoryVdafQueries(MemoryTables, VdafQueries, VdafResultQueries):
    """:class:`~fedstats.service.store.vdaf.VdafQueries` on in-memory tables (``self.data``)."""

    def _reports_of(self, task_id: str) -> list[Row]:
        return [r for (tid, _rid), r in self._t("vdaf_reports").items() if tid == task_id]

    def vdaf_task(
        self,
        task_id: str,
        *,
        lock: bool = False,  # noqa: ARG002 - transactions are serialized
        share: bool = False,  # noqa: ARG002
    ) -> VdafTaskRow | None:
        """See :meth:`VdafQueries.vdaf_task`."""
        r = self._t("vdaf_tasks").get(task_id)
        return None if r is None else row_of(VdafTaskRow, r.__dict__)

    def vdaf_report_counts(self, task_id: str) -> list[ReportCount]:
        """See :meth:`VdafQueries.vdaf_report_counts`."""
        counts: dict[tuple[str, str | None], int] = {}
        for r in self._reports_of(task_id):
            key = (str(r.status), r.reason)
            counts[key] = counts.get(key, 0) + 1
        return [ReportCount(s, why, n) for (s, why), n in counts.items()]

    def vdaf_report_of(self, task_id: str, report_id: str, client_id: str) -> VdafShareRow | None:
        """See :meth:`VdafQueries.vdaf_report_of`."""
        for r in self._reports_of(task_id):
            if r.report_id == report_id or r.client_id == client_id:
                return _share(r)
        return None

    def vdaf_reports_of_many(
        self, task_id: str, report_ids: Sequence[str], client_ids: Sequence[str]
    ) -> list[VdafShareRow]:
        """See :meth:`VdafQueries.vdaf_reports_of_many`."""
        rids, cids = set(report_ids), set(client_ids)
        return [
            _share(r)
            for r in self._reports_of(task_id)
            if r.report_id in rids or r.client_id in cids
        ]

    def vdaf_shares(self, task_id: str, report_ids: Sequence[str]) -> dict[str, VdafShareRow]:
        """See :meth:`VdafQueries.vdaf_shares`."""
        rows = self._t("vdaf_reports")
        got = (rows.get((task_id, rid)) for rid in report_ids)
        return {str(r.report_id): _share(r) for r in got if r is not None}

    def vdaf_pending(self, task_id: str, limit: int) -> list[str]:
        """See :meth:`VdafQueries.vdaf_pending`."""
        pending = [
            r for r in self._reports_of(task_id) if r.status == "pending" and r.job_id is None
        ]
        pending.sort(key=lambda r: (float(r.received_at), str(r.report_id)))
        return [str(r.report_id) for r in pending[:limit]]

    def take_vdaf_reports(self, task_id: str, report_ids: Sequence[str], job_id: str) -> int:
        """See :meth:`VdafQueries.take_vdaf_reports`."""
        taken = 0
        for rid in dict.fromkeys(report_ids):
            r = self._t("vdaf_reports").get((task_id, rid))
            if r is not None and r.job_id is None:
                self._set("vdaf_reports", (task_id, rid), {"job_id": job_id})
                taken += 1
        return taken

    def set_vdaf_fates(
        self, task_id: str, report_ids: Sequence[str], job_id: str, reason: str | None
    ) -> None:
        """See :meth:`VdafQueries.set_vdaf_fates`."""
        status = "accepted" if reason is None else "rejected"
        for rid in report_ids:
            values = {"status": status, "reason": reason, "job_id": job_id}
            self._set("vdaf_reports", (task_id, rid), values)

    def vdaf_claimable_job(self, task_id: str, now: float) -> VdafJob | None:
        """See :meth:`VdafQueries.vdaf_claimable_job`."""
        free = [
            j
            for (tid, _jid), j in self._t("vdaf_jobs").items()
            if tid == task_id
            and j.status == "running"
            and (j.lease_owner is None or j.lease_until is None or j.lease_until < now)
        ]
        if not free:
            return None
        return _job(min(free, key=lambda j: (float(j.created_at), str(j.job_id))))

    def lease_vdaf_job(
        self, task_id: str, job_id: str, *, owner: str | None, until: float | None, epoch: int
    ) -> None:
        """See :meth:`VdafQueries.lease_vdaf_job`."""
        values = {"lease_owner": owner, "lease_until": until, "lease_epoch": epoch}
        self._set("vdaf_jobs", (task_id, job_id), values)

    def vdaf_job(self, task_id: str, job_id: str) -> VdafJob | None:
        """See :meth:`VdafQueries.vdaf_job`."""
        j = self._t("vdaf_jobs").get((task_id, job_id))
        return None if j is None else _job(j)

    def vdaf_signed(
        self,
        signed_id: str,
        *,
        lock: bool = False,  # noqa: ARG002 - transactions are serialized
    ) -> VdafSignedRow | None:
        """See :meth:`VdafQueries.vdaf_signed`."""
        r = self._t("vdaf_signed").get(signed_id)
        if r is None:
            return None
        return row_of(VdafSignedRow, r.__dict__)

    def vdaf_rounds_of(self, signed_id: str) -> list[VdafTaskRow]:
        """See :meth:`VdafQueries.vdaf_rounds_of`."""
        rows = [r for r in self._t("vdaf_tasks").values() if r.signed_id == signed_id]
        rows.sort(key=lambda r: (r.round_index is None, r.round_index or 0))
        return [row_of(VdafTaskRow, r.__dict__) for r in rows]

    def vdaf_slot(self, signed_id: str, client_id: str) -> int | None:
        """See :meth:`VdafQueries.vdaf_slot`."""
        r = self._t("vdaf_slots").get((signed_id, client_id))
        return None if r is None else int(r.slot)

    def add_vdaf_slot(self, signed_id: str, client_id: str) -> int:
        """See :meth:`VdafQueries.add_vdaf_slot`."""
        taken = [int(r.slot) for (sid, _c), r in self._t("vdaf_slots").items() if sid == signed_id]
        slot = max(taken) + 1 if taken else 0
        values = {"signed_id": signed_id, "client_id": client_id, "slot": slot}
        self._insert("vdaf_slots", (signed_id, client_id), values)
        return slot

    def finish_vdaf_job(self, task_id: str, job_id: str, response: str | None) -> bool:
        """See :meth:`VdafQueries.finish_vdaf_job`."""
        j = self._t("vdaf_jobs").get((task_id, job_id))
        if j is None or j.status != "running":
            return False
        self._set("vdaf_jobs", (task_id, job_id), {"status": "done", "response": response})
        return True

    def count_vdaf_jobs(self, task_id: str, status: str) -> int:
        """See :meth:`VdafQueries.count_vdaf_jobs`."""
        return sum(
            1
            for (tid, _j), j in self._t("vdaf_jobs").items()
            if tid == task_id and j.status == status
        )

    def vdaf_signed_list(self, population: str | None = None) -> list[VdafSignedRow]:
        """See :meth:`VdafResultQueries.vdaf_signed_list`."""
        rows = [
            r
            for r in self._t("vdaf_signed").values()
            if population is None or r.population == population
        ]
        rows.sort(key=lambda r: (-float(r.created_at), str(r.id)))
        return [row_of(VdafSignedRow, r.__dict__) for r in rows]

    def vdaf_result(self, signed_id: str) -> VdafResultRow | None:
        """See :meth:`VdafResultQueries.vdaf_result`."""
        r = self._t("vdaf_results").get(signed_id)
        if r is None:
            return None
        return VdafResultRow(
            str(r.signed_id), str(r.result), str(r.created_by), float(r.created_at)
        )
