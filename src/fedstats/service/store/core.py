"""Store queries of the core path.

Clients, nonces, tasks, runs, members, rounds, reports, operators, authorities, the change counter.

:class:`CoreQueries` is the interface the domain layer calls (through a transaction object, see
:meth:`fedstats.service.store.Store.transaction`); :class:`SqlCoreQueries` implements it with SQLAlchemy Core
statements on the transaction's connection (SQLite and PostgreSQL). Methods take and return plain values (str, int, dict, tuples, frozen
dataclasses), never ORM objects; reads that grow with a run's cohort are not on a per-report path.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, cast

from sqlalchemy import (
    Connection,
    String,
    Table,
    and_,
    bindparam,
    delete,
    exists,
    func,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from fedstats.service.store.tables import (
    Audit,
    Authority,
    Budget,
    Client,
    IdempotencyKey,
    LedgerCharge,
    Nonce,
    Operator,
    Report,
    RoundRecord,
    Run,
    RunMember,
    StateVersion,
    Task,
)

__all__ = [
    "AuditEntry",
    "BudgetRow",
    "ChargeRow",
    "ClientRow",
    "ClosedRound",
    "Cohort",
    "CoreQueries",
    "FinishedRun",
    "IdempotentAnswer",
    "LiveRun",
    "PopulationCount",
    "ReportRow",
    "RoundRow",
    "RoundSummary",
    "RoundTotal",
    "RunLease",
    "RunRow",
    "RunSummary",
    "SqlCoreQueries",
    "TaskSummary",
]


def _table(model: Any) -> Table:
    return cast(Table, model.__table__)


_AUDIT = _table(Audit)
_BUDGETS = _table(Budget)
_CHARGES = _table(LedgerCharge)
_IDEMPOTENCY = _table(IdempotencyKey)
_AUTHORITIES = _table(Authority)
_CLIENTS = _table(Client)
_NONCES = _table(Nonce)
_OPERATORS = _table(Operator)
_REPORTS = _table(Report)
_ROUNDS = _table(RoundRecord)
_RUNS = _table(Run)
_MEMBERS = _table(RunMember)
_VERSION = _table(StateVersion)
DEVICES_VERSION = 2  # the row of state_version counting changes to enrolled devices (1: run states)
_TASKS = _table(Task)


@dataclass(frozen=True)
class ClientRow:
    """An enrolled device (``clients`` row).

    Attributes
    ----------
    id, public_key, population, authority : str
    not_after : float
        Expiry of its certificate (Unix seconds).
    revoked : bool
        Whether an operator revoked it.
    certificate : str or None
        The enrollment certificate as registered (JSON).
    """

    id: str
    public_key: str
    population: str
    authority: str
    not_after: float
    revoked: bool
    certificate: str | None


@dataclass(frozen=True)
class BudgetRow:
    """A privacy budget (``budgets`` row)."""

    scope: str
    name: str
    epsilon: float
    delta: float


@dataclass(frozen=True)
class ChargeRow:
    """A run's privacy charge (``ledger`` row)."""

    run_id: str
    population: str
    analyst: str
    epsilon: float
    delta: float
    rho: float | None
    status: str
    label: str


@dataclass(frozen=True)
class IdempotentAnswer:
    """The stored request and answer of an idempotency key."""

    method: str
    path: str
    request_hash: str
    status_code: int
    response: str


@dataclass(frozen=True)
class ReportRow:
    """A stored report (``reports`` row)."""

    client_id: str
    vector: str
    count: int
    excluded: str | None


@dataclass(frozen=True)
class RoundRow:
    """A journaled round (``rounds`` row, without its total)."""

    run_id: str
    index: int
    name: str
    encode: str
    params: str
    params_digest: str
    dim: int
    bound: int
    lo: int
    hi: int
    status: str
    deadline: float


@dataclass(frozen=True)
class LiveRun:
    """A live run as a device's work list sees it: the run, the device's membership, the open round."""

    run_id: str
    task_id: str
    status: str
    checkin_deadline: float
    n_clients: int | None
    public_seed: str | None
    slot_start: int | None
    slot_count: int | None
    reveal: str | None
    round: RoundRow | None
    reported: bool = False
    """Whether the device has a report in the open round (``round``)."""


@dataclass(frozen=True)
class RunRow:
    """A run (``runs`` row).

    Attributes
    ----------
    id, task_id, analyst : str
    status : str
        ``checkin``, ``seeding``, ``running``, ``done`` or ``aborted``.
    created_at, checkin_deadline : float
        Unix seconds.
    n_clients : int or None
        Records in the cohort, fixed when check-in closes.
    secret : str
    result, error : str or None
        The released result (JSON) once done; the reason once aborted.
    finished_at : float or None
    lease_owner : str or None
        The server process advancing the run, until ``lease_until``.
    lease_until : float or None
    public_seed : str or None
        The run's public seed (hex).
    lease_epoch : int
        The fencing token: every claim of the lease increments it.
    """

    id: str
    task_id: str
    analyst: str
    status: str
    created_at: float
    checkin_deadline: float
    n_clients: int | None
    secret: str
    result: str | None
    error: str | None
    finished_at: float | None
    lease_owner: str | None
    lease_until: float | None
    public_seed: str | None
    lease_epoch: int


@dataclass(frozen=True)
class RunLease:
    """A live run's lease (``runs.lease_*``): who advances it, until when, under which fencing token."""

    run_id: str
    lease_owner: str | None
    lease_until: float | None
    lease_epoch: int


@dataclass(frozen=True)
class ClosedRound:
    """A closed round as journaled: what a replay of the plan checks and the sum it feeds back."""

    index: int
    params_digest: str
    encode: str
    total: str | None
    n_clients: int | None


