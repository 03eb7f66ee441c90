"""A secure run seeded by its cohort tree: what the server sends and what a device checks.

Both sides use this module. The protocol of ``docs/deploy.md`` ("Secure aggregation over the
network", *In a large cohort, the cohort tree*) on the blocks of :mod:`fedstats.wire.cohort_tree`
and :mod:`fedstats.wire.cohort_sessions`, for a run whose cohort is above the server's
``cohort_tree_above`` (the run's stored head says which form it takes; a device accepts either,
both being sound). Every message is JSON with hex fields (proofs in base64, :func:`proof_text`);
each function here is one message's encoding (the server's) or its check (the device's), so both
sides read one definition.

1. *Check-in* (held, or ``GET .../seed`` while seeding): ``{"tree": {"head", "leaf"}}``, the
   :class:`~fedstats.wire.cohort_tree.TreeHead` and the device's
   :class:`~.cohort_tree.LeafProof` (:func:`leaf_answer`); the device checks its own leaf
   (:func:`check_own_leaf`) and reveals nothing otherwise.
2. *Seed committee*: the ``min(n, 40)`` members at
   :func:`~.cohort_sessions.committee_positions` reveal ``{"value", "seen", "signature"}``
   (:func:`signed_reveal`: ``seen`` is the head's digest, the signature the member's identity key
   over :func:`~.cohort_sessions.reveal_statement`); the server checks each (:func:`check_reveal`).
   Every member then receives ``{"seed", "committee": {"proof", "certificates", "values",
   "signatures"}}`` (:func:`committee_answer`), checks it (:func:`verify_committee`: the leaves by
   one multiproof, each certificate against its leaf, each value against its leaf's commitment,
   each signature) and takes the seed it computes itself.
3. *Participants*: a secure round's work item carries ``"range_proof"`` (:func:`range_answer`)
   unless its client range is the whole cohort; :func:`participants` gives the positions
   ``[p_lo, p_hi)``.
4. *Sessions and rosters*: :func:`~.cohort_sessions.session_of` and
   :func:`~.cohort_sessions.member_at` place every participant; each session's roster is bound by
   :func:`session_binding`.
5. *Neighbourhood*: with its key advertisement a device names the roster indices whose
   certificates it checks (``members``: its ``k`` neighbours and the audited members) and those
   whose keys it only needs (``also``: its two-hop neighbours,
   :func:`fedstats.client.roster.two_hop`, the consistency signers it counts); the answer
   ``{"leaves", "certificates"}`` (:func:`leaves_answer`) proves all their leaves in one multiproof
   and carries the certificates of the first kind (:func:`verify_leaves`).

Sizes: every message a device reads has a bound from the task's cohort size and the session's degree
(:func:`leaf_answer_bytes`, :func:`committee_answer_bytes`, :func:`leaves_answer_bytes`), checked
before parsing.
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
    "CARRIED_WORK_BYTES",
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
CARRIED_WORK_BYTES = 64 * 1024
"""The most bytes of a work list the held committee answer carries (``Fedstats-Next-Work: 1``).

