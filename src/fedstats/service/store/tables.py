"""The service's persistent state (SQLAlchemy 2 declarative models; schema managed by Alembic).

Tables
------
tasks
    Immutable tasks, keyed by the SHA-256 of their normalized canonical JSON
    (:mod:`fedstats.wire.encoding`); ``config`` holds the analyst's signed envelope
    ``{"task", "certificate", "signature"}`` as posted (:mod:`fedstats.wire.tasks`).
runs
    One execution of a task: status, cohort size once the check-in closed, the run's public seed (which,
    with the task and the cohort size, determines the plan of its rounds: replay derives the same rounds),
    the result. ``secret`` is no longer used (the plan is keyed by the public seed only).
run_members
    Devices checked in to a run and the contiguous slots (protocol client indices) their records hold.
rounds
    The journal: each round's public parameters as the generator yielded them, its deadline, and once
    closed the exact sum and the number of records in it, committed before the generator receives it.
reports
    One report per (run, round, device): the sum of its records' encoded reports and their count.
clients, authorities, nonces
    Enrolled device public keys (never private keys), trusted enrollment-authority public keys, and the
    nonces of signed requests seen inside the replay window.
operators
    Operator names and the SHA-256 of their bearer tokens.
secure_sessions, secure_messages
    Secure aggregation over the network: one row per session of a secure round (its members, stage,
    deadline and, once done, its sum), and the journal of every stage's messages in both directions
    (``down``: server to device, ``up``: device to server), from which a restarted server rebuilds the
    session by replay (:mod:`fedstats.service.domain.secure`).
state_version
    One row: a counter the run drivers of every server process increment after each state transition,
    so that a process whose devices long-poll learns of transitions made by another (:mod:`fedstats.service.domain.changes`).
refusals
    Why a device refused a run (a reason code and a short message naming the user's column or file), one
    row per (run, device): counted per run for the operator (:mod:`fedstats.service.domain.refusals`).
server_secrets
    Secrets the server generates once and keeps across restarts (the request-key secret, unless
    ``--request-key-secret`` gives one).
budgets, ledger, audit
    The privacy ledger: budgets per population and per analyst, one charge per run (reserved, then spent
    or released), and an append-only audit log.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from fedstats.service.store.vdaf import VDAF_METADATA

__all__ = [
    "Audit",
    "Authority",
    "Base",
    "Budget",
    "Client",
    "LedgerCharge",
    "Nonce",
    "Operator",
    "Refusal",
    "Report",
    "RoundRecord",
    "Run",
    "RunMember",
    "SecureMessage",
    "SecureSession",
    "SecureWithholder",
    "ServerSecret",
    "StateVersion",
    "Task",
    "table_named",
]


class Base(DeclarativeBase):
    """Declarative base of every service table."""


class Task(Base):
    """An immutable task configuration."""

    __tablename__ = "tasks"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    config: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)


class Run(Base):
    """One execution of a task."""

    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id"), index=True)
    analyst: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16), index=True)
    created_at: Mapped[float] = mapped_column(Float)
    checkin_deadline: Mapped[float] = mapped_column(Float)
    n_clients: Mapped[int | None] = mapped_column(Integer, nullable=True)
    secret: Mapped[str] = mapped_column(String(64))
    result: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # row lease: the server process currently advancing the run, and until when (scale-out)
    lease_owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the run's public seed (hex): a plain run's stated by the server at creation; a secure run's from the
    # members' commit-then-reveal at check-in
    public_seed: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # the fencing token: every claim of the lease increments it; a write checks it (migration 0005)
    lease_epoch: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # a tree-seeded secure run's cohort tree head (hex of TreeHead.to_bytes(), migration 0014)
    cohort_head: Mapped[str | None] = mapped_column(String(90), nullable=True)


class RunMember(Base):
    """A device in a run's cohort and its slots ``[slot_start, slot_start + slot_count)``."""

    __tablename__ = "run_members"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    client_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    slot_start: Mapped[int] = mapped_column(Integer)
    slot_count: Mapped[int] = mapped_column(Integer)
    joined_at: Mapped[float] = mapped_column(Float)
    # secure tasks: the commitment sent at check-in and the value revealed once check-in closed (hex)
    commitment: Mapped[str | None] = mapped_column(String(64), nullable=True)
    reveal: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # a tree run's committee member: its Ed25519 signature over its reveal (hex, migration 0014)
    reveal_signature: Mapped[str | None] = mapped_column(String(128), nullable=True)


class RoundRecord(Base):
    """A journaled round."""

    __tablename__ = "rounds"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    encode: Mapped[str] = mapped_column(String(256))
    params: Mapped[str] = mapped_column(Text)
    params_digest: Mapped[str] = mapped_column(String(64))
    dim: Mapped[int] = mapped_column(Integer)
    bound: Mapped[int] = mapped_column(BigInteger)
    lo: Mapped[int] = mapped_column(Integer)
    hi: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    opened_at: Mapped[float] = mapped_column(Float)
    deadline: Mapped[float] = mapped_column(Float)
    total: Mapped[str | None] = mapped_column(Text, nullable=True)
    n_clients: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Report(Base):
    """One device's report in one round (idempotent: the primary key refuses a second one)."""

    __tablename__ = "reports"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    round_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    client_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    vector: Mapped[str] = mapped_column(Text)
    count: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[float] = mapped_column(Float)
    # why the report was left out of its round's sum (None: included)
    excluded: Mapped[str | None] = mapped_column(Text, nullable=True)


