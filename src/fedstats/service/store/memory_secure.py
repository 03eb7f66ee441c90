"""The secure query group on Python containers, with the semantics of the SQL stores.

Same answers as :class:`~fedstats.service.store.secure.SqlSecureQueries`: sessions and their message
journal keyed like the tables' primary keys (a second message with the same key raises
:class:`sqlalchemy.exc.IntegrityError`, as the databases do; :meth:`MemorySecureQueries.add_up_message_once`
answers the stored digest instead), the same orderings and counts.
"""

from __future__ import annotations

from typing import Any

from fedstats.service.store.memory_tables import MemoryTables, Row
from fedstats.service.store.secure import (
    EnrolledRow,
    MemberRow,
    OpenSession,
    SecureQueries,
    SecureSessionRow,
    SessionStage,
    StageActivity,
    UpMessage,
)

__all__ = ["MemorySecureQueries"]

_SESSION_FIELDS = tuple(SecureSessionRow.__dataclass_fields__)


def _member(m: Row) -> MemberRow:
    return MemberRow(
        str(m.client_id),
        int(m.slot_start),
        int(m.slot_count),
        m.commitment,
        m.reveal,
        m.__dict__.get("reveal_signature"),
    )


def _session(r: Row) -> SecureSessionRow:
    values = r.__dict__
    return SecureSessionRow(**{f: values[f] for f in _SESSION_FIELDS})


