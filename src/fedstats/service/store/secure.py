"""Store queries of secure runs: secure sessions, their journaled stage messages, seed transcripts.

Same pattern as :mod:`fedstats.service.store.core`: :class:`SecureQueries` is the interface the domain
layer (:mod:`fedstats.service.domain.secure`, :mod:`fedstats.service.domain.secure_devices`) calls through
a transaction, :class:`SqlSecureQueries` the SQLAlchemy implementation (SQLite and PostgreSQL). Methods take
and return plain values and frozen dataclasses (:class:`MemberRow`, :class:`EnrolledRow`,
:class:`SecureSessionRow`, :class:`UpMessage`, defined in :mod:`.secure_rows`); the memory state implements
the same interface (:mod:`.memory_secure`).

The statements of the per-request path (a device's work, its stage message served or stored) are built
once with bind parameters: building a select cost about as much CPU as executing it (a profile at
n = 200).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Connection, bindparam, func, select, update

from fedstats.service.store.rows import PutUp
from fedstats.service.store.secure_rows import (
    EnrolledRow,
    MemberRow,
    OpenSession,
    SecureSessionRow,
    SessionStage,
    StageActivity,
    UpMessage,
)
from fedstats.service.store.sql_base import _CLIENTS, _MEMBERS, _ROUNDS, _table
from fedstats.service.store.sql_secure_batch import put_up_messages_pg
from fedstats.service.store.sql_writes import SqlRowWrites
from fedstats.service.store.tables import SecureMessage, SecureSession, SecureWithholder
from fedstats.service.store.writes import RowWrites

__all__ = [
    "BATCH_BYTES",
    "BATCH_ROWS",
    "EnrolledRow",
    "MemberRow",
    "OpenSession",
    "PutUp",
    "SecureQueries",
    "SecureSessionRow",
    "SessionStage",
    "SqlSecureQueries",
    "StageActivity",
    "UpMessage",
    "message_row",
]


class SecureQueries(RowWrites):
    """The secure path's queries (sessions, their message journal, members' seed contributions)."""

    @abstractmethod
    def members_in_order(self, run_id: str) -> list[MemberRow]:
        """A run's members in slot order."""

    @abstractmethod
    def member_row(self, run_id: str, client_id: str) -> MemberRow | None:
        """One member of a run, or None."""

    @abstractmethod
    def member_rows(self, run_id: str, client_ids: list[str]) -> dict[str, MemberRow]:
        """The members of a run among ``client_ids``, by client id (one query; the others are not)."""

    @abstractmethod
    def unrevealed(self, run_id: str) -> int:
        """How many of a run's members have not revealed their seed contribution (one count, no rows)."""

    def set_reveal(
        self, run_id: str, client_id: str, reveal: str, signature: str | None = None
    ) -> None:
        """Store a member's revealed seed contribution (hex), and a committee member's signature (hex)."""
        self._set(
            "run_members", (run_id, client_id), {"reveal": reveal, "reveal_signature": signature}
        )

    def set_reveals(self, reveals: Sequence[tuple[str, ...]]) -> None:
        """:meth:`set_reveal` of each ``(run_id, client_id, reveal[, signature])`` (SQL: one statement)."""
        for run_id, client_id, reveal, *signature in reveals:
            self.set_reveal(run_id, client_id, reveal, signature[0] if signature else None)

    def start_secure_run(self, run_id: str, public_seed: str) -> None:
        """Fix a seeding run's public seed and set it ``running``."""
        self._set("runs", run_id, {"public_seed": public_seed, "status": "running"})

    def add_withholders(self, task_id: str, run_id: str, client_ids: list[str], at: float) -> None:
        """Record members of a run that did not reveal (idempotent per task, client and run)."""
        known = set(self.withholders(run_id))
        rows = [
            {"task_id": task_id, "client_id": c, "run_id": run_id, "at": at}
            for c in dict.fromkeys(client_ids)
            if c not in known
        ]
        self._add_rows("secure_withholders", rows)

    @abstractmethod
    def withholders(self, run_id: str) -> list[str]:
        """The members recorded as withholders of a run, by client id."""

    @abstractmethod
    def is_withholder(self, task_id: str, client_id: str) -> bool:
        """Whether a device withheld its reveal in any run of a task (it joins none of its later runs)."""

    @abstractmethod
    def withholders_among(self, task_id: str, client_ids: list[str]) -> set[str]:
        """The devices among ``client_ids`` that :meth:`is_withholder` names for a task (one query)."""

    @abstractmethod
    def enrolled(self, client_ids: list[str]) -> list[EnrolledRow]:
        """The enrolled devices ``client_ids``, in that order (one query).

        Raises
        ------
        KeyError
            If one is not enrolled.
        """

    @abstractmethod
    def round_dim(self, run_id: str, index: int) -> int | None:
        """The vector length of a journaled round, or None if there is no such round."""

    def add_secure_session(self, row: SecureSessionRow) -> None:
        """Insert a secure session."""
        self._add_row("secure_sessions", dict(row.__dict__))

    @abstractmethod
    def secure_sessions(self, run_id: str, index: int) -> list[SecureSessionRow]:
        """The sessions of a round, by number (read without a lock)."""

    @abstractmethod
    def secure_session(
        self, run_id: str, index: int, number: int, *, lock: bool = False
    ) -> SecureSessionRow | None:
        """One session, read fresh (locked ``FOR UPDATE`` with ``lock``), or None."""

    @abstractmethod
    def update_secure_session(self, run_id: str, index: int, number: int, **values: Any) -> None:
        """Set columns of a session."""

    @abstractmethod
    def open_secure_sessions(self, run_id: str, index: int) -> list[OpenSession]:
        """A round's open sessions."""

    @abstractmethod
    def session_stage(
        self, run_id: str, index: int, number: int, *, shared: bool = False
    ) -> SessionStage | None:
        """A session's status and stage (locked ``FOR SHARE`` with ``shared``), or None."""

    def add_down_messages(
        self,
        run_id: str,
        index: int,
        number: int,
        stage: int,
        messages: list[tuple[int, bytes, str]],
        now: float,
    ) -> None:
        """Journal a stage's messages to the devices, ``(client_index, payload, digest)`` each.

        In statements of about :data:`BATCH_BYTES`: the driver's connection keeps its buffers at the size
        of the largest statement it sent (a stage's messages are O(n k) bytes, ~11 MB at n = 1,000).
        """
        rows = [
            message_row(run_id, index, number, stage, "down", i, data, digest, now)
            for i, data, digest in messages
        ]
        for part in _by_size(rows):
            self._add_rows("secure_messages", part)

    def add_up_message(
        self,
        run_id: str,
        index: int,
        number: int,
        stage: int,
        client_index: int,
        payload: bytes,
        digest: str,
        now: float,
    ) -> None:
        """Journal one device's stage message."""
        values = message_row(run_id, index, number, stage, "up", client_index, payload, digest, now)
        self._add_row("secure_messages", values)

    def add_up_message_once(
        self,
        run_id: str,
        index: int,
        number: int,
        stage: int,
        client_index: int,
        payload: bytes,
        digest: str,
        now: float,
    ) -> str | None:
        """Journal one device's stage message unless one is stored.

        Returns None if inserted, else the stored message's digest: one statement on the common path
        (``INSERT ... ON CONFLICT DO NOTHING RETURNING``), a second only for a repeat.
        """
        values = message_row(run_id, index, number, stage, "up", client_index, payload, digest, now)
        if self._add_row("secure_messages", values, ignore=True):
            return None
        return self.my_messages(run_id, index, number, stage, client_index)["up"]

    def put_up_messages(self, items: list[PutUp], now: float) -> list[tuple[bool, bool]]:
        """Record each message's nonce and journal it if its session is open at its stage (bulk).

        The write of a batch of stage requests (one statement on PostgreSQL,
        :func:`fedstats.service.store.sql_secure_batch.put_up_messages`; here one
        :meth:`~fedstats.service.store.core.CoreQueries.use_nonce`, :meth:`session_stage` and
        :meth:`add_up_message_once` per message). The messages must be distinct (no two with the same
        nonce, no two for the same device and stage).

        Returns
        -------
        list of (bool, bool)
            Per message, in order: whether its nonce was new (False: a replay, nothing written for it),
            and whether it was stored now (False with a new nonce: its session is not open at its
            stage, or a message is already stored; the nonce was recorded, so the caller rolls back
            and answers that request alone).
        """
        out = []
        for it in items:
            fresh = bool(cast(Any, self).use_nonce(it.client_id, it.nonce, it.ts))
            stored = False
            if fresh:
                got = self.session_stage(it.run_id, it.index, it.number, shared=True)
                if got is not None and got.status == "open" and got.stage == it.stage:
                    stored = (
                        self.add_up_message_once(
                            it.run_id,
                            it.index,
                            it.number,
                            it.stage,
                            it.client_index,
                            it.payload,
                            it.digest,
                            now,
                        )
                        is None
                    )
            out.append((fresh, stored))
        return out

    @abstractmethod
    def count_messages(
        self, run_id: str, index: int, number: int, stage: int, direction: str
    ) -> int:
        """Messages journaled at a session's stage in ``direction`` (``up`` or ``down``)."""

    @abstractmethod
    def up_activity(self, run_id: str, index: int, number: int, stage: int) -> StageActivity:
        """The devices' messages journaled at a stage: their count and the latest one's time.

        ``newest`` (Unix seconds, ``created_at``) is None when there is none. One statement, no payload.
        """

    @abstractmethod
    def up_messages(self, run_id: str, index: int, number: int, stage: int) -> list[UpMessage]:
        """The devices' messages of a stage, by client index."""

    @abstractmethod
    def up_indices(self, run_id: str, index: int, number: int, stage: int) -> list[int]:
        """The client indices of the devices' messages of a stage (key columns, no payload)."""

    @abstractmethod
    def down_digests(self, run_id: str, index: int, number: int, stage: int) -> dict[int, str]:
        """``client_index -> digest`` of the server's messages of a stage."""

    @abstractmethod
    def addressed(
        self, run_id: str, index: int, number: int, stage: int, client_index: int
    ) -> bool:
        """Whether the server sent the device a message at a stage (key columns, no payload)."""

    @abstractmethod
    def down_payload(
        self, run_id: str, index: int, number: int, stage: int, client_index: int
    ) -> bytes | None:
        """The server's stage message to one device, or None."""

    @abstractmethod
    def down_payloads(self, run_id: str, index: int, number: int, stage: int) -> dict[int, bytes]:
        """``client_index -> payload`` of every server message of a stage (one query for all devices)."""

    @abstractmethod
    def my_messages(
        self, run_id: str, index: int, number: int, stage: int, client_index: int
    ) -> dict[str, str]:
        """``direction -> digest`` of one device's messages at a stage (both directions)."""


