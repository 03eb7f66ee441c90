r"""Uniform random words: the exact samplers' source of randomness, uniform integers, plain Bernoulli trials.

The exact samplers (:mod:`fedstats.privacy.mechanisms.exact_bernoulli`,
:mod:`fedstats.privacy.mechanisms.samplers`) take every random decision from uniform words of ``bits`` bits
(a :class:`WordSource`): by default :class:`RngWords`, the top 53 bits of each 64-bit word of the generator
(numpy ``Generator`` or :class:`~fedstats.randomness.SecureGenerator`, read through :func:`random_raw`);
the tests substitute a source with a reduced word size to enumerate the samplers' code paths. Uniform
integers below m come from words by masking and rejection (:func:`uniform_below`).

:func:`bernoulli` is the plain 53-bit Bernoulli trial of randomized response and the local mechanisms
(``U < p`` with a double p), not one of the exact samplers.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from fedstats.errors import ParameterError
from fedstats.randomness import RNG, SecureGenerator

__all__ = ["RngWords", "WordSource", "bernoulli", "random_raw", "uniform_below"]


class WordSource(Protocol):
    """Where the samplers take their randomness from: uniform words of ``bits`` bits.

    ``words(n)`` returns a uint64 array of shape (n,) of independent uniform integers in
    ``[0, 2**bits)``, ``bits`` in [8, 53].
    """

    bits: int

    def words(self, n: int) -> np.ndarray:
        """``n`` uniform words, dtype uint64, each below ``2**bits``."""


class RngWords:
    """The default :class:`WordSource`: the top 53 bits of each 64-bit word of ``rng``.

    Parameters
    ----------
    rng : numpy.random.Generator or SecureGenerator
        Secure (AES-CTR keystream) or seeded numpy generator.
    """

    bits = 53

    def __init__(self, rng: RNG) -> None:
        self.rng = rng

    def words(self, n: int) -> np.ndarray:
        """``n`` uniform 53-bit words, dtype uint64."""
        raw = random_raw(self.rng, n)
        np.right_shift(raw, np.uint64(11), out=raw)
        return raw


def random_raw(rng: RNG, n: int) -> np.ndarray:
    """Return ``n`` uniform 64-bit words from either kind of generator, shape (n,), dtype uint64."""
    if isinstance(rng, SecureGenerator):
        return np.asarray(rng.random_raw(n), dtype=np.uint64)
    return np.asarray(rng.bit_generator.random_raw(n), dtype=np.uint64)  # a fresh, writable array


def uniform_below(m: int, n: int, src: WordSource) -> np.ndarray:
    r"""``n`` independent uniform integers in [0, m), dtype int64, by masking words and rejection.

    Parameters
    ----------
    m : int
        In [1, 2**62].
    n : int
        Number of draws, >= 0.
    src : WordSource

    Returns
    -------
    numpy.ndarray of int64, shape (n,)

    Notes
    -----
    Each attempt concatenates the ``ceil(L/b)`` next words (word i gives bits ``b i`` and up), keeps the low
    :math:`L = \lceil\log_2 m\rceil` bits and accepts values below m (probability above 1/2): the accepted
    value is uniform on [0, m) exactly.
    """
    m = int(m)
    if not 1 <= m <= 2**62:
        raise ParameterError("m", m, "an integer in [1, 2**62]")
    out = np.zeros(n, dtype=np.int64)
    if m == 1 or n == 0:
        return out
    length = (m - 1).bit_length()
    bound = np.uint64(m)
    pending = np.arange(n)
    while pending.size:
        v = _bits(src, pending.size, length)
        ok = v < bound
        out[pending[ok]] = v[ok].astype(np.int64)
        pending = pending[~ok]
    return out


def _bits(src: WordSource, n: int, length: int) -> np.ndarray:
    """``n`` uniform integers of ``length`` bits (1..63), uint64: word i gives bits ``b i`` and up."""
    b = src.bits
    v = src.words(n)
    for i in range(1, -(-length // b)):
        v |= src.words(n) << np.uint64(b * i)
    if length < b * (-(-length // b)):
        v &= np.uint64((1 << length) - 1)
    return v


def _uniform(rng: RNG, n: int) -> np.ndarray:
    """Uniform doubles k / 2**53 in [0, 1) from either kind of generator."""
    raw = random_raw(rng, n) >> np.uint64(11)
    u = raw.view(np.int64).astype(np.float64)  # int64 -> float64 converts faster than uint64
    u *= 2.0**-53
    return u


def bernoulli(p: Any, size: int, rng: RNG) -> np.ndarray:
    """Boolean array of Bernoulli(p) trials (``p`` a double, scalar or shape (size,)): ``U < p``.

    U is a 53-bit uniform ``k / 2**53``, so the probability is ``ceil(p 2**53) / 2**53``: exact for the
    double p up to its rounding to 53 bits after the point (relative ``2**-53`` for p >= 1/2, coarser for
    very small p). Used by randomized response and the local mechanisms; not one of the exact samplers.
    """
    return _uniform(rng, size) < np.asarray(p, dtype=np.float64)
