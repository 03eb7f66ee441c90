"""XofTurboShake128, the extendable-output function of Prio3 (draft-irtf-cfrg-vdaf-20, §6.2 and §6.2.1).

TurboSHAKE128 itself (RFC 9861) comes from ``pycryptodome`` (:mod:`Crypto.Hash.TurboSHAKE128`), with
domain byte 1. The XOF absorbs ``len(dst)`` (2 bytes, little-endian), ``dst``, ``len(seed)`` (1 byte),
``seed`` and ``binder``, then squeezes. Field vectors are drawn by rejection sampling (§6.2,
``next_vec``): each ``ENCODED_SIZE``-byte little-endian chunk is masked to the modulus' bit length and
kept if below the modulus. :func:`expand_into_vecs` does this for many seeds at once, drawing all the
bytes first and redrawing (in stream order) only for the rare rows that hit a rejection.

Examples
--------
>>> from fedstats.vdaf.field import Field64
>>> v = XofTurboShake128.expand_into_vec(Field64, bytes(32), b"dst", b"binder", 3)
>>> v.shape, v.dtype.name
((3,), 'uint64')
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from Crypto.Hash import TurboSHAKE128

from fedstats.errors import ParameterError
from fedstats.vdaf.field import Field, FieldArray

__all__ = [
    "SEED_SIZE",
    "XofTurboShake128",
    "derive_seeds",
    "expand_into_vecs",
    "turboshake_many",
    "turboshake_one",
]

SEED_SIZE = 32


def _message(seed: bytes, dst: bytes, binder: bytes) -> bytes:
    """The absorbed string: ``len(dst) (2 bytes LE) || dst || len(seed) (1 byte) || seed || binder``."""
    return len(dst).to_bytes(2, "little") + dst + bytes([len(seed)]) + seed + binder


class XofTurboShake128:
    """The XOF of draft-irtf-cfrg-vdaf-20, §6.2.1, over pycryptodome's TurboSHAKE128.

    Parameters
    ----------
    seed : bytes
        ``SEED_SIZE`` (32) bytes.
    dst : bytes
        Domain separation tag, at most 65535 bytes.
    binder : bytes
        Any bytes.

    Raises
    ------
    ParameterError
        If ``seed`` is not 32 bytes or ``dst`` is too long.
    """

    SEED_SIZE = SEED_SIZE

    def __init__(self, seed: bytes, dst: bytes, binder: bytes) -> None:
        if len(seed) != SEED_SIZE:
            raise ParameterError("seed", f"{len(seed)} bytes", f"{SEED_SIZE} bytes")
        if len(dst) >= 2**16:
            raise ParameterError("dst", f"{len(dst)} bytes", "fewer than 65536 bytes")
        self._h = TurboSHAKE128.new(domain=1, data=_message(seed, dst, binder))

    def next(self, length: int) -> bytes:
        """The next ``length`` bytes of the output stream."""
        return bytes(self._h.read(length))

    def next_vec(self, field: type[Field], length: int) -> FieldArray:
        """The next ``length`` field elements, by rejection sampling (§6.2, ``next_vec``)."""
        return _next_vec(self._h, field, length)

    @classmethod
    def derive_seed(cls, seed: bytes, dst: bytes, binder: bytes) -> bytes:
        """A new ``SEED_SIZE``-byte seed (§6.2, ``derive_seed``)."""
        return cls(seed, dst, binder).next(SEED_SIZE)

    @classmethod
    def expand_into_vec(
        cls, field: type[Field], seed: bytes, dst: bytes, binder: bytes, length: int
    ) -> FieldArray:
        """``length`` field elements from ``seed`` (§6.2, ``expand_into_vec``); shape ``(length,)``."""
        return cls(seed, dst, binder).next_vec(field, length)


def _next_vec(h: Any, field: type[Field], length: int) -> FieldArray:
    size = field.ENCODED_SIZE
    chunks: list[FieldArray] = []
    have = 0
    while have < length:
        vals, ok = field._from_bytes(bytes(h.read((length - have) * size)))
        kept = vals[ok]
        chunks.append(kept)
        have += kept.size
    if len(chunks) == 1:
        return chunks[0]
    return np.concatenate(chunks)[:length]


def expand_into_vecs(
    field: type[Field],
    seeds: Sequence[bytes],
    dst: bytes,
    binders: Sequence[bytes],
    length: int,
) -> FieldArray:
    """``expand_into_vec`` for many (seed, binder) pairs at once.

    Parameters
    ----------
    field : type[Field]
        The field of the output.
    seeds, binders : sequence of bytes
        One seed (32 bytes) and one binder per row; same length ``n``.
    dst : bytes
        The domain separation tag shared by all rows.
    length : int
        Elements per row.

    Returns
    -------
    numpy.ndarray
        Shape ``(n, length)``; row ``i`` equals ``XofTurboShake128.expand_into_vec(field, seeds[i],
        dst, binders[i], length)``.
    """
    n = len(seeds)
    size = field.ENCODED_SIZE
    if n == 0 or length == 0:
        return field.zeros((n, length))
    if len(dst) >= 2**16:
        raise ParameterError("dst", f"{len(dst)} bytes", "fewer than 65536 bytes")
    head = len(dst).to_bytes(2, "little") + dst + bytes([SEED_SIZE])
    nbytes = length * size
    for s in seeds:
        if len(s) != SEED_SIZE:
            raise ParameterError("seed", f"{len(s)} bytes", f"{SEED_SIZE} bytes")
    messages = [head + s + b for s, b in zip(seeds, binders, strict=True)]
    data = turboshake_many(messages, nbytes)
    vals, ok = field._from_bytes(data)
    out = vals.reshape(n, length)
    ok2 = ok.reshape(n, length)
    bad = np.flatnonzero(~ok2.all(axis=1))
    if bad.size:
        out = out.copy()
        for i in bad:
            row = out[i][ok2[i]]
            h = TurboSHAKE128.new(domain=1, data=messages[i])
            h.read(nbytes)  # the stream continues after the bytes already drawn
            more = _next_vec(h, field, length - row.size)
            out[i] = np.concatenate([row, more])
    return out


def derive_seeds(seeds: Sequence[bytes], dst: bytes, binders: Sequence[bytes]) -> list[bytes]:
    """``derive_seed`` for many (seed, binder) pairs (§6.2); each seed may be any length below 256."""
    head = len(dst).to_bytes(2, "little") + dst
    messages = [head + bytes([len(s)]) + s + b for s, b in zip(seeds, binders, strict=True)]
    data = turboshake_many(messages, SEED_SIZE)
    return [data[i : i + SEED_SIZE] for i in range(0, len(data), SEED_SIZE)]


def _turboshake_public(messages: Sequence[bytes], nbytes: int) -> bytes:
    return b"".join([bytes(TurboSHAKE128.new(domain=1, data=m).read(nbytes)) for m in messages])


def _turboshake_raw(messages: Sequence[bytes], nbytes: int) -> bytes:
    """TurboSHAKE128 (domain byte 1) of each message through pycryptodome's Keccak C library.

    The same C calls as :class:`Crypto.Hash.TurboSHAKE128.TurboSHAKE` (``keccak_init`` with 12 rounds,
    ``keccak_absorb``, ``keccak_squeeze``), but one state is reset between messages instead of a new
    Python object per message: about half the cost per message.
    """
    from Crypto.Hash.keccak import _raw_keccak_lib as lib
    from Crypto.Util._raw_api import (
        SmartPointer,
        VoidPointer,
        c_size_t,
        c_ubyte,
        create_string_buffer,
        get_raw_buffer,
    )

    state = VoidPointer()
    if lib.keccak_init(state.address_of(), c_size_t(32), c_ubyte(12)):
        raise RuntimeError("keccak_init failed")
    owner = SmartPointer(state.get(), lib.keccak_destroy)
    sp = owner.get()
    buf = create_string_buffer(nbytes)
    out = []
    size, domain = c_size_t(nbytes), c_ubyte(1)
    for m in messages:
        if lib.keccak_reset(sp) or lib.keccak_absorb(sp, m, c_size_t(len(m))):
            raise RuntimeError("keccak_absorb failed")
        if lib.keccak_squeeze(sp, buf, size, domain):
            raise RuntimeError("keccak_squeeze failed")
        out.append(get_raw_buffer(buf))
    return b"".join(out)


class _OneState(threading.local):
    """A thread's reusable Keccak state and output buffers for :func:`turboshake_one`."""

    def __init__(self) -> None:
        from Crypto.Hash.keccak import _raw_keccak_lib as lib
        from Crypto.Util._raw_api import SmartPointer, VoidPointer, create_string_buffer

        state = VoidPointer()
        if lib.keccak_init(state.address_of(), 32, 12):
            raise RuntimeError("keccak_init failed")
        self.lib = lib
        self.owner = SmartPointer(state.get(), lib.keccak_destroy)
        self.sp = self.owner.get()
        self.new_buffer = create_string_buffer
        self.buffers: dict[int, Any] = {}


