"""The cohort's Merkle sum tree (``fedstats.wire.cohort_tree``): proofs of 1 to 5,000 leaves, every changed
byte refused, RFC 9162's shape, multiproofs, participant ranges, the seed committee, the session
permutation and the wire encodings.

Slot counts are drawn from 1 up (never 0): a member holds at least one slot (``seeding.check_cohort``
refuses 0), which is what makes a round's participants a position range; the tree refuses 0 (tested).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.errors import DataError, ParameterError, ProtocolAbortError, SecurityError
from fedstats.wire import cohort_sessions as cs
from fedstats.wire import cohort_tree as ct
from fedstats.wire import seeding
from fedstats.wire.merkle import MerkleTree, verify_inclusion


def _leaves(counts: list[int], rng: random.Random) -> list[ct.Leaf]:
    return [
        ct.Leaf(f"c{j}-{rng.getrandbits(20)}", rng.randbytes(32), rng.randbytes(32), c)
        for j, c in enumerate(counts)
    ]


def _tree(n: int, seed: int = 0, max_count: int = 3) -> ct.CohortTree:
    rng = random.Random(seed)
    return ct.CohortTree(_leaves([rng.randint(1, max_count) for _ in range(n)], rng))


def _flip(data: bytes, i: int) -> bytes:
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


def _mth(leaves: list[ct.Leaf]) -> tuple[bytes, int]:
    """The sum tree by RFC 9162's recursive definition (split at the largest power of two below n)."""
    if len(leaves) == 1:
        return leaves[0].hash(), leaves[0].slot_count
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    left, right = _mth(leaves[:k]), _mth(leaves[k:])
    return ct._inner(left, right), left[1] + right[1]


# --- the tree and single proofs ---


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(1, 2**40), min_size=1, max_size=70),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_leaf_verifies_with_its_slot_start(counts: list[int], seed: int) -> None:
    rng = random.Random(seed)
    leaves = _leaves(counts, rng)
    tree = ct.CohortTree(leaves)
    starts = list(itertools.accumulate([0, *counts[:-1]]))
    assert tree.head.total_slots == sum(counts) and tree.head.n == len(counts)
    assert (tree.head.root, tree.head.total_slots) == _mth(leaves)  # RFC 9162's recursive shape
    for p in range(len(leaves)):
        assert ct.verify_leaf(tree.head, p, leaves[p], tree.proof(p)) == starts[p]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 65, 1000, 4097, 5000])
def test_trees_up_to_5000_leaves(n: int) -> None:
    tree = _tree(n, seed=n)
    starts = list(itertools.accumulate([0] + [tree.leaf(p).slot_count for p in range(n - 1)]))
    positions = range(n) if n <= 1000 else random.Random(n).sample(range(n), 300)
    for p in positions:
        assert ct.verify_leaf(tree.head, p, tree.leaf(p), tree.proof(p)) == starts[p]
        assert tree.slot_start(p) == starts[p]


@pytest.mark.parametrize("n", [*range(1, 40), 100, 257, 1000])
def test_the_shape_is_rfc_9162s(n: int) -> None:
    """All slot counts 1 and each leaf's hash fixed: the same split points (root by the recursive
    definition) and the same audit path lengths as ``fedstats.wire.merkle``."""
    leaves = [ct.Leaf("x", bytes(32), bytes(32), 1)] * n
    tree = ct.CohortTree(leaves)
    assert (tree.head.root, tree.head.total_slots) == _mth(leaves)
    rfc = MerkleTree([b"x"] * n)
    for p in range(n):
        assert len(tree.proof(p)) == len(rfc.path(p))
    if n > 1:  # the root's children are the subtrees of the RFC's split
        k = 1 << ((n - 1).bit_length() - 1)
        left, right = ct.CohortTree(leaves[:k]).head, ct.CohortTree(leaves[k:]).head
        assert tree.head.root == ct._inner((left.root, k), (right.root, n - k))


