"""Small numeric helpers shared across layers: rounding, apportionment, bisection, two distributions.

Each exists once here so that every caller rounds the same way: rounding to integers is round-half-to-even
or unbiased randomized rounding (the rule of every fixed-point encoding, :mod:`fedstats.secagg.quantize`,
and of the local mechanisms' release grids, which sit in the lowest layer), apportionment sums exactly to
its total, and bisection returns the end of the bracket on which the caller's condition holds (the *safe*
side: a noise scale that is private, a budget that is not exceeded), never a midpoint that might not
satisfy it.

The distribution functions (:func:`norm_ppf`, :func:`two_sided_z`, :func:`norm_sf`, :func:`chi2_sf`, :func:`chi2_isf`,
:func:`chi2_ppf`, :func:`chi2_pdf`) call the :mod:`scipy.special` kernels that :mod:`scipy.stats` itself
calls for these distributions, so their values are scipy.stats' to the bit
(``tests/library/test_numeric_distributions.py`` checks them on grids), without importing
:mod:`scipy.stats`, which loads several hundred modules more than :mod:`scipy.special`. A server that
releases FED-chi^2 or FED-H results therefore never loads it (issue 40: the server's memory; the server's
resident memory at start is in ``benchmarks/results/service_connections.json``, ``rss_before_mib``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstats._validation import check_int
from fedstats.errors import ParameterError

if TYPE_CHECKING:
    from fedstats.randomness import RNG

__all__ = [
    "bisect_safe",
    "chi2_isf",
    "chi2_pdf",
    "chi2_ppf",
    "chi2_sf",
    "largest_remainder",
    "norm_ppf",
    "norm_sf",
    "round_to_integers",
    "two_sided_z",
]


def round_to_integers(values: np.ndarray, rng: RNG | None = None) -> np.ndarray:
    """Round reals to integers: half to even, or unbiased randomized rounding when ``rng`` is given.

    Randomized rounding rounds ``x`` up with probability ``x - floor(x)`` (one ``rng.random`` draw per
    entry, ``U < x - floor(x)``), so ``E[round(x)] = x``; deterministic rounding draws nothing.

    Parameters
    ----------
    values : numpy.ndarray of float64
        Finite reals, any shape.
    rng : numpy.random.Generator or SecureGenerator, optional
        Randomness for randomized rounding; None rounds half to even (:func:`numpy.rint`).

    Returns
    -------
    numpy.ndarray
        float64, same shape as ``values``, integer-valued.

    Examples
    --------
    >>> round_to_integers(np.array([0.5, 1.5, -2.5])).tolist()
    [0.0, 2.0, -2.0]
    >>> q = round_to_integers(np.full(100_000, 0.25), np.random.default_rng(0))
    >>> sorted(set(q.tolist())), bool(abs(q.mean() - 0.25) < 0.01)
    ([0.0, 1.0], True)
    """
    if rng is None:
        out: np.ndarray = np.rint(values)
        return out
    low = np.floor(values)
    up = np.asarray(rng.random(low.shape)) < (values - low)
    rounded: np.ndarray = low + up
    return rounded


def largest_remainder(total: int, weights: Any) -> np.ndarray:
    """Split the integer ``total`` in proportion to ``weights``, exactly (largest-remainder method).

    Each count is ``floor(total * w_k / sum(w))``, plus one for the entries with the largest remainders
    (ties to the lower index), so the counts sum to ``total`` and each lies within 1 of its quota
    (Hamilton's method).

    Parameters
    ----------
    total : int
        Non-negative total.
    weights : array_like, shape (k,)
        Finite, non-negative weights with a positive sum.

    Returns
    -------
    numpy.ndarray
        ``(k,)`` int64 counts summing to ``total``.

    Raises
    ------
    ParameterError
        If ``total`` is negative or the weights are not finite, non-negative with a positive sum.

    Examples
    --------
    >>> largest_remainder(10, [1, 1, 1]).tolist()
    [4, 3, 3]
    """
    t = check_int("total", total, low=0)
    w = np.asarray(weights, dtype=np.float64).ravel()
    if w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ParameterError("weights", weights, "finite non-negative weights with a positive sum")
    quota = t * (w / w.sum())
    base: np.ndarray = np.minimum(np.floor(quota).astype(np.int64), t)
    short = t - int(base.sum())
    if short > 0:
        rem = quota - base
        order = np.lexsort((np.arange(w.size), -rem))
        base[order[:short]] += 1
    return base


def bisect_safe(
    ok: Callable[[float], bool],
    lo: float,
    hi: float,
    *,
    log: bool = False,
    rel_tol: float = 1e-13,
    max_iter: int = 400,
) -> float:
    """Bisect a monotone condition and return the end of the bracket on which it holds.

    Invariant: ``ok(hi)`` is true and ``ok(lo)`` false (either orientation: if ``ok(lo)`` holds and
    ``ok(hi)`` does not, the roles swap). The bracket shrinks until its ends agree to ``rel_tol``; the
    returned value always satisfies ``ok`` (the safe side), so rounding never crosses the boundary.

    Parameters
    ----------
    ok : callable
        ``ok(x) -> bool``, monotone on ``[lo, hi]``.
    lo, hi : float
        Bracket ends, finite; positive when ``log`` is true.
    log : bool, default False
        Bisect in ``log x`` (geometric midpoints), for scales spanning many orders of magnitude.
    rel_tol : float, default 1e-13
        Relative width at which to stop, in (0, 1).
    max_iter : int, default 400
        Iteration cap, >= 1.

    Returns
    -------
    float
        A point at which ``ok`` holds, within ``rel_tol`` (relative) of the boundary.

    Raises
    ------
    ParameterError
        If the bracket is invalid or ``ok`` has the same value at both ends.

    Examples
    --------
    >>> x = bisect_safe(lambda s: s * s >= 2.0, 1.0, 2.0)
    >>> x * x >= 2.0, abs(x - math.sqrt(2)) < 1e-12
    (True, True)
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo == hi:
        raise ParameterError("bracket", (lo, hi), "two distinct finite ends")
    if log and (lo <= 0 or hi <= 0):
        raise ParameterError("bracket", (lo, hi), "positive ends when log=True")
    good, bad = (hi, lo) if ok(hi) else (lo, hi)
    if ok(bad):
        raise ParameterError("bracket", (lo, hi), "ends on which the condition differs")
    for _ in range(check_int("max_iter", max_iter, low=1)):
        if abs(good - bad) <= rel_tol * max(abs(good), abs(bad)):
            break
        mid = math.sqrt(good * bad) if log else 0.5 * (good + bad)
        if mid in (good, bad):
            break
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


_Z_TABLE: dict[float, float] = {
    0.8: 1.2815515655446004,
    0.9: 1.6448536269514722,
    0.95: 1.959963984540054,
    0.98: 2.3263478740408408,
    0.99: 2.5758293035489004,
    0.999: 3.2905267314919255,
}
"""``ndtri(0.5 + confidence / 2)`` for the usual levels, as scipy computes it (tests/library/test_bitpushing.py
checks the table against scipy): an interval at these levels imports no scipy."""


def two_sided_z(confidence: float) -> float:
    """The two-sided standard normal quantile ``z`` with ``P(|Z| <= z) = confidence``.

    ``ndtri(0.5 + confidence / 2)`` (:func:`norm_ppf`), read from :data:`_Z_TABLE` at the usual levels.

    Parameters
    ----------
    confidence : float
        Level of the interval, in (0, 1) (checked by the caller).

    Returns
    -------
    float
        ``z`` > 0 (1.959963984540054 at 0.95).
    """
    z = _Z_TABLE.get(confidence)
    if z is not None:
        return z
    return float(norm_ppf(0.5 + confidence / 2.0))


def norm_ppf(q: Any) -> Any:
    """The standard normal quantile, ``scipy.stats.norm.ppf(q)`` (:func:`scipy.special.ndtri`).

    Parameters
    ----------
    q : float or numpy.ndarray of float64
        Probabilities in [0, 1].

    Returns
    -------
    float or numpy.ndarray of float64
        ``x`` with ``P(Z <= x) = q``; -inf at 0, inf at 1.
    """
    import scipy.special  # lazily: client modules import this one without scipy

    return scipy.special.ndtri(q)


def norm_sf(x: Any) -> Any:
    """The standard normal upper tail ``P(Z > x)``, ``scipy.stats.norm.sf(x)`` (``ndtr(-x)``).

    Parameters
    ----------
    x : float or numpy.ndarray of float64
        Any reals.

    Returns
    -------
    float or numpy.ndarray of float64
        In [0, 1].
    """
    import scipy.special

    return scipy.special.ndtr(-np.asarray(x, dtype=float))


def chi2_sf(x: Any, df: Any) -> Any:
    """The chi-square upper tail ``P(X > x)``, ``scipy.stats.chi2.sf(x, df)`` (:func:`scipy.special.chdtrc`).

    Parameters
    ----------
    x : float or numpy.ndarray of float64
        Values, >= 0 (a negative ``x`` gives 1).
    df : float or numpy.ndarray
        Degrees of freedom, > 0.

    Returns
    -------
    float or numpy.ndarray of float64
        In [0, 1].
    """
    import scipy.special

    return scipy.special.chdtrc(df, np.maximum(np.asarray(x, dtype=float), 0.0))


def chi2_isf(q: Any, df: Any) -> Any:
    """The chi-square upper quantile, ``scipy.stats.chi2.isf(q, df)`` (:func:`scipy.special.chdtri`).

    Parameters
    ----------
    q : float or numpy.ndarray of float64
        Upper-tail probabilities in (0, 1).
    df : float or numpy.ndarray
        Degrees of freedom, > 0.

    Returns
    -------
    float or numpy.ndarray of float64
        ``x`` with ``P(X > x) = q``.
    """
    import scipy.special

    return scipy.special.chdtri(df, q)


def chi2_ppf(q: Any, df: Any) -> Any:
    """The chi-square quantile, ``scipy.stats.chi2.ppf(q, df)`` (``2 gammaincinv(df / 2, q)``).

    Parameters
    ----------
    q : float or numpy.ndarray of float64
        Probabilities in (0, 1).
    df : float or numpy.ndarray
        Degrees of freedom, > 0.

    Returns
    -------
    float or numpy.ndarray of float64
        ``x`` with ``P(X <= x) = q``.
    """
    import scipy.special

    return 2 * scipy.special.gammaincinv(np.asarray(df) / 2, q)


def chi2_pdf(x: Any, df: Any) -> Any:
    """The chi-square density, ``scipy.stats.chi2.pdf(x, df)`` (from its log, as scipy computes it).

    Parameters
    ----------
    x : float or numpy.ndarray of float64
        Values, > 0.
    df : float or numpy.ndarray
        Degrees of freedom, > 0.

    Returns
    -------
    float or numpy.ndarray of float64
        The density at ``x``.
    """
    import scipy.special

    df = np.asarray(df, dtype=float)
    log_pdf = (
        scipy.special.xlogy(df / 2.0 - 1, x)
        - np.asarray(x) / 2.0
        - scipy.special.gammaln(df / 2.0)
        - (np.log(2) * df) / 2.0
    )
    return np.exp(log_pdf)