_ONE: _OneState | None = None


def turboshake_one(message: bytes, nbytes: int) -> bytes:
    """``TurboSHAKE128(message, D=1, L=nbytes)`` of one message (a device's single-report path).

    On the raw backend (see :func:`turboshake_many`) one Keccak state and output buffer per thread and
    size are kept and reset between calls: no allocation per call.
    """
    global _ONE, _BACKEND
    if _BACKEND is None:
        _BACKEND = _select_backend()
    if _BACKEND is not _turboshake_raw:
        return _turboshake_public([message], nbytes)
    if _ONE is None:
        _ONE = _OneState()
    one = _ONE
    buf = one.buffers.get(nbytes)
    if buf is None:
        buf = one.buffers[nbytes] = one.new_buffer(nbytes)
    lib, sp = one.lib, one.sp
    if lib.keccak_reset(sp) or lib.keccak_absorb(sp, message, len(message)):
        raise RuntimeError("keccak_absorb failed")
    if lib.keccak_squeeze(sp, buf, nbytes, 1):
        raise RuntimeError("keccak_squeeze failed")
    return bytes(buf)


def _select_backend() -> Any:
    """The raw path if it reproduces the public API on a known answer, else the public API."""
    probe = [b"fedstats", bytes(range(200))]
    try:
        if _turboshake_raw(probe, 200) == _turboshake_public(probe, 200):
            return _turboshake_raw
    except Exception:  # any change in pycryptodome's internals: use its public API
        pass
    return _turboshake_public


_BACKEND: Any = None


def turboshake_many(messages: Sequence[bytes], nbytes: int) -> bytes:
    """``TurboSHAKE128(m, D=1, L=nbytes)`` for each message, concatenated (RFC 9861, §2.1).

    Uses pycryptodome's public ``TurboSHAKE128`` unless its C library can be called with one reusable
    state, which is checked once against the public API on a known answer.
    """
    global _BACKEND
    if _BACKEND is None:
        _BACKEND = _select_backend()
    if not messages:
        return b""
    result: bytes = _BACKEND(messages, nbytes)
    return result
