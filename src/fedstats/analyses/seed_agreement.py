"""Agreeing on the public projection seed without a last-mover advantage: commit, then reveal.

Pang et al. 2023 (Algorithm 2, lines 11-12) let every client broadcast a random ``r_i`` and use
``r = sum_i r_i``. The last client to speak sees every other ``r_i`` first and can then pick ``r_n`` so that
``r`` is any value it likes (for instance a seed whose projection hides some cells). Here each client first
sends a *commitment* ``c_i = SHA-256(domain || i || r_i)`` (``r_i`` is 32 random bytes, so the commitment
hides it); only once every commitment is in does anyone reveal ``r_i``. A revealed value that does not
match its commitment is rejected (:class:`~fedstats.errors.SecurityError`), so no client can change its
contribution after seeing the others'. The seed is ``SHA-256(domain || r_1 || ... || r_n)`` in client order
(a hash, not a sum, so it is uniform as long as one contribution is).

A client that commits and then refuses to reveal can still *abort* the agreement (and so, by aborting
selectively, reject seeds it dislikes); :meth:`SeedAgreement.seed` then raises
:class:`~fedstats.errors.ProtocolAbortError` naming the missing clients, which a deployment should treat
as misbehaviour rather than retry silently.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(3)
>>> values = [client_contribution(rng) for _ in range(3)]
>>> ag = SeedAgreement(3)
>>> for i, v in enumerate(values):
...     ag.commit(i, commitment(i, v))
>>> for i, v in enumerate(values):
...     ag.reveal(i, v)
>>> 0 <= ag.seed() < 2**256
True
"""

from __future__ import annotations

import hmac as _hmac

from cryptography.hazmat.primitives import hashes

from fedstats._validation import check_int
from fedstats.errors import ParameterError, ProtocolAbortError, SecurityError
from fedstats.randomness import RNG, RandomSource

__all__ = [
    "CONTRIBUTION_BYTES",
    "SeedAgreement",
    "agree_projection_seed",
    "client_contribution",
    "commitment",
    "resolve_projection_seed",
]

CONTRIBUTION_BYTES = 32
_DOMAIN_COMMIT = b"fedstats-seed-commit-v1\x00"
_DOMAIN_SEED = b"fedstats-seed-combine-v1\x00"


def _sha256(*parts: bytes) -> bytes:
    h = hashes.Hash(hashes.SHA256())
    for p in parts:
        h.update(p)
    return h.finalize()


def client_contribution(rng: RNG) -> bytes:
    """Draw a client's secret contribution: 32 random bytes from its private generator.

    Parameters
    ----------
    rng : numpy.random.Generator or SecureGenerator
        The client's private randomness (use the secure default in a deployment).

    Returns
    -------
    bytes
        32 bytes.
    """
    return bytes(rng.bytes(CONTRIBUTION_BYTES))


def commitment(client_id: int, value: bytes) -> bytes:
    """Compute the hash commitment ``SHA-256(domain || client_id || value)`` sent before revealing.

    Parameters
    ----------
    client_id : int
        The client's index, >= 0 (binds the commitment to its author, so it cannot be replayed).
    value : bytes
        The 32-byte contribution.

    Returns
    -------
    bytes
        32-byte digest.

    Raises
    ------
    ParameterError
        If ``value`` is not 32 bytes or ``client_id`` is negative.
    """
    check_int("client_id", client_id, low=0, high=2**64 - 1)
    if len(value) != CONTRIBUTION_BYTES:
        raise ParameterError("value", f"<{len(value)} bytes>", f"{CONTRIBUTION_BYTES} bytes")
    return _sha256(_DOMAIN_COMMIT, client_id.to_bytes(8, "little"), value)


