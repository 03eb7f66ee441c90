"""SQL queries of a device's upload: the round it reports in and the report itself, alone or set-based."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    bindparam,
    select,
)

from fedstats.service.store.core import round_row
from fedstats.service.store.rows import (
    PutReport,
    RoundRow,
)
from fedstats.service.store.sql_base import (
    _REPORTS,
    _ROUND_COLUMNS,
    _ROUNDS,
    SqlBase,
)

_Q_ROUND_FOR_REPORT = (
    select(*_ROUND_COLUMNS)
    .where(_ROUNDS.c.run_id == bindparam("run_id"), _ROUNDS.c.index == bindparam("index"))
    .with_for_update(read=True)
)


_Q_REPORT_DIGEST = select(_REPORTS.c.digest).where(
    _REPORTS.c.run_id == bindparam("run_id"),
    _REPORTS.c.round_index == bindparam("index"),
    _REPORTS.c.client_id == bindparam("client_id"),
)


# A device's upload (CoreQueries.put_report) as driver SQL, built once: no statement object, no compile,
# no cache key. The report is inserted only while its round is open with the digest the device's
# report was checked against, and the device holds the slots it was checked with.
_REPORT_IF = """INSERT INTO reports (run_id, round_index, client_id, vector, count, digest, received_at)
SELECT :run_id, :index, :client_id, :vector, :count, :digest, :received_at
WHERE {nonce}EXISTS (
    SELECT 1 FROM {rounds}
) AND EXISTS (
    SELECT 1 FROM run_members WHERE run_id = :run_id AND client_id = :client_id
    AND slot_start = :slot_start AND slot_count = :slot_count
)
ON CONFLICT DO NOTHING RETURNING client_id"""


_OPEN_ROUND = (
    "rounds WHERE run_id = :run_id AND \"index\" = :index AND status = 'open'"
    " AND params_digest = :params_digest"
)


_NONCE_SQLITE = """INSERT INTO nonces (client_id, nonce, ts) VALUES (:client_id, :nonce, :ts)
ON CONFLICT DO NOTHING RETURNING client_id"""


_REPORT_SQLITE = _REPORT_IF.format(nonce="", rounds=_OPEN_ROUND)


# PostgreSQL: one statement; the round row share-locked (its close waits for the reports being
# written), the report written only if the nonce was new
_PUT_REPORT_PG = re.sub(
    r":(\w+)",
    r"%(\1)s",
    f"""WITH n AS ({_NONCE_SQLITE}),
