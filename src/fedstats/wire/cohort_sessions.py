"""A secure run's seed committee and sessions from cohort tree positions (both sides).

The second half of O(k log n) seeding's blocks (:mod:`fedstats.wire.cohort_tree` has the tree, its
proofs and the protocol's description): the committee whose reveals make the run's seed
(:func:`committee_positions`, :func:`reveal_statement`, :func:`committee_seed`), the permutation that
orders a round's participants into sessions (:class:`SessionPermutation`, :func:`session_of`,
:func:`member_at`, :func:`members_at`, :func:`sessions_of_positions`), and the digest of a session's
roster that names no key (:func:`session_roster_digest`). Tree-seeded runs use them
(:mod:`fedstats.wire.tree_seeding`; ``docs/deploy.md``, "Secure aggregation over the network").
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import hmac
import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from fedstats.errors import ParameterError, ProtocolAbortError, SecurityError
from fedstats.wire.cohort_tree import _U64, TreeHead, _all_int, _is_int
from fedstats.wire.seeding import session_bounds

__all__ = [
    "KAPPA",
    "ROUNDS",
    "VALUE_BYTES",
    "Seat",
    "SessionPermutation",
    "committee_positions",
    "committee_seed",
    "member_at",
    "members_at",
    "reveal_statement",
    "session_of",
    "session_roster_digest",
    "sessions_of_positions",
]

KAPPA = 40
"""Default size of the seed committee (:mod:`fedstats.wire.tree_seeding`)."""
ROUNDS = 8
"""Feistel rounds of :class:`SessionPermutation` (at least 6, Patarin's bound for a strong PRP)."""
VALUE_BYTES = 32
"""Bytes of a seed contribution (:data:`fedstats.wire.seeding.CONTRIBUTION_BYTES`)."""

_COMMITTEE = b"fedstats/wire/seed-committee/v1\x00"
_REVEAL = b"fedstats/wire/committee-reveal/v1\x00"
_SEED = b"fedstats/wire/committee-seed/v1\x00"
_PRP_KEY = b"fedstats/wire/session-prp-key/v1\x00"
_PRP_ROUND = b"fedstats/wire/session-prp-round/v1\x00"
_ROSTER = b"fedstats/wire/session-roster/v1\x00"
_FORWARD, _BACKWARD = tuple(range(ROUNDS)), tuple(range(ROUNDS - 1, -1, -1))
_ROUND_INPUT = struct.Struct("<BQ")


def committee_positions(head: TreeHead, kappa: int = KAPPA) -> list[int]:
    """The seed committee: ``min(n, kappa)`` distinct positions drawn from the head's digest, sorted.

    The little-endian u64 words of ``HMAC-SHA256(digest, label || u64 counter)`` (counter 0, 1, ...)
    below the largest multiple of ``n`` under ``2**64`` are taken mod ``n`` (no modulo bias), repeats
    skipped; all positions when ``n <= kappa``. The server fixes the head before it can know the
    committee (:mod:`fedstats.wire.tree_seeding`, *seed committee*).

    Parameters
    ----------
    head : TreeHead
        The run's cohort tree head.
    kappa : int, default KAPPA
        The committee's size, >= 1.

    Returns
    -------
    list of int
        Sorted distinct positions in ``[0, n)``.

    Raises
    ------
    ParameterError
        If ``kappa`` is not an integer >= 1.
    """
    if not _is_int(kappa) or kappa < 1:
        raise ParameterError("kappa", kappa, "an integer >= 1")
    return list(_committee(head.digest(), head.n, int(kappa)))


@functools.lru_cache(maxsize=64)
def _committee(key: bytes, n: int, kappa: int) -> tuple[int, ...]:
    """:func:`committee_positions` of a head's digest and leaf count, kept.

    A run's server asks at every member's check-in and reveal, a device at its check-in and its
    committee's checks.
    """
    if n <= kappa:
        return tuple(range(n))
    limit, counter, chosen = _U64 - _U64 % n, 0, set[int]()
    while len(chosen) < kappa:
        block = hmac.digest(key, _COMMITTEE + struct.pack("<Q", counter), "sha256")
        words = [w % n for w in struct.unpack("<4Q", block) if w < limit]
        chosen.update(w for w in words if len(chosen) < kappa)  # stop at kappa, mid-block too
        counter += 1
    return tuple(sorted(chosen))


def _run_field(run_id: str) -> bytes:
    raw = run_id.encode() if isinstance(run_id, str) else b""
    if not raw or len(raw) > 0xFFFF:
        raise ParameterError("run_id", run_id, "a non-empty str of at most 65535 UTF-8 bytes")
    return struct.pack("<H", len(raw)) + raw


def reveal_statement(run_id: str, head: TreeHead, position: int, value: bytes) -> bytes:
    """What a committee member signs with its identity key to reveal ``value`` over this head.

    Parameters
    ----------
    run_id : str
        The run, 1 to 65,535 bytes of UTF-8.
    head : TreeHead
        The head the member verified its own leaf against.
    position : int
        The member's position in ``[0, n)``.
    value : bytes
        Its seed contribution, :data:`VALUE_BYTES` bytes.

    Returns
    -------
    bytes
        ``label || u16-prefixed run id || head digest || u32 position || value``.

    Raises
    ------
    ParameterError
        For a bad ``run_id``, ``position`` or ``value``.
    """
    if not _is_int(position) or not 0 <= position < head.n:
        raise ParameterError("position", position, f"an integer in [0, {head.n})")
    if not isinstance(value, bytes) or len(value) != VALUE_BYTES:
        raise ParameterError("value", value, f"{VALUE_BYTES} bytes")
    return _REVEAL + _run_field(run_id) + head.digest() + struct.pack("<I", position) + value


def committee_seed(
    run_id: str, head: TreeHead, values: Sequence[bytes], kappa: int = KAPPA
) -> bytes:
    """The run's 32-byte seed: ``SHA-256(label || u16-prefixed run id || head digest || values)``.

    Parameters
    ----------
    run_id : str
        The run, 1 to 65,535 bytes of UTF-8.
    head : TreeHead
        The verified head.
    values : sequence of bytes
        The committee's values in position order (:func:`committee_positions`), each checked by the
        caller: it opens its leaf's commitment (:func:`fedstats.wire.seeding.commitment`) and is signed
        by the leaf's key over :func:`reveal_statement`.
    kappa : int, default KAPPA
        The committee's size, >= 1.

    Returns
    -------
    bytes
        32 bytes.

    Raises
    ------
    SecurityError
        Unless one 32-byte value per committee member is given.
    ParameterError
        For a bad ``kappa`` or ``run_id``.
    """
    if not _is_int(kappa) or kappa < 1:
        raise ParameterError("kappa", kappa, "an integer >= 1")
    if len(values) != min(head.n, kappa):
        raise SecurityError(
            f"the seed needs {min(head.n, kappa)} committee values, not {len(values)}"
        )
    if any(not isinstance(v, bytes) or len(v) != VALUE_BYTES for v in values):
        raise SecurityError(f"a committee value must be {VALUE_BYTES} bytes")
    return hashlib.sha256(_SEED + _run_field(run_id) + head.digest() + b"".join(values)).digest()


class SessionPermutation:
    """A pseudorandom permutation of ``[0, d)`` keyed by the run seed and the participants' positions.

    A Feistel network of :data:`ROUNDS` rounds over the smallest even ``w >= 2`` bits with ``2**w >= d``,
    cycle-walked into ``[0, d)`` (Black & Rogaway 2002; ``2**w < 4 d``: under 4 walks expected). Round
    ``r``: ``(L, R) -> (R, L xor F_r(R))``, ``F_r(x)`` the first 8 bytes (little-endian, masked to
    ``w / 2`` bits) of ``HMAC-SHA256(HMAC-SHA256(seed, label || u64 p_lo || u64 p_hi), label || u8 r ||
    u64 x)``.

    Parameters
    ----------
    seed : bytes
        The run's verified seed, 32 bytes.
    p_lo, p_hi : int
        The participants' positions ``[p_lo, p_hi)``, ``0 <= p_lo < p_hi``; ``d = p_hi - p_lo``.

    Raises
    ------
    ParameterError
        For a seed of another length or an empty or negative range.
    """

    __slots__ = ("_half", "_inner", "_key", "_mask", "_memo", "_outer", "_tables", "d")

    def __init__(self, seed: bytes, p_lo: int, p_hi: int) -> None:
        if not isinstance(seed, bytes) or len(seed) != 32:
            raise ParameterError("seed", seed, "32 bytes")
        if not (_is_int(p_lo) and _is_int(p_hi)) or not 0 <= p_lo < p_hi < _U64:
            raise ParameterError("(p_lo, p_hi)", (p_lo, p_hi), "positions with 0 <= p_lo < p_hi")
        self.d = p_hi - p_lo
        self._half = (max(2, (self.d - 1).bit_length()) + 1) // 2
        self._mask = (1 << self._half) - 1
        self._key = hmac.digest(seed, _PRP_KEY + struct.pack("<QQ", p_lo, p_hi), "sha256")
        # HMAC-SHA256 under _key (RFC 2104; the key is one block or less, zero-padded) with its two
        # padded-key blocks, and the inner one's label, hashed once: each round value then costs the
        # two hashes' last blocks, not hmac.digest's whole computation
        block = self._key.ljust(64, b"\x00")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block) + _PRP_ROUND)
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))
        self._memo: dict[int, int] = {}
        self._tables: np.ndarray | None = None

    def _f(self, r: int, x: int) -> int:
        got = self._memo.get(slot := (r << self._half) | x)
        if got is None:
            inner, outer = self._inner.copy(), self._outer.copy()
            inner.update(_ROUND_INPUT.pack(r, x))
            outer.update(inner.digest())
            got = self._memo[slot] = int.from_bytes(outer.digest()[:8], "little") & self._mask
        return got

    def _walk(self, xs: Sequence[int], inverse: bool) -> list[int]:
        """``pi`` (or ``pi^-1``) of each of ``xs``, integers in ``[0, d)`` checked by the caller.

        A batch that would compute most round values anyway (at least ``2**(w / 2)`` points, about
        63 % of each round's values) takes the whole table and walks in numpy; a few points walk
        in Python and compute only the values they meet.
        """
        if self._tables is not None or len(xs) >= 1 << self._half:
            got: list[int] = self._walk_table(np.array(xs, dtype=np.uint64), inverse).tolist()
            return got
        half, mask, d, memo, f = self._half, self._mask, self.d, self._memo, self._f
        out = []
        for x in xs:
            while True:
                left, right = x >> half, x & mask
                if inverse:
                    for r in _BACKWARD:
                        v = memo.get((r << half) | left)
                        left, right = right ^ (f(r, left) if v is None else v), left
                else:
                    for r in _FORWARD:
                        v = memo.get((r << half) | right)
                        left, right = right, left ^ (f(r, right) if v is None else v)
                x = (left << half) | right
                if x < d:
                    break
            out.append(x)
        return out

    def _walk_table(self, xs: np.ndarray, inverse: bool) -> np.ndarray:
        """:meth:`_walk` of a uint64 array in numpy, every round value computed once (kept)."""
        if self._tables is None:
            size = 1 << self._half
            values = [[self._f(r, x) for x in range(size)] for r in range(ROUNDS)]
            self._tables = np.array(values, dtype=np.uint64)
        tables = self._tables
        h, m, d = np.uint64(self._half), np.uint64(self._mask), np.uint64(self.d)
        y, todo = xs.copy(), np.arange(xs.size)
        while todo.size:
            v = y[todo]
            left, right = v >> h, v & m
            if inverse:
                for r in _BACKWARD:
                    left, right = right ^ tables[r][left], left
            else:
                for r in _FORWARD:
                    left, right = right, left ^ tables[r][right]
            y[todo] = v = (left << h) | right
            todo = todo[v >= d]
        return y

    def _checked(self, x: int, name: str) -> list[int]:
        if not _is_int(x) or not 0 <= x < self.d:
            raise ParameterError(name, x, f"an integer in [0, {self.d})")
        return [x]

    def forward(self, x: int) -> int:
        """``pi(x)`` for ``x`` in ``[0, d)`` (ParameterError otherwise)."""
        return self._walk(self._checked(x, "x"), False)[0]

    def inverse(self, y: int) -> int:
        """``pi^-1(y)`` for ``y`` in ``[0, d)`` (ParameterError otherwise)."""
        return self._walk(self._checked(y, "y"), True)[0]

    def forward_all(self) -> np.ndarray:
        """``pi(x)`` for every ``x`` in ``[0, d)``, shape ``(d,)``, int64: the server's batch form.

        Each round value is computed once (``ROUNDS * 2**(w / 2) < 16 sqrt(d) + 16`` HMACs).
        """
        return self._walk_table(np.arange(self.d, dtype=np.uint64), False).astype(np.int64)


