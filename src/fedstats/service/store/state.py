"""The state: the one interface through which the service reads and writes what it keeps.

:class:`State` is what a transaction of a store is (Flower's ``LinkState``, Janus's datastore): three query
groups, each a method per statement or set-based group of statements, taking and returning plain values
and frozen dataclasses, never ORM rows or tuples:

- core (:class:`~fedstats.service.store.core.CoreQueries`): devices, operators, tasks, runs and their
  rounds and reports, the ledger, the audit log, idempotency keys, the change counters;
- secure (:class:`~fedstats.service.store.secure.SecureQueries`): secure sessions, their message journal,
  the members' seed contributions;
- Prio3 (:class:`~fedstats.service.store.vdaf.VdafQueries`): one aggregator's Prio3 tasks, report shares
  and aggregation jobs.

Two implementations: :class:`~fedstats.service.store.Tx` (SQLite and PostgreSQL, SQLAlchemy Core on one
connection) and :class:`~fedstats.service.store.memory.MemoryTx` (Python containers, for fast tests). Every
domain function takes its transaction as a ``State``.
"""

from __future__ import annotations

from fedstats.service.store.core import CoreQueries
from fedstats.service.store.secure import SecureQueries
from fedstats.service.store.vdaf import VdafQueries
from fedstats.service.store.vdaf_results import VdafResultQueries

__all__ = ["State"]


class State(CoreQueries, SecureQueries, VdafQueries, VdafResultQueries):
    """One open transaction of the state: the core, secure and Prio3 query groups (see the module)."""
