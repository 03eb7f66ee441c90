r"""Zero-concentrated differential privacy (zCDP): Gaussian rho, composition, conversion to (epsilon, delta).

A mechanism is :math:`\rho`-zCDP when its Rényi divergence of every order :math:`\alpha > 1` is at most
:math:`\rho\alpha` (Bun & Steinke 2016, Def. 1.1). The Gaussian mechanism with L2 sensitivity
:math:`\Delta` and noise :math:`\sigma` is :math:`\Delta^2/(2\sigma^2)`-zCDP (Prop. 1.6), and so is the
discrete Gaussian on integers (Canonne, Kamath, Steinke 2020, Thm. 4). zCDP composes by adding rho
(Lemma 2.3). The conversion to approximate DP uses Canonne, Kamath & Steinke 2020, Proposition 12 /
Corollary 13, minimised over the Rényi order, and is never worse than Bun & Steinke's
:math:`\rho + 2\sqrt{\rho\ln(1/\delta)}` (Prop. 1.3), which is also evaluated and the smaller kept.

Examples
--------
>>> rho = compose_zcdp([gaussian_rho(sigma=4.0, sensitivity=1.0)] * 2)
>>> rho
0.0625
>>> eps = zcdp_to_approx_dp(rho=rho, delta=1e-6)
>>> eps < rho + 2 * (rho * 13.815510557964274) ** 0.5
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

from fedstats._numeric import bisect_safe
from fedstats._validation import check_epsilon_delta, check_open_unit, check_real

__all__ = ["approx_dp_to_zcdp", "compose_zcdp", "gaussian_rho", "zcdp_to_approx_dp"]


def gaussian_rho(*, sigma: float, sensitivity: float) -> float:
    r"""Rho of the (continuous or discrete) Gaussian mechanism: :math:`\Delta^2 / (2\sigma^2)`.

    Parameters
    ----------
    sigma : float
        Noise standard deviation, in (0, inf).
    sensitivity : float
        L2 sensitivity, in [0, inf).

    Returns
    -------
    float
        rho >= 0 (Bun & Steinke 2016, Prop. 1.6; Canonne, Kamath, Steinke 2020, Thm. 4).

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """
    sig = check_real("sigma", sigma, low=0.0, high=math.inf, low_open=True, high_open=True)
    sens = check_real("sensitivity", sensitivity, low=0.0, high=math.inf, high_open=True)
    return sens * sens / (2.0 * sig * sig)


def _cks_epsilon(alpha: float, rho: float, log_inv_delta: float) -> float:
    """Epsilon of CKS 2020 Prop. 12 at Rényi order alpha > 1."""
    return (
        alpha * rho + (log_inv_delta - math.log(alpha)) / (alpha - 1.0) + math.log1p(-1.0 / alpha)
    )


def zcdp_to_approx_dp(*, rho: float, delta: float) -> float:
    r"""Smallest epsilon such that rho-zCDP implies (epsilon, delta)-DP.

    Minimises :math:`\alpha\rho + (\ln(1/\delta) - \ln\alpha)/(\alpha - 1) + \ln(1 - 1/\alpha)` over
    :math:`\alpha > 1` (Canonne, Kamath, Steinke 2020, Prop. 12 / Cor. 13); every alpha gives a valid bound,
    so an imperfect minimisation can only be conservative. Also evaluates
    :math:`\rho + 2\sqrt{\rho\ln(1/\delta)}` (Bun & Steinke 2016, Prop. 1.3) and returns the smaller.

    Parameters
    ----------
    rho : float
        zCDP parameter, in [0, inf).
    delta : float
        In (0, 1).

    Returns
    -------
    float
        epsilon >= 0 (0.0 when rho = 0).

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """
    r = check_real("rho", rho, low=0.0, high=math.inf, high_open=True)
    d = check_open_unit("delta", delta)
    if r == 0.0:
        return 0.0
    lid = -math.log(d)
    simple = r + 2.0 * math.sqrt(r * lid)
    # The unconstrained optimum is near alpha = 1 + sqrt(lid / rho); search log(alpha - 1) around it.
    centre = math.log(math.sqrt(lid / r) + 1e-300)
    from scipy.optimize import minimize_scalar  # lazily: scipy.optimize costs about 0.2 s to import

    res = minimize_scalar(
        lambda t: _cks_epsilon(1.0 + math.exp(t), r, lid),
        bounds=(centre - 30.0, centre + 30.0),
        method="bounded",
        options={"xatol": 1e-10},
    )
    best = _cks_epsilon(1.0 + math.exp(float(res.x)), r, lid)
    return max(0.0, min(simple, best))


def compose_zcdp(rhos: Iterable[float]) -> float:
    """Sequential composition of zCDP releases: rho adds up (Bun & Steinke 2016, Lemma 2.3).

    Parameters
    ----------
    rhos : iterable of float
        rho of each release, each in [0, inf).

    Returns
    -------
    float
        The total rho.

    Raises
    ------
    ParameterError
        If a rho is negative, NaN or infinite.
    """
    return math.fsum(check_real("rhos", r, low=0.0, high=math.inf, high_open=True) for r in rhos)


def approx_dp_to_zcdp(*, epsilon: float, delta: float) -> float:
    """Largest rho whose conversion (:func:`zcdp_to_approx_dp`) gives at most ``epsilon`` at ``delta``.

    Used to calibrate mechanisms analysed in zCDP (e.g. the multivariate discrete Gaussian) to an
    (epsilon, delta) target. Bisection in log rho to a relative 1e-12, rounded down (conservative).

    Parameters
    ----------
    epsilon, delta : float
        The (epsilon, delta)-DP target: epsilon in (0, inf), delta in (0, 1)
        (:func:`~fedstats._validation.check_epsilon_delta`).

    Returns
    -------
    float
        rho > 0.

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """
    eps, d = check_epsilon_delta(epsilon, delta)
    return _approx_dp_to_zcdp(float(eps), float(d))


# a pure function of two floats, evaluated again for every task and run with the same budget (about 15-30
# ms a call: some 130 evaluations of the conversion): remembered, the same value is returned at once
@functools.lru_cache(maxsize=1024)
def _approx_dp_to_zcdp(eps: float, d: float) -> float:
    """:func:`approx_dp_to_zcdp` of validated ``eps`` and ``d``."""
    lo, hi = 1e-300, max(eps, 1e-300)
    while zcdp_to_approx_dp(rho=hi, delta=d) <= eps:
        lo, hi = hi, hi * 2.0
    return bisect_safe(
        lambda r: zcdp_to_approx_dp(rho=r, delta=d) <= eps, lo, hi, log=True, rel_tol=1e-12
    )