# a round's calls share its memo; typed, so that a bool or an int subclass never finds a plain int's
_permutation = functools.lru_cache(maxsize=16, typed=True)(SessionPermutation)


@functools.lru_cache(maxsize=64)
def _bounds(d: int, max_session: int) -> tuple[tuple[tuple[int, int], ...], int]:
    """:func:`fedstats.wire.seeding.session_bounds` of checked integers, and its smallest session."""
    bounds = tuple(session_bounds(d, max_session))
    return bounds, min(b - a for a, b in bounds)


class Seat(NamedTuple):
    """A participant's session ``number``, ``roster_index``, the session's ``size`` and ``bounds``."""

    number: int
    roster_index: int
    size: int
    bounds: tuple[int, int]


def _cut(
    seed: bytes, p_lo: int, p_hi: int, max_session: int, min_session_size: int
) -> tuple[SessionPermutation, Sequence[tuple[int, int]]]:
    """The round's permutation and its sessions' bounds, refusing a session below the minimum."""
    for name, v in (("max_session", max_session), ("min_session_size", min_session_size)):
        if not _is_int(v) or v < 2:
            raise ParameterError(name, v, "an integer >= 2")
    if not isinstance(seed, bytes):
        raise ParameterError("seed", seed, "32 bytes")
    if _is_int(p_lo) and _is_int(p_hi) and 0 <= p_lo == p_hi:
        raise ProtocolAbortError("a round without participants makes no secure session")
    pi = _permutation(seed, p_lo, p_hi)
    bounds, smallest = _bounds(pi.d, int(max_session))
    if smallest < min_session_size:
        msg = f"{pi.d} participant(s) make a session of {smallest} < min_session_size"
        raise ProtocolAbortError(f"{msg}={min_session_size}")
    return pi, bounds


