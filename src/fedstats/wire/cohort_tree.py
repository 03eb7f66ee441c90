"""A secure run's cohort as a Merkle sum tree: seeding in O(k log n) bytes per device (both sides).

In a run seeded by its commitment list each device downloads every member's ``(client_id, commitment,
slots, key)`` and reveal (:mod:`fedstats.wire.seeding`; 230 kB at n = 1,000). A run seeded by its cohort
tree (:mod:`fedstats.wire.tree_seeding`, the protocol; ``docs/deploy.md``, "Secure aggregation over the
network") uses these blocks instead: a device checks its own leaf, its ``k`` neighbours', 16 audited
ones, its two-hop neighbours' and a committee's by inclusion proofs.

**The head.** The server builds a :class:`CohortTree` (RFC 9162's shape, :mod:`fedstats.wire.merkle`)
over the members' :class:`Leaf` in slot order; every node carries ``(hash, slots)``, and an inner node
hashes its children's hashes *and* slots, so the root fixes each member's place in the slot order. The
:class:`TreeHead` ``(n, total_slots, root)``'s digest replaces the list digest of
:func:`fedstats.wire.seeding.commitments_digest`: every party binds it.

**What a device checks, and why.**

1. *Its own leaf, before it reveals* (:func:`verify_leaf`): the leaf at its position is its own client
   id, commitment, key and slot count, and the proven ``slot_start`` (the slots of the subtrees left of
   its path) is the one it was given at check-in. It reveals its value signed over
   :func:`reveal_statement`, which names the head, so a reveal cannot be moved into another tree.
2. *The seed* (:func:`~fedstats.wire.cohort_sessions.committee_positions`, :func:`~fedstats.wire.cohort_sessions.committee_seed`): only a committee's reveals enter it
   (a device cannot check that a hash of *all* reveals used the committed ones). The committee is
   ``min(n, 40)`` positions drawn from the head's digest, fixed before the server learns it. A device
   fetches their leaves in one :class:`MultiProof` with each one's certificate, value and signature, and
   checks that the value opens the leaf's commitment (:func:`fedstats.wire.seeding.commitment`) and is
   signed by the leaf's key over this head: else a server could build a victim's tree after the honest
   members revealed, trying trees until the victim's neighbours are colluders. Each tree tried gives an
   all-colluder committee with probability ``<= (c / n)^kappa``; a withholding member aborts the run.
3. *The round's participants* (:func:`verify_range`): the members whose slots meet the round's client
   range ``[a, b)`` are the positions ``[p_lo, p_hi)``, proven by the leaves holding slots ``a`` and
   ``b - 1``: slot order is position order and every member holds a slot.
4. *Its session* (:func:`~fedstats.wire.cohort_sessions.session_of`, :func:`~fedstats.wire.cohort_sessions.member_at`): a Feistel permutation keyed by the seed and
   ``(p_lo, p_hi)`` orders the participants (the same sessions in every round with the same ones, as in
   :func:`fedstats.wire.seeding.sessions_of`), cut by :func:`fedstats.wire.seeding.session_bounds`; a
   device finds its session, roster index and size in ``O(1)`` hashes, and a roster index's position by
   the inverse, so it fetches exactly its neighbours' leaves (with the audited ones) and refuses others.
5. *Its session's roster* (:func:`~fedstats.wire.cohort_sessions.session_roster_digest`): the secure aggregation it feeds (Bell et al.,
   CCS 2020; :func:`fedstats.secagg.crypto.roster_transcript`) binds a digest of the head and the
   session's coordinates instead of all its members' keys.

Equivocation is caught at the committee: a device shown another head than the others passes its own-leaf
check, but the reveals it is given were signed over the real head (item 2), so it refuses before any
round (``tests/service/test_service_tree_equivocation.py``). Devices that all pass under different heads
(each head's whole committee signed it) derive different seeds and session ids and refuse each other's
advertisements before sending a share. **Every leaf holds a slot** (the tree and
the verifiers refuse 0, as :func:`fedstats.wire.seeding.check_cohort` does): a leaf without slots would
sit between participants yet meet no client range, and they would no longer be a position range.

**The sums cannot be forged.** A node's slots are hashed into its parent and a verifier recomputes the
slots along its path from the leaf up, so any two leaves that verify against one head hold disjoint slot
ranges in position order within ``[0, total_slots)`` (where their paths meet, one lies in the left child
whose slots both hashed). A server that writes a wrong sum, or a head naming another ``n`` over the same
root (``n`` is bound by each path's shape, as in RFC 9162), only makes some leaves unprovable.
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import itertools
import operator
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from fedstats.errors import DataError, ParameterError, SecurityError
from fedstats.wire.merkle import HASH_BYTES

__all__ = [
    "CohortTree",
    "Leaf",
    "LeafProof",
    "MultiProof",
    "RangeProof",
    "TreeHead",
    "verify_leaf",
    "verify_multi",
    "verify_range",
]


Node = tuple[bytes, int]
"""One node of a proof: ``(hash, slots)``, 32 bytes and the slots below it."""

_LEAF = b"fedstats/wire/cohort-leaf/v1\x00"
_HEAD = b"fedstats/wire/cohort-head/v1\x00"
_TAG_HEAD, _TAG_LEAF, _TAG_MULTI, _TAG_RANGE = b"\x01", b"\x02", b"\x03", b"\x04"
_U64 = 1 << 64
_INNER = struct.Struct("<32sQ32sQ")
_LEAF_TAIL = struct.Struct("<32s32sQ")
_NODE = struct.Struct("<32sQ")
_T = TypeVar("_T")


_INNER_TAGGED = struct.Struct("<B32sQ32sQ")  # _INNER with the 0x01 prefix, packed at once
_U16 = struct.Struct("<H")
_LEAF_PREFIX = b"\x00" + _LEAF


def _is_int(x: object) -> bool:
    """An int that is not a bool (an int subclass such as an IntEnum is one)."""
    return type(x) is int or (isinstance(x, int) and not isinstance(x, bool))


def _all_int(xs: Sequence[object]) -> bool:
    """``all(map(_is_int, xs))``, the common case (plain ints) checked in C."""
    return set(map(type, xs)) <= {int} or all(map(_is_int, xs))


def _inner(left: Node, right: Node) -> bytes:
    """``SHA-256(0x01 || left.hash || u64 left.slots || right.hash || u64 right.slots)``."""
    return hashlib.sha256(_INNER_TAGGED.pack(1, left[0], left[1], right[0], right[1])).digest()


@dataclass(frozen=True)
class Leaf:
    """One member of a run's cohort, a leaf of its :class:`CohortTree`.

    ``client_id``: at most 65,535 bytes of UTF-8; ``commitment``: its seed commitment
    (:func:`fedstats.wire.seeding.commitment`) and ``key``: its raw Ed25519 identity key, 32 bytes each;
    ``slot_count``: its slots (records) in ``[0, 2**64)`` (trees and verifiers need ``>= 1``).
    ParameterError otherwise.
    """

    client_id: str
    commitment: bytes
    key: bytes
    slot_count: int

    def __post_init__(self) -> None:
        if not isinstance(self.client_id, str) or len(self.client_id.encode()) > 0xFFFF:
            raise ParameterError("client_id", self.client_id, "a str of at most 65535 UTF-8 bytes")
        for name, v in (("commitment", self.commitment), ("key", self.key)):
            if not isinstance(v, bytes) or len(v) != 32:
                raise ParameterError(name, v, "32 bytes")
        if not _is_int(self.slot_count) or not 0 <= self.slot_count < _U64:
            raise ParameterError("slot_count", self.slot_count, "an integer in [0, 2**64)")

    def to_bytes(self) -> bytes:
        """``u16-length-prefixed utf-8 client_id || commitment || key || u64 slot_count``."""
        read = self.__dict__.get("_read")  # the bytes a leaf read from the wire was read from
        return _encode(self) if read is None else read

    def hash(self) -> bytes:
        """The leaf's hash, ``SHA-256(0x00 || label || to_bytes())``."""
        return hashlib.sha256(_LEAF_PREFIX + self.to_bytes()).digest()

    @classmethod
    def from_bytes(cls, data: bytes) -> Leaf:
        """Parse :meth:`to_bytes`' output, every length checked (DataError if malformed)."""
        return _decode(data, b"", 1, _Reader.leaf)


