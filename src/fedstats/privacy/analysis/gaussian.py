r"""Calibration of the Gaussian mechanism: analytic (exact) and classical.

The Gaussian mechanism releases :math:`f(x) + N(0, \sigma^2)` for a query of L2 sensitivity
:math:`\Delta`. Balle & Wang (ICML 2018, Theorem 8) show it is :math:`(\varepsilon, \delta)`-DP if and only if

.. math::

    \delta \ge \Phi\left(\frac{\Delta}{2\sigma} - \frac{\varepsilon\sigma}{\Delta}\right)
        - e^{\varepsilon}\,\Phi\left(-\frac{\Delta}{2\sigma} - \frac{\varepsilon\sigma}{\Delta}\right).

Their Algorithm 1 (and paper 000's copy of it, which has a typo in :math:`\alpha`) finds the smallest such
:math:`\sigma`, but the published code and diffprivlib evaluate :math:`\Phi` as ``(1 + erf(t/sqrt 2))/2``,
which loses every digit in the far tail. Here, with :math:`s = \sigma/\Delta`, :math:`a = 1/(2s)`,
:math:`b = \varepsilon s` and :math:`u = (b - a)/\sqrt 2`, :math:`v = (b + a)/\sqrt 2`, the identity
:math:`\varepsilon = 2ab` turns the right-hand side into

.. math::

    \delta(s) = \tfrac12 e^{-u^2}\left[\operatorname{erfcx}(u) - \operatorname{erfcx}(v)\right],

whose logarithm is computed without overflow or cancellation of the exponentials (a Taylor expansion of
the difference around :math:`b/\sqrt 2` in the exact width :math:`\sqrt 2 a` is used when it is small). Its derivative is
:math:`d\delta/ds = -\varphi(b - a)/s^2`, so :math:`d\log\delta/d\log s = -\sqrt{2/\pi}/(s\,[\operatorname{erfcx}(u) -
\operatorname{erfcx}(v)])`, and a safeguarded Newton iteration in :math:`(\log s, \log\delta)` converges
in a handful of steps. The returned :math:`\sigma` is then moved up, ulp by ulp, until the evaluated
:math:`\delta`, plus a bound on its rounding error, is at most the target.

Examples
--------
>>> sigma = analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0)
>>> round(sigma, 6)
3.730632
>>> analytic_gaussian_delta(epsilon=1.0, sigma=sigma, sensitivity=1.0) <= 1e-5
True
>>> classical_gaussian_sigma(epsilon=0.5, delta=1e-5, sensitivity=1.0) > 2 * sigma
True

References
----------
B. Balle, Y.-X. Wang. Improving the Gaussian Mechanism for Differential Privacy: Analytical Calibration and
Optimal Denoising. ICML 2018, Theorem 8 and Algorithm 1.
C. Dwork, A. Roth. The Algorithmic Foundations of Differential Privacy, 2014, Theorem A.1 (classical).
"""

from __future__ import annotations

import math
import sys
import warnings

import scipy.special as sc

from fedstats._validation import check_open_unit, check_real
from fedstats.errors import ParameterError

__all__ = [
    "PrivacyWarning",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "analytic_gaussian_sigma",
    "classical_gaussian_sigma",
]

_SQRT2 = math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


class PrivacyWarning(UserWarning):
    """A privacy guarantee is used outside the range where it is proven (e.g. classical Gaussian, eps >= 1)."""


