r"""Exact, vectorized samplers of the discrete Laplace and discrete Gaussian distributions.

Both follow Canonne, Kamath & Steinke (NeurIPS 2020, "The Discrete Gaussian for Differential Privacy",
Algorithms 1-3) with the parameters held as exact rationals (a float ``scale`` or ``sigma2`` is the rational it
denotes; :class:`fractions.Fraction` is accepted too):

* **Algorithm 1**, Bernoulli(:math:`e^{-\gamma}`) for rational :math:`\gamma \in [0, 1]`: run Bernoulli
  (:math:`\gamma/K`) trials for K = 1, 2, ... until the first failure and return 1 iff that K is odd; for
  :math:`\gamma > 1`, :math:`e^{-\gamma} = e^{-a} e^{-(\gamma - a)}` with an integer a
  (:mod:`fedstats.privacy.mechanisms.exact_bernoulli`).
* **Algorithm 2**, discrete Laplace with scale t/s (integers): U uniform on {0, ..., t-1} accepted with
  probability :math:`e^{-U/t}` (Algorithm 1), V geometric with :math:`P(V \ge v) = e^{-v}`,
  :math:`Y = \lfloor (U + tV)/s \rfloor`, a random sign, and "-0" rejected.
* **Algorithm 3**, discrete Gaussian with rational :math:`\sigma^2`: :math:`t = \lfloor\sigma\rfloor + 1`,
  Y from the discrete Laplace with scale t, accepted with probability
  :math:`\exp(-(|Y| - \sigma^2/t)^2/(2\sigma^2))`.

**How each random decision is made (no float log or exp anywhere).** Every Bernoulli(p) is exactly the
event ``R < p`` for a uniform real R in [0, 1) whose binary digits are drawn lazily from uniform words
(:class:`WordSource`), a certified binary64 interval deciding the first word and exact digits of p the rare
rest (details in :mod:`fedstats.privacy.mechanisms.exact_bernoulli`). Uniform integers below m come from
words by masking and rejection (:func:`uniform_below`).

Vectorization: each round runs the step for all pending elements at once and keeps the still-pending subset
(a handful of rounds, never a Python loop per sample, except on the exact path above, which a sample reaches
with probability about :math:`2^{-48}`). Candidates are drawn in blocks and the accepted ones kept in order,
which gives i.i.d. samples because rounds are independent.

Every sampler takes the generator it draws from (numpy ``Generator`` or
:class:`~fedstats.randomness.SecureGenerator`), and optionally a :class:`WordSource` (``words=``) that
replaces it, which is how the tests enumerate the samplers' code path on a reduced word size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from fedstats._validation import check_int
from fedstats.errors import OverflowRiskError, ParameterError
from fedstats.privacy.mechanisms.exact_bernoulli import DigitsFn as DigitsFn
from fedstats.privacy.mechanisms.exact_bernoulli import (
    bernoulli_exp,
    bernoulli_exp_int,
    sample_geometric_exp,
)
from fedstats.privacy.mechanisms.exact_bernoulli import exp_neg_digits as exp_neg_digits
from fedstats.privacy.mechanisms.words import (
    RngWords,
    WordSource,
    _bits,
    bernoulli,
    random_raw,
    uniform_below,
)
from fedstats.randomness import RNG

__all__ = [
    "RngWords",
    "WordSource",
    "bernoulli",
    "bernoulli_exp",
    "bernoulli_exp_int",
    "random_raw",
    "sample_discrete_gaussian",
    "sample_discrete_laplace",
    "sample_geometric_exp",
    "uniform_below",
]

_BLOCK = 1 << 18  # candidates per round: bounds temporary memory whatever the output size
_MAX_NUMERATOR = (
    2**53
)  # t of the scale t/s; keeps U + tV in int64 unless V > 2^10 (probability e^-1024)
_MAX_LAPLACE_SCALE = 2.0**41  # about 2.2e12
_MAX_SIGMA2 = 2.0**84  # sigma up to 2^42


def _source(rng: RNG | None, words: WordSource | None) -> WordSource:
    if words is not None:
        b = getattr(words, "bits", None)
        if not isinstance(b, int) or not 8 <= b <= 53:
            raise ParameterError("words", words, "a WordSource with an integer `bits` in [8, 53]")
        return words
    if rng is None:
        raise ParameterError("rng", rng, "a numpy Generator or SecureGenerator")
    return RngWords(rng)


def _size_count(size: int | tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    for s in shape:
        check_int("size", s, low=0)
    return math.prod(shape), shape


# ---------------------------------------------------------------------------------------------------------
# discrete Laplace and discrete Gaussian
# ---------------------------------------------------------------------------------------------------------
def _as_fraction(name: str, value: Any, high: float) -> Fraction:
    if isinstance(value, (str, bytes, bool, np.bool_)):
        raise ParameterError(name, value, f"a finite number in (0, {high:g}]")
    try:
        f = Fraction(value)
    except (TypeError, ValueError, OverflowError):
        raise ParameterError(name, value, f"a finite number in (0, {high:g}]") from None
    if isinstance(value, bool) or not 0 < f <= high:
        raise ParameterError(name, value, f"a finite number in (0, {high:g}]")
    return f


_K = 4  # X = U + t W with W geometric of ratio e^{-1/2^K} (a fixed table) and U nearly uniform


def _laplace_candidates(t: int, s: int, m: int, src: WordSource) -> np.ndarray:
    r"""One round of CKS Algorithm 2 on ``m`` candidates: the accepted draws of DLap(t/s), in order.

    Algorithm 2 applied to the same distribution written as scale :math:`t 2^K / (s 2^K)`: the magnitude is
    :math:`\lfloor X / (s 2^K)\rfloor` with X geometric of ratio :math:`e^{-1/(t 2^K)}`, and
    :math:`X = U + tW` with U on [0, t) of weight :math:`e^{-U/(t 2^K)}` and W geometric with
    :math:`P(W \ge w) = e^{-w/2^K}` (independent: the weights multiply). U is a uniform candidate (a masked
    word; U >= t rejects the candidate, an event independent of everything else) accepted with
    probability :math:`e^{-\gamma}`, :math:`\gamma = U/(t 2^K) < 2^{-K}`, by Algorithm 1, whose trial K' is
    Bernoulli(:math:`\gamma/K'`); for K' = 1 that is Bernoulli(:math:`2^{-K}`) (K bits all zero) AND
    Bernoulli(U/t) (``Z < U``, Z uniform below t), later trials use Z uniform below :math:`t 2^K K'`. W
    comes from :func:`sample_geometric_exp` (one word, a fixed table).
    """
    length = max((t - 1).bit_length(), 1)
    raw = _bits(src, m, length) if length + _K + 1 > src.bits else src.words(m)
    u = (raw & np.uint64((1 << length) - 1)).astype(np.int64)
    extra = raw >> np.uint64(length) if length + _K + 1 <= src.bits else src.words(m)
    alive = u < t
    # Algorithm 1, trial 1: Bernoulli(2^-K) from K fresh bits, then Bernoulli(U/t) on that small subset
    small = np.flatnonzero((extra & np.uint64((1 << _K) - 1)) == 0)
    negative = (extra >> np.uint64(_K)) & np.uint64(1)
    hit = uniform_below(t, small.size, src) < u[small]
    running = small[hit]
    uk = u[running]
    k = 2
    tk = t << _K
    while running.size:  # trial k: Bernoulli(U / (t 2^K k)); stop at the first failure
        a = uniform_below(tk * k, running.size, src) < uk
        if k % 2 == 0:  # first failure at an even k: the e^{-gamma} trial fails
            alive[running[~a]] = False
        running = running[a]
        uk = uk[a]
        k += 1
    u = u[alive]
    neg = negative[alive].astype(bool)
    y = _laplace_magnitude(u, sample_geometric_exp(u.size, src, 1 << _K), t, s)
    keep = ~(neg & (y == 0))
    np.negative(y, out=y, where=neg)
    return np.asarray(y[keep], dtype=np.int64)


def _laplace_magnitude(u: np.ndarray, w: np.ndarray, t: int, s: int) -> np.ndarray:
    """``floor((U + t W) / (s 2^K))`` exactly, int64 (Python integers past int64 for U + tW)."""
    big = int(w.max()) if w.size else 0
    if (
        big > (2**63 - 1 - t) // t
    ):  # probability below e^-60 at t = 2^53; exact Python integers then
        mag = np.array(
            [(int(ui) + t * int(wi)) // (s << _K) for ui, wi in zip(u, w, strict=True)],
            dtype=object,
        )
        if int(mag.max()) >= 2**63:
            raise OverflowRiskError("discrete Laplace magnitude beyond int64")
        return np.asarray(mag.astype(np.int64))
    x = u + t * w
    d = s << _K
    return np.asarray(x >> (d.bit_length() - 1) if d & (d - 1) == 0 else x // d)


def _gaussian_gamma(
    y: np.ndarray, s2: Fraction, t: int
) -> tuple[np.ndarray, np.ndarray, Callable[[int], Fraction]]:
    """Algorithm 3's exponent for candidates y: binary64 value, rigorous error bound, exact Fraction."""
    c = s2 / t  # exact centre of the acceptance exponent
    s2f = float(s2)
    cf = s2f / t
    x = np.abs(y)
    xf = x.astype(np.float64)
    d = xf - cf
    # rigorous error of d: conversions of x, s2, the division and the subtraction (each <= 2^-53 rel.)
    ed = (xf + cf + np.abs(d)) * 2.0**-51
    g = d * d / (2.0 * s2f)
    err = (2.0 * np.abs(d) + ed) * ed / (2.0 * s2f) * 2.0 + g * 2.0**-50

    def exact(i: int) -> Fraction:
        return (int(x[i]) - c) ** 2 / (2 * s2)

    return g, err, exact


