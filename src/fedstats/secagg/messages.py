"""Messages of the secure-aggregation protocol: public dataclasses that serialize to bytes.

Every message is independent of any transport. ``msg.to_bytes()`` gives a self-describing byte string:

* a header: 4-byte magic ``FSA2``, 1-byte protocol version (:data:`VERSION`), 1-byte stage tag, the 32-byte
  session id (the receiver checks all three against the session it is in);
* little-endian fields, every count and length checked against the bytes left *before* anything is
  allocated, every key, share and ciphertext of fixed size;
* for client-to-server messages, a trailing signature (64 bytes, Ed25519 under the client's identity key,
  over the header and all fields) in the ``"malicious"`` threat model, empty otherwise.

:func:`decode` turns bytes back into the dataclass; :func:`max_message_bytes` is the size limit of each
stage for a session's ``n``, ``k``, length and width (receivers refuse larger messages before parsing).

=========================  ================  ===================  =============================================
message                    direction         stage                content
=========================  ================  ===================  =============================================
``SetupMessage``           server -> client  ``setup``            parameters; neighbours (semi-honest models) or
                                                                  the authority-signed roster (malicious)
``AdvertiseKeys``          client -> server  ``advertise_keys``   two X25519 public keys, signed
``KeyBroadcast``           server -> client  ``share_keys``       neighbours' signed key advertisements
``EncryptedShares``        client -> server  ``share_keys``       seed commitment, one ciphertext per neighbour
``ShareBroadcast``         server -> client  ``masked_input``     ciphertexts addressed to the client
``MaskedInput``            client -> server  ``masked_input``     masked vector mod 2^b, signed
``SurvivorSet``            server -> client  ``consistency``      the set ``S`` of masked inputs received
``ConsistencySignature``   client -> server  ``consistency``      signature over (session, ``S``)
``UnmaskRequest``          server -> client  ``unmask``           neighbours' signatures on ``S`` (malicious) or
                                                                  per-client survivor/dropout lists
``UnmaskResponse``         client -> server  ``unmask``           seed shares and key shares, signed
=========================  ================  ===================  =============================================
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import ClassVar, TypeAlias

import numpy as np

from fedstats.errors import DataError
from fedstats.secagg.crypto import DTYPES
from fedstats.secagg.identity import SIGNATURE_BYTES
from fedstats.secagg.shamir import SHARE_BYTES

__all__ = [
    "CIPHERTEXT_BYTES",
    "STAGES",
    "THREAT_CODES",
    "VERSION",
    "AdvertiseKeys",
    "ConsistencySignature",
    "EncryptedShares",
    "KeyBroadcast",
    "MaskedInput",
    "Message",
    "SetupMessage",
    "ShareBroadcast",
    "SurvivorSet",
    "UnmaskRequest",
    "UnmaskResponse",
    "decode",
    "max_message_bytes",
    "survivor_statement",
]

_MAGIC = b"FSA2"
VERSION = 2
"""Protocol version carried in every message header."""
HEADER_BYTES = 4 + 1 + 1 + 32
PLAINTEXT_BYTES = 4 + 4 + 2 * SHARE_BYTES
CIPHERTEXT_BYTES = PLAINTEXT_BYTES + 16
"""Exact size of one encrypted share pair (ChaCha20-Poly1305: plaintext + 16-byte tag)."""
STAGES = ("setup", "advertise_keys", "share_keys", "masked_input", "consistency", "unmask")
"""Stage names, in protocol order."""
THREAT_CODES = {"semi-honest": 1, "semi-malicious": 2, "malicious": 3}
"""Wire code of each threat model in :class:`SetupMessage`."""
_STATEMENT_LABEL = b"fedstats/secagg/v2/survivors\x00"


class _Writer:
    def __init__(self, tag: int, session: bytes) -> None:
        if len(session) != 32:
            raise DataError(f"session id must be 32 bytes, got {len(session)}")
        self.parts: list[bytes] = [_MAGIC, bytes([VERSION, tag]), bytes(session)]

    def u8(self, v: int) -> None:
        self.parts.append(struct.pack("<B", v))

    def u32(self, v: int) -> None:
        self.parts.append(struct.pack("<I", v))

    def fixed(self, b: bytes, size: int) -> None:
        if len(b) != size:
            raise DataError(f"field must be {size} bytes, got {len(b)}")
        self.parts.append(bytes(b))

    def blob(self, b: bytes) -> None:
        self.u32(len(b))
        self.parts.append(bytes(b))

    def ids(self, values: tuple[int, ...]) -> None:
        self.u32(len(values))
        self.parts.append(np.asarray(values, dtype="<u4").tobytes())

    def signature(self, sig: bytes) -> None:
        if len(sig) not in (0, SIGNATURE_BYTES):
            raise DataError(f"a signature is 0 or {SIGNATURE_BYTES} bytes, got {len(sig)}")
        self.u8(len(sig))
        self.parts.append(bytes(sig))

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes, tag: int) -> None:
        self.view = memoryview(data)
        if len(data) < HEADER_BYTES or bytes(self.view[:4]) != _MAGIC or data[5] != tag:
            raise DataError("not a fedstats secure-aggregation message of the expected stage")
        if data[4] != VERSION:
            raise DataError(f"secure-aggregation protocol version {data[4]}, expected {VERSION}")
        self.session = bytes(self.view[6:HEADER_BYTES])
        self.pos = HEADER_BYTES

    def left(self) -> int:
        return len(self.view) - self.pos

    def take(self, size: int) -> memoryview:
        if size < 0 or self.pos + size > len(self.view):
            raise DataError("truncated secure-aggregation message")
        out = self.view[self.pos : self.pos + size]
        self.pos += size
        return out

    def u8(self) -> int:
        return int(self.take(1)[0])

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def fixed(self, size: int) -> bytes:
        return bytes(self.take(size))

    def blob(self) -> bytes:
        return bytes(self.take(self.u32()))

    def count(self, entry_bytes: int) -> int:
        """A count whose entries (``entry_bytes`` each, at least) must fit in the bytes left."""
        c = self.u32()
        if c * entry_bytes > self.left():
            raise DataError("secure-aggregation message announces more entries than it holds")
        return c

    def ids(self) -> tuple[int, ...]:
        c = self.count(4)
        return tuple(int(v) for v in np.frombuffer(self.take(4 * c), dtype="<u4"))

    def signature(self) -> bytes:
        size = self.u8()
        if size not in (0, SIGNATURE_BYTES):
            raise DataError("malformed signature field")
        return self.fixed(size)

    def done(self) -> None:
        if self.pos != len(self.view):
            raise DataError("trailing bytes after a secure-aggregation message")


class _Signed:
    """Mixin of client-to-server messages: ``signed_bytes()`` is what the identity key signs."""

    signature: bytes

    def signed_bytes(self) -> bytes:
        """Header and fields without the signature: the bytes covered by the signature."""
        w = self._unsigned()  # type: ignore[attr-defined]
        return bytes(w.getvalue())


@dataclass(frozen=True)
class SetupMessage:
    """Server -> client, stage ``setup``: the session's parameters (the client checks them all).

    Attributes
    ----------
    session : bytes
        32-byte session id (in the malicious model, the roster's, chosen by the enrollment authority).
    client, n, k, t, bits, length, min_survivors : int
    threat_model : str
    neighbors : tuple of int
        The client's ``k`` neighbours (semi-honest models; empty in the malicious model, where the client
        computes them from the roster).
    roster : bytes
        The serialized :class:`~fedstats.secagg.identity.SessionRoster` (malicious model; else empty).
    """

    TAG: ClassVar[int] = 1
    STAGE: ClassVar[str] = "setup"
    session: bytes
    client: int
    n: int
    k: int
    t: int
    bits: int
    length: int
    min_survivors: int
    threat_model: str
    neighbors: tuple[int, ...] = ()
    roster: bytes = b""

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = _Writer(self.TAG, self.session)
        for v in (self.client, self.n, self.k, self.t, self.bits, self.length, self.min_survivors):
            w.u32(v)
        w.u8(THREAT_CODES[self.threat_model])
        w.ids(self.neighbors)
        w.blob(self.roster)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> SetupMessage:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        client, n, k, t, bits, length, min_survivors = (r.u32() for _ in range(7))
        code = r.u8()
        models = {v: k for k, v in THREAT_CODES.items()}
        if code not in models:
            raise DataError(f"unknown threat model code {code}")
        neighbors = r.ids()
        roster = r.blob()
        r.done()
        return cls(
            r.session, client, n, k, t, bits, length, min_survivors, models[code], neighbors, roster
        )


@dataclass(frozen=True)
class AdvertiseKeys(_Signed):
    """Client -> server, stage ``advertise_keys``: mask-agreement and encryption X25519 public keys.

    In the malicious model ``signature`` is the client's identity signature over (version, stage,
    session, index, both keys); the server forwards it to the neighbours, who verify it before sharing.
    """

    TAG: ClassVar[int] = 2
    STAGE: ClassVar[str] = "advertise_keys"
    session: bytes
    client: int
    mask_public: bytes
    encryption_public: bytes
    signature: bytes = b""

    def _unsigned(self) -> _Writer:
        w = _Writer(self.TAG, self.session)
        w.u32(self.client)
        w.fixed(self.mask_public, 32)
        w.fixed(self.encryption_public, 32)
        return w

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = self._unsigned()
        w.signature(self.signature)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> AdvertiseKeys:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        out = cls(r.session, r.u32(), r.fixed(32), r.fixed(32), r.signature())
        r.done()
        return out


@dataclass(frozen=True)
class KeyBroadcast:
    """Server -> client, stage ``share_keys``: the neighbours' key advertisements.

    ``keys`` maps neighbour index -> (mask public key, encryption public key, its signature). ``transcript``
    is the 32-byte HKDF salt of the session's keys (semi-honest models: chosen by the server; malicious:
    the client recomputes it from the roster and refuses a different one).
    """

    TAG: ClassVar[int] = 3
    STAGE: ClassVar[str] = "share_keys"
    session: bytes
    receiver: int
    transcript: bytes
    keys: dict[int, tuple[bytes, bytes, bytes]] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = _Writer(self.TAG, self.session)
        w.u32(self.receiver)
        w.fixed(self.transcript, 32)
        w.u32(len(self.keys))
        for idx in sorted(self.keys):
            c_pk, s_pk, sig = self.keys[idx]
            w.u32(idx)
            w.fixed(c_pk, 32)
            w.fixed(s_pk, 32)
            w.signature(sig)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyBroadcast:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        receiver = r.u32()
        transcript = r.fixed(32)
        keys = {}
        for _ in range(r.count(4 + 64 + 1)):
            idx = r.u32()
            if idx in keys:
                raise DataError(f"client {idx} listed twice")
            keys[idx] = (r.fixed(32), r.fixed(32), r.signature())
        r.done()
        return cls(r.session, receiver, transcript, keys)


def _write_cts(w: _Writer, cts: dict[int, bytes]) -> None:
    w.u32(len(cts))
    for idx in sorted(cts):
        w.u32(idx)
        w.fixed(cts[idx], CIPHERTEXT_BYTES)


def _read_cts(r: _Reader) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for _ in range(r.count(4 + CIPHERTEXT_BYTES)):
        idx = r.u32()
        if idx in out:
            raise DataError(f"two ciphertexts for client {idx}")
        out[idx] = r.fixed(CIPHERTEXT_BYTES)
    return out


@dataclass(frozen=True)
class EncryptedShares(_Signed):
    """Client -> server, stage ``share_keys``: seed commitment and one ciphertext per live neighbour."""

    TAG: ClassVar[int] = 4
    STAGE: ClassVar[str] = "share_keys"
    session: bytes
    sender: int
    seed_commitment: bytes
    ciphertexts: dict[int, bytes] = field(default_factory=dict)
    signature: bytes = b""

    def _unsigned(self) -> _Writer:
        w = _Writer(self.TAG, self.session)
        w.u32(self.sender)
        w.fixed(self.seed_commitment, 32)
        _write_cts(w, self.ciphertexts)
        return w

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = self._unsigned()
        w.signature(self.signature)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> EncryptedShares:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        sender = r.u32()
        commitment = r.fixed(32)
        cts = _read_cts(r)
        sig = r.signature()
        r.done()
        return cls(r.session, sender, commitment, cts, sig)


@dataclass(frozen=True)
class ShareBroadcast:
    """Server -> client, stage ``masked_input``: the ciphertexts addressed to ``receiver``, by sender."""

    TAG: ClassVar[int] = 5
    STAGE: ClassVar[str] = "masked_input"
    session: bytes
    receiver: int
    ciphertexts: dict[int, bytes] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = _Writer(self.TAG, self.session)
        w.u32(self.receiver)
        _write_cts(w, self.ciphertexts)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> ShareBroadcast:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        receiver = r.u32()
        cts = _read_cts(r)
        r.done()
        return cls(r.session, receiver, cts)


@dataclass(frozen=True, eq=False)
class MaskedInput(_Signed):
    """Client -> server, stage ``masked_input``: ``y_i`` mod 2^bits at the modulus width, signed."""

    TAG: ClassVar[int] = 6
    STAGE: ClassVar[str] = "masked_input"
    session: bytes
    sender: int
    bits: int
    values: np.ndarray
    signature: bytes = b""

    def _unsigned(self) -> _Writer:
        if self.bits not in DTYPES:
            raise DataError(f"masked input has unsupported width {self.bits}")
        w = _Writer(self.TAG, self.session)
        w.u32(self.sender)
        w.u32(self.bits)
        w.u32(int(self.values.size))
        arr = np.ascontiguousarray(self.values, dtype=f"<u{self.bits // 8}")
        w.parts.append(memoryview(arr).cast("B"))  # type: ignore[arg-type]
        return w

    def to_bytes(self) -> bytes:
        """Serialize (values as little-endian ``uint{bits}``)."""
        w = self._unsigned()
        w.signature(self.signature)
        return w.getvalue()

    def signed_bytes(self) -> bytes:
        """Header and fields with the vector replaced by its SHA-256 (what the identity key signs).

        Ed25519 hashes its message twice when signing; signing a 32-byte digest of a long vector
        instead keeps the cost at one SHA-256 pass (collision resistance makes it as binding).
        """
        w = self._unsigned()
        vec = w.parts.pop()
        w.parts.append(hashlib.sha256(vec).digest())
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> MaskedInput:
        """Deserialize (zero-copy view of the vector); raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        sender, bits = r.u32(), r.u32()
        if bits not in DTYPES:
            raise DataError(f"masked input has unsupported width {bits}")
        size = r.count(bits // 8)
        values = np.frombuffer(r.take(size * (bits // 8)), dtype=f"<u{bits // 8}")
        sig = r.signature()
        r.done()
        return cls(r.session, sender, bits, values, sig)


def _pack_set(n: int, members: tuple[int, ...]) -> bytes:
    bits = np.zeros(n, dtype=bool)
    bits[list(members)] = True
    return np.packbits(bits, bitorder="little").tobytes()


def survivor_statement(session: bytes, n: int, survivors: tuple[int, ...]) -> bytes:
    """The bytes a client signs in the consistency check: label, session id, n and the set as a bitmap."""
    return _STATEMENT_LABEL + bytes(session) + struct.pack("<I", n) + _pack_set(n, survivors)


@dataclass(frozen=True)
class SurvivorSet:
    """Server -> client, stage ``consistency``: the set ``S`` of clients whose masked input arrived."""

    TAG: ClassVar[int] = 7
    STAGE: ClassVar[str] = "consistency"
    session: bytes
    receiver: int
    n: int
    survivors: tuple[int, ...]

    def to_bytes(self) -> bytes:
        """Serialize (``S`` as an ``n``-bit bitmap)."""
        if any(not 0 <= s < self.n for s in self.survivors):
            raise DataError("survivor outside [0, n)")
        w = _Writer(self.TAG, self.session)
        w.u32(self.receiver)
        w.u32(self.n)
        w.parts.append(_pack_set(self.n, self.survivors))
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> SurvivorSet:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        receiver, n = r.u32(), r.u32()
        size = (n + 7) // 8
        if size != r.left():
            raise DataError("survivor bitmap has the wrong length")
        bits = np.unpackbits(np.frombuffer(r.take(size), dtype=np.uint8), bitorder="little")
        if bits[n:].any():
            raise DataError("survivor bitmap has bits beyond n")
        return cls(r.session, receiver, n, tuple(int(v) for v in np.flatnonzero(bits[:n])))


@dataclass(frozen=True)
class ConsistencySignature:
    """Client -> server, stage ``consistency``: the client's signature on :func:`survivor_statement`."""

    TAG: ClassVar[int] = 8
    STAGE: ClassVar[str] = "consistency"
    session: bytes
    sender: int
    signature: bytes

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = _Writer(self.TAG, self.session)
        w.u32(self.sender)
        w.fixed(self.signature, SIGNATURE_BYTES)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> ConsistencySignature:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        out = cls(r.session, r.u32(), r.fixed(SIGNATURE_BYTES))
        r.done()
        return out


@dataclass(frozen=True)
class UnmaskRequest:
    """Server -> client, stage ``unmask``.

    Malicious model: ``signatures`` holds the consistency signatures (signer -> 64 bytes) of the clients
    sharing a neighbour with the receiver; the client decides from its signed ``S`` which shares to reveal
    and ignores nothing else. Semi-honest models: ``survivors`` / ``dropped`` name the neighbours whose
    seed shares / key shares the server wants.
    """

    TAG: ClassVar[int] = 9
    STAGE: ClassVar[str] = "unmask"
    session: bytes
    receiver: int
    survivors: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()
    signatures: dict[int, bytes] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = _Writer(self.TAG, self.session)
        w.u32(self.receiver)
        w.ids(self.survivors)
        w.ids(self.dropped)
        w.u32(len(self.signatures))
        for idx in sorted(self.signatures):
            w.u32(idx)
            w.fixed(self.signatures[idx], SIGNATURE_BYTES)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> UnmaskRequest:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        receiver = r.u32()
        survivors, dropped = r.ids(), r.ids()
        sigs: dict[int, bytes] = {}
        for _ in range(r.count(4 + SIGNATURE_BYTES)):
            idx = r.u32()
            if idx in sigs:
                raise DataError(f"two signatures of client {idx}")
            sigs[idx] = r.fixed(SIGNATURE_BYTES)
        r.done()
        return cls(r.session, receiver, survivors, dropped, sigs)


def _write_shares(w: _Writer, shares: dict[int, int]) -> None:
    w.u32(len(shares))
    for idx in sorted(shares):
        w.u32(idx)
        w.fixed(shares[idx].to_bytes(SHARE_BYTES, "little"), SHARE_BYTES)


def _read_shares(r: _Reader) -> dict[int, int]:
    out: dict[int, int] = {}
    for _ in range(r.count(4 + SHARE_BYTES)):
        idx = r.u32()
        if idx in out:
            raise DataError(f"two shares of client {idx}")
        out[idx] = int.from_bytes(r.fixed(SHARE_BYTES), "little")
    return out


@dataclass(frozen=True)
class UnmaskResponse(_Signed):
    """Client -> server, stage ``unmask``: Shamir shares of survivors' seeds and dropouts' keys, signed.

    Share values are 66-byte little-endian integers; the server checks that they are field elements.
    """

    TAG: ClassVar[int] = 10
    STAGE: ClassVar[str] = "unmask"
    session: bytes
    sender: int
    seed_shares: dict[int, int] = field(default_factory=dict)
    key_shares: dict[int, int] = field(default_factory=dict)
    signature: bytes = b""

    def _unsigned(self) -> _Writer:
        w = _Writer(self.TAG, self.session)
        w.u32(self.sender)
        _write_shares(w, self.seed_shares)
        _write_shares(w, self.key_shares)
        return w

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = self._unsigned()
        w.signature(self.signature)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> UnmaskResponse:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        sender = r.u32()
        seeds = _read_shares(r)
        keys = _read_shares(r)
        sig = r.signature()
        r.done()
        return cls(r.session, sender, seeds, keys, sig)


Message: TypeAlias = (
    SetupMessage
    | AdvertiseKeys
    | KeyBroadcast
    | EncryptedShares
    | ShareBroadcast
    | MaskedInput
    | SurvivorSet
    | ConsistencySignature
    | UnmaskRequest
    | UnmaskResponse
)

_TYPES: dict[int, type[Message]] = {
    cls.TAG: cls
    for cls in (
        SetupMessage,
        AdvertiseKeys,
        KeyBroadcast,
        EncryptedShares,
        ShareBroadcast,
        MaskedInput,
        SurvivorSet,
        ConsistencySignature,
        UnmaskRequest,
        UnmaskResponse,
    )
}


def max_message_bytes(cls: type[Message], *, n: int, k: int, length: int, bits: int) -> int:
    """Largest valid serialization of a message of type ``cls`` in a session (the size limit).

    Parameters
    ----------
    cls : type
        One of the message classes.
    n, k, length, bits : int
        The session's clients, graph degree, vector length and modulus width.

    Returns
    -------
    int
        Bytes; receivers refuse longer messages before parsing them.
    """
    h, sig = HEADER_BYTES + 16, SIGNATURE_BYTES + 1
    if cls is SetupMessage:
        return h + 7 * 4 + 1 + 4 + 4 * k + 4 + 4 + 1 + 64 + 32 + 4 + 32 * n + SIGNATURE_BYTES
    if cls is AdvertiseKeys:
        return h + 4 + 64 + sig
    if cls is KeyBroadcast:
        return h + 4 + 32 + 4 + k * (4 + 64 + sig)
    if cls is EncryptedShares:
        return h + 4 + 32 + 4 + k * (4 + CIPHERTEXT_BYTES) + sig
    if cls is ShareBroadcast:
        return h + 4 + 4 + k * (4 + CIPHERTEXT_BYTES)
    if cls is MaskedInput:
        return h + 12 + length * (bits // 8) + sig
    if cls is SurvivorSet:
        return h + 8 + (n + 7) // 8
    if cls is ConsistencySignature:
        return h + 4 + SIGNATURE_BYTES
    if cls is UnmaskRequest:
        return h + 4 + 2 * (4 + 4 * k) + 4 + n * (4 + SIGNATURE_BYTES)
    if cls is UnmaskResponse:
        return h + 4 + 2 * (4 + k * (4 + SHARE_BYTES)) + sig
    raise DataError(f"not a message class: {cls!r}")


def decode(
    data: bytes, *, expect: type[Message] | None = None, max_bytes: int | None = None
) -> Message:
    """Turn bytes from :meth:`to_bytes` back into the message dataclass.

    Parameters
    ----------
    data : bytes
    expect : type, optional
        Refuse any other message type (checked on the tag, before parsing).
    max_bytes : int, optional
        Refuse longer messages before parsing.

    Raises
    ------
    DataError
        If the bytes are not a well-formed message of the expected type and size.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise DataError(
            f"secure-aggregation message of {len(data)} bytes exceeds the limit {max_bytes}"
        )
    if len(data) < HEADER_BYTES or data[:4] != _MAGIC or data[5] not in _TYPES:
        raise DataError("not a fedstats secure-aggregation message")
    cls = _TYPES[data[5]]
    if expect is not None and cls is not expect:
        raise DataError(f"expected a {expect.__name__} message, got {cls.__name__}")
    return cls.from_bytes(data)
