"""RFC 9162 Merkle trees (``fedstats.wire.merkle``): the reference vectors, every proof of every tree shape,
and what a changed leaf, position, size, proof or root does.

The vectors are the RFC 6962 reference test data of Certificate Transparency (google/certificate-transparency,
``cpp/merkletree/merkle_tree_test.cc``, Apache License 2.0): eight leaves, the roots of their first 1 to 8,
and audit paths with 0-based leaf indices.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.errors import ParameterError, SecurityError
from fedstats.wire.merkle import MerkleTree, leaf_hash, node_hash, verify_inclusion

LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
PATHS = [
    (0, 1, []),
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]


def mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 2.1.1's MTH, recursively as the RFC writes it (the reference for the bottom-up tree)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaf_hash(leaves[0])
    k = 1 << ((len(leaves) - 1).bit_length() - 1)  # the largest power of two below n
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


def test_the_roots_and_paths_are_the_rfc_6962_reference_ones() -> None:
    assert MerkleTree([]).root.hex() == hashlib.sha256(b"").hexdigest()
    for n in range(1, 9):
        assert MerkleTree(LEAVES[:n]).root.hex() == ROOTS[n - 1], n
    for index, size, path in PATHS:
        tree = MerkleTree(LEAVES[:size])
        assert [h.hex() for h in tree.path(index)] == path, (index, size)
        verify_inclusion(LEAVES[index], index, size, [bytes.fromhex(h) for h in path], tree.root)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=12), min_size=1, max_size=70))
def test_every_leaf_of_every_tree_shape_is_proven_and_nothing_else_is(leaves: list[bytes]) -> None:
    tree = MerkleTree(leaves)
    n = len(leaves)
    assert tree.root == mth(leaves) and tree.size == n
    for i, leaf in enumerate(leaves):
        path = tree.path(i)
        assert len(path) <= max(0, (n - 1).bit_length())
        verify_inclusion(leaf, i, n, path, tree.root)
        with pytest.raises(SecurityError):  # another leaf at this position
            verify_inclusion(leaf + b"x", i, n, path, tree.root)
        if path:
            changed = [*path[:-1], bytes([path[-1][0] ^ 1]) + path[-1][1:]]
            with pytest.raises(SecurityError):  # one bit of the proof
                verify_inclusion(leaf, i, n, changed, tree.root)
            with pytest.raises(SecurityError):  # a proof cut short
                verify_inclusion(leaf, i, n, path[:-1], tree.root)
        with pytest.raises(SecurityError):  # a proof made longer
            verify_inclusion(leaf, i, n, [*path, tree.root], tree.root)
        with pytest.raises(SecurityError):  # another root
            verify_inclusion(leaf, i, n, path, hashlib.sha256(tree.root).digest())
        for j in {i - 1, i + 1} & set(range(n)):
            if leaves[j] != leaf:  # the same leaf at another position, with this position's proof
                with pytest.raises(SecurityError):
                    verify_inclusion(leaf, j, n, path, tree.root)


def test_a_root_is_read_with_its_size() -> None:
    # why the module's callers commit to (size, root) together: leaf 0's proof in the tree of 3 leaves
    # also verifies, against the same root, as leaf 0 of a tree of 4 (the fourth leaf's place is then
    # taken by the third); another size is refused where the proof's shape does not fit it
    tree = MerkleTree(LEAVES[:3])
    path = tree.path(0)
    verify_inclusion(LEAVES[0], 0, 3, path, tree.root)
    verify_inclusion(LEAVES[0], 0, 4, path, tree.root)
    for size in (1, 2, 5, 8):
        with pytest.raises(SecurityError):
            verify_inclusion(LEAVES[0], 0, size, path, tree.root)


def test_bad_positions_and_leaves_are_refused_naming_them() -> None:
    tree = MerkleTree(LEAVES)
    for bad in (-1, 8, True, 1.0):
        with pytest.raises(ParameterError, match="index"):
            tree.path(bad)  # type: ignore[arg-type]
        with pytest.raises(SecurityError):
            verify_inclusion(LEAVES[0], bad, 8, tree.path(0), tree.root)  # type: ignore[arg-type]
    with pytest.raises(SecurityError):
        verify_inclusion(LEAVES[0], 0, 0, [], tree.root)
    with pytest.raises(ParameterError, match=r"leaves\[1\]"):
        MerkleTree([b"a", "b"])  # type: ignore[list-item]