_SESSIONS = _table(SecureSession)
_MESSAGES = _table(SecureMessage)
_WITHHOLDERS = _table(SecureWithholder)

_M = _MESSAGES.c
_S = _SESSIONS.c

_SESSION_KEY = (
    _S.run_id == bindparam("run_id"),
    _S.round_index == bindparam("round_index"),
    _S.number == bindparam("number"),
)
_MESSAGE_KEY = (
    _M.run_id == bindparam("run_id"),
    _M.round_index == bindparam("round_index"),
    _M.number == bindparam("number"),
    _M.stage == bindparam("stage"),
)
_OPEN_SESSIONS = select(_S.number, _S.stage, _S.deadline).where(
    _S.run_id == bindparam("run_id"),
    _S.round_index == bindparam("round_index"),
    _S.status == "open",
)
_ADDRESSED = select(_M.direction).where(
    *_MESSAGE_KEY, _M.direction == "down", _M.client_index == bindparam("client_index")
)
_DOWN_PAYLOAD = select(_M.payload).where(
    *_MESSAGE_KEY, _M.direction == "down", _M.client_index == bindparam("client_index")
)
_DOWN_PAYLOADS = select(_M.client_index, _M.payload).where(*_MESSAGE_KEY, _M.direction == "down")

BATCH_ROWS = 128
"""Stage messages read per statement (:meth:`SqlSecureQueries.up_messages`)."""

