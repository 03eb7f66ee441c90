r"""Accuracy of the private heterogeneity measures, and paper 000's own formulas for comparison.

MSE formulas, intervals from the actual noise, the correction of the plug-ins' bias, and the paper's
Corollaries 4.5, 4.13, 4.18 and Theorems 4.7, 4.15, 4.19.

Debiasing (issue 26): the plug-ins :math:`D''`, :math:`Q''` below are biased up by the expected squared
error of the noisy, clipped centres. :func:`attach_errors` releases :math:`D'' - \hat A_D` and
:math:`Q'' - \hat A_Q` (clamped at 0), the excess computed exactly for given parameters
(:func:`clipped_centre_sq_error`, :func:`dispersion_excess`, :func:`weighted_mean_excess`,
:func:`q_excess`) at the released centres, with the parametric bootstrap's one-step correction of that
plug-in; derivation and measurements in ``docs/heterogeneity.md`` ("Bias of the plug-in dispersion and Q,
and its correction"). The formulas below describe the plug-ins (kept in ``details["plugin_*"]``).

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
    from fedstats.analyses.heterogeneity.config import HeterogeneityConfig
    from fedstats.analyses.heterogeneity.protocol import HeterogeneityResult
    from fedstats.analyses.heterogeneity.rounds import RoundPlan

__all__ = [
    "attach_errors",
    "clipped_centre_sq_error",
    "clipped_error_moments",
    "dispersion_excess",
    "dispersion_interval",
    "dispersion_mse",
    "i2_mse",
    "paper_interval_dispersion",
    "paper_interval_i2",
    "paper_interval_q",
    "paper_tmse_dispersion",
    "paper_tmse_i2",
    "paper_tmse_q",
    "q_excess",
    "q_interval",
    "q_mse",
    "weighted_mean_excess",
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


def clipped_centre_sq_error(
    target: np.ndarray, loc: np.ndarray, sd: float | np.ndarray
) -> np.ndarray:
    r""":math:`E[(t_j - \mathrm{clip}(M_j, 0, 1))^2]` for :math:`M_j \sim N(a_j, b^2)`, exactly.

    With :math:`\alpha = -a/b`, :math:`\beta = (1 - a)/b`, :math:`\delta = a - t`:

    .. math::

        t^2\Phi(\alpha) + (1 - t)^2\bar\Phi(\beta) + \delta^2[\Phi(\beta) - \Phi(\alpha)]
        + 2\delta b[\varphi(\alpha) - \varphi(\beta)]
        + b^2[\Phi(\beta) - \Phi(\alpha) + \alpha\varphi(\alpha) - \beta\varphi(\beta)].

    Tails by :func:`scipy.special.ndtr` of the signed argument (no cancellation).

    Parameters
    ----------
    target : numpy.ndarray, shape (d,)
        :math:`t \in [0, 1]^d`, the value the clipped centre estimates.
    loc : numpy.ndarray, shape (d,)
        :math:`a`, the mean of the unclipped centre (finite).
    sd : float or numpy.ndarray
        :math:`b \ge 0` (an array broadcasting with ``loc``: every entry > 0); ``0`` gives
        :math:`(t - \mathrm{clip}(a))^2`.

    Returns
    -------
    numpy.ndarray, shape (d,) (the broadcast shape)
        Expected squared error of each clipped coordinate (source: this module's derivation,
        ``docs/heterogeneity.md``, "Bias of the plug-in dispersion and Q, and its correction").
    """
    import scipy.special  # lazily (costly import)

    t = np.asarray(target, dtype=np.float64)
    a = np.asarray(loc, dtype=np.float64)
    if np.ndim(sd) == 0 and float(sd) <= 0.0:
        out0: np.ndarray = (t - np.clip(a, 0.0, 1.0)) ** 2
        return out0
    sd = np.asarray(sd, dtype=np.float64)
    al, be = -a / sd, (1.0 - a) / sd
    lo, hi = scipy.special.ndtr(al), scipy.special.ndtr(-be)  # P(M < 0), P(M > 1)
    mid = np.maximum(0.0, scipy.special.ndtr(be) - lo)
    pa = np.exp(-0.5 * al * al) / math.sqrt(2.0 * math.pi)
    pb = np.exp(-0.5 * be * be) / math.sqrt(2.0 * math.pi)
    dl = a - t
    inner = (
        dl * dl * mid
        + 2.0 * dl * sd * (pa - pb)
        + sd * sd * (mid + al * pa - be * pb)  # finite: pa, pb underflow to 0 first
    )
    out: np.ndarray = t * t * lo + (1.0 - t) ** 2 * hi + np.maximum(0.0, inner)
    return out


def _normal_nodes(k: int) -> np.ndarray:
    """``k`` equal-probability standard normal quantiles (midpoint rule in probability)."""
    import scipy.special  # lazily (costly import)

    out: np.ndarray = scipy.special.ndtri((np.arange(k) + 0.5) / k)
    return out


def dispersion_excess(
    centre: np.ndarray, mean_sd: float, *, bias_corrected: bool = False, nodes: int = 64
) -> float:
    r"""Expected excess :math:`E\lVert\mu - \mathrm{clip}(\mu + Y)\rVert^2` of the plug-in dispersion.

    :math:`Y \sim N(0, \tau^2 I_d)` is the noise of the released mean. For p = 2,
    :math:`\frac1n\sum_i\lVert x_i - \mu'\rVert^2 = D + \lVert\mu' - \mu\rVert^2` (the cross term sums to 0),
    so :math:`E[D''] = D + G(\mu)` with :math:`G(\mu) = \sum_j g(\mu_j)` and
    :math:`g(m) = E[(m - \mathrm{clip}(m + Y_j))^2]` (:func:`clipped_centre_sq_error`).

    The server knows only :math:`\mu' = \mathrm{clip}(\mu + Y)`. The plug-in :math:`G(\mu')` is biased
    where :math:`\tau` is comparable to a coordinate's distance from 0 or 1 (:math:`\mu'` is often exactly
    at the border, where :math:`g` is halved). ``bias_corrected`` applies the parametric bootstrap's
    one-step correction :math:`2G(\mu') - E^*[G(\mathrm{clip}(\mu' + Y^*))]` (Efron & Tibshirani 1993,
    ch. 10), the bootstrap expectation by ``nodes`` normal quantiles per coordinate (deterministic).

    Parameters
    ----------
    centre : numpy.ndarray, shape (d,)
        :math:`\mu` (or the released :math:`\mu'`) in [0, 1]^d.
    mean_sd : float
        :math:`\tau \ge 0`.
    bias_corrected : bool, default False
        Return the bootstrap-corrected plug-in instead of :math:`G(\text{centre})`.
    nodes : int, default 64
        Quantiles of the bootstrap expectation, >= 1.

    Returns
    -------
    float
        :math:`G(\text{centre})` (between 0 and :math:`d\tau^2`), or the corrected value.
    """
    c = np.asarray(centre, dtype=np.float64)
    plug = float(clipped_centre_sq_error(c, c, mean_sd).sum())
    if not bias_corrected or mean_sd <= 0.0:
        return plug
    cs = np.clip(c[None, :] + mean_sd * _normal_nodes(nodes)[:, None], 0.0, 1.0)  # (nodes, d)
    boot = float(clipped_centre_sq_error(cs, cs, mean_sd).sum(axis=1).mean())
    return 2.0 * plug - boot


_QUAD_NODES = 256


def weighted_mean_excess(
    centre: np.ndarray,
    *,
    weight_sum_u: float,
    weighted_sd: float,
    lower: float,
    upper: float,
    nodes: int = _QUAD_NODES,
) -> float:
    r"""Expected excess :math:`E\lVert\bar\mu - \bar\mu'\rVert^2` of the released weighted mean.

    Round 1 releases :math:`N' = S\bar\mu + Z_N` and :math:`S' = \mathrm{clip}(S + Z_S, L, U)`
    (weights in units of :math:`w_{\max}`, :math:`Z_N, Z_S` independent :math:`N(0, \sigma_w^2)`), and
    :math:`\bar\mu' = \mathrm{clip}(N'/S', 0, 1)`. Given :math:`Z_S` the coordinates of :math:`N'/S'` are
    independent :math:`N(S\bar\mu_j/S', \sigma_w^2/S'^2)`, so the conditional excess is exact
    (:func:`clipped_centre_sq_error`); it is averaged over :math:`Z_S` at ``nodes`` equal-probability
    normal quantiles (midpoint rule in probability, error far below the Monte Carlo error of any test).
    No delta method: at small epsilon :math:`\sigma_w` is comparable to :math:`S` and the ratio is far
    from linear.

    Parameters
    ----------
    centre : numpy.ndarray, shape (d,)
        :math:`\bar\mu` (or its plug-in) in [0, 1]^d.
    weight_sum_u : float
        :math:`S > 0` (or its plug-in).
    weighted_sd : float
        :math:`\sigma_w \ge 0`.
    lower, upper : float
        The clip :math:`[L, U] = [n u_{\min}, n]` of the released weight sum.
    nodes : int
        Quadrature nodes, >= 1.

    Returns
    -------
    float
    """
    import scipy.special  # lazily (costly import)

    c = np.asarray(centre, dtype=np.float64)
    s = float(weight_sum_u)
    if weighted_sd <= 0.0:  # no noise: the released centre is the weighted mean
        return 0.0
    zs = weighted_sd * scipy.special.ndtri((np.arange(nodes) + 0.5) / nodes)
    s1 = np.clip(s + zs, lower, upper)[:, None]  # (nodes, 1): every node at once
    err = clipped_centre_sq_error(c[None, :], s * c[None, :] / s1, weighted_sd / s1)
    return float(err.sum(axis=1).mean())


def q_excess(
    centre: np.ndarray,
    *,
    weight_sum_u: float,
    weighted_sd: float,
    w_max: float,
    lower: float,
    upper: float,
    bias_corrected: bool = False,
    nodes: int = 12,
) -> float:
    r"""Expected excess :math:`W E\lVert\bar\mu - \bar\mu'\rVert^2` of the plug-in Q, in weight units.

    :math:`F(\bar\mu, S) = w_{\max} S\,` :func:`weighted_mean_excess` :math:`(\bar\mu, S)`, so
    :math:`E[Q''] = Q + F(\bar\mu, S)`. The plug-in is :math:`F(\bar\mu', S')`. At small epsilon the noise
    of :math:`S'` is a large fraction of :math:`S` and :math:`\bar\mu'` often sits at 0 or 1, so the
    plug-in is biased (on digits at epsilon 1: 6% below the excess). ``bias_corrected`` applies the
    parametric bootstrap's one-step correction :math:`2F(\bar\mu', S') - E^*[F(\bar\mu^*, S^*)]`, with
    round 1 re-simulated from the released values: :math:`S^* = \mathrm{clip}(S' + Z_S^*, L, U)`,
    :math:`\bar\mu^* = \mathrm{clip}((S'\bar\mu' + Z_N^*)/S^*, 0, 1)`; the expectation over
    :math:`Z_S^*`, each coordinate's :math:`Z_N^*`, and the inner :math:`Z_S` of :math:`F` is taken on
    ``nodes`` normal quantiles each (deterministic; the coordinates enter through a sum, so their
    dependence does not matter).

    Parameters
    ----------
    centre : numpy.ndarray, shape (d,)
        :math:`\bar\mu'` in [0, 1]^d.
    weight_sum_u : float
        :math:`S' > 0`.
    weighted_sd : float
        :math:`\sigma_w \ge 0`.
    w_max : float
        Weight unit.
    lower, upper : float
        Clip of the released weight sum.
    bias_corrected : bool, default False
    nodes : int, default 12
        Quantiles per bootstrap dimension, >= 1 (12: within 0.3% of the converged value on digits at
        epsilon 0.5 and 1, far below the standard error of Q; the cost grows as ``nodes**3 * d``).

    Returns
    -------
    float
    """
    c = np.asarray(centre, dtype=np.float64)
    s = float(weight_sum_u)
    plug = (
        w_max
        * s
        * weighted_mean_excess(c, weight_sum_u=s, weighted_sd=weighted_sd, lower=lower, upper=upper)
    )
    if not bias_corrected or weighted_sd <= 0.0:
        return plug
    z = _normal_nodes(nodes)

    def boot(
        scale: float,
    ) -> float:  # E*[F(mubar*, S*)], round 1 re-simulated with noise sd `scale`
        s_star = np.clip(s + scale * z, lower, upper)[:, None, None, None]  # (k, 1, 1, 1)
        mu_star = np.clip(
            (s * c[None, None, None, :] + scale * z[None, :, None, None]) / s_star, 0.0, 1.0
        )  # (k, k, 1, d)
        s_2 = np.clip(s_star + weighted_sd * z[None, None, :, None], lower, upper)  # (k, 1, k, 1)
        g = clipped_centre_sq_error(mu_star, s_star * mu_star / s_2, weighted_sd / s_2)
        return float((w_max * s_star[:, 0, 0, 0] * g.sum(axis=3).mean(axis=(1, 2))).mean())

    return 2.0 * plug - boot(weighted_sd)


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
    debiased: bool = False,
) -> float:
    r"""Delta-method MSE of Cochran's Q'' (standard weighted mean, clipping ignored).

    With ``debiased=True``, of the debiased :math:`\hat Q = Q'' - W E\lVert e\rVert^2`: the squared
    bias term :math:`(w_{\max}S)^2 c^2 (d + m)^2` is left out, the variance kept.

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
    debiased : bool, default False
        MSE of the debiased estimate (variance only) instead of the plug-in's.

    Returns
    -------
    float
    """
    c = (weighted_sd / weight_sum_u) ** 2
    m = centre_sq
    e4 = c * c * ((0.0 if debiased else (dim + m) ** 2) + 2.0 * (dim - 1 + (1.0 + m) ** 2))
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


def _contain(interval: tuple[float, float], estimate: float) -> tuple[float, float]:
    """Return ``interval`` widened (if needed) to contain ``estimate``.

    A released interval never excludes its own estimate; widening only raises coverage.
    """
    return min(interval[0], estimate), max(interval[1], estimate)


def attach_errors(
    res: HeterogeneityResult,
    cfg: HeterogeneityConfig,
    p1: RoundPlan,
    p2: RoundPlan,
    sens: Sensitivities,
    n: int,
    d: int,
    *,
    n_centre: int | None = None,
) -> None:
    r"""Debias D'' and Q'', then fill noise levels, closed-form MSEs, intervals and the paper's intervals.

    **Debiasing** (p = 2; Q in the standard form). :math:`D'' = D + \lVert\mu' - \mu\rVert^2 + Z_D` and
    :math:`Q'' = Q + W\lVert\bar\mu' - \bar\mu\rVert^2 + Z_Q` (:math:`W = w_{\max}S`), so the plug-ins
    are biased up by the expected squared error of the released centre. The released estimates are
    :math:`\hat D = D'' - \hat A_D` and :math:`\hat Q = Q'' - \hat A_Q`, with
    :math:`\hat A_D` = :func:`dispersion_excess` at the released mean and :math:`\hat A_Q = w_{\max}S'\,`
    :func:`weighted_mean_excess` at the released weighted mean and weight sum (plug-ins for the unknown
    :math:`\mu`, :math:`\bar\mu`, :math:`S`). The noise scales are public, so this is post-processing.
    Then :math:`\hat D, \hat Q` are clamped at 0 (the unclamped values in each statistic's
    ``details["unclipped_estimate"]``) and :math:`I^2 = \max(0, 1 - (n-1)/\hat Q)`. Paper 000's plug-ins
    stay in ``details["plugin_estimate"]`` with their MSE in ``details["plugin_mse_theory"]``.

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
    n_centre : int, optional
        Clients in round 1's sum (the released weight sum is clipped to ``[n_centre u_min, n_centre]``);
        default ``n``.
    """
    if not cfg.private:
        return
    import scipy.stats  # lazily (costly import)

    n1 = n if n_centre is None else n_centre
    if res.dispersion is not None:
        tau = p1.sigma * sens.mean_sum / n1
        sd_d = p2.sigma * sens.dispersion_sum / n
        est = res.dispersion
        est.noise_sd = sd_d
        res.details["mean_noise_sd"] = tau
        if cfg.p == 2.0 and res.mean is not None:
            plugin = est.estimate
            raw = float(est.details.get("plugin_unclipped", plugin))
            excess = dispersion_excess(res.mean, tau, bias_corrected=True)
            unclipped = raw - excess
            est.estimate = max(0.0, unclipped)
            res.details["dispersion_unclipped"] = unclipped
            # plug-in of the released mean for the clipping (the exact mean is not known to the server)
            plugin_mse = dispersion_mse(dim=d, mean_sd=tau, dispersion_sd=sd_d, centre=res.mean)
            e2, e4 = clipped_error_moments(res.mean, tau)
            est.mse_theory = float(sd_d**2 + (e4 - e2 * e2).sum())  # the bias term is gone
            est.standard_error = math.sqrt(est.mse_theory)
            est.details.update(
                unclipped_estimate=unclipped,
                bias_correction=excess,
                plugin_mse_theory=plugin_mse,
                plugin_standard_error=math.sqrt(plugin_mse),
            )
            est.paper_interval = paper_interval_dispersion(plugin, xi1_sq=tau * tau, n=n)
            # the union bound holds around the plug-in D'' (D = D'' - A - Z_D), whatever is released
            est.interval = _contain(
                dispersion_interval(
                    plugin, mean=res.mean, mean_sd=tau, dispersion_sd=sd_d, level=cfg.confidence
                ),
                est.estimate,
            )
    if res.q is not None and res.i2 is not None and res.weight_sum is not None:
        s_u = res.weight_sum / sens.w_max
        sd_w = p1.sigma * sens.weighted_sum
        sd_q = p2.sigma * sens.q_sum * sens.w_max
        res.q.noise_sd = sd_q
        assert res.weighted_mean is not None
        eta1_sq = (sd_w / s_u) ** 2
        res.details["weighted_mean_noise_sd"] = math.sqrt(eta1_sq)
        q_plugin = res.q.estimate
        res.q.paper_interval = paper_interval_q(
            q_plugin, eta1_sq=eta1_sq, n=n, weight_sum=res.weight_sum
        )
        if cfg.form == "standard":
            m_hat = res.weighted_mean
            raw = float(res.q.details.get("plugin_unclipped", q_plugin))
            excess = q_excess(
                m_hat,
                weight_sum_u=s_u,
                weighted_sd=sd_w,
                w_max=sens.w_max,
                lower=n1 * sens.u_min,
                upper=n1,
                bias_corrected=True,
            )
            unclipped = raw - excess
            res.q.estimate = max(0.0, unclipped)
            res.details["q_unclipped"] = unclipped
            res.i2.estimate = i_squared(res.q.estimate, n)
            kw = {
                "dim": d,
                "weighted_sd": sd_w,
                "weight_sum_u": s_u,
                "w_max": sens.w_max,
                "q_sd": sd_q,
                "centre_sq": float(m_hat @ m_hat),
            }
            plugin_mse = q_mse(**kw)  # type: ignore[arg-type]
            res.q.mse_theory = q_mse(**kw, debiased=True)  # type: ignore[arg-type]
            res.q.standard_error = math.sqrt(res.q.mse_theory)
            res.q.details.update(
                unclipped_estimate=unclipped,
                bias_correction=excess,
                plugin_mse_theory=plugin_mse,
                plugin_standard_error=math.sqrt(plugin_mse),
            )
            i2_plugin_mse = i2_mse(q=q_plugin, n=n, q_mse_value=plugin_mse)
            res.i2.details.update(
                plugin_mse_theory=i2_plugin_mse, plugin_standard_error=math.sqrt(i2_plugin_mse)
            )
            res.i2.mse_theory = i2_mse(q=res.q.estimate, n=n, q_mse_value=res.q.mse_theory)
            res.i2.standard_error = math.sqrt(res.i2.mse_theory)
            # the union bound holds around the plug-in Q'' (Q = Q'' - W||e||^2 - Z_Q)
            lo, hi = q_interval(
                q_plugin,
                centre=m_hat,
                weight_sum_u=s_u,
                weighted_sd=sd_w,
                w_max=sens.w_max,
                q_sd=sd_q,
                level=cfg.confidence,
            )
            res.q.interval = _contain((lo, hi), res.q.estimate)
            # I^2 is flat at 0 for Q <= n - 1: the upper end is taken at least one MSE-based z above
            # the plug-in Q'' (a wider interval, still covering), so a clipped estimate gets a real upper
            # end whenever I^2's standard error is positive, never [0, 0] beside a positive error
            z = float(scipy.stats.norm.ppf(0.5 + cfg.confidence / 2.0))
            q_up = max(hi, q_plugin + z * math.sqrt(plugin_mse))
            res.i2.interval = _contain((i_squared(lo, n), i_squared(q_up, n)), res.i2.estimate)
