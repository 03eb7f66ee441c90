"""Secure runs, the devices' side of the server: the seed transcript, reveals, and stage messages.

The requests of :mod:`fedstats.service.http.secure` land here (one transaction each); the session state machines that
consume the stored messages are in :mod:`.secure`.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from fedstats.errors import DataError, ParameterError, SecurityError
from fedstats.secagg.messages import max_message_bytes
from fedstats.service.domain import secure_tree
from fedstats.service.domain.batched import batch_member, note_member, write_later
from fedstats.service.domain.secure import (
    BITS,
    STAGES,
    UP_MESSAGES,
    digest_of,
    enrolled_rows,
    ordered_members,
    parameters_of,
)
from fedstats.service.domain.tasks import ConflictError, NotFoundError
from fedstats.service.store import State
from fedstats.service.store.rows import RoundRow, RunRow
from fedstats.service.store.secure import MemberRow, SecureSessionRow
from fedstats.wire import seeding

__all__ = [
    "cached_certificates",
    "cached_certificates_json",
    "cached_down",
    "cached_member",
    "certificates",
    "down_message",
    "forget_run",
    "forget_sessions",
    "forget_stage",
    "held_down",
    "known_member",
    "member_of",
    "prime_stage",
    "probe_stage",
    "publish_downs",
    "record_reveal",
    "screen_up",
    "secure_work",
    "seed_reveals",
    "seed_transcript",
    "session_member",
    "stage_known",
    "stage_pending",
    "submit_up",
    "submit_up_at",
]


def member_of(
    tx: State, run_id: str, client_id: str, held: dict[Any, Any] | None = None
) -> MemberRow:
    """The device's membership row in a run.

    ``held``: a batch's shared dict (:mod:`.batched`): the rows of all its devices are read once.

    Raises
    ------
    SecurityError
        If the device is not in the run's cohort.
    """
    m = batch_member(tx, run_id, client_id, held)
    if m is None:
        raise SecurityError("this client is not in the run's cohort")
    return m


# a seeding run's commitment list and its digest: fixed once check-in closed, read once per process
_COMMITMENTS: dict[str, tuple[list[list[Any]], str]] = {}
# a seeded run's cohort (client ids): fixed, so a member's request for the reveals needs no transaction
_COHORTS: dict[str, frozenset[str]] = {}


def cached_member(run_id: str, client_id: str) -> bool:
    """Whether this process already knows ``client_id`` to be in the (fixed) cohort of ``run_id``."""
    return client_id in _COHORTS.get(run_id, ())


def _commitment_list(tx: State, run: RunRow) -> tuple[list[list[Any]], str]:
    """The commitment list in slot order, reveals withheld, and its digest (slots and roster included).

    Each member is ``[client_id, commitment, "", slot_start, slot_count, identity_key]``: the keys are
    the run's roster, committed once per run (every session's roster is its members' keys); the digest
    is :func:`fedstats.wire.seeding.commitments_digest` with the keys.
    """
    got = _COMMITMENTS.get(run.id)
    if got is None:
        rows = ordered_members(tx, run.id)
        keys = [c.public_key for c in enrolled_rows(tx, [m.client_id for m in rows])]
        members: list[list[Any]] = [
            [m.client_id, m.commitment or "", "", m.slot_start, m.slot_count, key]
            for m, key in zip(rows, keys, strict=True)
        ]
        got = (
            members,
            seeding.commitments_digest(
                run.id, [(c, m, a, n) for c, m, _, a, n, _ in members], keys
            ),
        )
        if run.status == "seeding":  # the cohort is fixed
            if len(_COMMITMENTS) > 100:
                _COMMITMENTS.clear()
            _COMMITMENTS[run.id] = got
    return got


def seed_transcript(tx: State, run: RunRow) -> dict[str, Any]:
    """The published seed transcript: members in slot order with commitment, reveal and slots, and the seed.

    Each member is ``[client_id, commitment, reveal, slot_start, slot_count]``: the slots are the cohort
    the devices derive every secure session from (:func:`fedstats.wire.seeding.sessions_of`), bound by
    the digest each member revealed with. Before the seed is fixed the reveals are withheld (empty
    strings): a device needs only the commitment list to reveal, and no member sees the others'
    contributions before it has revealed its own. While the run is ``seeding`` that list is fixed, so it
    is read from the store once per process (every member asks for it).
    """
    if run.public_seed is None:
        members, digest = _commitment_list(tx, run)
        return {
            "members": members,
            "commitments_digest": digest,
            "seed": None,
            "status": run.status,
        }
    rows = ordered_members(tx, run.id)
    entries = [(m.client_id, m.commitment or "", m.slot_start, m.slot_count) for m in rows]
    keys = [c.public_key for c in enrolled_rows(tx, [m.client_id for m in rows])]
    return {
        "members": [
            [m.client_id, m.commitment or "", m.reveal or "", m.slot_start, m.slot_count, key]
            for m, key in zip(rows, keys, strict=True)
        ],
        "commitments_digest": seeding.commitments_digest(run.id, entries, keys),
        "seed": run.public_seed,
        "status": run.status,
    }


def seed_reveals(tx: State, run: RunRow) -> dict[str, Any]:
    """The fixed seed and every member's reveal, in the commitment list's (slot) order.

    What a member that revealed needs besides the list it saw (:func:`seed_transcript` without the
    list). Only for a run whose seed is fixed.
    """
    assert run.public_seed is not None
    rows = ordered_members(tx, run.id)
    if len(_COHORTS) > 100:
        _COHORTS.clear()
    _COHORTS[run.id] = frozenset(m.client_id for m in rows)
    return {
        "seed": run.public_seed,
        "reveals": [m.reveal or "" for m in rows],
        "status": run.status,
    }


def record_reveal(
    tx: State,
    run: RunRow,
    client_id: str,
    value_hex: str,
    seen_digest: str,
    held: dict[Any, Any] | None = None,
) -> bool:
    """Store a member's reveal; return False for an identical repeat.

    ``held``: shared by the reveals of one transaction (:mod:`.batched`): the member rows of its
    devices are read once, by the first, and the reveals written together.

    Raises
    ------
    ConflictError
        The run is not collecting reveals, or a different value was revealed before.
    SecurityError
        Not a member, the value does not open the commitment, or the device saw another commitment list.
    """
    m = member_of(tx, run.id, client_id, held)
    if m.reveal is not None:
        if m.reveal == value_hex:
            return False
        raise ConflictError("a different value was already revealed")
    if run.status != "seeding":
        raise ConflictError(f"run {run.id} is not collecting reveals (status {run.status})")
    try:
        value = bytes.fromhex(value_hex)
    except ValueError:
        raise DataError("the revealed value must be hex") from None
    if m.commitment is None or seeding.commitment(run.id, client_id, value) != m.commitment:
        raise SecurityError("the revealed value does not open this client's commitment")
    if _commitment_list(tx, run)[1] != seen_digest:
        raise SecurityError("the commitment list this client saw is not the run's")
    if not write_later(held, "reveals", (run.id, client_id, value_hex), tx.set_reveals):
        tx.set_reveal(run.id, client_id, value_hex)
    note_member(held, run.id, client_id, (m.slot_start, m.slot_count), m.commitment, value_hex)
    return True


def _session_of(tx: State, run_id: str, index: int, number: int) -> SecureSessionRow:
    row = tx.secure_session(run_id, index, number)
    if row is None:
        raise NotFoundError(f"no secure session {number} in round {index} of run {run_id!r}")
    return row


# a session's members never change once it is stored: each session's member -> index map is parsed once
# (a 1000-member session is asked about by every member at every poll and stage)
_MEMBERS: dict[tuple[str, int, int], dict[str, int]] = {}


def _members(row: SecureSessionRow) -> dict[str, int]:
    key = (row.run_id, row.round_index, row.number)
    got = _MEMBERS.get(key)
    if got is None:
        got = {cid: i for i, cid in enumerate(json.loads(row.members))}
        if len(_MEMBERS) > 1024:
            _MEMBERS.clear()
        _MEMBERS[key] = got
    return got


def _index_in(members: dict[str, int], client_id: str) -> int:
    i = members.get(client_id)
    if i is None:
        raise SecurityError("this client is not in the session")
    return i


def _position(row: SecureSessionRow, client_id: str) -> int:
    return _index_in(_members(row), client_id)


_LIMITS: dict[tuple[str, int, int, int], int] = {}


def _limit(tx: State, run_id: str, index: int, number: int, stage: int) -> int:
    """The largest stage message the protocol allows in a session (computed once per stage)."""
    key = (run_id, index, number, stage)
    got = _LIMITS.get(key)
    if got is None:
        p = parameters_of(_session_of(tx, run_id, index, number))
        dim = tx.round_dim(run_id, index)
        assert dim is not None
        got = max_message_bytes(UP_MESSAGES[stage], n=p.n, k=p.k, length=dim, bits=BITS)
        if len(_LIMITS) > 4096:
            _LIMITS.clear()
        _LIMITS[key] = got
    return got


def session_member(tx: State, run_id: str, index: int, number: int, client_id: str) -> int:
    """The device's index in a session.

    Raises
    ------
    NotFoundError
        No such session.
    SecurityError
        The device is not one of its members.
    """
    return _position(_session_of(tx, run_id, index, number), client_id)


def _members_of(tx: State, run_id: str, index: int, number: int) -> dict[str, int]:
    """A session's member -> index map (parsed once per process: members never change)."""
    got = _MEMBERS.get((run_id, index, number))
    if got is None:
        got = _members(_session_of(tx, run_id, index, number))
    return got