def session_of(
    seed: bytes, p_lo: int, p_hi: int, max_session: int, min_session_size: int, position: int
) -> Seat:
    """A device's session, roster index and session size, from its position alone.

    The participants ``[p_lo, p_hi)`` (:func:`fedstats.wire.cohort_tree.verify_range`) are permuted by
    :class:`SessionPermutation` and cut as :func:`fedstats.wire.seeding.session_bounds` cuts: session
    ``s`` holds the permuted indices ``[a_s, b_s)``, and ``position`` has roster index
    ``pi(position - p_lo) - a_s``. The same participants form the same sessions in every round, as
    :func:`fedstats.wire.seeding.sessions_of` promises.

    Parameters
    ----------
    seed : bytes
        The run's verified seed, 32 bytes.
    p_lo, p_hi : int
        The round's participants' positions.
    max_session, min_session_size : int
        The task's ``secure_aggregation`` limits, each >= 2.
    position : int
        The device's position, in ``[p_lo, p_hi)``.

    Returns
    -------
    Seat
        ``(number, roster_index, size, bounds)``.

    Raises
    ------
    ParameterError
        If an argument is out of range (``position`` not a participant's, a limit below 2).
    ProtocolAbortError
        If there are no participants or a session would be below ``min_session_size``.
    """
    pi, bounds = _cut(seed, p_lo, p_hi, max_session, min_session_size)
    if not _is_int(position) or not p_lo <= position < p_hi:
        raise ParameterError("position", position, f"a participant's position in [{p_lo}, {p_hi})")
    j = pi.forward(position - p_lo)
    number = bisect.bisect_right([a for a, _ in bounds], j) - 1
    a, b = bounds[number]
    return Seat(number, j - a, b - a, (a, b))