@pytest.mark.parametrize("n", [1, 2, 7, 16, 33])
def test_any_changed_byte_is_refused(n: int) -> None:
    tree = _tree(n, seed=7)
    head = tree.head
    for p in range(n):
        leaf, proof = tree.leaf(p), tree.proof(p)
        ct.verify_leaf(head, p, leaf, proof)
        raw = leaf.to_bytes()
        for i in range(len(raw)):
            try:
                bad = ct.Leaf.from_bytes(_flip(raw, i))
            except DataError:
                continue  # the flipped length or UTF-8 no longer parses
            with pytest.raises(SecurityError):
                ct.verify_leaf(head, p, bad, proof)
        for j, (h, s) in enumerate(proof):
            for bad_node in [(_flip(h, b), s) for b in range(32)] + [(h, s ^ 1), (h, s + 1)]:
                broken = (*proof[:j], bad_node, *proof[j + 1 :])
                with pytest.raises(SecurityError):
                    ct.verify_leaf(head, p, leaf, broken)
        for other in {p ^ 1, p + 1, p - 1, n} - {p}:
            with pytest.raises(SecurityError):
                ct.verify_leaf(head, other, leaf, proof)
        for i in range(32):
            with pytest.raises(SecurityError):
                ct.verify_leaf(
                    ct.TreeHead(n, head.total_slots, _flip(head.root, i)), p, leaf, proof
                )
        for bad_head in (
            ct.TreeHead(n + 1, head.total_slots + 1, head.root),
            ct.TreeHead(n, head.total_slots + 1, head.root),
        ):
            with pytest.raises(SecurityError):
                ct.verify_leaf(bad_head, p, leaf, proof)
        for wrong in (proof[:-1], (*proof, proof[-1] if proof else (bytes(32), 1))):
            if wrong != proof:
                with pytest.raises(SecurityError):
                    ct.verify_leaf(head, p, leaf, wrong)


@pytest.mark.parametrize("n", [2, 5, 7, 12, 33, 100])
def test_another_n_is_refused_exactly_where_rfc_9162_refuses_it(n: int) -> None:
    """A head naming another n over the same root is refused unless the leaf's path has the same shape in
    both sizes, exactly as RFC 9162's algorithm (``merkle.verify_inclusion``) decides for the plain tree:
    the size is bound by each path's shape, not hashed into each node. Such a head leaves the positions
    whose path shape differs unprovable, which a server can do anyway by hashing garbage."""
    tree = _tree(n, seed=n)
    contents = [ct._LEAF + tree.leaf(p).to_bytes() for p in range(n)]
    rfc = MerkleTree(contents)
    refused = 0
    for m in range(1, n + 4):
        if m == n:
            continue
        for p in range(min(n, m)):
            rfc_ok = True
            try:
                verify_inclusion(contents[p], p, m, rfc.path(p), rfc.root)
            except SecurityError:
                rfc_ok = False
            head = ct.TreeHead(m, max(m, tree.head.total_slots), tree.head.root)
            try:
                ct.verify_leaf(head, p, tree.leaf(p), tree.proof(p))
                ok = True
            except SecurityError:
                ok = False
            assert ok == rfc_ok, (m, p)
            refused += not ok
    assert refused > 0


def test_slots_that_overflow_or_exceed_the_total_are_refused() -> None:
    tree = _tree(8, seed=3)
    head, leaf, proof = tree.head, tree.leaf(5), tree.proof(5)
    for s in (0, head.total_slots + 1, 2**64 - 1, 2**64 + 5, -1):
        bad = ((proof[0][0], s), *proof[1:])
        with pytest.raises(SecurityError):
            ct.verify_leaf(head, 5, leaf, bad)
    for count in (0, head.total_slots + 1):
        with pytest.raises(SecurityError):
            ct.verify_leaf(
                head, 5, ct.Leaf(leaf.client_id, leaf.commitment, leaf.key, count), proof
            )
    with pytest.raises(ParameterError):
        ct.CohortTree([leaf, ct.Leaf("zero", bytes(32), bytes(32), 0)])
    with pytest.raises(ParameterError):
        ct.CohortTree([ct.Leaf("a", bytes(32), bytes(32), 2**63)] * 2)
    with pytest.raises(ParameterError):
        ct.CohortTree([])


def test_proven_slot_ranges_partition_the_slots_in_position_order() -> None:
    """The leaves proven against one head hold disjoint, ordered slot ranges covering [0, total)."""
    tree = _tree(50, seed=11, max_count=9)
    spans = sorted(
        (ct.verify_leaf(tree.head, p, tree.leaf(p), tree.proof(p)), tree.leaf(p).slot_count, p)
        for p in range(50)
    )
    assert [p for _, _, p in spans] == list(range(50))
    assert all(a + c == b for (a, c, _), (b, _, _) in itertools.pairwise(spans))
    assert spans[-1][0] + spans[-1][1] == tree.head.total_slots


