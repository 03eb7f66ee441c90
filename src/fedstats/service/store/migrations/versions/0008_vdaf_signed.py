"""Prio3 tasks signed by analysts, device slots, per-round tasks, and leases on aggregation jobs

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fedstats.service.store.migrations.ops import add_columns, drop_columns

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    op.create_table(
        "vdaf_signed",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("role", sa.String(8), nullable=False),
        sa.Column("envelope", sa.Text(), nullable=False),
        sa.Column("verify_key", sa.LargeBinary(), nullable=False),
        sa.Column("peer_url", sa.Text(), nullable=False),
        sa.Column("peer_token", sa.Text(), nullable=True),
        sa.Column("peer_token_hash", sa.String(64), nullable=True),
        sa.Column("population", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("charge_id", sa.String(36), nullable=True),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "vdaf_slots",
        sa.Column("signed_id", sa.String(64), nullable=False),
        sa.Column("client_id", sa.String(128), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("signed_id", "client_id", name="pk_vdaf_slots"),
        sa.UniqueConstraint("signed_id", "slot", name="uq_vdaf_slots_slot"),
    )
    # a round of a signed task: the signed task, the round's index and what was announced
    add_columns(
        "vdaf_tasks",
        sa.Column("signed_id", sa.String(64), nullable=True),
        sa.Column("round_index", sa.Integer(), nullable=True),
        sa.Column("announcement", sa.Text(), nullable=True),
    )
    # the job's lease: which leader process runs it, until when, and its fencing token
    add_columns(
        "vdaf_jobs",
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.Float(), nullable=True),
        sa.Column("lease_epoch", sa.BigInteger(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    """Revert."""
    drop_columns("vdaf_jobs", "lease_epoch", "lease_until", "lease_owner")
    drop_columns("vdaf_tasks", "announcement", "round_index", "signed_id")
    op.drop_table("vdaf_slots")
    op.drop_table("vdaf_signed")
