r"""Accuracy of the private heterogeneity measures, and paper 000's own formulas for comparison.

MSE formulas, intervals from the actual noise, and the paper's Corollaries 4.5, 4.13, 4.18 and Theorems 4.7,
4.15, 4.19.

Error decomposition (p = 2). With :math:`\mu` the exact mean and :math:`\mu'` the released one,
:math:`\sum_i\lVert x_i-\mu'\rVert^2 = \sum_i\lVert x_i-\mu\rVert^2 + n\lVert\mu'-\mu\rVert^2` (the cross term
vanishes because :math:`\sum_i (x_i - \mu) = 0`), so

.. math::

    D'' - D = \lVert \mu' - \mu\rVert^2 + Z_D,\qquad
    Q'' - Q = \textstyle\sum_i w_i\,\lVert \bar\mu' - \bar\mu\rVert^2 + Z_Q

with the round-2 noises :math:`Z_D \sim N(0, \sigma_D^2)`, :math:`Z_Q \sim N(0, \sigma_Q^2)`. Without
clipping, :math:`\mu' - \mu \sim N(0, \tau^2 I_d)` and

.. math::

    \mathrm{MSE}(D'') = \sigma_D^2 + (d^2 + 2d)\,\tau^4

(clipping :math:`\mu'` to :math:`[0,1]^d` only moves it towards :math:`\mu`, so this is an upper bound;
:func:`dispersion_mse` with ``centre`` gives the exact value with clipping, from truncated-normal moments).
For Q the weighted mean is a ratio of noisy sums, :math:`\bar\mu' - \bar\mu \approx (Z_N - \bar\mu Z_S)/S`,
Gaussian with covariance :math:`c\,(I + \bar\mu\bar\mu^\top)`, :math:`c = \sigma_w^2/S^2`, whence (delta
method) :math:`\mathrm{MSE}(Q'') \approx \sigma_Q^2 + (w_{\max}S)^2 c^2 [(d + m)^2 + 2(d - 1 + (1+m)^2)]`,
:math:`m = \lVert\bar\mu\rVert^2`, and :math:`\mathrm{MSE}(I^2) \approx ((n-1)/Q^2)^2\,\mathrm{MSE}(Q)`.

Intervals (:func:`dispersion_interval`, :func:`q_interval`) bound each noise term by a quantile of its
actual distribution and combine them with a union bound, so their coverage is *at least* the nominal level
for every dataset (conservative; no plug-in). The I^2 interval is the Q interval mapped through the increasing
function :math:`Q \mapsto \max(0, 1 - (n-1)/Q)`. Coverage is checked by simulation in the tests.

The paper's intervals (Thms. 4.7, 4.15, 4.19) are reported beside them: they use the variance of
:math:`Y_1^4` as if it were the variance of :math:`D''`, shrink like :math:`n^{-4.5}`, ignore the round-2
noise, and the I^2 one has :math:`\eta_1^8` in a denominator; they do not cover.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from fedstats.analyses.heterogeneity.exact import i_squared

if TYPE_CHECKING:  # pragma: no cover
    from fedstats.analyses.heterogeneity.calibration import Sensitivities
    from fedstats.analyses.heterogeneity.config import HeterogeneityConfig, RoundPlan
    from fedstats.analyses.heterogeneity.protocol import HeterogeneityResult

__all__ = [
    "attach_errors",
    "clipped_error_moments",
    "dispersion_interval",
    "dispersion_mse",
    "i2_mse",
    "paper_interval_dispersion",
    "paper_interval_i2",
    "paper_interval_q",
    "paper_tmse_dispersion",
    "paper_tmse_i2",
    "paper_tmse_q",
    "q_interval",
    "q_mse",
]


def clipped_error_moments(centre: np.ndarray, sd: float) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`E[e_j^2]` and :math:`E[e_j^4]` of :math:`e_j = \mathrm{clip}(\mu_j + Y_j, 0, 1) - \mu_j`.

    :math:`Y_j \sim N(0, \tau^2)`. Exact, from the truncated-normal moment recursion
    :math:`M_k = (k-1)\tau^2 M_{k-2} + \tau^2(a^{k-1}\varphi_\tau(a) - b^{k-1}\varphi_\tau(b))` on
    :math:`[a, b] = [-\mu_j, 1 - \mu_j]` plus the two clipped tails.

    Parameters
    ----------
    centre : numpy.ndarray, shape (d,)
        :math:`\mu` in [0, 1]^d.
    sd : float
        :math:`\tau > 0`.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Second and fourth moments, each ``(d,)``.
    """
    import scipy.stats  # lazily (costly import)

    mu = np.asarray(centre, dtype=np.float64)
    a, b = -mu, 1.0 - mu
    t2 = sd * sd
    pa = scipy.stats.norm.pdf(a, scale=sd)
    pb = scipy.stats.norm.pdf(b, scale=sd)
    m0 = scipy.stats.norm.cdf(b, scale=sd) - scipy.stats.norm.cdf(a, scale=sd)
    m2 = t2 * m0 + t2 * (a * pa - b * pb)
    m4 = 3.0 * t2 * m2 + t2 * (a**3 * pa - b**3 * pb)
    lo = scipy.stats.norm.cdf(a, scale=sd)  # mass clipped to 0: error -mu
    hi = scipy.stats.norm.sf(b, scale=sd)  # mass clipped to 1: error 1 - mu
    e2 = m2 + a**2 * lo + b**2 * hi
    e4 = m4 + a**4 * lo + b**4 * hi
    return e2, e4


