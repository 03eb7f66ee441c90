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

from collections.abc import Sequence
from typing import Any

import numpy as np
from Crypto.Hash import TurboSHAKE128

from fedstats.errors import ParameterError
from fedstats.vdaf.field import Field, FieldArray

__all__ = ["SEED_SIZE", "XofTurboShake128", "expand_into_vecs"]

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
    hashes = []
    for s, b in zip(seeds, binders, strict=True):
        if len(s) != SEED_SIZE:
            raise ParameterError("seed", f"{len(s)} bytes", f"{SEED_SIZE} bytes")
        hashes.append(TurboSHAKE128.new(domain=1, data=head + s + b))
    data = b"".join([h.read(nbytes) for h in hashes])
    vals, ok = field._from_bytes(data)
    out = vals.reshape(n, length)
    ok2 = ok.reshape(n, length)
    bad = np.flatnonzero(~ok2.all(axis=1))
    if bad.size:
        out = out.copy()
        for i in bad:
            row = out[i][ok2[i]]
            more = _next_vec(hashes[i], field, length - row.size)
            out[i] = np.concatenate([row, more])
    return out
