"""SQL queries of the privacy ledger, the audit log and idempotency keys."""

from __future__ import annotations

from sqlalchemy import (
    delete,
    select,
    update,
)

from fedstats.service.store.rows import (
    AuditEntry,
    BudgetRow,
    ChargeRow,
    IdempotentAnswer,
)
from fedstats.service.store.sql_base import (
    _AUDIT,
    _BUDGETS,
    _CHARGES,
    _IDEMPOTENCY,
    SqlBase,
)

_CHARGE_COLUMNS = (
    _CHARGES.c.run_id,
    _CHARGES.c.population,
    _CHARGES.c.analyst,
    _CHARGES.c.epsilon,
    _CHARGES.c.delta,
    _CHARGES.c.rho,
    _CHARGES.c.status,
    _CHARGES.c.label,
    _CHARGES.c.mechanisms,
)


class SqlLedgerQueries(SqlBase):
    """The ledger, audit and idempotency queries of :class:`~fedstats.service.store.core.CoreQueries` in SQL."""

    def budgets(self) -> list[BudgetRow]:
        """See :meth:`CoreQueries.budgets`."""
        b = _BUDGETS.c
        rows = self._exec(
            select(b.scope, b.name, b.epsilon, b.delta).order_by(b.scope, b.name)
        ).all()
        return [BudgetRow(str(s), str(n), float(e), float(d)) for s, n, e, d in rows]

    def reserved_charges(self, scope: str, name: str) -> list[ChargeRow]:
        """See :meth:`CoreQueries.reserved_charges`."""
        c = _CHARGES.c
        col = c.population if scope == "population" else c.analyst
        rows = self._exec(
            select(*_CHARGE_COLUMNS).where(col == name, c.status == "reserved").order_by(c.id)
        ).all()
        return [ChargeRow(*r) for r in rows]

    def recent_audit(self, actions: tuple[str, ...], limit: int) -> list[AuditEntry]:
        """See :meth:`CoreQueries.recent_audit`."""
        a = _AUDIT.c
        rows = self._exec(
            select(a.ts, a.actor, a.action, a.run_id, a.detail)
            .where(a.action.in_(actions))
            .order_by(a.id.desc())
            .limit(limit)
        ).all()
        return [AuditEntry(float(t), str(w), str(x), r, str(d)) for t, w, x, r, d in rows]

    def audit_log(self, run_id: str | None, limit: int) -> list[AuditEntry]:
        """See :meth:`CoreQueries.audit_log`."""
        a = _AUDIT.c
        stmt = select(a.ts, a.actor, a.action, a.run_id, a.detail).order_by(a.id)
        if run_id is not None:
            stmt = stmt.where(a.run_id == run_id)
        rows = self._exec(stmt.limit(limit)).all()
        return [AuditEntry(float(t), str(w), str(x), r, str(d)) for t, w, x, r, d in rows]

    def budget(self, scope: str, name: str, *, lock: bool = False) -> BudgetRow | None:
        """See :meth:`CoreQueries.budget`."""
        b = _BUDGETS.c
        stmt = select(b.scope, b.name, b.epsilon, b.delta).where(b.scope == scope, b.name == name)
        if lock:
            stmt = stmt.with_for_update()
        row = self._exec(stmt).first()
        if row is None:
            return None
        return BudgetRow(row.scope, row.name, float(row.epsilon), float(row.delta))

    def put_budget(self, scope: str, name: str, epsilon: float, delta: float) -> None:
        """See :meth:`CoreQueries.put_budget`."""
        b = _BUDGETS.c
        got = self._exec(
            update(_BUDGETS)
            .where(b.scope == scope, b.name == name)
            .values(epsilon=epsilon, delta=delta)
            .returning(b.scope)
        ).all()
        if not got:
            self._exec(
                _BUDGETS.insert().values(scope=scope, name=name, epsilon=epsilon, delta=delta)
            )

    def charges_on(self, scope: str, name: str) -> list[ChargeRow]:
        """See :meth:`CoreQueries.charges_on`."""
        c = _CHARGES.c
        col = c.population if scope == "population" else c.analyst
        rows = self._exec(
            select(*_CHARGE_COLUMNS)
            .where(col == name, c.status.in_(("reserved", "spent")))
            .order_by(c.id)
        ).all()
        return [ChargeRow(*r) for r in rows]

    def charge_of(self, run_id: str) -> ChargeRow | None:
        """See :meth:`CoreQueries.charge_of`."""
        row = self._exec(
            select(*_CHARGE_COLUMNS).where(_CHARGES.c.run_id == run_id).with_for_update()
        ).first()
        return None if row is None else ChargeRow(*row)

    def set_charge_status(self, run_id: str, status: str, now: float) -> None:
        """See :meth:`CoreQueries.set_charge_status`."""
        self._exec(
            update(_CHARGES)
            .where(_CHARGES.c.run_id == run_id)
            .values(status=status, updated_at=now)
        )

    def page_budgets(
        self, limit: int, offset: int, *, scope: str | None = None
    ) -> tuple[list[BudgetRow], int]:
        """See :meth:`CoreQueries.page_budgets`."""
        b = _BUDGETS.c
        stmt = select(b.scope, b.name, b.epsilon, b.delta).order_by(b.scope, b.name)
        if scope is not None:
            stmt = stmt.where(b.scope == scope)
        rows, total = self._page(stmt, limit, offset)
        return [BudgetRow(str(s), str(n), float(e), float(d)) for s, n, e, d in rows], total

    def idempotent_answer(self, actor: str, key: str) -> IdempotentAnswer | None:
        """See :meth:`CoreQueries.idempotent_answer`."""
        k = _IDEMPOTENCY.c
        row = self._exec(
            select(k.method, k.path, k.request_hash, k.status_code, k.response).where(
                k.actor == actor, k.key == key
            )
        ).first()
        return None if row is None else IdempotentAnswer(*row)

    def purge_idempotency_keys(self, before: float) -> int:
        """See :meth:`CoreQueries.purge_idempotency_keys`."""
        got = self._exec(delete(_IDEMPOTENCY).where(_IDEMPOTENCY.c.created_at < before))
        return int(getattr(got, "rowcount", 0) or 0)
