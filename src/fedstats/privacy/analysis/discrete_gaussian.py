r"""Exact (epsilon, delta) of the discrete Gaussian mechanism on the integers.

Adding :math:`Y \sim N_{\mathbb Z}(0, \sigma^2)` to an integer query of sensitivity :math:`\Delta \in \mathbb Z`
is :math:`(\varepsilon, \delta)`-DP exactly when (Canonne, Kamath, Steinke 2020, Theorem 7)

.. math::

    \delta \ge P[Y > m] - e^{\varepsilon} P[Y > m + \Delta], \qquad m = \frac{\varepsilon\sigma^2}{\Delta}
    - \frac{\Delta}{2}.

With :math:`f(k) = e^{-k^2/(2\sigma^2)}` and :math:`K = \lfloor m \rfloor + 1`, the identity
:math:`e^{\varepsilon} f(k + \Delta) = f(k)\, e^{-\Delta (k - m)/\sigma^2}` turns the right-hand side into a sum
of positive terms, :math:`\sum_{k \ge K} f(k)\,(1 - e^{-\Delta(k - m)/\sigma^2}) / Z`, evaluated directly
(relative to :math:`f(K)`, in log space) for :math:`\sigma \le 300`, and by the Euler-Maclaurin formula
(integral in erfcx form plus three derivative corrections, relative error far below 1e-14 there) above.
The normaliser :math:`Z = \sigma\sqrt{2\pi}\,\vartheta` uses Poisson summation,
:math:`\vartheta = 1 + 2\sum_{j \ge 1} e^{-2\pi^2\sigma^2 j^2}`. The discrete Gaussian is also
:math:`\Delta^2/(2\sigma^2)`-zCDP (Theorem 4), like the continuous one; its (epsilon, delta) curve is close to,
but not always below, the continuous one, so it is computed rather than assumed.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.special as sc

from fedstats._numeric import bisect_safe
from fedstats._validation import check_epsilon_delta, check_int, check_real
from fedstats.errors import ParameterError
from fedstats.privacy.analysis.gaussian import _erfcx_diff, analytic_gaussian_sigma
from fedstats.privacy.analysis.zcdp import gaussian_rho

__all__ = [
    "discrete_gaussian_delta",
    "discrete_gaussian_log_delta",
    "discrete_gaussian_rho",
    "discrete_gaussian_sigma",
    "discrete_gaussian_variance",
]

_SQRT2 = math.sqrt(2.0)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_DIRECT_MAX_SIGMA = 300.0


def _log_theta(sigma: float) -> float:
    """Log of sum_k exp(-k^2/(2 s^2)) / (s sqrt(2 pi)) by Poisson summation."""
    j = np.arange(1, 6, dtype=np.float64)
    return math.log1p(2.0 * float(np.exp(-2.0 * math.pi**2 * sigma**2 * j * j).sum()))


def _log_z(sigma: float) -> float:
    if sigma < 0.5:  # Poisson summation converges slowly; sum directly (terms vanish fast)
        k = np.arange(-40, 41, dtype=np.float64)
        return float(np.log(np.exp(-k * k / (2.0 * sigma * sigma)).sum()))
    return math.log(sigma * _SQRT_2PI) + _log_theta(sigma)


def _em_corr(kk: float, s2: float) -> float:
    """Euler-Maclaurin corrections, relative to f(K), of sum_{k >= K} f(k) beyond the integral."""
    a = kk / s2
    d1 = -a
    d3 = -(a**3) + 3.0 * a / s2
    d5 = -(a**5) + 10.0 * a**3 / s2 - 15.0 * a / s2**2
    return 0.5 - d1 / 12.0 + d3 / 720.0 - d5 / 30240.0


def _log_tail(big_k: int, sigma: float) -> float:
    """Log of sum_{k >= K} exp(-k^2 / (2 sigma^2)) for an integer K >= 1."""
    s2 = sigma * sigma
    if sigma <= _DIRECT_MAX_SIGMA:
        k = np.arange(big_k, big_k + int(40.0 * sigma + 50.0) + 1, dtype=np.float64)
        logf = -(k * k) / (2.0 * s2)
        top = float(logf[0])
        return top + math.log(float(np.exp(logf - top).sum()))
    x = big_k / (_SQRT2 * sigma)
    integral = sigma * math.sqrt(math.pi / 2.0) * float(sc.erfcx(x))
    return -x * x + math.log(integral + _em_corr(float(big_k), s2))


def discrete_gaussian_log_delta(epsilon: float, sigma: float, sensitivity: int) -> float:
    """Log of the exact delta of Theorem 7 (no validation; see :func:`discrete_gaussian_delta`)."""
    s2 = sigma * sigma
    dlt = float(sensitivity)
    m = epsilon * s2 / dlt - dlt / 2.0
    big_k = math.floor(m) + 1
    if big_k <= 0:
        # m < 0: delta = P[Y >= K] - e^eps P[Y >= K + Delta] is not small here (see module notes), so the
        # two probabilities are computed separately; K + Delta >= Delta / 2 > 0.
        log_z = _log_z(sigma)
        first = -math.expm1(_log_tail(1 - big_k, sigma) - log_z)  # P[Y >= K] = 1 - P[Y >= 1 - K]
        second = math.exp(min(epsilon + _log_tail(big_k + sensitivity, sigma) - log_z, 700.0))
        value = first - second
        return math.log(value) if value > 0.0 else -math.inf
    if sigma <= _DIRECT_MAX_SIGMA:
        span = int(40.0 * sigma + 50.0)
        k = np.arange(big_k, big_k + span + 1, dtype=np.float64)
        logf = -(k * k - float(big_k) ** 2) / (2.0 * s2)
        w = np.exp(logf) * -np.expm1(-dlt * (k - m) / s2)
        total = float(w.sum())
        if total <= 0.0:
            return -math.inf
        return -(float(big_k) ** 2) / (2.0 * s2) + math.log(total) - _log_z(sigma)
    # Euler-Maclaurin: sum_{k>=K} g(k) = int_K^inf g + g(K)/2 - sum_j B_2j/(2j)! g^(2j-1)(K), applied to
    # f(k) and to e^eps f(k + Delta) = f(k) exp(-Delta (k - m) / s2) separately.
    x = big_k / sigma
    y = (big_k + dlt) / sigma
    theta = dlt * (big_k - m) / s2  # in (0, Delta / s2]
    # (1/2) e^{-x^2/2} [erfcx(x/r2) - e^{-theta} erfcx(y/r2)], factor e^{-x^2/2} kept apart.
    integral = 0.5 * (
        _erfcx_diff((2.0 * big_k + dlt) / (2.0 * _SQRT2 * sigma), dlt / (_SQRT2 * sigma))
        - math.expm1(-theta) * float(sc.erfcx(y / _SQRT2))
    )

    corrections = (_em_corr(float(big_k), s2) - math.exp(-theta) * _em_corr(big_k + dlt, s2)) / (
        sigma * _SQRT_2PI
    )
    total = integral + corrections
    if total <= 0.0:
        return -math.inf
    return -0.5 * x * x + math.log(total) - _log_theta(sigma)


def discrete_gaussian_delta(*, epsilon: float, sigma: float, sensitivity: int) -> float:
    r"""Exact delta of adding discrete Gaussian noise :math:`N_{\mathbb Z}(0, \sigma^2)` (CKS 2020, Thm. 7).

    Parameters
    ----------
    epsilon : float
        In (0, inf).
    sigma : float
        Scale parameter of the discrete Gaussian (square root of ``sigma2`` of
        :func:`~fedstats.privacy.mechanisms.sample_discrete_gaussian`), in (0, 1e11].
    sensitivity : int
        Integer L1 = L2 sensitivity of the (scalar, integer-valued) query, >= 1.

    Returns
    -------
    float
        delta in [0, 1].

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """
    eps = check_real("epsilon", epsilon, low=0.0, high=math.inf, low_open=True, high_open=True)
    sig = check_real("sigma", sigma, low=0.0, high=1e11, low_open=True)
    sens = check_int("sensitivity", sensitivity, low=1)
    return min(1.0, math.exp(discrete_gaussian_log_delta(eps, sig, sens)))


def discrete_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: int) -> float:
    r"""Smallest discrete Gaussian sigma (to a relative 1e-12) giving (epsilon, delta)-DP (CKS 2020, Thm. 7).

    Starts from the analytic continuous calibration (Balle & Wang 2018), brackets the exact discrete
    condition and bisects in log sigma; the returned sigma satisfies
    ``discrete_gaussian_delta(...) <= delta``.

    Parameters
    ----------
    epsilon, delta : float
        The (epsilon, delta)-DP target: epsilon in (0, inf), delta in (0, 1)
        (:func:`~fedstats._validation.check_epsilon_delta`).
    sensitivity : int
        Integer sensitivity, >= 1.

    Returns
    -------
    float
        sigma (the sampler's ``sigma2`` is its square).

    Raises
    ------
    ParameterError
        If a parameter is outside its range or sigma would exceed 1e11.
    """
    eps, dlt = check_epsilon_delta(epsilon, delta)
    sens = check_int("sensitivity", sensitivity, low=1)
    target = math.log(dlt)
    s0 = analytic_gaussian_sigma(epsilon=eps, delta=dlt, sensitivity=float(sens))

    def ok(s: float) -> bool:
        # margin for rounding in the evaluation (relative 1e-13 of log delta, far above its error)
        return discrete_gaussian_log_delta(eps, s, sens) + 1e-13 * (1.0 + abs(target)) <= target

    lo, hi = s0, s0
    step = 1.0 + 1e-6
    while not ok(hi):
        lo, hi = hi, hi * step
        step = step * step
        if hi > 1e11:
            raise ParameterError("delta", delta, "a target reachable with sigma <= 1e11")
    while ok(lo):
        hi, lo = lo, lo / 2.0 if lo / 2.0 > 0 else lo
        if lo < 1e-300:
            return hi
    # Invariant: ok(hi), not ok(lo). (delta is monotone in sigma up to the floor in m; bisection finds a
    # sigma that satisfies the condition, which is what privacy needs.)
    return bisect_safe(ok, lo, hi, rel_tol=1e-13)


def discrete_gaussian_rho(*, sigma: float, sensitivity: float) -> float:
    r"""ZCDP rho of independent :math:`N_{\mathbb Z}(0, \sigma^2)` noise on each integer coordinate.

    For integer shifts, :math:`D_\alpha(N_{\mathbb Z}(\mu, \sigma^2) \| N_{\mathbb Z}(\nu, \sigma^2)) \le
    \alpha(\mu - \nu)^2/(2\sigma^2)` (Canonne, Kamath, Steinke 2020, Prop. 5 / Thm. 4), and Rényi
    divergences of product distributions add over coordinates, so a d-dimensional integer query whose L2
    sensitivity is at most ``sensitivity`` is :math:`\Delta^2/(2\sigma^2)`-zCDP, as in the continuous case.

    Parameters
    ----------
    sigma : float
        In (0, inf).
    sensitivity : float
        Bound on the L2 norm of the (integer) difference between neighbouring queries, in [0, inf).

    Returns
    -------
    float
        rho.

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """
    return gaussian_rho(sigma=sigma, sensitivity=sensitivity)


def discrete_gaussian_variance(sigma: float) -> float:
    """Variance of the discrete Gaussian with parameter ``sigma`` (slightly below ``sigma**2``).

    Summed exactly for ``sigma <= 10``; above, it equals ``sigma**2`` to a relative ``exp(-2 pi^2 sigma^2)``
    (Canonne, Kamath & Steinke 2020, Prop. 19), far below double precision.

    Parameters
    ----------
    sigma : float
        In (0, inf).

    Returns
    -------
    float
    """
    s = check_real("sigma", sigma, low=0.0, high=math.inf, low_open=True, high_open=True)
    if s > 10.0:
        return s * s
    k = np.arange(-int(40 * s) - 10, int(40 * s) + 11, dtype=np.float64)
    w = np.exp(-(k * k) / (2.0 * s * s))
    return float((k * k * w).sum() / w.sum())