A device reads that answer up to :func:`committee_answer_bytes` plus this; a server whose work list
for the device is longer answers with the committee alone, and the device polls its work list.
"""
_SIGNATURE_BYTES = 64
# a leaf's encoding with its client id counted as 256 bytes; an enrolled id is 1 to 128 characters
# (fedstats._validation.IDENTIFIER_RULE), up to 512 bytes of UTF-8: a longer one uses the bounds'
# other margins (proofs are base64, 4/3 of their bytes, counted at 2; _SLACK)
_LEAF_BYTES = 2 + 256 + 32 + 32 + 8
_NODE_BYTES = 40
_SLACK = 1024  # JSON keys, quotes, the seed and the status


def _depth(n: int) -> int:
    return max(1, (int(n) - 1).bit_length())


def proof_text(data: bytes) -> str:
    """A proof's text in a JSON message: standard base64 with padding (RFC 4648, section 4).

    Proofs are the messages' large fields (a neighbourhood's multiproof carries about ``2k + 16``
    leaves); base64 carries them in 4/3 of their bytes where hex took 2. Digests, keys, values and
    signatures stay hex. A device decodes strictly (only the alphabet, correct padding) and refuses
    other text with SecurityError.

    Parameters
    ----------
    data : bytes
        A proof's encoding (any bytes-like object):
        :meth:`~fedstats.wire.cohort_tree.LeafProof.to_bytes`,
        :meth:`~fedstats.wire.cohort_tree.RangeProof.to_bytes` or
        :meth:`~fedstats.wire.cohort_tree.CohortTree.multiproof_bytes`.

    Returns
    -------
    str
        ASCII, ``4 * ceil(len(data) / 3)`` characters.
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

    Parameters
    ----------
    data : bytes
        :data:`HEAD_BYTES` (45) bytes: the tag ``0x01``, ``u32 n`` and ``u64 total_slots``
        (little-endian), the 32-byte root; the ``"head"`` field of :func:`leaf_answer`, hex-decoded.

    Returns
    -------
    TreeHead
        Its ``n`` in ``[1, 2**32)``, ``total_slots`` in ``[n, 2**64)``.

    Raises
    ------
    SecurityError
        If ``data`` is not 45 bytes, lacks the tag, or its ``n`` or ``total_slots`` is outside
        those ranges.
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
    """The server's ``"tree"`` object for the member at ``position``: the head and its leaf proof.

    What a device checks at check-in, before it reveals (``docs/deploy.md``, "Secure aggregation
    over the network", *In a large cohort, the cohort tree*: *check-in*; :func:`check_own_leaf`).
    The server sends it in the held check-in's answer and in ``GET .../seed`` (key :data:`TREE`).

    Parameters
    ----------
    tree : CohortTree
        The run's cohort tree.
    position : int
        The member's position (its leaf's index, in slot order), in ``[0, tree.head.n)``.

    Returns
    -------
    dict of str to str
        ``"head"``: :meth:`TreeHead.to_bytes` in hex (90 digits); ``"leaf"``: the member's
        :class:`~fedstats.wire.cohort_tree.LeafProof` (its leaf and at most ``ceil(log2 n)``
        siblings' ``(hash, slots)``) as :func:`proof_text`.

    Raises
    ------
    ParameterError
        If ``position`` is not an integer (a bool is refused) in ``[0, n)``: raised by
        :meth:`~fedstats.wire.cohort_tree.CohortTree.leaf_proof`, through its leaf look-up
        (:meth:`~fedstats.wire.cohort_tree.CohortTree.leaf`).
    """
    return {
        "head": tree.head.to_bytes().hex(),
        "leaf": proof_text(tree.leaf_proof(position).to_bytes()),
    }