def _erfcx_diff(m: float, h: float) -> float:
    """Return ``erfcx(m - h/2) - erfcx(m + h/2)`` for ``h > 0``, accurately also when ``h`` is tiny.

    The midpoint ``m`` and the width ``h`` are passed separately because ``v - u`` computed from two rounded
    endpoints would lose ``log10(m / h)`` digits. A Taylor expansion around ``m`` is used when
    ``h < 1e-3 * max(1, |m|)``: the odd derivatives follow from ``y' = 2 x y - 2/sqrt(pi)`` and
    ``y^(n+1) = 2 x y^(n) + 2 n y^(n-1)``; the first omitted term is below 1e-19 relative.
    """
    if h < 1e-3 * max(1.0, abs(m)):
        y0 = float(sc.erfcx(m))
        y1 = 2.0 * m * y0 - _TWO_OVER_SQRT_PI
        y2 = 2.0 * m * y1 + 2.0 * y0
        y3 = 2.0 * m * y2 + 4.0 * y1
        y4 = 2.0 * m * y3 + 6.0 * y2
        y5 = 2.0 * m * y4 + 8.0 * y3
        return -(h * y1 + h**3 * y3 / 24.0 + h**5 * y5 / 1920.0)
    return float(sc.erfcx(m - 0.5 * h)) - float(sc.erfcx(m + 0.5 * h))


def _log_delta(s: float, epsilon: float) -> tuple[float, float, float]:
    """Return ``(log delta(s), d log delta / d log s, bound on the absolute error of log delta)``.

    ``s = sigma / sensitivity`` (Balle & Wang 2018, Thm. 8). The error bound is a conservative
    first-order estimate (a few ulps of each rounded quantity, amplified by the cancellation in the
    erfcx difference); callers that must never exceed a target delta use it as a margin.
    """
    a = 0.5 / s
    b = epsilon * s
    ulp = 2.0**-52
    if b - a >= -1.0:
        u = (b - a) / _SQRT2
        m = b / _SQRT2
        h = _SQRT2 * a
        diff = _erfcx_diff(m, h)
        if diff <= 0.0:  # only when the result underflows every representable scale
            return -math.inf, -math.inf, 0.0
        cancel = 1.0 if h < 1e-3 * max(1.0, abs(m)) else 1.0 + max(1.0, abs(m)) / h
        err = ulp * (8.0 + 4.0 * u * u + 8.0 * cancel)
        return -u * u + math.log(0.5 * diff), -_SQRT_2_OVER_PI / (s * diff), err
    # Far from the tail (delta > Phi(1) - ..., close to 1): ndtr is accurate there.
    first = float(sc.ndtr(a - b))
    second = 0.5 * math.exp(-0.5 * (b - a) ** 2) * float(sc.erfcx((a + b) / _SQRT2))
    delta = first - second
    dens = math.exp(-0.5 * (b - a) ** 2) / math.sqrt(2.0 * math.pi)
    err = ulp * 8.0 * (1.0 + (first + second) / delta)
    return math.log(delta), -dens / (s * delta), err


def _check_common(epsilon: float, sensitivity: float) -> tuple[float, float]:
    eps = check_real("epsilon", epsilon, low=0.0, high=math.inf, low_open=True, high_open=True)
    if eps < sys.float_info.min:  # subnormal: the calibration's tail arithmetic cannot resolve it
        raise ParameterError(
            "epsilon",
            epsilon,
            f"a real number in [{sys.float_info.min:g}, inf) (a subnormal epsilon has too few "
            "significant bits to calibrate the noise)",
        )
    sens = check_real(
        "sensitivity", sensitivity, low=0.0, high=math.inf, low_open=True, high_open=True
    )
    return eps, sens


def analytic_gaussian_delta(*, epsilon: float, sigma: float, sensitivity: float) -> float:
    r"""Exact delta of the Gaussian mechanism with noise ``sigma`` at ``epsilon`` (Balle & Wang 2018, Thm. 8).

    Parameters
    ----------
    epsilon : float
        Privacy parameter, in (0, inf).
    sigma : float
        Standard deviation of the Gaussian noise, in (0, inf), same units as ``sensitivity``.
    sensitivity : float
        L2 sensitivity of the query, in (0, inf).

    Returns
    -------
    float
        The smallest delta in [0, 1] such that the mechanism is (epsilon, delta)-DP. Values below the
        smallest double underflow to 0.0.

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """
    eps, sens = _check_common(epsilon, sensitivity)
    sig = check_real("sigma", sigma, low=0.0, high=math.inf, low_open=True, high_open=True)
    log_d, _, _ = _log_delta(sig / sens, eps)
    return min(1.0, math.exp(log_d))


