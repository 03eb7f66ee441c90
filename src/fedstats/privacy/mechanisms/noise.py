r"""Additive noise mechanisms (Laplace, Gaussian) that release on a documented grid.

Two paths, chosen by ``resolution_bits``:

* **grid (default, safe for release)**: the grid spacing is :math:`\gamma = 2^{\lceil\log_2\Delta\rceil - k}`
  (``k = resolution_bits``, so the sensitivity spans between :math:`2^{k-1}` and :math:`2^k` grid steps).
  Each value is snapped to the grid by :math:`\lfloor x/\gamma + 1/2\rfloor` (exact in binary floating point),
  which turns sensitivity :math:`\Delta` into the integer sensitivity :math:`\lceil\Delta/\gamma\rceil`;
  integer noise (discrete Laplace or discrete Gaussian, Canonne, Kamath, Steinke 2020) is added and the
  result multiplied back by :math:`\gamma` (exact). The released double is a function of an integer only, so
  floating-point artefacts cannot leak the input (Mironov 2012). The snap adds a deterministic bias of at most
  :math:`\gamma/2` (see :meth:`bias`).
* **float (``resolution_bits=None``, simulation only)**: ``value + rng.laplace/normal``. Fast, textbook
  variance, but the low-order bits of a floating-point sum can reveal the input (Mironov 2012):
  never release these outputs.

Privacy loss is computed for the path actually used: on the grid, the discrete Gaussian's exact
(epsilon, delta) (:func:`~fedstats.privacy.analysis.discrete_gaussian.discrete_gaussian_delta`), not the
continuous formula.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fedstats._validation import (
    check_finite_array,
    check_int,
    check_local_epsilon,
    check_open_unit,
    check_real,
)
from fedstats.errors import DataError, OverflowRiskError
from fedstats.privacy.analysis.loss import MechanismSpec, PrivacyLoss, randomized_response_specs
from fedstats.privacy.mechanisms.base import Mechanism
from fedstats.privacy.mechanisms.samplers import sample_discrete_gaussian, sample_discrete_laplace
from fedstats.randomness import RNG

__all__ = ["GaussianMechanism", "LaplaceMechanism", "grid_spacing", "snap_to_grid"]

_EXACT_INT = float(2**52)


def _ratio_up(num: float, den: float) -> float:
    """The smallest double >= num / den (the exact rational quotient of the two doubles)."""
    q = num / den
    if Fraction(q) < Fraction(num) / Fraction(den):
        q = math.nextafter(q, math.inf)
    return q


def _square_up(x: float) -> float:
    """The smallest double >= x**2 (exactly)."""
    q = x * x
    if Fraction(q) < Fraction(x) ** 2:
        q = math.nextafter(q, math.inf)
    return q


def grid_spacing(sensitivity: float, resolution_bits: int) -> float:
    r"""Grid spacing :math:`2^{\lceil\log_2 \Delta\rceil - k}` used by the grid path (a power of two)."""
    mant, exp = math.frexp(sensitivity)  # sensitivity = mant * 2**exp, mant in [0.5, 1)
    ceil_log2 = exp - 1 if mant == 0.5 else exp
    return math.ldexp(1.0, ceil_log2 - resolution_bits)


def snap_to_grid(values: np.ndarray, spacing: float) -> np.ndarray:
    r"""Integer grid indices :math:`\lfloor x/\gamma + 1/2\rfloor` (exact for a power-of-two ``spacing``).

    Raises
    ------
    OverflowRiskError
        If a value is so large that ``value / spacing`` reaches 2**50 (the release would lose exactness).
    """
    y = values / spacing
    if y.size and float(np.max(np.abs(y))) >= 2.0**50:
        raise OverflowRiskError(
            f"values up to {float(np.max(np.abs(values))):g} exceed the exact range of the release grid "
            f"(|value| < 2**50 * {spacing:g}); lower resolution_bits or rescale the data"
        )
    return np.floor(y + 0.5)


def _check_resolution(resolution_bits: Any) -> int | None:
    return (
        None
        if resolution_bits is None
        else check_int("resolution_bits", resolution_bits, low=1, high=40)
    )


def _check_values(values: ArrayLike, dimension: int) -> np.ndarray:
    """Finite values as an array whose last axis has length ``dimension`` (when ``dimension > 1``)."""
    x = check_finite_array("values", values)
    if dimension > 1 and (x.ndim == 0 or x.shape[-1] != dimension):
        raise DataError(
            f"values must have last axis of length dimension={dimension}, got shape {x.shape}"
        )
    return x


class _GridNoise(Mechanism):
    """What the Laplace and Gaussian mechanisms share: the float path, or snap, integer noise and scale back.

    A subclass sets ``resolution_bits``, ``dimension`` and (grid path) ``grid``, names its grid path's
    noise in ``_noise_name`` and draws it in :meth:`_float_noise` and :meth:`_integer_noise`.
    """

    resolution_bits: int | None
    dimension: int
    grid: float
    _noise_name: str

    @abstractmethod
    def _float_noise(self, shape: tuple[int, ...], rng: RNG) -> np.ndarray:
        """The float path's noise (data units)."""

    @abstractmethod
    def _integer_noise(self, shape: tuple[int, ...], rng: RNG) -> np.ndarray:
        """The grid path's integer noise (grid steps)."""

    @property
    def release_grid(self) -> str:
        """Where the outputs lie: a finite set, a ``2**-k`` grid, or floats (simulation only)."""
        if self.resolution_bits is None:
            return "float (simulation only: vulnerable to floating-point attacks)"
        return f"multiples of 2^{int(math.log2(self.grid))} = {self.grid:g} ({self._noise_name})"

    def randomize(self, values: ArrayLike, rng: RNG) -> np.ndarray:
        """Release each value plus independent noise.

        Parameters
        ----------
        values : array_like of float, any shape
            One value per client (or per client and coordinate), finite.
        rng : numpy.random.Generator or SecureGenerator

        Returns
        -------
        numpy.ndarray of float64, same shape

        Raises
        ------
        DataError
            If a value is NaN or infinite.
        OverflowRiskError
            If a value is too large for the exact grid.
        """
        x = _check_values(values, self.dimension)
        if self.resolution_bits is None:
            return np.asarray(x + self._float_noise(x.shape, rng))
        idx = snap_to_grid(x, self.grid)
        return np.asarray((idx + self._integer_noise(x.shape, rng)) * self.grid)

    def bias(self, value: ArrayLike | None = None) -> Any:
        """Snap error ``grid_value - value`` (0 on the float path); worst case ``grid / 2`` when None."""
        if self.resolution_bits is None:
            return 0.0 if value is None else np.zeros(np.shape(value))
        if value is None:
            return self.grid / 2.0
        x = np.asarray(value, dtype=np.float64)
        return snap_to_grid(x, self.grid) * self.grid - x