def member_at(
    seed: bytes,
    p_lo: int,
    p_hi: int,
    max_session: int,
    min_session_size: int,
    number: int,
    roster_index: int,
) -> int:
    """The position at ``roster_index`` of session ``number``: :func:`session_of` inverted.

    Parameters
    ----------
    seed, p_lo, p_hi, max_session, min_session_size
        As in :func:`session_of`.
    number : int
        A session of the round, in ``[0, sessions)``.
    roster_index : int
        An index of that session's roster, in ``[0, size)``.

    Returns
    -------
    int
        The member's position in ``[p_lo, p_hi)``.

    Raises
    ------
    ParameterError, ProtocolAbortError
        As :func:`session_of`, and ParameterError for a ``number`` or ``roster_index`` outside the
        round's sessions.
    """
    got = members_at(seed, p_lo, p_hi, max_session, min_session_size, number, (roster_index,))
    return got[0]


def members_at(
    seed: bytes,
    p_lo: int,
    p_hi: int,
    max_session: int,
    min_session_size: int,
    number: int,
    roster_indices: Iterable[int],
) -> list[int]:
    """The positions at several roster indices of session ``number``: :func:`member_at` of each.

    A device's form: it places its checked members and two-hop neighbours at once (one session's
    checks and bounds, each permutation round value computed once).

    Parameters
    ----------
    seed, p_lo, p_hi, max_session, min_session_size, number
        As in :func:`member_at`.
    roster_indices : iterable of int
        Indices of that session's roster, each in ``[0, size)``; any order, repeats allowed.

    Returns
    -------
    list of int
        ``member_at(..., number, j)`` for each ``j`` of ``roster_indices``, in their order.

    Raises
    ------
    ParameterError, ProtocolAbortError
        As :func:`member_at` (its ``roster_index`` error names the first index out of range).
    """
    pi, bounds = _cut(seed, p_lo, p_hi, max_session, min_session_size)
    if not _is_int(number) or not 0 <= number < len(bounds):
        raise ParameterError("number", number, f"a session in [0, {len(bounds)})")
    a, b = bounds[number]
    indices = list(roster_indices)
    if not _all_int(indices) or (indices and not 0 <= min(indices) <= max(indices) < b - a):
        bad = next(j for j in indices if not (_is_int(j) and 0 <= j < b - a))
        raise ParameterError("roster_index", bad, f"an index in [0, {b - a})")
    return [p_lo + y for y in pi._walk([a + j for j in indices], True)]


