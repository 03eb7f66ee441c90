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

import functools
import hashlib
import operator
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Self, TypeAlias, get_args

import numpy as np

from fedstats.errors import DataError
from fedstats.secagg._wire import (
    BLOB,
    IDS,
    SIG,
    U32,
    Codec,
    Reader,
    fixed,
    layout,
    put_u32,
    row,
    table,
)
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
    "decode_signed",
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


def _read_threat(r: Reader, _: object) -> str:
    code = r.take(1)[0]
    models = {v: k for k, v in THREAT_CODES.items()}
    if code not in models:
        raise DataError(f"unknown threat model code {code}")
    return models[code]


def _check_width(bits: int) -> int:
    if bits not in DTYPES:
        raise DataError(f"masked input has unsupported width {bits}")
    return bits


def _put_vector(parts: list[bytes], values: np.ndarray, msg: Any) -> None:
    """The vector's size, then its values at the width ``msg.bits`` (one part, the last one)."""
    put_u32(parts, int(values.size))
    arr = np.ascontiguousarray(values, dtype=f"<u{msg.bits // 8}")
    parts.append(memoryview(arr).cast("B"))  # type: ignore[arg-type]


def _read_vector(r: Reader, fields_read: dict[str, Any]) -> np.ndarray:
    width = fields_read["bits"] // 8
    size = r.count(width)
    return np.frombuffer(r.take(size * width), dtype=f"<u{width}")


@functools.lru_cache(maxsize=4)
def _pack_set(n: int, members: tuple[int, ...]) -> bytes:
    # cached: the server sends one set to every survivor, and they all sign its statement
    bits = np.zeros(n, dtype=bool)
    bits[np.asarray(members, dtype=np.int64)] = True
    return np.packbits(bits, bitorder="little").tobytes()


@functools.lru_cache(maxsize=4)
def _checked_set(n: int, members: tuple[int, ...]) -> bytes:
    idx = np.asarray(members, dtype=np.int64).reshape(-1)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise DataError("survivor outside [0, n)")
    return _pack_set(n, members)


def _put_bitmap(parts: list[bytes], members: tuple[int, ...], msg: Any) -> None:
    # numpy, not a Python loop: every client of a session receives the n-client set (one bitmap for
    # all of them: the same tuple, cached)
    parts.append(_checked_set(msg.n, members))


def _read_bitmap(r: Reader, fields_read: dict[str, Any]) -> tuple[int, ...]:
    n = fields_read["n"]
    size = (n + 7) // 8
    if size != r.left():
        raise DataError("survivor bitmap has the wrong length")
    bits = np.unpackbits(np.frombuffer(r.take(size), dtype=np.uint8), bitorder="little")
    if bits[n:].any():
        raise DataError("survivor bitmap has bits beyond n")
    return tuple(np.flatnonzero(bits[:n]).tolist())


_KEY = fixed(32)
_SIGNATURE = fixed(SIGNATURE_BYTES)
_THREAT = Codec(1, lambda p, v, _: p.append(bytes([THREAT_CODES[v]])), _read_threat)
_WIDTH = Codec(4, lambda p, v, _: put_u32(p, _check_width(v)), lambda r, _: _check_width(r.u32()))
_VECTOR = Codec(4, _put_vector, _read_vector)
"""A vector mod 2^bits (``bits`` an earlier field): its size, then little-endian ``uint{bits}``."""
_BITMAP = Codec(0, _put_bitmap, _read_bitmap)
"""A set of clients as an ``n``-bit bitmap (``n`` an earlier field), filling the rest of the message."""
_SHARE = Codec(
    SHARE_BYTES,
    lambda p, v, _: p.append(v.to_bytes(SHARE_BYTES, "little")),
    lambda r, _: int.from_bytes(r.fixed(SHARE_BYTES), "little"),
)
"""A Shamir share value: a 66-byte little-endian integer."""


def _duplicate(indices: list[int], duplicate: str) -> DataError:
    seen: set[int] = set()
    for idx in indices:
        if idx in seen:
            break
        seen.add(idx)
    return DataError(duplicate.format(idx))


def _note_order(r: Reader, indices: list[int]) -> None:
    """Mark ``r`` out of order (:attr:`~fedstats.secagg._wire.Reader.in_order`) unless ``indices`` increase."""
    if any(map(operator.ge, indices, indices[1:])):
        r.in_order = False