def dispersion_mse(
    *, dim: int, mean_sd: float, dispersion_sd: float, centre: np.ndarray | None = None
) -> float:
    r"""Theoretical MSE of the average dispersion D'' (p = 2).

    Parameters
    ----------
    dim : int
        d.
    mean_sd : float
        :math:`\tau`, standard deviation of each coordinate of the released mean's noise.
    dispersion_sd : float
        :math:`\sigma_D`, standard deviation of the noise on the average dispersion.
    centre : numpy.ndarray, shape (d,), optional
        The exact mean. When given, the clipping of the released mean to [0, 1]^d is accounted for
        exactly: :math:`\sigma_D^2 + (\sum_j E e_j^2)^2 + \sum_j (E e_j^4 - (E e_j^2)^2)`
        (:func:`clipped_error_moments`); otherwise the unclipped upper bound
        :math:`\sigma_D^2 + (d^2 + 2d)\tau^4`.

    Returns
    -------
    float
    """
    if centre is None or mean_sd == 0.0:
        return dispersion_sd**2 + (dim * dim + 2 * dim) * mean_sd**4
    e2, e4 = clipped_error_moments(centre, mean_sd)
    return float(dispersion_sd**2 + e2.sum() ** 2 + (e4 - e2 * e2).sum())


def q_mse(
    *,
    dim: int,
    weighted_sd: float,
    weight_sum_u: float,
    w_max: float,
    q_sd: float,
    centre_sq: float,
) -> float:
    r"""Delta-method MSE of Cochran's Q'' (standard weighted mean, clipping ignored).

    Parameters
    ----------
    dim : int
        d.
    weighted_sd : float
        :math:`\sigma_w`, noise standard deviation on each coordinate of the summed :math:`(u_i x_i, u_i)`.
    weight_sum_u : float
        :math:`S = \sum_i u_i` (weights in units of :math:`w_{\max}`).
    w_max : float
    q_sd : float
        :math:`\sigma_Q`, noise standard deviation on Q (weight units).
    centre_sq : float
        :math:`\lVert\bar\mu\rVert^2`.

    Returns
    -------
    float
    """
    c = (weighted_sd / weight_sum_u) ** 2
    m = centre_sq
    e4 = c * c * ((dim + m) ** 2 + 2.0 * (dim - 1 + (1.0 + m) ** 2))
    return q_sd**2 + (w_max * weight_sum_u) ** 2 * e4


