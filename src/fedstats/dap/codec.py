"""TLS-style presentation-language codec (RFC 8446 §3) that DAP's messages are written in.

Integers are big-endian; ``opaque x<0..2^16-1>`` is a 2-byte length then the bytes; a vector of structures
carries the byte length of its encoded items, not their count. :class:`Reader` decodes strictly: reading
past the end, a length that overruns its buffer or bytes left over after the top-level message raise
:class:`~fedstats.errors.DataError` naming the message, never an ``IndexError`` or ``struct.error``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from functools import partial
from operator import attrgetter
from typing import Any, Self, TypeVar, get_type_hints

from fedstats.errors import DataError

__all__ = [
    "OPAQUE16",
    "OPAQUE32",
    "U8",
    "U16",
    "U64",
    "Field",
    "Message",
    "Reader",
    "Struct",
    "decode_all",
    "fixed",
    "fixed_bytes",
    "nested",
    "opaque16",
    "opaque32",
    "u8",
    "u16",
    "u32",
    "u64",
    "vec16",
    "vec32",
    "vector16",
    "vector32",
    "wrapped32",
]

T = TypeVar("T")


def u8(value: int) -> bytes:
    """Encode ``value`` in [0, 2^8) as one byte."""
    return value.to_bytes(1, "big")


def u16(value: int) -> bytes:
    """Encode ``value`` in [0, 2^16) as two big-endian bytes."""
    return value.to_bytes(2, "big")


def u32(value: int) -> bytes:
    """Encode ``value`` in [0, 2^32) as four big-endian bytes."""
    return value.to_bytes(4, "big")


def u64(value: int) -> bytes:
    """Encode ``value`` in [0, 2^64) as eight big-endian bytes."""
    return value.to_bytes(8, "big")


def opaque16(data: bytes) -> bytes:
    """Encode ``opaque data<0..2^16-1>``: a 2-byte length, then the bytes."""
    if len(data) >= 1 << 16:
        raise DataError(f"a 2-byte-length field holds at most 65535 bytes, got {len(data)}")
    return u16(len(data)) + data


def opaque32(data: bytes) -> bytes:
    """Encode ``opaque data<0..2^32-1>``: a 4-byte length, then the bytes."""
    if len(data) >= 1 << 32:
        raise DataError(f"a 4-byte-length field holds at most 2^32-1 bytes, got {len(data)}")
    return u32(len(data)) + data


def vec16(items: Iterable[bytes]) -> bytes:
    """Encode a vector of already-encoded items with a 2-byte total byte length."""
    return opaque16(b"".join(items))


def vec32(items: Iterable[bytes]) -> bytes:
    """Encode a vector of already-encoded items with a 4-byte total byte length."""
    return opaque32(b"".join(items))


class Reader:
    """A cursor over ``data`` that decodes strictly.

    Parameters
    ----------
    data : bytes
        The encoded message.
    what : str
        The message's name, used in error messages (``"Report"``).
    """

    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data = bytes(data)
        self.pos = 0
        self.what = what

    def take(self, n: int) -> bytes:
        """Return the next ``n`` bytes; raise DataError when fewer are left."""
        end = self.pos + n
        if end > len(self.data):
            raise DataError(
                f"{self.what}: truncated, needed {n} bytes at offset {self.pos}, {len(self.data) - self.pos} left"
            )
        out = self.data[self.pos : end]
        self.pos = end
        return out

    def u8(self) -> int:
        """Decode a 1-byte integer."""
        return self.take(1)[0]

    def u16(self) -> int:
        """Decode a 2-byte big-endian integer."""
        return int.from_bytes(self.take(2), "big")

    def u32(self) -> int:
        """Decode a 4-byte big-endian integer."""
        return int.from_bytes(self.take(4), "big")

    def u64(self) -> int:
        """Decode an 8-byte big-endian integer."""
        return int.from_bytes(self.take(8), "big")

    def opaque16(self) -> bytes:
        """Decode ``opaque<0..2^16-1>``."""
        return self.take(self.u16())

    def opaque32(self) -> bytes:
        """Decode ``opaque<0..2^32-1>``."""
        return self.take(self.u32())

    def vec16(self, item: Callable[[Reader], T]) -> list[T]:
        """Decode a vector with a 2-byte byte length whose items ``item`` decodes."""
        return self._items(self.opaque16(), item)

    def vec32(self, item: Callable[[Reader], T]) -> list[T]:
        """Decode a vector with a 4-byte byte length whose items ``item`` decodes."""
        return self._items(self.opaque32(), item)

    def _items(self, body: bytes, item: Callable[[Reader], T]) -> list[T]:
        sub = Reader(body, self.what)
        out = []
        while sub.pos < len(sub.data):
            out.append(item(sub))
        return out

    def done(self) -> None:
        """Raise DataError if bytes are left over."""
        if self.pos != len(self.data):
            raise DataError(
                f"{self.what}: {len(self.data) - self.pos} unexpected trailing bytes at offset {self.pos}"
            )


def decode_all(data: bytes, what: str, read: Callable[[Reader], T]) -> T:
    """Decode one ``what`` that must span all of ``data`` exactly.

    Raises
    ------
    DataError
        If ``data`` is truncated, overlong or malformed.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DataError(f"{what}: expected bytes, got {type(data).__name__}")
    r = Reader(bytes(data), what)
    value = read(r)
    r.done()
    return value


