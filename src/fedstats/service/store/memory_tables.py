"""The memory store's tables: one dict per table keyed by its primary key, rows, and the undo log.

:class:`MemoryTables` is the base of the memory query groups: row access through which every write
records the row's previous state in the transaction's undo log, and the integrity errors the databases
raise (a duplicate key, a missing parent row).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import UniqueConstraint
from sqlalchemy.exc import IntegrityError

from fedstats.service.store.rows import RunRow
from fedstats.service.store.tables import table_named
from fedstats.service.store.vdaf_results import vdaf_results
from fedstats.service.store.writes import RowWrites

__all__ = ["MemoryTables", "Row"]

_LIVE = ("checkin", "seeding", "running")
_RUN_FIELDS = tuple(f.name for f in fields(RunRow))
_ABSENT = object()


class Row:
    """A stored row: one attribute per column of its table (mutable, like an ORM object)."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:  # only for names that are not columns
        raise AttributeError(f"no column {name!r}")

    def __repr__(self) -> str:
        return f"Row({self.__dict__!r})"


def _columns(table: str) -> dict[str, Any]:
    """Column name -> its Python-side scalar default (None if none) of a table (:mod:`.tables`, Prio3's)."""
    out: dict[str, Any] = {}
    for col in table_named(table).columns:
        default = col.default
        arg = getattr(default, "arg", None) if default is not None else None
        out[col.name] = arg if isinstance(arg, (int, float, str)) else None
    return out


_COLUMNS = {
    name: _columns(name)
    for name in (
        "clients",
        "authorities",
        "nonces",
        "operators",
        "tasks",
        "runs",
        "run_members",
        "rounds",
        "reports",
        "budgets",
        "ledger",
        "idempotency_keys",
        "audit",
        "refusals",
        "server_secrets",
        "secure_sessions",
        "secure_messages",
        "secure_withholders",
        "vdaf_tasks",
        "vdaf_signed",
        "vdaf_slots",
        "vdaf_reports",
        "vdaf_jobs",
        vdaf_results.name,
    )
}


@dataclass(frozen=True)
class _Keys:
    """What :meth:`MemoryTables._add_row` checks of a table: its primary key, parents and unique columns."""

    primary: tuple[str, ...]
    parents: tuple[tuple[str, str], ...]  # (column, parent table) of each foreign key
    unique: tuple[tuple[str, ...], ...]


def _keys(table: str) -> _Keys:
    t = table_named(table)
    # _add_row looks a parent up by its one-column primary key, and a NULL key has none
    for fk in t.foreign_keys:
        if fk.parent.nullable or not fk.column.primary_key or len(fk.column.table.primary_key) != 1:
            raise TypeError(
                f"{table}.{fk.parent.name}: the memory state checks only NOT NULL foreign keys to a "
                "one-column primary key"
            )
    return _Keys(
        tuple(c.name for c in t.primary_key.columns),
        tuple((fk.parent.name, fk.column.table.name) for fk in t.foreign_keys),
        tuple(
            tuple(c.name for c in u.columns)
            for u in t.constraints
            if isinstance(u, UniqueConstraint)
        ),
    )


_KEYS = {name: _keys(name) for name in _COLUMNS}


def _duplicate(table: str, key: Any) -> IntegrityError:
    msg = f"UNIQUE constraint failed: {table} {key!r}"
    return IntegrityError(msg, None, Exception(msg))


def _missing_parent(table: str, key: Any) -> IntegrityError:
    msg = f"FOREIGN KEY constraint failed: {table} {key!r}"
    return IntegrityError(msg, None, Exception(msg))


