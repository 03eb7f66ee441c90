"""Schema changes the revisions (:mod:`.versions`) share: columns added to a table, or dropped from it.

Each is one batch operation on the table (SQLite copies the table, PostgreSQL alters it in place), as the
``with op.batch_alter_table(...)`` blocks the revisions wrote before. A revision must build the same
schema forever: change neither function's behaviour; add another one if a revision needs more.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

__all__ = ["add_columns", "drop_columns"]


def add_columns(table: str, *columns: sa.Column[Any]) -> None:
    """Add ``columns`` to ``table``, in this order (one batch operation).

    Parameters
    ----------
    table : str
        The table's name.
    *columns : sqlalchemy.Column
        The new columns, as the revision declares them (name, type, nullability, default).
    """
    with op.batch_alter_table(table) as batch:
        for column in columns:
            batch.add_column(column)


def drop_columns(table: str, *names: str) -> None:
    """Drop the columns ``names`` of ``table``, in this order (one batch operation).

    Parameters
    ----------
    table : str
        The table's name.
    *names : str
        The columns to drop; each must exist.
    """
    with op.batch_alter_table(table) as batch:
        for name in names:
            batch.drop_column(name)
