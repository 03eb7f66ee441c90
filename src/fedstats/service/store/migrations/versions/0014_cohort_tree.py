"""Tree-seeded secure runs: the run's cohort tree head and the committee's reveal signatures

``runs.cohort_head``: hex of the run's :class:`fedstats.wire.cohort_tree.TreeHead` (45 bytes), set when a
secure run's check-in closes with more devices than the server's ``cohort_tree_above``; a run with it
seeds by its cohort tree's committee (``docs/deploy.md``, "Secure aggregation over the network"). ``run_members.
reveal_signature``: a committee member's Ed25519 signature over its reveal (hex, 64 bytes).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa

from fedstats.service.store.migrations.ops import add_columns, drop_columns

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply."""
    add_columns("runs", sa.Column("cohort_head", sa.String(length=90), nullable=True))
    add_columns("run_members", sa.Column("reveal_signature", sa.String(length=128), nullable=True))


def downgrade() -> None:
    """Revert."""
    drop_columns("run_members", "reveal_signature")
    drop_columns("runs", "cohort_head")
