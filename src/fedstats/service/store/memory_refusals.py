"""The memory store's refusals and server secrets (as :mod:`.sql_refusals`)."""

from __future__ import annotations

from collections.abc import Sequence

from fedstats.service.store.memory_tables import MemoryTables
from fedstats.service.store.rows import RefusalRow


class MemoryRefusalQueries(MemoryTables):
    """The refusal and server-secret queries of :class:`~fedstats.service.store.core.CoreQueries` in memory."""

    def refusals_of(self, run_id: str) -> list[RefusalRow]:
        """See :meth:`CoreQueries.refusals_of`."""
        rows = [r for (rid, _), r in self._t("refusals").items() if rid == run_id]
        return [
            RefusalRow(r.run_id, r.client_id, r.reason, r.message, float(r.refused_at))
            for r in sorted(rows, key=lambda r: r.client_id)
        ]

    def refusal_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        """See :meth:`CoreQueries.refusal_counts`."""
        wanted = set(run_ids)
        out: dict[str, int] = {}
        for rid, _ in self._t("refusals"):
            if rid in wanted:
                out[rid] = out.get(rid, 0) + 1
        return out

    def server_secret(self, name: str, candidate: bytes, now: float) -> bytes:
        """See :meth:`CoreQueries.server_secret`."""
        values = {"name": name, "value": bytes(candidate), "created_at": now}
        self._insert("server_secrets", name, values, ignore=True)
        return bytes(self._t("server_secrets")[name].value)
