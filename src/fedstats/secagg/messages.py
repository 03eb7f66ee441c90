"""Messages of the secure-aggregation protocol: plain dataclasses that serialize to bytes.

Every message is independent of any transport: ``msg.to_bytes()`` gives a self-describing byte string
(a 4-byte magic, a 1-byte type tag, then little-endian fields) and :func:`decode` turns it back into the
dataclass. Messages flow as in Bell et al. 2020, Alg. 2 (Alg. 4 of Pang et al. 2023):

=====================  ================  ==============================================================
message                direction         content
=====================  ================  ==============================================================
``SetupMessage``       server -> client  round id, parameters, the client's neighbours (step 1)
``AdvertiseKeys``      client -> server  two X25519 public keys (step 2)
``KeyBroadcast``       server -> client  session id, neighbours' public keys (step 2)
``EncryptedShares``    client -> server  seed commitment, one AEAD ciphertext per neighbour (step 3)
``ShareBroadcast``     server -> client  ciphertexts addressed to the client (step 4)
``MaskedInput``        client -> server  masked vector mod 2^b, at the modulus width (step 5)
``UnmaskRequest``      server -> client  surviving and dropped neighbours (step 6)
``UnmaskResponse``     client -> server  seed shares of survivors, key shares of dropouts (step 7)
=====================  ================  ==============================================================
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar, TypeAlias

import numpy as np

from fedstats.errors import DataError
from fedstats.secagg.crypto import DTYPES
from fedstats.secagg.shamir import SHARE_BYTES

__all__ = [
    "AdvertiseKeys",
    "EncryptedShares",
    "KeyBroadcast",
    "MaskedInput",
    "Message",
    "SetupMessage",
    "ShareBroadcast",
    "UnmaskRequest",
    "UnmaskResponse",
    "decode",
]

_MAGIC = b"FSA1"


class _Writer:
    def __init__(self, tag: int) -> None:
        self.parts: list[bytes] = [_MAGIC, bytes([tag])]

    def u32(self, v: int) -> None:
        self.parts.append(struct.pack("<I", v))

    def blob(self, b: bytes) -> None:
        self.parts.append(struct.pack("<I", len(b)))
        self.parts.append(bytes(b))

    def fixed(self, b: bytes, size: int) -> None:
        if len(b) != size:
            raise DataError(f"field must be {size} bytes, got {len(b)}")
        self.parts.append(bytes(b))

    def ids(self, values: tuple[int, ...]) -> None:
        self.u32(len(values))
        self.parts.append(np.asarray(values, dtype="<u4").tobytes())

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes, tag: int) -> None:
        self.view = memoryview(data)
        self.pos = 5
        if bytes(self.view[:4]) != _MAGIC or len(data) < 5 or data[4] != tag:
            raise DataError("not a fedstats secure-aggregation message of the expected type")

    def take(self, size: int) -> memoryview:
        if self.pos + size > len(self.view):
            raise DataError("truncated secure-aggregation message")
        out = self.view[self.pos : self.pos + size]
        self.pos += size
        return out

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def blob(self) -> bytes:
        return bytes(self.take(self.u32()))

    def fixed(self, size: int) -> bytes:
        return bytes(self.take(size))

    def ids(self) -> tuple[int, ...]:
        count = self.u32()
        return tuple(int(v) for v in np.frombuffer(self.take(4 * count), dtype="<u4"))

    def done(self) -> None:
        if self.pos != len(self.view):
            raise DataError("trailing bytes after a secure-aggregation message")


@dataclass(frozen=True)
class SetupMessage:
    """Server -> client: session parameters and the client's neighbours in the graph (step 1)."""

    TAG: ClassVar[int] = 1
    round_id: bytes
    client: int
    n: int
    k: int
    t: int
    bits: int
    length: int
    neighbors: tuple[int, ...]

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = _Writer(self.TAG)
        w.blob(self.round_id)
        for v in (self.client, self.n, self.k, self.t, self.bits, self.length):
            w.u32(v)
        w.ids(self.neighbors)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> SetupMessage:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        round_id = r.blob()
        client, n, k, t, bits, length = (r.u32() for _ in range(6))
        neighbors = r.ids()
        r.done()
        return cls(round_id, client, n, k, t, bits, length, neighbors)


@dataclass(frozen=True)
class AdvertiseKeys:
    """Client -> server: the mask-agreement and encryption public keys (32 bytes each, step 2)."""

    TAG: ClassVar[int] = 2
    client: int
    mask_public: bytes
    encryption_public: bytes

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = _Writer(self.TAG)
        w.u32(self.client)
        w.fixed(self.mask_public, 32)
        w.fixed(self.encryption_public, 32)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> AdvertiseKeys:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        out = cls(r.u32(), r.fixed(32), r.fixed(32))
        r.done()
        return out


@dataclass(frozen=True)
class KeyBroadcast:
    """Server -> client: session id and the public keys of the neighbours that advertised (step 2)."""

    TAG: ClassVar[int] = 3
    session: bytes
    keys: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = _Writer(self.TAG)
        w.fixed(self.session, 32)
        w.u32(len(self.keys))
        for idx in sorted(self.keys):
            c_pk, s_pk = self.keys[idx]
            w.u32(idx)
            w.fixed(c_pk, 32)
            w.fixed(s_pk, 32)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyBroadcast:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        session = r.fixed(32)
        keys = {}
        for _ in range(r.u32()):
            idx = r.u32()
            keys[idx] = (r.fixed(32), r.fixed(32))
        r.done()
        return cls(session, keys)


