"""Store queries of the core path.

Clients, nonces, tasks, runs, members, rounds, reports, the ledger, operators, idempotency keys, the
change counter. :class:`CoreQueries` is the interface the domain layer calls (through a transaction object, see
:meth:`fedstats.service.store.Store.transaction`); :class:`SqlCoreQueries` implements it with SQLAlchemy Core
statements on the transaction's connection (SQLite and PostgreSQL); :class:`MemoryCoreQueries` with Python
containers, for fast domain tests. Methods take and return plain values (str, int, dict, tuples, frozen
dataclasses), never ORM objects; reads that grow with a run's cohort are not on a per-report path.
"""

from __future__ import annotations

from abc import ABC


class CoreQueries(ABC):  # noqa: B024 - methods land with the store interface
    """The core path's queries, one method per statement or set-based group of statements."""


class SqlCoreQueries(CoreQueries):
    """:class:`CoreQueries` on SQLAlchemy (``self.session``: the transaction's session)."""


class MemoryCoreQueries(CoreQueries):
    """:class:`CoreQueries` on the in-memory tables (``self.data``: a :class:`MemoryData`)."""
