"""A secure run seeded by its cohort tree: what the server sends and what a device checks (both sides).

The protocol of ``docs/deploy.md`` ("Secure aggregation over the network") on the blocks of
:mod:`fedstats.wire.cohort_tree` and :mod:`fedstats.wire.cohort_sessions`, for a run whose cohort is
above the server's ``cohort_tree_above`` (the run's stored head says which form it takes; a device
accepts either, both being sound). Every message is JSON with hex fields; each function here is one
message's encoding (the server's) or its check (the device's), so both sides read one definition.

1. *Check-in* (held, or ``GET .../seed`` while seeding): ``{"tree": {"head", "leaf"}}``, the
   :class:`~fedstats.wire.cohort_tree.TreeHead` and the device's :class:`~.cohort_tree.LeafProof`
   (:func:`leaf_answer`); the device checks its own leaf (:func:`check_own_leaf`) and reveals nothing
   otherwise.
2. *Seed committee*: the ``min(n, 40)`` members at :func:`~.cohort_sessions.committee_positions` reveal
   ``{"value", "seen", "signature"}`` (:func:`signed_reveal`: ``seen`` is the head's digest, the
   signature the member's identity key over :func:`~.cohort_sessions.reveal_statement`); the server
   checks each (:func:`check_reveal`). Every member then receives ``{"seed", "committee": {"proof",
   "certificates", "values", "signatures"}}`` (:func:`committee_answer`), checks it
   (:func:`verify_committee`: the leaves by one multiproof, each certificate against its leaf, each
   value against its leaf's commitment, each signature) and takes the seed it computes itself.
3. *Participants*: a secure round's work item carries ``"range_proof"`` (:func:`range_answer`) unless its
   client range is the whole cohort; :func:`participants` gives the positions ``[p_lo, p_hi)``.
4. *Sessions and rosters*: :func:`~.cohort_sessions.session_of` and :func:`~.cohort_sessions.member_at`
   place every participant; each session's roster is bound by :func:`session_binding`.
5. *Neighbourhood*: with its key advertisement a device names the roster indices whose certificates it
   checks (``members``: its ``k`` neighbours and the audited members) and those whose keys it only
   needs (``also``: its two-hop neighbours, :func:`fedstats.client.roster.two_hop`, the consistency
   signers it counts); the
   answer ``{"leaves", "certificates"}`` (:func:`leaves_answer`) proves all their leaves in one
   multiproof and carries the certificates of the first kind (:func:`verify_leaves`).

Sizes: every message a device reads has a bound from the task's cohort size and the session's degree
(:func:`committee_answer_bytes`, :func:`leaves_answer_bytes`), checked before parsing.
"""

from __future__ import annotations

import base64
import hmac
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from fedstats.errors import DataError, ParameterError, SecurityError
from fedstats.wire import seeding
from fedstats.wire.cohort_sessions import (
    committee_positions,
    committee_seed,
    reveal_statement,
    session_roster_digest,
)
from fedstats.wire.cohort_tree import (
    CohortTree,
    Leaf,
    LeafProof,
    MultiProof,
    RangeProof,
    TreeHead,
    verify_leaf,
    verify_multi,
    verify_range,
)

__all__ = [
    "CERTIFICATE_BYTES",
    "HEAD_BYTES",
    "TREE",
    "check_own_leaf",
    "check_reveal",
    "committee_answer",
    "committee_answer_bytes",
    "leaf_answer",
    "leaf_answer_bytes",
    "leaves_answer",
    "leaves_answer_bytes",
    "parse_head",
    "participants",
    "proof_text",
    "range_answer",
    "session_binding",
    "signed_reveal",
    "verify_committee",
    "verify_leaves",
]

TREE = "tree"
"""The key of the tree form in a check-in's answer and in ``GET .../seed`` while seeding."""
HEAD_BYTES = 45
"""Bytes of :meth:`TreeHead.to_bytes`."""
CERTIFICATE_BYTES = 4096
"""The most bytes of JSON certificate a device reads per member whose certificate it asked for."""
_SIGNATURE_BYTES = 64
_LEAF_BYTES = 2 + 256 + 32 + 32 + 8  # a client id of at most 256 bytes (the enrollment's limit)
_NODE_BYTES = 40
_SLACK = 1024  # JSON keys, quotes, the seed and the status


def _depth(n: int) -> int:
    return max(1, (int(n) - 1).bit_length())