def _laplace_parts(scale: Any) -> tuple[int, int]:
    f = _as_fraction("scale", scale, _MAX_LAPLACE_SCALE)
    t, s = f.numerator, f.denominator
    if t > _MAX_NUMERATOR or s > 2**62:
        raise ParameterError(
            "scale", scale, "a rational t/s with t <= 2**53 and s <= 2**62 (any float is)"
        )
    return t, s


def _filled(size: int | tuple[int, ...], draw: Callable[[int], np.ndarray]) -> np.ndarray:
    """int64 samples of shape ``size``, in blocks: ``draw(need)`` returns at most ``need`` accepted ones."""
    n, shape = _size_count(size)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        take = draw(min(n - filled, _BLOCK))
        out[filled : filled + take.size] = take
        filled += take.size
    return out.reshape(shape)


def sample_discrete_laplace(
    scale: float | Fraction,
    size: int | tuple[int, ...],
    rng: RNG | None,
    *,
    words: WordSource | None = None,
) -> np.ndarray:
    r"""Sample the discrete Laplace distribution :math:`P(k) \propto e^{-|k|/\text{scale}}` exactly.

    Parameters
    ----------
    scale : float or fractions.Fraction
        The parameter t in (0, 2**41] (about 2.2e12), taken as the exact rational it denotes; the variance is
        :math:`2e^{-1/t}/(1-e^{-1/t})^2`.
    size : int or tuple of int
        Output shape.
    rng : numpy.random.Generator or SecureGenerator
        Source of randomness (ignored when ``words`` is given).
    words : WordSource, optional
        Replaces ``rng`` (tests: reduced word size).

    Returns
    -------
    numpy.ndarray of int64, shape ``size``

    Raises
    ------
    ParameterError
        If ``scale`` or ``size`` is invalid.

    Notes
    -----
    Canonne, Kamath, Steinke 2020, Algorithm 2 with scale = t/s in lowest terms, Bernoulli trials by
    Algorithm 1 and exact lazy comparisons (module notes); the magnitude's geometric part V comes from
    :func:`sample_geometric_exp`. Exact: no probability is rounded and nothing is truncated.
    """
    t, s = _laplace_parts(scale)
    src = _source(rng, words)
    # acceptance: (1 - e^-1) for U, times 1 - P(-0) >= 1/2
    return _filled(size, lambda need: _laplace_candidates(t, s, int(need * 1.6) + 16, src)[:need])