@dataclass(frozen=True)
class RoundTotal:
    """A closed round's journaled sum (canonical JSON) and the records it sums."""

    index: int
    total: str
    n_clients: int


@dataclass(frozen=True)
class RoundSummary:
    """A round as the run's view lists it (``n_clients``: records summed once closed)."""

    index: int
    name: str
    status: str
    lo: int
    hi: int
    n_clients: int | None


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """A done or aborted run a device was a member of."""

    run_id: str
    status: str


@dataclass(frozen=True)
class Cohort:
    """A run's cohort so far: its devices and the records (slots) they hold."""

    devices: int
    records: int


@dataclass(frozen=True)
class RunSummary:
    """A run as the dashboard lists it."""

    run_id: str
    task_id: str
    created_at: float
    finished_at: float | None


@dataclass(frozen=True)
class PopulationCount:
    """A population's enrolled devices, how many are revoked, and the newest enrolment (Unix s)."""

    population: str
    enrolled: int
    revoked: int
    last_enrolled: float | None


@dataclass(frozen=True)
class TaskSummary:
    """A stored task's id, who created it and when."""

    task_id: str
    created_by: str
    created_at: float


@dataclass(frozen=True)
class AuditEntry:
    """An audit record (``audit`` row)."""

    ts: float
    actor: str
    action: str
    run_id: str | None
    detail: str


@dataclass(frozen=True)
class PutReport:
    """One upload for :meth:`CoreQueries.put_reports` (the arguments of :meth:`CoreQueries.put_report`)."""

    nonce: tuple[str, float]
    expect: tuple[str, int, int]
    run_id: str
    index: int
    client_id: str
    vector: str
    count: int
    digest: str


class CoreQueries(ABC):
    """The core path's queries, one method per statement or set-based group of statements."""

    # -- devices and signed requests
    @abstractmethod
    def client(self, client_id: str) -> ClientRow | None:
        """The enrolled device ``client_id``, or None."""

    @abstractmethod
    def add_client(self, row: ClientRow, enrolled_at: float) -> None:
        """Enroll a device."""

    @abstractmethod
    def set_client_certificate(self, client_id: str, certificate: str) -> None:
        """Keep the certificate of a device enrolled before certificates were kept."""

    @abstractmethod
    def use_nonce(self, client_id: str, nonce: str, ts: float) -> bool:
        """Record a signed request's nonce; False if it was already used (a replay; nothing written)."""

    @abstractmethod
    def purge_nonces(self, before: float) -> int:
        """Delete the nonces older than ``before``; return how many."""

    @abstractmethod
    def authorities(self) -> dict[str, str]:
        """The trusted enrollment authorities: fingerprint -> public key (hex)."""

    @abstractmethod
    def add_authority(self, fingerprint: str, public_key: str) -> bool:
        """Trust an authority; False if it was trusted already."""

    @abstractmethod
    def operator_of(self, token_hash: str) -> str | None:
        """The operator whose token hashes to ``token_hash``, or None."""

    @abstractmethod
    def operator_exists(self, name: str) -> bool:
        """Whether an operator of that name exists."""

    @abstractmethod
    def add_operator(self, name: str, token_hash: str, created_at: float) -> None:
        """Create an operator."""

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

    @abstractmethod
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

    @abstractmethod
    def round_for_report(self, run_id: str, index: int) -> RoundRow | None:
        """Round ``index`` of a run, share-locked (closing it waits for the reports being written)."""

    @abstractmethod
    def report_digest(self, run_id: str, index: int, client_id: str) -> str | None:
        """The digest of a device's stored report in a round, or None."""

    @abstractmethod
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

    def put_report(
        self,
        nonce: tuple[str, float],
        expect: tuple[str, int, int],
        run_id: str,
        index: int,
        client_id: str,
        vector: str,
        count: int,
        digest: str,
        received_at: float,
    ) -> tuple[bool, bool]:
        """Record a request's nonce and store a report if the round and membership are as expected.

        The device's upload in one statement where the database allows it (PostgreSQL: one statement
        of common table expressions; SQLite: two). Nothing is read back: the caller checked the report
        against the round and slots it expects (``expect``), and the statement stores it only if they
        still hold.

        Parameters
        ----------
        nonce : (str, float)
            The request's nonce and timestamp (of ``client_id``).
        expect : (str, int, int)
            ``(params_digest, slot_start, slot_count)``: the round's parameters' digest and the
            device's slots the report was checked against.
        run_id, index, client_id, vector, count, digest, received_at
            The report, as :meth:`add_report` stores it.

        Returns
        -------
        (bool, bool)
            Whether the nonce was new (False: a replay; nothing written), and whether the report was
            stored: round ``index`` is open with that digest, the device has exactly those slots and
            no report in the round yet. When the nonce is new and the report was not stored, the nonce
            stays recorded in the transaction (the caller reads why, or rolls back).
        """
        if not self.use_nonce(client_id, nonce[0], nonce[1]):
            return False, False
        rec = self.round_for_report(run_id, index)
        if rec is None or rec.status != "open" or rec.params_digest != expect[0]:
            return True, False
        if self.member(run_id, client_id) != (expect[1], expect[2]):
            return True, False
        if self.report_digest(run_id, index, client_id) is not None:
            return True, False
        self.add_report(run_id, index, client_id, vector, count, digest, received_at)
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
        return [
            self.put_report(
                it.nonce,
                it.expect,
                it.run_id,
                it.index,
                it.client_id,
                it.vector,
                it.count,
                it.digest,
                received_at,
            )
            for it in items
        ]

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

    @abstractmethod
    def add_run(self, **values: Any) -> None:
        """Insert a run (the ``runs`` columns as keywords)."""

    @abstractmethod
    def update_run(self, run_id: str, **values: Any) -> None:
        """Set columns of a run."""

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
    def closed_rounds(self, run_id: str) -> list[ClosedRound]:
        """A run's closed rounds as journaled, in order."""

    @abstractmethod
    def round_row(self, run_id: str, index: int) -> RoundRow | None:
        """Round ``index`` of a run, locked ``FOR UPDATE`` (the driver opening or closing it), or None."""

    @abstractmethod
    def add_round(self, **values: Any) -> RoundRow:
        """Insert a round (the ``rounds`` columns as keywords); return it."""

    @abstractmethod
    def update_round(self, run_id: str, index: int, **values: Any) -> None:
        """Set columns of a round (``status``; at its close ``total`` and ``n_clients``)."""

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
    @abstractmethod
    def tasks_newest(self) -> list[TaskSummary]:
        """Every task, newest first."""

    @abstractmethod
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

    @abstractmethod
    def set_operator_token(self, name: str, token_hash: str) -> bool:
        """Replace an operator's token hash; False if there is no such operator."""

    @abstractmethod
    def remove_operator(self, name: str) -> bool:
        """Delete an operator; False if there is no such operator."""

    @abstractmethod
    def audit_log(self, run_id: str | None, limit: int) -> list[AuditEntry]:
        """The oldest ``limit`` audit records (of one run), oldest first."""

    # -- tasks (write)
    @abstractmethod
    def add_task(self, task_id: str, config: str, created_by: str, created_at: float) -> bool:
        """Store a task; False if one with that id exists (nothing written)."""

    # -- the ledger and the audit log
    @abstractmethod
    def add_audit(
        self, ts: float, actor: str, action: str, run_id: str | None, detail: str
    ) -> None:
        """Append an audit record."""

    @abstractmethod
    def budget(self, scope: str, name: str, *, lock: bool = False) -> BudgetRow | None:
        """A budget (locked ``FOR UPDATE`` with ``lock``), or None."""

    @abstractmethod
    def put_budget(self, scope: str, name: str, epsilon: float, delta: float) -> None:
        """Create or change a budget (after :meth:`budget` with ``lock``)."""

    @abstractmethod
    def charges_on(self, scope: str, name: str) -> list[ChargeRow]:
        """The reserved and spent charges on a population's or analyst's budget, in order."""

    @abstractmethod
    def add_charge(self, charge: ChargeRow, now: float) -> None:
        """Insert a run's charge."""

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

    @abstractmethod
    def claim_key(
        self, actor: str, key: str, method: str, path: str, request_hash: str, now: float
    ) -> bool:
        """Claim ``(actor, key)`` for a request; False if it was claimed already (nothing written).

        A concurrent claim of the same key waits for the first claimer's transaction to end.
        """

    @abstractmethod
    def store_answer(self, actor: str, key: str, status_code: int, response: str) -> None:
        """Store the answer of a claimed key."""

    @abstractmethod
    def purge_idempotency_keys(self, before: float) -> int:
        """Delete the idempotency keys created before ``before`` (unix seconds); return how many."""

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