# a stage's messages to the devices are journaled in one transaction (the one that opens the stage) and
# never change: the first device that asks after that loads all of them with one query, every other
# device of the session is answered from memory (per process; a few recent stages are kept)
_DOWNS: dict[tuple[str, int, int, int], dict[int, bytes]] = {}
_DOWN_STAGES_KEPT = 16


def _stage_downs(
    tx: State, run_id: str, index: int, number: int, stage: int
) -> dict[int, bytes] | None:
    """Every server message of a session's stage, ``client_index -> payload``; None before it opened.

    One query per stage and process: the stage's messages are inserted together when it opens, so a
    non-empty answer is the whole stage.
    """
    key = (run_id, index, number, stage)
    got = _DOWNS.get(key)
    if got is None:
        got = tx.down_payloads(run_id, index, number, stage)
        if not got:
            return None  # not open yet (or a session without messages): asked again later
        _keep_downs(key, got)
    return got


def _keep_downs(key: tuple[str, int, int, int], downs: dict[int, bytes]) -> None:
    """Keep a stage's messages in this process's memory (:data:`_DOWNS`)."""
    # a session's earlier stages are closed: their messages (n per stage, the unmask requests
    # O(n) each) are not kept beside the open stage's (a late request for one reads the store).
    # list(_DOWNS): a snapshot taken at once (store threads and the driver's thread change it)
    for old in [k for k in list(_DOWNS) if k[:3] == key[:3] and k[3] < key[3]]:
        _DOWNS.pop(old, None)
    if key in _DOWNS:
        return
    while len(_DOWNS) >= _DOWN_STAGES_KEPT:
        with contextlib.suppress(StopIteration, KeyError):
            _DOWNS.pop(next(iter(list(_DOWNS))))
    _DOWNS[key] = downs


