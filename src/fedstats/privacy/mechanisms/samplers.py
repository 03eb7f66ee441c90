r"""Exact, vectorized samplers of the discrete Laplace and discrete Gaussian distributions.

Both follow Canonne, Kamath & Steinke (NeurIPS 2020, "The Discrete Gaussian for Differential Privacy"):
the discrete Laplace :math:`P(k) \propto e^{-|k|/t}` is a random sign times a geometric magnitude
(rejecting "-0"), and the discrete Gaussian :math:`P(k) \propto e^{-k^2/(2\sigma^2)}` is obtained from it by
rejection (Algorithm 3). Instead of a Python loop per sample, each round draws a block of candidates and keeps
the accepted ones; the loop runs over rounds (a handful), never over samples.

Exactness: nothing is truncated. A geometric magnitude is :math:`\lfloor t E \rfloor` with
:math:`E = -\log U` an exponential built from 53-bit uniforms; when U falls in its lowest bucket the tail is
continued with a fresh exponential (memorylessness), so arbitrarily large values keep their probability.
Bernoulli trials :math:`\exp(-\gamma)` compare a 53-bit uniform with a double, so every probability is right to
a relative :math:`2^{-50}` or better (Canonne et al.'s rational arithmetic would make this exact at a far
higher cost). Outputs are integers, so no floating-point artefact of the noise reaches a release
(Mironov 2012).

Every sampler takes the generator it draws from (numpy ``Generator`` or
:class:`~fedstats.randomness.SecureGenerator`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedstats._validation import check_int, check_real
from fedstats.randomness import RNG, SecureGenerator

__all__ = ["random_raw", "sample_discrete_gaussian", "sample_discrete_laplace"]

_TWO_POW_53 = float(2**53)
_LOG_2_POW_53 = 53.0 * math.log(2.0)
_MAX_SCALE = 1e12  # keeps magnitudes far below 2**53
_BLOCK = 1 << 18  # samples per round: bounds temporary memory whatever the output size


def random_raw(rng: RNG, n: int) -> np.ndarray:
    """Return ``n`` uniform 64-bit words from either kind of generator, shape (n,), dtype uint64."""
    if isinstance(rng, SecureGenerator):
        return np.asarray(rng.random_raw(n), dtype=np.uint64)
    return np.asarray(rng.bit_generator.random_raw(n), dtype=np.uint64)


def _size_count(size: int | tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    for s in shape:
        check_int("size", s, low=0)
    return math.prod(shape), shape


def _exponential_from_raw(raw: np.ndarray, rng: RNG) -> np.ndarray:
    """Exponential(1) variates from the top 53 bits of ``raw``; the lowest bucket continues the tail."""
    top = raw >> np.uint64(11)
    e = top.view(np.int64).astype(np.float64)
    e += 0.5
    e *= 1.0 / _TWO_POW_53
    np.log(e, out=e)
    np.negative(e, out=e)
    low = np.flatnonzero(top == 0)
    while low.size:  # probability 2**-53 per sample: E > 53 log 2, memoryless continuation
        more = random_raw(rng, low.size) >> np.uint64(11)
        e[low] = _LOG_2_POW_53 + (-np.log((more.astype(np.float64) + 0.5) / _TWO_POW_53))
        low = low[more == 0]
    return e


def _discrete_laplace_block(scale: float, m: int, rng: RNG) -> np.ndarray:
    """About ``m`` discrete Laplace candidates (fewer after rejecting -0), dtype int64."""
    raw = random_raw(rng, m)
    negative = (raw & np.uint64(1)) == 0
    mag = _exponential_from_raw(raw, rng)
    mag *= scale
    np.floor(mag, out=mag)
    keep = ~(negative & (mag == 0.0))
    np.negative(mag, out=mag, where=negative)
    return np.asarray(mag[keep], dtype=np.int64)


def sample_discrete_laplace(scale: float, size: int | tuple[int, ...], rng: RNG) -> np.ndarray:
    r"""Sample the discrete Laplace distribution :math:`P(k) \propto e^{-|k|/\text{scale}}` on the integers.

    Parameters
    ----------
    scale : float
        The parameter t in (0, 1e12]; the variance is :math:`2e^{-1/t}/(1-e^{-1/t})^2`.
    size : int or tuple of int
        Output shape.
    rng : numpy.random.Generator or SecureGenerator
        Source of randomness.

    Returns
    -------
    numpy.ndarray of int64, shape ``size``

    Raises
    ------
    ParameterError
        If ``scale`` or ``size`` is invalid.

    Notes
    -----
    Sign times geometric magnitude :math:`\lfloor t E\rfloor`, rejecting negative zero (Canonne, Kamath,
    Steinke 2020, Sec. 5.1, Alg. 2); vectorized over rounds of candidates.
    """
    t = check_real("scale", scale, low=0.0, high=_MAX_SCALE, low_open=True)
    n, shape = _size_count(size)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    p_keep = 1.0 - 0.5 * (-math.expm1(-1.0 / t))
    while filled < n:
        need = min(n - filled, _BLOCK)  # bounded temporaries, cache-sized rounds
        cand = _discrete_laplace_block(t, int(need / p_keep * 1.02) + 16, rng)[:need]
        out[filled : filled + cand.size] = cand
        filled += cand.size
    return out.reshape(shape)


def sample_discrete_gaussian(sigma2: float, size: int | tuple[int, ...], rng: RNG) -> np.ndarray:
    r"""Sample the discrete Gaussian :math:`P(k) \propto e^{-k^2/(2\sigma^2)}` on the integers.

    Parameters
    ----------
    sigma2 : float
        The parameter :math:`\sigma^2` in (0, 1e22]; the variance is slightly below :math:`\sigma^2`
        (Canonne, Kamath, Steinke 2020, Prop. 19).
    size : int or tuple of int
        Output shape.
    rng : numpy.random.Generator or SecureGenerator
        Source of randomness.

    Returns
    -------
    numpy.ndarray of int64, shape ``size``

    Raises
    ------
    ParameterError
        If ``sigma2`` or ``size`` is invalid.

    Notes
    -----
    Canonne, Kamath & Steinke 2020, Algorithm 3: with :math:`t = \lfloor\sigma\rfloor + 1`, draw
    :math:`Y` from the discrete Laplace with scale t and accept it with probability
    :math:`\exp(-(|Y| - \sigma^2/t)^2 / (2\sigma^2))`; vectorized over rounds of candidates.
    """
    s2 = check_real("sigma2", sigma2, low=0.0, high=1e22, low_open=True)
    n, shape = _size_count(size)
    sigma = math.sqrt(s2)
    t = float(math.floor(sigma) + 1)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    rate = 0.5  # running estimate of the acceptance rate, refined each round
    shift = s2 / t
    scale = -1.0 / (2.0 * s2)
    while filled < n:
        need = min(n - filled, _BLOCK)  # bounded temporaries, cache-sized rounds
        m = int(need / rate * 1.05) + 16
        y = _discrete_laplace_block(t, m, rng)
        d = np.abs(y).astype(np.float64)
        d -= shift
        d *= d
        d *= scale
        np.exp(d, out=d)  # acceptance probability exp(-(|y| - s2/t)^2 / (2 s2))
        acc = y[_uniform(rng, y.size) < d]
        rate = max(0.05, acc.size / m)
        take = acc[:need]
        out[filled : filled + take.size] = take
        filled += take.size
    return out.reshape(shape)


def _uniform(rng: RNG, n: int) -> np.ndarray:
    """Uniform doubles k / 2**53 in [0, 1) from either kind of generator."""
    raw = random_raw(rng, n) >> np.uint64(11)
    u = raw.view(np.int64).astype(np.float64)  # int64 -> float64 converts faster than uint64
    u *= 1.0 / _TWO_POW_53
    return u


def bernoulli(p: Any, size: int, rng: RNG) -> np.ndarray:
    """Boolean array of independent Bernoulli(p) trials (``p`` scalar or shape (size,)), 53-bit uniforms."""
    return _uniform(rng, size) < np.asarray(p, dtype=np.float64)