class LaplaceMechanism(_GridNoise):
    r"""Laplace mechanism: add noise of scale :math:`\Delta/\varepsilon` (Dwork et al. 2006), pure epsilon-DP.

    Parameters
    ----------
    epsilon : float
        In (0, inf).
    sensitivity : float
        L1 sensitivity of each released value, in (0, inf).
    resolution_bits : int or None, default 20
        Grid path (safe, see module docstring) with :math:`\lceil\Delta/\gamma\rceil` integer sensitivity
        and discrete Laplace noise of scale :math:`\lceil\Delta/\gamma\rceil/\varepsilon`; ``None`` selects
        the float path (simulation only).
    dimension : int, default 1
        Length d of the vector released per query (last axis of ``values``); ``sensitivity`` is then its
        L1 sensitivity. Snapping d coordinates adds at most d - 1 grid steps to the L1 sensitivity, so the
        grid path uses the integer sensitivity :math:`\lceil\Delta/\gamma\rceil + d - 1`.

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """

    _noise_name = "discrete Laplace noise"
    _PARAMETERS = ("epsilon", "sensitivity", "resolution_bits", "dimension")

    def __init__(
        self,
        *,
        epsilon: float,
        sensitivity: float,
        resolution_bits: int | None = 20,
        dimension: int = 1,
    ) -> None:
        self.epsilon = check_local_epsilon("epsilon", epsilon)
        self.sensitivity = check_real(
            "sensitivity", sensitivity, low=0.0, high=math.inf, low_open=True, high_open=True
        )
        self.resolution_bits = _check_resolution(resolution_bits)
        self.dimension = check_int("dimension", dimension, low=1)
        self.floating_point_safe = self.resolution_bits is not None
        if self.resolution_bits is not None:
            self.grid = grid_spacing(self.sensitivity, self.resolution_bits)
            self.integer_sensitivity = math.ceil(self.sensitivity / self.grid) + self.dimension - 1
            # rounded up, so the noise's exact epsilon integer_sensitivity / integer_scale is <= epsilon
            self.integer_scale = _ratio_up(self.integer_sensitivity, self.epsilon)
        self.scale = self.sensitivity / self.epsilon

    def _float_noise(self, shape: tuple[int, ...], rng: RNG) -> np.ndarray:
        return np.asarray(rng.laplace(0.0, self.scale, size=shape))

    def _integer_noise(self, shape: tuple[int, ...], rng: RNG) -> np.ndarray:
        return sample_discrete_laplace(self.integer_scale, shape, rng)

    def variance(self, value: ArrayLike | None = None) -> Any:
        r"""Noise variance: :math:`2b^2` (float) or :math:`\gamma^2\, 2e^{-1/t}/(1-e^{-1/t})^2` (grid)."""
        if self.resolution_bits is None:
            v = 2.0 * self.scale**2
        else:
            a = -1.0 / self.integer_scale
            v = self.grid**2 * 2.0 * math.exp(a) / math.expm1(a) ** 2
        return v if value is None else np.full(np.shape(value), v)

    def privacy_loss(self) -> PrivacyLoss:
        """Epsilon = (integer) sensitivity / scale: the largest log ratio of (discrete) Laplace probabilities.

        On the grid path the sampler is exact (:func:`~fedstats.privacy.mechanisms.sample_discrete_laplace`)
        and ``integer_scale`` is the double just above ``integer_sensitivity / epsilon``, so the exact loss
        ``integer_sensitivity / integer_scale`` is at most ``epsilon`` with delta = 0 (tested by enumeration).

        Described for privacy-loss-distribution composition as the Laplace mechanism (float path, one
        coordinate), else as randomized response at epsilon, which dominates every epsilon-DP mechanism
        (Kairouz, Oh & Viswanath 2015, Thm. 2.2).
        """
        if self.resolution_bits is None:
            eps = self.sensitivity / self.scale
            if self.dimension == 1:  # one coordinate: the Laplace PLD itself
                spec = (MechanismSpec("laplace", self.scale, sensitivity=self.sensitivity),)
                return PrivacyLoss(eps, mechanisms=spec)
            return PrivacyLoss(eps, mechanisms=randomized_response_specs(eps))
        # exact: integer_scale was rounded up, so integer_sensitivity / integer_scale <= epsilon
        assert Fraction(self.integer_sensitivity) / Fraction(self.integer_scale) <= Fraction(
            self.epsilon
        )
        return PrivacyLoss(self.epsilon, mechanisms=randomized_response_specs(self.epsilon))