def forget_stage(key: tuple[str, int, int, int]) -> None:
    """Let go of the messages of a session's stage that is closing: ``(run_id, round, number, stage)``.

    Called by the run driver (:class:`fedstats.service.domain.secure.SessionCache`) before it computes
    the next stage's messages, so that the closing stage's (n messages, the key broadcasts O(n k) bytes)
    are not held beside them; a device that still asks for one is answered from the store.
    """
    _DOWNS.pop(key, None)


def forget_sessions(sessions: list[tuple[str, int, int]]) -> None:
    """Release what this process keeps of sessions that ended: ``(run_id, round, number)`` each.

    Their stages' messages (the last stage's unmask requests are ``O(n k)`` bytes), members, size limits
    and certificates, kept for the requests of their open stages, are not needed once the driver
    journaled their sums (committed; a late request reads the store and is answered as before).
    """
    for sess in sessions:
        for key in [k for k in list(_DOWNS) if k[:3] == sess]:
            _DOWNS.pop(key, None)
        for lkey in [k for k in list(_LIMITS) if k[:3] == sess]:
            _LIMITS.pop(lkey, None)
        _MEMBERS.pop(sess, None)
        _CERTIFICATES.pop(sess, None)
        _CERTIFICATE_JSON.pop(sess, None)


