"""The core query group of the store: the interface the domain layer calls.

Clients, nonces, tasks, runs, members, rounds, reports, operators, authorities, the ledger, idempotency
keys and the change counter. :class:`CoreQueries` is the interface (through a transaction object, see
:meth:`fedstats.service.store.Store.transaction`); :class:`~fedstats.service.store.sql.SqlCoreQueries`
implements it with SQLAlchemy Core statements on the transaction's connection (SQLite and PostgreSQL,
split by concern: :mod:`.sql_devices`, :mod:`.sql_runs`, :mod:`.sql_reports`, :mod:`.sql_ledger`) and
:class:`~fedstats.service.store.memory.MemoryCoreQueries` on Python containers. Methods take and return
plain values and the frozen dataclasses of :mod:`.rows`, never ORM objects; reads that grow with a run's
cohort are not on a per-report path.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

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
    PutReport,
    RefusalRow,
    ReportRow,
    RoundRow,
    RoundSummary,
    RoundTotal,
    RunLease,
    RunRow,
    RunSummary,
    TaskSummary,
)
from fedstats.service.store.writes import RowWrites

__all__ = ["CoreQueries", "client_row", "client_values", "device_view", "round_row"]


def round_row(r: Any) -> RoundRow:
    """A stored round (a row whose attributes are the ``rounds`` table's columns) as a :class:`RoundRow`."""
    return RoundRow(
        run_id=r.run_id,
        index=int(r.index),
        name=r.name,
        encode=r.encode,
        params=r.params,
        params_digest=r.params_digest,
        dim=int(r.dim),
        bound=int(r.bound),
        lo=int(r.lo),
        hi=int(r.hi),
        status=r.status,
        deadline=float(r.deadline),
    )


def client_row(c: Any) -> ClientRow:
    """A stored device (a row of the ``clients`` table's columns) as a :class:`ClientRow`."""
    return ClientRow(
        id=c.id,
        public_key=c.public_key,
        population=c.population,
        authority=c.authority,
        not_after=float(c.not_after),
        revoked=c.revoked_at is not None,
        certificate=c.certificate,
    )


def device_view(c: Any) -> dict[str, Any]:
    """A stored device (a row of the ``clients`` table's columns) as the operator API lists it."""
    return {
        "client_id": c.id,
        "population": c.population,
        "authority": c.authority,
        "public_key": c.public_key,
        "not_after": c.not_after,
        "enrolled_at": c.enrolled_at,
        "revoked_at": c.revoked_at,
        "status": "revoked" if c.revoked_at is not None else "active",
    }


def client_values(row: ClientRow, enrolled_at: float) -> dict[str, Any]:
    """The ``clients`` columns of a device enrolled at ``enrolled_at``."""
    return {
        "id": row.id,
        "public_key": row.public_key,
        "population": row.population,
        "authority": row.authority,
        "not_after": row.not_after,
        "enrolled_at": enrolled_at,
        "certificate": row.certificate,
    }


def _given(filters: dict[Any, str | None]) -> dict[Any, str]:
    """The filters that are set (not None)."""
    return {k: v for k, v in filters.items() if v is not None}


class CoreQueries(RowWrites):
    """The core path's queries, one method per statement or set-based group of statements."""

    # -- devices and signed requests
    @abstractmethod
    def client(self, client_id: str) -> ClientRow | None:
        """The enrolled device ``client_id``, or None."""

    def add_client(self, row: ClientRow, enrolled_at: float) -> None:
        """Enroll a device."""
        self._add_row("clients", client_values(row, enrolled_at))

    def set_client_certificate(self, client_id: str, certificate: str) -> None:
        """Keep the certificate of a device enrolled before certificates were kept."""
        self._set("clients", client_id, {"certificate": certificate})

    @abstractmethod
    def use_nonce(self, client_id: str, nonce: str, ts: float) -> bool:
        """Record a signed request's nonce; False if it was already used (a replay; nothing written)."""

    def use_nonces(self, nonces: Sequence[tuple[str, str, float]]) -> bool:
        """Record distinct ``(client_id, nonce, ts)`` nonces at once; False if any was already used.

        On False the caller rolls the transaction back: which nonces were recorded is unspecified. The
        default records them one by one (:meth:`use_nonce`); PostgreSQL in one statement.
        """
        fresh = True
        for client_id, nonce, ts in nonces:
            fresh = self.use_nonce(client_id, nonce, ts) and fresh
        return fresh

    @abstractmethod
    def purge_nonces(self, before: float) -> int:
        """Delete the nonces older than ``before``; return how many."""

    @abstractmethod
    def authorities(self) -> dict[str, str]:
        """The trusted enrollment authorities: fingerprint -> public key (hex)."""

    def add_authority(self, fingerprint: str, public_key: str) -> bool:
        """Trust an authority; False if it was trusted already."""
        return self._add_row(
            "authorities", {"id": fingerprint, "public_key": public_key}, ignore=True
        )

    @abstractmethod
    def operator_of(self, token_hash: str) -> str | None:
        """The operator whose token hashes to ``token_hash``, or None."""

    @abstractmethod
    def operator_exists(self, name: str) -> bool:
        """Whether an operator of that name exists."""

    def add_operator(self, name: str, token_hash: str, created_at: float) -> None:
        """Create an operator."""
        self._add_row(
            "operators", {"name": name, "token_hash": token_hash, "created_at": created_at}
        )

    # -- tasks
    @abstractmethod
    def task_json(self, task_id: str) -> str | None:
        """The stored JSON of task ``task_id`` (its envelope), or None."""

    # -- runs, members, rounds, reports
    @abstractmethod
    def cohort(self, run_id: str) -> Cohort:
        """A run's cohort so far (one aggregate row)."""

    @abstractmethod
    def member(self, run_id: str, client_id: str) -> tuple[int, int] | None:
        """``(slot_start, slot_count)`` of a device in a run (primary-key lookup), or None."""

    def add_member(
        self,
        run_id: str,
        client_id: str,
        slot_start: int,
        slot_count: int,
        joined_at: float,
        commitment: str | None,
    ) -> None:
        """Add a device to a run's cohort."""
        self._add_row(
            "run_members",
            {
                "run_id": run_id,
                "client_id": client_id,
                "slot_start": slot_start,
                "slot_count": slot_count,
                "joined_at": joined_at,
                "commitment": commitment,
            },
        )

    def add_members(self, rows: Sequence[tuple[str, str, int, int, float, str | None]]) -> None:
        """:meth:`add_member` of each row (its arguments in order; the SQL stores: one statement)."""
        names = ("run_id", "client_id", "slot_start", "slot_count", "joined_at", "commitment")
        self._add_rows("run_members", [dict(zip(names, r, strict=True)) for r in rows])

    @abstractmethod
    def round_for_report(self, run_id: str, index: int) -> RoundRow | None:
        """Round ``index`` of a run, share-locked (closing it waits for the reports being written)."""

    @abstractmethod
    def report_digest(self, run_id: str, index: int, client_id: str) -> str | None:
        """The digest of a device's stored report in a round, or None."""

    def add_report(
        self,
        run_id: str,
        index: int,
        client_id: str,
        vector: str,
        count: int,
        digest: str,
        received_at: float,
    ) -> None:
        """Store a report."""
        self._add_row(
            "reports",
            {
                "run_id": run_id,
                "round_index": index,
                "client_id": client_id,
                "vector": vector,
                "count": count,
                "digest": digest,
                "received_at": received_at,
            },
        )

    def put_report(self, item: PutReport, received_at: float) -> tuple[bool, bool]:
        """Record a request's nonce and store a report if the round and membership are as expected.

        The device's upload in one statement where the database allows it (PostgreSQL: one statement
        of common table expressions; SQLite: two). Nothing is read back: the caller checked the report
        against the round and slots it expects (``expect``), and the statement stores it only if they
        still hold.

        Parameters
        ----------
        item : PutReport
            ``nonce``: the request's nonce and timestamp (of ``client_id``); ``expect``:
            ``(params_digest, slot_start, slot_count)``, the round's parameters' digest and the
            device's slots the report was checked against; ``run_id``, ``index``, ``client_id``,
            ``vector``, ``count``, ``digest``: the report, as :meth:`add_report` stores it.
        received_at : float
            Unix seconds, recorded with the stored report.

        Returns
        -------
        (bool, bool)
            Whether the nonce was new (False: a replay; nothing written), and whether the report was
            stored: round ``index`` is open with that digest, the device has exactly those slots and
            no report in the round yet. When the nonce is new and the report was not stored, the nonce
            stays recorded in the transaction (the caller reads why, or rolls back).
        """
        if not self.use_nonce(item.client_id, item.nonce[0], item.nonce[1]):
            return False, False
        rec = self.round_for_report(item.run_id, item.index)
        if rec is None or rec.status != "open" or rec.params_digest != item.expect[0]:
            return True, False
        if self.member(item.run_id, item.client_id) != (item.expect[1], item.expect[2]):
            return True, False
        if self.report_digest(item.run_id, item.index, item.client_id) is not None:
            return True, False
        self.add_report(
            item.run_id,
            item.index,
            item.client_id,
            item.vector,
            item.count,
            item.digest,
            received_at,
        )
        return True, True

    def put_reports(
        self, items: Sequence[PutReport], received_at: float
    ) -> list[tuple[bool, bool]]:
        """:meth:`put_report` of several uploads in one go (one statement on PostgreSQL, two on SQLite).

        The uploads must be distinct: no two with the same ``(client_id, nonce)`` and no two of the
        same device in the same round (the caller answers such repeats by :meth:`put_report`'s
        exact path, after these).

        Parameters
        ----------
        items : sequence of PutReport
        received_at : float
            Unix seconds, recorded with every stored report.

        Returns
        -------
        list of (bool, bool)
            Per upload, in order, :meth:`put_report`'s answer.
        """
        return [self.put_report(it, received_at) for it in items]

    @abstractmethod
    def live_runs(self, client_id: str) -> list[LiveRun]:
        """Every live run with ``client_id``'s membership (if any) and its open round (if any).

        One statement: the runs, the device's membership, the open round and whether the device
        reported in it (outer joins on primary keys).
        """

    def device_runs(self, client_id: str) -> tuple[list[LiveRun], list[FinishedRun]]:
        """:meth:`live_runs` and :meth:`finished_runs` of a device (one statement on SQL stores)."""
        return self.live_runs(client_id), self.finished_runs(client_id)

    def device_runs_many(
        self, client_ids: Sequence[str]
    ) -> dict[str, tuple[list[LiveRun], list[FinishedRun]]]:
        """:meth:`device_runs` of several devices (one statement on SQL stores, whatever their number).

        Returns
        -------
        dict
            By device id (each of ``client_ids``), its :meth:`device_runs`.
        """
        return {cid: self.device_runs(cid) for cid in dict.fromkeys(client_ids)}

    @abstractmethod
    def reported(self, run_id: str, index: int, client_id: str) -> bool:
        """Whether the device has a report in the round."""

    @abstractmethod
    def closed_totals(self, run_id: str, before: int) -> list[RoundTotal]:
        """The journaled sums of the closed rounds ``< before`` of a run, in order."""

    @abstractmethod
    def finished_runs(self, client_id: str) -> list[FinishedRun]:
        """The done or aborted runs the device was a member of."""

    @abstractmethod
    def run(self, run_id: str, *, lock: bool = False) -> RunRow | None:
        """A run, read fresh (locked ``FOR NO KEY UPDATE`` with ``lock``), or None.

        With ``lock`` the row stays locked to the end of the transaction: the driver's fencing check
        and the change it guards see the same lease (:meth:`update_run` writes the change).
        """

    def add_run(self, **values: Any) -> None:
        """Insert a run (the ``runs`` columns as keywords; its task must exist)."""
        self._add_row("runs", values)

    def update_run(self, run_id: str, **values: Any) -> None:
        """Set columns of a run."""
        self._set("runs", run_id, values)

    @abstractmethod
    def any_closed_round(self, run_id: str) -> bool:
        """Whether a round of the run has a journaled sum."""

    @abstractmethod
    def rounds_of(self, run_id: str) -> list[RoundSummary]:
        """A run's rounds, in order."""

    @abstractmethod
    def slots_of(self, run_id: str) -> list[tuple[int, int]]:
        """``(slot_start, slot_count)`` of every member of a run.

        Grows with the cohort: admin views and round closes only.
        """

    # -- the run driver
    @abstractmethod
    def claim_runs(
        self, owner: str, now: float, renew_before: float, *, own: list[str] | None = None
    ) -> list[RunLease]:
        """Lock the live runs whose lease is free, expired, or ``owner``'s ending before ``renew_before``.

        With ``own``: those live runs of the list leased to ``owner`` instead (to claim them anew).
        Returns the lease of each as it was. Runs locked by another transaction are skipped (``SKIP
        LOCKED`` on PostgreSQL).
        """

    @abstractmethod
    def held_runs(self, owner: str) -> list[RunLease]:
        """The leases of the live runs leased to ``owner``."""

    @abstractmethod
    def unclaimed_runs(self, now: float) -> int:
        """How many live runs have a free lease or one that ended before ``now``; never waits for a lock.

        Asked after :meth:`claim_runs` in the same transaction, these are the runs that claim skipped
        (locked by another transaction, e.g. a device's check-in) or that were created since.
        """

    @abstractmethod
    def closed_rounds(self, run_id: str) -> list[ClosedRound]:
        """A run's closed rounds as journaled, in order."""

    @abstractmethod
    def round_row(self, run_id: str, index: int) -> RoundRow | None:
        """Round ``index`` of a run, locked ``FOR UPDATE`` (the driver opening or closing it), or None."""

    @abstractmethod
    def add_round(self, **values: Any) -> RoundRow:
        """Insert a round (the ``rounds`` columns as keywords); return it."""

    def update_round(self, run_id: str, index: int, **values: Any) -> None:
        """Set columns of a round (``status``; at its close ``total`` and ``n_clients``)."""
        self._set("rounds", (run_id, index), values)

    @abstractmethod
    def round_counts(self, run_id: str, index: int, lo: int, hi: int) -> tuple[int, int]:
        """``(members with slots in [lo, hi), reports in the round)``: two aggregates, no rows."""

    @abstractmethod
    def round_reports(self, run_id: str, index: int) -> list[ReportRow]:
        """Every report of a round (its close only)."""

    @abstractmethod
    def exclude_report(self, run_id: str, index: int, client_id: str, problem: str) -> None:
        """Mark a report as left out of its round's sum, with the reason."""

    @abstractmethod
    def member_slots(self, run_id: str) -> dict[str, tuple[int, int]]:
        """``client_id -> (slot_start, slot_count)`` of a run's cohort (a round's close only)."""

    # -- the operator's dashboard (reads)
    @abstractmethod
    def recent_runs(self, limit: int) -> list[RunSummary]:
        """The newest runs."""

    @abstractmethod
    def population_counts(self) -> list[PopulationCount]:
        """The enrolled devices of each population."""

    @abstractmethod
    def checked_in_by_population(self) -> dict[str, int]:
        """``population -> devices in live runs`` (populations with none are absent)."""

    @abstractmethod
    def budgets(self) -> list[BudgetRow]:
        """Every budget, by scope and name."""

    @abstractmethod
    def reserved_charges(self, scope: str, name: str) -> list[ChargeRow]:
        """The charges still reserved (not yet spent) on one budget, in order."""

    @abstractmethod
    def recent_audit(self, actions: tuple[str, ...], limit: int) -> list[AuditEntry]:
        """The newest audit records of ``actions``, newest first."""

    # -- the operator API (reads and device/operator changes)
    def page_tasks(
        self,
        limit: int,
        offset: int,
        *,
        analysis: str | None = None,
        population: str | None = None,
    ) -> tuple[list[TaskSummary], int]:
        """One page of the tasks, newest first, and how many match.

        Filtered in the query by the ``analysis`` and ``privacy.population`` of their configuration
        (a signed envelope's task, or a legacy unsigned row).
        """
        where = {("analysis",): analysis, ("privacy", "population"): population}
        return self._tasks_page(limit, offset, _given(where))

    @abstractmethod
    def _tasks_page(
        self, limit: int, offset: int, where: dict[tuple[str, ...], str]
    ) -> tuple[list[TaskSummary], int]:
        """:meth:`page_tasks` with its filters as ``path in the task's configuration -> value``."""

    def page_runs(
        self,
        limit: int,
        offset: int,
        *,
        status: str | None = None,
        task_id: str | None = None,
        analyst: str | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of runs, newest first (with the filters), and the number of matching runs."""
        where = {"status": status, "task_id": task_id, "analyst": analyst}
        return self._runs_page(limit, offset, _given(where))

    @abstractmethod
    def _runs_page(
        self, limit: int, offset: int, where: dict[str, str]
    ) -> tuple[list[dict[str, Any]], int]:
        """:meth:`page_runs` with its filters as ``runs column -> value``."""

    @abstractmethod
    def page_budgets(
        self, limit: int, offset: int, *, scope: str | None = None
    ) -> tuple[list[BudgetRow], int]:
        """One page of budgets by scope and name, and the number of matching budgets."""

    @abstractmethod
    def page_devices(
        self, limit: int, offset: int, *, population: str | None = None, status: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of enrolled devices by id (``status``: active or revoked), and their number."""

    @abstractmethod
    def device_for_update(self, client_id: str) -> dict[str, Any] | None:
        """An enrolled device as :meth:`page_devices` lists it, locked ``FOR UPDATE``, or None."""

    @abstractmethod
    def update_client(self, client_id: str, **values: Any) -> None:
        """Set columns of an enrolled device; increments :meth:`devices_version` in the transaction."""

    @abstractmethod
    def page_operators(self, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """One page of operators (name, created_at) by name, and their number."""

    def set_operator_token(self, name: str, token_hash: str) -> bool:
        """Replace an operator's token hash; False if there is no such operator.

        A hash another operator holds raises :class:`sqlalchemy.exc.IntegrityError` (unique column).
        """
        return self._set("operators", name, {"token_hash": token_hash})

    @abstractmethod
    def remove_operator(self, name: str) -> bool:
        """Delete an operator; False if there is no such operator."""

    @abstractmethod
    def audit_log(self, run_id: str | None, limit: int) -> list[AuditEntry]:
        """The oldest ``limit`` audit records (of one run), oldest first."""

    # -- tasks (write)
    def add_task(self, task_id: str, config: str, created_by: str, created_at: float) -> bool:
        """Store a task; False if one with that id exists (nothing written)."""
        values = {
            "id": task_id,
            "config": config,
            "created_by": created_by,
            "created_at": created_at,
        }
        return self._add_row("tasks", values, ignore=True)

    # -- the ledger and the audit log
    def add_audit(
        self, ts: float, actor: str, action: str, run_id: str | None, detail: str
    ) -> None:
        """Append an audit record."""
        values = {"ts": ts, "actor": actor, "action": action, "run_id": run_id, "detail": detail}
        self._add_row("audit", values)

    @abstractmethod
    def budget(self, scope: str, name: str, *, lock: bool = False) -> BudgetRow | None:
        """A budget (locked ``FOR UPDATE`` with ``lock``), or None."""

    @abstractmethod
    def put_budget(self, scope: str, name: str, epsilon: float, delta: float) -> None:
        """Create or change a budget (after :meth:`budget` with ``lock``)."""

    @abstractmethod
    def charges_on(self, scope: str, name: str) -> list[ChargeRow]:
        """The reserved and spent charges on a population's or analyst's budget, in order."""

    def add_charge(self, charge: ChargeRow, now: float) -> None:
        """Insert a run's charge."""
        self._add_row("ledger", asdict(charge) | {"created_at": now, "updated_at": now})

    @abstractmethod
    def charge_of(self, run_id: str) -> ChargeRow | None:
        """A run's charge, locked ``FOR UPDATE``, or None."""

    @abstractmethod
    def set_charge_status(self, run_id: str, status: str, now: float) -> None:
        """Change a run's charge's status."""

    # -- idempotency keys
    @abstractmethod
    def idempotent_answer(self, actor: str, key: str) -> IdempotentAnswer | None:
        """The stored request and answer of ``(actor, key)``, or None."""

    def claim_key(
        self, actor: str, key: str, method: str, path: str, request_hash: str, now: float
    ) -> bool:
        """Claim ``(actor, key)`` for a request; False if it was claimed already (nothing written).

        A concurrent claim of the same key waits for the first claimer's transaction to end (the
        memory store's transactions are serialized: there a claim never waits).
        """
        values = {
            "actor": actor,
            "key": key,
            "method": method,
            "path": path,
            "request_hash": request_hash,
            "status_code": 0,
            "response": "",
            "created_at": now,
        }
        return self._add_row("idempotency_keys", values, ignore=True)

    def store_answer(self, actor: str, key: str, status_code: int, response: str) -> None:
        """Store the answer of a claimed key."""
        self._set(
            "idempotency_keys", (actor, key), {"status_code": status_code, "response": response}
        )

    @abstractmethod
    def purge_idempotency_keys(self, before: float) -> int:
        """Delete the idempotency keys created before ``before`` (unix seconds); return how many."""

    # -- refusals and server secrets (issue 42)
    def add_refusal(
        self, run_id: str, client_id: str, reason: str, message: str, now: float
    ) -> bool:
        """Record a device's refusal of a run; False if it refused the run already (nothing written)."""
        values = {
            "run_id": run_id,
            "client_id": client_id,
            "reason": reason,
            "message": message,
            "refused_at": now,
        }
        return self._add_row("refusals", values, ignore=True)

    @abstractmethod
    def refusals_of(self, run_id: str) -> list[RefusalRow]:
        """The refusals of a run, by device id."""

    @abstractmethod
    def refusal_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        """``run id -> devices that refused it`` for the given runs (runs with none are absent)."""

    @abstractmethod
    def server_secret(self, name: str, candidate: bytes, now: float) -> bytes:
        """The stored secret ``name``; stores ``candidate`` first if there is none (the first one wins)."""

    # -- the change counter
    @abstractmethod
    def bump_version(self) -> int:
        """Increment the shared ``state_version`` counter; return its new value."""

    @abstractmethod
    def version(self) -> int:
        """The shared ``state_version`` counter."""

    @abstractmethod
    def devices_version(self) -> int:
        """The counter of changes to enrolled devices' rows (:meth:`update_client` increments it).

        Server processes cache device rows while it is unchanged (:class:`fedstats.service.http.deps.DeviceAuth`).
        """