BATCH_BYTES = 1 << 20
"""About the most payload bytes written per statement (:meth:`SqlSecureQueries.add_down_messages`)."""

_UP_PAGE = (
    select(_M.client_index, _M.payload)
    .where(*_MESSAGE_KEY, _M.direction == "up", _M.client_index > bindparam("after"))
    .order_by(_M.client_index)
    .limit(bindparam("rows"))
)


def _by_size(rows: list[dict[str, Any]], limit: int | None = None) -> list[list[dict[str, Any]]]:
    """``rows`` (message rows) cut, in order, into parts of at most ``limit`` payload bytes (one at least).

    ``limit`` defaults to :data:`BATCH_BYTES`.
    """
    limit = BATCH_BYTES if limit is None else limit
    parts: list[list[dict[str, Any]]] = []
    part: list[dict[str, Any]] = []
    size = 0
    for row in rows:
        n = len(row["payload"])
        if part and size + n > limit:
            parts.append(part)
            part, size = [], 0
        part.append(row)
        size += n
    if part:
        parts.append(part)
    return parts


_SESSION_STAGE = select(_S.status, _S.stage).where(*_SESSION_KEY)
_SESSION_STAGE_SHARED = _SESSION_STAGE.with_for_update(read=True)
_MINE = select(_M.direction, _M.digest).where(
    *_MESSAGE_KEY, _M.client_index == bindparam("client_index")
)