def _encode(leaf: Leaf) -> bytes:
    """:meth:`Leaf.to_bytes` from the fields."""
    raw = leaf.client_id.encode()
    return _U16.pack(len(raw)) + raw + _LEAF_TAIL.pack(leaf.commitment, leaf.key, leaf.slot_count)


def _parsed_leaf(
    client_id: str, commitment: bytes, key: bytes, slot_count: int, encoding: bytes
) -> Leaf:
    """A :class:`Leaf` of fields :class:`_Reader` has read, without :meth:`Leaf.__post_init__`.

    Its checks hold by construction: a str decoded from at most 65,535 bytes, two 32-byte strings
    and a u64 (``struct``'s ``32s`` and ``Q``). ``encoding``, the bytes they were read from, is kept
    as its :meth:`Leaf.to_bytes` (strict UTF-8 makes it the encoding of the fields; a frozen leaf's
    fields do not change). Everything else builds leaves through the checks.
    """
    leaf = object.__new__(Leaf)
    leaf.__dict__.update(
        client_id=client_id,
        commitment=commitment,
        key=key,
        slot_count=slot_count,
        _read=encoding,
    )
    return leaf


@dataclass(frozen=True)
class TreeHead:
    """What every party binds: a cohort tree's leaf count, total slots and root.

    ``n`` in ``[1, 2**32)``, ``total_slots`` in ``[n, 2**64)``, ``root`` 32 bytes (else ParameterError).
    """

    n: int
    total_slots: int
    root: bytes

    def __post_init__(self) -> None:
        if not _is_int(self.n) or not 1 <= self.n < 1 << 32:
            raise ParameterError("n", self.n, "an integer in [1, 2**32)")
        if not _is_int(self.total_slots) or not self.n <= self.total_slots < _U64:
            raise ParameterError("total_slots", self.total_slots, "an integer in [n, 2**64)")
        if not isinstance(self.root, bytes) or len(self.root) != HASH_BYTES:
            raise ParameterError("root", self.root, "32 bytes")

    def digest(self) -> bytes:
        """``SHA-256(label || u32 n || u64 total_slots || root)``: the 32 bytes every party binds."""
        return hashlib.sha256(_HEAD + self.to_bytes()[1:]).digest()

    def to_bytes(self) -> bytes:
        """A tag byte, ``u32 n``, ``u64 total_slots``, the root: 45 bytes (a message of its own)."""
        return _TAG_HEAD + struct.pack("<IQ", self.n, self.total_slots) + self.root