r AS (SELECT 1 FROM {_OPEN_ROUND} FOR SHARE),
ins AS ({_REPORT_IF.format(nonce="EXISTS (SELECT 1 FROM n) AND ", rounds="r")})
SELECT (SELECT count(*) FROM n), (SELECT count(*) FROM ins)""",
)


# Many uploads (CoreQueries.put_reports) with the same conditions, set-based: every column bound as
# one array (PostgreSQL: one statement) or one JSON array of rows (SQLite: one statement for the nonces,
# one for the reports whose nonce was new). Each row's answer is matched back by its position.
_PUT_REPORTS_PG = """WITH u AS (
    SELECT * FROM unnest(
        %(client_id)s::varchar[], %(nonce)s::varchar[], %(ts)s::float8[], %(run_id)s::varchar[],
        %(index)s::int4[], %(params_digest)s::varchar[], %(slot_start)s::int4[],
        %(slot_count)s::int4[], %(vector)s::text[], %(count)s::int4[], %(digest)s::varchar[]
    ) WITH ORDINALITY AS u(client_id, nonce, ts, run_id, idx, params_digest, slot_start, slot_count,
        vector, count, digest, ord)
),
n AS (
    INSERT INTO nonces (client_id, nonce, ts) SELECT client_id, nonce, ts FROM u
    ON CONFLICT DO NOTHING RETURNING client_id, nonce
),
r AS (
    SELECT rounds.run_id, rounds."index", rounds.params_digest FROM rounds
    WHERE rounds.status = 'open'
    AND (rounds.run_id, rounds."index", rounds.params_digest) IN (
        SELECT run_id, idx, params_digest FROM u
    )
    FOR SHARE
),
ins AS (
    INSERT INTO reports (run_id, round_index, client_id, vector, count, digest, received_at)
    SELECT u.run_id, u.idx, u.client_id, u.vector, u.count, u.digest, %(received_at)s
    FROM u
    JOIN n ON n.client_id = u.client_id AND n.nonce = u.nonce
    JOIN r ON r.run_id = u.run_id AND r."index" = u.idx AND r.params_digest = u.params_digest
    WHERE EXISTS (
        SELECT 1 FROM run_members m WHERE m.run_id = u.run_id AND m.client_id = u.client_id
        AND m.slot_start = u.slot_start AND m.slot_count = u.slot_count
    )
    ON CONFLICT DO NOTHING RETURNING run_id, round_index, client_id
)
SELECT u.ord, n.client_id IS NOT NULL, ins.client_id IS NOT NULL
FROM u
LEFT JOIN n ON n.client_id = u.client_id AND n.nonce = u.nonce
LEFT JOIN ins ON ins.run_id = u.run_id AND ins.round_index = u.idx AND ins.client_id = u.client_id"""


_PUT_NONCES_SQLITE = """INSERT INTO nonces (client_id, nonce, ts)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
FROM json_each(:rows) WHERE true
ON CONFLICT DO NOTHING RETURNING client_id, nonce"""


_PUT_REPORTS_SQLITE = """INSERT INTO reports (run_id, round_index, client_id, vector, count, digest, received_at)
SELECT run_id, idx, client_id, vector, count, digest, :received_at FROM (
    SELECT json_extract(value, '$[0]') AS client_id, json_extract(value, '$[3]') AS run_id,
        json_extract(value, '$[4]') AS idx, json_extract(value, '$[5]') AS params_digest,
        json_extract(value, '$[6]') AS slot_start, json_extract(value, '$[7]') AS slot_count,
        json_extract(value, '$[8]') AS vector, json_extract(value, '$[9]') AS count,
        json_extract(value, '$[10]') AS digest
    FROM json_each(:rows)
) AS u
WHERE EXISTS (
    SELECT 1 FROM rounds WHERE rounds.run_id = u.run_id AND rounds."index" = u.idx
    AND rounds.status = 'open' AND rounds.params_digest = u.params_digest
) AND EXISTS (
    SELECT 1 FROM run_members m WHERE m.run_id = u.run_id AND m.client_id = u.client_id
    AND m.slot_start = u.slot_start AND m.slot_count = u.slot_count
)
ON CONFLICT DO NOTHING RETURNING run_id, round_index, client_id"""


_PUT_COLUMNS = (
    "client_id",
    "nonce",
    "ts",
    "run_id",
    "index",
    "params_digest",
    "slot_start",
    "slot_count",
    "vector",
    "count",
    "digest",
)
"""The statement parameters of one upload (:func:`_put_row`'s values, in order)."""


def _put_row(it: PutReport) -> tuple[Any, ...]:
    """An upload's :data:`_PUT_COLUMNS` values (rows of the SQLite statements are these tuples)."""
    (nonce, ts), (params_digest, slot_start, slot_count) = it.nonce, it.expect
    return (
        it.client_id,
        nonce,
        ts,
        it.run_id,
        it.index,
        params_digest,
        slot_start,
        slot_count,
        it.vector,
        it.count,
        it.digest,
    )


class SqlReportQueries(SqlBase):
    """The report queries of :class:`~fedstats.service.store.core.CoreQueries` in SQL."""

    def round_for_report(self, run_id: str, index: int) -> RoundRow | None:
        """See :meth:`CoreQueries.round_for_report`."""
        row = self._run(_Q_ROUND_FOR_REPORT, {"run_id": run_id, "index": index}).first()
        return None if row is None else round_row(row)

    def report_digest(self, run_id: str, index: int, client_id: str) -> str | None:
        """See :meth:`CoreQueries.report_digest`."""
        got = self._run(
            _Q_REPORT_DIGEST, {"run_id": run_id, "index": index, "client_id": client_id}
        ).scalar()
        return None if got is None else str(got)

    def put_report(self, item: PutReport, received_at: float) -> tuple[bool, bool]:
        """See :meth:`CoreQueries.put_report`."""
        conn = self.conn
        pg = conn.dialect.name == "postgresql"
        params = dict(zip(_PUT_COLUMNS, _put_row(item), strict=True), received_at=received_at)
        if pg:
            fresh, stored = conn.exec_driver_sql(_PUT_REPORT_PG, params).one()
            return bool(fresh), bool(stored)
        if not conn.exec_driver_sql(_NONCE_SQLITE, params).all():
            return False, False
        return True, bool(conn.exec_driver_sql(_REPORT_SQLITE, params).all())

    def put_reports(
        self, items: Sequence[PutReport], received_at: float
    ) -> list[tuple[bool, bool]]:
        """See :meth:`CoreQueries.put_reports`."""
        if len(items) <= 1:
            return super().put_reports(items, received_at)
        conn = self.conn
        rows = [_put_row(it) for it in items]
        if conn.dialect.name == "postgresql":
            params: dict[str, Any] = {
                k: list(col) for k, col in zip(_PUT_COLUMNS, zip(*rows, strict=True), strict=True)
            }
            params["received_at"] = received_at
            out = [(False, False)] * len(items)
            for ord_, new, put in conn.exec_driver_sql(_PUT_REPORTS_PG, params).all():
                out[int(ord_) - 1] = (bool(new), bool(put))
            return out
        fresh = {
            (c, n)
            for c, n in conn.exec_driver_sql(
                _PUT_NONCES_SQLITE, {"rows": json.dumps([r[:3] for r in rows])}
            ).all()
        }
        todo = [r for r in rows if (r[0], r[1]) in fresh]
        stored: set[tuple[str, int, str]] = set()
        if todo:
            got = conn.exec_driver_sql(
                _PUT_REPORTS_SQLITE, {"rows": json.dumps(todo), "received_at": received_at}
            ).all()
            stored = {(str(a), int(b), str(c)) for a, b, c in got}
        return [((r[0], r[1]) in fresh, (r[3], r[4], r[0]) in stored) for r in rows]
