"""run leases: the server process advancing a run, and until when

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lease_owner", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("lease_until", sa.Float(), nullable=True))


def downgrade() -> None:
    """Revert."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("lease_until")
        batch_op.drop_column("lease_owner")
