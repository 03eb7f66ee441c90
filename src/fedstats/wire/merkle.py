"""Merkle trees of RFC 9162 (Certificate Transparency 2.0, section 2.1): roots and inclusion proofs.

The building block of O(k log n) seeding (:mod:`fedstats.wire.cohort_tree`, whose sum tree has its shape): the
server commits to a run's cohort by one root, and a device checks the few members it needs (its own entry,
its neighbours', a seed committee's, the members it audits) by inclusion proofs of ``ceil(log2 n)`` hashes
each, instead of downloading and hashing the whole list.

The hash is SHA-256 with the RFC's domain separation: a leaf is ``SHA-256(0x00 || leaf)``, an inner node
``SHA-256(0x01 || left || right)``, a tree of ``n > 1`` leaves splits at the largest power of two below
``n`` (``MTH``, RFC 9162 2.1.1), and the empty tree's root is ``SHA-256("")``. An inclusion proof is the
RFC's audit path (2.1.3.1), verified by its algorithm (2.1.3.2). The roots and proofs equal those of the
RFC 6962 reference test data (``tests/wire/test_merkle.py``).

A root is read together with its tree's size (RFC 9162 signs both in one tree head): a proof is checked
against ``(size, root)``, and a caller commits to the two together.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from fedstats.errors import ParameterError, SecurityError

__all__ = ["HASH_BYTES", "MerkleTree", "leaf_hash", "node_hash", "verify_inclusion"]

HASH_BYTES = 32
"""Bytes of every hash: SHA-256."""


def leaf_hash(leaf: bytes) -> bytes:
    """``SHA-256(0x00 || leaf)``: the hash of one leaf (RFC 9162 2.1.1).

    Parameters
    ----------
    leaf : bytes
        The leaf's content, any length.

    Returns
    -------
    bytes
        32 bytes.
    """
    return hashlib.sha256(b"\x00" + bytes(leaf)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: the hash of an inner node from its children's (RFC 9162 2.1.1).

    Parameters
    ----------
    left, right : bytes
        The children's hashes, 32 bytes each.

    Returns
    -------
    bytes
        32 bytes.
    """
    return hashlib.sha256(b"\x01" + left + right).digest()


class MerkleTree:
    """A Merkle tree over a list of leaves, with its root and every leaf's inclusion proof.

    Built bottom-up in ``n - 1`` node hashes: each level pairs its nodes left to right and carries an
    unpaired last node up unchanged, which gives RFC 9162's ``MTH`` (the split at the largest power of
    two below ``n``) and its audit paths. Every level is kept: ``2 n`` hashes of 32 bytes in memory, so a
    proof is read off in ``ceil(log2 n)`` steps.

    Parameters
    ----------
    leaves : sequence of bytes
        The leaves' contents, in order; any number, including none.

    Attributes
    ----------
    size : int
        The number of leaves ``n``.
    root : bytes
        The 32-byte root (``SHA-256("")`` for no leaves).

    Raises
    ------
    ParameterError
        If a leaf is not bytes.
    """

    __slots__ = ("_levels", "root", "size")

    def __init__(self, leaves: Sequence[bytes]) -> None:
        level: list[bytes] = []
        for j, leaf in enumerate(leaves):
            if not isinstance(leaf, (bytes, bytearray, memoryview)):
                raise ParameterError(f"leaves[{j}]", type(leaf).__name__, "bytes")
            level.append(leaf_hash(bytes(leaf)))
        self.size = len(level)
        self._levels = [level]
        while len(level) > 1:
            up = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
            if len(level) % 2:
                up.append(level[-1])
            self._levels.append(up)
            level = up
        self.root = level[0] if level else hashlib.sha256(b"").digest()

    def path(self, index: int) -> list[bytes]:
        """The inclusion proof of leaf ``index``: RFC 9162's audit path, bottom-up.

        Parameters
        ----------
        index : int
            The leaf's position, in ``[0, size)``.

        Returns
        -------
        list of bytes
            ``ceil(log2 size)`` hashes at most (none for a tree of one leaf), 32 bytes each.

        Raises
        ------
        ParameterError
            If ``index`` is not an integer in ``[0, size)``.
        """
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.size:
            raise ParameterError("index", index, f"an integer in [0, {self.size})")
        out = []
        for level in self._levels[:-1]:
            sibling = index ^ 1
            if sibling < len(level):  # else the node is carried up unpaired: no hash at this level
                out.append(level[sibling])
            index >>= 1
        return out


def verify_inclusion(
    leaf: bytes, index: int, size: int, path: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf`` is leaf ``index`` of the tree of ``size`` leaves whose root is ``root``.

    RFC 9162 2.1.3.2, step by step: a proof of the wrong length, a hash of the wrong size, another
    position or another size fails, as does any changed byte.

    Parameters
    ----------
    leaf : bytes
        The leaf's content (hashed here with :func:`leaf_hash`).
    index : int
        Its claimed position, in ``[0, size)``.
    size : int
        The tree's number of leaves, >= 1.
    path : sequence of bytes
        The inclusion proof (:meth:`MerkleTree.path`), 32 bytes per hash.
    root : bytes
        The committed root, 32 bytes.

    Raises
    ------
    SecurityError
        If the proof does not lead from the leaf at ``index`` to ``root`` in a tree of ``size`` leaves, or
        ``index`` is not in ``[0, size)``.
    """
    if (
        isinstance(index, bool)
        or isinstance(size, bool)
        or not isinstance(index, int)
        or not isinstance(size, int)
        or not 0 <= index < size
    ):
        raise SecurityError(f"leaf {index!r} is not a position of a tree of {size!r} leaves")
    fn, sn = index, size - 1
    r = leaf_hash(bytes(leaf))
    for p in path:
        if sn == 0 or len(p) != HASH_BYTES:
            raise SecurityError("the inclusion proof does not fit the tree")
        if fn & 1 or fn == sn:
            r = node_hash(bytes(p), r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, bytes(p))
        fn >>= 1
        sn >>= 1
    if sn != 0 or not hmac.compare_digest(r, bytes(root)):
        raise SecurityError(f"leaf {index} is not in the committed tree of {size} leaves")