def _bulk_table(
    size: int,
    duplicate: str,
    encode: Callable[[Any], bytes] | None = None,
    decode_value: Callable[[bytes], Any] | None = None,
) -> Codec:
    """:func:`~fedstats.secagg._wire.table` of ``size``-byte values, packed and parsed in bulk.

    The same bytes as ``table(fixed(size), duplicate)`` (a count, then ``(index, value)`` entries in
    index order), with one ``struct`` call per message instead of several Python calls per entry: these
    tables hold ``k`` ciphertexts, shares or signatures, or ``2k`` signatures, per message.
    ``encode``/``decode_value`` map a value to and from its ``size`` bytes (default: the bytes as they
    are, length checked).
    """
    entry = struct.Struct(f"<I{size}s")

    def write(parts: list[bytes], entries: dict[int, Any], _: object) -> None:
        values = entries if encode is None else {i: encode(v) for i, v in entries.items()}
        if not all(map(size.__eq__, map(len, values.values()))):
            raise DataError(f"field must be {size} bytes")
        put_u32(parts, len(values))
        pack = entry.pack
        parts.append(b"".join([pack(i, values[i]) for i in sorted(values)]))

    def read(r: Reader, _: dict[str, Any]) -> dict[int, Any]:
        count = r.count(entry.size)
        pairs = list(entry.iter_unpack(r.take(count * entry.size)))
        out = dict(pairs)
        if len(out) != count:
            raise _duplicate([i for i, _ in pairs], duplicate)
        _note_order(r, list(out))
        if decode_value is not None:
            return {i: decode_value(v) for i, v in out.items()}
        return out

    return Codec(4, write, read)


def _keys_table(duplicate: str) -> Codec:
    """``{index: (mask key, encryption key, signature)}``: ``table(row(_KEY, _KEY, SIG))``, in bulk.

    Every signature of one table has the same length in practice (all 64 bytes in the malicious model,
    none otherwise): such a table is parsed in one ``struct`` call; a mixed one by the generic codec.
    """
    generic = table(row(_KEY, _KEY, SIG), duplicate)
    layouts = {n: struct.Struct(f"<I32s32sB{n}s") for n in (0, SIGNATURE_BYTES)}

    def write(parts: list[bytes], entries: dict[int, tuple[bytes, bytes, bytes]], m: Any) -> None:
        shapes = {(len(a), len(b), len(sig)) for a, b, sig in entries.values()}
        shape = shapes.pop() if len(shapes) == 1 else None
        if shape is None or shape[:2] != (32, 32) or shape[2] not in layouts:
            generic.write(parts, entries, m)  # raises the precise error, or writes a mixed table
            return
        size = shape[2]
        pack = layouts[size].pack
        put_u32(parts, len(entries))
        parts.append(
            b"".join([pack(i, a, b, size, sig) for i, (a, b, sig) in sorted(entries.items())])
        )

    def read(r: Reader, fields_read: dict[str, Any]) -> dict[int, tuple[bytes, bytes, bytes]]:
        start = r.pos
        count = r.count(4 + 32 + 32 + 1)
        if count:
            first = r.take(4 + 64 + 1)[-1]
            lay = layouts.get(first)
            r.pos -= 4 + 64 + 1
            if lay is not None and count * lay.size <= r.left():
                rows = list(lay.iter_unpack(r.view[r.pos : r.pos + count * lay.size]))
                if all(row_[3] == first for row_ in rows):
                    r.pos += count * lay.size
                    out = {i: (a, b, sig) for i, a, b, _, sig in rows}
                    if len(out) != count:
                        raise _duplicate([row_[0] for row_ in rows], duplicate)
                    _note_order(r, list(out))
                    return out
        r.pos = start
        result: dict[int, tuple[bytes, bytes, bytes]] = generic.read(r, fields_read)
        return result

    return Codec(4, write, read)


_KEYS = _keys_table("client {} listed twice")
_CIPHERTEXTS = _bulk_table(CIPHERTEXT_BYTES, "two ciphertexts for client {}")
_SIGNATURES = _bulk_table(SIGNATURE_BYTES, "two signatures of client {}")
_SHARES = _bulk_table(
    SHARE_BYTES,
    "two shares of client {}",
    lambda v: int(v).to_bytes(SHARE_BYTES, "little"),
    lambda b: int.from_bytes(b, "little"),
)


@dataclass(frozen=True, eq=False)
class _Message:
    """A message: its header (magic, :data:`VERSION`, ``TAG``, ``session``), then its fields.

    Each field after ``session`` travels by the codec its type is annotated with, in order.
    """

    TAG: ClassVar[int]
    STAGE: ClassVar[str]
    session: bytes

    def _parts(self, fields: tuple[tuple[str, Codec], ...]) -> list[bytes]:
        if len(self.session) != 32:
            raise DataError(f"session id must be 32 bytes, got {len(self.session)}")
        parts = [_MAGIC, bytes([VERSION, self.TAG]), bytes(self.session)]
        for name, codec in fields:
            codec.write(parts, getattr(self, name), self)
        return parts

    def to_bytes(self) -> bytes:
        """Serialize."""
        return b"".join(self._parts(layout(type(self))))

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        """Deserialize; raises DataError on malformed input."""
        return cls._parse(data)[0]

    @classmethod
    def _parse(cls, data: bytes) -> tuple[Self, bool]:
        """The message, and whether ``data`` is exactly its serialization (its tables in index order)."""
        view = memoryview(data)
        if len(data) < HEADER_BYTES or bytes(view[:4]) != _MAGIC or data[5] != cls.TAG:
            raise DataError("not a fedstats secure-aggregation message of the expected stage")
        if data[4] != VERSION:
            raise DataError(f"secure-aggregation protocol version {data[4]}, expected {VERSION}")
        r = Reader(view[HEADER_BYTES:])
        values: dict[str, Any] = {}
        for name, codec in layout(cls):
            values[name] = codec.read(r, values)
        r.done()
        make: Callable[..., Self] = cls
        return make(bytes(view[6:HEADER_BYTES]), **values), r.in_order


