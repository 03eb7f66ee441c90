"""The device's fast paths of the cohort tree agree with the reference code they replaced.

``fedstats.wire.cohort_tree``'s reader (``struct.unpack_from``, leaves built without re-running their
checks, nodes read at once) and ``verify_multi`` (lists instead of dicts, the nodes' form checked at
once), and ``fedstats.wire.cohort_sessions``' permutation (HMAC from kept pad states, walks in batch,
``members_at``) are compared with the reference implementations below, copied from the code before
the change: the same results, the same refusals with the same error types and messages (one
difference: ``verify_multi`` now refuses a trailing ``None`` node, which the reference ignored).
Pinned values were computed with the reference code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import itertools
import random
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.errors import DataError, ParameterError, ProtocolAbortError, SecurityError
from fedstats.wire import cohort_sessions as cs
from fedstats.wire import cohort_tree as ct

# --- the reference code (as before the fast paths) ---


class _RefReader:
    def __init__(self, view: memoryview, max_leaves: int) -> None:
        self.view, self.at, self.max_leaves = view, 0, max_leaves
        self.depth = (max_leaves - 1).bit_length()

    def take(self, k: int) -> bytes:
        if self.at + k > len(self.view):
            raise DataError(f"truncated cohort-tree message ({len(self.view)} bytes)")
        self.at += k
        return bytes(self.view[self.at - k : self.at])

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "little")

    def position(self) -> int:
        p = self.u32()
        if p >= self.max_leaves:
            raise DataError(f"position {p} of a tree of at most {self.max_leaves} leaves")
        return p

    def node(self) -> ct.Node:
        return self.take(32), int.from_bytes(self.take(8), "little")

    def leaf(self) -> ct.Leaf:
        (size,) = struct.unpack("<H", self.take(2))
        try:
            cid = self.take(size).decode()
        except UnicodeDecodeError:
            raise DataError("a leaf's client id is not UTF-8") from None
        commitment, key, count = struct.unpack("<32s32sQ", self.take(72))
        return ct.Leaf(cid, commitment, key, int(count))

    def leaf_proof(self) -> ct.LeafProof:
        position, leaf, m = self.position(), self.leaf(), self.take(1)[0]
        if m > self.depth:
            raise DataError(f"a proof of {m} nodes for a tree of at most {self.max_leaves} leaves")
        return ct.LeafProof(position, leaf, tuple(self.node() for _ in range(m)))

    def multi(self) -> ct.MultiProof:
        count = self.u32()
        if not 1 <= count <= self.max_leaves:
            raise DataError(f"a multiproof of {count} leaves (at most {self.max_leaves})")
        positions = tuple(self.position() for _ in range(count))
        if any(q <= p for p, q in itertools.pairwise(positions)):
            raise DataError("a multiproof's positions are not strictly increasing")
        leaves = tuple(self.leaf() for _ in range(count))
        m = self.u32()
        if m > count * self.depth:
            raise DataError(f"a multiproof of {count} leaves with {m} nodes")
        return ct.MultiProof(positions, leaves, tuple(self.node() for _ in range(m)))


def _ref_decode(data: bytes, tag: bytes, max_leaves: int, read: Callable[[Any], Any]) -> Any:
    r = _RefReader(memoryview(data).cast("B"), max_leaves)
    if r.take(len(tag)) != tag:
        raise DataError("not the cohort-tree message expected (wrong tag)")
    try:
        got = read(r)
    except ParameterError as e:
        raise DataError(f"malformed cohort-tree message: {e}") from None
    if r.at != len(r.view):
        raise DataError(f"{len(r.view) - r.at} bytes after a cohort-tree message")
    return got


_PARSERS: dict[str, tuple[Callable[..., Any], bytes, Callable[[Any], Any]]] = {
    "multi": (ct.MultiProof.from_bytes, b"\x03", _RefReader.multi),
    "leaf_proof": (ct.LeafProof.from_bytes, b"\x02", _RefReader.leaf_proof),
    "range": (
        ct.RangeProof.from_bytes,
        b"\x04",
        lambda r: ct.RangeProof(r.leaf_proof(), r.leaf_proof()),
    ),
}


def _ref_sibling(p: object, room: int) -> ct.Node:
    if not isinstance(p, tuple) or len(p) != 2 or not isinstance(p[0], bytes):
        raise SecurityError("the proof has a node too many or too few, or not (hash, slots)")
    if len(p[0]) != 32 or not ct._is_int(p[1]) or not 1 <= p[1] <= room:
        raise SecurityError("an inclusion proof's node does not fit the tree (hash or slots)")
    return p[0], p[1]


def _ref_verify_multi(head: ct.TreeHead, proof: Any, positions: Any = None) -> list[int]:
    total, pos = head.total_slots, list(proof.positions)
    if positions is not None and pos != sorted(set(positions)):
        raise SecurityError("the multiproof does not cover the positions asked for")
    if not pos or len(proof.leaves) != len(pos) or pos != sorted(set(pos)):
        raise SecurityError("a multiproof needs one leaf per position, positions increasing")
    if not all(ct._is_int(p) for p in pos) or not 0 <= pos[0] <= pos[-1] < head.n:
        raise SecurityError(f"a multiproof's positions are not positions of {head.n} leaves")
    known: dict[int, ct.Node] = {}
    for p, leaf in zip(pos, proof.leaves, strict=True):
        if not 1 <= leaf.slot_count <= total:
            raise SecurityError(f"leaf {p} holds {leaf.slot_count} slots, not in [1, {total}]")
        known[p] = (leaf.hash(), leaf.slot_count)
    nodes, seen, size = iter(proof.nodes), [], head.n
    while size > 1:
        level, up = dict(known), {}
        for i in sorted(known):
            if i >> 1 in up:
                continue
            if i ^ 1 >= size:
                up[i >> 1] = known[i]
                continue
            if i ^ 1 not in level:
                level[i ^ 1] = _ref_sibling(next(nodes, None), total)
            left, right = level[i & ~1], level[i | 1]
            if left[1] + right[1] > total:
                raise SecurityError(f"the multiproof's slots exceed the tree's {total}")
            up[i >> 1] = (ct._inner(left, right), left[1] + right[1])
        seen.append(level)
        known, size = up, (size + 1) // 2
    if next(nodes, None) is not None:
        raise SecurityError("the multiproof has nodes it does not need")
    if known[0][1] != total or not hmac.compare_digest(known[0][0], head.root):
        raise SecurityError(f"the multiproof's leaves are not in the committed tree of {head.n}")
    starts = {0: 0}
    for level in reversed(seen):
        starts = {i: starts[i >> 1] + (level[i - 1][1] if i & 1 else 0) for i in level}
    return [starts[p] for p in pos]


def _ref_forward(seed: bytes, p_lo: int, p_hi: int, x: int, inverse: bool = False) -> int:
    """The session permutation from its definition (``hmac.digest`` per round value)."""
    d = p_hi - p_lo
    half = (max(2, (d - 1).bit_length()) + 1) // 2
    mask = (1 << half) - 1
    key = hmac.digest(
        seed, b"fedstats/wire/session-prp-key/v1\x00" + struct.pack("<QQ", p_lo, p_hi), "sha256"
    )

    def f(r: int, v: int) -> int:
        label = b"fedstats/wire/session-prp-round/v1\x00"
        mac = hmac.digest(key, label + struct.pack("<BQ", r, v), "sha256")
        return int.from_bytes(mac[:8], "little") & mask

    while True:
        left, right = x >> half, x & mask
        for r in range(7, -1, -1) if inverse else range(8):
            if inverse:
                left, right = right ^ f(r, left), left
            else:
                left, right = right, left ^ f(r, right)
        x = (left << half) | right
        if x < d:
            return x


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", fn())
    except (DataError, SecurityError, ParameterError) as e:
        return (type(e).__name__, str(e))


def _tree(n: int, seed: int) -> ct.CohortTree:
    rng = random.Random(seed)
    return ct.CohortTree(
        [
            ct.Leaf(
                f"c{j}-{rng.getrandbits(20)}",
                rng.randbytes(32),
                rng.randbytes(32),
                rng.randint(1, 3),
            )
            for j in range(n)
        ]
    )


# --- the reader ---


@settings(max_examples=200, deadline=None)
@given(
    cid=st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
    commitment=st.binary(min_size=32, max_size=32),
    key=st.binary(min_size=32, max_size=32),
    slots=st.integers(0, 2**64 - 1),
)
def test_a_leaf_the_reader_builds_is_the_checked_leaf(
    cid: str, commitment: bytes, key: bytes, slots: int
) -> None:
    checked = ct.Leaf(cid, commitment, key, slots)
    raw = checked.to_bytes()
    read = ct.Leaf.from_bytes(raw)
    assert read == checked and type(read) is ct.Leaf
    assert read.to_bytes() == raw and read.hash() == checked.hash()
    assert dataclasses.astuple(read) == (cid, commitment, key, slots)
    assert dataclasses.replace(read) == checked  # the checks accept every field the reader gives
    assert hash(read) == hash(checked) and repr(read) == repr(checked)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=120))
def test_any_bytes_read_as_a_leaf_round_trip_or_are_refused_as_before(data: bytes) -> None:
    got = _outcome(lambda: ct.Leaf.from_bytes(data))
    assert got == _outcome(lambda: _ref_decode(data, b"", 1, _RefReader.leaf))
    if got[0] == "ok":  # the kept encoding is the one the fields give
        leaf = got[1]
        assert leaf.to_bytes() == data == ct.Leaf(*dataclasses.astuple(leaf)).to_bytes()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 200), kind=st.sampled_from(sorted(_PARSERS)), data=st.data())
def test_the_reader_gives_the_reference_readers_result_or_error(
    n: int, kind: str, data: st.DataObject
) -> None:
    """Every truncation, changed byte, appended byte and smaller bound: the same proof or error."""
    tree = _tree(n, n)
    if kind == "multi":
        raw = tree.multiproof(
            data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=30))
        ).to_bytes()
    elif kind == "leaf_proof":
        raw = tree.leaf_proof(data.draw(st.integers(0, n - 1))).to_bytes()
    else:
        total = tree.head.total_slots
        a = data.draw(st.integers(0, total - 1))
        raw = tree.range_proof(a, data.draw(st.integers(a + 1, total))).to_bytes()
    parse, tag, ref = _PARSERS[kind]
    bound = data.draw(st.sampled_from([n, max(1, n // 3), 1, 2**32 - 1]))
    variants = [raw, raw + b"\x00", raw[: data.draw(st.integers(0, len(raw)))]]
    for head in (True, True, False, False, False, False):  # a flip in the head, or anywhere
        i = data.draw(st.integers(0, min(len(raw), 40 if head else len(raw)) - 1))
        flipped = raw[:i] + bytes([raw[i] ^ data.draw(st.integers(1, 255))]) + raw[i + 1 :]
        variants += [flipped, flipped[: data.draw(st.integers(i, len(raw)))]]  # and cut after it
    # every cut of each within its head (the count and positions, a leaf proof's position and leaf)
    variants += [v[:cut] for v in variants[:10] for cut in range(min(len(v), 180))]
    for v in variants:
        got = _outcome(lambda v=v: parse(v, max_leaves=bound))
        assert got == _outcome(lambda v=v: _ref_decode(v, tag, bound, ref))


def test_nodes_are_read_as_plain_tuples_of_bytes_and_int() -> None:
    tree = _tree(50, 3)
    mp = ct.MultiProof.from_bytes(tree.multiproof([1, 30]).to_bytes(), max_leaves=50)
    assert mp.nodes and all(
        type(v) is tuple and type(v[0]) is bytes and type(v[1]) is int for v in mp.nodes
    )
    assert type(mp.positions) is tuple and all(type(p) is int for p in mp.positions)


# --- verify_multi ---


class _Node(NamedTuple):
    hash: bytes
    slots: int


def _bad_nodes(h: bytes, s: int, total: int) -> list[object]:
    return [
        None,
        (h,),
        (h, s, s),
        [h, s],
        (h.hex(), s),
        (h[:31], s),
        (h + b"\x00", s),
        (bytearray(h), s),
        (h, 0),
        (h, total + 1),
        (h, True),
        (h, float(s)),
        (h, np.int64(s)),
        (h, -1),
        _Node(h, s),  # a tuple subclass: accepted, as by the reference
    ]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), data=st.data())
def test_verify_multi_gives_the_reference_result_or_error(n: int, data: st.DataObject) -> None:
    tree = _tree(n, n + 7)
    head, total = tree.head, tree.head.total_slots
    positions = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=40))
    mp = tree.multiproof(positions)
    read = ct.MultiProof.from_bytes(mp.to_bytes(), max_leaves=n)
    want = _ref_verify_multi(head, mp, positions)
    assert ct.verify_multi(head, mp, positions) == want == ct.verify_multi(head, read, positions)
    assert ct.verify_multi(head, read, positions, starts=False) == []
    cases: list[Any] = []
    nodes = list(mp.nodes)
    for _ in range(8):
        j = data.draw(st.integers(0, max(0, len(nodes) - 1)))
        if nodes:
            h, s = nodes[j]
            bad = data.draw(st.sampled_from([*_bad_nodes(h, s, total), (bytes(32), s), (h, s + 1)]))
            cases.append(ct.MultiProof(mp.positions, mp.leaves, (*nodes[:j], bad, *nodes[j + 1 :])))
            cases.append(ct.MultiProof(mp.positions, mp.leaves, (*nodes[:j], *nodes[j + 1 :])))
            cases.append(ct.MultiProof(mp.positions, mp.leaves, (*nodes[:j], bad, *nodes[j:])))
        extra = data.draw(st.sampled_from([(bytes(32), 1), (b"x", 1), (bytes(32), 0)]))
        cases.append(ct.MultiProof(mp.positions, mp.leaves, (*nodes, extra)))
        k = data.draw(st.integers(0, len(mp.leaves) - 1))
        leaf = mp.leaves[k]
        count = data.draw(st.sampled_from([0, 1, leaf.slot_count + 1, total, total + 1]))
        other = ct.Leaf(leaf.client_id, leaf.commitment, leaf.key, count)
        cases.append(
            ct.MultiProof(mp.positions, (*mp.leaves[:k], other, *mp.leaves[k + 1 :]), mp.nodes)
        )
        moved = list(mp.positions)
        moved[k] = data.draw(
            st.sampled_from([moved[k] + 1, moved[k] - 1, n, True, float(moved[k])])
        )
        cases.append(ct.MultiProof(tuple(moved), mp.leaves, mp.nodes))
    heads = [
        head,
        ct.TreeHead(head.n, total + 1, head.root),
        ct.TreeHead(head.n + 1, total + 1, head.root),
    ]
    for proof in cases:
        for h in heads:
            for asked in (None, positions):
                got = _outcome(lambda p=proof, h=h, a=asked: ct.verify_multi(h, p, a))
                assert got == _outcome(lambda p=proof, h=h, a=asked: _ref_verify_multi(h, p, a))
                # without the slot starts: the same refusal (or acceptance), nothing returned
                bare = _outcome(
                    lambda p=proof, h=h, a=asked: ct.verify_multi(h, p, a, starts=False)
                )
                assert bare == (("ok", []) if got[0] == "ok" else got)


def test_a_trailing_none_node_is_refused_now() -> None:
    """The reference took a ``None`` after the needed nodes for the end of the nodes; now refused."""
    tree = _tree(40, 1)
    mp = tree.multiproof([3, 17])
    padded = ct.MultiProof(mp.positions, mp.leaves, (*mp.nodes, None))  # type: ignore[arg-type]
    assert _ref_verify_multi(tree.head, padded) == ct.verify_multi(tree.head, mp)
    with pytest.raises(SecurityError, match="nodes it does not need"):
        ct.verify_multi(tree.head, padded)


def test_pinned_tree_and_multiproof() -> None:
    rng = random.Random(7)
    leaves = [
        ct.Leaf(f"c{j}", rng.randbytes(32), rng.randbytes(32), rng.randint(1, 3))
        for j in range(300)
    ]
    tree = ct.CohortTree(leaves)
    assert (
        tree.head.root.hex() == "43061ca3c88e10f9fb8e0f14e95c33e453038f8385e222f19ffb050a1a2d5810"
    )
    raw = tree.multiproof([0, 5, 77, 150, 299]).to_bytes()
    assert hashlib.sha256(raw).hexdigest() == (
        "61922e73f86ca7f273fe66bcbc36e2ea2b0935d9a371ece91ce46b36d8606d63"
    )
    read = ct.MultiProof.from_bytes(raw, max_leaves=300)
    assert ct.verify_multi(tree.head, read) == [0, 9, 150, 289, 588]


# --- the session permutation and members_at ---


@settings(max_examples=40, deadline=None)
@given(
    seed=st.binary(min_size=32, max_size=32),
    p_lo=st.integers(0, 2**40),
    d=st.integers(1, 3000),
    data=st.data(),
)
def test_the_permutation_is_its_definition(
    seed: bytes, p_lo: int, d: int, data: st.DataObject
) -> None:
    pi = cs.SessionPermutation(seed, p_lo, p_lo + d)
    xs = data.draw(st.lists(st.integers(0, d - 1), min_size=1, max_size=10))
    for x in xs:
        assert pi.forward(x) == _ref_forward(seed, p_lo, p_lo + d, x)
        assert pi.inverse(x) == _ref_forward(seed, p_lo, p_lo + d, x, inverse=True)
    if d <= 600:
        image = pi.forward_all()
        assert [int(image[x]) for x in xs] == [_ref_forward(seed, p_lo, p_lo + d, x) for x in xs]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.binary(min_size=32, max_size=32),
    d=st.integers(1, 5000),
    inverse=st.booleans(),
    data=st.data(),
)
def test_the_table_walk_is_the_python_walk(
    seed: bytes, d: int, inverse: bool, data: st.DataObject
) -> None:
    """A batch of at least ``2**(w / 2)`` points walks in numpy over the whole table; fewer walk in
    Python over the values they meet: the same images."""
    size = 1 << cs.SessionPermutation(seed, 0, d)._half
    xs = data.draw(st.lists(st.integers(0, d - 1), min_size=size, max_size=size + 40))
    table = cs.SessionPermutation(seed, 0, d)
    got = table._walk(xs, inverse)
    assert table._tables is not None and all(type(v) is int for v in got)
    one = cs.SessionPermutation(seed, 0, d)
    assert got == [one._walk([x], inverse)[0] for x in xs]
    assert one._tables is None  # each of those took the Python walk
    step = one.inverse if inverse else one.forward
    assert got == [step(x) for x in xs]


def test_pinned_permutations_and_members() -> None:
    seed = bytes(range(32))
    pinned = {
        (3, 1003): "ffcafb92ea6306f151a3589088a4a0e1d721352fb01e8d62f77792557807f0f7",
        (0, 5000): "26e73550e0cde87e7f74d4c9749a8a8446a12e1172367ddb6a2be1bc13c37086",
        (10, 17): "750c5e1d23cbd33860436381095f1438f3872861c79386950f6f2e08c9137433",
    }
    for (lo, hi), digest in pinned.items():
        image = cs.SessionPermutation(seed, lo, hi).forward_all()
        assert hashlib.sha256(image.astype("<i8").tobytes()).hexdigest() == digest
    want = [4190, 4163, 2144, 1779]
    assert [cs.member_at(seed, 0, 5000, 1000, 2, 3, j) for j in (0, 1, 499, 999)] == want
    assert cs.members_at(seed, 0, 5000, 1000, 2, 3, (0, 1, 499, 999)) == want
    assert cs.session_of(seed, 0, 5000, 1000, 2, 1234) == (0, 405, 1000, (0, 1000))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.binary(min_size=32, max_size=32),
    p_lo=st.integers(0, 10**6),
    d=st.integers(2, 4000),
    max_session=st.integers(2, 1500),
    data=st.data(),
)
def test_members_at_is_member_at_of_each_index(
    seed: bytes, p_lo: int, d: int, max_session: int, data: st.DataObject
) -> None:
    p_hi = p_lo + d
    try:
        bounds = cs._cut(seed, p_lo, p_hi, max_session, 2)[1]
    except ProtocolAbortError:  # a session of one: none to place
        return
    number = data.draw(st.integers(0, len(bounds) - 1))
    a, b = bounds[number]
    if b - a < 2:
        return
    indices = data.draw(st.lists(st.integers(0, b - a - 1), max_size=50))
    got = cs.members_at(seed, p_lo, p_hi, max_session, 2, number, iter(indices))
    cs._permutation.cache_clear()  # cold again: the same positions
    each = [cs.member_at(seed, p_lo, p_hi, max_session, 2, number, j) for j in indices]
    assert got == each
    for j, p in zip(indices, got, strict=True):
        assert cs.session_of(seed, p_lo, p_hi, max_session, 2, p) == (number, j, b - a, (a, b))
        assert p == p_lo + _ref_forward(seed, p_lo, p_hi, a + j, inverse=True)


def test_members_at_refuses_what_member_at_refuses() -> None:
    seed = bytes(32)
    for bad in (10, -1, True, 1.0, "1", np.int64(1), None):
        with pytest.raises(ParameterError) as single:
            cs.member_at(seed, 0, 10, 10, 2, 0, bad)  # type: ignore[arg-type]
        with pytest.raises(ParameterError) as many:
            cs.members_at(seed, 0, 10, 10, 2, 0, [0, 3, bad, 12])  # type: ignore[list-item]
        assert str(many.value) == str(single.value)
    with pytest.raises(ParameterError, match="number"):
        cs.members_at(seed, 0, 10, 5, 2, 2, [0])
    assert cs.members_at(seed, 0, 10, 10, 2, 0, []) == []


def test_a_bool_never_finds_a_cached_permutation_of_its_int() -> None:
    seed = bytes(range(32))
    cs.session_of(seed, 1, 9, 8, 2, 3)
    with pytest.raises(ParameterError):
        cs.session_of(seed, True, 9, 8, 2, 3)  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        cs.member_at(seed, True, 9, 8, 2, 0, 0)  # type: ignore[arg-type]
