"""SQL queries of devices' refusals and of the server's own secrets (issue 42)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select

from fedstats.service.store.rows import RefusalRow
from fedstats.service.store.sql_base import SqlBase, _table
from fedstats.service.store.tables import Refusal, ServerSecret

_REFUSALS = _table(Refusal)
_SECRETS = _table(ServerSecret)


class SqlRefusalQueries(SqlBase):
    """The refusal and server-secret queries of :class:`~fedstats.service.store.core.CoreQueries` in SQL."""

    def refusals_of(self, run_id: str) -> list[RefusalRow]:
        """See :meth:`CoreQueries.refusals_of`."""
        r = _REFUSALS.c
        rows = self._exec(
            select(r.run_id, r.client_id, r.reason, r.message, r.refused_at)
            .where(r.run_id == run_id)
            .order_by(r.client_id)
        ).all()
        return [RefusalRow(str(a), str(b), str(c), str(d), float(e)) for a, b, c, d, e in rows]

    def refusal_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        """See :meth:`CoreQueries.refusal_counts`."""
        if not run_ids:
            return {}
        r = _REFUSALS.c
        rows = self._exec(
            select(r.run_id, func.count())
            .where(r.run_id.in_(list(dict.fromkeys(run_ids))))
            .group_by(r.run_id)
        ).all()
        return {str(rid): int(n) for rid, n in rows}

    def server_secret(self, name: str, candidate: bytes, now: float) -> bytes:
        """See :meth:`CoreQueries.server_secret`."""
        values = {"name": name, "value": candidate, "created_at": now}
        self._add_row(_SECRETS.name, values, ignore=True)
        value = self._exec(select(_SECRETS.c.value).where(_SECRETS.c.name == name)).scalar_one()
        return bytes(value)