def proof_text(data: bytes) -> str:
    """A proof's text in a JSON message: standard base64 with padding (RFC 4648, section 4).

    Proofs are the messages' large fields (a neighbourhood's multiproof carries about ``2k + 16``
    leaves); base64 carries them in 4/3 of their bytes where hex took 2. Digests, keys, values and signatures
    stay hex.
    """
    return base64.b64encode(data).decode("ascii")


def _proof(obj: Mapping[str, Any], name: str) -> bytes:
    """The proof ``obj[name]`` (:func:`proof_text`), decoded strictly (SecurityError otherwise)."""
    v = obj.get(name) if isinstance(obj, Mapping) else None
    if not isinstance(v, str):
        raise SecurityError(f"the server's tree message lacks {name!r} (base64)")
    try:
        return base64.b64decode(v.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise SecurityError(f"the server's {name!r} is not base64") from None


def _hex(obj: Mapping[str, Any], name: str) -> bytes:
    v = obj.get(name) if isinstance(obj, Mapping) else None
    if not isinstance(v, str):
        raise SecurityError(f"the server's tree message lacks {name!r} (hex)")
    try:
        return bytes.fromhex(v)
    except ValueError:
        raise SecurityError(f"the server's {name!r} is not hex") from None


def parse_head(data: bytes) -> TreeHead:
    """A :class:`TreeHead` from its :meth:`~TreeHead.to_bytes` (45 bytes).

    Raises
    ------
    SecurityError
        If ``data`` is not a well-formed head.
    """
    if len(data) != HEAD_BYTES or data[:1] != b"\x01":
        raise SecurityError(f"a cohort tree head is {HEAD_BYTES} bytes with its tag")
    n, total = struct.unpack("<IQ", data[1:13])
    try:
        return TreeHead(n, total, bytes(data[13:]))
    except ParameterError as exc:
        raise SecurityError(f"malformed cohort tree head: {exc}") from None


# -- 1. check-in ----------------------------------------------------------------------------------


def leaf_answer(tree: CohortTree, position: int) -> dict[str, str]:
    """The server's ``"tree"`` object for the member at ``position``: the head and its leaf proof."""
    return {
        "head": tree.head.to_bytes().hex(),
        "leaf": proof_text(tree.leaf_proof(position).to_bytes()),
    }


def leaf_answer_bytes(max_members: int) -> int:
    """The most bytes of a check-in answer in the tree form, for a cohort of at most ``max_members``."""
    return 2 * (HEAD_BYTES + 8 + _LEAF_BYTES + _NODE_BYTES * _depth(max_members)) + _SLACK


def check_own_leaf(
    answer: Any,
    *,
    client_id: str,
    commitment: str,
    key: bytes,
    slot_start: int,
    slot_count: int,
    max_members: int,
) -> tuple[TreeHead, int]:
    """A device's check of its own leaf before it reveals (``docs/deploy.md``, item 1, *check-in*).

    Parameters
    ----------
    answer : object
        The ``"tree"`` object of the server's answer (:func:`leaf_answer`).
    client_id, commitment : str
        The device's id and the commitment it sent (64 hex digits).
    key : bytes
        Its raw Ed25519 identity key (32 bytes).
    slot_start, slot_count : int
        The slots the server gave it at check-in.
    max_members : int
        Its task's cohort size: the most leaves a tree may have, >= 1.

    Returns
    -------
    (TreeHead, int)
        The head and the device's position.

    Raises
    ------
    SecurityError
        If the message is malformed, the tree has more than ``max_members`` leaves, the leaf is not
        this device's (id, commitment, key, slot count), its proof does not reach the head, or its
        proven first slot is not ``slot_start``.
    """
    head = parse_head(_hex(answer, "head"))
    if head.n > max_members:
        raise SecurityError(
            f"the cohort tree has {head.n} members; this device's task allows {max_members}"
        )
    try:
        proof = LeafProof.from_bytes(_proof(answer, "leaf"), max_leaves=head.n)
    except DataError as exc:
        raise SecurityError(f"malformed leaf proof: {exc}") from None
    leaf = proof.leaf
    want = Leaf(client_id, bytes.fromhex(commitment), bytes(key), int(slot_count))
    if leaf != want:
        raise SecurityError(
            "the cohort tree's leaf for this device is not its own (id, commitment, key or slots)"
        )
    start = verify_leaf(head, proof.position, leaf, proof.path)
    if start != int(slot_start):
        raise SecurityError(
            f"the cohort tree puts this device's slots at {start}; check-in gave {slot_start}"
        )
    return head, proof.position


# -- 2. the seed committee ------------------------------------------------------------------------


def signed_reveal(
    run_id: str, head: TreeHead, position: int, value: bytes, sign: Callable[[bytes], bytes]
) -> dict[str, str]:
    """A committee member's reveal body: ``{"value", "seen", "signature"}`` (hex).

    ``sign``: the member's identity key's Ed25519 signing function; it signs
    :func:`~fedstats.wire.cohort_sessions.reveal_statement`.
    """
    statement = reveal_statement(run_id, head, position, value)
    return {
        "value": value.hex(),
        "seen": head.digest().hex(),
        "signature": sign(statement).hex(),
    }


def check_reveal(
    run_id: str, head: TreeHead, position: int, leaf: Leaf, value: bytes, signature: bytes
) -> None:
    """Check one committee member's reveal against its leaf (the server's check, and each device's).

    Raises
    ------
    SecurityError
        If ``value`` (32 bytes) does not open the leaf's commitment
        (:func:`fedstats.wire.seeding.commitment`) or ``signature`` is not the leaf key's Ed25519
        signature of :func:`~fedstats.wire.cohort_sessions.reveal_statement`.
    """
    if len(value) != seeding.CONTRIBUTION_BYTES or len(signature) != _SIGNATURE_BYTES:
        raise SecurityError("a committee reveal is a 32-byte value and a 64-byte signature")
    opened = seeding.commitment(run_id, leaf.client_id, value)
    if not hmac.compare_digest(opened, leaf.commitment.hex()):
        raise SecurityError(
            f"the value revealed at position {position} does not open its commitment"
        )
    try:
        Ed25519PublicKey.from_public_bytes(leaf.key).verify(
            signature, reveal_statement(run_id, head, position, value)
        )
    except (InvalidSignature, ValueError):
        raise SecurityError(
            f"the reveal at position {position} is not signed by its member over this head"
        ) from None


def committee_answer(
    tree: CohortTree,
    reveals: Mapping[int, tuple[bytes, bytes]],
    certificates: Mapping[int, Any],
) -> dict[str, Any]:
    """The server's ``"committee"`` object: the committee's leaves, certificates, values, signatures.

    Parameters
    ----------
    tree : CohortTree
        The run's tree.
    reveals : mapping int -> (bytes, bytes)
        Each committee position's checked ``(value, signature)``.
    certificates : mapping int -> dict
        Each committee position's enrollment certificate (``{"body", "signature"}``).

    Raises
    ------
    ParameterError
        If a committee member's reveal or certificate is missing.
    """
    positions = committee_positions(tree.head)
    missing = [p for p in positions if p not in reveals or p not in certificates]
    if missing:
        raise ParameterError("reveals", missing, "a reveal and a certificate per committee member")
    return {
        "proof": proof_text(tree.multiproof_bytes(positions)),
        "certificates": [certificates[p] for p in positions],
        "values": [reveals[p][0].hex() for p in positions],
        "signatures": [reveals[p][1].hex() for p in positions],
    }


def committee_answer_bytes(max_members: int) -> int:
    """The most bytes of an answer carrying the committee, for a cohort of at most ``max_members``."""
    kappa = min(int(max_members), 40)
    per = 2 * (4 + _LEAF_BYTES + seeding.CONTRIBUTION_BYTES + _SIGNATURE_BYTES) + CERTIFICATE_BYTES
    return kappa * (per + 2 * _NODE_BYTES * _depth(max_members)) + _SLACK


def verify_committee(
    run_id: str,
    head: TreeHead,
    answer: Any,
    check_certificate: Callable[[Leaf, Any], None],
) -> bytes:
    """A device's check of the seed committee; returns the run's seed (``docs/deploy.md``, item 1).

    Parameters
    ----------
    run_id : str
    head : TreeHead
        The head the device checked its own leaf against.
    answer : object
        The ``"committee"`` object (:func:`committee_answer`).
    check_certificate : callable
        ``(leaf, certificate)``: raises SecurityError unless the certificate is valid (the pinned
        authority, the task's population, not expired) and certifies the leaf's client id and key.

    Returns
    -------
    bytes
        The seed, :func:`~fedstats.wire.cohort_sessions.committee_seed` of the checked values.

    Raises
    ------
    SecurityError
        If the message is malformed, the leaves are not the committee's or not in the tree, or a
        certificate, value or signature does not check.
    """
    positions = committee_positions(head)
    try:
        proof = MultiProof.from_bytes(_proof(answer, "proof"), max_leaves=head.n)
    except DataError as exc:
        raise SecurityError(f"malformed committee proof: {exc}") from None
    verify_multi(head, proof, positions)
    lists = [answer.get(k) for k in ("certificates", "values", "signatures")]
    if not all(isinstance(v, list) and len(v) == len(positions) for v in lists):
        raise SecurityError(f"the committee answer does not hold {len(positions)} of each part")
    certs, values, signatures = lists
    out = []
    for j, (position, leaf) in enumerate(zip(proof.positions, proof.leaves, strict=True)):
        try:
            value, signature = bytes.fromhex(values[j]), bytes.fromhex(signatures[j])
        except (TypeError, ValueError):
            raise SecurityError("a committee value or signature is not hex") from None
        check_certificate(leaf, certs[j])
        check_reveal(run_id, head, position, leaf, value, signature)
        out.append(value)
    return committee_seed(run_id, head, out)


# -- 3. a round's participants --------------------------------------------------------------------


def range_answer(tree: CohortTree, lo: int, hi: int) -> str | None:
    """A secure round's ``"range_proof"`` (:func:`proof_text`), or None when ``[lo, hi)`` is the whole cohort."""
    if (lo, hi) == (0, tree.head.total_slots):
        return None
    return proof_text(tree.range_proof(lo, hi).to_bytes())


def participants(head: TreeHead, lo: int, hi: int, proof: Any) -> tuple[int, int]:
    """The positions ``[p_lo, p_hi)`` of a round whose client range is ``[lo, hi)`` (device's check).

    ``proof``: the work item's ``"range_proof"`` (:func:`proof_text`), or None for the whole cohort.

    Raises
    ------
    SecurityError
        If the range is not the whole cohort and the proof is missing, malformed or does not prove it.
    """
    if (lo, hi) == (0, head.total_slots):
        return 0, head.n
    if not isinstance(proof, str):
        raise SecurityError("a round over part of the cohort needs its range proof")
    try:
        parsed = RangeProof.from_bytes(
            _proof({"range_proof": proof}, "range_proof"), max_leaves=head.n
        )
    except DataError as exc:
        raise SecurityError(f"malformed range proof: {exc}") from None
    try:
        return verify_range(head, lo, hi, parsed)
    except ParameterError as exc:
        raise SecurityError(str(exc)) from None


# -- 4. rosters -----------------------------------------------------------------------------------


def session_binding(
    run_id: str,
    seed: bytes,
    head: TreeHead,
    index: int,
    number: int,
    p_lo: int,
    p_hi: int,
    max_session: int,
    size: int,
) -> bytes:
    """The binding of session ``number`` of round ``index``'s bound roster (both sides compute it).

    :func:`~fedstats.wire.cohort_sessions.session_roster_digest` of the run's task id
    (:func:`fedstats.wire.seeding.task_id_bytes`), the session id the seed gives
    (:func:`fedstats.wire.seeding.session_id`), the head and the session's coordinates.
    """
    sid = seeding.session_id(seed, index, number)
    task = seeding.task_id_bytes(run_id)
    return session_roster_digest(task, sid, head, p_lo, p_hi, max_session, number, size)


# -- 5. the neighbourhood -------------------------------------------------------------------------


def leaves_answer(
    tree: CohortTree, positions: Sequence[int], certificates: Sequence[Any]
) -> dict[str, Any]:
    """The server's answer to a device's neighbourhood: ``{"leaves", "certificates"}``.

    ``positions``: the tree positions of every roster index the device named (``members`` and
    ``also``); ``certificates``: those of the ``members``, in the order named.
    """
    return {
        "leaves": proof_text(tree.multiproof_bytes(positions)),
        "certificates": list(certificates),
    }


def leaves_answer_bytes(count: int, certified: int, max_members: int) -> int:
    """The most bytes of :func:`leaves_answer` for ``count`` leaves, ``certified`` of them certified."""
    depth = _depth(max_members)
    per_leaf = 2 * (4 + _LEAF_BYTES + _NODE_BYTES * depth)
    return int(count) * per_leaf + int(certified) * CERTIFICATE_BYTES + _SLACK


def verify_leaves(head: TreeHead, answer: Any, positions: Sequence[int]) -> dict[int, Leaf]:
    """A device's check of its neighbourhood's leaves: exactly ``positions``, each in the tree.

    Returns
    -------
    dict int -> Leaf
        Each asked position's leaf (its key is then the member's key for the roster).

    Raises
    ------
    SecurityError
        If the message is malformed or its leaves are not those positions' leaves in the tree.
    """
    try:
        proof = MultiProof.from_bytes(_proof(answer, "leaves"), max_leaves=head.n)
    except DataError as exc:
        raise SecurityError(f"malformed neighbourhood proof: {exc}") from None
    verify_multi(head, proof, positions)
    return dict(zip(proof.positions, proof.leaves, strict=True))