def test_head_digest_binds_every_field() -> None:
    h = _tree(10).head
    d = h.digest()
    assert ct.TreeHead(h.n + 1, h.total_slots, h.root).digest() != d
    assert ct.TreeHead(h.n, h.total_slots + 1, h.root).digest() != d
    assert ct.TreeHead(h.n, h.total_slots, _flip(h.root, 0)).digest() != d
    assert (
        d
        == hashlib.sha256(
            b"fedstats/wire/cohort-head/v1\x00" + struct.pack("<IQ", h.n, h.total_slots) + h.root
        ).digest()
    )
    with pytest.raises(ParameterError):
        ct.TreeHead(5, 4, h.root)  # fewer slots than leaves


# --- multiproofs ---


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), data=st.data())
def test_a_multiproof_verifies_exactly_what_separate_proofs_verify(
    n: int, data: st.DataObject
) -> None:
    tree = _tree(n, seed=n)
    positions = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=40))
    mp = tree.multiproof(positions)
    want = sorted(set(positions))
    assert list(mp.positions) == want
    separate = [ct.verify_leaf(tree.head, p, tree.leaf(p), tree.proof(p)) for p in want]
    assert ct.verify_multi(tree.head, mp, positions) == separate
    assert len(mp.nodes) <= sum(len(tree.proof(p)) for p in want)
    # a changed node or leaf, a node too many or too few: refused, as a separate proof would be
    for j in range(len(mp.nodes)):
        h, s = mp.nodes[j]
        for bad in ((_flip(h, j % 32), s), (h, s + 1)):
            broken = ct.MultiProof(
                mp.positions, mp.leaves, (*mp.nodes[:j], bad, *mp.nodes[j + 1 :])
            )
            with pytest.raises(SecurityError):
                ct.verify_multi(tree.head, broken)
    j = data.draw(st.integers(0, len(want) - 1))
    leaf = mp.leaves[j]
    other = ct.Leaf(leaf.client_id + "x", leaf.commitment, leaf.key, leaf.slot_count)
    with pytest.raises(SecurityError):
        ct.verify_multi(
            tree.head,
            ct.MultiProof(mp.positions, (*mp.leaves[:j], other, *mp.leaves[j + 1 :]), mp.nodes),
        )
    for nodes in (mp.nodes[:-1], (*mp.nodes, (bytes(32), 1))):
        if nodes != mp.nodes:
            with pytest.raises(SecurityError):
                ct.verify_multi(tree.head, ct.MultiProof(mp.positions, mp.leaves, nodes))
    if n > 1:
        with pytest.raises(SecurityError):  # not the positions asked for
            ct.verify_multi(tree.head, mp, want[1:] if len(want) > 1 else [(want[0] + 1) % n])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), data=st.data())
def test_the_servers_multiproof_bytes_are_the_multiproofs_encoding(
    n: int, data: st.DataObject
) -> None:
    """``multiproof_bytes`` (the leaves' kept encodings) is byte for byte ``multiproof().to_bytes()``,
    and refuses what ``multiproof`` refuses."""
    tree = _tree(n, seed=n + 1)
    positions = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=60))
    assert tree.multiproof_bytes(positions) == tree.multiproof(positions).to_bytes()
    assert tree.multiproof_bytes(iter(positions)) == tree.multiproof(positions).to_bytes()
    for bad in ([], [n], [-1], [0, n + 3], [True], [1.0], [0, "1"], [0, np.int64(1)]):
        with pytest.raises(ParameterError):
            tree.multiproof(bad)
        with pytest.raises(ParameterError):
            tree.multiproof_bytes(bad)


def test_a_multiproof_of_moved_positions_is_refused() -> None:
    tree = _tree(100, seed=5)
    mp = tree.multiproof([3, 40, 77])
    for moved in ((3, 41, 77), (2, 40, 77), (3, 40, 99)):
        with pytest.raises(SecurityError):
            ct.verify_multi(tree.head, ct.MultiProof(moved, mp.leaves, mp.nodes))
    with pytest.raises(SecurityError):
        ct.verify_multi(tree.head, ct.MultiProof((40, 3, 77), mp.leaves, mp.nodes))
    with pytest.raises(SecurityError):
        ct.verify_multi(ct.TreeHead(101, tree.head.total_slots + 1, tree.head.root), mp)


