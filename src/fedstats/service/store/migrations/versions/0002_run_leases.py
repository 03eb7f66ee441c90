"""run leases: the server process advancing a run, and until when

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa

from fedstats.service.store.migrations.ops import add_columns, drop_columns

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    add_columns(
        "runs",
        sa.Column("lease_owner", sa.String(length=64), nullable=True),
        sa.Column("lease_until", sa.Float(), nullable=True),
    )


def downgrade() -> None:
    """Revert."""
    drop_columns("runs", "lease_until", "lease_owner")
