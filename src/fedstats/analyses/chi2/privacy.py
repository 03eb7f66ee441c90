r"""FED-chi^2 with central differential privacy: discrete Gaussian noise on both secure sums (ours).

FED-chi^2 (Pang et al. 2023) releases the summed marginals (round 1) and the summed projection (round 2)
exactly. With ``epsilon`` the server adds discrete Gaussian noise (Canonne, Kamath & Steinke 2020) to each
integer sum before using it, so everything it learns and publishes is differentially private.

Neighbouring datasets: one client's table replaced by any other with at most ``max_records`` records (the
number of clients is public). Sensitivities, in integer units:

* round 1, the marginals ``(row sums, column sums)``: a client's row sums have L1 norm at most ``T`` =
  ``max_records``, so the difference of two has L2 norm at most ``sqrt(2) T``; with the column sums,
  :math:`\Delta_1 = 2T`.
* round 2, the fixed-point projection :math:`q_i = \mathrm{round}(2^f P D v^{(i)}) - \text{offset}`,
  :math:`D = \mathrm{diag}(1/\sqrt{\bar v})`: :math:`\lVert P D (v - v')\rVert_2 \le \lVert v - v'
  \rVert_1 \max_j \lVert P_j\rVert_2 / \sqrt{\bar v_j} \le 2T c`, and randomized rounding moves each
  coordinate by less than 1, so :math:`\Delta_2 = 2^f \cdot 2Tc + 2\sqrt{l}`. ``vbar`` comes from the noisy
  marginals (post-processing), so ``c`` is public.

The budget is converted to zCDP (:func:`~fedstats.privacy.analysis.approx_dp_to_zcdp`), split
``round1_fraction`` / ``1 - round1_fraction`` between the rounds, and each round's discrete Gaussian has
:math:`\sigma = \Delta / \sqrt{2\rho}` (Canonne, Kamath &
Steinke 2020, Thm. 4).

Rounding: every noise scale is rounded UP, never to nearest (a larger noise is always private, a smaller one
is not). The shares are rounded down so that ``rho_marginals + rho_projection <= rho`` exactly (as rationals);
each ``sigma`` is the smallest float with ``sigma**2 >= Delta**2 / (2 rho_round)`` exactly
(:func:`sigma_up`); the sampler receives the exact square of that float as a :class:`fractions.Fraction`
(never ``sigma * sigma`` rounded to nearest); and the projection's sensitivity, computed from floating-point
norms, is inflated by a relative ``2**-30`` to cover their rounding errors (:data:`SENSITIVITY_MARGIN`). So
the realised zCDP loss of each round is at most its share, as exact rationals.

Decoding: each coordinate of the encoding is :math:`N(0, 2s)` (the sketch) plus independent noise of
variance :math:`\sigma_e^2`, so the decoders estimate :math:`s + \tau` with :math:`\tau = \sigma_e^2 / 2`
(exactly for the mean of squares, whose chi-square interval stays exact up to the noise being discrete);
the server subtracts :math:`\tau` from the estimate and the interval (clipping at 0 is post-processing).
The test's p-value and decision come from the simulated null distribution of the released statistic, which
also carries the noisy marginals (:mod:`fedstats.analyses.chi2.null`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from fedstats._validation import check_epsilon_delta, check_int, check_open_unit
from fedstats.errors import ParameterError
from fedstats.privacy.analysis import PrivacyLoss, approx_dp_to_zcdp, zcdp_to_approx_dp
from fedstats.privacy.mechanisms.samplers import sample_discrete_gaussian
from fedstats.randomness import RNG

__all__ = [
    "SENSITIVITY_MARGIN",
    "Chi2Privacy",
    "add_discrete_gaussian",
    "plan_chi2_privacy",
    "sigma_up",
]

_CHUNK = 1 << 16

SENSITIVITY_MARGIN = 1.0 + 2.0**-30
"""Relative inflation of a sensitivity computed from floating-point norms (covers their rounding error)."""


def _down(x: float) -> float:
    return math.nextafter(x, -math.inf)


def sigma_up(sensitivity: float, rho: float) -> float:
    r"""The smallest float ``sigma`` with ``sigma**2 >= sensitivity**2 / (2 rho)`` exactly (as rationals).

    Canonne, Kamath & Steinke 2020, Thm. 4: :math:`N_{\mathbb Z}(0, \sigma^2)` noise on an integer query of
    L2 sensitivity :math:`\Delta` is :math:`\Delta^2/(2\sigma^2)`-zCDP; rounding ``sigma`` up keeps the loss
    at most ``rho``.

    Parameters
    ----------
    sensitivity : float
        In (0, inf).
    rho : float
        In (0, inf).

    Returns
    -------
    float
        ``sigma > 0``, rounded up.
    """
    need = Fraction(sensitivity) ** 2 / (2 * Fraction(rho))
    s = sensitivity / math.sqrt(2.0 * rho)
    while Fraction(s) ** 2 < need:
        s = math.nextafter(s, math.inf)
    while s > 0 and Fraction(math.nextafter(s, 0.0)) ** 2 >= need:
        s = math.nextafter(s, 0.0)
    return s


@dataclass(frozen=True)
class Chi2Privacy:
    """The central DP plan of one FED-chi^2 run (module docstring).

    Attributes
    ----------
    epsilon, delta : float
        The (epsilon, delta) budget of the whole run.
    rho : float
        Its zCDP equivalent; ``rho_marginals + rho_projection == rho``.
    rho_marginals, rho_projection : float
        The share of each round.
    max_records : int
        ``T``, the declared largest total count of one client's table.
    """

    epsilon: float
    delta: float
    rho: float
    rho_marginals: float
    rho_projection: float
    max_records: int

    @property
    def marginal_sensitivity(self) -> float:
        """L2 sensitivity of the round-1 sum (counts): ``2T``."""
        return 2.0 * self.max_records

    @property
    def marginal_sigma(self) -> float:
        """Discrete Gaussian parameter of the round-1 noise (counts), rounded up (:func:`sigma_up`)."""
        return sigma_up(self.marginal_sensitivity, self.rho_marginals)

    def projection_release(self, column_norm: float, frac_bits: int, ell: int) -> tuple[int, float]:
        """How the round-2 sum is released: rounded to the grid ``2**(k - f)``, plus ``N_Z(0, sigma^2)``.

        On the fixed-point grid ``2**-f`` the sum's L2 sensitivity is ``2**f 2 T c + 2 sqrt(l)``; the
        exact sampler takes ``sigma`` up to ``2**42``, so the sum is first rounded to the nearest multiple
        of ``2**k`` (each coordinate moves by at most 1/2 on that grid, adding ``sqrt(l)`` to the
        sensitivity when ``k > 0``), with the smallest ``k`` that keeps ``sigma <= 2**24``.

        Parameters
        ----------
        column_norm : float
            ``c = max_j ||P_j|| / sqrt(vbar_j)`` (:func:`~fedstats.analyses.chi2.estimator.projection_norms`).
        frac_bits : int
            ``f``, the fixed-point fraction bits of round 2.
        ell : int
            Encoding size ``l``.

        Returns
        -------
        (int, float)
            ``k >= 0`` and ``sigma`` in units of ``2**(k - f)``.
        """
        k, sensitivity = self.projection_sensitivity(column_norm, frac_bits, ell)
        return k, sigma_up(sensitivity, self.rho_projection)

    def projection_sensitivity(
        self, column_norm: float, frac_bits: int, ell: int
    ) -> tuple[int, float]:
        """``k`` and the round-2 L2 sensitivity on the grid ``2**(k - f)`` (:meth:`projection_release`)."""
        root_l = math.nextafter(math.sqrt(ell), math.inf)
        exact = 2.0**frac_bits * 2.0 * self.max_records * column_norm + 2.0 * root_l
        exact *= SENSITIVITY_MARGIN
        root = math.sqrt(2.0 * self.rho_projection)
        k = 0
        while exact / 2.0**k / root > 2.0**24:
            k += 1
        return k, (exact / 2.0**k + (root_l if k > 0 else 0.0)) * SENSITIVITY_MARGIN

    def loss(self) -> PrivacyLoss:
        """The run's privacy loss: ``rho`` and its (epsilon, delta) at ``delta`` (at most the budget)."""
        return PrivacyLoss(zcdp_to_approx_dp(rho=self.rho, delta=self.delta), self.delta, self.rho)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly description (``details["privacy"]`` of the result)."""
        return {
            "mechanism": "discrete-gaussian",
            "noise": "central",
            "neighbouring": "replace one client's table (at most max_records records); n public",
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
            "rho_marginals": self.rho_marginals,
            "rho_projection": self.rho_projection,
            "max_records": self.max_records,
            "sigma_marginals": self.marginal_sigma,
        }


@functools.lru_cache(maxsize=256)
def _rho(epsilon: float, delta: float) -> float:
    return approx_dp_to_zcdp(epsilon=epsilon, delta=delta)


def plan_chi2_privacy(
    *, epsilon: float, delta: float, max_records: int, round1_fraction: float = 0.5
) -> Chi2Privacy:
    """Convert an (epsilon, delta) budget into the two rounds' zCDP shares.

    Parameters
    ----------
    epsilon, delta : float
        The whole run's (epsilon, delta)-DP budget, both rounds together: epsilon in (0, inf), delta in
        (0, 1) (:func:`~fedstats._validation.check_epsilon_delta`).
    max_records : int
        Declared largest total count of one client's table, >= 1.
    round1_fraction : float
        Share of rho spent on the marginals, in (0, 1) (default 0.5).

    Returns
    -------
    Chi2Privacy

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """
    eps, dlt = check_epsilon_delta(epsilon, delta)
    rho = _rho(eps, dlt)
    t = check_int("max_records", max_records, low=1)
    frac = check_open_unit("round1_fraction", round1_fraction)
    # shares rounded down, so that rho_marginals + rho_projection <= rho exactly (as rationals)
    r1 = rho * frac
    while Fraction(r1) > Fraction(rho) * Fraction(frac):
        r1 = _down(r1)
    r2 = rho - r1
    while Fraction(r1) + Fraction(r2) > Fraction(rho):
        r2 = _down(r2)
    return Chi2Privacy(float(epsilon), float(delta), rho, r1, r2, t)


def add_discrete_gaussian(values: Any, sigma: float, rng: RNG) -> np.ndarray:
    """Return ``values`` (integers, any shape) plus discrete Gaussian noise of parameter ``sigma``, as float64.

    The exact sampler (:func:`~fedstats.privacy.mechanisms.samplers.sample_discrete_gaussian`) draws the
    integer noise with parameter ``sigma**2`` taken exactly (the rational square of the float ``sigma``, not
    ``sigma * sigma`` rounded to nearest); the sum is formed in float64 (exact below 2**53, far above any
    noise it carries).

    Parameters
    ----------
    values : array_like of int, any shape
        The released integer sums.
    sigma : float
        The discrete Gaussian's parameter, in (0, 2**42].
    rng : RNG
        The server's generator.

    Returns
    -------
    numpy.ndarray
        float64, the shape of ``values``.

    Raises
    ------
    ParameterError
        If ``sigma`` exceeds the sampler's range (2**42).
    """
    if not sigma <= 2.0**42:
        raise ParameterError(
            "epsilon", sigma, "a budget whose noise (sigma here) the exact sampler supports (2**42)"
        )
    z = sample_discrete_gaussian(Fraction(sigma) ** 2, np.shape(values), rng)
    return np.asarray(values, dtype=np.float64) + z.astype(np.float64)
