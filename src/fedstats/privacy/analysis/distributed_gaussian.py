r"""Privacy of the distributed discrete Gaussian: a sum of n independent discrete Gaussian shares.

Kairouz, Liu & Steinke (ICML 2021, "The Distributed Discrete Gaussian Mechanism for Federated Learning with
Secure Aggregation"), Theorem 1 / Proposition 14: if each of n clients adds :math:`N_{\mathbb Z}(0, \sigma^2)`
noise to an integer vector of dimension d, the sum is :math:`\frac12\varepsilon^2`-concentrated (zCDP) with

.. math::

    \varepsilon = \min\Bigl\{\sqrt{\tfrac{\Delta_2^2}{n\sigma^2} + \tfrac{2\tau\Delta_1}{\sqrt n\,\sigma}
    + \tau^2 d},\ \tfrac{\Delta_2}{\sqrt n\,\sigma} + \tau\sqrt d\Bigr\},\qquad
    \tau = 10\sum_{k=1}^{n-1} e^{-2\pi^2\sigma^2 \frac{k}{k+1}}.

A larger :math:`\tau` gives a larger (more conservative) rho, so :func:`ddg_tau` returns an *upper bound* on
:math:`\tau` (proved in its docstring) that is within a relative 1e-9 of the exact sum (tested against exact
summation up to n = 10^6).
"""

from __future__ import annotations

import math

import numpy as np

from fedstats._numeric import bisect_safe
from fedstats._validation import check_int, check_real

__all__ = ["ddg_rho", "ddg_share_variance", "ddg_tau"]

_HEAD = 10_000  # terms summed one by one
_SLACK = 1e-9  # relative allowance for floating-point error (see ddg_tau)


def ddg_tau(share_sigma: float, n: int) -> float:
    r"""An upper bound on :math:`\tau = 10\sum_{k=1}^{n-1} e^{-c k/(k+1)}`, :math:`c = 2\pi^2\sigma^2`.

    Parameters
    ----------
    share_sigma : float
        :math:`\sigma` of each client's share, in (0, inf).
    n : int
        Number of shares, >= 1 (tau = 0 for n = 1).

    Returns
    -------
    float
        :math:`\hat\tau \ge \tau`, with :math:`\hat\tau \le \tau (1 + 10^{-9})` in practice (tested).

    Raises
    ------
    ParameterError
        If a parameter is outside its range.

    Notes
    -----
    Let :math:`f(k) = e^{-c k/(k+1)} = e^{-c} e^{c/(k+1)}` and :math:`m = \min(n-1, 10^4)`. The head
    :math:`\sum_{k \le m} f(k)` is summed term by term. For the tail, :math:`k \ge m+1`, put
    :math:`x_k = c/(k+1) \le x_0 = c/(m+2)`. By Taylor's theorem with the Lagrange remainder,
    :math:`e^x \le 1 + x + \frac{x^2}{2} e^{x_0}` for :math:`0 \le x \le x_0`, so

    .. math:: \sum_{k=m+1}^{n-1} f(k) \le e^{-c}\Bigl[(n-1-m) + c\,S_1 + \tfrac{c^2}{2} e^{x_0} S_2\Bigr],
        \quad S_1 = \sum_{j=m+2}^{n} \frac1j,\ S_2 = \sum_{j=m+2}^{n} \frac1{j^2}.

    Since 1/x is convex, :math:`1/j \le \int_{j-1/2}^{j+1/2} dx/x` (Hermite-Hadamard), so
    :math:`S_1 \le \ln\frac{n + 1/2}{m + 3/2}`; since :math:`1/x^2` is decreasing,
    :math:`1/j^2 \le \int_{j-1}^{j} dx/x^2`, so :math:`S_2 \le \frac1{m+1} - \frac1n`. Every term of the
    bound is thus an upper bound. The previous bound, :math:`(n-1-m)e^{-c}`, dropped the last two terms:
    each tail term *exceeds* :math:`e^{-c}` (the terms decrease *towards* it), so it was on the wrong side.
    Floating point: the head is a correctly rounded sum (``math.fsum``) of at most :math:`10^4` positive
    terms, each exp within a few ulp, so its relative error is below :math:`10^{-14}`; the tail bound's few
    operations likewise. The result is multiplied by :math:`1 + 10^{-9}`, which covers these errors, so
    :math:`\hat\tau \ge \tau`. The over-estimate is that factor plus the midpoint and second-order slack,
    of relative order :math:`c/m^2`: below :math:`2 \cdot 10^{-9}` in the tested range
    (:math:`\sigma \ge 1/2`, n up to :math:`10^6`).
    """
    s = check_real(
        "share_sigma", share_sigma, low=0.0, high=math.inf, low_open=True, high_open=True
    )
    nn = check_int("n", n, low=1)
    if nn <= 1:
        return 0.0
    c = 2.0 * math.pi**2 * s * s
    m = min(nn - 1, _HEAD)
    k = np.arange(1, m + 1, dtype=np.float64)
    head = math.fsum(np.exp(-c * k / (k + 1.0)).tolist())
    tail = 0.0
    if nn - 1 > m:
        x0 = c / (m + 2)
        s1 = math.log((nn + 0.5) / (m + 1.5))
        s2 = 1.0 / (m + 1) - 1.0 / nn
        tail = math.exp(-c) * ((nn - 1 - m) + c * s1 + 0.5 * c * c * math.exp(x0) * s2)
    return 10.0 * (head + tail) * (1.0 + _SLACK)


