"""A secure run's public seed: commit at check-in, reveal once the cohort is fixed (both sides).

This module is shared by the server and the devices (it imports nothing heavy).

Secure aggregation needs a session id the server cannot choose: in the malicious-server model it fixes the
communication graph (:func:`fedstats.secagg.graph.public_harary_graph`), and a server free to re-draw it
could place a target's neighbours among clients it controls. FED-chi^2 and FED-H need a projection seed no
party can bias (Pang et al. 2023, Alg. 2, lines 11-12). In a deployment there is no online authority to
draw them, so a secure run derives both from its members (:mod:`fedstats.analyses.seed_agreement` is the
in-process form of the same idea):

1. at check-in each device sends ``c_i = SHA-256(domain || run || client || r_i)`` for 32 secret random
   bytes ``r_i``; nobody knows the cohort yet;
2. once check-in closes, each device fetches the list of every member's commitment and reveals ``r_i``,
   binding the digest of the list it saw into its (signed) reveal, so no commitment can be added after any
   reveal;
3. the run's seed is ``SHA-256(domain || run || digest(list) || r_1 || ... || r_m)`` in slot order, and
   every session id and the projection seed derive from it (:func:`session_id`,
   :func:`projection_seed`).

A member that commits and does not reveal aborts the run (it could otherwise choose between two seeds, and
a server that hid a reveal could choose among many): the server cannot bias the seed, only abort, and each
device recomputes the seed from the published transcript before it takes part in a secure round
(:func:`verify_transcript`).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Sequence

from fedstats.errors import SecurityError

__all__ = [
    "BITS",
    "CONTRIBUTION_BYTES",
    "STAGES",
    "commitment",
    "commitments_digest",
    "projection_seed",
    "run_seed",
    "session_id",
    "task_id_bytes",
    "verify_transcript",
]

CONTRIBUTION_BYTES = 32
BITS = 64
"""Ring width of every secure sum over the network: reports are int64, summed mod 2^64."""
STAGES = ("advertise", "share", "masked_input", "consistency", "unmask")
"""The device stages of a secure session (the ``{stage}`` of its URLs, by index): stage ``s``'s down
message is what a device needs to send its stage-``s`` message."""
_COMMIT = b"fedstats/service/seed-commit/v1\x00"
_LIST = b"fedstats/service/seed-list/v1\x00"
_SEED = b"fedstats/service/run-seed/v1\x00"
_SESSION = b"fedstats/service/session/v1\x00"
_PROJECTION = b"fedstats/service/projection/v1\x00"


def _field(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<H", len(raw)) + raw


def commitment(run_id: str, client_id: str, value: bytes) -> str:
    """Compute a device's commitment ``SHA-256(domain || run || client || r)`` (hex).

    Parameters
    ----------
    run_id, client_id : str
        The run and the committing device.
    value : bytes
        The device's secret contribution, 32 bytes.

    Returns
    -------
    str
        64 hex digits.

    Raises
    ------
    SecurityError
        If ``value`` is not 32 bytes.
    """
    if len(value) != CONTRIBUTION_BYTES:
        raise SecurityError(f"a seed contribution must be {CONTRIBUTION_BYTES} bytes")
    return hashlib.sha256(_COMMIT + _field(run_id) + _field(client_id) + value).hexdigest()


def commitments_digest(run_id: str, entries: Sequence[tuple[str, str]]) -> str:
    """Digest (hex) of the ordered list of ``(client_id, commitment_hex)`` a device sees before revealing."""
    h = hashlib.sha256(_LIST + _field(run_id))
    h.update(struct.pack("<I", len(entries)))
    for cid, c in entries:
        h.update(_field(cid) + bytes.fromhex(c))
    return h.hexdigest()


def run_seed(run_id: str, entries: Sequence[tuple[str, str]], reveals: Sequence[bytes]) -> bytes:
    """The run's 32-byte public seed from the ordered commitments and every member's revealed value.

    Raises
    ------
    SecurityError
        If a reveal is missing or does not open its commitment.
    """
    if len(reveals) != len(entries):
        raise SecurityError("every member's reveal is needed for the run seed")
    for (cid, c), r in zip(entries, reveals, strict=True):
        if not hmac.compare_digest(commitment(run_id, cid, r), c):
            raise SecurityError(f"the value revealed by {cid!r} does not open its commitment")
    h = hashlib.sha256(_SEED + _field(run_id) + bytes.fromhex(commitments_digest(run_id, entries)))
    for r in reveals:
        h.update(r)
    return h.digest()


def session_id(seed: bytes, round_index: int, number: int) -> bytes:
    """The 32-byte id of session ``number`` of round ``round_index``, derived from the run's seed."""
    return hashlib.sha256(_SESSION + seed + struct.pack("<II", round_index, number)).digest()


def task_id_bytes(run_id: str) -> bytes:
    """The secure-aggregation roster's task id of a run: the run id (its sessions are bound to it)."""
    return run_id.encode()[:64]


def projection_seed(seed: bytes) -> int:
    """The public projection seed of FED-chi^2 / FED-H, an integer in ``[0, 2**256)``."""
    return int.from_bytes(hashlib.sha256(_PROJECTION + seed).digest(), "big")


def verify_transcript(
    run_id: str,
    client_id: str,
    transcript: dict[str, object],
    *,
    seen_digest: str,
    own_value: bytes,
) -> bytes:
    """A device's check of the published seed transcript; returns the run's seed.

    Parameters
    ----------
    run_id, client_id : str
    transcript : dict
        The server's ``{"members": [[client_id, commitment, reveal], ...], "seed": hex}``.
    seen_digest : str
        :func:`commitments_digest` of the list this device saw before revealing.
    own_value : bytes
        This device's contribution.

    Raises
    ------
    SecurityError
        If the list changed since this device revealed, its own entry is missing or altered, a reveal does
        not open its commitment, or the published seed is not the one the transcript gives.
    """
    try:
        rows = [(str(m[0]), str(m[1]), bytes.fromhex(str(m[2]))) for m in transcript["members"]]  # type: ignore[attr-defined]
        published = bytes.fromhex(str(transcript["seed"]))
    except (KeyError, TypeError, ValueError, IndexError):
        raise SecurityError("malformed seed transcript") from None
    entries = [(cid, c) for cid, c, _ in rows]
    if not hmac.compare_digest(commitments_digest(run_id, entries), seen_digest):
        raise SecurityError("the run's commitment list changed after this device revealed")
    mine = [r for cid, _, r in rows if cid == client_id]
    if mine != [own_value]:
        raise SecurityError("this device's reveal is missing or altered in the seed transcript")
    seed = run_seed(run_id, entries, [r for _, _, r in rows])
    if not hmac.compare_digest(seed, published):
        raise SecurityError("the published run seed does not follow from its transcript")
    return seed
