"""Ledger charges keep the mechanisms of a described release (privacy-loss-distribution composition)

A charge written before this revision has no mechanisms (NULL) and keeps composing as it did (basic
composition and zCDP).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    with op.batch_alter_table("ledger") as batch:
        batch.add_column(sa.Column("mechanisms", sa.Text(), nullable=True))


def downgrade() -> None:
    """Revert."""
    with op.batch_alter_table("ledger") as batch:
        batch.drop_column("mechanisms")