def ddg_rho(*, share_variance: float, n: int, l2: float, l1: float, dim: int) -> float:
    r"""ZCDP rho of the sum of n discrete Gaussian shares (Kairouz, Liu & Steinke 2021, Prop. 14).

    Parameters
    ----------
    share_variance : float
        :math:`\sigma_s^2` of each client's :math:`N_{\mathbb Z}(0, \sigma_s^2)` share (integer units),
        with :math:`\sigma_s \ge 1/2`.
    n : int
        Number of clients (shares), >= 1.
    l2, l1 : float
        L2 and L1 sensitivities of the integer sum.
    dim : int
        Length of the released vector.

    Returns
    -------
    float
        :math:`\rho = \varepsilon^2/2` with :math:`\tau` bounded from above by :func:`ddg_tau` (so rho is
        never too small).

    Raises
    ------
    ParameterError
        If :math:`\sigma_s < 1/2` or another parameter is out of range.
    """
    s2 = check_real("share_variance", share_variance, low=0.25, high=math.inf, high_open=True)
    nn = check_int("n", n, low=1)
    s = math.sqrt(s2)
    tau = ddg_tau(s, nn)
    ns = math.sqrt(nn) * s
    b2 = 0.5 * (l2 * l2 / (nn * s2) + 2.0 * tau * l1 / ns + tau * tau * dim)
    b3 = 0.5 * (l2 / ns + tau * math.sqrt(dim)) ** 2
    return min(b2, b3)


def ddg_share_variance(*, rho: float, n: int, l2: float, l1: float, dim: int) -> float:
    """Smallest share variance (to 1e-9 relative, rounded up) whose sum of n shares is rho-zCDP (Prop. 14).

    Parameters
    ----------
    rho : float
        Target zCDP, in (0, inf).
    n, l2, l1, dim
        As in :func:`ddg_rho`.

    Returns
    -------
    float
        A share variance >= 1/4 with ``ddg_rho(share_variance=..., ...) <= rho`` (bisection keeps the
        private end).

    Raises
    ------
    ParameterError
        If rho is not positive or another parameter is out of range.
    """
    r = check_real("rho", rho, low=0.0, high=math.inf, low_open=True, high_open=True)
    lo = 0.25
    if ddg_rho(share_variance=lo, n=n, l2=l2, l1=l1, dim=dim) <= r:
        return lo
    hi = max(1.0, l2 * l2 / (2.0 * r * n))
    while ddg_rho(share_variance=hi, n=n, l2=l2, l1=l1, dim=dim) > r:
        hi *= 2.0
    return bisect_safe(
        lambda v: ddg_rho(share_variance=v, n=n, l2=l2, l1=l1, dim=dim) <= r,
        lo,
        hi,
        log=True,
        rel_tol=1e-10,
    )