def i2_mse(*, q: float, n: int, q_mse_value: float) -> float:
    r"""MSE of I^2 from that of Q: the delta method :math:`((n-1)/Q^2)^2 \mathrm{MSE}(Q)` for Q > n - 1.

    Where :math:`I^2 = \max(0, 1 - (n-1)/Q)` is flat (Q'' <= n - 1, the estimate clipped to 0) the delta
    method would give 0; the square of the change of I^2 over one standard error of Q above Q'' is used
    instead, :math:`I^2(Q'' + \sqrt{\mathrm{MSE}(Q)})^2`, so a clipped estimate never reports a zero error
    while Q is uncertain.
    """
    if q <= n - 1:
        return i_squared(q + math.sqrt(q_mse_value), n) ** 2
    return ((n - 1) / (q * q)) ** 2 * q_mse_value


def paper_tmse_dispersion(
    x: np.ndarray, mu: np.ndarray, mean_error: np.ndarray, dispersion_noise: float
) -> float:
    r"""Paper 000's Corollary 4.5 evaluated on one run's noise: :math:`\frac1n\sum_i[Y_1\cdot(Y_1 - 2(x_i - \mu)) + Y_2]^2`.

    Parameters
    ----------
    x : numpy.ndarray, shape (n, d)
    mu : numpy.ndarray, shape (d,)
        Exact mean.
    mean_error : numpy.ndarray, shape (d,)
        :math:`Y_1 = \mu' - \mu`.
    dispersion_noise : float
        :math:`Y_2`, the noise on the average dispersion.
    """
    y1 = np.asarray(mean_error, dtype=np.float64)
    t = float(y1 @ y1) - 2.0 * (np.asarray(x) - mu) @ y1 + dispersion_noise
    return float(np.mean(t * t))


def paper_tmse_q(
    x: np.ndarray, w: np.ndarray, mu_w: np.ndarray, centre_error: np.ndarray, q_noise: float
) -> float:
    r"""Paper 000's Corollary 4.13 on one run's noise: :math:`\frac1n\sum_i[w_i Z_1\cdot(Z_1 - 2(x_i - \bar\mu)) + Z_2]^2`."""
    z1 = np.asarray(centre_error, dtype=np.float64)
    t = np.asarray(w) * (float(z1 @ z1) - 2.0 * (np.asarray(x) - mu_w) @ z1) + q_noise
    return float(np.mean(t * t))


def paper_tmse_i2(n: int, q_released: float, q_true: float, z3: float = 0.0) -> float:
    r"""Paper 000's Corollary 4.18: :math:`\frac1n[Z_3 - (n-1)/Q'' + (n-1)/Q]^2` (Z3 = 0: no third noise)."""
    qr = q_released if q_released > 0 else math.inf
    return (z3 - (n - 1) / qr + (n - 1) / q_true) ** 2 / n


def paper_interval_dispersion(estimate: float, *, xi1_sq: float, n: int) -> tuple[float, float]:
    r"""Theorem 4.7: :math:`D'' \pm 7.84\sqrt6\,\xi_1^4/\sqrt n` (xi1_sq: per-coordinate mean-noise variance)."""
    h = 7.84 * math.sqrt(6.0) * xi1_sq**2 / math.sqrt(n)
    return estimate - h, estimate + h


def paper_interval_q(
    estimate: float, *, eta1_sq: float, n: int, weight_sum: float
) -> tuple[float, float]:
    r"""Theorem 4.15: :math:`Q'' \pm \sum_i 7.84 w_i\sqrt6\,\eta_1^4/\sqrt n`."""
    h = 7.84 * math.sqrt(6.0) * eta1_sq**2 * weight_sum / math.sqrt(n)
    return estimate - h, estimate + h


