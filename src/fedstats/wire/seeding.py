"""A secure run's public seed: commit at check-in, reveal once the cohort is fixed (both sides).

This module is shared by the server and the devices (it imports nothing heavy).

Secure aggregation needs a session id the server cannot choose: in the malicious-server model it fixes the
communication graph (:func:`fedstats.secagg.graph.public_harary_graph`), and a server free to re-draw it
could place a target's neighbours among clients it controls. FED-chi^2 and FED-H need a projection seed no
party can bias (Pang et al. 2023, Alg. 2, lines 11-12). In a deployment there is no online authority to
draw them, so a secure run derives both from its members (:mod:`fedstats.analyses.seed_agreement` is the
in-process form of the same idea):

1. at check-in each device sends ``c_i = SHA-256(domain || run || client || r_i)`` for 32 secret random
   bytes ``r_i`` and is given its slots (``slot_start``, ``slot_count``: its records' global indices);
   nobody knows the cohort yet;
2. once check-in closes, each device fetches the list of every member's ``(client_id, commitment,
   slot_start, slot_count)`` (the *cohort*) and identity key (the run's *roster*, :func:`keys_of`),
   checks its own entry (its commitment, the slots it was given, its key) and that the slots are
   disjoint and contiguous from 0 (:func:`check_cohort`), and reveals ``r_i``, binding the digest of the
   list it saw (slots and keys included) into its (signed) reveal, so no member can be added, removed,
   moved or re-keyed after any reveal, and every session's roster is fixed once for the run;
3. the run's seed is ``SHA-256(domain || run || digest(list) || r_1 || ... || r_m)`` in slot order, and
   every session id, the projection seed and the partition of each secure round into sessions derive
   from it (:func:`session_id`, :func:`projection_seed`, :func:`sessions_of`).

A member that commits and does not reveal by the deadline is a *withholder*: the transcript names it (an
empty reveal, :func:`withheld_of`), the seed is taken over the others' reveals in its own domain, and the
withholder takes part in no session. The server lets a run go on that way only where the seed chooses
nobody's neighbours (complete-graph sessions); elsewhere a withholder aborts the run, since a server that
hid reveals could choose among many seeds (``docs/secagg.md``, "An abort costs its cause"). Each device
recomputes the seed from the published transcript before it takes part in a secure round
(:func:`verify_transcript`).

**Sessions.** Which devices form each secure session of a round, in which roster order, is not the
server's choice either: :func:`sessions_of` takes the round's participants (the cohort members whose slots
meet the round's client range), orders them by a PRF keyed by the run seed (the same order in every round,
so that no two rounds cut the same participants into different groups), and cuts
that order into ``ceil(d / max_session)`` near-equal sessions, refusing any partition with a session below
the task's ``min_session_size``. Server and devices call the same function; a device takes part only in
the session it derives itself into, with the derived roster order, index and size.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from fedstats.errors import ParameterError, ProtocolAbortError, SecurityError

__all__ = [
    "BITS",
    "CONTRIBUTION_BYTES",
    "STAGES",
    "Entry",
    "Slots",
    "check_cohort",
    "check_own_entry",
    "cohort_of",
    "commitment",
    "commitments_digest",
    "entries_of",
    "keys_of",
    "projection_seed",
    "run_seed",
    "session_bounds",
    "session_id",
    "sessions_of",
    "task_id_bytes",
    "verify_reveals",
    "verify_transcript",
    "withheld_of",
]

Entry = tuple[str, str, int, int]
"""One member of a run's commitment list: ``(client_id, commitment_hex, slot_start, slot_count)``."""
Slots = tuple[str, int, int]
"""One member of a run's verified cohort: ``(client_id, slot_start, slot_count)``."""

CONTRIBUTION_BYTES = 32
BITS = 64
"""Ring width of every secure sum over the network: reports are int64, summed mod 2^64."""
STAGES = ("advertise", "share", "masked_input", "consistency", "unmask")
"""The device stages of a secure session (the ``{stage}`` of its URLs, by index): stage ``s``'s down
message is what a device needs to send its stage-``s`` message."""
_COMMIT = b"fedstats/service/seed-commit/v1\x00"
_LIST = b"fedstats/service/seed-list/v2\x00"
_ROSTER_LIST = b"fedstats/service/seed-list/v3\x00"  # the list with every member's identity key
_SEED = b"fedstats/service/run-seed/v1\x00"
_SEED_WITHHELD = b"fedstats/service/run-seed-withheld/v1\x00"
_SESSION = b"fedstats/service/session/v1\x00"
_PROJECTION = b"fedstats/service/projection/v1\x00"
_ORDER = b"fedstats/service/session-order/v1\x00"


