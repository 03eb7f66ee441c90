"""The core query group in SQL (SQLite and PostgreSQL): the query mixins of each concern, composed."""

from __future__ import annotations

from fedstats.service.store.sql_devices import SqlDeviceQueries
from fedstats.service.store.sql_ledger import SqlLedgerQueries
from fedstats.service.store.sql_refusals import SqlRefusalQueries
from fedstats.service.store.sql_reports import SqlReportQueries
from fedstats.service.store.sql_runs import SqlRunQueries

__all__ = ["SqlCoreQueries"]


class SqlCoreQueries(
    SqlDeviceQueries, SqlRunQueries, SqlReportQueries, SqlLedgerQueries, SqlRefusalQueries
):
    """:class:`~fedstats.service.store.core.CoreQueries` on SQLAlchemy (``self.conn``: the transaction's connection).

    One mixin per concern: devices and operators (:mod:`.sql_devices`), tasks, runs and rounds
    (:mod:`.sql_runs`), uploads (:mod:`.sql_reports`), the ledger, audit log and idempotency keys
    (:mod:`.sql_ledger`), devices' refusals and the server's secrets (:mod:`.sql_refusals`).
    """
