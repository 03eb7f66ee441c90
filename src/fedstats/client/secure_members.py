"""What a device keeps of a secure run (:class:`SecureState`, :class:`PackedMembers`), for :mod:`fedstats.client.secure`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from fedstats.errors import SecurityError
from fedstats.secagg.crypto import VerificationCache
from fedstats.wire import seeding
from fedstats.wire.cohort_tree import TreeHead

__all__ = [
    "AUDIT_MEMBERS",
    "SIGNATURES",
    "VERIFIED_CERTIFICATES",
    "PackedMembers",
    "SecureState",
    "cohort_cap",
    "ring_input",
]

VERIFIED_CERTIFICATES: set[tuple[str, str, bytes]] = set()
"""Certificates whose authority signature was checked in this process, ``(authority key, signature,
canonical body)``: every :class:`fedstats.client.Device` of the process shares it (bounded: cleared at
100,000). A device process holds one device, for which this is its own memory across rounds; devices
simulated together (benchmarks, tests) check each certificate once per process rather than once per
device that asks. Sound because the key is the whole verified content and the check is a deterministic
function of it with nothing secret (as :class:`fedstats.secagg.crypto.VerificationCache`); expiry,
population, keys and roster positions are checked on every use."""
SIGNATURES = VerificationCache(rosters=False, max_entries=200_000)
"""Ed25519 results of the secure-aggregation messages (neighbours' signed keys, consistency signatures)
checked in this process, keyed by the exact ``(public key, signature, message)``: shared by the
:class:`~fedstats.secagg.SecAggClient` of every device of the process (see
:data:`VERIFIED_CERTIFICATES` for why that is sound); each roster is still checked by its own device."""

AUDIT_MEMBERS = 16
"""How many members besides its neighbours a device checks the certificate of (chosen at random by it)."""


class PackedMembers:
    """A run's commitment list as a device keeps it: a few flat buffers, not ``n`` Python rows.

    A device checks the whole list before it reveals and needs the members' ids, slots and identity
    keys afterwards (every round derives its sessions from the cohort, and each session's roster from
    the keys); it keeps them in one bytes object per column (ids, commitments, keys) and numpy arrays
    (offsets, slots): about 120 bytes per member instead of a few kilobytes of parsed JSON rows,
    tuples and hex strings. The commitments are dropped once the seed verified
    (:meth:`drop_commitments`).

    Parameters
    ----------
    entries : sequence of (client_id, commitment_hex, slot_start, slot_count)
        The checked commitment list (:func:`fedstats.wire.seeding.entries_of`).
    keys : sequence of str
        Each member's identity key (hex), in list order (:func:`fedstats.wire.seeding.keys_of`).
    """

    __slots__ = ("_commitments", "_ids", "_keys", "_offsets", "_slots")

    def __init__(self, entries: Sequence[seeding.Entry], keys: Sequence[str]) -> None:
        if len(entries) != len(keys):
            raise SecurityError("the run's roster does not list one key per member")
        encoded = [str(e[0]).encode() for e in entries]
        self._ids = b"".join(encoded)
        self._offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=self._offsets[1:])
        commitments = [e[1] for e in entries]  # each column decoded in one call
        self._commitments: bytes | None = _hex_bytes(commitments) or b"".join(
            bytes.fromhex(c) for c in commitments
        )
        starts = np.array([int(e[2]) for e in entries], dtype=np.int64)
        self._slots = np.stack([starts, np.array([int(e[3]) for e in entries], np.int64)], 1)
        self._keys = _hex_bytes(keys) or b"".join(bytes.fromhex(k) for k in keys)

    def __len__(self) -> int:
        return int(self._offsets.size - 1)

    def ids(self) -> list[str]:
        """The members' client ids, in list order."""
        o, blob = self._offsets.tolist(), self._ids
        if blob.isascii():  # one decode; its characters are its bytes, so the offsets cut it alike
            text = blob.decode("ascii")
            return [text[a:b] for a, b in pairwise(o)]
        return [blob[a:b].decode() for a, b in pairwise(o)]

    def entries(self) -> list[seeding.Entry]:
        """The commitment list as :func:`fedstats.wire.seeding.entries_of` parsed it."""
        if self._commitments is None:
            raise SecurityError("the device no longer holds the run's commitments")
        c = self._commitments.hex()  # one encoding of the column, cut per member
        return [
            (cid, c[64 * i : 64 * i + 64], start, count)
            for i, (cid, (start, count)) in enumerate(
                zip(self.ids(), self._slots.tolist(), strict=True)
            )
        ]

    def cohort(self) -> list[tuple[str, int, int]]:
        """``[(client_id, slot_start, slot_count), ...]`` in list order (:func:`seeding.cohort_of`)."""
        return [
            (cid, start, count)
            for cid, (start, count) in zip(self.ids(), self._slots.tolist(), strict=True)
        ]

    def holds(self, client_id: str, slot_start: int, slot_count: int) -> bool:
        """Whether the list has the member ``client_id`` with these slots (no per-member objects built)."""
        needle, o = client_id.encode(), self._offsets
        at = self._ids.find(needle)
        while at >= 0:
            i = int(np.searchsorted(o, at))
            if i < len(self) and o[i] == at and o[i + 1] - at == len(needle):
                return bool(self._slots[i].tolist() == [int(slot_start), int(slot_count)])
            at = self._ids.find(needle, at + 1)
        return False

    def slot_total(self) -> int:
        """The sum of the members' slot counts (the run's ``n_clients``)."""
        return int(self._slots[:, 1].sum())

    def key_map(self) -> dict[str, bytes]:
        """``client_id -> identity key`` (32 bytes) of every member."""
        k = self._keys
        return {cid: k[32 * i : 32 * i + 32] for i, cid in enumerate(self.ids())}

    def drop_commitments(self) -> None:
        """Forget the commitments (needed only until the seed verified)."""
        self._commitments = None

    def nbytes(self) -> int:
        """The bytes held in the buffers."""
        held = len(self._ids) + len(self._keys) + len(self._commitments or b"")
        return held + self._offsets.nbytes + self._slots.nbytes


@dataclass
class SecureState:
    """What a device keeps of one secure run between polls (in memory: a restart makes it a dropout).

    Attributes
    ----------
    contribution : bytes
        Its secret seed contribution (32 bytes from OS entropy).
    seen : str or None
        Digest of the commitment list it saw when it revealed.
    seed : bytes or None
        The verified run seed.
    sessions : dict
        ``(round, session) -> SecAggClient``.
    replies : dict
        ``(round, session, stage) -> bytes``: each stage message sent, resent as is on a retry.
    acknowledged : set
        ``(round, session, stage)`` whose message the server acknowledged (the server lists a stage
        until it closes).
    refused : dict
        ``(round, session) -> reason`` of the sessions it left because a check failed.
    task : mapping or None
        The task the device accepted (its ``secure_aggregation`` options, population and cohort size).
    slots : tuple or None
        ``(slot_start, slot_count)`` given at check-in, checked in the commitment list before revealing.
    cohort : list or None
        The verified cohort ``[(client_id, slot_start, slot_count), ...]`` in slot order once the seed
        transcript verified (``n_clients = sum(slot_count)``), built from :attr:`members` on access.
    rounds : dict
        ``round -> session``: the one session joined in each round (a second one is refused).
    encoded : dict
        ``round -> summed report``: each round is encoded once.
    limits : dict
        ``(round, session) -> bytes``: the largest server message read in a joined session.
    members : PackedMembers or None
        The commitment list (ids, commitments, slots) and the run's roster (identity keys) as the device
        checked them before revealing, packed (:class:`PackedMembers`): afterwards it asks only for the
        reveals and the seed (``GET .../seed?part=reveals``), not the whole list again; every session's
        roster derives from the keys (:func:`committed_roster`). The commitments are dropped once the
        seed verified.
    verified : bool
        Whether the seed transcript verified (:attr:`seed` and :attr:`cohort` are then set).
    revealed : object or None
        The server's answer to a held reveal (``POST .../reveal?wait=``): the seed and the reveals, as
        ``GET .../seed?part=reveals`` answers them (unchecked until the transcript is verified).
    withheld : frozenset
        The members the verified transcript names as withholders (:func:`fedstats.wire.seeding.withheld_of`):
        they keep their slots and join no session.
    listed : object or None
        The commitment list a held check-in (``POST .../checkin?wait=``) was answered with: what
        ``GET .../seed`` answers while the run is seeding (unchecked until :meth:`SecureRuns._reveal`
        checks it, used once).
    uncertified : dict
        ``(round, session) -> (verifier, roster, checked positions, round)`` of a joined session whose
        members' certificates are not checked yet (:meth:`SecureRuns._certify`, before the shares).
    head : TreeHead or None
        A tree-seeded run's cohort tree head, as the device checked its own leaf against it
        (:func:`fedstats.wire.tree_seeding.check_own_leaf`; :mod:`fedstats.client.secure_tree`); None
        for a run seeded by the commitment list.
    position : int or None
        The device's position in that tree (its leaf's index in slot order).
    partitions : dict
        ``(client range lo, hi, max_session, min_session_size) -> (session number, member positions)``:
        the session this device derived itself into for a round of that range (the positions, in roster
        order, index the commitment list): the next round with the same participants derives the same
        sessions from the same verified cohort and seed (:func:`fedstats.wire.seeding.sessions_of` orders
        them by the seed alone), so it is not partitioned again.
    """

    contribution: bytes
    seen: str | None = None
    seed: bytes | None = None
    sessions: dict[tuple[int, int], Any] = field(default_factory=dict)
    replies: dict[tuple[int, int, int], bytes] = field(default_factory=dict)
    acknowledged: set[tuple[int, int, int]] = field(default_factory=set)
    refused: dict[tuple[int, int], str] = field(default_factory=dict)
    task: Mapping[str, Any] | None = None
    slots: tuple[int, int] | None = None
    rounds: dict[int, int] = field(default_factory=dict)
    encoded: dict[int, list[int]] = field(default_factory=dict)
    limits: dict[tuple[int, int], int] = field(default_factory=dict)
    members: PackedMembers | None = None
    verified: bool = False
    revealed: Any = None
    withheld: frozenset[str] = frozenset()
    listed: Any = None
    uncertified: dict[tuple[int, int], Any] = field(default_factory=dict)
    partitions: dict[tuple[int, int, int, int], tuple[int, np.ndarray]] = field(
        default_factory=dict
    )
    head: TreeHead | None = None
    position: int | None = None

    def commitment(self, run_id: str, client_id: str) -> str:
        """The commitment sent at check-in."""
        return seeding.commitment(run_id, client_id, self.contribution)

    @property
    def cohort(self) -> list[tuple[str, int, int]] | None:
        """The verified cohort ``[(client_id, slot_start, slot_count), ...]`` (None before the seed).

        Built on each access from :attr:`members` (the device keeps the packed list, not ``n`` tuples).
        """
        if not self.verified or self.members is None:
            return None
        return self.members.cohort()


def cohort_cap(state: SecureState) -> int | None:
    """The most members a run's cohort can have: its task's cohort size (each holds >= 1 slot)."""
    if state.task is None:
        return None
    return int(state.task.get("cohort_size") or 0) or None


def _hex_bytes(texts: Sequence[str]) -> bytes | None:
    """``b"".join(bytes.fromhex(t) for t in texts)`` in one call, if each is 32 bytes of plain hex, else None.

    None when some string is not 64 characters or holds whitespace (``bytes.fromhex`` skips it): the
    caller decodes those one by one, as before. A character that is not hex raises ``ValueError``.
    """
    if any(len(t) != 64 for t in texts):
        return None
    raw = bytes.fromhex("".join(texts))  # each string's digits pair up as they would alone
    return raw if len(raw) == 32 * len(texts) else None


def ring_input(vector: Sequence[int]) -> np.ndarray:
    """A summed report as a secure session's input: each entry mod ``2**BITS``, as ``uint64``.

    ``np.array([int(x) % 2**64 for x in vector], dtype=np.uint64)``
    (:data:`fedstats.wire.seeding.BITS` is 64): for Python integers that all fit ``int64`` (every
    summed report of bounded entries) that is their two's-complement bits, read at once.

    Parameters
    ----------
    vector : sequence of int
        The summed report (:meth:`fedstats.client.Device._encode`).

    Returns
    -------
    numpy.ndarray
        ``uint64``, ``len(vector)`` entries.
    """
    if seeding.BITS == 64 and set(map(type, vector)) <= {int}:
        try:
            return np.array(vector, dtype=np.int64).view(np.uint64)
        except OverflowError:  # an entry outside int64: reduced one by one
            pass
    return np.array([int(x) % (1 << seeding.BITS) for x in vector], dtype=np.uint64)
