"""secure aggregation over the network: run seeds, commitments, certificates, sessions and their journal

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fedstats.service.store.migrations.ops import add_columns, drop_columns

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    add_columns("runs", sa.Column("public_seed", sa.String(length=64), nullable=True))
    add_columns(
        "run_members",
        sa.Column("commitment", sa.String(length=64), nullable=True),
        sa.Column("reveal", sa.String(length=64), nullable=True),
    )
    add_columns("clients", sa.Column("certificate", sa.Text(), nullable=True))
    op.create_table(
        "secure_sessions",
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("round_index", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("members", sa.Text(), nullable=False),
        sa.Column("params", sa.Text(), nullable=False),
        sa.Column("session", sa.String(length=64), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("deadline", sa.Float(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("total", sa.Text(), nullable=True),
        sa.Column("n_records", sa.Integer(), nullable=True),
        sa.Column("included", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("run_id", "round_index", "number"),
    )
    op.create_table(
        "secure_messages",
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("round_index", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("direction", sa.String(length=4), nullable=False),
        sa.Column("client_index", sa.Integer(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint(
            "run_id", "round_index", "number", "stage", "direction", "client_index"
        ),
    )


def downgrade() -> None:
    """Revert."""
    op.drop_table("secure_messages")
    op.drop_table("secure_sessions")
    drop_columns("clients", "certificate")
    drop_columns("run_members", "reveal", "commitment")
    drop_columns("runs", "public_seed")
