"""two-aggregator mode (Prio3): vdaf_tasks, vdaf_reports, vdaf_jobs

Revision ID: 0007
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    op.create_table(
        "vdaf_tasks",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("role", sa.String(8), nullable=False),
        sa.Column("vdaf", sa.Text(), nullable=False),
        sa.Column("ctx", sa.LargeBinary(), nullable=False),
        sa.Column("verify_key", sa.LargeBinary(), nullable=False),
        sa.Column("peer_url", sa.Text(), nullable=False),
        sa.Column("peer_token", sa.Text(), nullable=True),
        sa.Column("peer_token_hash", sa.String(64), nullable=True),
        sa.Column("population", sa.String(128), nullable=False),
        sa.Column("min_batch_size", sa.Integer(), nullable=False),
        sa.Column("noise", sa.Text(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("agg_share", sa.LargeBinary(), nullable=True),
        sa.Column("accepted", sa.BigInteger(), nullable=False),
        sa.Column("rejected", sa.BigInteger(), nullable=False),
        sa.Column("collection", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "vdaf_reports",
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("report_id", sa.String(32), nullable=False),
        sa.Column("client_id", sa.String(128), nullable=False),
        sa.Column("public_share", sa.LargeBinary(), nullable=False),
        sa.Column("input_share", sa.LargeBinary(), nullable=False),
        sa.Column("received_at", sa.Float(), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("task_id", "report_id", name="pk_vdaf_reports"),
        sa.UniqueConstraint("task_id", "client_id", name="uq_vdaf_reports_client"),
    )
    op.create_index("ix_vdaf_reports_pending", "vdaf_reports", ["task_id", "status", "job_id"])
    op.create_table(
        "vdaf_jobs",
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("report_ids", sa.Text(), nullable=False),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", "job_id", name="pk_vdaf_jobs"),
    )


def downgrade() -> None:
    """Revert."""
    op.drop_table("vdaf_jobs")
    op.drop_index("ix_vdaf_reports_pending", table_name="vdaf_reports")
    op.drop_table("vdaf_reports")
    op.drop_table("vdaf_tasks")
