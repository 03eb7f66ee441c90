r"""Local DP mechanisms for a real value in [-1, 1]: Harmony, Duchi et al., Piecewise.

References
----------
T. T. Nguyen, X. Xiao, Y. Yang, S. C. Hui, H. Shin, J. Shin. Collecting and Analyzing Data from Smart Device
Users with Local Differential Privacy (Harmony), arXiv:1606.05053, 2016, Sec. 4.
N. Wang, X. Xiao, Y. Yang, J. Zhao, S. C. Hui, H. Shin, J. Shin, G. Yu. Collecting and Analyzing
Multidimensional Data with Local Differential Privacy, ICDE 2019: Algorithm 1 (Duchi et al.'s one-dimensional
mechanism), Algorithm 2 (Piecewise mechanism), Lemmas 1-2 (unbiasedness) and Eq. (5)-(6) (variances).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fedstats._numeric import round_to_integers
from fedstats._validation import check_finite_array, check_int, check_local_epsilon
from fedstats.errors import DataError
from fedstats.privacy.analysis.loss import (
    PrivacyLoss,
    continuous_privacy_loss,
    discrete_privacy_loss,
    randomized_response_specs,
)
from fedstats.privacy.mechanisms.base import Mechanism
from fedstats.privacy.mechanisms.noise import grid_spacing
from fedstats.privacy.mechanisms.words import bernoulli
from fedstats.randomness import RNG

__all__ = ["DuchiMechanism", "Harmony", "PiecewiseMechanism"]


def _check_epsilon(epsilon: Any) -> float:
    return check_local_epsilon("epsilon", epsilon, high=700.0)


def _check_unit(values: ArrayLike) -> np.ndarray:
    x = check_finite_array("values", values)
    if (x < -1.0).any() or (x > 1.0).any():
        raise DataError("values must lie in [-1, 1] (clip or rescale them first)")
    return x


class Harmony(Mechanism):
    r"""Harmony (Nguyen et al. 2016): one private bit for a value in [-1, 1], reported as :math:`\pm c`.

    Round x to +-1 with :math:`P(+1) = (1+x)/2`, apply randomized response, and report :math:`\pm c`,
    :math:`c = (e^\varepsilon + 1)/(e^\varepsilon - 1)`.

    Parameters
    ----------
    epsilon : float
        Local privacy parameter, in (0, 700].

    Raises
    ------
    ParameterError
        If ``epsilon`` is invalid.

    Notes
    -----
    :math:`P(+c \mid x) = 1/2 + x(e^\varepsilon - 1)/(2(e^\varepsilon + 1))`, so the report is unbiased with
    variance :math:`c^2 - x^2`. Outputs are two fixed doubles (finite set: safe). Privacy loss: exact, from
    the output probabilities of x = -1 and x = 1 (they are linear in x, so the extremes are the worst case).
    For one-dimensional data this is the same distribution as Duchi et al.'s mechanism.
    """

    _PARAMETERS = ("epsilon",)

    def __init__(self, *, epsilon: float) -> None:
        self.epsilon = _check_epsilon(epsilon)
        self.c = (math.exp(self.epsilon) + 1.0) / math.expm1(self.epsilon)
        self._slope = math.expm1(self.epsilon) / (2.0 * (math.exp(self.epsilon) + 1.0))

    @property
    def release_grid(self) -> str:
        """Where the outputs lie: a finite set, a ``2**-k`` grid, or floats (simulation only)."""
        return f"two values {{-c, +c}}, c = {self.c:.6g}"

    def prob_positive(self, value: ArrayLike) -> Any:
        """Probability of reporting ``+c`` for each value in [-1, 1]."""
        return 0.5 + self._slope * np.asarray(value, dtype=np.float64)

    def randomize(self, values: ArrayLike, rng: RNG) -> np.ndarray:
        """Report +-c for each value in [-1, 1].

        Parameters
        ----------
        values : array_like of float, any shape, in [-1, 1]
        rng : numpy.random.Generator or SecureGenerator

        Returns
        -------
        numpy.ndarray of float64, same shape, entries in {-c, +c}

        Raises
        ------
        DataError
            If a value is outside [-1, 1] or not finite.
        """
        x = _check_unit(values)
        pos = bernoulli(self.prob_positive(x).ravel(), x.size, rng).reshape(x.shape)
        return np.where(pos, self.c, -self.c)

    def variance(self, value: ArrayLike | None = None) -> Any:
        """Variance of one report, :math:`c^2 - x^2` (worst case :math:`c^2` at x = 0)."""
        if value is None:
            return self.c**2
        return self.c**2 - np.asarray(value, dtype=np.float64) ** 2

    def bias(self, value: ArrayLike | None = None) -> Any:
        """0: the report is unbiased."""
        return 0.0 if value is None else np.zeros(np.shape(value))

    def probabilities(self, inputs: ArrayLike = (-1.0, 1.0)) -> np.ndarray:
        """Output distribution over (-c, +c) for each input, shape (n_inputs, 2)."""
        p = self.prob_positive(np.asarray(inputs, dtype=np.float64))
        return np.stack([1.0 - p, p], axis=1)

    def privacy_loss(self) -> PrivacyLoss:
        r"""Exact loss from the output probabilities of the extreme inputs (in log space).

        For x = 1, :math:`P(+c) = 1/(1 + e^{-\varepsilon})` and :math:`P(-c) = e^{-\varepsilon} P(+c)`; for
        x = -1 the two are swapped. Described as randomized response at epsilon.
        """
        lp = -math.log1p(math.exp(-self.epsilon))
        lq = lp - self.epsilon
        eps = discrete_privacy_loss([[lq, lp], [lp, lq]], log_space=True)
        # the extreme inputs give randomized response's matrix, which dominates every other pair
        return PrivacyLoss(eps, mechanisms=randomized_response_specs(self.epsilon))


class DuchiMechanism(Harmony):
    r"""Duchi et al.'s one-dimensional mechanism as given by Wang et al. (ICDE 2019, Algorithm 1).

    Reports :math:`+C` with probability :math:`(e^\varepsilon - 1)t/(2e^\varepsilon + 2) + 1/2`, else
    :math:`-C`, with :math:`C = (e^\varepsilon + 1)/(e^\varepsilon - 1)`; unbiased, variance
    :math:`C^2 - t^2` (Wang et al. Eq. (5)). Identical in distribution to :class:`Harmony` in one dimension.

    Parameters
    ----------
    epsilon : float
        Local privacy parameter, in (0, 700].
    """


class PiecewiseMechanism(Mechanism):
    r"""Piecewise mechanism (Wang et al., ICDE 2019, Algorithm 2) for t in [-1, 1].

    With :math:`C = (e^{\varepsilon/2}+1)/(e^{\varepsilon/2}-1)`, :math:`l(t) = \frac{C+1}{2}t - \frac{C-1}{2}`
    and :math:`r(t) = l(t) + C - 1`, it reports a uniform point of :math:`[l(t), r(t)]` with probability
    :math:`e^{\varepsilon/2}/(e^{\varepsilon/2}+1)`, else a uniform point of
    :math:`[-C, l(t)) \cup (r(t), C]`. Unbiased, variance
    :math:`t^2/(e^{\varepsilon/2}-1) + (e^{\varepsilon/2}+3)/(3(e^{\varepsilon/2}-1)^2)` (Lemma 1, Eq. (6)).

    Parameters
    ----------
    epsilon : float
        Local privacy parameter, in (0, 700].
    resolution_bits : int or None, default None
        ``None``: continuous doubles, **simulation only** (``floating_point_safe = False``). An integer k:
        each output is moved to one of its two neighbouring points of the grid
        :math:`\gamma = 2^{\lceil\log_2 C\rceil - k}` by unbiased randomized rounding (up with probability
        equal to the fractional position). This is post-processing of the mechanism's output, so epsilon is
        unchanged, the report stays unbiased, the variance grows by at most :math:`\gamma^2/4`, and the
        released value is a grid point whatever the input (Mironov 2012); the probability of each grid point
        matches the exact mechanism's up to the rounding of the cell boundaries (relative ~1e-16).

    Raises
    ------
    ParameterError
        If a parameter is invalid.

    Notes
    -----
    Privacy loss: computed by :func:`continuous_privacy_loss` from the
    piecewise-constant density, on a grid holding the midpoint of every piece for inputs -1, 0 and 1 (the
    density takes only the two values p and p / e^eps, so this is exact).
    """

    _PARAMETERS = ("epsilon", "resolution_bits")

    def __init__(self, *, epsilon: float, resolution_bits: int | None = None) -> None:
        self.epsilon = _check_epsilon(epsilon)
        self.resolution_bits = (
            None
            if resolution_bits is None
            else check_int("resolution_bits", resolution_bits, low=1, high=40)
        )
        self.floating_point_safe = self.resolution_bits is not None
        h = math.exp(self.epsilon / 2.0)
        self.C = (h + 1.0) / (h - 1.0)
        if self.resolution_bits is not None:
            self.grid = grid_spacing(self.C, self.resolution_bits)
        self._p_center = h / (h + 1.0)
        # density inside [l, r] and outside
        self._log_p_high = math.log((math.exp(self.epsilon) - h) / (2.0 * h + 2.0))
        self._log_p_low = self._log_p_high - self.epsilon

    @property
    def release_grid(self) -> str:
        """Where the outputs lie: a finite set, a ``2**-k`` grid, or floats (simulation only)."""
        if self.resolution_bits is None:
            return f"float in [-{self.C:.6g}, {self.C:.6g}] (simulation only: continuous output)"
        return (
            f"multiples of 2^{int(math.log2(self.grid))} = {self.grid:g} in [-C, C], C = {self.C:.6g} "
            "(unbiased randomized rounding)"
        )

    def interval(self, value: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """The high-density interval ``(l(t), r(t))`` for each t."""
        t = np.asarray(value, dtype=np.float64)
        left = (self.C + 1.0) / 2.0 * t - (self.C - 1.0) / 2.0
        return left, left + self.C - 1.0

    def randomize(self, values: ArrayLike, rng: RNG) -> np.ndarray:
        """Report one point per value (simulation only, see Notes).

        Parameters
        ----------
        values : array_like of float, any shape, in [-1, 1]
        rng : numpy.random.Generator or SecureGenerator

        Returns
        -------
        numpy.ndarray of float64, same shape, in [-C, C]

        Raises
        ------
        DataError
            If a value is outside [-1, 1] or not finite.
        """
        x = _check_unit(values)
        left, right = self.interval(x)
        center = bernoulli(self._p_center, x.size, rng).reshape(x.shape)
        u = np.asarray(rng.random(size=x.shape))
        inside = left + u * (self.C - 1.0)
        w = u * (self.C + 1.0)  # position along the outer pieces, total length C + 1
        first = left + self.C  # length of [-C, l)
        outside = np.where(w < first, -self.C + w, right + (w - first))
        y = np.where(center, inside, outside)
        if self.resolution_bits is None:
            return np.asarray(y)
        # unbiased randomized rounding to the grid (post-processing: epsilon unchanged)
        return np.asarray(round_to_integers(y / self.grid, rng) * self.grid)

    def log_density(self, value: Any, outputs: np.ndarray) -> np.ndarray:
        """Log density of ``outputs`` (1-D) for the single input ``value``; ``-inf`` outside [-C, C]."""
        left, right = self.interval(float(value))
        y = np.asarray(outputs, dtype=np.float64)
        out = np.where((y >= left) & (y <= right), self._log_p_high, self._log_p_low)
        return np.where(np.abs(y) <= self.C, out, -np.inf)

    def variance(self, value: ArrayLike | None = None) -> Any:
        """Variance of one report (worst case at |t| = 1); on a grid, an upper bound (+ grid^2 / 4)."""
        h = math.exp(self.epsilon / 2.0)
        t2 = 1.0 if value is None else np.asarray(value, dtype=np.float64) ** 2
        extra = 0.0 if self.resolution_bits is None else self.grid**2 / 4.0
        return t2 / (h - 1.0) + (h + 3.0) / (3.0 * (h - 1.0) ** 2) + extra

    def bias(self, value: ArrayLike | None = None) -> Any:
        """0: the report is unbiased."""
        return 0.0 if value is None else np.zeros(np.shape(value))

    def privacy_loss(self) -> PrivacyLoss:
        """Loss from the density on the midpoints of every piece for inputs -1, 0, 1 (exact, see Notes)."""
        inputs = (-1.0, 0.0, 1.0)
        cuts = [-self.C, self.C]
        for t in inputs:
            left, right = self.interval(t)
            cuts += [float(left), float(right)]
        cuts_arr = np.unique(np.array(cuts))
        grid = 0.5 * (cuts_arr[1:] + cuts_arr[:-1])
        return PrivacyLoss(continuous_privacy_loss(self.log_density, inputs, grid))
