"""Ledger charges keep the mechanisms of a described release (privacy-loss-distribution composition)

A charge written before this revision has no mechanisms (NULL) and keeps composing as it did (basic
composition and zCDP).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa

from fedstats.service.store.migrations.ops import add_columns, drop_columns

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    add_columns("ledger", sa.Column("mechanisms", sa.Text(), nullable=True))


def downgrade() -> None:
    """Revert."""
    drop_columns("ledger", "mechanisms")