def _round(r: Any) -> RoundRow:
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


# table columns, not ORM attributes: a select of ORM attributes takes the ORM's compile path
_ROUND_COLUMNS = (
    _ROUNDS.c.run_id,
    _ROUNDS.c.index,
    _ROUNDS.c.name,
    _ROUNDS.c.encode,
    _ROUNDS.c.params,
    _ROUNDS.c.params_digest,
    _ROUNDS.c.dim,
    _ROUNDS.c.bound,
    _ROUNDS.c.lo,
    _ROUNDS.c.hi,
    _ROUNDS.c.status,
    _ROUNDS.c.deadline,
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


# The statements of every device request (a poll, an upload), built once with bind parameters:
# building a select (coercing its columns and clauses) cost more CPU than executing it, and a
# statement built once keeps its memoized cache key (SQLAlchemy's compiled cache then does the rest).
_Q_CLIENT = select(
    _CLIENTS.c.id,
    _CLIENTS.c.public_key,
    _CLIENTS.c.population,
    _CLIENTS.c.authority,
    _CLIENTS.c.not_after,
    _CLIENTS.c.revoked_at,
    _CLIENTS.c.certificate,
).where(_CLIENTS.c.id == bindparam("client_id"))


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


def _status_in(*statuses: str) -> Any:
    """``runs.status`` among ``statuses``, as plain bound comparisons.

    An ``IN`` list would be expanded at every execution (SQLAlchemy's post-compile step) of a statement
    run at every poll.
    """
    return or_(*(_RUNS.c.status == s for s in statuses))


_Q_LIVE_RUNS = _LIVE_SELECT.where(_status_in("checkin", "seeding", "running"))
# the live runs and the finished runs the device was in, in one statement (CoreQueries.device_runs)


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
_Q_ROUND_FOR_REPORT = (
    select(*_ROUND_COLUMNS)
    .where(_ROUNDS.c.run_id == bindparam("run_id"), _ROUNDS.c.index == bindparam("index"))
    .with_for_update(read=True)
)
_Q_REPORT_DIGEST = select(_REPORTS.c.digest).where(
    _REPORTS.c.run_id == bindparam("run_id"),
    _REPORTS.c.round_index == bindparam("index"),
    _REPORTS.c.client_id == bindparam("client_id"),
)
_Q_ADD_REPORT = _REPORTS.insert()
_Q_COHORT = select(func.count(), func.coalesce(func.sum(_MEMBERS.c.slot_count), 0)).where(
    _MEMBERS.c.run_id == bindparam("run_id")
)
_Q_AUTHORITIES = select(_AUTHORITIES.c.id, _AUTHORITIES.c.public_key)

# A device's upload (CoreQueries.put_report) as driver SQL, built once: no statement object, no compile,
# no cache key. The report is inserted only while its round is open with the digest the device's
# report was checked against, and the device holds the slots it was checked with.
_REPORT_IF = """INSERT INTO reports (run_id, round_index, client_id, vector, count, digest, received_at)
SELECT :run_id, :index, :client_id, :vector, :count, :digest, :received_at
WHERE {nonce}EXISTS (
    SELECT 1 FROM {rounds}
) AND EXISTS (
    SELECT 1 FROM run_members WHERE run_id = :run_id AND client_id = :client_id
    AND slot_start = :slot_start AND slot_count = :slot_count
)
ON CONFLICT DO NOTHING RETURNING client_id"""
_OPEN_ROUND = (
    "rounds WHERE run_id = :run_id AND \"index\" = :index AND status = 'open'"
    " AND params_digest = :params_digest"
)
_NONCE_SQLITE = """INSERT INTO nonces (client_id, nonce, ts) VALUES (:client_id, :nonce, :ts)
ON CONFLICT DO NOTHING RETURNING client_id"""
_REPORT_SQLITE = _REPORT_IF.format(nonce="", rounds=_OPEN_ROUND)
# PostgreSQL: one statement; the round row share-locked (its close waits for the reports being
# written), the report written only if the nonce was new
_PUT_REPORT_PG = re.sub(
    r":(\w+)",
    r"%(\1)s",
    f"""WITH n AS ({_NONCE_SQLITE}),
r AS (SELECT 1 FROM {_OPEN_ROUND} FOR SHARE),
ins AS ({_REPORT_IF.format(nonce="EXISTS (SELECT 1 FROM n) AND ", rounds="r")})
SELECT (SELECT count(*) FROM n), (SELECT count(*) FROM ins)""",
)
# Many uploads (CoreQueries.put_reports) with the same conditions, set-based: every column bound as
# one array (PostgreSQL: one statement) or one JSON array of rows (SQLite: one statement for the nonces,
# one for the reports whose nonce was new). Each row's answer is matched back by its position.
_PUT_REPORTS_PG = """WITH u AS (
    SELECT * FROM unnest(
        %(client_id)s::varchar[], %(nonce)s::varchar[], %(ts)s::float8[], %(run_id)s::varchar[],
        %(index)s::int4[], %(params_digest)s::varchar[], %(slot_start)s::int4[],
        %(slot_count)s::int4[], %(vector)s::text[], %(count)s::int4[], %(digest)s::varchar[]
    ) WITH ORDINALITY AS u(client_id, nonce, ts, run_id, idx, params_digest, slot_start, slot_count,
        vector, count, digest, ord)
),
n AS (
    INSERT INTO nonces (client_id, nonce, ts) SELECT client_id, nonce, ts FROM u
    ON CONFLICT DO NOTHING RETURNING client_id, nonce
),
r AS (
    SELECT rounds.run_id, rounds."index", rounds.params_digest FROM rounds
    WHERE rounds.status = 'open'
    AND (rounds.run_id, rounds."index", rounds.params_digest) IN (
        SELECT run_id, idx, params_digest FROM u
    )
    FOR SHARE
),
ins AS (
    INSERT INTO reports (run_id, round_index, client_id, vector, count, digest, received_at)
    SELECT u.run_id, u.idx, u.client_id, u.vector, u.count, u.digest, %(received_at)s
    FROM u
    JOIN n ON n.client_id = u.client_id AND n.nonce = u.nonce
    JOIN r ON r.run_id = u.run_id AND r."index" = u.idx AND r.params_digest = u.params_digest
    WHERE EXISTS (
        SELECT 1 FROM run_members m WHERE m.run_id = u.run_id AND m.client_id = u.client_id
        AND m.slot_start = u.slot_start AND m.slot_count = u.slot_count
    )
    ON CONFLICT DO NOTHING RETURNING run_id, round_index, client_id
)
SELECT u.ord, n.client_id IS NOT NULL, ins.client_id IS NOT NULL
FROM u
LEFT JOIN n ON n.client_id = u.client_id AND n.nonce = u.nonce
LEFT JOIN ins ON ins.run_id = u.run_id AND ins.round_index = u.idx AND ins.client_id = u.client_id"""
_PUT_NONCES_SQLITE = """INSERT INTO nonces (client_id, nonce, ts)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
FROM json_each(:rows) WHERE true
ON CONFLICT DO NOTHING RETURNING client_id, nonce"""
_PUT_REPORTS_SQLITE = """INSERT INTO reports (run_id, round_index, client_id, vector, count, digest, received_at)
SELECT run_id, idx, client_id, vector, count, digest, :received_at FROM (
    SELECT json_extract(value, '$[0]') AS client_id, json_extract(value, '$[3]') AS run_id,
        json_extract(value, '$[4]') AS idx, json_extract(value, '$[5]') AS params_digest,
        json_extract(value, '$[6]') AS slot_start, json_extract(value, '$[7]') AS slot_count,
        json_extract(value, '$[8]') AS vector, json_extract(value, '$[9]') AS count,
        json_extract(value, '$[10]') AS digest
    FROM json_each(:rows)
) AS u
WHERE EXISTS (
    SELECT 1 FROM rounds WHERE rounds.run_id = u.run_id AND rounds."index" = u.idx
    AND rounds.status = 'open' AND rounds.params_digest = u.params_digest
) AND EXISTS (
    SELECT 1 FROM run_members m WHERE m.run_id = u.run_id AND m.client_id = u.client_id
    AND m.slot_start = u.slot_start AND m.slot_count = u.slot_count
)
ON CONFLICT DO NOTHING RETURNING run_id, round_index, client_id"""
# INSERT ... ON CONFLICT DO NOTHING RETURNING the key, by (table name, dialect name)
_INSERT_IGNORE: dict[tuple[str, str], Any] = {}


_CHARGE_COLUMNS = (
    _CHARGES.c.run_id,
    _CHARGES.c.population,
    _CHARGES.c.analyst,
    _CHARGES.c.epsilon,
    _CHARGES.c.delta,
    _CHARGES.c.rho,
    _CHARGES.c.status,
    _CHARGES.c.label,
)


class SqlCoreQueries(CoreQueries):
    """:class:`CoreQueries` on SQLAlchemy (``self.conn``: the transaction's connection)."""

    conn: Connection

    def _exec(self, stmt: Any, params: Any = None) -> Any:
        """Execute a Core statement on the transaction's connection (no ORM layer)."""
        return self.conn.execute(stmt, params)

    def _run(self, stmt: Any, params: dict[str, Any]) -> Any:
        """Execute a prebuilt Core statement on the transaction's connection (no ORM layer)."""
        return self.conn.execute(stmt, params)

    def _insert_ignore(self, table: Any, **values: Any) -> int:
        """``INSERT ... ON CONFLICT DO NOTHING``; the number of rows inserted (0 or 1)."""
        conn = self.conn
        dialect = conn.dialect.name
        stmt = _INSERT_IGNORE.get((table.name, dialect))
        if stmt is None:
            ins = (postgresql if dialect == "postgresql" else sqlite).insert(table)
            # RETURNING rather than rowcount (which psycopg reports as -1 here); the values are bound
            # at execution (the columns given by the parameters' keys)
            stmt = ins.on_conflict_do_nothing().returning(*table.primary_key.columns)
            _INSERT_IGNORE[(table.name, dialect)] = stmt
        return len(conn.execute(stmt, values).all())

    def client(self, client_id: str) -> ClientRow | None:
        """See :meth:`CoreQueries.client`."""
        row = self._run(_Q_CLIENT, {"client_id": client_id}).first()
        if row is None:
            return None
        return ClientRow(
            id=row.id,
            public_key=row.public_key,
            population=row.population,
            authority=row.authority,
            not_after=float(row.not_after),
            revoked=row.revoked_at is not None,
            certificate=row.certificate,
        )

    def add_client(self, row: ClientRow, enrolled_at: float) -> None:
        """See :meth:`CoreQueries.add_client`."""
        self._exec(
            _CLIENTS.insert().values(
                id=row.id,
                public_key=row.public_key,
                population=row.population,
                authority=row.authority,
                not_after=row.not_after,
                enrolled_at=enrolled_at,
                certificate=row.certificate,
            )
        )

    def set_client_certificate(self, client_id: str, certificate: str) -> None:
        """See :meth:`CoreQueries.set_client_certificate`."""
        c = _CLIENTS.c
        self._exec(update(_CLIENTS).where(c.id == client_id).values(certificate=certificate))

    def use_nonce(self, client_id: str, nonce: str, ts: float) -> bool:
        """See :meth:`CoreQueries.use_nonce`."""
        return self._insert_ignore(_NONCES, client_id=client_id, nonce=nonce, ts=ts) == 1

    def purge_nonces(self, before: float) -> int:
        """See :meth:`CoreQueries.purge_nonces`."""
        got = self._exec(delete(_NONCES).where(_NONCES.c.ts < before))
        return int(getattr(got, "rowcount", 0) or 0)

    def authorities(self) -> dict[str, str]:
        """See :meth:`CoreQueries.authorities`."""
        return {i: k for i, k in self._run(_Q_AUTHORITIES, {}).all()}

    def add_authority(self, fingerprint: str, public_key: str) -> bool:
        """See :meth:`CoreQueries.add_authority`."""
        return self._insert_ignore(_AUTHORITIES, id=fingerprint, public_key=public_key) == 1

    def operator_of(self, token_hash: str) -> str | None:
        """See :meth:`CoreQueries.operator_of`."""
        o = _OPERATORS.c
        got = self._exec(select(o.name).where(o.token_hash == token_hash)).scalar()
        return None if got is None else str(got)

    def operator_exists(self, name: str) -> bool:
        """See :meth:`CoreQueries.operator_exists`."""
        o = _OPERATORS.c
        return self._exec(select(o.name).where(o.name == name)).first() is not None

    def add_operator(self, name: str, token_hash: str, created_at: float) -> None:
        """See :meth:`CoreQueries.add_operator`."""
        self._exec(
            _OPERATORS.insert().values(name=name, token_hash=token_hash, created_at=created_at)
        )

    def task_json(self, task_id: str) -> str | None:
        """See :meth:`CoreQueries.task_json`."""
        t = _TASKS.c
        got = self._exec(select(t.config).where(t.id == task_id)).scalar()
        return None if got is None else str(got)

    def cohort(self, run_id: str) -> Cohort:
        """See :meth:`CoreQueries.cohort`."""
        devices, slots = self._run(_Q_COHORT, {"run_id": run_id}).one()
        return Cohort(int(devices), int(slots))

    def member(self, run_id: str, client_id: str) -> tuple[int, int] | None:
        """See :meth:`CoreQueries.member`."""
        row = self._run(_Q_MEMBER, {"run_id": run_id, "client_id": client_id}).first()
        return None if row is None else (int(row[0]), int(row[1]))

    def add_member(
        self,
        run_id: str,
        client_id: str,
        slot_start: int,
        slot_count: int,
        joined_at: float,
        commitment: str | None,
    ) -> None:
        """See :meth:`CoreQueries.add_member`."""
        self._exec(
            _MEMBERS.insert().values(
                run_id=run_id,
                client_id=client_id,
                slot_start=slot_start,
                slot_count=slot_count,
                joined_at=joined_at,
                commitment=commitment,
            )
        )

    def round_for_report(self, run_id: str, index: int) -> RoundRow | None:
        """See :meth:`CoreQueries.round_for_report`."""
        row = self._run(_Q_ROUND_FOR_REPORT, {"run_id": run_id, "index": index}).first()
        return None if row is None else _round(row)

    def report_digest(self, run_id: str, index: int, client_id: str) -> str | None:
        """See :meth:`CoreQueries.report_digest`."""
        got = self._run(
            _Q_REPORT_DIGEST, {"run_id": run_id, "index": index, "client_id": client_id}
        ).scalar()
        return None if got is None else str(got)

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
        """See :meth:`CoreQueries.add_report`."""
        self._run(
            _Q_ADD_REPORT,
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

    def put_report(
        self,
        nonce: tuple[str, float],
        expect: tuple[str, int, int],
        run_id: str,
        index: int,
        client_id: str,
        vector: str,
        count: int,
        digest: str,
        received_at: float,
    ) -> tuple[bool, bool]:
        """See :meth:`CoreQueries.put_report`."""
        conn = self.conn
        pg = conn.dialect.name == "postgresql"
        params = {
            "client_id": client_id,
            "nonce": nonce[0],
            "ts": nonce[1],
            "run_id": run_id,
            "index": index,
            "params_digest": expect[0],
            "slot_start": expect[1],
            "slot_count": expect[2],
            "vector": vector,
            "count": count,
            "digest": digest,
            "received_at": received_at,
        }
        if pg:
            fresh, stored = conn.exec_driver_sql(_PUT_REPORT_PG, params).one()
            return bool(fresh), bool(stored)
        if not conn.exec_driver_sql(_NONCE_SQLITE, params).all():
            return False, False
        return True, bool(conn.exec_driver_sql(_REPORT_SQLITE, params).all())

    def put_reports(
        self, items: Sequence[PutReport], received_at: float
    ) -> list[tuple[bool, bool]]:
        """See :meth:`CoreQueries.put_reports`."""
        if len(items) <= 1:
            return super().put_reports(items, received_at)
        conn = self.conn
        rows = [
            (
                it.client_id,
                it.nonce[0],
                it.nonce[1],
                it.run_id,
                it.index,
                it.expect[0],
                it.expect[1],
                it.expect[2],
                it.vector,
                it.count,
                it.digest,
            )
            for it in items
        ]
        if conn.dialect.name == "postgresql":
            names = (
                "client_id",
                "nonce",
                "ts",
                "run_id",
                "index",
                "params_digest",
                "slot_start",
                "slot_count",
                "vector",
                "count",
                "digest",
            )
            params: dict[str, Any] = {
                k: list(col) for k, col in zip(names, zip(*rows, strict=True), strict=True)
            }
            params["received_at"] = received_at
            out = [(False, False)] * len(items)
            for ord_, new, put in conn.exec_driver_sql(_PUT_REPORTS_PG, params).all():
                out[int(ord_) - 1] = (bool(new), bool(put))
            return out
        fresh = {
            (c, n)
            for c, n in conn.exec_driver_sql(
                _PUT_NONCES_SQLITE, {"rows": json.dumps([r[:3] for r in rows])}
            ).all()
        }
        todo = [r for r in rows if (r[0], r[1]) in fresh]
        stored: set[tuple[str, int, str]] = set()
        if todo:
            got = conn.exec_driver_sql(
                _PUT_REPORTS_SQLITE, {"rows": json.dumps(todo), "received_at": received_at}
            ).all()
            stored = {(str(a), int(b), str(c)) for a, b, c in got}
        return [((r[0], r[1]) in fresh, (r[3], r[4], r[0]) in stored) for r in rows]

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

    def add_run(self, **values: Any) -> None:
        """See :meth:`CoreQueries.add_run`."""
        self._exec(_RUNS.insert().values(**values))

    def update_run(self, run_id: str, **values: Any) -> None:
        """See :meth:`CoreQueries.update_run`."""
        self._exec(update(_RUNS).where(_RUNS.c.id == run_id).values(**values))

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
        return None if got is None else _round(got)

    def add_round(self, **values: Any) -> RoundRow:
        """See :meth:`CoreQueries.add_round`."""
        self._exec(_ROUNDS.insert().values(**values))
        return RoundRow(**{f: values[f] for f in _ROUND_FIELDS})

    def update_round(self, run_id: str, index: int, **values: Any) -> None:
        """See :meth:`CoreQueries.update_round`."""
        r = _ROUNDS.c
        self._exec(update(_ROUNDS).where(r.run_id == run_id, r.index == index).values(**values))

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

    def population_counts(self) -> list[PopulationCount]:
        """See :meth:`CoreQueries.population_counts`."""
        c = _CLIENTS.c
        rows = self._exec(
            select(
                c.population, func.count(c.id), func.count(c.revoked_at), func.max(c.enrolled_at)
            ).group_by(c.population)
        ).all()
        return [PopulationCount(str(p), int(n), int(r), last) for p, n, r, last in rows]

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

    def budgets(self) -> list[BudgetRow]:
        """See :meth:`CoreQueries.budgets`."""
        b = _BUDGETS.c
        rows = self._exec(
            select(b.scope, b.name, b.epsilon, b.delta).order_by(b.scope, b.name)
        ).all()
        return [BudgetRow(str(s), str(n), float(e), float(d)) for s, n, e, d in rows]

    def reserved_charges(self, scope: str, name: str) -> list[ChargeRow]:
        """See :meth:`CoreQueries.reserved_charges`."""
        c = _CHARGES.c
        col = c.population if scope == "population" else c.analyst
        rows = self._exec(
            select(*_CHARGE_COLUMNS).where(col == name, c.status == "reserved").order_by(c.id)
        ).all()
        return [ChargeRow(*r) for r in rows]

    def recent_audit(self, actions: tuple[str, ...], limit: int) -> list[AuditEntry]:
        """See :meth:`CoreQueries.recent_audit`."""
        a = _AUDIT.c
        rows = self._exec(
            select(a.ts, a.actor, a.action, a.run_id, a.detail)
            .where(a.action.in_(actions))
            .order_by(a.id.desc())
            .limit(limit)
        ).all()
        return [AuditEntry(float(t), str(w), str(x), r, str(d)) for t, w, x, r, d in rows]

    def _page(self, stmt: Any, limit: int, offset: int) -> tuple[list[Any], int]:
        total = self._exec(select(func.count()).select_from(stmt.subquery())).scalar_one()
        return list(self._exec(stmt.limit(limit).offset(offset)).all()), int(total)

    def tasks_newest(self) -> list[TaskSummary]:
        """See :meth:`CoreQueries.tasks_newest`."""
        t = _TASKS.c
        rows = self._exec(
            select(t.id, t.created_by, t.created_at).order_by(t.created_at.desc(), t.id)
        ).all()
        return [TaskSummary(str(i), str(b), float(a)) for i, b, a in rows]

    def page_runs(
        self,
        limit: int,
        offset: int,
        *,
        status: str | None = None,
        task_id: str | None = None,
        analyst: str | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        """See :meth:`CoreQueries.page_runs`."""
        r = _RUNS.c
        stmt = select(
            r.id, r.task_id, r.analyst, r.status, r.created_at, r.finished_at, r.n_clients, r.error
        ).order_by(r.created_at.desc(), r.id)
        if status is not None:
            stmt = stmt.where(r.status == status)
        if task_id is not None:
            stmt = stmt.where(r.task_id == task_id)
        if analyst is not None:
            stmt = stmt.where(r.analyst == analyst)
        rows, total = self._page(stmt, limit, offset)
        keys = ("run_id", "task_id", "analyst", "status", "created_at", "finished_at")
        return [dict(zip((*keys, "n_clients", "error"), row, strict=True)) for row in rows], total

    def page_budgets(
        self, limit: int, offset: int, *, scope: str | None = None
    ) -> tuple[list[BudgetRow], int]:
        """See :meth:`CoreQueries.page_budgets`."""
        b = _BUDGETS.c
        stmt = select(b.scope, b.name, b.epsilon, b.delta).order_by(b.scope, b.name)
        if scope is not None:
            stmt = stmt.where(b.scope == scope)
        rows, total = self._page(stmt, limit, offset)
        return [BudgetRow(str(s), str(n), float(e), float(d)) for s, n, e, d in rows], total

    _DEVICE_COLUMNS = ("id", "population", "authority", "public_key", "not_after", "enrolled_at")

    @staticmethod
    def _device(row: Any) -> dict[str, Any]:
        cid, population, authority, key, not_after, enrolled_at, revoked_at = row
        return {
            "client_id": cid,
            "population": population,
            "authority": authority,
            "public_key": key,
            "not_after": not_after,
            "enrolled_at": enrolled_at,
            "revoked_at": revoked_at,
            "status": "revoked" if revoked_at is not None else "active",
        }

    def page_devices(
        self, limit: int, offset: int, *, population: str | None = None, status: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """See :meth:`CoreQueries.page_devices`."""
        c = _CLIENTS.c
        cols = [c[k] for k in self._DEVICE_COLUMNS]
        stmt = select(*cols, c.revoked_at).order_by(c.id)
        if population is not None:
            stmt = stmt.where(c.population == population)
        if status == "active":
            stmt = stmt.where(c.revoked_at.is_(None))
        elif status == "revoked":
            stmt = stmt.where(c.revoked_at.is_not(None))
        rows, total = self._page(stmt, limit, offset)
        return [self._device(row) for row in rows], total

    def device_for_update(self, client_id: str) -> dict[str, Any] | None:
        """See :meth:`CoreQueries.device_for_update`."""
        c = _CLIENTS.c
        cols = [c[k] for k in self._DEVICE_COLUMNS]
        row = self._exec(
            select(*cols, c.revoked_at).where(c.id == client_id).with_for_update()
        ).first()
        return None if row is None else self._device(row)

    def update_client(self, client_id: str, **values: Any) -> None:
        """See :meth:`CoreQueries.update_client`."""
        self._exec(update(_CLIENTS).where(_CLIENTS.c.id == client_id).values(**values))
        # the devices' counter: row DEVICES_VERSION of state_version, created at its first change
        self._insert_ignore(_VERSION, id=DEVICES_VERSION, version=0)
        v = _VERSION.c
        self._exec(update(_VERSION).where(v.id == DEVICES_VERSION).values(version=v.version + 1))

    def page_operators(self, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """See :meth:`CoreQueries.page_operators`."""
        o = _OPERATORS.c
        rows, total = self._page(select(o.name, o.created_at).order_by(o.name), limit, offset)
        return [{"name": n, "created_at": c} for n, c in rows], total

    def set_operator_token(self, name: str, token_hash: str) -> bool:
        """See :meth:`CoreQueries.set_operator_token`."""
        o = _OPERATORS.c
        got = self._exec(
            update(_OPERATORS).where(o.name == name).values(token_hash=token_hash).returning(o.name)
        ).all()
        return bool(got)

    def remove_operator(self, name: str) -> bool:
        """See :meth:`CoreQueries.remove_operator`."""
        o = _OPERATORS.c
        got = self._exec(delete(_OPERATORS).where(o.name == name).returning(o.name)).all()
        return bool(got)

    def audit_log(self, run_id: str | None, limit: int) -> list[AuditEntry]:
        """See :meth:`CoreQueries.audit_log`."""
        a = _AUDIT.c
        stmt = select(a.ts, a.actor, a.action, a.run_id, a.detail).order_by(a.id)
        if run_id is not None:
            stmt = stmt.where(a.run_id == run_id)
        rows = self._exec(stmt.limit(limit)).all()
        return [AuditEntry(float(t), str(w), str(x), r, str(d)) for t, w, x, r, d in rows]

    def add_task(self, task_id: str, config: str, created_by: str, created_at: float) -> bool:
        """See :meth:`CoreQueries.add_task`."""
        return (
            self._insert_ignore(
                _TASKS, id=task_id, config=config, created_by=created_by, created_at=created_at
            )
            == 1
        )

    def add_audit(
        self, ts: float, actor: str, action: str, run_id: str | None, detail: str
    ) -> None:
        """See :meth:`CoreQueries.add_audit`."""
        self._exec(
            _AUDIT.insert().values(ts=ts, actor=actor, action=action, run_id=run_id, detail=detail)
        )

    def budget(self, scope: str, name: str, *, lock: bool = False) -> BudgetRow | None:
        """See :meth:`CoreQueries.budget`."""
        b = _BUDGETS.c
        stmt = select(b.scope, b.name, b.epsilon, b.delta).where(b.scope == scope, b.name == name)
        if lock:
            stmt = stmt.with_for_update()
        row = self._exec(stmt).first()
        if row is None:
            return None
        return BudgetRow(row.scope, row.name, float(row.epsilon), float(row.delta))

    def put_budget(self, scope: str, name: str, epsilon: float, delta: float) -> None:
        """See :meth:`CoreQueries.put_budget`."""
        b = _BUDGETS.c
        got = self._exec(
            update(_BUDGETS)
            .where(b.scope == scope, b.name == name)
            .values(epsilon=epsilon, delta=delta)
            .returning(b.scope)
        ).all()
        if not got:
            self._exec(
                _BUDGETS.insert().values(scope=scope, name=name, epsilon=epsilon, delta=delta)
            )

    def charges_on(self, scope: str, name: str) -> list[ChargeRow]:
        """See :meth:`CoreQueries.charges_on`."""
        c = _CHARGES.c
        col = c.population if scope == "population" else c.analyst
        rows = self._exec(
            select(*_CHARGE_COLUMNS)
            .where(col == name, c.status.in_(("reserved", "spent")))
            .order_by(c.id)
        ).all()
        return [ChargeRow(*r) for r in rows]

    def add_charge(self, charge: ChargeRow, now: float) -> None:
        """See :meth:`CoreQueries.add_charge`."""
        self._exec(
            _CHARGES.insert().values(
                run_id=charge.run_id,
                population=charge.population,
                analyst=charge.analyst,
                epsilon=charge.epsilon,
                delta=charge.delta,
                rho=charge.rho,
                status=charge.status,
                label=charge.label,
                created_at=now,
                updated_at=now,
            )
        )

    def charge_of(self, run_id: str) -> ChargeRow | None:
        """See :meth:`CoreQueries.charge_of`."""
        row = self._exec(
            select(*_CHARGE_COLUMNS).where(_CHARGES.c.run_id == run_id).with_for_update()
        ).first()
        return None if row is None else ChargeRow(*row)

    def set_charge_status(self, run_id: str, status: str, now: float) -> None:
        """See :meth:`CoreQueries.set_charge_status`."""
        self._exec(
            update(_CHARGES)
            .where(_CHARGES.c.run_id == run_id)
            .values(status=status, updated_at=now)
        )

    def idempotent_answer(self, actor: str, key: str) -> IdempotentAnswer | None:
        """See :meth:`CoreQueries.idempotent_answer`."""
        k = _IDEMPOTENCY.c
        row = self._exec(
            select(k.method, k.path, k.request_hash, k.status_code, k.response).where(
                k.actor == actor, k.key == key
            )
        ).first()
        return None if row is None else IdempotentAnswer(*row)

    def claim_key(
        self, actor: str, key: str, method: str, path: str, request_hash: str, now: float
    ) -> bool:
        """See :meth:`CoreQueries.claim_key`."""
        got = self._insert_ignore(
            _IDEMPOTENCY,
            actor=actor,
            key=key,
            method=method,
            path=path,
            request_hash=request_hash,
            status_code=0,
            response="",
            created_at=now,
        )
        return got == 1

    def store_answer(self, actor: str, key: str, status_code: int, response: str) -> None:
        """See :meth:`CoreQueries.store_answer`."""
        k = _IDEMPOTENCY.c
        self._exec(
            update(_IDEMPOTENCY)
            .where(k.actor == actor, k.key == key)
            .values(status_code=status_code, response=response)
        )

    def purge_idempotency_keys(self, before: float) -> int:
        """See :meth:`CoreQueries.purge_idempotency_keys`."""
        got = self._exec(delete(_IDEMPOTENCY).where(_IDEMPOTENCY.c.created_at < before))
        return int(getattr(got, "rowcount", 0) or 0)

    def bump_version(self) -> int:
        """See :meth:`CoreQueries.bump_version`."""
        v = _VERSION.c
        got = self._exec(
            update(_VERSION).where(v.id == 1).values(version=v.version + 1).returning(v.version)
        ).scalar_one()
        return int(got)

    def version(self) -> int:
        """See :meth:`CoreQueries.version`."""
        v = _VERSION.c
        return int(self._exec(select(v.version).where(v.id == 1)).scalar_one())

    def devices_version(self) -> int:
        """See :meth:`CoreQueries.devices_version`."""
        v = _VERSION.c
        got = self._exec(select(v.version).where(v.id == DEVICES_VERSION)).scalar_one_or_none()
        return int(got or 0)