def sessions_of_positions(
    seed: bytes, p_lo: int, p_hi: int, max_session: int, min_session_size: int
) -> list[list[int]]:
    """Every session of the round as positions in roster order (the server's form, in batch).

    Parameters
    ----------
    seed, p_lo, p_hi, max_session, min_session_size
        As in :func:`session_of`.

    Returns
    -------
    list of list of int
        ``[s][i]``: session ``s``'s member at roster index ``i``.

    Raises
    ------
    ParameterError, ProtocolAbortError
        As :func:`session_of`.
    """
    pi, bounds = _cut(seed, p_lo, p_hi, max_session, min_session_size)
    order = np.empty(pi.d, dtype=np.int64)
    order[pi.forward_all()] = np.arange(p_lo, p_hi, dtype=np.int64)
    return [order[a:b].tolist() for a, b in bounds]


def session_roster_digest(
    task_id: bytes,
    session_id: bytes,
    head: TreeHead,
    p_lo: int,
    p_hi: int,
    max_session: int,
    number: int,
    size: int,
) -> bytes:
    """The 32-byte digest of a session's roster, without listing its members' keys.

    It determines the roster: the head fixes each position's leaf (and key) and the committee whose
    committed values make the seed, which the session id binds
    (:func:`fedstats.wire.seeding.session_id`); the seed and the other fields fix the members and
    their order (:func:`member_at`). It is the ``binding`` of a bound
    :class:`fedstats.secagg.identity.SessionRoster`, whose digest
    :func:`fedstats.secagg.crypto.roster_transcript` binds.

    Parameters
    ----------
    task_id : bytes
        The roster's task id, 1 to 64 bytes.
    session_id : bytes
        32 bytes.
    head : TreeHead
        The run's verified head.
    p_lo, p_hi : int
        The round's participants, ``0 <= p_lo < p_hi <= n``.
    max_session : int
        The task's ``max_session``, in ``[2, 2**32)``.
    number : int
        The session, in ``[0, 2**32)``.
    size : int
        Its size, in ``[2, max_session]``.

    Returns
    -------
    bytes
        ``SHA-256(label || u8-prefixed task id || session id || head digest || u64 p_lo || u64 p_hi
        || u32 max_session || u32 number || u32 size)``.

    Raises
    ------
    ParameterError
        For an argument out of range.
    """
    if not isinstance(task_id, bytes) or not 1 <= len(task_id) <= 64:
        raise ParameterError("task_id", task_id, "1 to 64 bytes")
    if not isinstance(session_id, bytes) or len(session_id) != 32:
        raise ParameterError("session_id", session_id, "32 bytes")
    if not (_is_int(p_lo) and _is_int(p_hi)) or not 0 <= p_lo < p_hi <= head.n:
        raise ParameterError("(p_lo, p_hi)", (p_lo, p_hi), f"0 <= p_lo < p_hi <= {head.n}")
    top = (1 << 32) - 1
    for name, v, lo, hi in (("max_session", max_session, 2, top), ("number", number, 0, top)):
        if not _is_int(v) or not lo <= v <= hi:
            raise ParameterError(name, v, f"an integer in [{lo}, {hi}]")
    if not _is_int(size) or not 2 <= size <= max_session:
        raise ParameterError("size", size, f"an integer in [2, {max_session}]")
    fields = struct.pack("<QQIII", p_lo, p_hi, max_session, number, size)
    prefix = _ROSTER + struct.pack("<B", len(task_id)) + task_id
    return hashlib.sha256(prefix + session_id + head.digest() + fields).digest()