@dataclass(frozen=True)
class EncryptedShares:
    """Client -> server: commitment to the self-mask seed and one ciphertext per neighbour (step 3)."""

    TAG: ClassVar[int] = 4
    sender: int
    seed_commitment: bytes
    ciphertexts: dict[int, bytes] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = _Writer(self.TAG)
        w.u32(self.sender)
        w.fixed(self.seed_commitment, 32)
        w.u32(len(self.ciphertexts))
        for idx in sorted(self.ciphertexts):
            w.u32(idx)
            w.blob(self.ciphertexts[idx])
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> EncryptedShares:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        sender = r.u32()
        commitment = r.fixed(32)
        cts = {}
        for _ in range(r.u32()):
            idx = r.u32()
            cts[idx] = r.blob()
        r.done()
        return cls(sender, commitment, cts)


@dataclass(frozen=True)
class ShareBroadcast:
    """Server -> client: the ciphertexts addressed to ``receiver``, keyed by sender (step 4)."""

    TAG: ClassVar[int] = 5
    receiver: int
    ciphertexts: dict[int, bytes] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = _Writer(self.TAG)
        w.u32(self.receiver)
        w.u32(len(self.ciphertexts))
        for idx in sorted(self.ciphertexts):
            w.u32(idx)
            w.blob(self.ciphertexts[idx])
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> ShareBroadcast:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        receiver = r.u32()
        cts = {}
        for _ in range(r.u32()):
            idx = r.u32()
            cts[idx] = r.blob()
        r.done()
        return cls(receiver, cts)


@dataclass(frozen=True, eq=False)
class MaskedInput:
    """Client -> server: the masked vector ``y_i`` mod 2^bits, sent at the modulus width (step 5)."""

    TAG: ClassVar[int] = 6
    sender: int
    bits: int
    values: np.ndarray

    def to_bytes(self) -> bytes:
        """Serialize (values as little-endian ``uint{bits}``)."""
        w = _Writer(self.TAG)
        w.u32(self.sender)
        w.u32(self.bits)
        w.u32(int(self.values.size))
        arr = np.ascontiguousarray(self.values, dtype=f"<u{self.bits // 8}")
        return b"".join([*w.parts, memoryview(arr).cast("B")])  # type: ignore[arg-type]

    @classmethod
    def from_bytes(cls, data: bytes) -> MaskedInput:
        """Deserialize (zero-copy view of the vector); raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        sender, bits, size = r.u32(), r.u32(), r.u32()
        if bits not in DTYPES:
            raise DataError(f"masked input has unsupported width {bits}")
        values = np.frombuffer(r.take(size * (bits // 8)), dtype=f"<u{bits // 8}")
        r.done()
        return cls(sender, bits, values)


@dataclass(frozen=True)
class UnmaskRequest:
    """Server -> client: neighbours whose seed shares (survivors) or key shares (dropped) are wanted."""

    TAG: ClassVar[int] = 7
    survivors: tuple[int, ...]
    dropped: tuple[int, ...]

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = _Writer(self.TAG)
        w.ids(self.survivors)
        w.ids(self.dropped)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> UnmaskRequest:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        out = cls(r.ids(), r.ids())
        r.done()
        return out


def _write_shares(w: _Writer, shares: dict[int, int]) -> None:
    w.u32(len(shares))
    for idx in sorted(shares):
        w.u32(idx)
        w.fixed(shares[idx].to_bytes(SHARE_BYTES, "little"), SHARE_BYTES)


def _read_shares(r: _Reader) -> dict[int, int]:
    out = {}
    for _ in range(r.u32()):
        idx = r.u32()
        out[idx] = int.from_bytes(r.fixed(SHARE_BYTES), "little")
    return out


@dataclass(frozen=True)
class UnmaskResponse:
    """Client -> server: Shamir shares (field elements) of survivors' seeds and dropouts' keys (step 7)."""

    TAG: ClassVar[int] = 8
    sender: int
    seed_shares: dict[int, int] = field(default_factory=dict)
    key_shares: dict[int, int] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """Serialize."""
        w = _Writer(self.TAG)
        w.u32(self.sender)
        _write_shares(w, self.seed_shares)
        _write_shares(w, self.key_shares)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> UnmaskResponse:
        """Deserialize; raises DataError on malformed input."""
        r = _Reader(data, cls.TAG)
        sender = r.u32()
        seeds = _read_shares(r)
        keys = _read_shares(r)
        r.done()
        return cls(sender, seeds, keys)


Message: TypeAlias = (
    SetupMessage
    | AdvertiseKeys
    | KeyBroadcast
    | EncryptedShares
    | ShareBroadcast
    | MaskedInput
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
        UnmaskRequest,
        UnmaskResponse,
    )
}


def decode(data: bytes) -> Message:
    """Turn bytes from :meth:`to_bytes` back into the message dataclass.

    Raises
    ------
    DataError
        If the bytes are not a well-formed message.
    """
    if len(data) < 5 or data[:4] != _MAGIC or data[4] not in _TYPES:
        raise DataError("not a fedstats secure-aggregation message")
    return _TYPES[data[4]].from_bytes(data)
