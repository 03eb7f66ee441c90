"""operator and reliability: fencing epochs, idempotency keys, device revocation, excluded reports

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    with op.batch_alter_table("runs") as batch:
        # the fencing token: incremented by every claim of the run's lease
        batch.add_column(
            sa.Column("lease_epoch", sa.BigInteger(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("clients") as batch:
        batch.add_column(sa.Column("revoked_at", sa.Float(), nullable=True))
    with op.batch_alter_table("reports") as batch:
        # why a stored report was left out of its round's sum (None: included)
        batch.add_column(sa.Column("excluded", sa.Text(), nullable=True))
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
    with op.batch_alter_table("reports") as batch:
        batch.drop_column("excluded")
    with op.batch_alter_table("clients") as batch:
        batch.drop_column("revoked_at")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("lease_epoch")
