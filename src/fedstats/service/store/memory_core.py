"""The core query group on Python containers, with the semantics of the SQL stores.

Same answers as :class:`~fedstats.service.store.sql.SqlCoreQueries`: ``ON CONFLICT DO NOTHING`` inserts
answer False, a plain insert of an existing key or of a row whose foreign key is missing raises
:class:`sqlalchemy.exc.IntegrityError` as the databases do, the same orderings, pages and counts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fedstats.service.store.core import CoreQueries, client_row, device_view, round_row
from fedstats.service.store.memory_refusals import MemoryRefusalQueries
from fedstats.service.store.memory_tables import (
    _LIVE,
    _RUN_FIELDS,
    MemoryTables,
    Row,
    _missing_parent,
)
from fedstats.service.store.rows import (
    AuditEntry,
    BudgetRow,
    ChargeRow,
    ClientRow,
    ClosedRound,
    Cohort,
    FinishedRun,
    IdempotentAnswer,
    LiveRun,
    PopulationCount,
    ReportRow,
    RoundRow,
    RoundSummary,
    RoundTotal,
    RunLease,
    RunRow,
    RunSummary,
    TaskSummary,
)

__all__ = ["MemoryCoreQueries"]


class MemoryCoreQueries(MemoryRefusalQueries, MemoryTables, CoreQueries):
    """:class:`~fedstats.service.store.core.CoreQueries` on in-memory tables (``self.data``).

    Reads return the frozen dataclasses of :mod:`.rows` built from the stored rows, never the rows.
    """

    # -- devices and signed requests
    def client(self, client_id: str) -> ClientRow | None:
        """See :meth:`CoreQueries.client`."""
        c = self._t("clients").get(client_id)
        return None if c is None else client_row(c)

    def use_nonce(self, client_id: str, nonce: str, ts: float) -> bool:
        """See :meth:`CoreQueries.use_nonce`."""
        key = (client_id, nonce)
        return self._insert(
            "nonces", key, {"client_id": client_id, "nonce": nonce, "ts": ts}, ignore=True
        )

    def _delete_where(self, table: str, keep: Callable[[Row], bool]) -> int:
        """``DELETE FROM table WHERE NOT keep(row)`` (undone by a rollback); return how many."""
        rows = self._t(table)
        old = [k for k, r in rows.items() if not keep(r)]
        for k in old:
            self._save(table, k)
            del rows[k]
        return len(old)

    def purge_nonces(self, before: float) -> int:
        """See :meth:`CoreQueries.purge_nonces`."""
        return self._delete_where("nonces", lambda r: r.ts >= before)

    def authorities(self) -> dict[str, str]:
        """See :meth:`CoreQueries.authorities`."""
        return {str(a.id): str(a.public_key) for a in self._t("authorities").values()}

    def operator_of(self, token_hash: str) -> str | None:
        """See :meth:`CoreQueries.operator_of`."""
        for o in self._t("operators").values():
            if o.token_hash == token_hash:
                return str(o.name)
        return None

    def operator_exists(self, name: str) -> bool:
        """See :meth:`CoreQueries.operator_exists`."""
        return name in self._t("operators")

    def task_json(self, task_id: str) -> str | None:
        """See :meth:`CoreQueries.task_json`."""
        t = self._t("tasks").get(task_id)
        return None if t is None else str(t.config)

    # -- runs, members, rounds, reports
    def _members_of(self, run_id: str) -> list[Row]:
        return [m for (rid, _c), m in self._t("run_members").items() if rid == run_id]

    def cohort(self, run_id: str) -> Cohort:
        """See :meth:`CoreQueries.cohort`."""
        ms = self._members_of(run_id)
        return Cohort(len(ms), sum(int(m.slot_count) for m in ms))

    def member(self, run_id: str, client_id: str) -> tuple[int, int] | None:
        """See :meth:`CoreQueries.member`."""
        m = self._t("run_members").get((run_id, client_id))
        return None if m is None else (int(m.slot_start), int(m.slot_count))

    def round_for_report(self, run_id: str, index: int) -> RoundRow | None:
        """See :meth:`CoreQueries.round_for_report` (transactions are serialized: no lock needed)."""
        r = self._t("rounds").get((run_id, index))
        return None if r is None else round_row(r)

    def report_digest(self, run_id: str, index: int, client_id: str) -> str | None:
        """See :meth:`CoreQueries.report_digest`."""
        p = self._t("reports").get((run_id, index, client_id))
        return None if p is None else str(p.digest)

    def live_runs(self, client_id: str) -> list[LiveRun]:
        """See :meth:`CoreQueries.live_runs` (one entry per open round, as the outer join)."""
        out = []
        members = self._t("run_members")
        for run in self._t("runs").values():
            if run.status not in _LIVE:
                continue
            m = members.get((run.id, client_id))
            opened: list[RoundRow | None] = [
                round_row(r)
                for (rid, _i), r in self._t("rounds").items()
                if rid == run.id and r.status == "open"
            ]
            for rec in opened or [None]:
                out.append(
                    LiveRun(
                        run_id=run.id,
                        task_id=run.task_id,
                        status=run.status,
                        checkin_deadline=float(run.checkin_deadline),
                        n_clients=run.n_clients,
                        public_seed=run.public_seed,
                        slot_start=None if m is None else m.slot_start,
                        slot_count=None if m is None else m.slot_count,
                        reveal=None if m is None else m.reveal,
                        round=rec,
                        reported=rec is not None
                        and (run.id, rec.index, client_id) in self._t("reports"),
                    )
                )
        return out

    def reported(self, run_id: str, index: int, client_id: str) -> bool:
        """See :meth:`CoreQueries.reported`."""
        return (run_id, index, client_id) in self._t("reports")

    def _rounds_of(self, run_id: str) -> list[Row]:
        got = [r for (rid, _i), r in self._t("rounds").items() if rid == run_id]
        return sorted(got, key=lambda r: int(r.index))

    def closed_totals(self, run_id: str, before: int) -> list[RoundTotal]:
        """See :meth:`CoreQueries.closed_totals`."""
        return [
            RoundTotal(int(r.index), str(r.total), int(r.n_clients))
            for r in self._rounds_of(run_id)
            if r.index < before
            and r.status == "closed"
            and r.total is not None
            and r.n_clients is not None
        ]

    def finished_runs(self, client_id: str) -> list[FinishedRun]:
        """See :meth:`CoreQueries.finished_runs`."""
        members = self._t("run_members")
        return [
            FinishedRun(str(r.id), str(r.status))
            for r in self._t("runs").values()
            if r.status in ("done", "aborted") and (r.id, client_id) in members
        ]

    def run(self, run_id: str, *, lock: bool = False) -> RunRow | None:  # noqa: ARG002 - serialized
        """See :meth:`CoreQueries.run`."""
        r = self._t("runs").get(run_id)
        if r is None:
            return None
        values = r.__dict__
        return RunRow(
            **{f: values[f] for f in _RUN_FIELDS if f != "lease_epoch"},
            lease_epoch=int(r.lease_epoch or 0),
        )

    def any_closed_round(self, run_id: str) -> bool:
        """See :meth:`CoreQueries.any_closed_round`."""
        return any(r.status == "closed" for r in self._rounds_of(run_id))

    def rounds_of(self, run_id: str) -> list[RoundSummary]:
        """See :meth:`CoreQueries.rounds_of`."""
        return [
            RoundSummary(
                int(r.index), str(r.name), str(r.status), int(r.lo), int(r.hi), r.n_clients
            )
            for r in self._rounds_of(run_id)
        ]

    def slots_of(self, run_id: str) -> list[tuple[int, int]]:
        """See :meth:`CoreQueries.slots_of`."""
        return [(int(m.slot_start), int(m.slot_count)) for m in self._members_of(run_id)]

    # -- the run driver
    def claim_runs(
        self, owner: str, now: float, renew_before: float, *, own: list[str] | None = None
    ) -> list[RunLease]:
        """See :meth:`CoreQueries.claim_runs` (no other transaction can hold a lock)."""

        def which(r: Row) -> bool:
            if own is not None:
                return r.id in own and r.lease_owner == owner
            until = r.lease_until
            return (
                r.lease_owner is None
                or (until is not None and until < now)
                or (r.lease_owner == owner and until is not None and until < renew_before)
            )

        return [
            RunLease(str(r.id), r.lease_owner, r.lease_until, int(r.lease_epoch or 0))
            for r in self._t("runs").values()
            if r.status in _LIVE and which(r)
        ]

    def held_runs(self, owner: str) -> list[RunLease]:
        """See :meth:`CoreQueries.held_runs`."""
        return [
            RunLease(str(r.id), r.lease_owner, r.lease_until, int(r.lease_epoch or 0))
            for r in self._t("runs").values()
            if r.status in _LIVE and r.lease_owner == owner
        ]

    def unclaimed_runs(self, now: float) -> int:
        """See :meth:`CoreQueries.unclaimed_runs`."""
        return sum(
            1
            for r in self._t("runs").values()
            if r.status in _LIVE
            and (r.lease_owner is None or (r.lease_until is not None and r.lease_until < now))
        )

    def closed_rounds(self, run_id: str) -> list[ClosedRound]:
        """See :meth:`CoreQueries.closed_rounds`."""
        return [
            ClosedRound(int(r.index), str(r.params_digest), str(r.encode), r.total, r.n_clients)
            for r in self._rounds_of(run_id)
            if r.status == "closed"
        ]

    def round_row(self, run_id: str, index: int) -> RoundRow | None:
        """See :meth:`CoreQueries.round_row`."""
        r = self._t("rounds").get((run_id, index))
        return None if r is None else round_row(r)

    def add_round(self, **values: Any) -> RoundRow:
        """See :meth:`CoreQueries.add_round`."""
        run_id, index = values["run_id"], values["index"]
        if run_id not in self._t("runs"):
            raise _missing_parent("rounds.run_id", run_id)
        self._insert("rounds", (run_id, index), values)
        return round_row(self._t("rounds")[(run_id, index)])

    def round_counts(self, run_id: str, index: int, lo: int, hi: int) -> tuple[int, int]:
        """See :meth:`CoreQueries.round_counts`."""
        expected = sum(
            1
            for m in self._members_of(run_id)
            if m.slot_start < hi and m.slot_start + m.slot_count > lo
        )
        got = sum(1 for (rid, i, _c) in self._t("reports") if rid == run_id and i == index)
        return expected, got

    def round_reports(self, run_id: str, index: int) -> list[ReportRow]:
        """See :meth:`CoreQueries.round_reports`."""
        return [
            ReportRow(str(p.client_id), str(p.vector), int(p.count), p.excluded)
            for (rid, i, _c), p in self._t("reports").items()
            if rid == run_id and i == index
        ]

    def exclude_report(self, run_id: str, index: int, client_id: str, problem: str) -> None:
        """See :meth:`CoreQueries.exclude_report`."""
        self._set("reports", (run_id, index, client_id), {"excluded": problem})

    def member_slots(self, run_id: str) -> dict[str, tuple[int, int]]:
        """See :meth:`CoreQueries.member_slots`."""
        return {
            str(m.client_id): (int(m.slot_start), int(m.slot_count))
            for m in self._members_of(run_id)
        }

    # -- the operator's dashboard (reads)
    def recent_runs(self, limit: int) -> list[RunSummary]:
        """See :meth:`CoreQueries.recent_runs`."""
        rows = sorted(self._t("runs").values(), key=lambda r: -float(r.created_at))[:limit]
        return [
            RunSummary(str(r.id), str(r.task_id), float(r.created_at), r.finished_at) for r in rows
        ]

    def population_counts(self) -> list[PopulationCount]:
        """See :meth:`CoreQueries.population_counts`."""
        groups: dict[str, list[Row]] = {}
        for c in self._t("clients").values():
            groups.setdefault(str(c.population), []).append(c)
        return [
            PopulationCount(
                p,
                len(cs),
                sum(1 for c in cs if c.revoked_at is not None),
                max(float(c.enrolled_at) for c in cs),
            )
            for p, cs in groups.items()
        ]

    def checked_in_by_population(self) -> dict[str, int]:
        """See :meth:`CoreQueries.checked_in_by_population`."""
        runs, clients = self._t("runs"), self._t("clients")
        seen: dict[str, set[str]] = {}
        for (rid, cid), _m in self._t("run_members").items():
            run, c = runs.get(rid), clients.get(cid)
            if run is None or c is None or run.status not in _LIVE:
                continue
            seen.setdefault(str(c.population), set()).add(cid)
        return {p: len(ids) for p, ids in seen.items()}

    def _budgets(self, scope: str | None = None) -> list[BudgetRow]:
        rows = [
            BudgetRow(str(b.scope), str(b.name), float(b.epsilon), float(b.delta))
            for b in self._t("budgets").values()
            if scope is None or b.scope == scope
        ]
        return sorted(rows, key=lambda b: (b.scope, b.name))

    def budgets(self) -> list[BudgetRow]:
        """See :meth:`CoreQueries.budgets`."""
        return self._budgets()

    @staticmethod
    def _charge(c: Row) -> ChargeRow:
        return ChargeRow(
            c.run_id,
            c.population,
            c.analyst,
            c.epsilon,
            c.delta,
            c.rho,
            c.status,
            c.label,
            getattr(c, "mechanisms", None),
        )

    def _charges(self, scope: str, name: str, statuses: tuple[str, ...]) -> list[ChargeRow]:
        col = "population" if scope == "population" else "analyst"
        rows = sorted(self._t("ledger").items())
        return [
            self._charge(c) for _i, c in rows if getattr(c, col) == name and c.status in statuses
        ]

    def reserved_charges(self, scope: str, name: str) -> list[ChargeRow]:
        """See :meth:`CoreQueries.reserved_charges`."""
        return self._charges(scope, name, ("reserved",))

    def _audit(self) -> list[Row]:
        return [a for _i, a in sorted(self._t("audit").items())]

    @staticmethod
    def _audit_entry(a: Row) -> AuditEntry:
        return AuditEntry(float(a.ts), str(a.actor), str(a.action), a.run_id, str(a.detail))

    def recent_audit(self, actions: tuple[str, ...], limit: int) -> list[AuditEntry]:
        """See :meth:`CoreQueries.recent_audit`."""
        rows = [a for a in reversed(self._audit()) if a.action in actions][:limit]
        return [self._audit_entry(a) for a in rows]

    # -- the operator API
    def _tasks_page(
        self, limit: int, offset: int, where: dict[tuple[str, ...], str]
    ) -> tuple[list[TaskSummary], int]:
        """See :meth:`CoreQueries.page_tasks`."""

        def field(config: str, *path: str) -> Any:
            doc = json.loads(config)
            doc = doc["task"] if set(doc) == {"task", "certificate", "signature"} else doc
            for key in path:
                doc = doc.get(key) if isinstance(doc, dict) else None
            return doc

        rows = [
            t
            for t in self._t("tasks").values()
            if all(field(t.config, *path) == value for path, value in where.items())
        ]
        rows.sort(key=lambda t: (-float(t.created_at), t.id))
        page, total = self._page(rows, limit, offset)
        return [TaskSummary(str(t.id), str(t.created_by), float(t.created_at)) for t in page], total

    def _runs_page(
        self, limit: int, offset: int, where: dict[str, str]
    ) -> tuple[list[dict[str, Any]], int]:
        """See :meth:`CoreQueries.page_runs`."""
        rows = [
            r
            for r in self._t("runs").values()
            if all(getattr(r, column) == value for column, value in where.items())
        ]
        rows.sort(key=lambda r: (-float(r.created_at), r.id))
        page, total = self._page(rows, limit, offset)
        return [
            {
                "run_id": r.id,
                "task_id": r.task_id,
                "analyst": r.analyst,
                "status": r.status,
                "created_at": r.created_at,
                "finished_at": r.finished_at,
                "n_clients": r.n_clients,
                "error": r.error,
            }
            for r in page
        ], total

    def page_budgets(
        self, limit: int, offset: int, *, scope: str | None = None
    ) -> tuple[list[BudgetRow], int]:
        """See :meth:`CoreQueries.page_budgets`."""
        page, total = self._page(self._budgets(scope), limit, offset)
        return list(page), total

    def page_devices(
        self, limit: int, offset: int, *, population: str | None = None, status: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """See :meth:`CoreQueries.page_devices`."""
        rows = [
            c
            for _k, c in sorted(self._t("clients").items())
            if (population is None or c.population == population)
            and (status != "active" or c.revoked_at is None)
            and (status != "revoked" or c.revoked_at is not None)
        ]
        page, total = self._page(rows, limit, offset)
        return [device_view(c) for c in page], total

    def device_for_update(self, client_id: str) -> dict[str, Any] | None:
        """See :meth:`CoreQueries.device_for_update`."""
        c = self._t("clients").get(client_id)
        return None if c is None else device_view(c)

    def update_client(self, client_id: str, **values: Any) -> None:
        """See :meth:`CoreQueries.update_client`."""
        self._set("clients", client_id, values)
        self.data.devices_version += 1

    def page_operators(self, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """See :meth:`CoreQueries.page_operators`."""
        rows = [o for _k, o in sorted(self._t("operators").items())]
        page, total = self._page(rows, limit, offset)
        return [{"name": o.name, "created_at": o.created_at} for o in page], total

    def remove_operator(self, name: str) -> bool:
        """See :meth:`CoreQueries.remove_operator`."""
        rows = self._t("operators")
        if name not in rows:
            return False
        self._save("operators", name)
        del rows[name]
        return True

    def audit_log(self, run_id: str | None, limit: int) -> list[AuditEntry]:
        """See :meth:`CoreQueries.audit_log`."""
        rows = [a for a in self._audit() if run_id is None or a.run_id == run_id][:limit]
        return [self._audit_entry(a) for a in rows]

    # -- the ledger and the audit log
    def budget(self, scope: str, name: str, *, lock: bool = False) -> BudgetRow | None:  # noqa: ARG002
        """See :meth:`CoreQueries.budget`."""
        b = self._t("budgets").get((scope, name))
        return None if b is None else BudgetRow(b.scope, b.name, float(b.epsilon), float(b.delta))

    def put_budget(self, scope: str, name: str, epsilon: float, delta: float) -> None:
        """See :meth:`CoreQueries.put_budget`."""
        key = (scope, name)
        if not self._set("budgets", key, {"epsilon": epsilon, "delta": delta}):
            values = {"scope": scope, "name": name, "epsilon": epsilon, "delta": delta}
            self._insert("budgets", key, values)

    def charges_on(self, scope: str, name: str) -> list[ChargeRow]:
        """See :meth:`CoreQueries.charges_on`."""
        return self._charges(scope, name, ("reserved", "spent"))

    def _charge_key(self, run_id: str) -> int | None:
        for i, c in self._t("ledger").items():
            if c.run_id == run_id:
                return int(i)
        return None

    def charge_of(self, run_id: str) -> ChargeRow | None:
        """See :meth:`CoreQueries.charge_of`."""
        i = self._charge_key(run_id)
        return None if i is None else self._charge(self._t("ledger")[i])

    def set_charge_status(self, run_id: str, status: str, now: float) -> None:
        """See :meth:`CoreQueries.set_charge_status`."""
        i = self._charge_key(run_id)
        if i is not None:
            self._set("ledger", i, {"status": status, "updated_at": now})

    # -- idempotency keys
    def idempotent_answer(self, actor: str, key: str) -> IdempotentAnswer | None:
        """See :meth:`CoreQueries.idempotent_answer`."""
        k = self._t("idempotency_keys").get((actor, key))
        if k is None:
            return None
        return IdempotentAnswer(k.method, k.path, k.request_hash, k.status_code, k.response)

    def purge_idempotency_keys(self, before: float) -> int:
        """See :meth:`CoreQueries.purge_idempotency_keys`."""
        return self._delete_where("idempotency_keys", lambda r: r.created_at >= before)

    # -- the change counter
    def bump_version(self) -> int:
        """See :meth:`CoreQueries.bump_version`."""
        self.data.version += 1
        return self.data.version

    def version(self) -> int:
        """See :meth:`CoreQueries.version`."""
        return self.data.version

    def devices_version(self) -> int:
        """See :meth:`CoreQueries.devices_version`."""
        return self.data.devices_version