def analytic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    r"""Smallest noise standard deviation giving (epsilon, delta)-DP (Balle & Wang 2018, Thm. 8, Alg. 1).

    Solves :math:`\delta(\sigma) = \delta` in log space (see the module docstring) to a relative error
    below 1e-12 (tested against a 50-digit mpmath solver to 1e-10 over epsilon in [1e-3, 1e3] and delta
    in [1e-300, 1)), then rounds up so that ``analytic_gaussian_delta(epsilon, sigma, sensitivity)`` is
    never above ``delta``.

    Parameters
    ----------
    epsilon : float
        Privacy parameter, in (0, inf). Any value is allowed, unlike the classical calibration.
    delta : float
        Target delta, in (0, 1).
    sensitivity : float
        L2 sensitivity of the query, in (0, inf).

    Returns
    -------
    float
        sigma, in the units of ``sensitivity``.

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """
    eps, sens = _check_common(epsilon, sensitivity)
    dlt = check_open_unit("delta", delta)
    target = math.log(dlt)
    # Start near the tail approximation b - a = sqrt(2 log(1/delta)), i.e. eps s - 1/(2 s) = c.
    c = math.sqrt(2.0 * max(-target, 1e-3))
    s0 = (c + math.sqrt(c * c + 2.0 * eps)) / (2.0 * eps)
    t = math.log(s0)
    lo, hi = -math.inf, math.inf  # t below lo: delta > target; above hi: delta < target
    for _ in range(200):
        g, dg, _ = _log_delta(math.exp(t), eps)
        g -= target
        if g > 0.0:
            lo = t
        else:
            hi = t
        if g == 0.0:
            break
        step = -g / dg if math.isfinite(dg) and dg < 0.0 else math.nan
        # Newton converges quadratically: once a step is below 1e-13 (relative sigma), the next one
        # is at the rounding noise of log delta; stop there (the margin below handles the rest).
        if abs(step) <= 1e-13:
            t += step
            break
        new = t + step if math.isfinite(step) else math.nan
        if not (lo < new < hi) or not math.isfinite(new):
            if math.isfinite(lo) and math.isfinite(hi):
                new = 0.5 * (lo + hi)
            elif math.isfinite(lo):
                new = lo + 1.0
            else:
                new = hi - 1.0
        if abs(new - t) <= 1e-13:
            t = new
            break
        if math.isfinite(lo) and math.isfinite(hi) and hi - lo <= 4e-16 * max(1.0, abs(t)):
            t = hi
            break
        t = new
    # Round up: never return a sigma whose delta (plus its rounding-error bound) exceeds the target.
    log_d, dg, err = _log_delta(math.exp(t), eps)
    excess = log_d + err - target
    if excess > 0.0 and math.isfinite(dg) and dg < 0.0:
        t += 1.01 * excess / -dg
    sigma = math.exp(t) * sens
    for _ in range(10_000):
        log_d, _, err = _log_delta(sigma / sens, eps)
        if log_d + err <= target:
            return sigma
        sigma = math.nextafter(sigma, math.inf) * (1.0 + 1e-15)
    raise ParameterError(
        "delta", delta, "a target reachable in double precision"
    )  # pragma: no cover