def paper_interval_i2(
    estimate: float, *, eta1_sq: float, n: int, inverse_weight_sum: float
) -> tuple[float, float]:
    r"""Theorem 4.19: :math:`I^2 \pm \sum_i 7.84\sqrt2(n-1)/(3 w_i\sqrt{35n}\,\eta_1^4)`.

    Needs :math:`\sum_i 1/w_i`, which the protocol does not release (simulation only).
    """
    h = (
        7.84
        * math.sqrt(2.0)
        * (n - 1)
        * inverse_weight_sum
        / (3.0 * math.sqrt(35.0 * n) * eta1_sq**2)
    )
    return estimate - h, estimate + h


def dispersion_interval(
    estimate: float, *, mean: np.ndarray, mean_sd: float, dispersion_sd: float, level: float
) -> tuple[float, float]:
    r"""Interval for D from the actual noise, with coverage at least ``level`` (union bound).

    :math:`D = D'' - A - Z_D` with :math:`A = \lVert\mu' - \mu\rVert^2 \ge 0`. Clipping only moves
    :math:`\mu'` towards :math:`\mu`, so :math:`A \le \tau^2\chi^2_d` (unclipped noise), and always
    :math:`A \le \sum_j \max(\mu'_j, 1 - \mu'_j)^2` (both centres lie in :math:`[0,1]^d`). With
    :math:`a = 1 - \text{level}`: :math:`P(A > \tau^2\chi^2_{d,1-a/2}) \le a/2` and
    :math:`P(|Z_D| > z_{1-a/4}\sigma_D) = a/2`, hence

    .. math:: D \in [D'' - A_{hi} - z\sigma_D,\; D'' + z\sigma_D].
    """
    import scipy.stats  # lazily (costly import)

    a = 1.0 - level
    d = mean.shape[0]
    a_hi = min(
        mean_sd**2 * float(scipy.stats.chi2.ppf(1.0 - a / 2.0, d)),
        float(np.sum(np.maximum(mean, 1.0 - mean) ** 2)),
    )
    z = float(scipy.stats.norm.ppf(1.0 - a / 4.0))
    return max(0.0, estimate - a_hi - z * dispersion_sd), max(0.0, estimate + z * dispersion_sd)


def q_interval(
    estimate: float,
    *,
    centre: np.ndarray,
    weight_sum_u: float,
    weighted_sd: float,
    w_max: float,
    q_sd: float,
    level: float,
) -> tuple[float, float]:
    r"""Interval for Cochran's Q from the actual noise, coverage at least ``level`` (standard form).

    :math:`Q'' - Q = w_{\max} S\,\lVert e\rVert^2 + Z_Q` with :math:`e = \bar\mu' - \bar\mu`. Before
    clipping, :math:`e = (Z_N - \bar\mu (S' - S))/S'` with :math:`S'` the released (clipped) weight sum and
    :math:`|S' - S| \le |Z_S|`, so :math:`\lVert e\rVert \le (\lVert Z_N\rVert + \sqrt d |Z_S|)/S'`;
    also :math:`\lVert e\rVert^2 \le \sum_j\max(\bar\mu'_j, 1-\bar\mu'_j)^2` and
    :math:`S \le S' + |Z_S|`. Each of :math:`\lVert Z_N\rVert^2 \le \sigma_w^2\chi^2_{d,1-a/4}`,
    :math:`|Z_S| \le z_{1-a/8}\sigma_w` and :math:`|Z_Q| \le z_{1-a/8}\sigma_Q` fails with probability at
    most :math:`a/4`, so the interval covers with probability at least :math:`1 - 3a/4`.
    """
    import scipy.stats  # lazily (costly import)

    a = 1.0 - level
    d = centre.shape[0]
    z = float(scipy.stats.norm.ppf(1.0 - a / 8.0))
    zn = weighted_sd * math.sqrt(float(scipy.stats.chi2.ppf(1.0 - a / 4.0, d)))
    zs = z * weighted_sd
    e2 = min(
        ((zn + math.sqrt(d) * zs) / weight_sum_u) ** 2,
        float(np.sum(np.maximum(centre, 1.0 - centre) ** 2)),
    )
    a_hi = w_max * (weight_sum_u + zs) * e2
    return max(0.0, estimate - a_hi - z * q_sd), max(0.0, estimate + z * q_sd)