def forget_run(run_id: str) -> None:
    """Release what this process keeps of a run that is over (or whose lease it gave up).

    Its seed transcript's commitment list and cohort, and its sessions' caches
    (:func:`forget_sessions`); a later request reads the store, as in another process.
    """
    _COMMITMENTS.pop(run_id, None)
    _COHORTS.pop(run_id, None)
    secure_tree.forget(run_id)
    keys = {k[:3] for cache in (_DOWNS, _LIMITS) for k in list(cache) if k[0] == run_id}
    keys |= {
        k
        for cache in (_MEMBERS, _CERTIFICATES, _CERTIFICATE_JSON)
        for k in list(cache)
        if k[0] == run_id
    }
    forget_sessions(sorted(keys))


def publish_downs(journaled: list[tuple[tuple[str, int, int, int], dict[int, bytes]]]) -> None:
    """Serve the stages the run driver of this process just journaled from the bytes it journaled.

    ``journaled`` is :meth:`fedstats.service.domain.secure.SessionCache.take_journaled` after the
    driver's transaction **committed** (never before: a rolled-back stage must not be served). Each
    entry is ``((run_id, round, session, stage), client_index -> payload)``, the whole stage as inserted
    (a stage's messages are inserted together), so the first device that asks is answered from these
    bytes instead of a read of the stage's ``n`` messages back from the store (a second copy of them).
    """
    for key, downs in journaled:
        if downs:
            _keep_downs(key, downs)


def secure_work(tx: State, run_id: str, rec: RoundRow, client_id: str) -> dict[str, Any] | None:
    """The stage a device's session is at in a secure round, if the device is addressed there, else None.

    The stage stays listed after the device answered it (the device remembers what it sent). One small
    statement (the round's open sessions, key columns); whether the device was sent a message at its
    session's current stage is read from the stage's messages, loaded once per stage and process. At
    stage 0 the entry carries the device's setup message (``"message"``, hex): the device checks it
    as if it had fetched it (``GET .../0``), one request per round fewer.
    """
    for open_session in tx.open_secure_sessions(run_id, rec.index):
        number, stage, deadline = open_session.number, open_session.stage, open_session.deadline
        members = _members_of(tx, run_id, rec.index, number)
        i = members.get(client_id)
        if i is None:
            continue
        downs = _stage_downs(tx, run_id, rec.index, number, stage)
        if downs is None or i not in downs:  # a dropout for the protocol
            return None
        # listed until the stage closes, answered or not: the device's answer does not change its work
        # list, so its next long poll waits for the next stage instead of returning at once
        work: dict[str, Any] = {
            "session": number,
            "stage": stage,
            "stage_name": STAGES[stage],
            "index": i,
            "n": len(members),
            "deadline": deadline,
        }
        if stage == 0:
            # the setup message (a few dozen bytes) rides along: the device need not ask for it
            work["message"] = downs[i].hex()
            proof = secure_tree.range_proof(tx, run_id, rec)  # a tree run's round over part of it
            if proof is not None:
                work["range_proof"] = proof
        return work
    return None


