"""SQL queries of tasks, runs, cohorts and rounds: a device's work list, the driver's leases and journal."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from sqlalchemy import (
    JSON,
    String,
    and_,
    bindparam,
    cast,
    exists,
    func,
    or_,
    select,
    true,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql

from fedstats.service.store.core import round_row
from fedstats.service.store.rows import (
    ClosedRound,
    Cohort,
    FinishedRun,
    LiveRun,
    ReportRow,
    RoundRow,
    RoundSummary,
    RoundTotal,
    RunLease,
    RunRow,
    RunSummary,
    TaskSummary,
)
from fedstats.service.store.sql_base import (
    _CLIENTS,
    _MEMBERS,
    _REPORTS,
    _ROUND_COLUMNS,
    _ROUNDS,
    _RUNS,
    _TASKS,
    SqlBase,
    _status_in,
)

_ROUND_FIELDS = tuple(c.name for c in _ROUND_COLUMNS)


_Q_ROUND_LOCKED = (
    select(*_ROUND_COLUMNS)
    .where(_ROUNDS.c.run_id == bindparam("run_id"), _ROUNDS.c.index == bindparam("index"))
    .with_for_update()
)


_RUN_FIELDS = tuple(f.name for f in fields(RunRow))


_Q_RUN = select(*(_RUNS.c[f] for f in _RUN_FIELDS)).where(_RUNS.c.id == bindparam("run_id"))


_Q_RUN_LOCKED = _Q_RUN.with_for_update(key_share=True)


def _run_row(r: Any) -> RunRow:
    values = dict(zip(_RUN_FIELDS, r, strict=True))
    values["lease_epoch"] = int(values["lease_epoch"] or 0)
    return RunRow(**values)


# the run's columns of a device's work list (CoreQueries.device_runs, LiveRun)
_LIVE_RUN_COLUMNS = (
    _RUNS.c.id,
    _RUNS.c.task_id,
    _RUNS.c.status,
    _RUNS.c.checkin_deadline,
    _RUNS.c.n_clients,
    _RUNS.c.public_seed,
)


def _live_select(client: Any, base: Any, *lead: Any) -> Any:
    """The live-runs select of the device ``client`` (a bound id, or a column of a list of ids).

    ``base`` is the FROM clause the runs are joined to (``runs``, or the ids crossed with ``runs``);
    ``lead`` columns come first (the batched form selects the device's id).
    """
    return (
        select(
            *lead,
            *_LIVE_RUN_COLUMNS,
            _MEMBERS.c.slot_start,
            _MEMBERS.c.slot_count,
            _MEMBERS.c.reveal,
            *_ROUND_COLUMNS,
            _REPORTS.c.digest,
        )
        .select_from(base)
        .outerjoin(_MEMBERS, and_(_MEMBERS.c.run_id == _RUNS.c.id, _MEMBERS.c.client_id == client))
        .outerjoin(_ROUNDS, and_(_ROUNDS.c.run_id == _RUNS.c.id, _ROUNDS.c.status == "open"))
        .outerjoin(
            _REPORTS,
            and_(
                _REPORTS.c.run_id == _RUNS.c.id,
                _REPORTS.c.round_index == _ROUNDS.c.index,
                _REPORTS.c.client_id == client,
            ),
        )
    )


_LIVE_SELECT = _live_select(bindparam("client_id"), _RUNS)


_Q_LIVE_RUNS = _LIVE_SELECT.where(_status_in("checkin", "seeding", "running"))


def _live_or_member(member: Any) -> Any:
    """A live run, or a finished one the device was a member of (``member``: its membership's id)."""
    return or_(
        _status_in("checkin", "seeding", "running"),
        and_(_status_in("done", "aborted"), member.is_not(None)),
    )


_Q_DEVICE_RUNS = _LIVE_SELECT.where(_live_or_member(_MEMBERS.c.client_id))


def _device_runs_many(dialect: str) -> Any:
    """:data:`_Q_DEVICE_RUNS` of a list of devices (bound as ``ids``), each row led by its device's id.

    The ids are one bound parameter whatever their number (a PostgreSQL array unnested, a JSON array
    on SQLite), so the statement is built and compiled once per dialect. On PostgreSQL the device's
    membership and report are ``LATERAL`` subqueries with ``LIMIT 1``: one primary-key probe per device
    and run, where plain outer joins were planned as hash joins that scan every member and report of
    the run (a read growing with the cohort). SQLite probes by key either way.
    """
    if dialect != "postgresql":
        ids = func.json_each(bindparam("ids")).table_valued("value").alias("ids")
        cid = ids.c.value
        return _live_select(cid, ids.join(_RUNS, true()), cid).where(
            _live_or_member(_MEMBERS.c.client_id)
        )
    ids = (
        func.unnest(bindparam("ids", type_=postgresql.ARRAY(String)))
        .table_valued("client_id")
        .render_derived(name="ids")
    )
    cid = ids.c.client_id
    m = (
        select(
            _MEMBERS.c.client_id, _MEMBERS.c.slot_start, _MEMBERS.c.slot_count, _MEMBERS.c.reveal
        )
        .where(_MEMBERS.c.run_id == _RUNS.c.id, _MEMBERS.c.client_id == cid)
        .limit(1)
        .lateral("m")
    )
    rep = (
        select(_REPORTS.c.digest)
        .where(
            _REPORTS.c.run_id == _RUNS.c.id,
            _REPORTS.c.round_index == _ROUNDS.c.index,
            _REPORTS.c.client_id == cid,
        )
        .limit(1)
        .lateral("rep")
    )
    return (
        select(
            cid,
            *_LIVE_RUN_COLUMNS,
            m.c.slot_start,
            m.c.slot_count,
            m.c.reveal,
            *_ROUND_COLUMNS,
            rep.c.digest,
        )
        .select_from(ids.join(_RUNS, true()))
        .outerjoin(_ROUNDS, and_(_ROUNDS.c.run_id == _RUNS.c.id, _ROUNDS.c.status == "open"))
        .outerjoin(m, true())
        .outerjoin(rep, true())
        .where(_live_or_member(m.c.client_id))
    )


_Q_DEVICE_RUNS_MANY = {d: _device_runs_many(d) for d in ("postgresql", "sqlite")}


# by run (``runs.status`` is indexed) with a primary-key probe of the membership: the members table
# has no index on client_id alone
_Q_FINISHED_RUNS = select(_RUNS.c.id, _RUNS.c.status).where(
    _status_in("done", "aborted"),
    exists().where(_MEMBERS.c.run_id == _RUNS.c.id, _MEMBERS.c.client_id == bindparam("client_id")),
)


_Q_MEMBER = select(_MEMBERS.c.slot_start, _MEMBERS.c.slot_count).where(
    _MEMBERS.c.run_id == bindparam("run_id"), _MEMBERS.c.client_id == bindparam("client_id")
)


_Q_COHORT = select(func.count(), func.coalesce(func.sum(_MEMBERS.c.slot_count), 0)).where(
    _MEMBERS.c.run_id == bindparam("run_id")
)


def _config_field(path: tuple[str, ...], dialect: str) -> Any:
    """A string field of a stored task's configuration, in SQL (a JSON path on SQLite and PostgreSQL).

    Under ``task`` for a signed envelope, at the top for a legacy unsigned row. The text column is read
    as JSON: PostgreSQL casts it (its JSON operators need a ``json`` value); SQLite's JSON functions take
    the text as it is (a ``CAST(... AS JSON)`` there has NUMERIC affinity and would turn it into 0).
    """
    col = _TASKS.c.config
    doc = cast(col, JSON) if dialect == "postgresql" else type_coerce(col, JSON)
    return func.coalesce(doc[("task", *path)].as_string(), doc[path].as_string())


class SqlRunQueries(SqlBase):
    """The task, run and round queries of :class:`~fedstats.service.store.core.CoreQueries` in SQL."""

    def task_json(self, task_id: str) -> str | None:
        """See :meth:`CoreQueries.task_json`."""
        t = _TASKS.c
        got = self._exec(select(t.config).where(t.id == task_id)).scalar()
        return None if got is None else str(got)

    def _tasks_page(
        self, limit: int, offset: int, where: dict[tuple[str, ...], str]
    ) -> tuple[list[TaskSummary], int]:
        """See :meth:`CoreQueries.page_tasks`."""
        t, dialect = _TASKS.c, self.conn.dialect.name
        stmt = select(t.id, t.created_by, t.created_at).order_by(t.created_at.desc(), t.id)
        for path, value in where.items():
            stmt = stmt.where(_config_field(path, dialect) == value)
        rows, total = self._page(stmt, limit, offset)
        return [TaskSummary(str(i), str(b), float(a)) for i, b, a in rows], total

    def cohort(self, run_id: str) -> Cohort:
        """See :meth:`CoreQueries.cohort`."""
        devices, slots = self._run(_Q_COHORT, {"run_id": run_id}).one()
        return Cohort(int(devices), int(slots))

    def member(self, run_id: str, client_id: str) -> tuple[int, int] | None:
        """See :meth:`CoreQueries.member`."""
        row = self._run(_Q_MEMBER, {"run_id": run_id, "client_id": client_id}).first()
        return None if row is None else (int(row[0]), int(row[1]))

    def live_runs(self, client_id: str) -> list[LiveRun]:
        """See :meth:`CoreQueries.live_runs`."""
        return self._live(self._run(_Q_LIVE_RUNS, {"client_id": client_id}).all())

    def device_runs(self, client_id: str) -> tuple[list[LiveRun], list[FinishedRun]]:
        """See :meth:`CoreQueries.device_runs`."""
        return self._split(self._run(_Q_DEVICE_RUNS, {"client_id": client_id}).all())

    def device_runs_many(
        self, client_ids: Sequence[str]
    ) -> dict[str, tuple[list[LiveRun], list[FinishedRun]]]:
        """See :meth:`CoreQueries.device_runs_many`."""
        ids = list(dict.fromkeys(client_ids))
        if len(ids) == 1:
            return {ids[0]: self.device_runs(ids[0])}
        dialect = self.conn.dialect.name
        bound: Any = ids if dialect == "postgresql" else json.dumps(ids)
        by: dict[str, list[Any]] = {cid: [] for cid in ids}
        for row in self._run(_Q_DEVICE_RUNS_MANY[dialect], {"ids": bound}).all():
            by[row[0]].append(row[1:])
        return {cid: self._split(rows) for cid, rows in by.items()}

    @classmethod
    def _split(cls, rows: Any) -> tuple[list[LiveRun], list[FinishedRun]]:
        """:meth:`device_runs` of one device's rows of :data:`_Q_DEVICE_RUNS`."""
        finished: dict[str, str] = {}
        live = []
        for row in rows:
            if row[2] in ("done", "aborted"):
                finished[str(row[0])] = str(row[2])
            else:
                live.append(row)
        return cls._live(live), [FinishedRun(r, st) for r, st in finished.items()]

    @staticmethod
    def _live(rows: Any) -> list[LiveRun]:
        out = []
        for row in rows:
            rec = None
            if row[9] is not None:
                rec = RoundRow(*row[9:21])
            out.append(
                LiveRun(
                    run_id=row[0],
                    task_id=row[1],
                    status=row[2],
                    checkin_deadline=float(row[3]),
                    n_clients=row[4],
                    public_seed=row[5],
                    slot_start=row[6],
                    slot_count=row[7],
                    reveal=row[8],
                    round=rec,
                    reported=row[21] is not None,
                )
            )
        return out

    def reported(self, run_id: str, index: int, client_id: str) -> bool:
        """See :meth:`CoreQueries.reported`."""
        return self.report_digest(run_id, index, client_id) is not None

    def closed_totals(self, run_id: str, before: int) -> list[RoundTotal]:
        """See :meth:`CoreQueries.closed_totals`."""
        r = _ROUNDS.c
        rows = self._exec(
            select(r.index, r.total, r.n_clients)
            .where(r.run_id == run_id, r.index < before, r.status == "closed")
            .order_by(r.index)
        ).all()
        return [
            RoundTotal(int(i), str(t), int(n))
            for i, t, n in rows
            if t is not None and n is not None
        ]

    def finished_runs(self, client_id: str) -> list[FinishedRun]:
        """See :meth:`CoreQueries.finished_runs`."""
        rows = self._run(_Q_FINISHED_RUNS, {"client_id": client_id}).all()
        return [FinishedRun(str(i), str(s)) for i, s in rows]

    def run(self, run_id: str, *, lock: bool = False) -> RunRow | None:
        """See :meth:`CoreQueries.run`."""
        if lock:
            # FOR NO KEY UPDATE: does not block the key-share locks of inserts referencing the run
            # (reports, members), so a report and the driver closing its round cannot deadlock
            got = self._run(_Q_RUN_LOCKED, {"run_id": run_id}).first()
        else:
            got = self._run(_Q_RUN, {"run_id": run_id}).first()
        return None if got is None else _run_row(got)

    def any_closed_round(self, run_id: str) -> bool:
        """See :meth:`CoreQueries.any_closed_round`."""
        r = _ROUNDS.c
        got = self._exec(
            select(r.index).where(r.run_id == run_id, r.status == "closed").limit(1)
        ).first()
        return got is not None

    def rounds_of(self, run_id: str) -> list[RoundSummary]:
        """See :meth:`CoreQueries.rounds_of`."""
        r = _ROUNDS.c
        rows = self._exec(
            select(r.index, r.name, r.status, r.lo, r.hi, r.n_clients)
            .where(r.run_id == run_id)
            .order_by(r.index)
        ).all()
        return [
            RoundSummary(int(i), str(n), str(s), int(lo), int(hi), c) for i, n, s, lo, hi, c in rows
        ]

    def slots_of(self, run_id: str) -> list[tuple[int, int]]:
        """See :meth:`CoreQueries.slots_of`."""
        m = _MEMBERS.c
        rows = self._exec(select(m.slot_start, m.slot_count).where(m.run_id == run_id)).all()
        return [(int(a), int(c)) for a, c in rows]

    def claim_runs(
        self, owner: str, now: float, renew_before: float, *, own: list[str] | None = None
    ) -> list[RunLease]:
        """See :meth:`CoreQueries.claim_runs`."""
        r = _RUNS.c
        if own is None:
            which = or_(
                r.lease_owner.is_(None),
                r.lease_until < now,
                and_(r.lease_owner == owner, r.lease_until < renew_before),
            )
        else:
            which = and_(r.id.in_(own), r.lease_owner == owner)
        rows = self._exec(
            select(r.id, r.lease_owner, r.lease_until, r.lease_epoch)
            .where(r.status.in_(("checkin", "seeding", "running")), which)
            .with_for_update(skip_locked=True, key_share=True)
        ).all()
        return [RunLease(str(i), o, u, int(e or 0)) for i, o, u, e in rows]

    def held_runs(self, owner: str) -> list[RunLease]:
        """See :meth:`CoreQueries.held_runs`."""
        r = _RUNS.c
        rows = self._exec(
            select(r.id, r.lease_owner, r.lease_until, r.lease_epoch).where(
                r.status.in_(("checkin", "seeding", "running")), r.lease_owner == owner
            )
        ).all()
        return [RunLease(str(i), o, u, int(e or 0)) for i, o, u, e in rows]

    def unclaimed_runs(self, now: float) -> int:
        """See :meth:`CoreQueries.unclaimed_runs` (a plain read: PostgreSQL does not wait for locks)."""
        r = _RUNS.c
        return int(
            self._exec(
                select(func.count())
                .select_from(_RUNS)
                .where(
                    r.status.in_(("checkin", "seeding", "running")),
                    or_(r.lease_owner.is_(None), r.lease_until < now),
                )
            ).scalar_one()
        )

    def closed_rounds(self, run_id: str) -> list[ClosedRound]:
        """See :meth:`CoreQueries.closed_rounds`."""
        r = _ROUNDS.c
        rows = self._exec(
            select(r.index, r.params_digest, r.encode, r.total, r.n_clients)
            .where(r.run_id == run_id, r.status == "closed")
            .order_by(r.index)
        ).all()
        return [ClosedRound(int(i), str(d), str(e), t, n) for i, d, e, t, n in rows]

    def round_row(self, run_id: str, index: int) -> RoundRow | None:
        """See :meth:`CoreQueries.round_row`."""
        got = self._run(_Q_ROUND_LOCKED, {"run_id": run_id, "index": index}).first()
        return None if got is None else round_row(got)

    def add_round(self, **values: Any) -> RoundRow:
        """See :meth:`CoreQueries.add_round`."""
        self._exec(_ROUNDS.insert().values(**values))
        return RoundRow(**{f: values[f] for f in _ROUND_FIELDS})

    def round_counts(self, run_id: str, index: int, lo: int, hi: int) -> tuple[int, int]:
        """See :meth:`CoreQueries.round_counts`."""
        m, p = _MEMBERS.c, _REPORTS.c
        expected = self._exec(
            select(func.count()).where(
                m.run_id == run_id, m.slot_start < hi, m.slot_start + m.slot_count > lo
            )
        ).scalar_one()
        got = self._exec(
            select(func.count()).where(p.run_id == run_id, p.round_index == index)
        ).scalar_one()
        return int(expected), int(got)

    def round_reports(self, run_id: str, index: int) -> list[ReportRow]:
        """See :meth:`CoreQueries.round_reports`."""
        p = _REPORTS.c
        rows = self._exec(
            select(p.client_id, p.vector, p.count, p.excluded).where(
                p.run_id == run_id, p.round_index == index
            )
        ).all()
        return [ReportRow(str(c), str(v), int(n), x) for c, v, n, x in rows]

    def exclude_report(self, run_id: str, index: int, client_id: str, problem: str) -> None:
        """See :meth:`CoreQueries.exclude_report`."""
        p = _REPORTS.c
        self._exec(
            update(_REPORTS)
            .where(p.run_id == run_id, p.round_index == index, p.client_id == client_id)
            .values(excluded=problem)
        )

    def member_slots(self, run_id: str) -> dict[str, tuple[int, int]]:
        """See :meth:`CoreQueries.member_slots`."""
        m = _MEMBERS.c
        rows = self._exec(
            select(m.client_id, m.slot_start, m.slot_count).where(m.run_id == run_id)
        ).all()
        return {str(c): (int(a), int(n)) for c, a, n in rows}

    def recent_runs(self, limit: int) -> list[RunSummary]:
        """See :meth:`CoreQueries.recent_runs`."""
        r = _RUNS.c
        rows = self._exec(
            select(r.id, r.task_id, r.created_at, r.finished_at)
            .order_by(r.created_at.desc())
            .limit(limit)
        ).all()
        return [RunSummary(str(i), str(t), float(c), f) for i, t, c, f in rows]

    def _runs_page(
        self, limit: int, offset: int, where: dict[str, str]
    ) -> tuple[list[dict[str, Any]], int]:
        """See :meth:`CoreQueries.page_runs`."""
        r = _RUNS.c
        stmt = select(
            r.id, r.task_id, r.analyst, r.status, r.created_at, r.finished_at, r.n_clients, r.error
        ).order_by(r.created_at.desc(), r.id)
        for column, value in where.items():
            stmt = stmt.where(r[column] == value)
        rows, total = self._page(stmt, limit, offset)
        keys = ("run_id", "task_id", "analyst", "status", "created_at", "finished_at")
        return [dict(zip((*keys, "n_clients", "error"), row, strict=True)) for row in rows], total

    def checked_in_by_population(self) -> dict[str, int]:
        """See :meth:`CoreQueries.checked_in_by_population`."""
        c, m, r = _CLIENTS.c, _MEMBERS.c, _RUNS.c
        rows = self._exec(
            select(c.population, func.count(func.distinct(m.client_id)))
            .select_from(_MEMBERS)
            .join(_RUNS, r.id == m.run_id)
            .join(_CLIENTS, c.id == m.client_id)
            .where(r.status.in_(("checkin", "seeding", "running")))
            .group_by(c.population)
        ).all()
        return {str(p): int(n) for p, n in rows}