def attach_errors(
    res: HeterogeneityResult,
    cfg: HeterogeneityConfig,
    p1: RoundPlan,
    p2: RoundPlan,
    sens: Sensitivities,
    n: int,
    d: int,
) -> None:
    """Fill noise levels, closed-form MSEs, intervals and the paper's intervals into ``res``.

    Parameters
    ----------
    res : HeterogeneityResult
        Filled in place.
    cfg : HeterogeneityConfig
    p1, p2 : RoundPlan
        The rounds, with ``sigma`` set to the noise that actually reached each sum.
    sens : Sensitivities
    n : int
        Clients in the final sum.
    d : int
        Vector length.
    """
    if not cfg.private:
        return
    if res.dispersion is not None:
        tau = p1.sigma * sens.mean_sum / n
        sd_d = p2.sigma * sens.dispersion_sum / n
        est = res.dispersion
        est.noise_sd = sd_d
        res.details["mean_noise_sd"] = tau
        if cfg.p == 2.0 and res.mean is not None:
            # plug-in of the released mean for the clipping (the exact mean is not known to the server)
            est.mse_theory = dispersion_mse(dim=d, mean_sd=tau, dispersion_sd=sd_d, centre=res.mean)
            est.standard_error = math.sqrt(est.mse_theory)
            est.paper_interval = paper_interval_dispersion(est.estimate, xi1_sq=tau * tau, n=n)
            est.interval = dispersion_interval(
                est.estimate, mean=res.mean, mean_sd=tau, dispersion_sd=sd_d, level=cfg.confidence
            )
    if res.q is not None and res.i2 is not None and res.weight_sum is not None:
        s_u = res.weight_sum / sens.w_max
        sd_w = p1.sigma * sens.weighted_sum
        sd_q = p2.sigma * sens.q_sum * sens.w_max
        res.q.noise_sd = sd_q
        assert res.weighted_mean is not None
        eta1_sq = (sd_w / s_u) ** 2
        res.details["weighted_mean_noise_sd"] = math.sqrt(eta1_sq)
        res.q.paper_interval = paper_interval_q(
            res.q.estimate, eta1_sq=eta1_sq, n=n, weight_sum=res.weight_sum
        )
        if cfg.form == "standard":
            m_hat = res.weighted_mean
            res.q.mse_theory = q_mse(
                dim=d,
                weighted_sd=sd_w,
                weight_sum_u=s_u,
                w_max=sens.w_max,
                q_sd=sd_q,
                centre_sq=float(m_hat @ m_hat),
            )
            res.q.standard_error = math.sqrt(res.q.mse_theory)
            res.i2.mse_theory = i2_mse(q=res.q.estimate, n=n, q_mse_value=res.q.mse_theory)
            res.i2.standard_error = math.sqrt(res.i2.mse_theory)
            res.q.interval = q_interval(
                res.q.estimate,
                centre=m_hat,
                weight_sum_u=s_u,
                weighted_sd=sd_w,
                w_max=sens.w_max,
                q_sd=sd_q,
                level=cfg.confidence,
            )
            lo, hi = res.q.interval
            # I^2 is flat at 0 for Q <= n - 1: the upper end is taken at least one MSE-based z above
            # Q'' (a wider interval, still covering), so a clipped estimate gets a real upper end
            # whenever I^2's standard error is positive, never [0, 0] beside a positive error
            import scipy.stats  # lazily (costly import)

            z = float(scipy.stats.norm.ppf(0.5 + cfg.confidence / 2.0))
            q_up = max(hi, res.q.estimate + z * res.q.standard_error)
            res.i2.interval = (i_squared(lo, n), i_squared(q_up, n))