def leaf_answer_bytes(max_members: int) -> int:
    """The most bytes of a ``"tree"`` answer (:func:`leaf_answer`), for at most ``max_members``.

    It counts each byte of the binary encodings as 2 characters of text: the head (hex: exactly 2)
    and the leaf proof (base64, :func:`proof_text`: 4/3), whose leaf is counted with a 256-byte
    client id and whose path with ``depth`` nodes of 40 bytes; 8 bytes for the proof's tag, position
    and path length; and 1,024 bytes of slack for the JSON keys and quotes, the seed and the status.
    A device's read limit for ``GET .../seed`` before it reveals includes it
    (:func:`fedstats.client.secure_tree.seed_answer_bytes`, with :func:`committee_answer_bytes`);
    its transport refuses a longer answer before parsing it.

    Parameters
    ----------
    max_members : int
        The task's cohort size: the most leaves the tree may have, >= 1.

    Returns
    -------
    int
        ``2 * (45 + 8 + 330 + 40 * depth) + 1024`` bytes, with
        ``depth = max(1, ceil(log2 max_members))``.
    """
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

    A device sends it (``POST .../reveal``) once it checked its own leaf (:func:`check_own_leaf`)
    and found its position among :func:`~fedstats.wire.cohort_sessions.committee_positions`; the
    server checks it by :func:`check_reveal` (``docs/deploy.md``, *In a large cohort, the cohort
    tree*: *seed committee*).

    Parameters
    ----------
    run_id : str
        The run, 1 to 65,535 bytes of UTF-8.
    head : TreeHead
        The head the member checked its own leaf against.
    position : int
        The member's position, in ``[0, head.n)``.
    value : bytes
        Its seed contribution, 32 bytes (the value its check-in commitment opens to).
    sign : callable
        ``bytes -> bytes``: the member's identity key's Ed25519 signing function (64-byte
        signatures, as ``Ed25519PrivateKey.sign``); it signs
        :func:`~fedstats.wire.cohort_sessions.reveal_statement`.

    Returns
    -------
    dict of str to str
        ``"value"``: 64 hex digits; ``"seen"``: the head's digest, 64 hex digits; ``"signature"``:
        ``sign``'s output in hex (128 digits for Ed25519).

    Raises
    ------
    ParameterError
        If ``run_id``, ``position`` or ``value`` is out of range
        (:func:`~fedstats.wire.cohort_sessions.reveal_statement`); nothing is signed then.
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

    The server checks each committee member's ``POST .../reveal``
    (:func:`fedstats.service.domain.secure_tree.record_reveal`), a device every member of the
    committee answer (:func:`verify_committee`); ``docs/deploy.md``, *In a large cohort, the cohort
    tree*: *seed committee*.

    Parameters
    ----------
    run_id : str
        The run, 1 to 65,535 bytes of UTF-8.
    head : TreeHead
        The run's head (the server's stored one, the head a device checked its own leaf against).
    position : int
        The member's position, in ``[0, head.n)``: the one its signature names.
    leaf : Leaf
        The leaf at ``position``, checked against ``head`` by the caller.
    value : bytes
        The revealed contribution, 32 bytes.
    signature : bytes
        The member's Ed25519 signature, 64 bytes.

    Raises
    ------
    SecurityError
        If ``value`` is not 32 bytes or ``signature`` not 64, ``value`` does not open the leaf's
        commitment (:func:`fedstats.wire.seeding.commitment`), or ``signature`` is not the leaf
        key's Ed25519 signature of :func:`~fedstats.wire.cohort_sessions.reveal_statement` (also
        when that statement cannot be made: ``position`` outside ``[0, head.n)``, an empty
        ``run_id``).
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
    """The server's ``"committee"`` object: its members' leaves, certificates, values, signatures.

    Every member checks it (:func:`verify_committee`) and computes the seed from it
    (``docs/deploy.md``, *In a large cohort, the cohort tree*: *seed committee*).

    Parameters
    ----------
    tree : CohortTree
        The run's tree.
    reveals : mapping int -> (bytes, bytes)
        Each committee position's checked ``(value, signature)``.
    certificates : mapping int -> dict
        Each committee position's enrollment certificate (``{"body", "signature"}``).

    Returns
    -------
    dict
        ``"proof"``: the committee's leaves in one multiproof (:func:`proof_text`); lists
        ``"certificates"``, ``"values"`` (hex) and ``"signatures"`` (hex), in committee order
        (increasing position, :func:`~fedstats.wire.cohort_sessions.committee_positions`).

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
    """The most bytes of an answer carrying the committee, for a cohort of at most ``max_members``.

    Per member of the committee's ``kappa = min(max_members, 40)``: its u32 position, leaf (with a
    256-byte client id), value (32 bytes) and signature (64 bytes), each byte counted as 2
    characters (the value and signature are hex; the multiproof is base64, 4/3),
    :data:`CERTIFICATE_BYTES` of certificate JSON, and ``depth`` proof nodes of 40 bytes, also at 2
    characters a byte; plus 1,024 bytes of slack for the JSON keys and quotes, the seed and the
    status. A device reads the answer to its reveal and ``GET .../seed?part=committee`` up to this
    bound plus :data:`fedstats.client.secure_tree.ACK_BYTES`; its transport refuses a longer answer
    before parsing it.

    Parameters
    ----------
    max_members : int
        The task's cohort size (a device without one passes its head's ``n``), >= 1.

    Returns
    -------
    int
        ``kappa * (2 * (4 + 330 + 32 + 64) + 4096 + 80 * depth) + 1024`` bytes, with
        ``depth = max(1, ceil(log2 max_members))``.
    """
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
        The run, 1 to 65,535 bytes of UTF-8.
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
    """A secure round's ``"range_proof"``, or None when ``[lo, hi)`` is the whole cohort.

    The server puts it in the round's stage-0 work item; the device checks it by
    :func:`participants` (``docs/deploy.md``, *In a large cohort, the cohort tree*: *sessions*).

    Parameters
    ----------
    tree : CohortTree
        The run's cohort tree.
    lo, hi : int
        The round's client range (global slot indices), ``0 <= lo < hi <= tree.head.total_slots``.

    Returns
    -------
    str or None
        The :class:`~fedstats.wire.cohort_tree.RangeProof` (the leaves holding slots ``lo`` and
        ``hi - 1``, with their paths) as :func:`proof_text`; None for ``(0, total_slots)``.

    Raises
    ------
    ParameterError
        If ``[lo, hi)`` is empty or not within ``[0, total_slots)``
        (:meth:`~fedstats.wire.cohort_tree.CohortTree.positions_of`).
    """
    if (lo, hi) == (0, tree.head.total_slots):
        return None
    return proof_text(tree.range_proof(lo, hi).to_bytes())


def participants(head: TreeHead, lo: int, hi: int, proof: Any) -> tuple[int, int]:
    """A device's check of a round's participants: the positions ``[p_lo, p_hi)`` of ``[lo, hi)``.

    The members whose slots meet the client range (``docs/deploy.md``, *In a large cohort, the
    cohort tree*: *sessions*; :func:`~fedstats.wire.cohort_tree.verify_range`).

    Parameters
    ----------
    head : TreeHead
        The head the device checked its own leaf against.
    lo, hi : int
        The round's client range from its work item (global slot indices).
    proof : object
        The work item's ``"range_proof"`` (:func:`range_answer`), or None for the whole cohort
        (then it is not read).

    Returns
    -------
    (int, int)
        ``(p_lo, p_hi)`` with ``0 <= p_lo < p_hi <= head.n``; ``(0, head.n)`` for the whole cohort.

    Raises
    ------
    SecurityError
        If the range is not ``(0, total_slots)`` and the proof is not a str, not base64 or not a
        well-formed range proof, the range is empty or exceeds ``total_slots``, or the proof does
        not prove it.
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
    (:func:`fedstats.wire.seeding.session_id`), the head and the session's coordinates. It stands
    for the list of the members' keys in the roster transcript of the secure aggregation the session
    runs (Bell et al. 2020; :class:`fedstats.secagg.identity.SessionRoster`), so the server holds
    every key and a device only its own (``docs/deploy.md``, *In a large cohort, the cohort tree*:
    *rosters*).

    Parameters
    ----------
    run_id : str
        The run, not empty: the roster's task id is its first 64 UTF-8 bytes
        (:func:`fedstats.wire.seeding.task_id_bytes`).
    seed : bytes
        The run's seed, 32 bytes (a device's: the one it computed from the committee).
    head : TreeHead
        The run's head.
    index, number : int
        The round and the session, each in ``[0, 2**32)``.
    p_lo, p_hi : int
        The round's participants' positions, ``0 <= p_lo < p_hi <= head.n``.
    max_session : int
        The task's ``secure_aggregation.max_session``, in ``[2, 2**32)``.
    size : int
        The session's size, in ``[2, max_session]``.

    Returns
    -------
    bytes
        32 bytes (SHA-256).

    Raises
    ------
    ParameterError
        If ``run_id`` is empty, or ``p_lo``, ``p_hi``, ``max_session`` or ``size`` is out of range.
    struct.error
        If ``index`` or ``number`` is not an integer in ``[0, 2**32)`` (the session id's fields).
    """
    sid = seeding.session_id(seed, index, number)
    task = seeding.task_id_bytes(run_id)
    return session_roster_digest(task, sid, head, p_lo, p_hi, max_session, number, size)


# -- 5. the neighbourhood -------------------------------------------------------------------------


def leaves_answer(
    tree: CohortTree, positions: Sequence[int], certificates: Sequence[Any]
) -> dict[str, Any]:
    """The server's answer to a device's neighbourhood: ``{"leaves", "certificates"}``.

    ``docs/deploy.md``, *In a large cohort, the cohort tree*: *neighbourhood*; the device checks it
    by :func:`verify_leaves` and the certificates against their leaves.

    Parameters
    ----------
    tree : CohortTree
        The run's cohort tree.
    positions : sequence of int
        The tree positions of every roster index the device named (``members`` and ``also``), each
        in ``[0, n)``, at least one; repeats are proven once.
    certificates : sequence of dict
        The certificates (``{"body", "signature"}``) of the ``members``, in the order named.

    Returns
    -------
    dict
        ``"leaves"``: the named positions' leaves in one multiproof, in increasing position order
        (:func:`proof_text`); ``"certificates"``: the certificates as given.

    Raises
    ------
    ParameterError
        If ``positions`` is empty or holds a position outside ``[0, n)``
        (:meth:`~fedstats.wire.cohort_tree.CohortTree.multiproof_bytes`).
    """
    return {
        "leaves": proof_text(tree.multiproof_bytes(positions)),
        "certificates": list(certificates),
    }


def leaves_answer_bytes(count: int, certified: int, max_members: int) -> int:
    """The most bytes of :func:`leaves_answer`: ``count`` leaves, ``certified`` with certificates.

    Per leaf: its u32 position, its leaf (with a 256-byte client id) and ``depth`` proof nodes of
    40 bytes (a device parses at most ``count * depth`` nodes for ``count`` leaves), each byte
    counted as 2 characters (the multiproof is base64, 4/3); :data:`CERTIFICATE_BYTES` of JSON per
    certificate; and 1,024 bytes of slack for the JSON keys and quotes. A device adds it to the read
    limit of the stage answer that carries its neighbourhood, or reads ``GET .../certificates`` up
    to it (:func:`fedstats.client.secure_tree.named_members`); its transport refuses a longer answer
    before parsing it.

    Parameters
    ----------
    count : int
        The roster indices named (``members`` and ``also``), >= 1.
    certified : int
        Those of them whose certificates are asked (``members``), in ``[0, count]``.
    max_members : int
        The most leaves the tree may have (a device passes its head's ``n``), >= 1.

    Returns
    -------
    int
        ``count * 2 * (4 + 330 + 40 * depth) + certified * 4096 + 1024`` bytes, with
        ``depth = max(1, ceil(log2 max_members))``.
    """
    depth = _depth(max_members)
    per_leaf = 2 * (4 + _LEAF_BYTES + _NODE_BYTES * depth)
    return int(count) * per_leaf + int(certified) * CERTIFICATE_BYTES + _SLACK


def verify_leaves(head: TreeHead, answer: Any, positions: Sequence[int]) -> dict[int, Leaf]:
    """A device's check of its neighbourhood's leaves: exactly ``positions``, each in the tree.

    ``docs/deploy.md``, *In a large cohort, the cohort tree*: *neighbourhood*. The answer's
    certificates are not checked here (the device checks them against the returned leaves).

    Parameters
    ----------
    head : TreeHead
        The head the device checked its own leaf against.
    answer : object
        The server's answer (:func:`leaves_answer`); only its ``"leaves"`` is read.
    positions : sequence of int
        The tree positions of the roster indices the device named (``members`` and ``also``, from
        :func:`~fedstats.wire.cohort_sessions.member_at`); repeats count once.

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
    verify_multi(head, proof, positions, starts=False)
    return dict(zip(proof.positions, proof.leaves, strict=True))