@functools.lru_cache(maxsize=1 << 16)
def _field(text: str) -> bytes:
    # cached: a run's client ids are framed again at every commitment check, digest and session order
    raw = text.encode()
    return struct.pack("<H", len(raw)) + raw


def commitment(run_id: str, client_id: str, value: bytes) -> str:
    """Compute a device's commitment ``SHA-256(domain || run || client || r)`` (hex).

    Parameters
    ----------
    run_id, client_id : str
        The run and the committing device.
    value : bytes
        The device's secret contribution, 32 bytes.

    Returns
    -------
    str
        64 hex digits.

    Raises
    ------
    SecurityError
        If ``value`` is not 32 bytes.
    """
    if len(value) != CONTRIBUTION_BYTES:
        raise SecurityError(f"a seed contribution must be {CONTRIBUTION_BYTES} bytes")
    return hashlib.sha256(_COMMIT + _field(run_id) + _field(client_id) + value).hexdigest()


def commitments_digest(
    run_id: str, entries: Sequence[Entry], keys: Sequence[str] | None = None
) -> str:
    """Digest (hex) of the ordered commitment list a device sees before revealing, slots included.

    Parameters
    ----------
    run_id : str
    entries : sequence of (client_id, commitment_hex, slot_start, slot_count)
        The run's members in slot order.
    keys : sequence of str, optional
        Each member's Ed25519 identity key (64 hex digits), in the same order: the run's **roster**,
        committed once per run. Every secure session's roster is these keys of its members in the
        derived order, so a digest over them (signed into each member's reveal, hashed into the run
        seed) fixes every session's roster before any member reveals. Without ``keys`` the digest is of
        the list alone (another domain).

    Returns
    -------
    str
        64 hex digits.

    Raises
    ------
    SecurityError
        If ``keys`` does not have one 32-byte key (hex) per entry.
    """
    if keys is not None and len(keys) != len(entries):
        raise SecurityError("the run's roster must list one identity key per member")
    h = hashlib.sha256((_LIST if keys is None else _ROSTER_LIST) + _field(run_id))
    h.update(struct.pack("<I", len(entries)))
    parts = []  # hashed in one update: the same bytes as one update per member
    for j, (cid, c, start, count) in enumerate(entries):
        parts.append(_field(cid) + bytes.fromhex(c) + struct.pack("<QQ", int(start), int(count)))
        if keys is not None:
            key = bytes.fromhex(keys[j])
            if len(key) != 32:
                raise SecurityError("a roster identity key must be 32 bytes")
            parts.append(key)
    h.update(b"".join(parts))
    return h.hexdigest()


def check_cohort(entries: Sequence[Entry] | Sequence[Slots]) -> int:
    """Check that the members' slots are disjoint and contiguous from 0, in list order; return their total.

    Parameters
    ----------
    entries : sequence
        ``(client_id, commitment, slot_start, slot_count)`` or ``(client_id, slot_start, slot_count)``
        per member, in slot order.

    Returns
    -------
    int
        ``n_clients``: the number of slots (records) of the cohort.

    Raises
    ------
    SecurityError
        If a client id repeats, a member holds no slot, or the slots leave a gap or overlap.
    """
    used, seen = 0, set()
    for e in entries:
        cid, start, count = str(e[0]), int(e[-2]), int(e[-1])
        if cid in seen:
            raise SecurityError(f"the cohort lists {cid!r} twice")
        seen.add(cid)
        if count < 1 or start != used:
            raise SecurityError(
                f"the cohort's slots are not disjoint and contiguous from 0 at {cid!r} "
                f"(slots [{start}, {start + count}), expected to start at {used})"
            )
        used += count
    return used


def entries_of(transcript: Mapping[str, Any], *, max_members: int | None = None) -> list[Entry]:
    """The commitment list of a published seed transcript, parsed and checked (:func:`check_cohort`).

    Parameters
    ----------
    transcript : mapping
        ``{"members": [[client_id, commitment, reveal, slot_start, slot_count], ...], ...}``.
    max_members : int, optional
        Refuse a longer list (e.g. the task's ``cohort_size``: every member holds at least one slot).

    Raises
    ------
    SecurityError
        If the list is malformed, too long, or its slots are not a partition of ``[0, n)``.
    """
    try:
        rows = transcript["members"]
        if max_members is not None and len(rows) > max_members:
            raise SecurityError(f"the cohort lists {len(rows)} members, more than {max_members}")
        out = []
        for m in rows:
            c = str(m[1])
            if len(c) != 64:
                raise ValueError(c)
            bytes.fromhex(c)
            start, count = m[3], m[4]
            if (
                not (isinstance(start, int) and isinstance(count, int))
                or isinstance(start, bool)
                or isinstance(count, bool)
            ):
                raise TypeError("slots")
            out.append((str(m[0]), c, start, count))
    except (KeyError, TypeError, ValueError, IndexError):
        raise SecurityError("malformed seed transcript") from None
    check_cohort(out)
    return out


