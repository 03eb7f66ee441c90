"""Field codecs of the secure-aggregation wire format (the helpers of :mod:`fedstats.secagg.messages`).

A message's fields follow its header one after another. Each field's type is annotated with a
:class:`Codec` that appends the field to a list of byte strings and reads it back from a :class:`Reader`,
which checks every length and count against the bytes left before anything is allocated. Integers are
little-endian; keys, shares, signatures and ciphertexts have fixed sizes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, get_type_hints

import numpy as np

from fedstats.errors import DataError
from fedstats.secagg.identity import SIGNATURE_BYTES

__all__ = [
    "BLOB",
    "IDS",
    "SIG",
    "U32",
    "Codec",
    "Reader",
    "fixed",
    "layout",
    "put_u32",
    "row",
    "table",
]


class Reader:
    """The bytes of a message after its header, read from the front; each read is checked.

    ``in_order`` stays True while every table read had its indices in increasing order: the message's
    bytes are then exactly what serializing the parsed message gives (tables are written in index order,
    every other field has one encoding).
    """

    def __init__(self, view: memoryview) -> None:
        self.view = view
        self.pos = 0
        self.in_order = True

    def left(self) -> int:
        """Bytes not read yet."""
        return len(self.view) - self.pos

    def take(self, size: int) -> memoryview:
        """The next ``size`` bytes (a view, not a copy)."""
        if size < 0 or self.pos + size > len(self.view):
            raise DataError("truncated secure-aggregation message")
        out = self.view[self.pos : self.pos + size]
        self.pos += size
        return out

    def u32(self) -> int:
        """The next little-endian 32-bit unsigned integer."""
        return int(struct.unpack("<I", self.take(4))[0])

    def fixed(self, size: int) -> bytes:
        """The next ``size`` bytes, copied."""
        return bytes(self.take(size))

    def count(self, entry_bytes: int) -> int:
        """A count whose entries (``entry_bytes`` each, at least) must fit in the bytes left."""
        c = self.u32()
        if c * entry_bytes > self.left():
            raise DataError("secure-aggregation message announces more entries than it holds")
        return c

    def done(self) -> None:
        """Refuse bytes left over after the last field."""
        if self.pos != len(self.view):
            raise DataError("trailing bytes after a secure-aggregation message")


@dataclass(frozen=True)
class Codec:
    """How one field travels.

    ``write(parts, value, message)`` appends it, ``read(reader, fields read so far)`` parses it; ``size``
    is the fewest bytes a value takes (a count of entries is checked against it before anything is
    allocated).
    """

    size: int
    write: Callable[[list[bytes], Any, Any], None]
    read: Callable[[Reader, dict[str, Any]], Any]


def put_u32(parts: list[bytes], v: int) -> None:
    """Append a little-endian 32-bit unsigned integer."""
    parts.append(struct.pack("<I", v))


def _put_fixed(parts: list[bytes], b: bytes, size: int) -> None:
    if len(b) != size:
        raise DataError(f"field must be {size} bytes, got {len(b)}")
    parts.append(bytes(b))


def _put_signature(parts: list[bytes], sig: bytes, _: object) -> None:
    if len(sig) not in (0, SIGNATURE_BYTES):
        raise DataError(f"a signature is 0 or {SIGNATURE_BYTES} bytes, got {len(sig)}")
    parts += [bytes([len(sig)]), bytes(sig)]


def _read_signature(r: Reader, _: object) -> bytes:
    size = r.take(1)[0]
    if size not in (0, SIGNATURE_BYTES):
        raise DataError("malformed signature field")
    return r.fixed(size)


def _put_ids(parts: list[bytes], values: tuple[int, ...], _: object) -> None:
    put_u32(parts, len(values))
    parts.append(np.asarray(values, dtype="<u4").tobytes())


def _read_ids(r: Reader, _: object) -> tuple[int, ...]:
    c = r.count(4)
    return tuple(int(v) for v in np.frombuffer(r.take(4 * c), dtype="<u4"))


def _put_blob(parts: list[bytes], b: bytes, _: object) -> None:
    put_u32(parts, len(b))
    parts.append(bytes(b))


def fixed(size: int) -> Codec:
    """Exactly ``size`` bytes (a key, a share, a ciphertext)."""
    return Codec(size, lambda p, v, _: _put_fixed(p, v, size), lambda r, _: r.fixed(size))


def row(*codecs: Codec) -> Codec:
    """A tuple, its items one after another."""

    def write(parts: list[bytes], values: tuple[Any, ...], msg: object) -> None:
        for codec, v in zip(codecs, values, strict=True):
            codec.write(parts, v, msg)

    return Codec(
        sum(c.size for c in codecs), write, lambda r, f: tuple(c.read(r, f) for c in codecs)
    )


def table(value: Codec, duplicate: str) -> Codec:
    """``{client index: value}``: a count, then (index, value) entries in index order.

    ``duplicate`` is the error, formatted with the index, when an index repeats.
    """

    def write(parts: list[bytes], entries: dict[int, Any], msg: object) -> None:
        put_u32(parts, len(entries))
        for idx in sorted(entries):
            put_u32(parts, idx)
            value.write(parts, entries[idx], msg)

    def read(r: Reader, fields_read: dict[str, Any]) -> dict[int, Any]:
        out: dict[int, Any] = {}
        last = -1
        for _ in range(r.count(4 + value.size)):
            idx = r.u32()
            if idx in out:
                raise DataError(duplicate.format(idx))
            if idx < last:
                r.in_order = False
            last = idx
            out[idx] = value.read(r, fields_read)
        return out

    return Codec(4, write, read)


U32 = Codec(4, lambda p, v, _: put_u32(p, v), lambda r, _: r.u32())
"""A 32-bit unsigned integer."""
SIG = Codec(1, _put_signature, _read_signature)
"""A client's signature, or none: a length byte (0 or 64), then the signature."""
IDS = Codec(4, _put_ids, _read_ids)
"""A tuple of client indices: a count, then 32-bit integers."""
BLOB = Codec(4, _put_blob, lambda r, _: r.fixed(r.u32()))
"""Bytes of any length: the length, then the bytes."""


_LAYOUTS: dict[type, tuple[tuple[str, Codec], ...]] = {}


def layout(cls: type) -> tuple[tuple[str, Codec], ...]:
    """The fields of a message dataclass with the codec of each, in order.

    The first field (the session id, in the header) is left out; each other is annotated with its codec,
    ``Annotated[int, U32]``.
    """
    if cls not in _LAYOUTS:
        hints = get_type_hints(cls, include_extras=True)
        _LAYOUTS[cls] = tuple((f.name, hints[f.name].__metadata__[0]) for f in fields(cls)[1:])
    return _LAYOUTS[cls]
