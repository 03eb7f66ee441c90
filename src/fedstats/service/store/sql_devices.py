"""SQL queries of devices and operators: enrolment, nonces, authorities, operators, the counters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    bindparam,
    delete,
    func,
    select,
    update,
)

from fedstats.service.store.core import client_row, device_view
from fedstats.service.store.rows import (
    ClientRow,
    PopulationCount,
)
from fedstats.service.store.sql_base import (
    _AUTHORITIES,
    _CLIENTS,
    _NONCES,
    _OPERATORS,
    _VERSION,
    DEVICES_VERSION,
    SqlBase,
)

# The statements of every device request (a poll, an upload), built once with bind parameters:
# building a select (coercing its columns and clauses) cost more CPU than executing it, and a
# statement built once keeps its memoized cache key (SQLAlchemy's compiled cache then does the rest).
_Q_CLIENT = select(
    _CLIENTS.c.id,
    _CLIENTS.c.public_key,
    _CLIENTS.c.population,
    _CLIENTS.c.authority,
    _CLIENTS.c.not_after,
    _CLIENTS.c.revoked_at,
    _CLIENTS.c.certificate,
).where(_CLIENTS.c.id == bindparam("client_id"))


# a batch's nonces in one statement (PostgreSQL): every column bound as one array; a nonce already
# used is not returned (nor is a second copy within the batch)
_USE_NONCES_PG = """INSERT INTO nonces (client_id, nonce, ts)
SELECT * FROM unnest(%(client_id)s::varchar[], %(nonce)s::varchar[], %(ts)s::float8[])
ON CONFLICT DO NOTHING RETURNING 1"""


_Q_AUTHORITIES = select(_AUTHORITIES.c.id, _AUTHORITIES.c.public_key)


class SqlDeviceQueries(SqlBase):
    """The device, operator and counter queries of :class:`~fedstats.service.store.core.CoreQueries` in SQL."""

    _DEVICE_COLUMNS = ("id", "population", "authority", "public_key", "not_after", "enrolled_at")

    def client(self, client_id: str) -> ClientRow | None:
        """See :meth:`CoreQueries.client`."""
        row = self._run(_Q_CLIENT, {"client_id": client_id}).first()
        return None if row is None else client_row(row)

    def use_nonce(self, client_id: str, nonce: str, ts: float) -> bool:
        """See :meth:`CoreQueries.use_nonce`."""
        values = {"client_id": client_id, "nonce": nonce, "ts": ts}
        return self._add_row(_NONCES.name, values, ignore=True)

    def use_nonces(self, nonces: Sequence[tuple[str, str, float]]) -> bool:
        """See :meth:`CoreQueries.use_nonces` (one statement on PostgreSQL)."""
        if len(nonces) < 2 or self.conn.dialect.name != "postgresql":
            return super().use_nonces(nonces)
        params = {
            "client_id": [c for c, _, _ in nonces],
            "nonce": [n for _, n, _ in nonces],
            "ts": [float(t) for _, _, t in nonces],
        }
        return len(self.conn.exec_driver_sql(_USE_NONCES_PG, params).all()) == len(nonces)

    def purge_nonces(self, before: float) -> int:
        """See :meth:`CoreQueries.purge_nonces`."""
        got = self._exec(delete(_NONCES).where(_NONCES.c.ts < before))
        return int(getattr(got, "rowcount", 0) or 0)

    def authorities(self) -> dict[str, str]:
        """See :meth:`CoreQueries.authorities`."""
        return {i: k for i, k in self._run(_Q_AUTHORITIES, {}).all()}

    def operator_of(self, token_hash: str) -> str | None:
        """See :meth:`CoreQueries.operator_of`."""
        o = _OPERATORS.c
        got = self._exec(select(o.name).where(o.token_hash == token_hash)).scalar()
        return None if got is None else str(got)

    def operator_exists(self, name: str) -> bool:
        """See :meth:`CoreQueries.operator_exists`."""
        o = _OPERATORS.c
        return self._exec(select(o.name).where(o.name == name)).first() is not None

    def page_devices(
        self, limit: int, offset: int, *, population: str | None = None, status: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """See :meth:`CoreQueries.page_devices`."""
        c = _CLIENTS.c
        cols = [c[k] for k in self._DEVICE_COLUMNS]
        stmt = select(*cols, c.revoked_at).order_by(c.id)
        if population is not None:
            stmt = stmt.where(c.population == population)
        if status == "active":
            stmt = stmt.where(c.revoked_at.is_(None))
        elif status == "revoked":
            stmt = stmt.where(c.revoked_at.is_not(None))
        rows, total = self._page(stmt, limit, offset)
        return [device_view(row) for row in rows], total

    def device_for_update(self, client_id: str) -> dict[str, Any] | None:
        """See :meth:`CoreQueries.device_for_update`."""
        c = _CLIENTS.c
        cols = [c[k] for k in self._DEVICE_COLUMNS]
        row = self._exec(
            select(*cols, c.revoked_at).where(c.id == client_id).with_for_update()
        ).first()
        return None if row is None else device_view(row)

    def update_client(self, client_id: str, **values: Any) -> None:
        """See :meth:`CoreQueries.update_client`."""
        self._exec(update(_CLIENTS).where(_CLIENTS.c.id == client_id).values(**values))
        # the devices' counter: row DEVICES_VERSION of state_version, created at its first change
        self._add_row(_VERSION.name, {"id": DEVICES_VERSION, "version": 0}, ignore=True)
        v = _VERSION.c
        self._exec(update(_VERSION).where(v.id == DEVICES_VERSION).values(version=v.version + 1))

    def page_operators(self, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """See :meth:`CoreQueries.page_operators`."""
        o = _OPERATORS.c
        rows, total = self._page(select(o.name, o.created_at).order_by(o.name), limit, offset)
        return [{"name": n, "created_at": c} for n, c in rows], total

    def remove_operator(self, name: str) -> bool:
        """See :meth:`CoreQueries.remove_operator`."""
        o = _OPERATORS.c
        got = self._exec(delete(_OPERATORS).where(o.name == name).returning(o.name)).all()
        return bool(got)

    def bump_version(self) -> int:
        """See :meth:`CoreQueries.bump_version`."""
        v = _VERSION.c
        got = self._exec(
            update(_VERSION).where(v.id == 1).values(version=v.version + 1).returning(v.version)
        ).scalar_one()
        return int(got)

    def version(self) -> int:
        """See :meth:`CoreQueries.version`."""
        v = _VERSION.c
        return int(self._exec(select(v.version).where(v.id == 1)).scalar_one())

    def devices_version(self) -> int:
        """See :meth:`CoreQueries.devices_version`."""
        v = _VERSION.c
        got = self._exec(select(v.version).where(v.id == DEVICES_VERSION)).scalar_one_or_none()
        return int(got or 0)

    def population_counts(self) -> list[PopulationCount]:
        """See :meth:`CoreQueries.population_counts`."""
        c = _CLIENTS.c
        rows = self._exec(
            select(
                c.population, func.count(c.id), func.count(c.revoked_at), func.max(c.enrolled_at)
            ).group_by(c.population)
        ).all()
        return [PopulationCount(str(p), int(n), int(r), last) for p, n, r, last in rows]
