"""Prio3 tasks signed by analysts, device slots, per-round tasks, and leases on aggregation jobs

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

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
    with op.batch_alter_table("vdaf_tasks") as batch:
        # a round of a signed task: the signed task, the round's index and what was announced
        batch.add_column(sa.Column("signed_id", sa.String(64), nullable=True))
        batch.add_column(sa.Column("round_index", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("announcement", sa.Text(), nullable=True))
    with op.batch_alter_table("vdaf_jobs") as batch:
        # the job's lease: which leader process runs it, until when, and its fencing token
        batch.add_column(sa.Column("lease_owner", sa.String(64), nullable=True))
        batch.add_column(sa.Column("lease_until", sa.Float(), nullable=True))
        batch.add_column(
            sa.Column("lease_epoch", sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    """Revert."""
    with op.batch_alter_table("vdaf_jobs") as batch:
        batch.drop_column("lease_epoch")
        batch.drop_column("lease_until")
        batch.drop_column("lease_owner")
    with op.batch_alter_table("vdaf_tasks") as batch:
        batch.drop_column("announcement")
        batch.drop_column("round_index")
        batch.drop_column("signed_id")
    op.drop_table("vdaf_slots")
    op.drop_table("vdaf_signed")