class SeedAgreement:
    """The server's (or any party's) view of a commit-then-reveal seed agreement among ``n`` clients.

    Parameters
    ----------
    n_clients : int
        Number of participating clients, >= 1 (clients are ``0 .. n - 1``).

    Notes
    -----
    Phases are enforced: every commitment must be in before the first reveal is accepted, a client may
    commit once and reveal once, and a reveal that does not open its commitment raises
    :class:`~fedstats.errors.SecurityError` (the value is rejected and not stored).
    """

    def __init__(self, n_clients: int) -> None:
        self.n_clients = check_int("n_clients", n_clients, low=1)
        self._commitments: dict[int, bytes] = {}
        self._reveals: dict[int, bytes] = {}

    def _check_id(self, client_id: int) -> int:
        return check_int("client_id", client_id, low=0, high=self.n_clients - 1)

    @property
    def commitments_complete(self) -> bool:
        """True once every client has committed (reveals are accepted from then on)."""
        return len(self._commitments) == self.n_clients

    def commit(self, client_id: int, digest: bytes) -> None:
        """Record client ``client_id``'s commitment.

        Raises
        ------
        SecurityError
            If the client already committed or reveals have started.
        ParameterError
            If the id is out of range or the digest is not 32 bytes.
        """
        i = self._check_id(client_id)
        if len(digest) != 32:
            raise ParameterError("digest", f"<{len(digest)} bytes>", "32 bytes")
        if self._reveals:
            raise SecurityError("commitments are closed: the reveal phase has started")
        if i in self._commitments:
            raise SecurityError(f"client {i} already committed")
        self._commitments[i] = bytes(digest)

    def reveal(self, client_id: int, value: bytes) -> None:
        """Record client ``client_id``'s revealed value after checking it opens its commitment.

        Raises
        ------
        SecurityError
            If commitments are not complete, the client revealed already, or the value does not match the
            commitment (the value is rejected).
        ParameterError
            If the id is out of range or the value is not 32 bytes.
        """
        i = self._check_id(client_id)
        if not self.commitments_complete:
            missing = self.n_clients - len(self._commitments)
            raise SecurityError(f"reveal before every commitment is in ({missing} missing)")
        if i in self._reveals:
            raise SecurityError(f"client {i} already revealed")
        if not _hmac.compare_digest(commitment(i, value), self._commitments[i]):
            raise SecurityError(f"client {i} revealed a value that does not match its commitment")
        self._reveals[i] = bytes(value)

    def seed(self) -> int:
        """Return the agreed 256-bit seed ``SHA-256(domain || r_0 || ... || r_{n-1})`` as an int.

        Raises
        ------
        ProtocolAbortError
            If some client has not revealed (the agreement cannot finish without it).
        """
        if len(self._reveals) != self.n_clients:
            missing = sorted(set(range(self.n_clients)) - set(self._reveals))
            shown = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
            raise ProtocolAbortError(
                f"seed agreement aborted: {len(missing)} client(s) did not reveal ({shown})"
            )
        h = hashes.Hash(hashes.SHA256())
        h.update(_DOMAIN_SEED + self.n_clients.to_bytes(8, "little"))
        for i in range(self.n_clients):
            h.update(self._reveals[i])
        return int.from_bytes(h.finalize(), "little")


def agree_projection_seed(n_clients: int, randomness: RandomSource) -> int:
    """Simulate the whole commit-then-reveal agreement among ``n_clients`` honest clients.

    Client ``i`` draws its contribution from ``randomness.generator("seed-agreement", i)``.

    Parameters
    ----------
    n_clients : int
        Number of clients, >= 1. Cost: two SHA-256 per client (about 5 microseconds each).
    randomness : RandomSource

    Returns
    -------
    int
        The agreed seed in ``[0, 2**256)``.
    """
    n = check_int("n_clients", n_clients, low=1)
    values = [client_contribution(randomness.generator("seed-agreement", i)) for i in range(n)]
    ag = SeedAgreement(n)
    for i, v in enumerate(values):
        ag.commit(i, commitment(i, v))
    for i, v in enumerate(values):
        ag.reveal(i, v)
    return ag.seed()


def resolve_projection_seed(seed: int | None, n_clients: int, randomness: RandomSource) -> int:
    """Return ``seed`` if given, else the seed :func:`agree_projection_seed` agrees on.

    Parameters
    ----------
    seed : int or None
        A public seed fixed beforehand, in ``[0, 2**256)``.
    n_clients : int
        Clients taking part in the agreement, >= 1.
    randomness : RandomSource
        The clients' contributions (see :func:`agree_projection_seed`).

    Returns
    -------
    int

    Raises
    ------
    ParameterError
        If ``seed`` is outside ``[0, 2**256)``.
    """
    if seed is not None:
        return check_int("projection_seed", seed, low=0, high=2**256 - 1)
    return agree_projection_seed(n_clients, randomness)