def sample_discrete_gaussian(
    sigma2: float | Fraction,
    size: int | tuple[int, ...],
    rng: RNG | None,
    *,
    words: WordSource | None = None,
) -> np.ndarray:
    r"""Sample the discrete Gaussian :math:`P(k) \propto e^{-k^2/(2\sigma^2)}` on the integers, exactly.

    Parameters
    ----------
    sigma2 : float or fractions.Fraction
        The parameter :math:`\sigma^2` in (0, 2**84] (sigma up to 2**42), taken as the exact rational it denotes; the variance is
        slightly below :math:`\sigma^2` (Canonne, Kamath, Steinke 2020, Prop. 19).
    size, rng, words
        As :func:`sample_discrete_laplace`.

    Returns
    -------
    numpy.ndarray of int64, shape ``size``

    Raises
    ------
    ParameterError
        If ``sigma2`` or ``size`` is invalid.

    Notes
    -----
    Canonne, Kamath & Steinke 2020, Algorithm 3: :math:`t = \lfloor\sigma\rfloor + 1` (exact integer square
    root), Y from the discrete Laplace with scale t, accepted with probability
    :math:`\exp(-(|Y| - \sigma^2/t)^2/(2\sigma^2))` by :func:`bernoulli_exp` (exact).
    """
    s2 = _as_fraction("sigma2", sigma2, _MAX_SIGMA2)
    src = _source(rng, words)
    t = math.isqrt(s2.numerator // s2.denominator) + 1
    rate = 0.5

    def accepted(need: int) -> np.ndarray:
        nonlocal rate
        m = int(need / rate * 1.1) + 16
        y = _laplace_candidates(t, 1, m, src)
        g, err, exact = _gaussian_gamma(y, s2, t)
        acc: np.ndarray = y[bernoulli_exp(g, err, exact, src)]
        rate = max(0.05, acc.size / m)
        return acc[:need]

    return _filled(size, accepted)