def analytic_gaussian_epsilon(*, delta: float, sigma: float, sensitivity: float) -> float:
    r"""Smallest epsilon for which noise ``sigma`` gives (epsilon, delta)-DP (inverse of Balle & Wang Thm. 8).

    ``delta(epsilon)`` is decreasing with derivative :math:`-e^\varepsilon \Phi(-a-b)`; the root is
    bracketed and found by bisection in log epsilon, then rounded up so the delta at the returned
    epsilon is at most ``delta``.

    Parameters
    ----------
    delta : float
        Target delta, in (0, 1).
    sigma : float
        Noise standard deviation, in (0, inf).
    sensitivity : float
        L2 sensitivity, in (0, inf).

    Returns
    -------
    float
        epsilon in [0, inf); 0.0 when even epsilon -> 0 meets ``delta``.

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """
    dlt = check_open_unit("delta", delta)
    sig = check_real("sigma", sigma, low=0.0, high=math.inf, low_open=True, high_open=True)
    sens = check_real(
        "sensitivity", sensitivity, low=0.0, high=math.inf, low_open=True, high_open=True
    )
    s = sig / sens
    target = math.log(dlt)
    # delta at epsilon = 0 is 2 Phi(1/(2s)) - 1.
    d0 = float(sc.erf(0.5 / s / _SQRT2))
    if d0 <= dlt:
        return 0.0

    def f(eps: float) -> float:
        log_d, _, err = _log_delta(s, eps)
        return log_d + err - target

    lo, hi = 1e-300, 1.0
    while f(hi) > 0.0:
        lo, hi = hi, hi * 2.0
        if hi > 1e300:  # pragma: no cover - unreachable for finite sigma
            raise ParameterError("delta", delta, "a value reachable for this sigma")
    # Bisection in log space to full double precision (about 60-1100 steps; each is a few ufunc calls).
    llo, lhi = math.log(lo), math.log(hi)
    for _ in range(200):
        mid = 0.5 * (llo + lhi)
        if f(math.exp(mid)) > 0.0:
            llo = mid
        else:
            lhi = mid
        if lhi - llo <= 1e-16 * max(1.0, abs(mid)):
            break
    eps = math.exp(lhi)
    while f(eps) > 0.0:
        eps = math.nextafter(eps, math.inf)
    return eps


def classical_gaussian_sigma(
    *, epsilon: float, delta: float, sensitivity: float, allow_large_epsilon: bool = False
) -> float:
    r"""Classical calibration :math:`\sigma = \Delta\sqrt{2\ln(1.25/\delta)}/\varepsilon` (Dwork & Roth, Thm. A.1).

    The theorem holds only for epsilon < 1 (at epsilon = 10 this sigma is below the analytic optimum, so the
    mechanism is not private). Paper 000 uses it up to epsilon = 5; reproduce that only with
    ``allow_large_epsilon=True``, which emits a :class:`PrivacyWarning`. Prefer
    :func:`analytic_gaussian_sigma`, which is smaller and exact for every epsilon.

    Parameters
    ----------
    epsilon : float
        In (0, 1); larger values only with ``allow_large_epsilon``.
    delta : float
        In (0, 1).
    sensitivity : float
        L2 sensitivity, in (0, inf).
    allow_large_epsilon : bool, default False
        Accept epsilon >= 1 (unproven) with a warning.

    Returns
    -------
    float
        sigma.

    Raises
    ------
    ParameterError
        If a parameter is outside its range, or epsilon >= 1 without ``allow_large_epsilon``.
    """
    eps, sens = _check_common(epsilon, sensitivity)
    dlt = check_open_unit("delta", delta)
    if eps >= 1.0:
        if not allow_large_epsilon:
            raise ParameterError(
                "epsilon",
                epsilon,
                "a value in (0, 1) for the classical Gaussian mechanism (use analytic_gaussian_sigma, "
                "or pass allow_large_epsilon=True to reproduce the unproven usage of paper 000)",
            )
        warnings.warn(
            f"classical Gaussian calibration at epsilon={eps:g} >= 1 is not proven to be private "
            "(Dwork & Roth Thm. A.1 needs epsilon < 1); use the analytic Gaussian mechanism",
            PrivacyWarning,
            stacklevel=2,
        )
    return sens * math.sqrt(2.0 * math.log(1.25 / dlt)) / eps
