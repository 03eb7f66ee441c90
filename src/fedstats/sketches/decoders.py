"""Decoders of the frequency moment ``F_alpha`` from a stable projection, with confidence intervals.

If ``e = P w`` with ``P`` an ``l x m`` matrix of i.i.d. unit-scale symmetric alpha-stable entries, then the
``e_k`` are i.i.d. ``F**(1/alpha) * S_k`` with ``F = F_alpha(w) = sum_j |w_j|**alpha`` and ``S_k`` unit-scale
stable. Two decoders are offered:

* :func:`geometric_mean_estimator` (Li 2008; Pang et al. 2023, Algorithm 1), any alpha in (0, 2]::

      F_hat = prod_k |e_k|**(alpha/l) / [ (2/pi) Gamma(alpha/l) Gamma(1 - 1/l) sin(pi alpha / (2 l)) ]**l

  unbiased for ``l >= 2``, computed in log space (the product of ``l`` powers under- or overflows for
  large ``l`` otherwise). Relative variance about ``pi^2 (2 + alpha^2) / (12 l)``, i.e. ``pi^2 / (2 l)`` at
  alpha = 2.
* :func:`mean_of_squares_estimator` for alpha = 2: ``F_hat = sum_k e_k^2 / (2 l)``, the maximum-likelihood
  (and minimum-variance unbiased) estimator, relative variance ``2 / l``: about ``pi^2 / 4 = 2.47`` times
  smaller than the geometric mean at the same ``l``.

Both give a confidence interval from the sampling distribution:

* mean of squares: ``sum_k e_k^2 / (2 F)`` is exactly chi-square with ``l`` degrees of freedom, so the
  interval ``[sum e^2 / (2 q_hi), sum e^2 / (2 q_lo)]`` (``q`` the chi-square quantiles) is exact;
* geometric mean: ``mean_k log|e_k| = log(F) / alpha + mean_k log|S_k|`` is a pivot: the mean of ``l``
  i.i.d. copies of ``log|S|``, whose cumulants follow from ``log E|S|^t`` (Zolotarev):
  ``E log|S| = gamma_e (1/alpha - 1)``, ``Var log|S| = pi^2 (1/alpha^2 + 1/2) / 6``,
  ``k3 = -2 zeta(3) (1 - 1/alpha^3)``, ``k4 = pi^4 (1/alpha^4 + 7/8) / 15``. The interval uses the
  Cornish-Fisher quantiles of that mean (normal plus skewness and kurtosis terms): an approximation,
  whose coverage is checked by Monte Carlo in ``tests/library/test_sketches_decoders.py``.

Examples
--------
>>> import numpy as np
>>> e = np.array([1.0, -2.0, 0.5, 3.0])
>>> round(mean_of_squares_estimator(e).estimate, 4)
1.7812
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedstats._numeric import chi2_isf, chi2_ppf, two_sided_z
from fedstats._validation import check_open_unit, check_real
from fedstats.errors import DataError, ParameterError
from fedstats.sketches.stable import check_alpha

__all__ = [
    "FrequencyMomentEstimate",
    "geometric_mean_estimator",
    "geometric_relative_standard_error",
    "log_abs_stable_mean",
    "log_abs_stable_variance",
    "mean_of_squares_estimator",
]

_EULER = float(np.euler_gamma)


@dataclass(frozen=True)
class FrequencyMomentEstimate:
    """A decoded frequency moment and its confidence interval.

    Attributes
    ----------
    estimate : float
        Unbiased estimate of ``F_alpha``.
    ci : tuple of float
        Confidence interval ``(low, high)`` at level ``confidence``.
    confidence : float
    relative_standard_error : float
        Theoretical ``sd(F_hat) / F`` at this ``l``.
    decoder : str
        ``"geometric"`` or ``"mean-of-squares"``.
    alpha : float
    encoding_size : int
    exact_ci : bool
        True when the interval is exact (mean of squares), False when approximate (geometric mean).
    """

    estimate: float
    ci: tuple[float, float]
    confidence: float
    relative_standard_error: float
    decoder: str
    alpha: float
    encoding_size: int
    exact_ci: bool


def _check_encoding(e: np.ndarray | list[float]) -> np.ndarray:
    arr = np.asarray(e, dtype=np.float64).ravel()
    if arr.size < 2:
        raise ParameterError("encoding_size", int(arr.size), "an integer >= 2")
    if not np.isfinite(arr).all():
        raise DataError("the aggregated encoding has a NaN or infinite value")
    return arr


def log_abs_stable_mean(alpha: float) -> float:
    """``E log|S|`` for a unit-scale symmetric alpha-stable ``S``: ``gamma_e (1/alpha - 1)``.

    Raises
    ------
    ParameterError
        If ``alpha`` is outside (0, 2].
    """
    a = check_alpha(alpha)
    return _EULER * (1.0 / a - 1.0)


def log_abs_stable_variance(alpha: float) -> float:
    """``Var log|S|`` for a unit-scale symmetric alpha-stable ``S``: ``pi^2 (1/alpha^2 + 1/2) / 6``.

    Raises
    ------
    ParameterError
        If ``alpha`` is outside (0, 2].
    """
    a = check_alpha(alpha)
    return math.pi**2 * (1.0 / a**2 + 0.5) / 6.0


def _exp(x: float) -> float:
    """``exp`` that returns ``inf`` instead of raising on overflow."""
    return math.exp(x) if x < 709.0 else math.inf


def _log_abs_cumulants(alpha: float) -> tuple[float, float, float, float]:
    """First four cumulants of ``log|S|``, from ``log E|S|^t = log[(2/pi) G(1 - t/a) G(t) sin(pi t / 2)]``."""
    a = alpha
    import scipy.special  # lazily: client modules import this package without scipy

    z3 = float(scipy.special.zeta(3.0))
    k1 = _EULER * (1.0 / a - 1.0)
    k2 = math.pi**2 / 6.0 * (1.0 / a**2 + 0.5)
    k3 = -2.0 * z3 * (1.0 - 1.0 / a**3)
    k4 = math.pi**4 / 15.0 * (1.0 / a**4 + 1.0 - 1.0 / 8.0)
    return k1, k2, k3, k4


def _mean_log_quantiles(alpha: float, ell: int, confidence: float) -> tuple[float, float]:
    """Cornish-Fisher quantiles ``(lower, upper)`` of ``mean_k log|S_k|`` over ``l`` i.i.d. terms."""
    k1, k2, k3, k4 = _log_abs_cumulants(alpha)
    g1 = k3 / k2**1.5 / math.sqrt(ell)
    g2 = k4 / k2**2 / ell
    z = two_sided_z(confidence)
    out = []
    for zp in (-z, z):
        w = (
            zp
            + (zp * zp - 1) * g1 / 6
            + (zp**3 - 3 * zp) * g2 / 24
            - (2 * zp**3 - 5 * zp) * g1 * g1 / 36
        )
        out.append(k1 + w * math.sqrt(k2 / ell))
    return out[0], out[1]


def _log_abs_moment(alpha: float, lam: float) -> float:
    """``log E|S|^lam`` for unit-scale symmetric alpha-stable ``S`` and ``-1 < lam < alpha``."""
    return (
        math.log(2.0 / math.pi)
        + math.lgamma(1.0 - lam / alpha)
        + math.lgamma(lam)
        + math.log(math.sin(math.pi * lam / 2.0))
    )


def geometric_relative_standard_error(alpha: float, ell: int) -> float:
    """Exact ``sd(F_hat) / F`` of the geometric-mean estimator (``inf`` when ``l <= 2``, infinite variance).

    ``Var(F_hat) / F^2 = [E|S|^(2 alpha / l)]^l / [E|S|^(alpha / l)]^(2 l) - 1`` (Li 2008, Lemma 2).
    """
    if ell <= 2:
        return math.inf
    r = ell * _log_abs_moment(alpha, 2 * alpha / ell) - 2 * ell * _log_abs_moment(
        alpha, alpha / ell
    )
    return math.sqrt(max(math.expm1(r), 0.0))


def _log_geometric_constant(alpha: float, ell: int) -> float:
    """``log D_l = l log[(2/pi) Gamma(alpha/l) Gamma(1 - 1/l) sin(pi alpha / (2 l))]`` (Li 2008)."""
    lam = alpha / ell
    val = (
        math.log(2.0 / math.pi)
        + math.lgamma(lam)
        + math.lgamma(1.0 - 1.0 / ell)
        + math.log(math.sin(math.pi * lam / 2.0))
    )
    return ell * val


def geometric_mean_estimator(
    e: np.ndarray | list[float],
    alpha: float,
    *,
    confidence: float = 0.95,
    resolution: float = 0.0,
) -> FrequencyMomentEstimate:
    """Li's geometric-mean estimator of ``F_alpha`` from an aggregated stable projection.

    Parameters
    ----------
    e : array_like of float, shape (l,)
        The aggregated encoding ``sum_i P u_i``; ``l >= 2``.
    alpha : float
        Stability of the projection, in (0, 2].
    confidence : float
        Level of the interval, in (0, 1).
    resolution : float
        Quantisation step of ``e`` (``2**-frac_bits`` after fixed point), >= 0. An entry rounded to exactly 0
        is then read as ``resolution / 4`` (the mean of ``|x|`` over its rounding cell is ``resolution / 4``)
        instead of making the whole product 0.

    Returns
    -------
    FrequencyMomentEstimate
        ``exact_ci`` is False: the interval uses Cornish-Fisher quantiles (skewness and kurtosis terms) of
        ``mean_k log|S_k|``; Monte Carlo coverage of the 95% interval was 0.945-0.959 for ``l`` from 2 to 50
        at alpha = 2 and 1.05 (4,000 draws each).

    Raises
    ------
    ParameterError
        If ``l < 2``, ``alpha`` is outside (0, 2] or ``confidence`` outside (0, 1).
    DataError
        If ``e`` has a non-finite value.

    Notes
    -----
    Li (SODA 2008), Lemma 1 and Eq. (8); Pang et al. 2023, Algorithm 1 (with alpha = 2 there). An
    encoding entry exactly zero (possible only with a zero vector or after fixed-point rounding) makes the
    estimate 0.
    """
    arr = _check_encoding(e)
    a = check_alpha(alpha)
    conf = check_open_unit("confidence", confidence)
    res = check_real("resolution", resolution, low=0.0)
    ell = int(arr.size)
    absv = np.abs(arr)
    if res > 0:
        absv = np.where(absv == 0.0, res / 4, absv)
    rel_se = geometric_relative_standard_error(a, ell)
    if np.any(absv == 0.0):
        return FrequencyMomentEstimate(0.0, (0.0, 0.0), conf, rel_se, "geometric", a, ell, False)
    mean_log = float(np.mean(np.log(absv)))
    log_est = a * mean_log - _log_geometric_constant(a, ell)
    # pivot: mean_k log|S_k| = mean_log - log(F) / alpha, quantiles by Cornish-Fisher
    q_lo, q_hi = _mean_log_quantiles(a, ell, conf)
    ci = (_exp(a * (mean_log - q_hi)), _exp(a * (mean_log - q_lo)))
    return FrequencyMomentEstimate(_exp(log_est), ci, conf, rel_se, "geometric", a, ell, False)


def mean_of_squares_estimator(
    e: np.ndarray | list[float], *, confidence: float = 0.95
) -> FrequencyMomentEstimate:
    """Maximum-likelihood estimator of ``F_2`` from a Gaussian (alpha = 2) projection, exact interval.

    Parameters
    ----------
    e : array_like of float, shape (l,)
        The aggregated encoding; entries are i.i.d. N(0, 2 F) (unit-scale 2-stable is N(0, 2)); ``l >= 2``.
    confidence : float
        Level of the interval, in (0, 1).

    Returns
    -------
    FrequencyMomentEstimate
        ``estimate = sum_k e_k^2 / (2 l)``, unbiased with relative standard error ``sqrt(2 / l)``; the
        interval inverts ``sum_k e_k^2 / (2 F) ~ chi^2_l`` and is exact.

    Raises
    ------
    ParameterError
        If ``l < 2`` or ``confidence`` is outside (0, 1).
    DataError
        If ``e`` has a non-finite value.

    Notes
    -----
    The project's replacement for Algorithm 1 of Pang et al. 2023 at alpha = 2 (PAPER_NOTES, 004): the
    geometric mean has relative variance about ``pi^2 / (2 l)`` against ``2 / l`` here.
    """
    arr = _check_encoding(e)
    conf = check_open_unit("confidence", confidence)
    ell = int(arr.size)
    ss = float(np.dot(arr, arr))
    tail = (1.0 - conf) / 2
    q_lo = float(chi2_ppf(tail, ell))
    q_hi = float(chi2_isf(tail, ell))
    return FrequencyMomentEstimate(
        ss / (2 * ell),
        (ss / (2 * q_hi), ss / (2 * q_lo)),
        conf,
        math.sqrt(2.0 / ell),
        "mean-of-squares",
        2.0,
        ell,
        True,
    )
