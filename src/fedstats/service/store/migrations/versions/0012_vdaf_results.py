"""Prio3 (signed tasks): the collectors' released results, kept on the leader

A signed Prio3 task's status may now also be ``closed`` (after its last collection: devices no longer
join it or answer it); ``status`` is free text, so that needs no change of the schema.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    op.create_table(
        "vdaf_results",
        sa.Column("signed_id", sa.String(64), primary_key=True),
        sa.Column("result", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    """Revert."""
    op.drop_table("vdaf_results")
