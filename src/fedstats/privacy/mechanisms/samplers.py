r"""Exact, vectorized samplers of the discrete Laplace and discrete Gaussian distributions.

Both follow Canonne, Kamath & Steinke (NeurIPS 2020, "The Discrete Gaussian for Differential Privacy",
Algorithms 1-3) with the parameters held as exact rationals (a float ``scale`` or ``sigma2`` is the rational it
denotes; :class:`fractions.Fraction` is accepted too):

* **Algorithm 1**, Bernoulli(:math:`e^{-\gamma}`) for rational :math:`\gamma \in [0, 1]`: run Bernoulli
  (:math:`\gamma/K`) trials for K = 1, 2, ... until the first failure and return 1 iff that K is odd; for
  :math:`\gamma > 1`, :math:`e^{-\gamma} = e^{-a} e^{-(\gamma - a)}` with an integer a (below).
* **Algorithm 2**, discrete Laplace with scale t/s (integers): U uniform on {0, ..., t-1} accepted with
  probability :math:`e^{-U/t}` (Algorithm 1), V geometric with :math:`P(V \ge v) = e^{-v}`,
  :math:`Y = \lfloor (U + tV)/s \rfloor`, a random sign, and "-0" rejected.
* **Algorithm 3**, discrete Gaussian with rational :math:`\sigma^2`: :math:`t = \lfloor\sigma\rfloor + 1`,
  Y from the discrete Laplace with scale t, accepted with probability
  :math:`\exp(-(|Y| - \sigma^2/t)^2/(2\sigma^2))`.

**How each random decision is made (no float log or exp anywhere).** Every Bernoulli(p) is the event
``R < p`` for a uniform real R in [0, 1) whose binary digits are drawn lazily, one ``bits``-bit word at a time
(:class:`WordSource`, 53 bits per word from the generator by default). After the first word w,
:math:`R \in [w, w+1) 2^{-b}`: if that interval lies below (above) p the answer is 1 (0); only when p lies
inside it are more words drawn and compared with more digits of p, computed exactly (integers and
:class:`~fractions.Fraction`; for :math:`e^{-a}`, integer a, from rational Taylor bounds). So the answer is
*exactly* ``R < p`` and :math:`P = p` exactly. To decide the first word of the many elements of an array at
once, p is also evaluated in binary64 with only +, -, *, / (correctly rounded, IEEE 754) together with a
rigorous bound on its error; an element whose first word is not decided by that certified interval goes to
the exact path (probability about :math:`2^{-48}` per trial). The float is a filter: it never changes an
answer. Uniform integers below m come from words by masking and rejection.

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
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from fedstats._validation import check_int
from fedstats.errors import OverflowRiskError, ParameterError
from fedstats.randomness import RNG, SecureGenerator

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
_REL = (
    2.0**-49
)  # relative slack added to every certified float bound (covers a few roundings of 2^-53)
_TINY = 2.0**-1020  # absolute slack (subnormal range)


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
# exact digits and the lazy comparison R < p
# ---------------------------------------------------------------------------------------------------------
DigitsFn = Callable[[int], tuple[int, bool]]
"""``digits(n) -> (floor(p 2^n), p 2^n is an integer)`` for the probability p being compared with."""


def _rational_digits(p: Fraction) -> DigitsFn:
    def digits(n: int) -> tuple[int, bool]:
        q, r = divmod(p.numerator << n, p.denominator)
        return q, r == 0

    return digits


@lru_cache(maxsize=65536)
def exp_neg_digits(a: int | Fraction, n: int) -> int:
    r"""``floor(2^n e^{-a})`` exactly, for rational a >= 0 and integer n >= 0 (rational Taylor bounds).

    Fixed point with P = n + 64 (then more) fractional bits: every Taylor term of :math:`e^a` is rounded
    down for the lower bound and up for the upper bound, and the upper bound adds the remainder
    :math:`2 a^{J+1}/(J+1)!` (valid for :math:`J + 2 > 2a`). P and J grow until both bounds of
    :math:`2^n e^{-a}` have the same floor, which terminates because :math:`e^{-a}` is irrational for
    rational a > 0 (Lindemann), so it is never a dyadic rational.
    """
    a = Fraction(a)
    if a == 0:
        return 1 << n
    if a > n * Fraction(6931471805599454, 10**16) + 1:  # e^-a < 2^-n (ln 2 < 0.6931471805599454)
        return 0
    p_num, q_den = a.numerator, a.denominator
    prec = n + 64
    terms = max(2 * math.ceil(a) + 2, 8)
    while True:
        one = 1 << prec
        lo_t = hi_t = one
        lo_s = hi_s = one
        for j in range(1, terms + 1):
            lo_t = (lo_t * p_num) // (q_den * j)
            hi_t = -((-hi_t * p_num) // (q_den * j))
            lo_s += lo_t
            hi_s += hi_t
        hi_s += -((-2 * hi_t * p_num) // (q_den * (terms + 1))) + 1
        # 2^n e^{-a} lies in [2^(n+P) / hi_s, 2^(n+P) / lo_s]
        num = 1 << (n + prec)
        f_lo = num // hi_s
        f_hi = num // lo_s
        if f_lo == f_hi and num % lo_s != 0:
            return f_lo
        prec *= 2
        terms *= 2


def _exp_digits(a: int) -> DigitsFn:
    def digits(n: int) -> tuple[int, bool]:
        return exp_neg_digits(a, n), a == 0

    return digits


class _LazyUniform:
    """One uniform real R in [0, 1) known to lie in [r, r+1) 2^-n; more words are drawn only when needed."""

    __slots__ = ("n", "r", "src")

    def __init__(self, first: int, src: WordSource) -> None:
        self.r = int(first)
        self.n = src.bits
        self.src = src

    def less(self, digits: DigitsFn) -> bool:
        """Exactly the event R < p (p given by its digits), drawing further words while undecided."""
        while True:
            d, exact = digits(self.n)
            if self.r < d:  # R < (r+1)/2^n <= d/2^n <= p
                return True
            if self.r > d or exact:  # R >= r/2^n >= p
                return False
            b = self.src.bits
            self.r = (self.r << b) | int(self.src.words(1)[0])
            self.n += b


# ---------------------------------------------------------------------------------------------------------
# vectorized primitives
# ---------------------------------------------------------------------------------------------------------
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
    b = src.bits
    k = -(-length // b)
    mask = np.uint64((1 << length) - 1)
    bound = np.uint64(m)
    pending = np.arange(n)
    while pending.size:
        v = src.words(pending.size)
        for i in range(1, k):
            v |= src.words(pending.size) << np.uint64(b * i)
        v &= mask
        ok = v < bound
        out[pending[ok]] = v[ok].astype(np.int64)
        pending = pending[~ok]
    return out


def _bernoulli_certified(
    g: np.ndarray, err: np.ndarray, exact: Callable[[int], Fraction], src: WordSource
) -> np.ndarray:
    """Exactly ``R < p_i`` for each i, where ``|g_i - p_i| <= err_i`` and ``exact(i)`` is p_i as a Fraction.

    The first word of each R is compared with the certified interval ``g +- (err + slack)``; undecided
    elements (p inside the first word's cell, up to the slack) continue exactly in :class:`_LazyUniform`.
    """
    n = g.size
    w = src.words(n)
    cell = 2.0**-src.bits
    lo = w.astype(np.float64) * cell  # exact: w < 2^53
    hi = lo + cell  # exact
    m = err + np.abs(g) * _REL + _TINY
    yes = hi <= g - m
    no = lo >= g + m
    undecided = np.flatnonzero(~(yes | no))
    for i in undecided:
        yes[i] = _LazyUniform(int(w[i]), src).less(_rational_digits(exact(int(i))))
    return np.asarray(yes, dtype=bool)


def _bernoulli_exp_small(
    g: np.ndarray, err: np.ndarray, exact: Callable[[int], Fraction], src: WordSource
) -> np.ndarray:
    """Canonne-Kamath-Steinke Algorithm 1: Bernoulli(exp(-gamma_i)) for rational gamma_i in [0, 1].

    ``g``/``err``/``exact`` describe gamma as in :func:`_bernoulli_certified`. K is the same for every
    element still running, so each round is one vectorized Bernoulli(gamma / K) over the pending subset.
    """
    n = g.size
    out = np.zeros(n, dtype=bool)
    # trial K = 1 on every element (no gather), then K = 2, 3, ... on the still-running subset
    a = _bernoulli_certified(g, err, exact, src)
    out[~a] = True
    pending = np.flatnonzero(a)
    k = 2
    while pending.size:
        idx = pending
        kk = k
        a = _bernoulli_certified(
            g[idx] / kk,
            err[idx] / kk,
            lambda j, idx=idx, kk=kk: exact(int(idx[j])) / kk,  # type: ignore[misc]
            src,
        )
        out[idx[~a]] = k % 2 == 1
        pending = idx[a]
        k += 1
    return out


def bernoulli_exp_int(a: np.ndarray, src: WordSource) -> np.ndarray:
    r"""Bernoulli(exp(-a_i)) for integers a_i >= 0, exactly, from one word each (lazy digits of e^-a).

    Parameters
    ----------
    a : numpy.ndarray of int64, shape (n,), entries >= 0
    src : WordSource

    Returns
    -------
    numpy.ndarray of bool, shape (n,)

    Notes
    -----
    With :math:`D_a = \lfloor 2^b e^{-a}\rfloor` (:math:`2^b` for a = 0), the first word w answers
    ``w < D_a`` (then :math:`R < e^{-a}`) or ``w > D_a`` (then :math:`R > e^{-a}`); ``w == D_a`` continues
    exactly with further digits.
    """
    a = np.asarray(a, dtype=np.int64)
    table = np.concatenate(([np.int64(1) << np.int64(src.bits)], _geometric_table(src.bits)))
    d = np.where(a < table.size, table[np.minimum(a, table.size - 1)], 0)
    w = src.words(a.size).astype(np.int64)
    out = w < d
    for i in np.flatnonzero(w == d):
        out[i] = _LazyUniform(int(w[i]), src).less(_exp_digits(int(a[i])))
    return out


def bernoulli_exp(
    g: np.ndarray, err: np.ndarray, exact: Callable[[int], Fraction], src: WordSource
) -> np.ndarray:
    r"""Bernoulli(exp(-gamma_i)) for rational gamma_i >= 0, exactly (CKS 2020, Algorithm 1 and its extension).

    Parameters
    ----------
    g : numpy.ndarray of float64, shape (n,)
        gamma in binary64, with ``|g - gamma| <= err`` (used only to decide cheaply, see the module notes).
    err : numpy.ndarray of float64, shape (n,)
        A rigorous bound on the error of ``g``.
    exact : callable
        ``exact(i)`` is gamma_i as a :class:`~fractions.Fraction`.
    src : WordSource

    Returns
    -------
    numpy.ndarray of bool, shape (n,)

    Notes
    -----
    :math:`e^{-\gamma} = e^{-a} e^{-r}` with the integer :math:`a = \lfloor\max(g - \text{err}, 0)\rfloor
    \le \gamma`; :math:`r = \gamma - a` is below :math:`1 + 2\,\text{err}`, so when :math:`r \le 1` is
    certain Algorithm 1 runs on r, otherwise twice on r/2. :math:`e^{-a}` is decided by
    :func:`bernoulli_exp_int`.
    """
    if (
        g.size and float(np.max(g)) > 2.0**60
    ):  # probability below e^(-2^60): refuse rather than overflow
        raise OverflowRiskError("Bernoulli(exp(-gamma)) with gamma beyond 2**60")
    er0 = err + np.abs(g) * _REL + _TINY
    single = g + er0 <= 1.0  # gamma <= 1 for certain: Algorithm 1 directly (the common case)
    out = np.ones(g.size, dtype=bool)
    if single.all():
        return _bernoulli_exp_small(g, err, exact, src)
    one0 = np.flatnonzero(single)
    if one0.size:
        out[one0] = _bernoulli_exp_small(g[one0], err[one0], lambda j: exact(int(one0[j])), src)
    rest = np.flatnonzero(~single)
    out[rest] = _bernoulli_exp_large(g[rest], err[rest], lambda j: exact(int(rest[j])), src)
    return out


def _bernoulli_exp_large(
    g: np.ndarray, err: np.ndarray, exact: Callable[[int], Fraction], src: WordSource
) -> np.ndarray:
    """:func:`bernoulli_exp` for gamma that may exceed 1: e^{-a} (table) times e^{-r} (Algorithm 1)."""
    lower = np.maximum(g - err - np.abs(g) * _REL - _TINY, 0.0)
    a = np.floor(lower).astype(np.int64)
    gr = g - a  # |gr - (gamma - a)| <= er
    er = err + np.abs(g) * _REL + _TINY
    for i in np.flatnonzero(er > 0.25):  # huge gamma (never in practice): split it exactly
        gi = exact(int(i))
        a[i] = math.floor(gi)
        gr[i] = float(gi - int(a[i]))
        er[i] = 2.0**-50
    out = np.ones(g.size, dtype=bool)
    pos = np.flatnonzero(a > 0)  # e^{-0} = 1 needs no word
    if pos.size:
        out[pos] = bernoulli_exp_int(a[pos], src)
    cand = np.flatnonzero(out)

    def rexact(i: int) -> Fraction:
        return exact(i) - int(a[i])

    one = cand[(gr[cand] + er[cand]) <= 1.0]
    two = cand[(gr[cand] + er[cand]) > 1.0]
    if one.size:
        out[one] = _bernoulli_exp_small(gr[one], er[one], lambda j: rexact(int(one[j])), src)
    for _ in range(2):
        if two.size:
            res = _bernoulli_exp_small(
                gr[two] / 2,
                er[two] / 2,
                lambda j, two=two: rexact(int(two[j])) / 2,  # type: ignore[misc]
                src,
            )
            out[two[~res]] = False
            two = two[res]
    return out


@lru_cache(maxsize=16)
def _geometric_table(b: int, denominator: int = 1) -> np.ndarray:
    """``floor(2^b e^{-v/denominator})`` for v = 1, 2, ... while positive (non-increasing)."""
    out = []
    v = 1
    while True:
        d = exp_neg_digits(Fraction(v, denominator), b)
        if d == 0:
            break
        out.append(d)
        v += 1
    return np.array(out, dtype=np.int64)


def _exp_digits_q(a: Fraction) -> DigitsFn:
    def digits(n: int) -> tuple[int, bool]:
        return exp_neg_digits(a, n), a == 0

    return digits


_LUT_BITS = 16


@lru_cache(maxsize=16)
def _geometric_lut(b: int, denominator: int) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """Bucket index on the top bits of a word: ``base[j] = #{v : D_v >= (j+1) 2^shift}``.

    Returns (padded table, base, shift, first bucket where at most ``cmax`` thresholds fall, cmax).
    """
    table = _geometric_table(b, denominator)
    shift = max(b - _LUT_BITS, 0)
    nb = 1 << (b - shift)
    tops = (np.arange(1, nb + 1, dtype=np.int64)) << shift  # upper end (exclusive) of each bucket
    rev = np.ascontiguousarray(table[::-1])
    base = (table.size - np.searchsorted(rev, tops, side="left")).astype(np.int64)  # D_v >= top
    low_end = np.arange(nb, dtype=np.int64) << shift
    inside = (table.size - np.searchsorted(rev, low_end, side="left")) - base  # D_v in [low, top)
    cmax = 3
    big = np.flatnonzero(inside > cmax)
    j0 = int(big.max()) + 1 if big.size else 0
    padded = np.concatenate((table, np.zeros(cmax + 1, dtype=np.int64)))
    return padded, base, shift, j0, cmax


def sample_geometric_exp(n: int, src: WordSource, denominator: int = 1) -> np.ndarray:
    r"""``n`` draws of V on {0, 1, ...} with :math:`P(V \ge v) = e^{-v/d}` (d = ``denominator``), exactly.

    Inversion, one word each: :math:`V = \max\{v : R < e^{-v/d}\}`. With
    :math:`D_v = \lfloor 2^b e^{-v/d}\rfloor` (non-increasing), the first word w decides every comparison
    with :math:`D_v \ne w`: ``w < D_v`` gives :math:`R < e^{-v/d}`, ``w > D_v`` the opposite, so
    :math:`V_0 = \#\{v : D_v > w\}` (found from a lookup on the top 16 bits of w and at most 3
    comparisons, or a binary search for the smallest words). The comparisons with :math:`D_v = w` (at most
    a few v, or every v past the table when w = 0) are resolved exactly, in order, by :class:`_LazyUniform`.
    With d = 1 this is CKS Algorithm 2's loop of Bernoulli(:math:`e^{-1}`) trials in one step.

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
    """
    b = src.bits
    padded, base, shift, j0, cmax = _geometric_lut(b, denominator)
    size = padded.size - cmax - 1
    w = src.words(n).astype(np.int64)
    j = w >> shift
    v0 = base[j]
    for _ in range(cmax):
        v0 += w < padded[v0]
    low = np.flatnonzero(j < j0)
    if low.size:
        rev = np.ascontiguousarray(padded[:size][::-1])
        v0[low] = size - np.searchsorted(rev, w[low], side="right")
    for i in np.flatnonzero(padded[v0] == w):
        lazy = _LazyUniform(int(w[i]), src)
        v = int(v0[i]) + 1
        while lazy.less(_exp_digits_q(Fraction(v, denominator))):
            v += 1
        v0[i] = v - 1
    return np.asarray(v0, dtype=np.int64)


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


def _bits(src: WordSource, n: int, length: int) -> np.ndarray:
    """``n`` uniform integers of ``length`` bits (1..63), uint64: word i gives bits ``b i`` and up."""
    b = src.bits
    v = src.words(n)
    for i in range(1, -(-length // b)):
        v |= src.words(n) << np.uint64(b * i)
    if length < b * (-(-length // b)):
        v &= np.uint64((1 << length) - 1)
    return v


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
    n, shape = _size_count(size)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    # acceptance: (1 - e^-1) for U, times 1 - P(-0) >= 1/2
    while filled < n:
        need = min(n - filled, _BLOCK)
        cand = _laplace_candidates(t, s, int(need * 1.6) + 16, src)[:need]
        out[filled : filled + cand.size] = cand
        filled += cand.size
    return out.reshape(shape)


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
        If ``sigma2`` or ``size`` is invalid.

    Notes
    -----
    Canonne, Kamath & Steinke 2020, Algorithm 3: :math:`t = \lfloor\sigma\rfloor + 1` (exact integer square
    root), Y from the discrete Laplace with scale t, accepted with probability
    :math:`\exp(-(|Y| - \sigma^2/t)^2/(2\sigma^2))` by :func:`bernoulli_exp` (exact).
    """
    s2 = _as_fraction("sigma2", sigma2, _MAX_SIGMA2)
    src = _source(rng, words)
    n, shape = _size_count(size)
    t = math.isqrt(s2.numerator // s2.denominator) + 1
    out = np.empty(n, dtype=np.int64)
    filled = 0
    rate = 0.5
    while filled < n:
        need = min(n - filled, _BLOCK)
        m = int(need / rate * 1.1) + 16
        y = _laplace_candidates(t, 1, m, src)
        g, err, exact = _gaussian_gamma(y, s2, t)
        acc = y[bernoulli_exp(g, err, exact, src)]
        rate = max(0.05, acc.size / m)
        take = acc[:need]
        out[filled : filled + take.size] = take
        filled += take.size
    return out.reshape(shape)


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