def message_row(
    run_id: str,
    index: int,
    number: int,
    stage: int,
    direction: str,
    client_index: int,
    payload: bytes,
    digest: str,
    now: float,
) -> dict[str, Any]:
    """One ``secure_messages`` row as a dict of its columns (both stores write these)."""
    return {
        "run_id": run_id,
        "round_index": index,
        "number": number,
        "stage": stage,
        "direction": direction,
        "client_index": int(client_index),
        "payload": bytes(payload),
        "digest": digest,
        "created_at": now,
    }


_SESSION_ROW = select(*_SESSIONS.c).where(*_SESSION_KEY)
_SESSION_ROW_LOCKED = _SESSION_ROW.with_for_update()
_MEMBER_COLUMNS = (
    _MEMBERS.c.client_id,
    _MEMBERS.c.slot_start,
    _MEMBERS.c.slot_count,
    _MEMBERS.c.commitment,
    _MEMBERS.c.reveal,
    _MEMBERS.c.reveal_signature,
)

_MEMBER_ROW = select(*_MEMBER_COLUMNS).where(
    _MEMBERS.c.run_id == bindparam("run_id"), _MEMBERS.c.client_id == bindparam("client_id")
)
_MEMBER_ROWS = select(*_MEMBER_COLUMNS).where(
    _MEMBERS.c.run_id == bindparam("run_id"),
    _MEMBERS.c.client_id.in_(bindparam("client_ids", expanding=True)),
)
_UNREVEALED = select(func.count()).where(
    _MEMBERS.c.run_id == bindparam("run_id"), _MEMBERS.c.reveal.is_(None)
)
_SET_REVEAL = (
    update(_MEMBERS)
    .where(_MEMBERS.c.run_id == bindparam("m_run"), _MEMBERS.c.client_id == bindparam("m_client"))
    .values(reveal=bindparam("m_reveal"), reveal_signature=bindparam("m_signature"))
)
_IS_WITHHOLDER = (
    select(_WITHHOLDERS.c.run_id)
    .where(
        _WITHHOLDERS.c.task_id == bindparam("task_id"),
        _WITHHOLDERS.c.client_id == bindparam("client_id"),
    )
    .limit(1)
)
_WITHHOLDERS_AMONG = (
    select(_WITHHOLDERS.c.client_id)
    .where(
        _WITHHOLDERS.c.task_id == bindparam("task_id"),
        _WITHHOLDERS.c.client_id.in_(bindparam("client_ids", expanding=True)),
    )
    .distinct()
)