# --- participant ranges ---


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 200), data=st.data())
def test_the_range_proof_gives_the_brute_force_participants(n: int, data: st.DataObject) -> None:
    tree = _tree(n, seed=n, max_count=4)
    total = tree.head.total_slots
    a = data.draw(st.integers(0, total - 1))
    b = data.draw(st.sampled_from([a + 1, total, data.draw(st.integers(a + 1, total))]))
    brute = [
        p
        for p in range(n)
        if tree.slot_start(p) < b and tree.slot_start(p) + tree.leaf(p).slot_count > a
    ]
    proof = tree.range_proof(a, b)
    lo, hi = ct.verify_range(tree.head, a, b, proof)
    assert list(range(lo, hi)) == brute
    assert tree.positions_of(a, b) == (lo, hi)
    assert ct.verify_range(
        tree.head, a, b, ct.RangeProof.from_bytes(proof.to_bytes(), max_leaves=n)
    ) == (lo, hi)


def test_range_edges_and_refusals() -> None:
    tree = _tree(30, seed=2, max_count=3)
    head, total = tree.head, tree.head.total_slots
    assert ct.verify_range(head, 0, total, tree.range_proof(0, total)) == (0, 30)
    assert ct.verify_range(head, 0, 1, tree.range_proof(0, 1)) == (0, 1)
    assert ct.verify_range(head, total - 1, total, tree.range_proof(total - 1, total)) == (29, 30)
    for a, b in ((5, 5), (6, 5), (-1, 3)):
        with pytest.raises(ParameterError):
            ct.verify_range(head, a, b, tree.range_proof(0, 1))
        with pytest.raises(ParameterError):
            tree.range_proof(a, b)
    with pytest.raises(SecurityError):
        ct.verify_range(head, 0, total + 1, tree.range_proof(0, total))
    # boundary leaves that do not hold the range's ends (moved by one position) are refused
    a, b = tree.slot_start(10), tree.slot_start(20)
    good = tree.range_proof(a, b)
    assert ct.verify_range(head, a, b, good) == (10, 20)
    for first, last in ((9, 19), (11, 19), (10, 20), (10, 18)):
        bad = ct.RangeProof(tree.leaf_proof(first), tree.leaf_proof(last))
        with pytest.raises(SecurityError):
            ct.verify_range(head, a, b, bad)


# --- the committee, the reveal statement and the seed ---


def test_the_committee_is_distinct_sorted_deterministic_and_depends_on_the_head() -> None:
    rng = random.Random(1)
    for n in (1, 2, 39, 40):
        head = ct.TreeHead(n, n, rng.randbytes(32))
        assert cs.committee_positions(head) == list(range(n))
    seen = set()
    for n in (41, 100, 1000, 100_000):
        head = ct.TreeHead(n, n + 5, rng.randbytes(32))
        c = cs.committee_positions(head)
        assert len(c) == 40 == len(set(c)) and c == sorted(c) and 0 <= c[0] and c[-1] < n
        assert cs.committee_positions(head) == c
        assert cs.committee_positions(ct.TreeHead(n, n + 6, head.root)) != c
        assert cs.committee_positions(ct.TreeHead(n, n + 5, _flip(head.root, 3))) != c
        seen.add(tuple(c))
    assert cs.committee_positions(ct.TreeHead(10, 10, bytes(32)), kappa=3) == sorted(
        cs.committee_positions(ct.TreeHead(10, 10, bytes(32)), kappa=3)
    )
    assert len(cs.committee_positions(ct.TreeHead(10, 10, bytes(32)), kappa=9)) == 9
    with pytest.raises(ParameterError):
        cs.committee_positions(ct.TreeHead(10, 10, bytes(32)), kappa=0)


@pytest.mark.parametrize("n", [41, 100, 997])
def test_the_committee_is_roughly_uniform(n: int) -> None:
    """Each position's count over H heads is Binomial(H, kappa / n); the statistic
    ``sum (O - E)^2 / (H p (1 - p))`` has mean n (the committee's draws without replacement make the
    cells' covariances cancel in expectation) and standard error about sqrt(2 n); 6 of them tolerated."""
    heads, kappa = 3000, 40
    rng = random.Random(n)
    counts = np.zeros(n)
    for _ in range(heads):
        counts[cs.committee_positions(ct.TreeHead(n, n, rng.randbytes(32)), kappa)] += 1
    p = kappa / n
    stat = float(((counts - heads * p) ** 2).sum() / (heads * p * (1 - p)))
    assert abs(stat - n) < 6 * math.sqrt(2 * n), stat