def cached_down(run_id: str, index: int, number: int, stage: int, client_id: str) -> bytes | None:
    """The device's stage message from this process's memory alone, or None (then ask the store).

    Both a session's members and a stage's messages never change once stored, so once they are cached
    (:func:`down_message` filled them) a device's message is served without a transaction. None also
    when the device is not a member or has no message there: :func:`down_message` then says why.
    """
    members = _MEMBERS.get((run_id, index, number))
    downs = _DOWNS.get((run_id, index, number, stage))
    if members is None or downs is None:
        return None
    i = members.get(client_id)
    return None if i is None else downs.get(i)


def down_message(
    tx: State, run_id: str, index: int, number: int, stage: int, client_id: str
) -> bytes:
    """The server's stage message to one device.

    Raises
    ------
    NotFoundError
        No such session, or no message for this device at that stage (it dropped, or not yet).
    SecurityError
        The device is not a member of the session.
    """
    i = _index_in(_members_of(tx, run_id, index, number), client_id)
    downs = _stage_downs(tx, run_id, index, number, stage)
    payload = None if downs is None else downs.get(i)
    if payload is None:
        raise NotFoundError(f"no stage {stage} message for this client in session {number}")
    return payload


def held_down(
    tx: State, run_id: str, index: int, number: int, stage: int, client_id: str
) -> bytes | None:
    """:func:`down_message` for a held request: None (not an error) while the stage has not opened.

    A stage this process has not seen open costs one small statement (the session's stage) while it
    is not open, instead of a read of its messages and then of the stage.

    Raises
    ------
    NotFoundError
        No such session, or the stage opened without a message for this device (a dropout).
    SecurityError
        The device is not a member of the session.
    """
    _index_in(_members_of(tx, run_id, index, number), client_id)
    if (run_id, index, number, stage) not in _DOWNS and stage_pending(
        tx, run_id, index, number, stage
    ):
        return None
    return down_message(tx, run_id, index, number, stage, client_id)


def known_member(run_id: str, index: int, number: int, client_id: str) -> bool:
    """Whether this process already knows ``client_id`` to be a member of the session (from memory)."""
    members = _MEMBERS.get((run_id, index, number))
    return members is not None and client_id in members


def probe_stage(tx: State, run_id: str, index: int, number: int, stage: int) -> str:
    """Look once whether a session's stage has opened, caching its messages if it has.

    One look answers every held request of the session (:func:`cached_down` then serves them).

    Returns
    -------
    str
        ``"pending"`` (the session is open and before ``stage``), ``"open"`` (its messages are now in
        this process's memory), or ``"unknown"`` (no such session, or closed without the stage: ask
        :func:`held_down`, which says why).
    """
    if (run_id, index, number, stage) in _DOWNS:
        return "open"
    if stage_pending(tx, run_id, index, number, stage):
        return "pending"
    _members_of(tx, run_id, index, number)
    return "open" if _stage_downs(tx, run_id, index, number, stage) is not None else "unknown"


def stage_pending(tx: State, run_id: str, index: int, number: int, stage: int) -> bool:
    """Whether a session is still open and has not reached ``stage`` yet (its messages may still come).

    ``tx`` and the session (``run_id``, round ``index``, ``number``) as in :func:`certificates`;
    ``stage`` indexes :data:`fedstats.wire.seeding.STAGES`. False also when there is no such session.
    """
    got = tx.session_stage(run_id, index, number)
    return got is not None and got.status == "open" and got.stage < stage


def screen_up(
    run_id: str, index: int, number: int, stage: int, client_id: str, data: bytes
) -> tuple[int, str] | None:
    """A stage message's sender index and digest if this process can vouch for it without a read, else None.

    :func:`prime_stage` fills what it needs (once per stage and process).

    The checks of :func:`submit_up_at`'s common path from what this process already holds (the
    session's members, the stage's messages to the devices, the stage's size limit): the sender is a
    member addressed at this stage and the message is within the limit. Whether the session is still
    open at the stage is left to the write (:meth:`~fedstats.service.store.secure.SecureQueries.put_up_messages`
    share-locks the session row); None sends the message down :func:`submit_up_at`, which answers
    exactly.
    """
    members = _MEMBERS.get((run_id, index, number))
    downs = _DOWNS.get((run_id, index, number, stage))
    limit = _LIMITS.get((run_id, index, number, stage))
    if members is None or downs is None or limit is None or len(data) > limit:
        return None
    i = members.get(client_id)
    if i is None or i not in downs:
        return None
    return i, digest_of(data)


