"""The frozen dataclasses the secure query group takes and returns (never ORM rows or bare tuples).

Each is one row, or one view of a row, of the secure path's tables (``run_members``, ``secure_sessions``,
``secure_messages``) as :class:`~fedstats.service.store.secure.SecureQueries` returns it, in memory and in
SQL alike.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EnrolledRow",
    "MemberRow",
    "OpenSession",
    "SecureSessionRow",
    "SessionStage",
    "StageActivity",
    "UpMessage",
]


@dataclass(frozen=True)
class MemberRow:
    """A run's member (``run_members`` row) as the secure path reads it.

    Attributes
    ----------
    client_id : str
    slot_start, slot_count : int
        Its slots ``[slot_start, slot_start + slot_count)``.
    commitment, reveal : str or None
        The seed commitment sent at check-in and the value revealed (hex); None before.
    reveal_signature : str or None
        A tree run's committee member's signature over its reveal (hex); None otherwise.
    """

    client_id: str
    slot_start: int
    slot_count: int
    commitment: str | None
    reveal: str | None
    reveal_signature: str | None = None


@dataclass(frozen=True)
class EnrolledRow:
    """An enrolled device's key and certificate (``clients`` columns).

    Attributes
    ----------
    id : str
    public_key : str
        Ed25519 public key (hex).
    certificate : str or None
        The enrollment certificate (JSON); None if enrolled before certificates were kept.
    """

    id: str
    public_key: str
    certificate: str | None


@dataclass(frozen=True)
class SecureSessionRow:
    """One secure session of a secure round (``secure_sessions`` row).

    Attributes
    ----------
    run_id : str
    round_index, number : int
        The round, and the session within it.
    members : str
        JSON list of client ids in roster order.
    params : str
        JSON of the session's :class:`~fedstats.secagg.params.SecAggParameters`.
    session : str
        Hex session id.
    stage : int
        Index into :data:`fedstats.wire.seeding.STAGES`.
    deadline : float
        Unix seconds.
    status : str
        ``open``, ``done`` or ``aborted``.
    total : str or None
        The session's sum (:func:`fedstats.wire.dumps`), once done.
    n_records : int or None
    included : str or None
        JSON roster indices of the members in the sum.
    error : str or None
        Why it aborted.
    """

    run_id: str
    round_index: int
    number: int
    members: str
    params: str
    session: str
    stage: int
    deadline: float
    status: str
    total: str | None = None
    n_records: int | None = None
    included: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class OpenSession:
    """An open session of a round as a device's work list needs it: its number, stage and deadline."""

    number: int
    stage: int
    deadline: float


@dataclass(frozen=True)
class SessionStage:
    """A session's status (``open``, ``done``, ``aborted``) and current stage."""

    status: str
    stage: int


@dataclass(frozen=True)
class StageActivity:
    """The devices' messages journaled at a stage: how many, and the newest one's time (Unix s) or None."""

    count: int
    newest: float | None


@dataclass(frozen=True)
class UpMessage:
    """A device's journaled stage message.

    Attributes
    ----------
    client_index : int
        The sender's roster index.
    payload : bytes
    """

    client_index: int
    payload: bytes