@dataclass(frozen=True)
class LeafProof:
    """One leaf at ``position`` with its ``path``: the siblings' ``(hash, slots)`` from the leaf up."""

    position: int
    leaf: Leaf
    path: tuple[Node, ...]

    def to_bytes(self) -> bytes:
        """A tag byte, ``u32 position``, the leaf, ``u8`` path length, 40 bytes per node."""
        return _TAG_LEAF + _leaf_proof_body(self)

    @classmethod
    def from_bytes(cls, data: bytes, *, max_leaves: int) -> LeafProof:
        """Parse :meth:`to_bytes`' output for a tree of at most ``max_leaves`` leaves (else DataError)."""
        return _decode(data, _TAG_LEAF, max_leaves, _Reader.leaf_proof)


@dataclass(frozen=True)
class MultiProof:
    """Leaves at strictly increasing ``positions`` with one proof: each node they need, once.

    Canonical order: from the leaves up, each level's known nodes in increasing index give their
    sibling unless it is known too or missing (an unpaired last node is carried up).
    """

    positions: tuple[int, ...]
    leaves: tuple[Leaf, ...]
    nodes: tuple[Node, ...]

    def to_bytes(self) -> bytes:
        """A tag byte, ``u32`` count, the ``u32`` positions, the leaves, ``u32`` node count, the nodes."""
        count = len(self.positions)
        parts = [_TAG_MULTI, struct.pack(f"<I{count}I", count, *self.positions)]
        parts += [leaf.to_bytes() for leaf in self.leaves]
        parts.append(struct.pack("<I", len(self.nodes)))
        return b"".join(parts + [struct.pack("<32sQ", *v) for v in self.nodes])

    @classmethod
    def from_bytes(cls, data: bytes, *, max_leaves: int) -> MultiProof:
        """Parse :meth:`to_bytes`' output for a tree of at most ``max_leaves`` leaves (else DataError)."""
        return _decode(data, _TAG_MULTI, max_leaves, _Reader.multi)


@dataclass(frozen=True)
class RangeProof:
    """A round's boundary leaves: ``first`` holds slot ``a``, ``last`` slot ``b - 1`` (maybe the same)."""

    first: LeafProof
    last: LeafProof

    def to_bytes(self) -> bytes:
        """A tag byte, then each boundary's :meth:`LeafProof.to_bytes` without its tag."""
        return _TAG_RANGE + _leaf_proof_body(self.first) + _leaf_proof_body(self.last)

    @classmethod
    def from_bytes(cls, data: bytes, *, max_leaves: int) -> RangeProof:
        """Parse :meth:`to_bytes`' output for a tree of at most ``max_leaves`` leaves (else DataError)."""
        return _decode(data, _TAG_RANGE, max_leaves, lambda r: cls(r.leaf_proof(), r.leaf_proof()))