class GaussianMechanism(_GridNoise):
    r"""Gaussian mechanism calibrated exactly (Balle & Wang 2018) or classically (Dwork & Roth, Thm. A.1).

    Parameters
    ----------
    epsilon : float
        In (0, inf) (in (0, 1) when ``analytic=False`` unless ``allow_large_epsilon``).
    delta : float
        In (0, 1).
    sensitivity : float
        L2 sensitivity of each released value, in (0, inf).
    analytic : bool, default True
        Analytic calibration (smallest sigma); False: the classical formula.
    resolution_bits : int or None, default 20
        Grid path (safe): discrete Gaussian noise calibrated to the exact discrete condition (Canonne, Kamath,
        Steinke 2020, Thm. 7) for the integer sensitivity :math:`\lceil\Delta/\gamma\rceil`. ``None``: float
        path (simulation only).
    allow_large_epsilon : bool, default False
        Passed to :func:`~fedstats.privacy.analysis.gaussian.classical_gaussian_sigma`.
    dimension : int, default 1
        Length d of the vector released per query (the last axis of ``values``); ``sensitivity`` is then
        the L2 sensitivity of the whole vector. The float path needs nothing more (Balle & Wang's
        Theorem 8 holds in any dimension). On the grid path, snapping each coordinate adds at most
        :math:`\sqrt d` grid steps to the L2 sensitivity, so the integer sensitivity is
        :math:`\Delta/\gamma + \sqrt d` and, for d > 1, the noise is calibrated in zCDP (the product
        discrete Gaussian is :math:`\Delta^2/(2\sigma^2)`-zCDP, Canonne, Kamath, Steinke 2020) and converted
        with :func:`~fedstats.privacy.analysis.zcdp.zcdp_to_approx_dp`, which costs some noise against the
        exact one-dimensional calibration.

    Attributes
    ----------
    sigma : float
        Noise standard deviation in data units (grid path: ``integer_sigma * grid``).

    Raises
    ------
    ParameterError
        If a parameter is outside its range.
    """

    _noise_name = "discrete Gaussian noise"
    _PARAMETERS = ("epsilon", "delta", "sensitivity", "analytic", "resolution_bits", "dimension")

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        sensitivity: float,
        analytic: bool = True,
        resolution_bits: int | None = 20,
        allow_large_epsilon: bool = False,
        dimension: int = 1,
    ) -> None:
        # calibration needs scipy: imported here, so a device running only Laplace noise never loads it
        from fedstats.privacy.analysis.discrete_gaussian import (
            discrete_gaussian_sigma,
        )
        from fedstats.privacy.analysis.gaussian import (
            analytic_gaussian_sigma,
            classical_gaussian_sigma,
        )
        from fedstats.privacy.analysis.zcdp import (
            approx_dp_to_zcdp,
        )

        self.epsilon = check_real(
            "epsilon", epsilon, low=0.0, high=math.inf, low_open=True, high_open=True
        )
        self.delta = check_open_unit("delta", delta)
        self.dimension = check_int("dimension", dimension, low=1)
        self.sensitivity = check_real(
            "sensitivity", sensitivity, low=0.0, high=math.inf, low_open=True, high_open=True
        )
        self.analytic = bool(analytic)
        self.resolution_bits = _check_resolution(resolution_bits)
        self.floating_point_safe = self.resolution_bits is not None
        if self.resolution_bits is not None:
            self.grid = grid_spacing(self.sensitivity, self.resolution_bits)
            self.integer_sensitivity = (
                self.sensitivity / self.grid + math.sqrt(self.dimension)
                if self.dimension > 1
                else math.ceil(self.sensitivity / self.grid)
            )
        if not self.analytic:
            sens = self.sensitivity if self.resolution_bits is None else self.integer_sensitivity
            sigma = classical_gaussian_sigma(
                epsilon=self.epsilon,
                delta=self.delta,
                sensitivity=float(sens),
                allow_large_epsilon=allow_large_epsilon,
            )
        elif self.resolution_bits is None:
            sigma = analytic_gaussian_sigma(
                epsilon=self.epsilon, delta=self.delta, sensitivity=self.sensitivity
            )
        elif self.dimension > 1:
            rho = approx_dp_to_zcdp(epsilon=self.epsilon, delta=self.delta)
            sigma = self.integer_sensitivity / math.sqrt(2.0 * rho)
        else:
            sigma = discrete_gaussian_sigma(
                epsilon=self.epsilon, delta=self.delta, sensitivity=int(self.integer_sensitivity)
            )
        if self.resolution_bits is None:
            self.sigma = sigma
        else:
            self.integer_sigma = sigma
            self.sigma = sigma * self.grid

    def _float_noise(self, shape: tuple[int, ...], rng: RNG) -> np.ndarray:
        return self.sigma * np.asarray(rng.standard_normal(size=shape))

    def _integer_noise(self, shape: tuple[int, ...], rng: RNG) -> np.ndarray:
        # sigma^2 rounded up: the noise is at least what privacy_loss() accounts for
        return sample_discrete_gaussian(_square_up(self.integer_sigma), shape, rng)

    def variance(self, value: ArrayLike | None = None) -> Any:
        """Noise variance: sigma^2 (float path) or the discrete Gaussian's exact variance times grid^2."""
        if self.resolution_bits is None:
            v = self.sigma**2
        elif self.integer_sigma > 50.0:
            v = (
                self.sigma**2
            )  # differs from sigma^2 by a relative exp(-2 pi^2 sigma^2) (CKS 2020, Prop. 19)
        else:
            k = np.arange(
                -int(40 * self.integer_sigma) - 40, int(40 * self.integer_sigma) + 41, dtype=float
            )
            w = np.exp(-k * k / (2.0 * self.integer_sigma**2))
            v = float((k * k * w).sum() / w.sum()) * self.grid**2
        return v if value is None else np.full(np.shape(value), v)

    def privacy_loss(self) -> PrivacyLoss:
        """(epsilon, exact delta at this sigma, rho); discrete formula on the grid path (zCDP for d > 1).

        Described for privacy-loss-distribution composition as the Gaussian mechanism (float path) or the
        one-dimensional discrete Gaussian (grid path, integer sensitivity up to 1000; the sampler's sigma^2
        is rounded up, so the description has at most the noise added). A multi-dimensional discrete
        Gaussian has no exact PLD here and composes by zCDP.
        """
        # calibration needs scipy: imported here, so a device running only Laplace noise never loads it
        from fedstats.privacy.analysis.discrete_gaussian import (
            discrete_gaussian_delta,
            discrete_gaussian_rho,
        )
        from fedstats.privacy.analysis.gaussian import (
            analytic_gaussian_delta,
        )
        from fedstats.privacy.analysis.zcdp import (
            gaussian_rho,
            zcdp_to_approx_dp,
        )

        if self.resolution_bits is None:
            d = analytic_gaussian_delta(
                epsilon=self.epsilon, sigma=self.sigma, sensitivity=self.sensitivity
            )
            rho = gaussian_rho(sigma=self.sigma, sensitivity=self.sensitivity)
            # the continuous Gaussian's PLD at L2 sensitivity is one coordinate's (rotation invariance)
            spec = MechanismSpec("gaussian", self.sigma, sensitivity=self.sensitivity)
            return PrivacyLoss(self.epsilon, d, rho, (spec,))
        elif self.dimension > 1:
            rho = discrete_gaussian_rho(
                sigma=self.integer_sigma, sensitivity=float(self.integer_sensitivity)
            )
            return PrivacyLoss(zcdp_to_approx_dp(rho=rho, delta=self.delta), self.delta, rho)
        else:
            d = discrete_gaussian_delta(
                epsilon=self.epsilon,
                sigma=self.integer_sigma,
                sensitivity=int(self.integer_sensitivity),
            )
            rho = discrete_gaussian_rho(
                sigma=self.integer_sigma, sensitivity=float(self.integer_sensitivity)
            )
            if self.integer_sensitivity <= 1000 and self.integer_sigma <= 1e6:
                spec = MechanismSpec(
                    "discrete_gaussian", self.integer_sigma, sensitivity=self.integer_sensitivity
                )
                return PrivacyLoss(self.epsilon, d, rho, (spec,))
        return PrivacyLoss(self.epsilon, d, rho)