def stage_known(run_id: str, index: int, number: int, stage: int) -> bool:
    """Whether this process holds all :func:`screen_up` needs of a session's stage (see :func:`prime_stage`)."""
    key = (run_id, index, number, stage)
    return key in _LIMITS and key in _DOWNS and (run_id, index, number) in _MEMBERS


def prime_stage(tx: State, run_id: str, index: int, number: int, stage: int) -> None:
    """Load what :func:`screen_up` needs of a session's stage into this process's memory, if it can.

    The session's members, the stage's messages to the devices (once it opened) and its size limit: the
    first batch of a stage's messages is then screened from memory like the later ones, instead of
    taking the exact path one transaction per message. Nothing is loaded for an unknown session or a
    stage not open yet (their messages take the exact path, which says why).
    """
    if stage_known(run_id, index, number, stage):
        return
    if tx.secure_session(run_id, index, number) is None:
        return
    _members_of(tx, run_id, index, number)
    if _stage_downs(tx, run_id, index, number, stage) is not None:
        _limit(tx, run_id, index, number, stage)


def submit_up(
    tx: State, run_id: str, index: int, number: int, stage: int, client_id: str, data: bytes
) -> bool:
    """Journal one device's stage message; return False for an identical repeat (idempotent).

    :func:`submit_up_at` without its second answer.
    """
    return submit_up_at(tx, run_id, index, number, stage, client_id, data)[0]


def submit_up_at(
    tx: State, run_id: str, index: int, number: int, stage: int, client_id: str, data: bytes
) -> tuple[bool, bool]:
    """Journal one device's stage message; return whether it is new, and whether the stage was open.

    The second answer is True when the message was stored while the session was open at ``stage``
    (its row read ``FOR SHARE`` in this transaction): the next stage cannot have opened before this
    transaction commits, so a request held for it need not look before the next state change.

    The message is checked by the protocol only when the stage closes (a refused message makes its sender a
    dropout); here only its stage, its sender and its size are.

    Raises
    ------
    NotFoundError, SecurityError
        As :func:`down_message`; the device was not addressed at this stage.
    ConflictError
        The stage is closed, or different bytes were already stored for it.
    DataError
        The message is larger than the protocol allows.
    """
    # the session row FOR SHARE: the driver closing this stage (FOR UPDATE) waits for this insert
    got = tx.session_stage(run_id, index, number, shared=True)
    if got is None:
        raise NotFoundError(f"no secure session {number} in round {index} of run {run_id!r}")
    status, current = got.status, got.stage
    i = _index_in(_members_of(tx, run_id, index, number), client_id)
    digest = digest_of(data)
    if status == "open" and current == stage:
        downs = _stage_downs(tx, run_id, index, number, stage)
        if (
            downs is not None
            and i in downs
            and len(data) <= _limit(tx, run_id, index, number, stage)
        ):
            # the common case, one statement: stored now, or the same (a repeat) or other bytes before
            stored = tx.add_up_message_once(
                run_id, index, number, stage, i, data, digest, time.time()
            )
            if stored is None:
                return True, True
            if stored == digest:
                return False, True
            raise ConflictError(
                f"a different stage {stage} message from this client is already stored"
            )
    mine = tx.my_messages(run_id, index, number, stage, i)
    if "up" in mine:
        if mine["up"] == digest:
            return False, status == "open" and current == stage
        raise ConflictError(f"a different stage {stage} message from this client is already stored")
    if status != "open" or current != stage:
        raise ConflictError(f"stage {stage} of secure session {number} is closed")
    if "down" not in mine:
        raise SecurityError("this client was not addressed at this stage (a dropout)")
    limit = _limit(tx, run_id, index, number, stage)
    if len(data) > limit:
        raise DataError(f"stage {stage} message of {len(data)} bytes exceeds the limit {limit}")
    tx.add_up_message(run_id, index, number, stage, i, data, digest, time.time())
    return True, True


