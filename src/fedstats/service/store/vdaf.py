"""The two-aggregator (Prio3) mode's tables: tasks, reports, aggregation jobs (SQLAlchemy Core).

Each aggregator (leader or helper) keeps these tables in its own database; neither ever sees the other's.
They live on their own :class:`~sqlalchemy.MetaData` (:data:`VDAF_METADATA`) and are created by the Alembic
migrations ``0007_vdaf``, ``0008_vdaf_signed`` and ``0010_dap_tasks`` (the ``dap`` column of DAP tasks).

Tables
------
vdaf_tasks
    One Prio3 task on this aggregator: its role (``leader`` or ``helper``), the VDAF variant and its
    parameters (JSON), the application context ``ctx``, the ``verify_key`` shared by the two aggregators
    only, the peer's URL, the bearer token of aggregator-to-aggregator requests (the leader keeps the token
    it presents; the helper only its SHA-256), the population whose devices may upload, the minimum batch
    size and the DP noise (JSON), its status (``open``, then ``collected``), the running aggregate share
    (the draft's encoding) and the counts of accepted and rejected reports; ``collection`` holds the
    answer of the first collection (returned unchanged to a repeated one).
vdaf_reports
    One report's share as this aggregator received it from a signed device request: report id (the Prio3
    nonce, hex), the device, the public share and this aggregator's input share (the draft's encodings),
    the aggregation job that took it, and its fate (``pending``, ``accepted``, ``rejected``) with the
    reason of a rejection. One report per (task, device).
vdaf_jobs
    The aggregation jobs: their report ids (JSON) and status (``running``, ``done``); on the helper the
    answer it gave (JSON), so that a leader retrying a job gets the same answer and nothing is added twice.
    On the leader a job's **lease** (migration ``0008``): the leader process running it, until when, and
    the fencing token ``lease_epoch`` (incremented by every claim), so that two leader processes never run
    one job at once and a crashed leader's job is taken over once its lease expired.
vdaf_signed
    Prio3 tasks signed by an analyst (migration ``0008``): the task's id (the SHA-256 of the normalized
    task), this aggregator's role, the signed envelope as posted, and the operator's secrets of this
    aggregator (``verify_key``, peer URL and token, as for ``vdaf_tasks``), the population, the status
    (``open``, ``abandoned``), the id of its privacy charge on this aggregator's ledger, who created it.
    Each round of the task is a ``vdaf_tasks`` row with ``signed_id``, ``round_index`` and the
    ``announcement`` devices are shown (the round's public sums so far and its Prio3 variant).
vdaf_slots
    The leader's record slots of a signed task's devices (one per device, assigned in join order).

Queries
-------
:class:`VdafQueries` is the interface the domain layer (:mod:`fedstats.service.domain.vdaf`) calls through
a transaction (:meth:`fedstats.service.store.Store.transaction`); :class:`SqlVdafQueries` implements it with
SQLAlchemy Core statements on the transaction's connection (SQLite and PostgreSQL). Methods take and return
plain values and frozen dataclasses (:class:`VdafTaskRow`, :class:`VdafShareRow`).
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cache
from typing import Any, TypeVar, cast

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from fedstats.service.store.writes import RowWrites

__all__ = [
    "PEER_FIELDS",
    "VDAF_METADATA",
    "ReportCount",
    "VdafJob",
    "VdafQueries",
    "VdafShareRow",
    "VdafSignedRow",
    "VdafTaskRow",
    "pending_report",
    "row_of",
    "vdaf_jobs",
    "vdaf_reports",
    "vdaf_signed",
    "vdaf_slots",
    "vdaf_tasks",
]

VDAF_METADATA = MetaData()

_RowT = TypeVar("_RowT")


PEER_FIELDS = ("verify_key", "peer_url", "peer_token", "peer_token_hash", "population")
"""The columns a Prio3 task and a signed Prio3 task share (:func:`_peer_columns`)."""


def _fields_of(row: Any, names: Sequence[str]) -> dict[str, Any]:
    """``name -> row.name`` for each of ``names``, in that order."""
    return {k: getattr(row, k) for k in names}


def _peer_columns() -> list[Column[Any]]:
    """The columns a task and a signed task share: the VDAF verify key, the peer and its token, the population."""
    return [
        Column("verify_key", LargeBinary, nullable=False),
        Column("peer_url", Text, nullable=False),
        Column("peer_token", Text, nullable=True),
        Column("peer_token_hash", String(64), nullable=True),
        Column("population", String(128), nullable=False),
    ]


vdaf_tasks = Table(
    "vdaf_tasks",
    VDAF_METADATA,
    Column("id", String(64), primary_key=True),
    Column("role", String(8), nullable=False),
    Column("vdaf", Text, nullable=False),
    Column("ctx", LargeBinary, nullable=False),
    *_peer_columns(),
    Column("min_batch_size", Integer, nullable=False),
    Column("noise", Text, nullable=True),
    Column("status", String(16), nullable=False),
    Column("agg_share", LargeBinary, nullable=True),
    Column("accepted", BigInteger, nullable=False),
    Column("rejected", BigInteger, nullable=False),
    Column("collection", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("signed_id", String(64), nullable=True),
    Column("round_index", Integer, nullable=True),
    Column("announcement", Text, nullable=True),
    Column("dap", Text, nullable=True),
)

vdaf_signed = Table(
    "vdaf_signed",
    VDAF_METADATA,
    Column("id", String(64), primary_key=True),
    Column("role", String(8), nullable=False),
    Column("envelope", Text, nullable=False),
    *_peer_columns(),
    Column("status", String(16), nullable=False),
    Column("charge_id", String(36), nullable=True),
    Column("created_by", String(128), nullable=False),
    Column("created_at", Float, nullable=False),
)

vdaf_slots = Table(
    "vdaf_slots",
    VDAF_METADATA,
    Column("signed_id", String(64), nullable=False),
    Column("client_id", String(128), nullable=False),
    Column("slot", BigInteger, nullable=False),
    PrimaryKeyConstraint("signed_id", "client_id", name="pk_vdaf_slots"),
    UniqueConstraint("signed_id", "slot", name="uq_vdaf_slots_slot"),
)

vdaf_reports = Table(
    "vdaf_reports",
    VDAF_METADATA,
    Column("task_id", String(64), nullable=False),
    Column("report_id", String(32), nullable=False),
    Column("client_id", String(128), nullable=False),
    Column("public_share", LargeBinary, nullable=False),
    Column("input_share", LargeBinary, nullable=False),
    Column("received_at", Float, nullable=False),
    Column("job_id", String(64), nullable=True),
    Column("status", String(16), nullable=False),
    Column("reason", String(64), nullable=True),
    PrimaryKeyConstraint("task_id", "report_id", name="pk_vdaf_reports"),
    UniqueConstraint("task_id", "client_id", name="uq_vdaf_reports_client"),
    Index("ix_vdaf_reports_pending", "task_id", "status", "job_id"),
)

vdaf_jobs = Table(
    "vdaf_jobs",
    VDAF_METADATA,
    Column("task_id", String(64), nullable=False),
    Column("job_id", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("report_ids", Text, nullable=False),
    Column("response", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("lease_owner", String(64), nullable=True),
    Column("lease_until", Float, nullable=True),
    Column("lease_epoch", BigInteger, nullable=False, server_default="0"),
    PrimaryKeyConstraint("task_id", "job_id", name="pk_vdaf_jobs"),
)


# -- queries --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VdafTaskRow:
    """A Prio3 task on this aggregator (``vdaf_tasks`` row); see the module's table description.

    Attributes
    ----------
    id, role, vdaf, peer_url, population, status : str
        ``vdaf`` is the variant's JSON (sorted keys).
    ctx, verify_key : bytes
    peer_token, peer_token_hash : str or None
        The leader keeps the token, the helper its SHA-256 (hex).
    min_batch_size : int
    noise : str or None
        The noise's JSON.
    agg_share : bytes or None
        The running aggregate share (the draft's encoding); None before the first job.
    accepted, rejected : int
    collection : str or None
        The first collection's answer (JSON).
    created_at : float
    signed_id : str or None
        The signed task this row is a round of (None: a task created by the domain layer alone).
    round_index : int or None
    announcement : str or None
        What devices are shown of the round (JSON): index, round task id, variant, public sums so far.
    dap : str or None
        A DAP task's parameters and state (JSON; migration ``0010_dap_tasks``, :mod:`fedstats.service.domain.dap`);
        None for a task of the JSON routes.
    """

    id: str
    role: str
    vdaf: str
    ctx: bytes
    verify_key: bytes
    peer_url: str
    peer_token: str | None
    peer_token_hash: str | None
    population: str
    min_batch_size: int
    noise: str | None
    status: str = "open"
    agg_share: bytes | None = None
    accepted: int = 0
    rejected: int = 0
    collection: str | None = None
    created_at: float = 0.0
    signed_id: str | None = None
    round_index: int | None = None
    announcement: str | None = None
    dap: str | None = None

    def parameters(self) -> dict[str, Any]:
        """The columns an operator sets at creation (compared when a task is created again)."""
        own = ("min_batch_size", "noise", "signed_id", "round_index", "announcement")
        return _fields_of(self, ("id", "role", "vdaf", "ctx", *PEER_FIELDS, *own))


@dataclass(frozen=True)
class VdafSignedRow:
    """A signed Prio3 task on this aggregator (``vdaf_signed`` row); see the module's table description.

    Attributes
    ----------
    id, role, envelope, peer_url, population, status, created_by : str
    verify_key : bytes
    peer_token, peer_token_hash : str or None
    charge_id : str or None
        The id of its charge on this aggregator's ledger (None: a non-private task, charged nowhere).
    created_at : float
    """

    id: str
    role: str
    envelope: str
    verify_key: bytes
    peer_url: str
    peer_token: str | None
    peer_token_hash: str | None
    population: str
    status: str
    charge_id: str | None
    created_by: str
    created_at: float = 0.0

    def parameters(self) -> dict[str, Any]:
        """The columns the operator sets at creation (compared when it is created again)."""
        return _fields_of(self, ("id", "role", "envelope", *PEER_FIELDS))

    def peer(self) -> dict[str, Any]:
        """Its :data:`PEER_FIELDS` by name: what each round's task takes from it."""
        return _fields_of(self, PEER_FIELDS)


@dataclass(frozen=True)
class VdafShareRow:
    """One stored report share (``vdaf_reports`` row, without its fate).

    Attributes
    ----------
    report_id, client_id : str
    public_share, input_share : bytes
    job_id : str or None
        The aggregation job that took it (None: pending).
    """

    report_id: str
    client_id: str
    public_share: bytes
    input_share: bytes
    job_id: str | None


@dataclass(frozen=True)
class ReportCount:
    """How many of a task's reports have one fate: ``status`` and, if rejected, ``reason``."""

    status: str
    reason: str | None
    count: int


@dataclass(frozen=True)
class VdafJob:
    """An aggregation job: its reports in order, the helper's answer (JSON) once done, its lease.

    Attributes
    ----------
    job_id : str
    report_ids : list of str
    response : str or None
    status : str
        ``running`` or ``done``.
    lease_owner : str or None
        The leader process holding the job's lease.
    lease_epoch : int
        The lease's fencing token.
    """

    job_id: str
    report_ids: list[str]
    response: str | None
    status: str
    lease_owner: str | None
    lease_epoch: int


@cache
def _fields(cls: type) -> tuple[tuple[str, bool], ...]:
    """A row dataclass's field names, each with whether it holds bytes (``bytes`` or ``bytes | None``)."""
    return tuple((f.name, "bytes" in str(f.type)) for f in fields(cls))


def row_of(cls: Callable[..., _RowT], r: Mapping[Any, Any]) -> _RowT:
    """The row dataclass ``cls`` (:class:`VdafTaskRow`, :class:`VdafSignedRow`) of a stored row's columns.

    The memory and SQL stores read rows alike: each field from the column of its name, byte columns as
    :class:`bytes` (a driver may answer a memoryview).

    Parameters
    ----------
    cls : type
        :class:`VdafTaskRow` or :class:`VdafSignedRow`.
    r : Mapping
        The stored row's columns by name (a SQL row's ``_mapping`` or a memory row's ``__dict__``); every
        field of ``cls`` must be there.

    Returns
    -------
    VdafTaskRow or VdafSignedRow
        A new row; its byte fields are :class:`bytes` or None.

    Raises
    ------
    KeyError
        If a field of ``cls`` is not a column of ``r``.
    """
    return cls(
        **{
            name: r[name] if not binary or r[name] is None else bytes(r[name])
            for name, binary in _fields(cast(type, cls))
        }
    )


def pending_report(
    task_id: str, report_id: str, client_id: str, public_share: bytes, input_share: bytes
) -> dict[str, Any]:
    """The ``vdaf_reports`` columns of a report share no job took yet (all but ``received_at``).

    Parameters
    ----------
    task_id, report_id, client_id : str
        The Prio3 task, the report (its 16-byte id in hex) and the uploading device.
    public_share, input_share : bytes
        The report's public share and this aggregator's input share, as uploaded (any bytes-like).

    Returns
    -------
    dict
        Column name -> value: status ``"pending"``, no job and no reason.
    """
    return {
        "task_id": task_id,
        "report_id": report_id,
        "client_id": client_id,
        "public_share": bytes(public_share),
        "input_share": bytes(input_share),
        "job_id": None,
        "status": "pending",
        "reason": None,
    }


class VdafQueries(RowWrites):
    """The two-aggregator mode's queries (one aggregator's tables)."""

    @abstractmethod
    def vdaf_task(
        self, task_id: str, *, lock: bool = False, share: bool = False
    ) -> VdafTaskRow | None:
        """The task, or None.

        ``lock`` takes its row lock (``FOR UPDATE`` on PostgreSQL), ``share`` a shared one (``FOR SHARE``:
        many holders at once, none while another holds it for update; SQLite serializes writers anyway).
        """

    def add_vdaf_task(self, row: VdafTaskRow) -> None:
        """Insert a new task."""
        self._add_row("vdaf_tasks", dict(row.__dict__))

    def set_vdaf_totals(
        self, task_id: str, *, agg_share: bytes | None, accepted: int, rejected: int
    ) -> None:
        """Set the task's aggregate share and its counts of accepted and rejected reports."""
        values = {"agg_share": agg_share, "accepted": accepted, "rejected": rejected}
        self._set("vdaf_tasks", task_id, values)

    def set_vdaf_collected(self, task_id: str, collection: str) -> None:
        """Freeze the task (status ``collected``) with its collection's answer (JSON)."""
        self._set("vdaf_tasks", task_id, {"status": "collected", "collection": collection})

    def set_vdaf_dap(self, task_id: str, dap: str) -> None:
        """Set a DAP task's parameters and state (JSON; the caller holds the task's lock)."""
        self._set("vdaf_tasks", task_id, {"dap": dap})

    @abstractmethod
    def vdaf_report_counts(self, task_id: str) -> list[ReportCount]:
        """The task's reports counted by fate."""

    @abstractmethod
    def vdaf_report_of(self, task_id: str, report_id: str, client_id: str) -> VdafShareRow | None:
        """The task's report with this id or from this device (either; one at most by the rules), or None."""

    def add_vdaf_report(
        self,
        task_id: str,
        report_id: str,
        client_id: str,
        public_share: bytes,
        input_share: bytes,
        received_at: float,
    ) -> None:
        """Insert a pending report share."""
        values = pending_report(task_id, report_id, client_id, public_share, input_share)
        self._add_row("vdaf_reports", values | {"received_at": received_at})

    @abstractmethod
    def vdaf_reports_of_many(
        self, task_id: str, report_ids: Sequence[str], client_ids: Sequence[str]
    ) -> list[VdafShareRow]:
        """The task's reports whose id is among ``report_ids`` or whose device among ``client_ids``."""

    def add_vdaf_reports(
        self, task_id: str, reports: Sequence[tuple[str, str, bytes, bytes]], received_at: float
    ) -> None:
        """Insert pending report shares ``(report_id, client_id, public_share, input_share)`` at once."""
        rows = [
            pending_report(task_id, rid, cid, public, share) | {"received_at": received_at}
            for rid, cid, public, share in reports
        ]
        self._add_rows("vdaf_reports", rows)

    @abstractmethod
    def vdaf_shares(self, task_id: str, report_ids: Sequence[str]) -> dict[str, VdafShareRow]:
        """The stored shares among ``report_ids``, by report id (missing ids are absent)."""

    @abstractmethod
    def vdaf_pending(self, task_id: str, limit: int) -> list[str]:
        """Up to ``limit`` ids of reports no job took yet, oldest first."""

    @abstractmethod
    def take_vdaf_reports(self, task_id: str, report_ids: Sequence[str], job_id: str) -> int:
        """Assign the reports no job took yet among ``report_ids`` to ``job_id``; how many."""

    @abstractmethod
    def set_vdaf_fates(
        self, task_id: str, report_ids: Sequence[str], job_id: str, reason: str | None
    ) -> None:
        """Record the reports' fate: accepted (``reason`` None) or rejected with ``reason``."""

    @abstractmethod
    def vdaf_claimable_job(self, task_id: str, now: float) -> VdafJob | None:
        """The oldest unfinished job whose lease is free or expired at ``now``, or None."""

    @abstractmethod
    def lease_vdaf_job(
        self, task_id: str, job_id: str, *, owner: str | None, until: float | None, epoch: int
    ) -> None:
        """Set a job's lease (owner, expiry, fencing epoch); owner None frees it."""

    @abstractmethod
    def vdaf_job(self, task_id: str, job_id: str) -> VdafJob | None:
        """A job (its reports, answer, status and lease), or None if there is no such job."""

    @abstractmethod
    def vdaf_signed(self, signed_id: str, *, lock: bool = False) -> VdafSignedRow | None:
        """The signed task, or None; ``lock`` takes its row lock."""

    def add_vdaf_signed(self, row: VdafSignedRow) -> None:
        """Insert a signed task."""
        self._add_row("vdaf_signed", dict(row.__dict__))

    def set_vdaf_signed_status(self, signed_id: str, status: str) -> None:
        """Set a signed task's status (``open``, ``abandoned``)."""
        self._set("vdaf_signed", signed_id, {"status": status})

    @abstractmethod
    def vdaf_rounds_of(self, signed_id: str) -> list[VdafTaskRow]:
        """The round tasks of a signed task, by round index."""

    @abstractmethod
    def vdaf_slot(self, signed_id: str, client_id: str) -> int | None:
        """The device's slot in the signed task, or None."""

    @abstractmethod
    def add_vdaf_slot(self, signed_id: str, client_id: str) -> int:
        """Give the device the next free slot (0, 1, ...; the caller holds the signed task's lock)."""

    def add_vdaf_job(
        self,
        task_id: str,
        job_id: str,
        report_ids: Sequence[str],
        created_at: float,
        *,
        lease_owner: str | None = None,
        lease_until: float | None = None,
    ) -> None:
        """Insert a running job (with its first lease, epoch 1, when an owner is given)."""
        values = {
            "task_id": task_id,
            "job_id": job_id,
            "status": "running",
            "report_ids": json.dumps(list(report_ids)),
            "response": None,
            "created_at": created_at,
            "lease_owner": lease_owner,
            "lease_until": lease_until,
            "lease_epoch": 1 if lease_owner is not None else 0,
        }
        self._add_row("vdaf_jobs", values)

    @abstractmethod
    def finish_vdaf_job(self, task_id: str, job_id: str, response: str | None) -> bool:
        """Mark a running job done (with the helper's answer, JSON); False if it was not running."""

    @abstractmethod
    def count_vdaf_jobs(self, task_id: str, status: str) -> int:
        """How many of the task's jobs have ``status`` (``running`` or ``done``)."""
