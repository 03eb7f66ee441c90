"""The SQL stores' row inserts (:class:`SqlRowWrites`): one prebuilt statement per table and dialect."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Table, insert, update
from sqlalchemy.dialects import postgresql, sqlite

from fedstats.service.store.tables import table_named
from fedstats.service.store.writes import RowWrites

__all__ = ["SqlRowWrites"]


# INSERT of every column the parameters name, by table name (built once: the compiled form is cached)
_INSERT: dict[str, Any] = {}

# INSERT ... ON CONFLICT DO NOTHING RETURNING the key, by (table name, dialect name)
_INSERT_IGNORE: dict[tuple[str, str], Any] = {}


def _insert(table: str) -> Any:
    stmt = _INSERT.get(table)
    if stmt is None:
        stmt = _INSERT[table] = insert(table_named(table))
    return stmt


def _insert_ignore(conn: Connection, table: Table, values: dict[str, Any]) -> int:
    """``INSERT ... ON CONFLICT DO NOTHING`` of one row of ``table``; the number of rows inserted (0 or 1)."""
    dialect = conn.dialect.name
    stmt = _INSERT_IGNORE.get((table.name, dialect))
    if stmt is None:
        ins = (postgresql if dialect == "postgresql" else sqlite).insert(table)
        # RETURNING rather than rowcount (which psycopg reports as -1 here); the values are bound
        # at execution (the columns given by the parameters' keys)
        stmt = ins.on_conflict_do_nothing().returning(*table.primary_key.columns)
        _INSERT_IGNORE[(table.name, dialect)] = stmt
    return len(conn.execute(stmt, values).all())


class SqlRowWrites(RowWrites):
    """:class:`~fedstats.service.store.writes.RowWrites` on the transaction's connection (``self.conn``)."""

    conn: Connection

    def _add_row(self, table: str, values: dict[str, Any], *, ignore: bool = False) -> bool:
        """See :meth:`RowWrites._add_row`."""
        if ignore:
            return _insert_ignore(self.conn, table_named(table), values) == 1
        self.conn.execute(_insert(table), values)
        return True

    def _add_rows(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """See :meth:`RowWrites._add_rows` (one ``executemany``)."""
        if rows:
            self.conn.execute(_insert(table), list(rows))

    def _set(self, table: str, key: Any, values: dict[str, Any]) -> bool:
        """See :meth:`RowWrites._set`."""
        t = table_named(table)
        keys = key if isinstance(key, tuple) else (key,)
        where = (c == k for c, k in zip(t.primary_key.columns, keys, strict=True))
        got = self.conn.execute(update(t).where(*where).values(**values))
        return int(getattr(got, "rowcount", 0) or 0) == 1