# a session's certificates never change once it is stored: parsed once per process
_CERTIFICATES: dict[tuple[str, int, int], list[Any]] = {}


def cached_certificates(
    run_id: str, index: int, number: int, client_id: str, indices: list[int]
) -> list[Any] | None:
    """:func:`certificates` of ``indices`` from this process's memory alone, or None (ask the store).

    None also when the device is not a member or a position is out of range (:func:`certificates` then
    raises the error).
    """
    key = (run_id, index, number)
    members, out = _MEMBERS.get(key), _CERTIFICATES.get(key)
    if members is None or out is None or client_id not in members:
        return None
    if any(not 0 <= j < len(out) for j in indices):
        return None
    return [out[j] for j in indices]


# each cached certificate's JSON, encoded once: a device's answer joins its members' (json.dumps of the
# list, byte for byte, without encoding ~100 certificates per request)
_CERTIFICATE_JSON: dict[tuple[str, int, int], list[bytes]] = {}


def cached_certificates_json(
    run_id: str, index: int, number: int, client_id: str, indices: list[int]
) -> bytes | None:
    """``json.dumps(cached_certificates(...)).encode()``, from encodings made once per certificate.

    None when :func:`cached_certificates` is None.
    """
    key = (run_id, index, number)
    out = _CERTIFICATES.get(key)
    if cached_certificates(run_id, index, number, client_id, []) is None or out is None:
        return None
    if indices and (min(indices) < 0 or max(indices) >= len(out)):
        return None
    encoded = _CERTIFICATE_JSON.get(key)
    if encoded is None or len(encoded) != len(out):
        encoded = [json.dumps(c).encode() for c in out]
        if len(_CERTIFICATE_JSON) > 64:
            _CERTIFICATE_JSON.clear()
        _CERTIFICATE_JSON[key] = encoded
    return b"[" + b", ".join(list(map(encoded.__getitem__, indices))) + b"]"


def certificates(
    tx: State,
    run_id: str,
    index: int,
    number: int,
    client_id: str,
    indices: list[int] | None = None,
) -> list[Any]:
    """The enrollment certificates of a session's members, in roster order (for a member to verify).

    Parameters
    ----------
    tx : State
        An open store transaction.
    run_id : str
    index : int
        The round.
    number : int
        The session within the round.
    client_id : str
        The asking device (a member of the session).
    indices : list of int, optional
        Only the members at these roster positions, in this order (a device asks for its neighbours'
        and a few audited members', not all ``n``); default every member.

    Returns
    -------
    list of dict
        ``{"body", "signature"}`` per member.

    Raises
    ------
    NotFoundError, SecurityError
        As :func:`down_message`.
    ParameterError
        If a member registered without a stored certificate (enrolled before certificates were kept),
        or ``indices`` names a position outside ``[0, n)``.
    """
    row = _session_of(tx, run_id, index, number)
    _position(row, client_id)
    key = (run_id, index, number)
    out = _CERTIFICATES.get(key)
    if out is None:
        out = []
        for c in enrolled_rows(tx, json.loads(row.members)):
            if c.certificate is None:
                raise ParameterError(
                    "certificate", c.id, "a member that registered its certificate"
                )
            out.append(json.loads(c.certificate))
        if len(_CERTIFICATES) > 64:
            _CERTIFICATES.clear()
        _CERTIFICATES[key] = out
    if indices is None:
        return list(out)
    if any(not 0 <= j < len(out) for j in indices):
        raise ParameterError("members", indices, f"roster positions in [0, {len(out)})")
    return [out[j] for j in indices]
