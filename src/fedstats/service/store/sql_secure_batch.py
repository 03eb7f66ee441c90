"""Set-based writes of the secure path on PostgreSQL: a batch of devices' stage messages in one statement.

:meth:`fedstats.service.store.secure.SqlSecureQueries.put_up_messages` calls :func:`put_up_messages_pg`
for a batch of two or more messages on PostgreSQL; SQLite (one writer at a time) and the memory store
take the per-message default of :meth:`fedstats.service.store.secure.SecureQueries.put_up_messages`.
"""

from __future__ import annotations

from sqlalchemy import Connection

from fedstats.service.store.rows import PutUp

__all__ = ["put_up_messages_pg"]


# every column bound as one array, the payloads' in psycopg's binary format (``%(payload)b``: a bytea
# array in the text format is hex-encoded, then escaped again as array elements); each row's answer
# matched back by its position. The sessions the batch writes to are share-locked while open at the
# message's stage (the driver closing a stage takes the row FOR UPDATE, so it waits for these
# messages); a message is inserted only if its nonce was new and its session open at its stage, once
# (ON CONFLICT: a stored message stays)
_PUT_UPS_PG = """WITH u AS (
    SELECT * FROM unnest(
        %(client_id)s::varchar[], %(nonce)s::varchar[], %(ts)s::float8[], %(run_id)s::varchar[],
        %(idx)s::int4[], %(number)s::int4[], %(stage)s::int4[], %(client_index)s::int4[],
        %(payload)b::bytea[], %(digest)s::varchar[]
    ) WITH ORDINALITY AS u(client_id, nonce, ts, run_id, idx, number, stage, client_index, payload,
        digest, ord)
),
n AS (
    INSERT INTO nonces (client_id, nonce, ts) SELECT client_id, nonce, ts FROM u
    ON CONFLICT DO NOTHING RETURNING client_id, nonce
),
s AS (
    SELECT s.run_id, s.round_index, s.number, s.stage FROM secure_sessions s
    WHERE s.status = 'open'
    AND (s.run_id, s.round_index, s.number, s.stage) IN (SELECT run_id, idx, number, stage FROM u)
    FOR SHARE
),
ins AS (
    INSERT INTO secure_messages (run_id, round_index, number, stage, direction, client_index, payload,
        digest, created_at)
    SELECT u.run_id, u.idx, u.number, u.stage, 'up', u.client_index, u.payload, u.digest, %(now)s
    FROM u
    JOIN n ON n.client_id = u.client_id AND n.nonce = u.nonce
    JOIN s ON s.run_id = u.run_id AND s.round_index = u.idx AND s.number = u.number
        AND s.stage = u.stage
    ON CONFLICT DO NOTHING RETURNING run_id, round_index, number, stage, client_index
)
SELECT u.ord, n.client_id IS NOT NULL, n.client_id IS NOT NULL AND ins.client_index IS NOT NULL
FROM u
LEFT JOIN n ON n.client_id = u.client_id AND n.nonce = u.nonce
LEFT JOIN ins ON ins.run_id = u.run_id AND ins.round_index = u.idx AND ins.number = u.number
    AND ins.stage = u.stage AND ins.client_index = u.client_index"""


def put_up_messages_pg(conn: Connection, items: list[PutUp], now: float) -> list[tuple[bool, bool]]:
    """:meth:`~fedstats.service.store.secure.SecureQueries.put_up_messages` in one PostgreSQL statement.

    Parameters
    ----------
    conn : Connection
        The transaction's connection (PostgreSQL).
    items : list of PutUp
        Distinct messages (no two nonces alike, no two for the same device and stage).
    now : float
        Unix seconds, each stored message's ``created_at``.

    Returns
    -------
    list of (bool, bool)
        Per message, in order: its nonce was new; it was stored now.
    """
    params = {
        "client_id": [it.client_id for it in items],
        "nonce": [it.nonce for it in items],
        "ts": [it.ts for it in items],
        "run_id": [it.run_id for it in items],
        "idx": [it.index for it in items],
        "number": [it.number for it in items],
        "stage": [it.stage for it in items],
        "client_index": [it.client_index for it in items],
        "payload": [it.payload for it in items],
        "digest": [it.digest for it in items],
        "now": now,
    }
    out = [(False, False)] * len(items)
    for ord_, fresh, stored in conn.exec_driver_sql(_PUT_UPS_PG, params).all():
        out[int(ord_) - 1] = (bool(fresh), bool(stored))
    return out