class _Signed(_Message):
    """Client-to-server messages, whose last field is ``signature`` (:data:`SIG`)."""

    signature: bytes

    def signed_bytes(self) -> bytes:
        """Header and fields without the signature: the bytes covered by the signature."""
        return b"".join(self._parts(layout(type(self))[:-1]))


@dataclass(frozen=True)
class SetupMessage(_Message):
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
    client: Annotated[int, U32]
    n: Annotated[int, U32]
    k: Annotated[int, U32]
    t: Annotated[int, U32]
    bits: Annotated[int, U32]
    length: Annotated[int, U32]
    min_survivors: Annotated[int, U32]
    threat_model: Annotated[str, _THREAT]
    neighbors: Annotated[tuple[int, ...], IDS] = ()
    roster: Annotated[bytes, BLOB] = b""


@dataclass(frozen=True)
class AdvertiseKeys(_Signed):
    """Client -> server, stage ``advertise_keys``: mask-agreement and encryption X25519 public keys.

    In the malicious model ``signature`` is the client's identity signature over (version, stage,
    session, index, both keys); the server forwards it to the neighbours, who verify it before sharing.
    """

    TAG: ClassVar[int] = 2
    STAGE: ClassVar[str] = "advertise_keys"
    client: Annotated[int, U32]
    mask_public: Annotated[bytes, _KEY]
    encryption_public: Annotated[bytes, _KEY]
    signature: Annotated[bytes, SIG] = b""


@dataclass(frozen=True)
class KeyBroadcast(_Message):
    """Server -> client, stage ``share_keys``: the neighbours' key advertisements.

    ``keys`` maps neighbour index -> (mask public key, encryption public key, its signature). ``transcript``
    is the 32-byte HKDF salt of the session's keys (semi-honest models: chosen by the server; malicious:
    the client recomputes it from the roster and refuses a different one).
    """

    TAG: ClassVar[int] = 3
    STAGE: ClassVar[str] = "share_keys"
    receiver: Annotated[int, U32]
    transcript: Annotated[bytes, _KEY]
    keys: Annotated[dict[int, tuple[bytes, bytes, bytes]], _KEYS] = field(default_factory=dict)


@dataclass(frozen=True)
class EncryptedShares(_Signed):
    """Client -> server, stage ``share_keys``: seed commitment and one ciphertext per live neighbour."""

    TAG: ClassVar[int] = 4
    STAGE: ClassVar[str] = "share_keys"
    sender: Annotated[int, U32]
    seed_commitment: Annotated[bytes, _KEY]
    ciphertexts: Annotated[dict[int, bytes], _CIPHERTEXTS] = field(default_factory=dict)
    signature: Annotated[bytes, SIG] = b""


@dataclass(frozen=True)
class ShareBroadcast(_Message):
    """Server -> client, stage ``masked_input``: the ciphertexts addressed to ``receiver``, by sender."""

    TAG: ClassVar[int] = 5
    STAGE: ClassVar[str] = "masked_input"
    receiver: Annotated[int, U32]
    ciphertexts: Annotated[dict[int, bytes], _CIPHERTEXTS] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class MaskedInput(_Signed):
    """Client -> server, stage ``masked_input``: ``y_i`` mod 2^bits at the modulus width, signed.

    On the wire the values are little-endian ``uint{bits}``; :meth:`from_bytes` gives a zero-copy view.
    """

    TAG: ClassVar[int] = 6
    STAGE: ClassVar[str] = "masked_input"
    sender: Annotated[int, U32]
    bits: Annotated[int, _WIDTH]
    values: Annotated[np.ndarray, _VECTOR]
    signature: Annotated[bytes, SIG] = b""

    def signed_bytes(self) -> bytes:
        """Header and fields with the vector replaced by its SHA-256 (what the identity key signs).

        Ed25519 hashes its message twice when signing; signing a 32-byte digest of a long vector
        instead keeps the cost at one SHA-256 pass (collision resistance makes it as binding).
        """
        parts = self._parts(layout(type(self))[:-1])
        parts.append(hashlib.sha256(parts.pop()).digest())
        return b"".join(parts)


