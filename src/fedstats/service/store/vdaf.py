"""The two-aggregator (Prio3) mode's tables: tasks, reports, aggregation jobs (SQLAlchemy Core).

Each aggregator (leader or helper) keeps these tables in its own database; neither ever sees the other's.
They live on their own :class:`~sqlalchemy.MetaData` (:data:`VDAF_METADATA`) and are created by the Alembic
migration ``0007_vdaf``.

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
"""

from __future__ import annotations

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

__all__ = ["VDAF_METADATA", "vdaf_jobs", "vdaf_reports", "vdaf_tasks"]

VDAF_METADATA = MetaData()

vdaf_tasks = Table(
    "vdaf_tasks",
    VDAF_METADATA,
    Column("id", String(64), primary_key=True),
    Column("role", String(8), nullable=False),
    Column("vdaf", Text, nullable=False),
    Column("ctx", LargeBinary, nullable=False),
    Column("verify_key", LargeBinary, nullable=False),
    Column("peer_url", Text, nullable=False),
    Column("peer_token", Text, nullable=True),
    Column("peer_token_hash", String(64), nullable=True),
    Column("population", String(128), nullable=False),
    Column("min_batch_size", Integer, nullable=False),
    Column("noise", Text, nullable=True),
    Column("status", String(16), nullable=False),
    Column("agg_share", LargeBinary, nullable=True),
    Column("accepted", BigInteger, nullable=False),
    Column("rejected", BigInteger, nullable=False),
    Column("collection", Text, nullable=True),
    Column("created_at", Float, nullable=False),
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
    PrimaryKeyConstraint("task_id", "job_id", name="pk_vdaf_jobs"),
)