def keys_of(transcript: Mapping[str, Any]) -> list[str]:
    """The run's roster: each member's identity key (hex) from a seed transcript, in list order.

    Each member row carries its key as a sixth element (``[client_id, commitment, reveal, slot_start,
    slot_count, key]``).

    Raises
    ------
    SecurityError
        If a row lacks its key, a key is not 32 bytes of hex, or two members share a key.
    """
    try:
        keys = [str(m[5]).lower() for m in transcript["members"]]
        if any(len(k) != 64 for k in keys):
            raise ValueError("key length")
        for k in keys:
            bytes.fromhex(k)
    except (KeyError, TypeError, ValueError, IndexError):
        raise SecurityError(
            "the seed transcript lacks the run's roster (a key per member)"
        ) from None
    if len(set(keys)) != len(keys):
        raise SecurityError("the run's roster lists one identity key twice")
    return keys


def cohort_of(entries: Sequence[Entry]) -> list[Slots]:
    """``(client_id, slot_start, slot_count)`` of each member (the commitments left out)."""
    return [(cid, int(start), int(count)) for cid, _, start, count in entries]


def check_own_entry(
    entries: Sequence[Entry], client_id: str, *, commitment: str, slot_start: int, slot_count: int
) -> None:
    """A device's check of its own entry in the commitment list before it reveals.

    Raises
    ------
    SecurityError
        If its entry is missing, listed twice, or carries another commitment or other slots than the ones
        it was given at check-in.
    """
    mine = [e for e in entries if e[0] == client_id]
    if len(mine) != 1:
        raise SecurityError("the run's commitment list lacks this device's commitment")
    _, c, start, count = mine[0]
    if not hmac.compare_digest(c, commitment):
        raise SecurityError("the run's commitment list lacks this device's commitment")
    if (int(start), int(count)) != (int(slot_start), int(slot_count)):
        raise SecurityError(
            f"the run's commitment list gives this device slots [{start}, {start + count}), not the "
            f"[{slot_start}, {slot_start + slot_count}) it was given at check-in"
        )


def run_seed(
    run_id: str,
    entries: Sequence[Entry],
    reveals: Sequence[bytes | None],
    keys: Sequence[str] | None = None,
) -> bytes:
    """The run's 32-byte public seed from the ordered commitment list and every member's revealed value.

    ``keys``: the run's roster, as in :func:`commitments_digest` (its digest enters the seed). A None
    reveal is a member that withheld (named in the transcript by an empty reveal, :func:`withheld_of`).

    Raises
    ------
    SecurityError
        If a reveal is missing or does not open its commitment.
    """
    return _seed(run_id, entries, reveals, commitments_digest(run_id, entries, keys))


def _seed(
    run_id: str, entries: Sequence[Entry], reveals: Sequence[bytes | None], digest: str
) -> bytes:
    """:func:`run_seed` given the list's digest (computed once by the caller).

    A None reveal is a member that withheld (:func:`withheld_of`): the seed is then taken in another
    domain over the reveals and a marker per member, so that no seed with withholders equals one without.
    """
    if len(reveals) != len(entries):
        raise SecurityError("every member's reveal is needed for the run seed")
    if reveals and all(r is None for r in reveals):
        raise SecurityError("a run seed needs at least one member's reveal")
    prefix = _COMMIT + _field(run_id)  # commitment(), with the run's part framed once
    for (cid, c, _, _), r in zip(entries, reveals, strict=True):
        if r is None:
            continue
        if len(r) != CONTRIBUTION_BYTES:
            raise SecurityError(f"a seed contribution must be {CONTRIBUTION_BYTES} bytes")
        opened = hashlib.sha256(prefix + _field(cid) + r).hexdigest()
        if not hmac.compare_digest(opened, c):
            raise SecurityError(f"the value revealed by {cid!r} does not open its commitment")
    if any(r is None for r in reveals):
        h = hashlib.sha256(_SEED_WITHHELD + _field(run_id) + bytes.fromhex(digest))
        for r in reveals:
            h.update(b"\x00" if r is None else b"\x01" + r)
        return h.digest()
    h = hashlib.sha256(_SEED + _field(run_id) + bytes.fromhex(digest))
    for r in reveals:
        assert r is not None
        h.update(r)
    return h.digest()