def _leaf_proof_body(p: LeafProof) -> bytes:
    head = struct.pack("<I", p.position) + p.leaf.to_bytes() + struct.pack("<B", len(p.path))
    return head + b"".join(struct.pack("<32sQ", *v) for v in p.path)


def _decode(data: bytes, tag: bytes, max_leaves: int, read: Callable[[_Reader], _T]) -> _T:
    """One message read whole: its tag, ``read``'s fields, no byte left (DataError otherwise)."""
    if not _is_int(max_leaves) or not 1 <= max_leaves < 1 << 32:
        raise ParameterError("max_leaves", max_leaves, "an integer in [1, 2**32)")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DataError(f"expected bytes, got {type(data).__name__}")
    r = _Reader(memoryview(data).cast("B"), max_leaves)
    if r.take(len(tag)) != tag:
        raise DataError("not the cohort-tree message expected (wrong tag)")
    try:
        got = read(r)
    except ParameterError as e:  # a field out of range
        raise DataError(f"malformed cohort-tree message: {e}") from None
    if r.at != len(r.view):
        raise DataError(f"{len(r.view) - r.at} bytes after a cohort-tree message")
    return got


class _Reader:
    """Reads a wire encoding's fields, checking every length before it reads (DataError otherwise).

    Fixed-size fields are read with ``struct``'s ``unpack_from`` straight from the view; a run of
    positions or nodes at once, in the order (and with the errors) of reading them one by one.
    """

    def __init__(self, view: memoryview, max_leaves: int) -> None:
        self.view, self.at, self.max_leaves = view, 0, max_leaves
        self.depth = (max_leaves - 1).bit_length()  # the longest proof: ceil(log2 max_leaves)

    def _truncated(self) -> DataError:
        return DataError(f"truncated cohort-tree message ({len(self.view)} bytes)")

    def take(self, k: int) -> bytes:
        if self.at + k > len(self.view):
            raise self._truncated()
        self.at += k
        return bytes(self.view[self.at - k : self.at])

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "little")

    def position(self) -> int:
        p = self.u32()
        if p >= self.max_leaves:
            raise DataError(f"position {p} of a tree of at most {self.max_leaves} leaves")
        return p

    def positions(self, count: int) -> tuple[int, ...]:
        """``count`` positions: those present checked first, then the length (as one by one)."""
        present = min(count, (len(self.view) - self.at) // 4)
        got = struct.unpack_from(f"<{present}I", self.view, self.at)
        if present and max(got) >= self.max_leaves:
            p = next(p for p in got if p >= self.max_leaves)
            raise DataError(f"position {p} of a tree of at most {self.max_leaves} leaves")
        if present < count:
            raise self._truncated()
        self.at += 4 * count
        return got

    def nodes(self, m: int) -> tuple[Node, ...]:
        """``m`` nodes, each ``(32-byte hash, u64 slots)``."""
        end = self.at + _NODE.size * m
        if end > len(self.view):
            raise self._truncated()
        got = tuple(_NODE.iter_unpack(self.view[self.at : end]))
        self.at = end
        return got

    def leaf(self) -> Leaf:
        return self.leaves(1)[0]

    def leaves(self, count: int) -> tuple[Leaf, ...]:
        """``count`` leaves one after the other (a multiproof's: one loop, the fields' locals kept)."""
        view, at, end, got = self.view, self.at, len(self.view), []
        u16, tail, tail_size = _U16.unpack_from, _LEAF_TAIL.unpack_from, _LEAF_TAIL.size
        for _ in range(count):
            if at + 2 > end:
                raise self._truncated()
            (size,) = u16(view, at)
            start, at = at, at + 2
            if at + size > end:
                raise self._truncated()
            try:
                cid = str(view[at : at + size], "utf-8")
            except UnicodeDecodeError:
                raise DataError("a leaf's client id is not UTF-8") from None
            at += size
            if at + tail_size > end:
                raise self._truncated()
            commitment, key, slots = tail(view, at)
            at += tail_size
            got.append(_parsed_leaf(cid, commitment, key, slots, bytes(view[start:at])))
        self.at = at
        return tuple(got)

    def leaf_proof(self) -> LeafProof:
        position, leaf, m = self.position(), self.leaf(), self.take(1)[0]
        if m > self.depth:
            raise DataError(f"a proof of {m} nodes for a tree of at most {self.max_leaves} leaves")
        return LeafProof(position, leaf, self.nodes(m))

    def multi(self) -> MultiProof:
        count = self.u32()
        if not 1 <= count <= self.max_leaves:
            raise DataError(f"a multiproof of {count} leaves (at most {self.max_leaves})")
        positions = self.positions(count)
        if not all(map(operator.lt, positions, positions[1:])):
            raise DataError("a multiproof's positions are not strictly increasing")
        leaves = self.leaves(count)
        m = self.u32()
        if m > count * self.depth:
            raise DataError(f"a multiproof of {count} leaves with {m} nodes")
        return MultiProof(positions, leaves, self.nodes(m))


class CohortTree:
    """The server's Merkle sum tree over a run's cohort; every proof in ``O(log n)`` lookups.

    Built bottom-up in ``2 n - 1`` hashes as :class:`fedstats.wire.merkle.MerkleTree` (RFC 9162's
    shape), every level kept. ``leaves``: the members in slot order, at least one, each holding
    ``slot_count >= 1`` slots (ParameterError otherwise or if they reach ``2**64``).
    """

    def __init__(self, leaves: Sequence[Leaf]) -> None:
        self._leaves = tuple(leaves)
        if not self._leaves or len(self._leaves) >= 1 << 32:
            raise ParameterError("leaves", len(self._leaves), "between 1 and 2**32 - 1 leaves")
        for j, leaf in enumerate(self._leaves):
            if not isinstance(leaf, Leaf) or leaf.slot_count < 1:
                raise ParameterError(f"leaves[{j}]", leaf, "a Leaf with slot_count >= 1")
        slots = [leaf.slot_count for leaf in self._leaves]
        self._starts = list(itertools.accumulate(slots, initial=0))
        if self._starts[-1] >= _U64:
            raise ParameterError("leaves", self._starts[-1], "slots in all below 2**64")
        # each leaf's encoding, kept: its hash is taken over it, and every proof the server serves
        # carries it again (a neighbourhood's multiproof, per device and round)
        self._encoded = list(map(_encode, self._leaves))
        sha = hashlib.sha256
        hashes = [sha(b"\x00" + _LEAF + data).digest() for data in self._encoded]
        self._hashes, self._slots = [hashes], [slots]
        pack = _INNER.pack
        while len(hashes) > 1:
            h, s, pairs = hashes, slots, range(0, len(hashes) - 1, 2)
            hashes = [sha(b"\x01" + pack(h[i], s[i], h[i + 1], s[i + 1])).digest() for i in pairs]
            slots = [s[i] + s[i + 1] for i in pairs]
            if len(h) % 2:
                hashes.append(h[-1])
                slots.append(s[-1])
            self._hashes.append(hashes)
            self._slots.append(slots)
        self.head = TreeHead(len(self._leaves), self._starts[-1], hashes[0])
        # every node below the root encoded as a proof carries it (``_NODE``), for multiproof_bytes
        self._packed = [
            list(map(_NODE.pack, h, s))
            for h, s in zip(self._hashes[:-1], self._slots[:-1], strict=True)
        ]

    def _check(self, position: int, name: str = "position") -> int:
        if not _is_int(position) or not 0 <= position < len(self._leaves):
            raise ParameterError(name, position, f"an integer in [0, {len(self._leaves)})")
        return position

    def leaf(self, position: int) -> Leaf:
        """The leaf at ``position`` (ParameterError outside ``[0, n)``)."""
        return self._leaves[self._check(position)]

    def slot_start(self, position: int) -> int:
        """The first slot of the leaf at ``position`` (ParameterError outside ``[0, n)``)."""
        return self._starts[self._check(position)]

    def proof(self, position: int) -> tuple[Node, ...]:
        """Leaf ``position``'s inclusion proof: ``ceil(log2 n)`` siblings at most (ParameterError)."""
        i, out = self._check(position), []
        for hashes, slots in zip(self._hashes[:-1], self._slots[:-1], strict=True):
            if i ^ 1 < len(hashes):  # else the node is carried up unpaired
                out.append((hashes[i ^ 1], slots[i ^ 1]))
            i >>= 1
        return tuple(out)

    def leaf_proof(self, position: int) -> LeafProof:
        """The leaf at ``position`` with its :meth:`proof`."""
        return LeafProof(position, self.leaf(position), self.proof(position))

    def multiproof(self, positions: Iterable[int]) -> MultiProof:
        """One proof of the leaves at ``positions`` (any order, repeats ignored; ParameterError if none)."""
        known = sorted({self._check(p, "positions") for p in positions})
        if not known:
            raise ParameterError("positions", known, "at least one position")
        nodes = [
            (self._hashes[level][j], self._slots[level][j])
            for level, given in enumerate(self._siblings(known))
            for j in given
        ]
        return MultiProof(tuple(known), tuple(self._leaves[p] for p in known), tuple(nodes))

    def _siblings(self, known: list[int]) -> list[list[int]]:
        """Per level below the root, the indices of the nodes a multiproof of ``known`` carries.

        ``known``: the positions, sorted and distinct. A node is carried when its sibling is needed
        and cannot be computed from the leaves (canonical order: level by level, left to right).
        """
        out = []
        for hashes in self._hashes[:-1]:
            have, size = set(known), len(hashes)
            out.append([i ^ 1 for i in known if i ^ 1 < size and i ^ 1 not in have])
            known = sorted({i >> 1 for i in known})
        return out

    def multiproof_bytes(self, positions: Iterable[int]) -> bytes:
        """``self.multiproof(positions).to_bytes()``, from encodings kept at construction.

        The server's form of the proof it serves per device and round (a neighbourhood's leaves:
        ``k`` neighbours, 16 audited members, the two-hop neighbours), where building the
        :class:`MultiProof` and encoding each leaf and node again cost most of the answer.

        Parameters
        ----------
        positions : iterable of int
            Leaf positions in ``[0, n)``, any order, repeats ignored; at least one.

        Returns
        -------
        bytes
            :meth:`MultiProof.to_bytes` of the multiproof of those positions, byte for byte.

        Raises
        ------
        ParameterError
            If there is no position, or one is not an integer (a bool is refused) in ``[0, n)``.
        """
        unique = set(positions)
        n = len(self._leaves)
        # the common case checked in C: plain ints (a subclass such as an IntEnum takes _is_int's test)
        plain = set(map(type, unique)) == {int} or all(map(_is_int, unique))
        if not unique or not plain or not 0 <= min(unique) <= max(unique) < n:
            bad: object = next((p for p in unique if not (_is_int(p) and 0 <= p < n)), [])
            raise ParameterError("positions", bad, f"at least one integer in [0, {n})")
        known = sorted(unique)
        nodes = [
            b
            for packed, given in zip(self._packed, self._siblings(known), strict=True)
            for b in map(packed.__getitem__, given)
        ]
        count = len(known)
        head = _TAG_MULTI + struct.pack(f"<I{count}I", count, *known)
        leaves = b"".join([self._encoded[p] for p in known])
        return head + leaves + struct.pack("<I", len(nodes)) + b"".join(nodes)

    def positions_of(self, a: int, b: int) -> tuple[int, int]:
        """The positions ``[p_lo, p_hi)`` whose slots meet ``[a, b)`` (ParameterError if empty)."""
        total = self.head.total_slots
        if not (_is_int(a) and _is_int(b)) or not 0 <= a < b <= total:
            raise ParameterError("(a, b)", (a, b), f"a non-empty client range within [0, {total})")
        return bisect.bisect_right(self._starts, a) - 1, bisect.bisect_right(self._starts, b - 1)

    def range_proof(self, a: int, b: int) -> RangeProof:
        """The boundary leaves of client range ``[a, b)`` (:func:`verify_range`; as positions_of)."""
        lo, hi = self.positions_of(a, b)
        return RangeProof(self.leaf_proof(lo), self.leaf_proof(hi - 1))


def _sibling(p: object, room: int) -> Node:
    """A proof's node, checked: a 32-byte hash and ``1 <= slots <= room`` (SecurityError otherwise)."""
    if not isinstance(p, tuple) or len(p) != 2 or not isinstance(p[0], bytes):
        raise SecurityError("the proof has a node too many or too few, or not (hash, slots)")
    if len(p[0]) != HASH_BYTES or not _is_int(p[1]) or not 1 <= p[1] <= room:
        raise SecurityError("an inclusion proof's node does not fit the tree (hash or slots)")
    return p[0], p[1]


def verify_leaf(head: TreeHead, position: int, leaf: Leaf, proof: Sequence[Node]) -> int:
    """Check that ``leaf`` is leaf ``position`` of the tree of ``head``; return its ``slot_start``.

    RFC 9162 2.1.3.2's algorithm with each node's slots carried up: a sibling met on the left adds its
    slots to ``slot_start``; every sum is checked against ``head.total_slots``. ``proof``: the siblings'
    ``(hash, slots)`` from the leaf up (:meth:`CohortTree.proof`). The leaf holds the slots
    ``[slot_start, slot_start + leaf.slot_count)``.

    Raises
    ------
    SecurityError
        If the proof does not lead from this leaf at this position to the head's root and total, has
        the wrong length for ``head.n``, or a slot count is zero or exceeds ``total_slots``.
    """
    total = head.total_slots
    if not _is_int(position) or not 0 <= position < head.n:
        raise SecurityError(f"leaf {position!r} is not a position of a tree of {head.n} leaves")
    if not 1 <= leaf.slot_count <= total:
        raise SecurityError(f"leaf {position} holds {leaf.slot_count} slots, not in [1, {total}]")
    fn, sn, start = position, head.n - 1, 0
    node: Node = (leaf.hash(), leaf.slot_count)
    for p in proof:
        p = _sibling(p if sn else None, total - node[1])  # sn == 0: the proof is too long
        if fn & 1 or fn == sn:
            node, start = (_inner(p, node), p[1] + node[1]), start + p[1]
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            node = (_inner(node, p), node[1] + p[1])
        fn, sn = fn >> 1, sn >> 1
    if sn != 0 or node[1] != total or not hmac.compare_digest(node[0], head.root):
        raise SecurityError(f"leaf {position} is not in the committed tree of {head.n} leaves")
    return start


def verify_multi(
    head: TreeHead,
    proof: MultiProof,
    positions: Iterable[int] | None = None,
    *,
    starts: bool = True,
) -> list[int]:
    """Check every leaf of a :class:`MultiProof` against ``head``; return their ``slot_start`` in order.

    The nodes above the leaves are recomputed level by level from the leaves and the proof's nodes
    (consumed in canonical order, each once); each leaf's first slot is then read top-down.

    Parameters
    ----------
    head : TreeHead
        The head the device verified its own leaf against.
    proof : MultiProof
        The server's leaves and nodes (:meth:`CohortTree.multiproof`).
    positions : iterable of int, optional
        The positions the device asked for (repeats ignored): the proof must cover exactly these.
    starts : bool, default True
        Whether to read the leaves' ``slot_start`` (False: the same checks, and an empty list, for a
        caller that needs the leaves only, as :func:`fedstats.wire.tree_seeding.verify_leaves`).

    Returns
    -------
    list of int
        Each leaf's ``slot_start``, in increasing position order (empty with ``starts=False``).

    Raises
    ------
    SecurityError
        If the positions are not the ones asked for, not strictly increasing within ``[0, n)`` or not
        one leaf each, there are too few or too many nodes, a slot count is zero or exceeds
        ``total_slots``, or the proof does not lead to the head's root and total.
    """
    total, pos = head.total_slots, list(proof.positions)
    if positions is not None and pos != sorted(set(positions)):
        raise SecurityError("the multiproof does not cover the positions asked for")
    if not pos or len(proof.leaves) != len(pos) or pos != sorted(set(pos)):
        raise SecurityError("a multiproof needs one leaf per position, positions increasing")
    if not _all_int(pos) or not 0 <= pos[0] <= pos[-1] < head.n:
        raise SecurityError(f"a multiproof's positions are not positions of {head.n} leaves")
    # the known nodes of a level, in increasing index: indices, hashes and slots
    hashes, slots = [], []
    for p, leaf in zip(pos, proof.leaves, strict=True):
        if not 1 <= leaf.slot_count <= total:
            raise SecurityError(f"leaf {p} holds {leaf.slot_count} slots, not in [1, {total}]")
        hashes.append(leaf.hash())
        slots.append(leaf.slot_count)
    nodes = tuple(proof.nodes)
    good = _well_formed(nodes, total)  # nodes[good] is the first that _sibling refuses, if any
    index, size, taken = pos, head.n, 0
    pack, sha256 = _INNER_TAGGED.pack, hashlib.sha256
    # per level, each known node's parent (its index in the level above's list) and the slots left
    # of it under that parent (its left sibling's when it is a right child), for the top-down pass
    parents: list[tuple[list[int], list[int]]] = []
    while size > 1:
        up_index: list[int] = []
        up_hashes: list[bytes] = []
        up_slots: list[int] = []
        parent: list[int] = []
        left_of: list[int] = []
        j, count, last = 0, len(index), size - 1
        while j < count:
            i = index[j]
            if i & 1:  # a right child whose left sibling is the proof's next node (else paired)
                if taken == good:
                    _sibling(nodes[taken] if taken < len(nodes) else None, total)  # raises
                (lh, ls), rh, rs = nodes[taken], hashes[j], slots[j]
                taken += 1
                if starts:
                    parent.append(len(up_index))
                    left_of.append(ls)
            elif j + 1 < count and index[j + 1] == i + 1:  # both children known
                lh, ls, rh, rs = hashes[j], slots[j], hashes[j + 1], slots[j + 1]
                j += 1
                if starts:
                    parent += (len(up_index), len(up_index))
                    left_of += (0, ls)
            elif i == last:  # the unpaired last node, carried up
                if starts:
                    parent.append(len(up_index))
                    left_of.append(0)
                up_index.append(i >> 1)
                up_hashes.append(hashes[j])
                up_slots.append(slots[j])
                j += 1
                continue
            else:  # a left child whose right sibling is the proof's next node
                if taken == good:
                    _sibling(nodes[taken] if taken < len(nodes) else None, total)  # raises
                lh, ls, (rh, rs) = hashes[j], slots[j], nodes[taken]
                taken += 1
                if starts:
                    parent.append(len(up_index))
                    left_of.append(0)
            j += 1
            if ls + rs > total:
                raise SecurityError(f"the multiproof's slots exceed the tree's {total}")
            up_index.append(i >> 1)
            up_hashes.append(sha256(pack(1, lh, ls, rh, rs)).digest())
            up_slots.append(ls + rs)
        parents.append((parent, left_of))
        index, hashes, slots, size = up_index, up_hashes, up_slots, (size + 1) // 2
    if taken < len(nodes):
        raise SecurityError("the multiproof has nodes it does not need")
    if slots[0] != total or not hmac.compare_digest(hashes[0], head.root):
        raise SecurityError(f"the multiproof's leaves are not in the committed tree of {head.n}")
    if not starts:
        return []
    out = [0]
    for parent, left_of in reversed(parents):
        out = [out[q] + s for q, s in zip(parent, left_of, strict=True)]
    return out


def _well_formed(nodes: tuple[object, ...], total: int) -> int:
    """The index of the first node :func:`_sibling` refuses with room ``total``; ``len(nodes)`` if none.

    The common case (every node a plain ``(32 bytes, int in [1, total])`` tuple) is checked in C.
    """
    if set(map(type, nodes)) <= {tuple} and set(map(len, nodes)) <= {2}:  # type: ignore[arg-type]
        hashes, slots = zip(*nodes, strict=True) if nodes else ((), ())
        if (
            set(map(type, hashes)) <= {bytes}
            and set(map(len, hashes)) <= {HASH_BYTES}
            and set(map(type, slots)) <= {int}
            and (not slots or 1 <= min(slots) <= max(slots) <= total)
        ):
            return len(nodes)
    for j, p in enumerate(nodes):
        try:
            _sibling(p, total)
        except SecurityError:
            return j
    return len(nodes)


def verify_range(head: TreeHead, a: int, b: int, proof: RangeProof) -> tuple[int, int]:
    """A device's check of a round's participants: the positions ``[p_lo, p_hi)`` meeting ``[a, b)``.

    The first boundary leaf must hold slot ``a``, the last slot ``b - 1``: as every leaf holds a slot and
    verified leaves hold disjoint slots in position order, the positions between them are exactly the
    members whose slots meet the range (for ``a = 0`` position 0, for ``b = total_slots`` the last).

    Parameters
    ----------
    head : TreeHead
        The verified head.
    a, b : int
        The round's client range, ``0 <= a < b``, derived by the device from the task.
    proof : RangeProof
        The boundary leaves with their proofs (:meth:`CohortTree.range_proof`).

    Returns
    -------
    (int, int)
        ``(p_lo, p_hi)``: the participants' positions.

    Raises
    ------
    ParameterError
        If the range is empty or negative.
    SecurityError
        If it exceeds ``total_slots``, a boundary proof fails or a boundary leaf lacks its slot.
    """
    if not (_is_int(a) and _is_int(b)) or not 0 <= a < b:
        raise ParameterError("(a, b)", (a, b), "a non-empty client range, 0 <= a < b")
    if b > head.total_slots:
        raise SecurityError(f"the client range [{a}, {b}) exceeds the cohort's {head.total_slots}")
    for part, slot in ((proof.first, a), (proof.last, b - 1)):
        start = verify_leaf(head, part.position, part.leaf, part.path)
        if not start <= slot < start + part.leaf.slot_count:
            raise SecurityError(f"the boundary leaf {part.position} does not hold slot {slot}")
    return proof.first.position, proof.last.position + 1
