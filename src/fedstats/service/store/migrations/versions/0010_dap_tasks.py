"""DAP tasks: a Prio3 task's DAP-09 parameters and state (JSON) on ``vdaf_tasks``

A task of the JSON routes keeps NULL. Branch h39dap; the lead renumbers the chain at merge.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa

from fedstats.service.store.migrations.ops import add_columns, drop_columns

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    add_columns("vdaf_tasks", sa.Column("dap", sa.Text(), nullable=True))


def downgrade() -> None:
    """Revert."""
    drop_columns("vdaf_tasks", "dap")
