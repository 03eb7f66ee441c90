"""What the SQL query modules share: the tables as Core ``Table`` objects and :class:`SqlBase`.

:class:`SqlBase` holds the transaction's connection and the helpers every query mixin uses (a Core
statement, a prebuilt statement, ``INSERT ... ON CONFLICT DO NOTHING``, a page and its count).
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import (
    Connection,
    Table,
    func,
    or_,
    select,
)

from fedstats.service.store.core import CoreQueries
from fedstats.service.store.sql_writes import SqlRowWrites
from fedstats.service.store.tables import (
    Audit,
    Authority,
    Budget,
    Client,
    IdempotencyKey,
    LedgerCharge,
    Nonce,
    Operator,
    Report,
    RoundRecord,
    Run,
    RunMember,
    StateVersion,
    Task,
)


def _table(model: Any) -> Table:
    return cast(Table, model.__table__)


_AUDIT = _table(Audit)


_BUDGETS = _table(Budget)


_CHARGES = _table(LedgerCharge)


_IDEMPOTENCY = _table(IdempotencyKey)


_AUTHORITIES = _table(Authority)


_CLIENTS = _table(Client)


_NONCES = _table(Nonce)


_OPERATORS = _table(Operator)


_REPORTS = _table(Report)


_ROUNDS = _table(RoundRecord)


_RUNS = _table(Run)


_MEMBERS = _table(RunMember)


_VERSION = _table(StateVersion)


DEVICES_VERSION = 2  # the row of state_version counting changes to enrolled devices (1: run states)


_TASKS = _table(Task)


# table columns, not ORM attributes: a select of ORM attributes takes the ORM's compile path
_ROUND_COLUMNS = (
    _ROUNDS.c.run_id,
    _ROUNDS.c.index,
    _ROUNDS.c.name,
    _ROUNDS.c.encode,
    _ROUNDS.c.params,
    _ROUNDS.c.params_digest,
    _ROUNDS.c.dim,
    _ROUNDS.c.bound,
    _ROUNDS.c.lo,
    _ROUNDS.c.hi,
    _ROUNDS.c.status,
    _ROUNDS.c.deadline,
)


def _status_in(*statuses: str) -> Any:
    """``runs.status`` among ``statuses``, as plain bound comparisons.

    An ``IN`` list would be expanded at every execution (SQLAlchemy's post-compile step) of a statement
    run at every poll.
    """
    return or_(*(_RUNS.c.status == s for s in statuses))


class SqlBase(SqlRowWrites, CoreQueries):
    """The transaction's connection (``self.conn``) and the helpers of the SQL query mixins."""

    conn: Connection

    def _exec(self, stmt: Any, params: Any = None) -> Any:
        """Execute a Core statement on the transaction's connection (no ORM layer)."""
        return self.conn.execute(stmt, params)

    def _run(self, stmt: Any, params: dict[str, Any]) -> Any:
        """Execute a prebuilt Core statement on the transaction's connection (no ORM layer)."""
        return self.conn.execute(stmt, params)

    def _page(self, stmt: Any, limit: int, offset: int) -> tuple[list[Any], int]:
        total = self._exec(select(func.count()).select_from(stmt.subquery())).scalar_one()
        return list(self._exec(stmt.limit(limit).offset(offset)).all()), int(total)