def test_a_biased_committee_would_fail_the_uniformity_statistic() -> None:
    """The statistic of the test above sees a mild bias: positions 0 and 1 twice as likely."""
    n, kappa, heads = 100, 40, 2000
    rng = np.random.default_rng(0)
    w = np.ones(n)
    w[:2] = 2
    counts = np.zeros(n)
    for _ in range(heads):
        counts[rng.choice(n, kappa, replace=False, p=w / w.sum())] += 1
    p = kappa / n
    stat = float(((counts - heads * p) ** 2).sum() / (heads * p * (1 - p)))
    assert abs(stat - n) >= 6 * math.sqrt(2 * n)


def test_reveal_statement_and_committee_seed() -> None:
    head = _tree(100, seed=9).head
    values = [bytes([j]) * 32 for j in range(40)]
    s = cs.reveal_statement("run-1", head, 17, values[0])
    assert s.endswith(head.digest() + struct.pack("<I", 17) + values[0])
    assert s != cs.reveal_statement("run-2", head, 17, values[0])
    assert s != cs.reveal_statement("run-1", head, 18, values[0])
    assert s != cs.reveal_statement("run-1", _tree(100, seed=10).head, 17, values[0])
    with pytest.raises(ParameterError):
        cs.reveal_statement("run-1", head, 100, values[0])
    with pytest.raises(ParameterError):
        cs.reveal_statement("run-1", head, 1, b"short")
    seed = cs.committee_seed("run-1", head, values)
    assert len(seed) == 32 and seed == cs.committee_seed("run-1", head, list(values))
    assert seed != cs.committee_seed("run-1", head, values[::-1])
    assert seed != cs.committee_seed("run-2", head, values)
    assert seed != cs.committee_seed("run-1", _tree(100, seed=10).head, values)
    for bad in (values[:-1], [*values, values[0]], [*values[:-1], b"\x00" * 31]):
        with pytest.raises(SecurityError):
            cs.committee_seed("run-1", head, bad)
    small = _tree(5).head
    assert len(cs.committee_seed("r", small, values[:5])) == 32
    with pytest.raises(SecurityError):
        cs.committee_seed("r", small, values[:6])


# --- the session permutation and sessions ---


