r"""Sensitivities and noise calibration for the private heterogeneity protocol (paper 000, corrected).

Neighbouring datasets differ in one client's vector (replace-one; n is public). Every release is the *sum*
over clients of a bounded report, so its L2 sensitivity is the largest change one client can cause:

=====================  ====================================================  ==========================
release (a sum)        one client's report                                   L2 sensitivity
=====================  ====================================================  ==========================
mean (round 1)         :math:`x_i \in [0,1]^d`                               :math:`\sqrt d`
weighted (round 1)     :math:`(u_i x_i, u_i)`, :math:`u_i = w_i/w_{\max}`    :math:`\sqrt{d + (1-u_{\min})^2}`
dispersion (round 2)   :math:`\lVert x_i - \mu'\rVert^p \in [0, d^{p/2}]`    :math:`d^{p/2}`
Q (round 2)            :math:`w_i\lVert x_i - \bar\mu'\rVert^2 \in [0, w_{\max}d]`  :math:`w_{\max} d`
=====================  ====================================================  ==========================

Derivations. A coordinate of :math:`x_i` moves by at most 1, so the mean's sum moves by at most
:math:`\sqrt d` (the mean by :math:`\sqrt d/n`, paper 000's Thm. 3.8). The round-2 centres
:math:`\mu', \bar\mu'` are released in round 1 and *clipped to* :math:`[0,1]^d` (post-processing), so
:math:`\lVert x_i - \mu'\rVert_2^2 \in [0, d]`: the dispersion sum moves by at most :math:`d^{p/2}` (the
average by :math:`d^{p/2}/n`), not by the mean's :math:`\sqrt d/n` that the paper uses. Cochran's weights
:math:`w_i = 1/s_i^2` are unbounded (:math:`s_i^2 \to 0`), so Q has *unbounded* sensitivity; fedstats
floors the within-vector variance, :math:`s_i^2 \leftarrow \max(s_i^2, v_{\min})`, so
:math:`w_i \in [w_{\min}, w_{\max}] = [4, 1/v_{\min}]` (:math:`s_i^2 \le 1/4` on :math:`[0,1]`). Clients
report :math:`u_i = w_i/w_{\max} \in [u_{\min}, 1]`, :math:`u_{\min} = \min(1, 4 v_{\min})`; the
weighted-mean report :math:`(u_i x_i, u_i)` then moves by at most 1 in each of the first d coordinates and
by :math:`1 - u_{\min}` in the last, and :math:`u_i\lVert x_i - \bar\mu'\rVert^2 \in [0, d]`.

Every block is divided by its sensitivity on the client (unit sensitivity), so a round with k blocks has
joint L2 sensitivity :math:`\sqrt k` and one isotropic noise level :math:`\sigma` (normalised units).

The budget is split across the two rounds by ``round1_fraction`` and composed sequentially
(:math:`\varepsilon = \varepsilon_1 + \varepsilon_2`, :math:`\delta = \delta_1 + \delta_2`); I^2 is
post-processing of Q and costs nothing (the paper's third noise term is unnecessary).

With secure aggregation the noise is the *distributed discrete Gaussian* (Kairouz, Liu & Steinke, ICML 2021):
each of n clients adds an integer :math:`N_{\mathbb Z}(0, \sigma_s^2)` share, and the sum of shares is
:math:`\rho`-zCDP with (their Prop. 14, bounds 2 and 3)

.. math::

    \rho = \min\Big\{\tfrac12\big(\tfrac{\Delta_2^2}{n\sigma_s^2} + \tfrac{2\tau\Delta_1}{\sqrt n\sigma_s}
    + \tau^2 d\big),\; \tfrac12\big(\tfrac{\Delta_2}{\sqrt n\sigma_s} + \tau\sqrt d\big)^2\Big\},\quad
    \tau = 10\sum_{k=1}^{n-1} e^{-2\pi^2\sigma_s^2 k/(k+1)},

composed over rounds by adding :math:`\rho` and converted to :math:`(\varepsilon,\delta)` with
:func:`fedstats.privacy.analysis.zcdp.zcdp_to_approx_dp`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from fedstats._validation import (
    check_choice,
    check_epsilon_delta,
    check_int,
    check_open_unit,
    check_real,
)
from fedstats.privacy.analysis.distributed_gaussian import ddg_rho, ddg_share_variance
from fedstats.privacy.analysis.gaussian import (
    PrivacyWarning,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
)

__all__ = [
    "MECHANISMS",
    "NOISE_MODES",
    "Sensitivities",
    "ddg_rho",
    "ddg_share_variance",
    "gaussian_sigma",
    "quiet_gaussian_sigma",
    "sensitivities",
    "split_budget",
]

MECHANISMS: tuple[str, ...] = ("analytic", "classical")
NOISE_MODES: tuple[str, ...] = ("central", "distributed", "aggregators")


@dataclass(frozen=True)
class Sensitivities:
    r"""L2 sensitivities of the four summed releases (see the module docstring).

    Attributes
    ----------
    dim : int
    p : float
    min_variance : float
        Floor :math:`v_{\min}` on the within-vector variance.
    mean_sum : float
        :math:`\sqrt d`.
    weighted_sum : float
        :math:`\sqrt{d + (1 - u_{\min})^2}` (in units of :math:`w_{\max}`).
    dispersion_sum : float
        :math:`d^{p/2}`.
    q_sum : float
        :math:`d` in units of :math:`w_{\max}` (:math:`w_{\max} d` in weight units).
    w_max, u_min : float
    """

    dim: int
    p: float
    min_variance: float
    mean_sum: float
    weighted_sum: float
    dispersion_sum: float
    q_sum: float
    w_max: float
    u_min: float

    def mean_average(self, n: int) -> float:
        r"""Sensitivity of the mean, :math:`\sqrt d / n`."""
        return self.mean_sum / n

    def dispersion_average(self, n: int) -> float:
        r"""Sensitivity of the average dispersion, :math:`d^{p/2}/n` (paper 000 uses :math:`\sqrt d/n`)."""
        return self.dispersion_sum / n

    @property
    def q_weight_units(self) -> float:
        r"""Sensitivity of Q in weight units, :math:`w_{\max} d`."""
        return self.q_sum * self.w_max


def sensitivities(dim: int, *, p: float = 2.0, min_variance: float = 0.05) -> Sensitivities:
    """Sensitivities for vectors in :math:`[0,1]^d` (module docstring has the derivations).

    Parameters
    ----------
    dim : int
        d >= 1.
    p : float
        Dispersion exponent in [1, 64].
    min_variance : float
        Floor on the within-vector variance, in (0, 1/4].

    Returns
    -------
    Sensitivities

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """
    d = check_int("dim", dim, low=1)
    pp = check_real("p", p, low=1.0, high=64.0)
    v = check_real("min_variance", min_variance, low=0.0, high=0.25, low_open=True)
    u_min = min(1.0, 4.0 * v)
    return Sensitivities(
        dim=d,
        p=pp,
        min_variance=v,
        mean_sum=math.sqrt(d),
        weighted_sum=math.sqrt(d + (1.0 - u_min) ** 2),
        dispersion_sum=float(d) ** (pp / 2.0),
        q_sum=float(d),
        w_max=1.0 / v,
        u_min=u_min,
    )


def split_budget(
    epsilon: float, delta: float, round1_fraction: float = 0.5
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Split (epsilon, delta) into the two rounds' budgets (sequential composition).

    Parameters
    ----------
    epsilon : float
        Total epsilon, > 0.
    delta : float
        Total delta, in (0, 1).
    round1_fraction : float
        Share of both epsilon and delta spent on round 1, in (0, 1).

    Returns
    -------
    ((epsilon_1, delta_1), (epsilon_2, delta_2))
        Round 1's ``round1_fraction`` of each, and round 2's remainder.

    Raises
    ------
    ParameterError
        If ``epsilon`` is not positive, or ``delta`` or ``round1_fraction`` is outside (0, 1).
    """
    e, dl = check_epsilon_delta(epsilon, delta)
    f = check_open_unit("round1_fraction", round1_fraction)
    return (e * f, dl * f), (e * (1.0 - f), dl * (1.0 - f))