def _member(r: Any) -> MemberRow:
    return MemberRow(str(r[0]), int(r[1]), int(r[2]), r[3], r[4], r[5])


def _session(r: Any) -> SecureSessionRow:
    return SecureSessionRow(
        run_id=str(r.run_id),
        round_index=int(r.round_index),
        number=int(r.number),
        members=str(r.members),
        params=str(r.params),
        session=str(r.session),
        stage=int(r.stage),
        deadline=float(r.deadline),
        status=str(r.status),
        total=r.total,
        n_records=None if r.n_records is None else int(r.n_records),
        included=r.included,
        error=r.error,
    )


class SqlSecureQueries(SqlRowWrites, SecureQueries):
    """:class:`SecureQueries` on SQLAlchemy (``self.conn``: the transaction's connection)."""

    conn: Connection

    def members_in_order(self, run_id: str) -> list[MemberRow]:
        """See :meth:`SecureQueries.members_in_order`."""
        rows = self.conn.execute(
            select(*_MEMBER_COLUMNS)
            .where(_MEMBERS.c.run_id == run_id)
            .order_by(_MEMBERS.c.slot_start)
        ).all()
        return [_member(r) for r in rows]

    def member_row(self, run_id: str, client_id: str) -> MemberRow | None:
        """See :meth:`SecureQueries.member_row`."""
        got = self.conn.execute(
            _MEMBER_ROW, {"run_id": run_id, "client_id": client_id}
        ).one_or_none()
        return None if got is None else _member(got)

    def member_rows(self, run_id: str, client_ids: list[str]) -> dict[str, MemberRow]:
        """See :meth:`SecureQueries.member_rows`."""
        rows = self.conn.execute(
            _MEMBER_ROWS, {"run_id": run_id, "client_ids": list(client_ids)}
        ).all()
        return {str(r[0]): _member(r) for r in rows}

    def unrevealed(self, run_id: str) -> int:
        """See :meth:`SecureQueries.unrevealed`."""
        return int(self.conn.execute(_UNREVEALED, {"run_id": run_id}).scalar_one())

    def set_reveal(
        self, run_id: str, client_id: str, reveal: str, signature: str | None = None
    ) -> None:
        """See :meth:`SecureQueries.set_reveal` (one statement built once: every member reveals)."""
        self.conn.execute(
            _SET_REVEAL,
            {"m_run": run_id, "m_client": client_id, "m_reveal": reveal, "m_signature": signature},
        )

    def set_reveals(self, reveals: Sequence[tuple[str, ...]]) -> None:
        """See :meth:`SecureQueries.set_reveals` (one ``executemany``)."""
        if reveals:
            rows = [
                {"m_run": r, "m_client": c, "m_reveal": v, "m_signature": sig[0] if sig else None}
                for r, c, v, *sig in reveals
            ]
            self.conn.execute(_SET_REVEAL, rows)

    def enrolled(self, client_ids: list[str]) -> list[EnrolledRow]:
        """See :meth:`SecureQueries.enrolled`."""
        c = _CLIENTS.c
        rows = self.conn.execute(
            select(c.id, c.public_key, c.certificate).where(c.id.in_(client_ids))
        ).all()
        got = {str(i): EnrolledRow(str(i), str(k), cert) for i, k, cert in rows}
        return [got[cid] for cid in client_ids]

    def round_dim(self, run_id: str, index: int) -> int | None:
        """See :meth:`SecureQueries.round_dim`."""
        r = _ROUNDS.c
        got = self.conn.execute(
            select(r.dim).where(r.run_id == run_id, r.index == index)
        ).scalar_one_or_none()
        return None if got is None else int(got)

    def add_secure_session(self, row: SecureSessionRow) -> None:
        """See :meth:`SecureQueries.add_secure_session` (and forget the open sessions read)."""
        self.__dict__.pop("_open_memo", None)
        super().add_secure_session(row)

    def secure_sessions(self, run_id: str, index: int) -> list[SecureSessionRow]:
        """See :meth:`SecureQueries.secure_sessions`."""
        rows = self.conn.execute(
            select(*_SESSIONS.c)
            .where(_S.run_id == run_id, _S.round_index == index)
            .order_by(_S.number)
        ).all()
        return [_session(r) for r in rows]

    def secure_session(
        self, run_id: str, index: int, number: int, *, lock: bool = False
    ) -> SecureSessionRow | None:
        """See :meth:`SecureQueries.secure_session`."""
        got = self.conn.execute(
            _SESSION_ROW_LOCKED if lock else _SESSION_ROW,
            {"run_id": run_id, "round_index": index, "number": number},
        ).one_or_none()
        return None if got is None else _session(got)

    def update_secure_session(self, run_id: str, index: int, number: int, **values: Any) -> None:
        """See :meth:`SecureQueries.update_secure_session`."""
        self.__dict__.pop("_open_memo", None)
        self.conn.execute(
            update(_SESSIONS)
            .where(_S.run_id == run_id, _S.round_index == index, _S.number == number)
            .values(**values)
        )

    def open_secure_sessions(self, run_id: str, index: int) -> list[OpenSession]:
        """See :meth:`SecureQueries.open_secure_sessions`.

        Read once per transaction and round (until this transaction changes a session): a poll that
        reads ahead the work lists of many devices asks for every one of them.
        """
        memo: dict[tuple[str, int], list[OpenSession]] = self.__dict__.setdefault("_open_memo", {})
        got = memo.get((run_id, index))
        if got is None:
            rows = self.conn.execute(_OPEN_SESSIONS, {"run_id": run_id, "round_index": index})
            got = memo[(run_id, index)] = [
                OpenSession(int(n), int(s), float(d)) for n, s, d in rows
            ]
        return list(got)

    def session_stage(
        self, run_id: str, index: int, number: int, *, shared: bool = False
    ) -> SessionStage | None:
        """See :meth:`SecureQueries.session_stage`."""
        got = self.conn.execute(
            _SESSION_STAGE_SHARED if shared else _SESSION_STAGE,
            {"run_id": run_id, "round_index": index, "number": number},
        ).one_or_none()
        return None if got is None else SessionStage(str(got[0]), int(got[1]))

    def put_up_messages(self, items: list[PutUp], now: float) -> list[tuple[bool, bool]]:
        """See :meth:`SecureQueries.put_up_messages` (PostgreSQL: one statement for the batch)."""
        if len(items) > 1 and self.conn.dialect.name == "postgresql":
            return put_up_messages_pg(self.conn, items, now)
        return super().put_up_messages(items, now)

    def count_messages(
        self, run_id: str, index: int, number: int, stage: int, direction: str
    ) -> int:
        """See :meth:`SecureQueries.count_messages`."""
        return int(
            self.conn.execute(
                select(func.count())
                .select_from(_MESSAGES)
                .where(
                    _M.run_id == run_id,
                    _M.round_index == index,
                    _M.number == number,
                    _M.stage == stage,
                    _M.direction == direction,
                )
            ).scalar_one()
        )

    def up_activity(self, run_id: str, index: int, number: int, stage: int) -> StageActivity:
        """See :meth:`SecureQueries.up_activity`."""
        count, newest = self.conn.execute(
            select(func.count(), func.max(_M.created_at)).where(
                _M.run_id == run_id,
                _M.round_index == index,
                _M.number == number,
                _M.stage == stage,
                _M.direction == "up",
            )
        ).one()
        return StageActivity(int(count), None if newest is None else float(newest))

    def up_messages(self, run_id: str, index: int, number: int, stage: int) -> list[UpMessage]:
        """See :meth:`SecureQueries.up_messages`.

        Read :data:`BATCH_ROWS` messages at a time (keyset pages by client index): a connection keeps
        its read buffer at the size of the largest result it read, and a stage's messages are
        ``O(n k)`` or ``O(n L)`` bytes (the masked inputs: 8 MB at n = 1,000, L = 1,000).
        """
        key = {"run_id": run_id, "round_index": index, "number": number, "stage": stage}
        out: list[UpMessage] = []
        after, rows = -1, BATCH_ROWS
        while True:
            page = self.conn.execute(_UP_PAGE, {**key, "after": after, "rows": rows}).all()
            out.extend(UpMessage(int(i), bytes(p)) for i, p in page)
            if len(page) < rows:
                return out
            after = int(page[-1][0])

    def up_indices(self, run_id: str, index: int, number: int, stage: int) -> list[int]:
        """See :meth:`SecureQueries.up_indices`."""
        rows = self.conn.execute(
            select(_M.client_index)
            .where(
                _M.run_id == run_id,
                _M.round_index == index,
                _M.number == number,
                _M.stage == stage,
                _M.direction == "up",
            )
            .order_by(_M.client_index)
        ).all()
        return [int(i) for (i,) in rows]

    def down_digests(self, run_id: str, index: int, number: int, stage: int) -> dict[int, str]:
        """See :meth:`SecureQueries.down_digests`."""
        rows = self.conn.execute(
            select(_M.client_index, _M.digest).where(
                _M.run_id == run_id,
                _M.round_index == index,
                _M.number == number,
                _M.stage == stage,
                _M.direction == "down",
            )
        ).all()
        return {int(i): str(d) for i, d in rows}

    def addressed(
        self, run_id: str, index: int, number: int, stage: int, client_index: int
    ) -> bool:
        """See :meth:`SecureQueries.addressed`."""
        key = {"run_id": run_id, "round_index": index, "number": number, "stage": stage}
        return (
            self.conn.execute(_ADDRESSED, {**key, "client_index": client_index}).first() is not None
        )

    def down_payload(
        self, run_id: str, index: int, number: int, stage: int, client_index: int
    ) -> bytes | None:
        """See :meth:`SecureQueries.down_payload`."""
        key = {"run_id": run_id, "round_index": index, "number": number, "stage": stage}
        got = self.conn.execute(
            _DOWN_PAYLOAD, {**key, "client_index": client_index}
        ).scalar_one_or_none()
        return None if got is None else bytes(got)

    def down_payloads(self, run_id: str, index: int, number: int, stage: int) -> dict[int, bytes]:
        """See :meth:`SecureQueries.down_payloads`."""
        key = {"run_id": run_id, "round_index": index, "number": number, "stage": stage}
        return {int(i): bytes(p) for i, p in self.conn.execute(_DOWN_PAYLOADS, key)}

    def my_messages(
        self, run_id: str, index: int, number: int, stage: int, client_index: int
    ) -> dict[str, str]:
        """See :meth:`SecureQueries.my_messages`."""
        key = {"run_id": run_id, "round_index": index, "number": number, "stage": stage}
        rows = self.conn.execute(_MINE, {**key, "client_index": client_index}).all()
        return {str(d): str(g) for d, g in rows}

    def withholders(self, run_id: str) -> list[str]:
        """See :meth:`SecureQueries.withholders`."""
        w = _WITHHOLDERS.c
        rows = self.conn.execute(
            select(w.client_id).where(w.run_id == run_id).order_by(w.client_id)
        ).all()
        return [str(r[0]) for r in rows]

    def is_withholder(self, task_id: str, client_id: str) -> bool:
        """See :meth:`SecureQueries.is_withholder`."""
        got = self.conn.execute(
            _IS_WITHHOLDER, {"task_id": task_id, "client_id": client_id}
        ).first()
        return got is not None

    def withholders_among(self, task_id: str, client_ids: list[str]) -> set[str]:
        """See :meth:`SecureQueries.withholders_among`."""
        rows = self.conn.execute(
            _WITHHOLDERS_AMONG, {"task_id": task_id, "client_ids": list(client_ids)}
        ).all()
        return {str(r[0]) for r in rows}
