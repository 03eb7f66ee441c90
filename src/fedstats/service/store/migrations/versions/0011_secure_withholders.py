"""secure runs: the members that committed and did not reveal (named, excluded from the task's later cohorts)

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    op.create_table(
        "secure_withholders",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("client_id", sa.String(length=128), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", "client_id", "run_id"),
    )


def downgrade() -> None:
    """Revert."""
    op.drop_table("secure_withholders")
