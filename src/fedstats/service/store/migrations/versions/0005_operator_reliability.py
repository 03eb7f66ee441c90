"""operator and reliability: fencing epochs, idempotency keys, device revocation, excluded reports

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fedstats.service.store.migrations.ops import add_columns, drop_columns

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    # the fencing token: incremented by every claim of the run's lease
    add_columns(
        "runs", sa.Column("lease_epoch", sa.BigInteger(), nullable=False, server_default="0")
    )
    add_columns("clients", sa.Column("revoked_at", sa.Float(), nullable=True))
    # why a stored report was left out of its round's sum (None: included)
    add_columns("reports", sa.Column("excluded", sa.Text(), nullable=True))
    op.create_table(
        "idempotency_keys",
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("key", sa.String(256), nullable=False),
        sa.Column("method", sa.String(8), nullable=False),
        sa.Column("path", sa.String(256), nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("response", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("actor", "key", name="pk_idempotency_keys"),
    )


def downgrade() -> None:
    """Revert."""
    op.drop_table("idempotency_keys")
    drop_columns("reports", "excluded")
    drop_columns("clients", "revoked_at")
    drop_columns("runs", "lease_epoch")
