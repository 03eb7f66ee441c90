"""Devices' refusals of runs (reason code and message), and the server's own secrets

``refusals``: one row per (run, device) that refused it, with a reason code and a message naming the
user's column or file (issue 42, item 4). ``server_secrets``: secrets the server generates once and keeps
across restarts (the request-key secret, unless ``--request-key-secret`` gives one).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    op.create_table(
        "refusals",
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("client_id", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("message", sa.String(length=512), nullable=False),
        sa.Column("refused_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("run_id", "client_id"),
    )
    op.create_table(
        "server_secrets",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    """Revert."""
    op.drop_table("server_secrets")
    op.drop_table("refusals")
