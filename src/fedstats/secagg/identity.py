"""Client identities for the malicious-server protocol: Ed25519 keys certified by an enrollment authority.

Bell et al. (CCS 2020, Sec. 5) and Bonawitz et al. (CCS 2017, Sec. 4.3) assume a PKI: every client holds a
long-term signing key that the server cannot forge or mint. fedstats models it with an
:class:`EnrollmentAuthority`, a party that is **not** the aggregation server (in a deployment: the task
owner's enrollment service). For each session it signs a :class:`SessionRoster`: the task id, a fresh
32-byte session id drawn by the authority, and the Ed25519 identity public keys of the ``n`` invited
clients in index order. Clients pin the authority's public key in their task configuration and check the
roster's signature, so the server can neither add identities (fake clients) nor choose the session id.

The session id doubles as the public randomness of the communication graph (see
:func:`fedstats.secagg.graph.public_harary_graph`): it is fixed by the authority, never by the server, so
the server cannot choose (or grind) the graph.

Device attestation can replace the authority: anything that implements :class:`RosterVerifier`
(``verify(roster)`` raising :class:`~fedstats.errors.SecurityError`) can be given to the clients instead
of :class:`AuthorityVerifier`, e.g. one that checks an attestation chain per identity key.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from fedstats.errors import DataError, ParameterError, SecurityError

__all__ = [
    "SIGNATURE_BYTES",
    "AuthorityVerifier",
    "ClientIdentity",
    "EnrollmentAuthority",
    "RosterVerifier",
    "SessionRoster",
    "sign",
    "verify_signature",
]

SIGNATURE_BYTES = 64
_ROSTER_MAGIC = b"FSR1"
_ROSTER_LABEL = b"fedstats/secagg/v2/roster\x00"


def verify_signature(public: bytes, signature: bytes, data: bytes) -> bool:
    """True when ``signature`` is a valid Ed25519 signature of ``data`` under the raw 32-byte ``public``."""
    if len(public) != 32 or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


def sign(private: Ed25519PrivateKey, data: bytes) -> bytes:
    """Ed25519 signature (64 bytes) of ``data``."""
    return private.sign(data)


class ClientIdentity:
    """A client's long-term Ed25519 identity key (the secret stays on the device).

    Parameters
    ----------
    private : Ed25519PrivateKey, optional
        The key; default a fresh key from OS entropy.
    """

    __slots__ = ("_private", "public")

    def __init__(self, private: Ed25519PrivateKey | None = None) -> None:
        self._private = private if private is not None else Ed25519PrivateKey.generate()
        self.public = self._private.public_key().public_bytes_raw()

    def sign(self, data: bytes) -> bytes:
        """Ed25519 signature (64 bytes) of ``data``."""
        return self._private.sign(data)


@dataclass(frozen=True)
class SessionRoster:
    """The authority-signed list of the clients invited to one session.

    Attributes
    ----------
    task_id : bytes
        The task the session belongs to (1 to 64 bytes); clients check it against their configuration.
    session : bytes
        32 random bytes drawn by the authority: the session id (bound into every message and key) and the
        public randomness of the graph.
    identities : tuple of bytes
        ``n`` raw Ed25519 public keys (32 bytes each); client ``i`` is ``identities[i]``.
    signature : bytes
        The authority's Ed25519 signature over everything above.
    """

    task_id: bytes
    session: bytes
    identities: tuple[bytes, ...]
    signature: bytes = b""

    def signed_bytes(self) -> bytes:
        """The bytes the authority signs (label, task id, session id, n, identities)."""
        parts = [_ROSTER_LABEL, struct.pack("<I", len(self.task_id)), self.task_id, self.session]
        parts.append(struct.pack("<I", len(self.identities)))
        parts.extend(self.identities)
        return b"".join(parts)

    def to_bytes(self) -> bytes:
        """Serialize (magic, task id, session id, count, keys, signature)."""
        return b"".join(
            [
                _ROSTER_MAGIC,
                struct.pack("<B", len(self.task_id)),
                self.task_id,
                self.session,
                struct.pack("<I", len(self.identities)),
                *self.identities,
                self.signature,
            ]
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, max_clients: int | None = None) -> SessionRoster:
        """Deserialize, checking every length before reading; raises DataError on malformed input."""
        view = memoryview(data)
        if len(view) < 6 or bytes(view[:4]) != _ROSTER_MAGIC:
            raise DataError("not a fedstats session roster")
        tlen = view[4]
        pos = 5
        if not 1 <= tlen <= 64 or len(view) < pos + tlen + 32 + 4:
            raise DataError("malformed session roster header")
        task_id = bytes(view[pos : pos + tlen])
        pos += tlen
        session = bytes(view[pos : pos + 32])
        pos += 32
        (count,) = struct.unpack("<I", view[pos : pos + 4])
        pos += 4
        if max_clients is not None and count > max_clients:
            raise DataError(f"session roster lists {count} clients, at most {max_clients} expected")
        if len(view) != pos + 32 * count + SIGNATURE_BYTES:
            raise DataError("session roster has the wrong length for its client count")
        raw = bytes(view[pos : pos + 32 * count])  # one copy, then cut into the 32-byte keys
        ids = tuple(raw[i : i + 32] for i in range(0, 32 * count, 32))
        sig = bytes(view[pos + 32 * count :])
        return cls(task_id, session, ids, sig)

    def digest(self) -> bytes:
        """SHA-256 of the serialized roster (signature included)."""
        return hashlib.sha256(self.to_bytes()).digest()

    @property
    def n(self) -> int:
        """Number of invited clients."""
        return len(self.identities)


class RosterVerifier(Protocol):
    """Checks that a roster's identities are genuine (authority signature, or device attestation)."""

    def verify(self, roster: SessionRoster) -> None:
        """Raise :class:`~fedstats.errors.SecurityError` unless every identity in ``roster`` is certified."""


