"""The tree-seeded run's messages (:mod:`fedstats.wire.tree_seeding`): each check accepts the honest
message and refuses every altered one."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedstats.errors import SecurityError
from fedstats.wire import seeding, tree_seeding
from fedstats.wire.cohort_sessions import committee_positions, committee_seed
from fedstats.wire.cohort_tree import CohortTree, Leaf
from fedstats.wire.tree_seeding import proof_text

RUN = "run-1"


def _cohort(n: int, slots: int = 2) -> tuple[CohortTree, list[Ed25519PrivateKey], list[bytes]]:
    keys = [
        Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"k%d" % i).digest()) for i in range(n)
    ]
    values = [hashlib.sha256(b"v%d" % i).digest() for i in range(n)]
    leaves = [
        Leaf(
            f"dev-{i}",
            bytes.fromhex(seeding.commitment(RUN, f"dev-{i}", values[i])),
            keys[i].public_key().public_bytes_raw(),
            slots + i % 3,
        )
        for i in range(n)
    ]
    return CohortTree(leaves), keys, values


_GOOD = object()


def _own(tree: CohortTree, keys, values, i: int, answer=_GOOD, **over):
    leaf = tree.leaf(i)
    kwargs = {
        "client_id": leaf.client_id,
        "commitment": seeding.commitment(RUN, leaf.client_id, values[i]),
        "key": keys[i].public_key().public_bytes_raw(),
        "slot_start": tree.slot_start(i),
        "slot_count": leaf.slot_count,
        "max_members": tree.head.n,
    } | over
    return tree_seeding.check_own_leaf(
        tree_seeding.leaf_answer(tree, i) if answer is _GOOD else answer, **kwargs
    )


@pytest.mark.parametrize("n", [1, 2, 7, 64, 300])
def test_every_member_checks_its_own_leaf(n: int) -> None:
    tree, keys, values = _cohort(n)
    for i in {0, n // 2, n - 1}:
        head, position = _own(tree, keys, values, i)
        assert head == tree.head and position == i
        assert len(json.dumps(tree_seeding.leaf_answer(tree, i))) <= tree_seeding.leaf_answer_bytes(
            n
        )


def test_a_leaf_that_is_not_the_devices_own_is_refused() -> None:
    tree, keys, values = _cohort(20)
    good = tree_seeding.leaf_answer(tree, 5)
    with pytest.raises(SecurityError, match="not its own"):
        _own(tree, keys, values, 5, answer=tree_seeding.leaf_answer(tree, 6))
    with pytest.raises(SecurityError, match="slots at"):
        _own(tree, keys, values, 5, slot_start=tree.slot_start(5) + 1)
    with pytest.raises(SecurityError, match="allows"):
        _own(tree, keys, values, 5, max_members=19)
    raw = bytearray(base64.b64decode(good["leaf"]))
    raw[-3] ^= 1  # a node of the path
    with pytest.raises(SecurityError):
        _own(tree, keys, values, 5, answer={"head": good["head"], "leaf": proof_text(bytes(raw))})
    with pytest.raises(SecurityError, match="base64"):  # hex, or base64 without its padding
        _own(tree, keys, values, 5, answer={"head": good["head"], "leaf": raw.hex() + "!"})
    with pytest.raises(SecurityError, match="base64"):
        _own(
            tree,
            keys,
            values,
            5,
            answer={"head": good["head"], "leaf": good["leaf"].rstrip("=") + "A"},
        )
    for bad in ({}, {"head": good["head"]}, {"head": "zz", "leaf": good["leaf"]}, None, []):
        with pytest.raises(SecurityError):
            _own(tree, keys, values, 5, answer=bad)


def _committee(tree, keys, values):
    positions = committee_positions(tree.head)
    reveals, certs = {}, {}
    for p in positions:
        body = tree_seeding.signed_reveal(RUN, tree.head, p, values[p], keys[p].sign)
        assert body["seen"] == tree.head.digest().hex()
        tree_seeding.check_reveal(
            RUN,
            tree.head,
            p,
            tree.leaf(p),
            bytes.fromhex(body["value"]),
            bytes.fromhex(body["signature"]),
        )
        reveals[p] = (bytes.fromhex(body["value"]), bytes.fromhex(body["signature"]))
        certs[p] = {
            "body": {"client_id": tree.leaf(p).client_id, "public_key": tree.leaf(p).key.hex()}
        }
    return positions, tree_seeding.committee_answer(tree, reveals, certs)


def _cert_check(leaf: Leaf, cert) -> None:
    if cert["body"] != {"client_id": leaf.client_id, "public_key": leaf.key.hex()}:
        raise SecurityError("certificate")


@pytest.mark.parametrize("n", [3, 40, 41, 500])
def test_the_committee_gives_every_member_the_same_seed(n: int) -> None:
    tree, keys, values = _cohort(n)
    positions, answer = _committee(tree, keys, values)
    assert len(positions) == min(n, 40)
    seed = tree_seeding.verify_committee(RUN, tree.head, answer, _cert_check)
    assert seed == committee_seed(RUN, tree.head, [values[p] for p in positions])
    assert len(json.dumps(answer)) <= tree_seeding.committee_answer_bytes(n)


def test_an_altered_committee_is_refused() -> None:
    tree, keys, values = _cohort(100)
    positions, answer = _committee(tree, keys, values)
    other = _cohort(100, slots=3)[0]  # another tree: its proof does not reach this head
    cases = {
        "value": answer | {"values": [hashlib.sha256(b"x").hexdigest(), *answer["values"][1:]]},
        "signature": answer | {"signatures": [answer["signatures"][1], *answer["signatures"][1:]]},
        "certificate": answer | {"certificates": answer["certificates"][::-1]},
        "short": answer | {"values": answer["values"][:-1]},
        "proof": answer | {"proof": proof_text(other.multiproof(positions).to_bytes())},
        "positions": answer
        | {
            "proof": proof_text(
                tree.multiproof([*positions[:-1], 99 if positions[-1] != 99 else 98]).to_bytes()
            )
        },
    }
    for name, bad in cases.items():
        with pytest.raises(SecurityError):
            tree_seeding.verify_committee(RUN, tree.head, bad, _cert_check)
        assert name  # every case refused
    # a reveal signed over another head (moved from another tree) is refused by the server's check
    p = positions[0]
    moved = tree_seeding.signed_reveal(RUN, other.head, p, values[p], keys[p].sign)
    with pytest.raises(SecurityError, match="signed"):
        tree_seeding.check_reveal(
            RUN, tree.head, p, tree.leaf(p), values[p], bytes.fromhex(moved["signature"])
        )


def test_participants_of_a_round_are_proven_unless_it_is_the_whole_cohort() -> None:
    tree, _, _ = _cohort(50)
    total = tree.head.total_slots
    assert tree_seeding.range_answer(tree, 0, total) is None
    assert tree_seeding.participants(tree.head, 0, total, None) == (0, 50)
    for lo, hi in ((0, 10), (7, total), (30, 31)):
        proof = tree_seeding.range_answer(tree, lo, hi)
        assert tree_seeding.participants(tree.head, lo, hi, proof) == tree.positions_of(lo, hi)
    with pytest.raises(SecurityError):
        tree_seeding.participants(tree.head, 0, 10, None)
    with pytest.raises(SecurityError):
        tree_seeding.participants(tree.head, 0, 10, tree_seeding.range_answer(tree, 0, 12))


def test_the_neighbourhood_is_exactly_the_positions_asked_for() -> None:
    tree, _, _ = _cohort(200)
    asked = [3, 17, 18, 150]
    answer = tree_seeding.leaves_answer(tree, asked, [{"c": 1}])
    got = tree_seeding.verify_leaves(tree.head, answer, asked)
    assert got == {p: tree.leaf(p) for p in asked}
    assert len(json.dumps(answer)) <= tree_seeding.leaves_answer_bytes(4, 1, 200)
    with pytest.raises(SecurityError):
        tree_seeding.verify_leaves(tree.head, answer, [3, 17, 18, 151])
    with pytest.raises(SecurityError):
        tree_seeding.verify_leaves(tree.head, {"leaves": "00"}, asked)