def gaussian_sigma(mechanism: str, *, epsilon: float, delta: float, sensitivity: float) -> float:
    r"""Noise standard deviation of the analytic or classical Gaussian mechanism.

    Parameters
    ----------
    mechanism : {"analytic", "classical"}
        ``"analytic"``: Balle & Wang 2018 (exact, any epsilon). ``"classical"``:
        :math:`\Delta\sqrt{2\ln(1.25/\delta)}/\varepsilon` (Dwork & Roth Thm. A.1), which is only proven
        for epsilon < 1; larger epsilons are accepted to reproduce paper 000 (eps up to 5) and emit a
        :class:`~fedstats.privacy.analysis.gaussian.PrivacyWarning`.
    epsilon, delta, sensitivity : float
        The target (epsilon > 0, delta in (0, 1)) and the L2 sensitivity (> 0) of one client's report.

    Returns
    -------
    float
        The noise standard deviation, in the units of the sensitivity.

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """
    check_choice("mechanism", mechanism, MECHANISMS)
    if mechanism == "analytic":
        return analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    return classical_gaussian_sigma(
        epsilon=epsilon, delta=delta, sensitivity=sensitivity, allow_large_epsilon=True
    )


def quiet_gaussian_sigma(
    mechanism: str, *, epsilon: float, delta: float, sensitivity: float
) -> float:
    """:func:`gaussian_sigma` without the classical mechanism's warning (the caller flags it instead).

    Parameters
    ----------
    mechanism : {"analytic", "classical"}
    epsilon, delta, sensitivity : float
        As in :func:`gaussian_sigma`.

    Returns
    -------
    float
        The noise standard deviation.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return gaussian_sigma(mechanism, epsilon=epsilon, delta=delta, sensitivity=sensitivity)