def survivor_statement(session: bytes, n: int, survivors: tuple[int, ...]) -> bytes:
    """The bytes a client signs in the consistency check: label, session id, n and the set as a bitmap."""
    return _STATEMENT_LABEL + bytes(session) + struct.pack("<I", n) + _pack_set(n, survivors)


@dataclass(frozen=True)
class SurvivorSet(_Message):
    """Server -> client, stage ``consistency``: the set ``S`` of clients whose masked input arrived.

    On the wire ``S`` is an ``n``-bit bitmap.
    """

    TAG: ClassVar[int] = 7
    STAGE: ClassVar[str] = "consistency"
    receiver: Annotated[int, U32]
    n: Annotated[int, U32]
    survivors: Annotated[tuple[int, ...], _BITMAP]


@dataclass(frozen=True)
class ConsistencySignature(_Message):
    """Client -> server, stage ``consistency``: the client's signature on :func:`survivor_statement`."""

    TAG: ClassVar[int] = 8
    STAGE: ClassVar[str] = "consistency"
    sender: Annotated[int, U32]
    signature: Annotated[bytes, _SIGNATURE]


@dataclass(frozen=True)
class UnmaskRequest(_Message):
    """Server -> client, stage ``unmask``.

    Malicious model: ``signatures`` holds the consistency signatures (signer -> 64 bytes) of the clients
    sharing a neighbour with the receiver; the client decides from its signed ``S`` which shares to reveal
    and ignores nothing else. Semi-honest models: ``survivors`` / ``dropped`` name the neighbours whose
    seed shares / key shares the server wants.
    """

    TAG: ClassVar[int] = 9
    STAGE: ClassVar[str] = "unmask"
    receiver: Annotated[int, U32]
    survivors: Annotated[tuple[int, ...], IDS] = ()
    dropped: Annotated[tuple[int, ...], IDS] = ()
    signatures: Annotated[dict[int, bytes], _SIGNATURES] = field(default_factory=dict)


@dataclass(frozen=True)
class UnmaskResponse(_Signed):
    """Client -> server, stage ``unmask``: Shamir shares of survivors' seeds and dropouts' keys, signed.

    Share values are 66-byte little-endian integers; the server checks that they are field elements.
    """

    TAG: ClassVar[int] = 10
    STAGE: ClassVar[str] = "unmask"
    sender: Annotated[int, U32]
    seed_shares: Annotated[dict[int, int], _SHARES] = field(default_factory=dict)
    key_shares: Annotated[dict[int, int], _SHARES] = field(default_factory=dict)
    signature: Annotated[bytes, SIG] = b""


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

_TYPES: dict[int, type[Message]] = {cls.TAG: cls for cls in get_args(Message)}


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
        # a listed roster holds 32 bytes per client; a bound one a binding and 4 + 32 per held key
        roster = max(4 + 32 * n, 4 + 32 + 4 + 36 * n) + SIGNATURE_BYTES
        return h + 7 * 4 + 1 + 4 + 4 * k + 4 + 4 + 1 + 64 + 32 + roster
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
    return _class_of(data, expect, max_bytes).from_bytes(data)


def _class_of(data: bytes, expect: type[Message] | None, max_bytes: int | None) -> type[Message]:
    if max_bytes is not None and len(data) > max_bytes:
        raise DataError(
            f"secure-aggregation message of {len(data)} bytes exceeds the limit {max_bytes}"
        )
    if len(data) < HEADER_BYTES or data[:4] != _MAGIC or data[5] not in _TYPES:
        raise DataError("not a fedstats secure-aggregation message")
    cls = _TYPES[data[5]]
    if expect is not None and cls is not expect:
        raise DataError(f"expected a {expect.__name__} message, got {cls.__name__}")
    return cls


def decode_signed(
    data: bytes, *, expect: type[Message] | None = None, max_bytes: int | None = None
) -> tuple[Message, bytes | None]:
    """:func:`decode`, and the bytes the message's signature covers when they can be cut from ``data``.

    When ``data`` is exactly the serialization of the message it parses to (its tables in index order:
    every other field has one encoding), a signed client message's ``signed_bytes()`` is ``data``
    without the trailing signature field: returned as such, instead of serializing the message again.
    The second item is None for a :class:`MaskedInput` (it signs a digest of its vector), for messages
    without a signature field, and for tables out of order: then call ``signed_bytes()``.

    Raises
    ------
    DataError
        As :func:`decode`.
    """
    cls = _class_of(data, expect, max_bytes)
    msg, in_order = cls._parse(data)
    if not in_order or cls is MaskedInput or not isinstance(msg, _Signed):
        return msg, None
    return msg, bytes(memoryview(data)[: len(data) - 1 - len(msg.signature)])
