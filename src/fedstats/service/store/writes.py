"""The one row-insert primitive of the state, through which the query groups' shared writes go.

The memory and SQL stores build the same rows for the same writes (a run member, a report, a stage
message, a job...). Those writes are written once, on the query group interfaces
(:class:`~fedstats.service.store.core.CoreQueries` and the others): each builds the row's columns and
hands them to :meth:`RowWrites._add_row`, which each store implements once
(:class:`~fedstats.service.store.memory_tables.MemoryTables`,
:class:`~fedstats.service.store.sql_writes.SqlRowWrites`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

__all__ = ["RowWrites"]


class RowWrites(ABC):
    """Insert one row of a table, by table name and column values."""

    @abstractmethod
    def _add_row(self, table: str, values: dict[str, Any], *, ignore: bool = False) -> bool:
        """Insert one row of ``table`` (columns by name; those not given take their defaults).

        A duplicate primary key or unique value raises :class:`sqlalchemy.exc.IntegrityError`, or with
        ``ignore`` writes nothing and answers False (``INSERT ... ON CONFLICT DO NOTHING``); a missing
        parent row raises :class:`~sqlalchemy.exc.IntegrityError` in either case. True when inserted.
        """

    @abstractmethod
    def _set(self, table: str, key: Any, values: dict[str, Any]) -> bool:
        """``UPDATE table SET values WHERE <primary key> = key``; False if there is no such row.

        ``key``: the primary key's value, or the tuple of its columns' values in the table's order.
        """

    def _add_rows(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """Insert rows of ``table`` as :meth:`_add_row` does (the SQL stores: one ``executemany``)."""
        for values in rows:
            self._add_row(table, values)
