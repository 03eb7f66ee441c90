"""TLS-style presentation-language codec (RFC 8446 §3) that DAP's messages are written in.

Integers are big-endian; ``opaque x<0..2^16-1>`` is a 2-byte length then the bytes; a vector of structures
carries the byte length of its encoded items, not their count. :class:`Reader` decodes strictly: reading
past the end, a length that overruns its buffer or bytes left over after the top-level message raise
:class:`~fedstats.errors.DataError` naming the message, never an ``IndexError`` or ``struct.error``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Self, TypeVar

from fedstats.errors import DataError

__all__ = [
    "Message",
    "Reader",
    "decode_all",
    "opaque16",
    "opaque32",
    "u8",
    "u16",
    "u32",
    "u64",
    "vec16",
    "vec32",
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

    @classmethod
    @abstractmethod
    def read(cls, r: Reader) -> Self:
        """Decode from a reader (each message defines it; a class without it cannot be made)."""

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Decode strictly (DataError on truncated, overlong or malformed input)."""
        return decode_all(data, cls.__name__, cls.read)
