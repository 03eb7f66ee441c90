"""DAP tasks: a Prio3 task's DAP-09 parameters and state (JSON) on ``vdaf_tasks``

A task of the JSON routes keeps NULL. Branch h39dap; the lead renumbers the chain at merge.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    with op.batch_alter_table("vdaf_tasks") as batch:
        batch.add_column(sa.Column("dap", sa.Text(), nullable=True))


def downgrade() -> None:
    """Revert."""
    with op.batch_alter_table("vdaf_tasks") as batch:
        batch.drop_column("dap")