class AuthorityVerifier:
    """Accepts rosters signed by one enrollment authority (its public key pinned by the client).

    Parameters
    ----------
    authority_public : bytes
        The authority's raw 32-byte Ed25519 public key.
    """

    def __init__(self, authority_public: bytes) -> None:
        if len(authority_public) != 32:
            raise ParameterError("authority_public", f"<{len(authority_public)} bytes>", "32 bytes")
        self.authority_public = bytes(authority_public)

    def verify(self, roster: SessionRoster) -> None:
        """Raise SecurityError unless the authority signed ``roster`` and its identities are distinct."""
        if not verify_signature(self.authority_public, roster.signature, roster.signed_bytes()):
            raise SecurityError("the session roster is not signed by the enrollment authority")
        if len(set(roster.identities)) != len(roster.identities):
            raise SecurityError("the session roster lists one identity key twice")


class EnrollmentAuthority:
    """The party that certifies client identities (not the aggregation server).

    Parameters
    ----------
    private : Ed25519PrivateKey, optional
        The authority's signing key; default a fresh key from OS entropy.

    Attributes
    ----------
    public : bytes
        Raw 32-byte Ed25519 public key, pinned in every client's configuration.
    """

    def __init__(self, private: Ed25519PrivateKey | None = None) -> None:
        self._private = private if private is not None else Ed25519PrivateKey.generate()
        self.public = self._private.public_key().public_bytes_raw()

    def verifier(self) -> AuthorityVerifier:
        """The verifier clients use (holds only the public key)."""
        return AuthorityVerifier(self.public)

    def roster(
        self,
        identities: Sequence[bytes],
        *,
        task_id: bytes = b"fedstats",
        session: bytes | None = None,
    ) -> SessionRoster:
        """Sign the roster of one session.

        Parameters
        ----------
        identities : sequence of bytes
            The enrolled clients' 32-byte Ed25519 public keys, in index order (at least 2, distinct).
        task_id : bytes, default b"fedstats"
            1 to 64 bytes naming the task.
        session : bytes, optional
            32-byte session id; default 32 bytes from OS entropy (fresh public randomness).

        Returns
        -------
        SessionRoster

        Raises
        ------
        ParameterError
            Fewer than 2 identities, repeated or malformed keys, or a bad task id / session id.
        """
        ids = tuple(bytes(p) for p in identities)
        if len(ids) < 2 or any(len(p) != 32 for p in ids) or len(set(ids)) != len(ids):
            raise ParameterError(
                "identities", f"<{len(ids)} keys>", "at least 2 distinct 32-byte keys"
            )
        if not 1 <= len(task_id) <= 64:
            raise ParameterError("task_id", task_id, "1 to 64 bytes")
        session = os.urandom(32) if session is None else bytes(session)
        if len(session) != 32:
            raise ParameterError("session", f"<{len(session)} bytes>", "32 bytes")
        unsigned = SessionRoster(bytes(task_id), session, ids)
        return SessionRoster(
            unsigned.task_id, session, ids, self._private.sign(unsigned.signed_bytes())
        )
