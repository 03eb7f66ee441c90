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

Decoding: each coordinate of the encoding is :math:`N(0, 2s)` (the sketch) plus independent noise of
variance :math:`\sigma_e^2`, so the decoders estimate :math:`s + \tau` with :math:`\tau = \sigma_e^2 / 2`
(exactly for the mean of squares, whose chi-square interval stays exact up to the noise being discrete);
the server subtracts :math:`\tau` from the estimate and the interval (clipping at 0 is post-processing),
and the p-value under independence becomes :math:`P(D > x) = E_G[\chi^2_{\mathrm{sf}}((x + \tau)/G -
\tau)]` (:func:`~fedstats.analyses.chi2.calibration.sketched_p_value` with ``noise_offset``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats._validation import check_int, check_real
from fedstats.errors import ParameterError
from fedstats.privacy.analysis import PrivacyLoss, approx_dp_to_zcdp, zcdp_to_approx_dp
from fedstats.privacy.mechanisms.samplers import sample_discrete_gaussian
from fedstats.randomness import RNG

__all__ = [
    "Chi2Privacy",
    "add_discrete_gaussian",
    "plan_chi2_privacy",
]

_CHUNK = 1 << 16


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
        """Discrete Gaussian parameter of the round-1 noise (counts)."""
        return self.marginal_sensitivity / math.sqrt(2.0 * self.rho_marginals)

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
        exact = 2.0**frac_bits * 2.0 * self.max_records * column_norm + 2.0 * math.sqrt(ell)
        root = math.sqrt(2.0 * self.rho_projection)
        k = 0
        while exact / 2.0**k / root > 2.0**24:
            k += 1
        sensitivity = exact / 2.0**k + (math.sqrt(ell) if k > 0 else 0.0)
        return k, sensitivity / root

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


def plan_chi2_privacy(
    *, epsilon: float, delta: float, max_records: int, round1_fraction: float = 0.5
) -> Chi2Privacy:
    """Convert an (epsilon, delta) budget into the two rounds' zCDP shares.

    Parameters
    ----------
    epsilon : float
        In (0, inf).
    delta : float
        In (0, 1).
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
    rho = approx_dp_to_zcdp(epsilon=epsilon, delta=delta)  # checks epsilon and delta
    t = check_int("max_records", max_records, low=1)
    frac = check_real(
        "round1_fraction", round1_fraction, low=0.0, high=1.0, low_open=True, high_open=True
    )
    return Chi2Privacy(float(epsilon), float(delta), rho, rho * frac, rho * (1.0 - frac), t)


def add_discrete_gaussian(values: Any, sigma: float, rng: RNG) -> np.ndarray:
    """Return ``values`` (integers, any shape) plus discrete Gaussian noise of parameter ``sigma``, as float64.

    The exact sampler (:func:`~fedstats.privacy.mechanisms.samplers.sample_discrete_gaussian`) draws the
    integer noise; the sum is formed in float64 (exact below 2**53, far above any noise it carries).

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
    z = sample_discrete_gaussian(sigma * sigma, np.shape(values), rng)
    return np.asarray(values, dtype=np.float64) + z.astype(np.float64)