def withheld_of(entries: Sequence[Entry], reveals: Sequence[Any]) -> frozenset[str]:
    """The members of a published transcript that withheld their reveal (an empty reveal).

    The server names them once the reveal deadline passed and continues without them
    (:func:`fedstats.service.domain.secure.close_seeding`); they hold their slots but take part in no
    session (:func:`sessions_of` is given the cohort without them).
    """
    return frozenset(
        cid for (cid, _, _, _), r in zip(entries, reveals, strict=True) if not str(r or "")
    )


def session_id(seed: bytes, round_index: int, number: int) -> bytes:
    """The 32-byte id of session ``number`` of round ``round_index``, derived from the run's seed."""
    return hashlib.sha256(_SESSION + seed + struct.pack("<II", round_index, number)).digest()


def session_bounds(n: int, max_session: int) -> list[tuple[int, int]]:
    """Split ``n`` devices into ``ceil(n / max_session)`` contiguous, near-equal sessions ``[a, b)``."""
    k = max(1, math.ceil(n / max_session))
    edges = [round(i * n / k) for i in range(k + 1)]
    return [(edges[i], edges[i + 1]) for i in range(k)]


def sessions_of(
    cohort: Sequence[Slots],
    seed: bytes,
    round_index: int,
    client_range: tuple[int, int],
    max_session: int,
    min_session_size: int,
) -> list[list[str]]:
    """The secure sessions of a round, derived from the verified cohort and the run seed (both sides).

    Parameters
    ----------
    cohort : sequence of (client_id, slot_start, slot_count)
        The run's members (:func:`cohort_of`).
    seed : bytes
        The run's verified seed (32 bytes).
    round_index : int
        The round (>= 0).
    client_range : (int, int)
        The round's global client indices ``[lo, hi)``; its participants are the members whose slots meet
        it.
    max_session : int
        Largest session (>= 2, the task's ``secure_aggregation.max_session``).
    min_session_size : int
        Smallest session allowed (>= 2, the task's ``secure_aggregation.min_session_size``).

    Returns
    -------
    list of list of str
        Session ``number``'s members (client ids) in roster order: the participants ordered by
        ``HMAC-SHA256(seed, domain || client_id)`` (the same order in every round: rounds with the same
        participants have the same sessions), cut into ``k = ceil(d / max_session)``
        near-equal sessions (sizes ``floor(d / k)`` or ``ceil(d / k)``).

    Raises
    ------
    ParameterError
        If ``max_session`` or ``min_session_size`` is below 2, or ``seed`` is not 32 bytes.
    ProtocolAbortError
        If a session would have fewer than ``min_session_size`` members (the round has too few
        participants for the task's minimum): no partition, the round aborts.
    """
    if isinstance(max_session, bool) or int(max_session) < 2:
        raise ParameterError("max_session", max_session, "an integer >= 2")
    if isinstance(min_session_size, bool) or int(min_session_size) < 2:
        raise ParameterError("min_session_size", min_session_size, "an integer >= 2")
    if len(seed) != 32:
        raise ParameterError("seed", seed.hex(), "32 bytes")
    lo, hi = int(client_range[0]), int(client_range[1])
    # keyed by the seed alone, not the round: the same participants form the same sessions in every
    # round, so sums of differently cut groups over rounds cannot be subtracted from each other
    tags = _order_tags(bytes(seed))
    keyed = []
    for cid, start, count in cohort:
        if int(start) < hi and int(start) + int(count) > lo:
            c = str(cid)
            tag = tags.get(c)
            if tag is None:
                tag = tags[c] = hmac.digest(seed, _ORDER + _field(c), "sha256")
            keyed.append((tag, c))
    keyed.sort()
    order = [cid for _, cid in keyed]
    d = len(order)
    bounds = session_bounds(d, int(max_session)) if d else [(0, 0)]
    smallest = min(b - a for a, b in bounds)
    if smallest < int(min_session_size):
        raise ProtocolAbortError(
            f"round {round_index}: {d} participant(s) make a secure session of {smallest}, fewer than "
            f"the task's min_session_size={min_session_size}"
        )
    return [order[a:b] for a, b in bounds]


# seed -> {client_id -> HMAC-SHA256(seed, _ORDER || client_id)}: a pure function of the two, asked for every
# member in every round by the server and by each device (the simulated devices of one process share it)
_ORDER_TAGS: dict[bytes, dict[str, bytes]] = {}
_ORDER_SEEDS_KEPT = 8