def test_the_permutation_is_a_bijection_for_every_d_up_to_600_and_at_the_width_boundaries() -> None:
    seed = hashlib.sha256(b"prp").digest()
    # every width up to 10 bits, then each width change up to 13 bits (the Feistel halves grow there)
    boundaries = {2**w + e for w in range(10, 13) for e in (-1, 0, 1)} | {3000}
    for d in [*range(1, 601), *sorted(boundaries)]:
        pi = cs.SessionPermutation(seed, 7, 7 + d)
        image = pi.forward_all()
        assert sorted(image.tolist()) == list(range(d)), d
        for x in (0, d // 2, d - 1):
            assert pi.forward(x) == int(image[x])
            assert pi.inverse(int(image[x])) == x


@settings(max_examples=50, deadline=None)
@given(d=st.integers(1, 200_000), seed=st.binary(min_size=32, max_size=32), data=st.data())
def test_forward_and_inverse_are_inverse(d: int, seed: bytes, data: st.DataObject) -> None:
    p_lo = data.draw(st.integers(0, 10**6))
    pi = cs.SessionPermutation(seed, p_lo, p_lo + d)
    xs = data.draw(st.lists(st.integers(0, d - 1), min_size=1, max_size=20))
    for x in xs:
        y = pi.forward(x)
        assert 0 <= y < d and pi.inverse(y) == x and pi.forward(pi.inverse(x)) == x
    if d <= 20_000:
        image = pi.forward_all()
        assert np.array_equal(np.sort(image), np.arange(d))
        assert [int(image[x]) for x in xs] == [pi.forward(x) for x in xs]


def test_the_permutation_depends_on_seed_and_participants_and_looks_random() -> None:
    seed = bytes(32)
    base = cs.SessionPermutation(seed, 0, 1000).forward_all()
    assert not np.array_equal(base, np.arange(1000))
    assert not np.array_equal(
        base, cs.SessionPermutation(b"\x01" + bytes(31), 0, 1000).forward_all()
    )
    assert not np.array_equal(base, cs.SessionPermutation(seed, 1, 1001).forward_all())
    assert abs(float(np.corrcoef(base, np.arange(1000))[0, 1])) < 0.15  # 4.7 standard errors
    with pytest.raises(ParameterError):
        cs.SessionPermutation(b"short", 0, 10)
    with pytest.raises(ParameterError):
        cs.SessionPermutation(seed, 5, 5)
    with pytest.raises(ParameterError):
        cs.SessionPermutation(seed, 0, 10).forward(10)


@pytest.mark.parametrize(
    ("p_lo", "p_hi", "max_session", "min_size"),
    [(0, 2, 2, 2), (3, 60, 10, 5), (0, 1000, 100, 50), (100, 1337, 1000, 2), (0, 5000, 990, 500)],
)
def test_session_of_and_member_at_agree_with_the_server(
    p_lo: int, p_hi: int, max_session: int, min_size: int
) -> None:
    seed = hashlib.sha256(f"{p_lo}/{p_hi}".encode()).digest()
    sessions = cs.sessions_of_positions(seed, p_lo, p_hi, max_session, min_size)
    d = p_hi - p_lo
    assert sorted(p for s in sessions for p in s) == list(range(p_lo, p_hi))
    bounds = seeding.session_bounds(d, max_session)
    assert [len(s) for s in sessions] == [b - a for a, b in bounds]
    for number, members in enumerate(sessions):
        for index, p in enumerate(members):
            seat = cs.session_of(seed, p_lo, p_hi, max_session, min_size, p)
            assert seat == (number, index, len(members), bounds[number])
            assert cs.member_at(seed, p_lo, p_hi, max_session, min_size, number, index) == p


def test_sessions_are_the_same_in_every_round_and_refuse_small_ones() -> None:
    seed = bytes(range(32))
    a = cs.sessions_of_positions(seed, 10, 400, 100, 20)
    assert a == cs.sessions_of_positions(seed, 10, 400, 100, 20)
    assert a != cs.sessions_of_positions(seed, 11, 400, 100, 20)
    with pytest.raises(ProtocolAbortError):
        cs.sessions_of_positions(seed, 0, 101, 100, 51)  # 2 sessions of 50 and 51
    assert [len(s) for s in cs.sessions_of_positions(seed, 0, 101, 100, 50)] == [50, 51]
    with pytest.raises(ProtocolAbortError):
        cs.session_of(seed, 0, 3, 10, 4, 1)
    with pytest.raises(ProtocolAbortError):
        cs.member_at(seed, 0, 3, 10, 4, 0, 0)
    with pytest.raises(ProtocolAbortError):
        cs.sessions_of_positions(seed, 5, 5, 10, 2)
    for max_session, min_size in ((1, 2), (2, 1), (True, 2)):
        with pytest.raises(ParameterError):
            cs.sessions_of_positions(seed, 0, 10, max_session, min_size)
    with pytest.raises(ParameterError):
        cs.sessions_of_positions(seed[:31], 0, 10, 5, 2)
    with pytest.raises(ParameterError):
        cs.session_of(seed, 0, 10, 10, 2, 10)
    with pytest.raises(ParameterError):
        cs.member_at(seed, 0, 10, 5, 2, 2, 0)
    with pytest.raises(ParameterError):
        cs.member_at(seed, 0, 10, 5, 2, 0, roster_index=5)


def test_session_roster_digest_binds_every_field() -> None:
    head = _tree(50).head
    args = (b"task", bytes(32), head, 3, 40, 20, 1, 19)
    d = cs.session_roster_digest(*args)
    assert len(d) == 32 and d == cs.session_roster_digest(*args)
    changed = [
        (b"tasl", *args[1:]),
        (args[0], b"\x01" + bytes(31), *args[2:]),
        (*args[:2], _tree(50, seed=1).head, *args[3:]),
        (*args[:3], 4, *args[4:]),
        (*args[:4], 41, *args[5:]),
        (*args[:5], 21, *args[6:]),
        (*args[:6], 0, args[7]),
        (*args[:7], 18),
    ]
    assert len({cs.session_roster_digest(*c) for c in changed} | {d}) == len(changed) + 1
    for bad in ((b"", *args[1:]), (*args[:3], 40, 40, *args[5:]), (*args[:7], 21), (*args[:7], 1)):
        with pytest.raises(ParameterError):
            cs.session_roster_digest(*bad)


# --- the wire ---


def test_the_encodings_round_trip() -> None:
    tree = _tree(300, seed=4)
    head = tree.head
    assert head.to_bytes() == b"\x01" + struct.pack("<IQ", head.n, head.total_slots) + head.root
    for p in (0, 1, 150, 299):
        leaf = tree.leaf(p)
        assert ct.Leaf.from_bytes(leaf.to_bytes()) == leaf
        lp = tree.leaf_proof(p)
        assert ct.LeafProof.from_bytes(lp.to_bytes(), max_leaves=300) == lp
    mp = tree.multiproof([5, 6, 100, 299])
    assert ct.MultiProof.from_bytes(mp.to_bytes(), max_leaves=300) == mp
    rp = tree.range_proof(10, 200)
    assert ct.RangeProof.from_bytes(rp.to_bytes(), max_leaves=300) == rp
    unicode = ct.Leaf("é-名", bytes(32), bytes(32), 2**64 - 1)
    assert ct.Leaf.from_bytes(unicode.to_bytes()) == unicode


def test_malformed_encodings_are_data_errors() -> None:
    tree = _tree(300, seed=4)
    encoded = {
        "leaf_proof": (ct.LeafProof, tree.leaf_proof(77).to_bytes()),
        "multi": (ct.MultiProof, tree.multiproof([1, 2, 250]).to_bytes()),
        "range": (ct.RangeProof, tree.range_proof(3, 99).to_bytes()),
    }
    for cls, raw in encoded.values():
        for cut in range(len(raw)):  # every truncation
            with pytest.raises(DataError):
                cls.from_bytes(raw[:cut], max_leaves=300)  # type: ignore[attr-defined]
        with pytest.raises(DataError):
            cls.from_bytes(raw + b"\x00", max_leaves=300)  # type: ignore[attr-defined]
        with pytest.raises(DataError):  # positions beyond the bound
            cls.from_bytes(raw, max_leaves=50)  # type: ignore[attr-defined]
    raw = encoded["leaf_proof"][1]
    with pytest.raises(DataError):  # another message's tag
        ct.MultiProof.from_bytes(raw, max_leaves=300)
    with pytest.raises(DataError):  # a proof longer than a tree of max_leaves can have
        ct.LeafProof.from_bytes(tree.leaf_proof(77).to_bytes(), max_leaves=2)
    with pytest.raises(DataError):
        ct.Leaf.from_bytes(struct.pack("<H", 2) + b"\xff\xfe" + bytes(72))  # not UTF-8
    many = b"\x03" + struct.pack("<I", 10**6)
    with pytest.raises(DataError):  # a count beyond max_leaves is refused before reading on
        ct.MultiProof.from_bytes(many, max_leaves=300)
    mp = tree.multiproof([1, 2])
    swapped = ct.MultiProof((2, 1), mp.leaves, mp.nodes).to_bytes()
    with pytest.raises(DataError):
        ct.MultiProof.from_bytes(swapped, max_leaves=300)
    nodes = ct.MultiProof(mp.positions, mp.leaves, mp.nodes * 20).to_bytes()
    with pytest.raises(DataError):  # more nodes than 2 leaves of a 300-leaf tree can need
        ct.MultiProof.from_bytes(nodes, max_leaves=300)


def test_any_changed_byte_of_an_encoded_proof_is_refused() -> None:
    """Every byte of a leaf proof, a multiproof and a range proof on the wire, flipped: the message no
    longer parses (DataError) or no longer verifies (SecurityError)."""
    tree = _tree(40, seed=6)
    head, total = tree.head, tree.head.total_slots
    a, b = tree.slot_start(9), tree.slot_start(30)
    cases = [
        (
            tree.leaf_proof(17).to_bytes(),
            ct.LeafProof.from_bytes,
            lambda p: ct.verify_leaf(head, p.position, p.leaf, p.path),  # a moved position too
        ),
        (
            tree.multiproof([0, 5, 6, 39]).to_bytes(),
            ct.MultiProof.from_bytes,
            lambda p: ct.verify_multi(head, p, [0, 5, 6, 39]),
        ),
        (
            tree.range_proof(a, b).to_bytes(),
            ct.RangeProof.from_bytes,
            lambda p: ct.verify_range(head, a, b, p),
        ),
    ]
    assert total > b
    for raw, parse, verify in cases:
        verify(parse(raw, max_leaves=40))
        for i in range(len(raw)):
            try:
                got = parse(_flip(raw, i), max_leaves=40)
            except DataError:
                continue
            with pytest.raises(SecurityError):
                verify(got)