class Refusal(Base):
    """A device's refusal of a run: its reason code and message (migration 0013)."""

    __tablename__ = "refusals"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    client_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    reason: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(String(512))
    refused_at: Mapped[float] = mapped_column(Float)


class ServerSecret(Base):
    """A secret the server generated once and keeps across restarts (migration 0013)."""

    __tablename__ = "server_secrets"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[float] = mapped_column(Float)


class SecureSession(Base):
    """One secure-aggregation session of a secure round (a cohort larger than a session is split)."""

    __tablename__ = "secure_sessions"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    round_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    members: Mapped[str] = mapped_column(Text)  # JSON list of client ids, in roster order
    params: Mapped[str] = mapped_column(Text)  # JSON of the session's SecAggParameters
    session: Mapped[str] = mapped_column(String(64))  # hex session id (from the run's public seed)
    stage: Mapped[int] = mapped_column(Integer)  # index into fedstats.wire.seeding.STAGES
    deadline: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # open, done, aborted
    total: Mapped[str | None] = mapped_column(Text, nullable=True)
    n_records: Mapped[int | None] = mapped_column(Integer, nullable=True)
    included: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON roster indices
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class SecureMessage(Base):
    """One journaled secure-aggregation message (``down``: server to device, ``up``: device to server)."""

    __tablename__ = "secure_messages"
    run_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    round_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    stage: Mapped[int] = mapped_column(Integer, primary_key=True)
    direction: Mapped[str] = mapped_column(String(4), primary_key=True)
    client_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    digest: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)


class SecureWithholder(Base):
    """A member of a secure run that committed at check-in and did not reveal before the deadline.

    Named in the run's transcript (the run continues without it, or aborts) and excluded from the later
    cohorts of the task (:func:`fedstats.service.domain.secure.close_seeding`).
    """

    __tablename__ = "secure_withholders"
    task_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    client_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    at: Mapped[float] = mapped_column(Float)


class Client(Base):
    """An enrolled device: its Ed25519 public key and population."""

    __tablename__ = "clients"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    public_key: Mapped[str] = mapped_column(String(64))
    population: Mapped[str] = mapped_column(String(128))
    authority: Mapped[str] = mapped_column(String(64))
    not_after: Mapped[float] = mapped_column(Float)
    enrolled_at: Mapped[float] = mapped_column(Float)
    # the enrollment certificate as registered (JSON): peers verify it in a secure session's roster
    certificate: Mapped[str | None] = mapped_column(Text, nullable=True)
    # revoked devices are refused at every signed request (None: active)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class Authority(Base):
    """A trusted enrollment authority (public key only)."""

    __tablename__ = "authorities"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    public_key: Mapped[str] = mapped_column(String(64))


class Nonce(Base):
    """A signed request's nonce, kept while its timestamp is inside the replay window."""

    __tablename__ = "nonces"
    client_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    ts: Mapped[float] = mapped_column(Float, index=True)


class StateVersion(Base):
    """The one-row counter of state transitions (:mod:`fedstats.service.domain.changes`)."""

    __tablename__ = "state_version"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=0)


class Operator(Base):
    """An operator (or analyst) and the SHA-256 of its bearer token."""

    __tablename__ = "operators"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)


class Budget(Base):
    """A privacy budget of a data population or of an analyst."""

    __tablename__ = "budgets"
    scope: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)


class LedgerCharge(Base):
    """One run's privacy charge: ``reserved`` at run creation, then ``spent`` or ``released``."""

    __tablename__ = "ledger"
    __table_args__ = (UniqueConstraint("run_id", name="uq_ledger_run"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36))
    population: Mapped[str] = mapped_column(String(128), index=True)
    analyst: Mapped[str] = mapped_column(String(128), index=True)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    rho: Mapped[float | None] = mapped_column(Float, nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    label: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    # JSON list of the release's MechanismSpec dicts (privacy-loss-distribution composition); NULL: none
    mechanisms: Mapped[str | None] = mapped_column(Text, nullable=True)


class IdempotencyKey(Base):
    """The first answer to an admin write sent with an ``Idempotency-Key`` (a retry gets it again)."""

    __tablename__ = "idempotency_keys"
    actor: Mapped[str] = mapped_column(String(128), primary_key=True)
    key: Mapped[str] = mapped_column(String(256), primary_key=True)
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(String(256))
    request_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int] = mapped_column(Integer)
    response: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


class Audit(Base):
    """Append-only audit log (reservations, releases, refusals, aborts)."""

    __tablename__ = "audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(32))
    run_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    detail: Mapped[str] = mapped_column(Text)


def table_named(name: str) -> Table:
    """The table ``name`` of the schema: a model's table above, or a Prio3 table (:data:`.vdaf.VDAF_METADATA`).

    Parameters
    ----------
    name : str
        A table's name (``"runs"``, ``"vdaf_reports"``...).

    Returns
    -------
    sqlalchemy.Table

    Raises
    ------
    KeyError
        If the schema has no table of that name.
    """
    tables = Base.metadata.tables
    return tables[name] if name in tables else VDAF_METADATA.tables[name]