class Message(ABC):
    """A DAP message: a subclass defines ``encode()`` and ``read(reader)``; ``decode`` comes from here.

    ``decode(data)`` reads one message that spans ``data`` exactly (:func:`decode_all`, named after the
    class): a truncated, overlong or malformed message raises :class:`~fedstats.errors.DataError`.
    """

    @abstractmethod
    def encode(self) -> bytes:
        """Encode (each message defines it)."""

    @classmethod
    @abstractmethod
    def read(cls, r: Reader) -> Self:
        """Decode from a reader (each message defines it; a class without it cannot be made)."""

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Decode strictly (DataError on truncated, overlong or malformed input)."""
        return decode_all(data, cls.__name__, cls.read)


@dataclass(frozen=True)
class Field:
    """How one field of a :class:`Struct` travels.

    ``encoder(name)`` is the function that encodes the field called ``name`` (its errors name the field),
    ``take(reader)`` decodes it.
    """

    encoder: Callable[[str], Callable[[Any], bytes]]
    take: Callable[[Reader], Any]


def _plain(put: Callable[[Any], bytes], take: Callable[[Reader], Any]) -> Field:
    return Field(lambda _: put, take)


U8 = _plain(u8, Reader.u8)
"""``uint8``."""
U16 = _plain(u16, Reader.u16)
"""``uint16``."""
U64 = _plain(u64, Reader.u64)
"""``uint64`` (DAP's ``Time`` and report counts)."""
OPAQUE16 = _plain(opaque16, Reader.opaque16)
"""``opaque<0..2^16-1>``."""
OPAQUE32 = _plain(opaque32, Reader.opaque32)
"""``opaque<0..2^32-1>``."""


def fixed_bytes(name: str, value: bytes, size: int) -> bytes:
    """Encode ``opaque name[size]``: ``value`` itself, which must be exactly ``size`` bytes.

    Parameters
    ----------
    name : str
        The field's name (in the error).
    value : bytes
        The field's value.
    size : int
        Its required length in bytes.

    Returns
    -------
    bytes
        ``value``.

    Raises
    ------
    DataError
        Naming ``name``, if ``value`` is not ``size`` bytes.
    """
    if not isinstance(value, bytes) or len(value) != size:
        raise DataError(f"{name} must be {size} bytes, got {value!r:.60}")
    return value


def fixed(size: int) -> Field:
    """``opaque[size]``: exactly ``size`` bytes (an id, a checksum), :func:`fixed_bytes`.

    Parameters
    ----------
    size : int
        The field's length in bytes, >= 1 (encoding another length raises
        :class:`~fedstats.errors.DataError` naming the field).

    Returns
    -------
    Field
        The codec of a :class:`Struct` field annotated with it.
    """
    return Field(lambda name: partial(fixed_bytes, name, size=size), lambda r: r.take(size))


def vector16(item: type[Message]) -> Field:
    """``item items<0..2^16-1>``, held as a tuple.

    Parameters
    ----------
    item : type
        The :class:`Message` class of the items.

    Returns
    -------
    Field
        The codec of a :class:`Struct` field annotated with it.
    """
    return _plain(lambda v: vec16([x.encode() for x in v]), lambda r: tuple(r.vec16(item.read)))


def vector32(item: type[Message]) -> Field:
    """``item items<0..2^32-1>``, held as a tuple.

    :func:`vector16` with a 32-bit length: the same parameter and return.
    """
    return _plain(lambda v: vec32([x.encode() for x in v]), lambda r: tuple(r.vec32(item.read)))


def wrapped32(item: type[Message]) -> Field:
    """One ``item`` inside ``opaque<0..2^32-1>``; its encoding must fill the opaque exactly.

    :func:`nested` inside a 32-bit length: the same parameter and return.
    """
    return _plain(
        lambda v: opaque32(v.encode()), lambda r: decode_all(r.opaque32(), r.what, item.read)
    )


def nested(item: type[Message]) -> Field:
    """One ``item``, as it encodes itself (what a field typed with a message class gets by default).

    Parameters
    ----------
    item : type
        The :class:`Message` class held.

    Returns
    -------
    Field
        The codec of a :class:`Struct` field annotated with it.
    """
    return _plain(item.encode, item.read)


class Struct(Message):
    """A message encoded as its dataclass fields in order, with nothing between them.

    Each field is annotated with its :class:`Field` (``time: Annotated[int, U64]``); a field whose type is
    itself a :class:`Message` is encoded by that message (``metadata: ReportMetadata``).
    """

    def encode(self) -> bytes:
        """Encode the fields in order (RFC 8446 §3: a ``struct`` is its members one after another)."""
        lay = _layout(type(self))
        return b"".join([put(v) for put, v in zip(lay.puts, lay.values(self), strict=True)])

    @classmethod
    def read(cls, r: Reader) -> Self:
        """Decode the fields in order from a reader."""
        return cls(*[take(r) for take in _layout(cls).takes])


@dataclass(frozen=True)
class _Layout:
    values: Callable[[Struct], tuple[Any, ...]]
    puts: tuple[Callable[[Any], bytes], ...]
    takes: tuple[Callable[[Reader], Any], ...]


_LAYOUTS: dict[type[Struct], _Layout] = {}


def _layout(cls: type[Struct]) -> _Layout:
    """The codec of each field of ``cls``, worked out on first use (the annotations name later classes)."""
    lay = _LAYOUTS.get(cls)
    if lay is None:
        hints = get_type_hints(cls, include_extras=True)
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        codecs = [_field_of(hints[n]) for n in names]
        get = attrgetter(*names)
        lay = _Layout(
            get if len(names) > 1 else lambda m: (get(m),),
            tuple(c.encoder(n) for n, c in zip(names, codecs, strict=True)),
            tuple(c.take for c in codecs),
        )
        _LAYOUTS[cls] = lay
    return lay


def _field_of(hint: Any) -> Field:
    meta = getattr(hint, "__metadata__", ())
    if meta and isinstance(meta[0], Field):
        return meta[0]
    if isinstance(hint, type) and issubclass(hint, Message):
        return nested(hint)
    raise TypeError(f"a Struct field needs a Field annotation or a Message type, got {hint!r}")