def _order_tags(seed: bytes) -> dict[str, bytes]:
    """The remembered order tags of one seed (a few recent seeds are kept)."""
    got = _ORDER_TAGS.get(seed)
    if got is None:
        if len(_ORDER_TAGS) >= _ORDER_SEEDS_KEPT:
            _ORDER_TAGS.clear()
        got = _ORDER_TAGS.setdefault(seed, {})
    return got


def task_id_bytes(run_id: str) -> bytes:
    """The secure-aggregation roster's task id of a run: the run id (its sessions are bound to it)."""
    return run_id.encode()[:64]


def projection_seed(seed: bytes) -> int:
    """The public projection seed of FED-chi^2 / FED-H, an integer in ``[0, 2**256)``."""
    return int.from_bytes(hashlib.sha256(_PROJECTION + seed).digest(), "big")


def verify_transcript(
    run_id: str,
    client_id: str,
    transcript: Mapping[str, Any],
    *,
    seen_digest: str,
    own_value: bytes,
    max_members: int | None = None,
    roster: bool = False,
) -> bytes:
    """A device's check of the published seed transcript; returns the run's seed.

    Parameters
    ----------
    run_id, client_id : str
    transcript : mapping
        The server's ``{"members": [[client_id, commitment, reveal, slot_start, slot_count], ...],
        "seed": hex}``.
    seen_digest : str
        :func:`commitments_digest` of the list this device saw before revealing (slots included).
    own_value : bytes
        This device's contribution.
    max_members : int, optional
        Refuse a longer member list.
    roster : bool, default False
        The transcript carries the run's roster (:func:`keys_of`), covered by the digest and the seed.

    Raises
    ------
    SecurityError
        If the list (or a member's slots or keys) changed since this device revealed, its own entry is missing or
        altered, a reveal does not open its commitment, or the published seed is not the one the
        transcript gives.
    """
    entries = entries_of(transcript, max_members=max_members)
    try:
        reveals = [m[2] for m in transcript["members"]]
        published = transcript["seed"]
    except (KeyError, TypeError, IndexError):
        raise SecurityError("malformed seed transcript") from None
    keys = keys_of(transcript) if roster else None
    digest = commitments_digest(run_id, entries, keys)
    if not hmac.compare_digest(digest, seen_digest):
        raise SecurityError("the run's commitment list changed after this device revealed")
    return verify_reveals(
        run_id, client_id, entries, reveals, published, digest=digest, own_value=own_value
    )


def verify_reveals(
    run_id: str,
    client_id: str,
    entries: Sequence[Entry],
    reveals: Sequence[Any],
    published: Any,
    *,
    digest: str,
    own_value: bytes,
) -> bytes:
    """:func:`verify_transcript` for a device that kept the commitment list it checked and revealed against.

    The list (``entries``, whose :func:`commitments_digest` is ``digest``) is the device's own copy,
    parsed and checked before it revealed: only the reveals and the published seed are new.

    Parameters
    ----------
    run_id, client_id : str
    entries : sequence of (client_id, commitment_hex, slot_start, slot_count)
        The commitment list as the device checked it (:func:`entries_of`).
    reveals : sequence of str
        Each member's revealed value (hex), in the list's order.
    published : str
        The published run seed (hex).
    digest : str
        The list's digest (with the roster's keys, if the run has a roster), which the device revealed
        with.
    own_value : bytes
        This device's contribution.

    Returns
    -------
    bytes
        The run's seed.

    Raises
    ------
    SecurityError
        If the reveals or the seed are malformed, not one reveal per member, this device's reveal is
        missing or altered, a reveal does not open its commitment, or the published seed is not the
        one they give. An empty reveal is a member that withheld (:func:`withheld_of`): the seed is
        the one without it, never this device's.
    """
    try:
        values: list[bytes | None] = [bytes.fromhex(str(r)) or None for r in reveals]
        seed_bytes = bytes.fromhex(str(published))
    except (TypeError, ValueError):
        raise SecurityError("malformed seed transcript") from None
    if len(values) != len(entries):
        raise SecurityError("the seed transcript does not have one reveal per member")
    mine = [r for (cid, _, _, _), r in zip(entries, values, strict=True) if cid == client_id]
    if mine != [own_value]:
        raise SecurityError("this device's reveal is missing or altered in the seed transcript")
    seed = _seed(run_id, entries, values, digest)
    if not hmac.compare_digest(seed, seed_bytes):
        raise SecurityError("the published run seed does not follow from its transcript")
    return seed
