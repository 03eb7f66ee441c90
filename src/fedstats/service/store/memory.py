"""The in-memory store: every query group of the state on Python containers, for fast domain tests.

:class:`MemoryStore` has the surface of :class:`~fedstats.service.store.Store` that the domain layer uses
(:meth:`MemoryStore.transaction`, :meth:`MemoryStore.writable`, :meth:`MemoryStore.close`, ``url``,
``is_sqlite``); :class:`MemoryTx`, the object a transaction yields, implements every query of the three
groups with one dict per table, keyed like the table's primary key, with the semantics of the SQL
stores: the core group (:class:`~fedstats.service.store.memory_core.MemoryCoreQueries`, as
:class:`~fedstats.service.store.sql.SqlCoreQueries`), the secure group
(:class:`~fedstats.service.store.memory_secure.MemorySecureQueries`) and the Prio3 group
(:class:`~fedstats.service.store.memory_vdaf.MemoryVdafQueries`). ``ON CONFLICT DO NOTHING`` inserts
answer False, a plain insert of an existing key or of a row whose foreign key is missing raises
:class:`sqlalchemy.exc.IntegrityError` as the databases do, with the same orderings, pages and counts
(``tests/test_service_state.py`` runs one parity class on memory, SQLite and PostgreSQL).

Transactions are serialized by one lock (as ``BEGIN IMMEDIATE`` serializes SQLite's writers) and roll back
on an exception through an undo log: the first change of a row in a transaction saves the row as it was
(or that it was absent). Reads return frozen dataclasses built from the stored rows, never the rows.
``open_store("memory://")`` returns a fresh, empty :class:`MemoryStore`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fedstats.service.store.memory_core import MemoryCoreQueries
from fedstats.service.store.memory_secure import MemorySecureQueries
from fedstats.service.store.memory_tables import _ABSENT, Row, _Data
from fedstats.service.store.memory_vdaf import MemoryVdafQueries
from fedstats.service.store.state import State

__all__ = ["MemoryCoreQueries", "MemoryStore", "MemoryTx", "Row"]


class MemoryTx(MemoryCoreQueries, MemorySecureQueries, MemoryVdafQueries, State):
    """One transaction of a :class:`MemoryStore`: the core, secure and Prio3 query groups on its tables.

    Parameters
    ----------
    data : _Data
        The store's tables.
    read_only : bool
        Whether the transaction may write (a write in a read-only one raises :class:`RuntimeError`).
    """

    def __init__(self, data: _Data, *, read_only: bool = False) -> None:
        self.data = data
        self._undo = {}
        self.read_only = read_only
        self._start = (dict(data.counters), data.version)

    def _rollback(self) -> None:
        for (table, key), old in self._undo.items():
            rows = self.data.tables[table]
            if old is _ABSENT:
                rows.pop(key, None)
            else:
                rows[key] = old
        self.data.counters, self.data.version = self._start
        self._undo = {}

    def _wrote(self) -> bool:
        if self.data.version != self._start[1]:
            return True
        for (table, key), old in self._undo.items():
            row = self.data.tables[table].get(key)
            if old is _ABSENT or row is None or row.__dict__ != old.__dict__:
                return True
        return False

    def _commit(self) -> None:
        if self.read_only and self._wrote():
            self._rollback()
            raise RuntimeError("a read-only transaction wrote")
        self._undo = {}


class MemoryStore:
    """A store on Python containers: the surface of :class:`~fedstats.service.store.Store` the domain uses.

    Parameters
    ----------
    url : str
        Its name (default ``"memory://"``).
    """

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self.is_sqlite = False
        self.data = _Data()
        self._lock = threading.Lock()
        self._owner: int | None = None

    @contextmanager
    def transaction(
        self,
        *,
        read_only: bool = False,
        snapshot: bool = True,  # noqa: ARG002 (one snapshot always)
        idle_seconds: float | None = None,  # noqa: ARG002 (no idle timeout to raise)
    ) -> Iterator[MemoryTx]:
        """One transaction: yields a :class:`MemoryTx`; commits at the end, rolls back on an exception.

        Transactions are serialized (one at a time in the process, as ``BEGIN IMMEDIATE`` on SQLite).

        Parameters
        ----------
        read_only : bool
            The transaction only reads (default False); a write in it raises :class:`RuntimeError` at
            its end.
        snapshot : bool
            Accepted as by :meth:`fedstats.service.store.Store.transaction` (a memory transaction is
            always one snapshot).
        idle_seconds : float, optional
            Accepted as by :meth:`fedstats.service.store.Store.transaction` (a memory transaction has
            no idle timeout).

        Raises
        ------
        RuntimeError
            If the calling thread already has a transaction open on this store (it would wait on itself).
        """
        me = threading.get_ident()
        if self._owner == me:
            raise RuntimeError("a transaction of this memory store is already open in this thread")
        with self._lock:
            self._owner = me
            tx = MemoryTx(self.data, read_only=read_only)
            try:
                yield tx
            except BaseException:
                tx._rollback()
                raise
            else:
                tx._commit()
            finally:
                self._owner = None

    def writable(self) -> str | None:
        """Always None: memory is writable."""
        return None

    def close(self) -> None:
        """Nothing to release."""

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Every stored row per table (copies), for tests that compare stores."""
        with self._lock:
            return {
                name: [dict(r.__dict__) for r in rows.values()]
                for name, rows in self.data.tables.items()
            }
