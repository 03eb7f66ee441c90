r"""Exact Bernoulli trials of probability :math:`e^{-\gamma}` (rational :math:`\gamma`) and geometric draws.

These are the building blocks of the exact discrete Laplace and discrete Gaussian samplers
(:mod:`fedstats.privacy.mechanisms.samplers`), after Canonne, Kamath & Steinke (NeurIPS 2020, "The
Discrete Gaussian for Differential Privacy"):

* **Algorithm 1**, Bernoulli(:math:`e^{-\gamma}`) for rational :math:`\gamma \in [0, 1]`: run Bernoulli
  (:math:`\gamma/K`) trials for K = 1, 2, ... until the first failure and return 1 iff that K is odd; for
  :math:`\gamma > 1`, :math:`e^{-\gamma} = e^{-a} e^{-(\gamma - a)}` with an integer a
  (:func:`bernoulli_exp`, :func:`bernoulli_exp_int`).
* The geometric V with :math:`P(V \ge v) = e^{-v/d}`, by inversion from one word (:func:`sample_geometric_exp`).

**How each random decision is made (no float log or exp anywhere).** Every Bernoulli(p) is the event
``R < p`` for a uniform real R in [0, 1) whose binary digits are drawn lazily, one ``bits``-bit word at a time
(:class:`~fedstats.privacy.mechanisms.words.WordSource`, 53 bits per word from the generator by default).
After the first word w, :math:`R \in [w, w+1) 2^{-b}`: if that interval lies below (above) p the answer is 1
(0); only when p lies inside it are more words drawn and compared with more digits of p, computed exactly
(integers and :class:`~fractions.Fraction`; for :math:`e^{-a}`, integer a, from rational Taylor bounds,
:func:`exp_neg_digits`). So the answer is *exactly* ``R < p`` and :math:`P = p` exactly. To decide the first
word of the many elements of an array at once, p is also evaluated in binary64 with only +, -, *, /
(correctly rounded, IEEE 754) together with a rigorous bound on its error; an element whose first word is not
decided by that certified interval goes to the exact path (probability about :math:`2^{-48}` per trial). The
float is a filter: it never changes an answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache

import numpy as np

from fedstats.errors import OverflowRiskError
from fedstats.privacy.mechanisms.words import WordSource

__all__ = [
    "DigitsFn",
    "bernoulli_exp",
    "bernoulli_exp_int",
    "exp_neg_digits",
    "sample_geometric_exp",
]

_REL = (
    2.0**-49
)  # relative slack added to every certified float bound (covers a few roundings of 2^-53)
_TINY = 2.0**-1020  # absolute slack (subnormal range)


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


def _exp_digits(a: int | Fraction) -> DigitsFn:
    """The digits of :math:`e^{-a}` for rational a >= 0 (:func:`exp_neg_digits`)."""

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
        while lazy.less(_exp_digits(Fraction(v, denominator))):
            v += 1
        v0[i] = v - 1
    return np.asarray(v0, dtype=np.int64)
