"""The in-memory store: the core path's queries on Python containers, for fast domain tests.

:class:`MemoryStore` has the surface of :class:`~fedstats.service.store.Store` that the domain layer uses
(:meth:`MemoryStore.transaction`, :meth:`MemoryStore.writable`, :meth:`MemoryStore.close`, ``url``,
``is_sqlite``); :class:`MemoryTx`, the object a transaction yields, implements every query of
:class:`~fedstats.service.store.core.CoreQueries` (:class:`MemoryCoreQueries`) with one dict per table,
keyed like the table's primary key, with the semantics of :class:`~fedstats.service.store.sql.SqlCoreQueries`
(``ON CONFLICT DO NOTHING`` inserts answer False, a plain insert of an existing key or of a row whose
foreign key is missing raises :class:`sqlalchemy.exc.IntegrityError` as the databases do, the same
orderings, pages and counts).

Transactions are serialized by one lock (as ``BEGIN IMMEDIATE`` serializes SQLite's writers) and roll back
on an exception through an undo log: the first change of a row in a transaction saves the row as it was
(or that it was absent). Reads return frozen dataclasses built from the stored rows, never the rows.

Not covered: secure runs (the secure store queries) and the VDAF routes
(``store.engine``); both raise :class:`NeedsSQLStore` (a :class:`NotImplementedError`: "secure runs
need a SQL store", "... needs a SQL store"), a deliberate limit, not a stub. ``open_store("memory://")`` returns a fresh, empty :class:`MemoryStore`.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fedstats.errors import FedstatsError
from fedstats.service.store.memory_core import MemoryCoreQueries
from fedstats.service.store.memory_tables import _ABSENT, Row, _Data

__all__ = ["MemoryCoreQueries", "MemoryStore", "MemoryTx", "NeedsSQLStore", "Row"]

SECURE_NEEDS_SQL = "secure runs need a SQL store (the memory store implements the core path only)"


class NeedsSQLStore(FedstatsError, NotImplementedError):
    """A query group the memory store does not have, by design: it holds the core path only.

    The memory store exists for fast domain tests of tasks, runs, reports, the ledger, idempotency and
    fencing. Secure runs (the :class:`~fedstats.service.store.secure.SecureQueries` group, an ORM
    session) and Prio3 tasks (the :class:`~fedstats.service.store.vdaf.VdafQueries` group, an engine)
    run on SQLite or PostgreSQL; asking the memory store for them raises this (also a
    :class:`NotImplementedError`), naming what needs a SQL store.
    """


class MemoryTx(MemoryCoreQueries):
    """One transaction of a :class:`MemoryStore` (its queries act on the store's tables directly).

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

    @property
    def core(self) -> MemoryTx:
        """The core query group (this object)."""
        return self

    @property
    def secure(self) -> Any:
        """Not available: the secure path needs a SQL store."""
        raise NeedsSQLStore(SECURE_NEEDS_SQL)

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
        for table, key in self._undo:  # detach the row objects handed out (as an ORM session's)
            row = self.data.tables[table].get(key)
            if row is not None:
                self.data.tables[table][key] = copy.copy(row)
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

    def session(self) -> Any:
        """Not available: SQLAlchemy sessions need a SQL store."""
        raise NeedsSQLStore(SECURE_NEEDS_SQL)

    @property
    def engine(self) -> Any:
        """Not available: an engine exists only on a SQL store (the Prio3 query group is SQL only)."""
        raise NeedsSQLStore("Prio3 tasks and raw SQL need a SQL store (store.engine)")

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