class MemorySecureQueries(MemoryTables, SecureQueries):
    """:class:`~fedstats.service.store.secure.SecureQueries` on in-memory tables (``self.data``)."""

    def _messages(
        self, run_id: str, index: int, number: int, stage: int, direction: str
    ) -> list[Row]:
        """A stage's journaled messages in one direction, by client index."""
        got = [
            m
            for (rid, i, n, s, d, _c), m in self._t("secure_messages").items()
            if rid == run_id and i == index and n == number and s == stage and d == direction
        ]
        return sorted(got, key=lambda m: int(m.client_index))

    def _message(
        self, run_id: str, index: int, number: int, stage: int, direction: str, client_index: int
    ) -> Row | None:
        key = (run_id, index, number, stage, direction, client_index)
        return self._t("secure_messages").get(key)

    def members_in_order(self, run_id: str) -> list[MemberRow]:
        """See :meth:`SecureQueries.members_in_order`."""
        got = [m for (rid, _c), m in self._t("run_members").items() if rid == run_id]
        return [_member(m) for m in sorted(got, key=lambda m: int(m.slot_start))]

    def member_row(self, run_id: str, client_id: str) -> MemberRow | None:
        """See :meth:`SecureQueries.member_row`."""
        m = self._t("run_members").get((run_id, client_id))
        return None if m is None else _member(m)

    def member_rows(self, run_id: str, client_ids: list[str]) -> dict[str, MemberRow]:
        """See :meth:`SecureQueries.member_rows`."""
        members = self._t("run_members")
        got = {c: members.get((run_id, c)) for c in client_ids}
        return {c: _member(m) for c, m in got.items() if m is not None}

    def unrevealed(self, run_id: str) -> int:
        """See :meth:`SecureQueries.unrevealed`."""
        return sum(
            1
            for (rid, _c), m in self._t("run_members").items()
            if rid == run_id and m.reveal is None
        )

    def enrolled(self, client_ids: list[str]) -> list[EnrolledRow]:
        """See :meth:`SecureQueries.enrolled` (a missing device raises :class:`KeyError`)."""
        clients = self._t("clients")
        out = []
        for cid in client_ids:
            c = clients[cid]
            out.append(EnrolledRow(str(c.id), str(c.public_key), c.certificate))
        return out

    def round_dim(self, run_id: str, index: int) -> int | None:
        """See :meth:`SecureQueries.round_dim`."""
        r = self._t("rounds").get((run_id, index))
        return None if r is None else int(r.dim)

    def secure_sessions(self, run_id: str, index: int) -> list[SecureSessionRow]:
        """See :meth:`SecureQueries.secure_sessions`."""
        got = [
            s
            for (rid, i, _n), s in self._t("secure_sessions").items()
            if rid == run_id and i == index
        ]
        return [_session(s) for s in sorted(got, key=lambda s: int(s.number))]

    def secure_session(
        self,
        run_id: str,
        index: int,
        number: int,
        *,
        lock: bool = False,  # noqa: ARG002 - transactions are serialized
    ) -> SecureSessionRow | None:
        """See :meth:`SecureQueries.secure_session`."""
        s = self._t("secure_sessions").get((run_id, index, number))
        return None if s is None else _session(s)

    def update_secure_session(self, run_id: str, index: int, number: int, **values: Any) -> None:
        """See :meth:`SecureQueries.update_secure_session`."""
        self._set("secure_sessions", (run_id, index, number), values)

    def open_secure_sessions(self, run_id: str, index: int) -> list[OpenSession]:
        """See :meth:`SecureQueries.open_secure_sessions`."""
        return [
            OpenSession(s.number, s.stage, s.deadline)
            for s in self.secure_sessions(run_id, index)
            if s.status == "open"
        ]

    def session_stage(
        self,
        run_id: str,
        index: int,
        number: int,
        *,
        shared: bool = False,  # noqa: ARG002 - transactions are serialized
    ) -> SessionStage | None:
        """See :meth:`SecureQueries.session_stage`."""
        s = self._t("secure_sessions").get((run_id, index, number))
        return None if s is None else SessionStage(str(s.status), int(s.stage))

    def count_messages(
        self, run_id: str, index: int, number: int, stage: int, direction: str
    ) -> int:
        """See :meth:`SecureQueries.count_messages`."""
        return len(self._messages(run_id, index, number, stage, direction))

    def up_activity(self, run_id: str, index: int, number: int, stage: int) -> StageActivity:
        """See :meth:`SecureQueries.up_activity`."""
        ups = self._messages(run_id, index, number, stage, "up")
        return StageActivity(len(ups), max((float(m.created_at) for m in ups), default=None))

    def up_messages(self, run_id: str, index: int, number: int, stage: int) -> list[UpMessage]:
        """See :meth:`SecureQueries.up_messages`."""
        return [
            UpMessage(int(m.client_index), bytes(m.payload))
            for m in self._messages(run_id, index, number, stage, "up")
        ]

    def up_indices(self, run_id: str, index: int, number: int, stage: int) -> list[int]:
        """See :meth:`SecureQueries.up_indices`."""
        return sorted(
            int(m.client_index) for m in self._messages(run_id, index, number, stage, "up")
        )

    def down_digests(self, run_id: str, index: int, number: int, stage: int) -> dict[int, str]:
        """See :meth:`SecureQueries.down_digests`."""
        return {
            int(m.client_index): str(m.digest)
            for m in self._messages(run_id, index, number, stage, "down")
        }

    def addressed(
        self, run_id: str, index: int, number: int, stage: int, client_index: int
    ) -> bool:
        """See :meth:`SecureQueries.addressed`."""
        return self._message(run_id, index, number, stage, "down", client_index) is not None

    def down_payload(
        self, run_id: str, index: int, number: int, stage: int, client_index: int
    ) -> bytes | None:
        """See :meth:`SecureQueries.down_payload`."""
        m = self._message(run_id, index, number, stage, "down", client_index)
        return None if m is None else bytes(m.payload)

    def down_payloads(self, run_id: str, index: int, number: int, stage: int) -> dict[int, bytes]:
        """See :meth:`SecureQueries.down_payloads`."""
        return {
            int(m.client_index): bytes(m.payload)
            for m in self._messages(run_id, index, number, stage, "down")
        }

    def my_messages(
        self, run_id: str, index: int, number: int, stage: int, client_index: int
    ) -> dict[str, str]:
        """See :meth:`SecureQueries.my_messages`."""
        out = {}
        for direction in ("down", "up"):
            m = self._message(run_id, index, number, stage, direction, client_index)
            if m is not None:
                out[direction] = str(m.digest)
        return out

    def withholders(self, run_id: str) -> list[str]:
        """See :meth:`SecureQueries.withholders`."""
        return sorted(c for (_t, c, rid) in self._t("secure_withholders") if rid == run_id)

    def is_withholder(self, task_id: str, client_id: str) -> bool:
        """See :meth:`SecureQueries.is_withholder`."""
        return any(t == task_id and c == client_id for (t, c, _r) in self._t("secure_withholders"))

    def withholders_among(self, task_id: str, client_ids: list[str]) -> set[str]:
        """See :meth:`SecureQueries.withholders_among`."""
        ids = set(client_ids)
        return {c for (t, c, _r) in self._t("secure_withholders") if t == task_id and c in ids}