class _Data:
    """The tables: one dict per table keyed by its primary key, and the autoincrement counters."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[Any, Row]] = {name: {} for name in _COLUMNS}
        self.counters = {"ledger": 0, "audit": 0}
        self.version = 0
        self.devices_version = 0


class MemoryTables(RowWrites):
    """Row access on in-memory tables (``self.data``) with an undo log (``self._undo``).

    Every write goes through :meth:`_insert`, :meth:`_set` or :meth:`_touch`, which record the row's
    previous state in the transaction's undo log.
    """

    data: _Data
    _undo: dict[tuple[str, Any], Any]

    # -- row access and the undo log
    def _t(self, table: str) -> dict[Any, Row]:
        return self.data.tables[table]

    def _save(self, table: str, key: Any) -> None:
        if (table, key) not in self._undo:
            row = self.data.tables[table].get(key)
            self._undo[(table, key)] = _ABSENT if row is None else copy.copy(row)

    def _touch(self, table: str, key: Any) -> Row | None:
        """The stored row (to change it in place), its old state saved for a rollback; or None."""
        row = self.data.tables[table].get(key)
        if row is not None:
            self._save(table, key)
        return row

    def _insert(
        self, table: str, key: Any, values: dict[str, Any], *, ignore: bool = False
    ) -> bool:
        """Insert a row; on an existing key False with ``ignore`` (``ON CONFLICT DO NOTHING``), else raise."""
        rows = self.data.tables[table]
        if key in rows:
            if ignore:
                return False
            raise _duplicate(table, key)
        cols = _COLUMNS[table]
        unknown = set(values) - set(cols)
        if unknown:
            raise TypeError(f"unknown column(s) of {table}: {sorted(unknown)}")
        self._save(table, key)
        rows[key] = Row(**(cols | values))
        return True

    def _add_row(self, table: str, values: dict[str, Any], *, ignore: bool = False) -> bool:
        """See :meth:`~fedstats.service.store.writes.RowWrites._add_row`.

        The row is keyed by its primary key's values (an autoincrement key, not given, by the table's
        counter); its foreign keys and unique columns are checked as the databases check them.
        """
        keys = _KEYS[table]
        for col, parent in keys.parents:
            if values.get(col) not in self.data.tables[parent]:
                raise _missing_parent(f"{table}.{col}", values.get(col))
        rows = self.data.tables[table]
        for cols in keys.unique:
            want = tuple(values.get(c) for c in cols)
            if None not in want and any(
                tuple(getattr(r, c) for c in cols) == want for r in rows.values()
            ):
                if ignore:
                    return False
                raise _duplicate(f"{table} {cols}", want)
        if table in self.data.counters and keys.primary[0] not in values:  # autoincrement
            values = {keys.primary[0]: self._next_id(table), **values}
        key = tuple(values[c] for c in keys.primary)
        return self._insert(table, key[0] if len(key) == 1 else key, values, ignore=ignore)

    def _set(self, table: str, key: Any, values: dict[str, Any]) -> bool:
        """``UPDATE ... WHERE <primary key>``; False if there is no such row.

        The unique columns the update changes are checked as :meth:`_add_row` checks them.
        """
        unknown = set(values) - set(_COLUMNS[table])
        if unknown:
            raise TypeError(f"unknown column(s) of {table}: {sorted(unknown)}")
        rows = self.data.tables[table]
        current = rows.get(key)
        if current is None:
            return False
        for cols in _KEYS[table].unique:
            if not values.keys() & set(cols):
                continue
            want = tuple(values.get(c, getattr(current, c)) for c in cols)
            if None not in want and any(
                r is not current and tuple(getattr(r, c) for c in cols) == want
                for r in rows.values()
            ):
                raise _duplicate(f"{table} {cols}", want)
        row = self._touch(table, key)
        assert row is current
        row.__dict__.update(values)
        return True

    def _next_id(self, counter: str) -> int:
        self.data.counters[counter] += 1
        return self.data.counters[counter]

    @staticmethod
    def _page(rows: list[Any], limit: int, offset: int) -> tuple[list[Any], int]:
        # LIMIT/OFFSET as SQL: a negative limit or offset is not a SQL page either; keep Python's slice
        return rows[offset : offset + limit], len(rows)
