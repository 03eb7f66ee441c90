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

import dataclasses
import hashlib
import os
import struct
from collections.abc import Mapping, Sequence
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
_BOUND_MAGIC = b"FSR2"
_BOUND_LABEL = b"fedstats/secagg/v2/bound-roster\x00"


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

    A roster has one of two forms:

    * *listed* (``binding`` empty, the default): every client's key is in it, and the signature and
      :meth:`digest` cover every key;
    * *bound* (``binding`` 32 bytes): a commitment fixes the members, e.g. a cohort Merkle tree's
      session digest (:func:`fedstats.wire.cohort_sessions.session_roster_digest`,
      :mod:`fedstats.wire.tree_seeding`); the signature and :meth:`digest` cover the task id, the session id, ``n``
      and the binding, not the keys, so every holder computes the same transcript whatever keys it
      holds. Its holder keeps only the keys it checked against the binding (``b""`` for the others):
      a client then refuses a message that needs a key it does not hold and does not count a signer
      whose key it does not hold (:class:`~fedstats.secagg.SecAggClient`). Whoever supplies the keys
      (the device, :mod:`fedstats.client.secure`) must have checked them against the binding.

    Attributes
    ----------
    task_id : bytes
        The task the session belongs to (1 to 64 bytes); clients check it against their configuration.
    session : bytes
        32 random bytes drawn by the authority: the session id (bound into every message and key) and the
        public randomness of the graph.
    identities : tuple of bytes
        ``n`` entries: raw Ed25519 public keys (32 bytes each); client ``i`` is ``identities[i]``. In a
        bound roster an entry may be ``b""``: a key its holder does not hold.
    signature : bytes
        The authority's Ed25519 signature over :meth:`signed_bytes` (64 bytes), or empty.
    binding : bytes
        Empty (a listed roster) or 32 bytes (a bound roster).
    """

    task_id: bytes
    session: bytes
    identities: tuple[bytes, ...]
    signature: bytes = b""
    binding: bytes = b""

    @property
    def bound(self) -> bool:
        """Whether the roster is bound (its members fixed by :attr:`binding`, not by listed keys)."""
        return bool(self.binding)

    def signed_bytes(self) -> bytes:
        """The bytes the authority signs: label, task id, session id, n, and the keys or the binding."""
        parts = [
            _BOUND_LABEL if self.binding else _ROSTER_LABEL,
            struct.pack("<I", len(self.task_id)),
            self.task_id,
            self.session,
            struct.pack("<I", len(self.identities)),
        ]
        if self.binding:
            parts.append(self.binding)
        else:
            parts.extend(self.identities)
        return b"".join(parts)

    def to_bytes(self) -> bytes:
        """Serialize.

        A listed roster: magic ``FSR1``, task id, session id, count, keys, signature. A bound roster:
        magic ``FSR2``, task id, session id, ``n``, binding, the number of held keys, each as (u32
        position, key) in increasing position order, signature.
        """
        if self.binding:
            held = [(j, key) for j, key in enumerate(self.identities) if key]
            return b"".join(
                [
                    _BOUND_MAGIC,
                    struct.pack("<B", len(self.task_id)),
                    self.task_id,
                    self.session,
                    struct.pack("<I", len(self.identities)),
                    self.binding,
                    struct.pack("<I", len(held)),
                    *(struct.pack("<I", j) + key for j, key in held),
                    self.signature,
                ]
            )
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
        magic = bytes(view[:4])
        if len(view) < 6 or magic not in (_ROSTER_MAGIC, _BOUND_MAGIC):
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
        if magic == _BOUND_MAGIC:
            return cls._bound_from(view, pos, task_id, session, count)
        if len(view) != pos + 32 * count + SIGNATURE_BYTES:
            raise DataError("session roster has the wrong length for its client count")
        raw = bytes(view[pos : pos + 32 * count])  # one copy, then cut into the 32-byte keys
        ids = tuple(raw[i : i + 32] for i in range(0, 32 * count, 32))
        sig = bytes(view[pos + 32 * count :])
        return cls(task_id, session, ids, sig)

    @classmethod
    def _bound_from(
        cls, view: memoryview, pos: int, task_id: bytes, session: bytes, count: int
    ) -> SessionRoster:
        if len(view) < pos + 32 + 4:
            raise DataError("malformed bound session roster")
        binding = bytes(view[pos : pos + 32])
        (held,) = struct.unpack("<I", view[pos + 32 : pos + 36])
        pos += 36
        if held > count or len(view) != pos + 36 * held + SIGNATURE_BYTES:
            raise DataError("bound session roster has the wrong length for its held keys")
        ids = [b""] * count
        last = -1
        for _ in range(held):
            (j,) = struct.unpack("<I", view[pos : pos + 4])
            if not last < j < count:
                raise DataError(
                    "a bound session roster's key positions must increase within [0, n)"
                )
            ids[j] = bytes(view[pos + 4 : pos + 36])
            last, pos = j, pos + 36
        return cls(task_id, session, tuple(ids), bytes(view[pos:]), binding)

    def digest(self) -> bytes:
        """SHA-256 of the serialized roster (signature included); of a bound roster, of what it signs.

        A bound roster's digest does not depend on which keys its holder holds.
        """
        if self.binding:
            return hashlib.sha256(_BOUND_MAGIC + self.signed_bytes() + self.signature).digest()
        return hashlib.sha256(self.to_bytes()).digest()

    @property
    def n(self) -> int:
        """Number of invited clients."""
        return len(self.identities)

    def holding(self, keys: Mapping[int, bytes]) -> SessionRoster:
        """The same bound roster holding ``keys`` as well (the caller checked them against the binding).

        Parameters
        ----------
        keys : mapping int -> bytes
            Roster position in ``[0, n)`` -> 32-byte key.

        Returns
        -------
        SessionRoster
            Equal :meth:`digest`; the keys it held and ``keys``.

        Raises
        ------
        SecurityError
            If the roster is listed (its keys are fixed), a position is outside ``[0, n)``, a key is not
            32 bytes, or a position already holds another key.
        """
        if not self.binding:
            raise SecurityError("a listed roster's keys are fixed by its signature")
        ids = list(self.identities)
        for j, key in keys.items():
            if not 0 <= int(j) < len(ids) or len(key) != 32:
                raise SecurityError("a roster key must be 32 bytes at a position in [0, n)")
            if ids[int(j)] and ids[int(j)] != key:
                raise SecurityError(f"roster position {int(j)} already holds another key")
            ids[int(j)] = bytes(key)
        return dataclasses.replace(self, identities=tuple(ids))


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
        held = [key for key in roster.identities if key] if roster.bound else roster.identities
        if len(set(held)) != len(held):
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
        binding: bytes | None = None,
    ) -> SessionRoster:
        """Sign the roster of one session (listed, or bound with ``binding``).

        Parameters
        ----------
        identities : sequence of bytes
            The enrolled clients' 32-byte Ed25519 public keys, in index order (at least 2, distinct).
        task_id : bytes, default b"fedstats"
            1 to 64 bytes naming the task.
        session : bytes, optional
            32-byte session id; default 32 bytes from OS entropy (fresh public randomness).
        binding : bytes, optional
            32 bytes: sign a bound roster (:class:`SessionRoster`) holding every key; default a listed
            one.

        Returns
        -------
        SessionRoster

        Raises
        ------
        ParameterError
            Fewer than 2 identities, repeated or malformed keys, or a bad task id / session id /
            binding.
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
        bound = b"" if binding is None else bytes(binding)
        if binding is not None and len(bound) != 32:
            raise ParameterError("binding", f"<{len(bound)} bytes>", "32 bytes")
        unsigned = SessionRoster(bytes(task_id), session, ids, b"", bound)
        return dataclasses.replace(unsigned, signature=self._private.sign(unsigned.signed_bytes()))
