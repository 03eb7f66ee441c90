r"""Randomized response on bits and generalized (k-ary) randomized response, with unbiased estimators.

References
----------
S. L. Warner. Randomized response, JASA 1965. T. Wang, J. Blocki, N. Li, S. Jha. Locally Differentially
Private Protocols for Frequency Estimation, USENIX Security 2017, Sec. 4.1 (generalized randomized response,
"direct encoding", its unbiased estimator and variance, Eq. (2)-(3)).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fedstats._validation import check_int, check_local_epsilon
from fedstats.errors import DataError
from fedstats.privacy.analysis.loss import (
    PrivacyLoss,
    discrete_privacy_loss,
    randomized_response_specs,
)
from fedstats.privacy.mechanisms.base import Mechanism
from fedstats.privacy.mechanisms.words import bernoulli
from fedstats.randomness import RNG

__all__ = ["GeneralizedRandomizedResponse", "RandomizedResponse"]


def _check_epsilon(epsilon: Any) -> float:
    return check_local_epsilon("epsilon", epsilon)


class RandomizedResponse(Mechanism):
    r"""Randomized response on bits: report the true bit with probability :math:`e^\varepsilon/(1+e^\varepsilon)`.

    Parameters
    ----------
    epsilon : float
        Local privacy parameter, in (0, inf).

    Raises
    ------
    ParameterError
        If ``epsilon`` is not a positive finite number.

    Notes
    -----
    With keep probability :math:`p`, an observed mean :math:`\bar y` is debiased by
    :math:`(\bar y - (1-p))/(2p-1)`; one debiased report has variance
    :math:`p(1-p)/(2p-1)^2 = e^\varepsilon/(e^\varepsilon - 1)^2` whatever the bit (Warner 1965). Outputs
    are bits (finite set): safe against floating-point attacks. Privacy loss: computed exactly from the
    2 x 2 output matrix.

    Examples
    --------
    >>> import numpy as np
    >>> rr = RandomizedResponse(epsilon=1.0)
    >>> y = rr.randomize(np.ones(100_000, dtype=np.int8), np.random.default_rng(0))
    >>> bool(abs(rr.debias_mean(y.mean()) - 1.0) < 6 * (rr.variance() / 100_000) ** 0.5)
    True
    """

    _PARAMETERS = ("epsilon",)

    def __init__(self, *, epsilon: float) -> None:
        self.epsilon = _check_epsilon(epsilon)
        # expit computed stably: p = 1 / (1 + e^-eps)
        self.keep_probability = 1.0 / (1.0 + math.exp(-self.epsilon))

    @property
    def release_grid(self) -> str:
        """Where the outputs lie: a finite set, a ``2**-k`` grid, or floats (simulation only)."""
        return "bits {0, 1}"

    def randomize(self, values: ArrayLike, rng: RNG) -> np.ndarray:
        """Flip each bit with probability ``1 - keep_probability``.

        Parameters
        ----------
        values : array_like of int or bool, any shape
            Bits in {0, 1}, one per client (or per client and coordinate).
        rng : numpy.random.Generator or SecureGenerator

        Returns
        -------
        numpy.ndarray of uint8, same shape

        Raises
        ------
        DataError
            If a value is not 0 or 1.
        """
        x = np.asarray(values)
        if x.size and not np.isin(x, (0, 1)).all():
            raise DataError("values must be bits (0 or 1)")
        xb = x.astype(np.uint8)
        flip = ~bernoulli(self.keep_probability, xb.size, rng).reshape(xb.shape)
        return (xb ^ flip.astype(np.uint8)).astype(np.uint8)

    def debias_mean(self, observed_mean: ArrayLike) -> Any:
        r"""Unbiased estimate of the true mean from the mean of reported bits: :math:`(\bar y - 1 + p)/(2p - 1)`."""
        p = self.keep_probability
        return (np.asarray(observed_mean, dtype=np.float64) - (1.0 - p)) / (2.0 * p - 1.0)

    def variance(self, value: ArrayLike | None = None) -> Any:
        r"""Variance of one debiased report, :math:`e^\varepsilon/(e^\varepsilon-1)^2` (same for every bit)."""
        v = math.exp(-self.epsilon) / math.expm1(-self.epsilon) ** 2
        return v if value is None else np.full(np.shape(value), v)

    def bias(self, value: ArrayLike | None = None) -> Any:
        """0: the debiased estimator is unbiased."""
        return 0.0 if value is None else np.zeros(np.shape(value))

    def probabilities(self) -> np.ndarray:
        """Output distribution per input, shape (2 inputs, 2 outputs)."""
        p = self.keep_probability
        return np.array([[p, 1.0 - p], [1.0 - p, p]])

    def privacy_loss(self) -> PrivacyLoss:
        """Exact loss from the 2 x 2 matrix (log-space, so it stays exact for large epsilon).

        Described as randomized response at epsilon (composed by its privacy loss distribution).
        """
        lp = -math.log1p(math.exp(-self.epsilon))
        lq = -self.epsilon + lp
        eps = discrete_privacy_loss([[lp, lq], [lq, lp]], log_space=True)
        return PrivacyLoss(eps, mechanisms=randomized_response_specs(self.epsilon))


class GeneralizedRandomizedResponse(Mechanism):
    r"""Generalized (k-ary) randomized response.

    Keep the value w.p. :math:`p = e^\varepsilon/(e^\varepsilon + k - 1)`, else report one of the other
    k - 1 values uniformly.

    Parameters
    ----------
    epsilon : float
        Local privacy parameter, in (0, inf).
    k : int
        Domain size, >= 2; values are {0, ..., k-1}.

    Raises
    ------
    ParameterError
        If ``epsilon`` or ``k`` is invalid.

    Notes
    -----
    Wang et al. 2017, Sec. 4.1: with :math:`q = 1/(e^\varepsilon + k - 1)`, the frequency estimate
    :math:`\hat f_v = (c_v/n - q)/(p - q)` is unbiased with variance
    :math:`q(1-q)/(n(p-q)^2) + f_v(1-p-q)/(n(p-q))`. Privacy loss: exact, from the output distribution of
    two inputs over the outputs {first input, second input, any other value} (every pair is alike by
    symmetry). Outputs are integers (finite set).
    """

    _PARAMETERS = ("epsilon", "k")

    def __init__(self, *, epsilon: float, k: int) -> None:
        self.epsilon = _check_epsilon(epsilon)
        self.k = check_int("k", k, low=2, high=2**62)
        # log-space for huge epsilon
        self._log_p = -math.log1p((self.k - 1) * math.exp(-self.epsilon))
        self._log_q = self._log_p - self.epsilon
        self.keep_probability = math.exp(self._log_p)
        self.other_probability = math.exp(self._log_q)

    @property
    def release_grid(self) -> str:
        """Where the outputs lie: a finite set, a ``2**-k`` grid, or floats (simulation only)."""
        return f"integers {{0, ..., {self.k - 1}}}"

    def randomize(self, values: ArrayLike, rng: RNG) -> np.ndarray:
        """Randomize each value in {0, ..., k-1}.

        Parameters
        ----------
        values : array_like of int, any shape
        rng : numpy.random.Generator or SecureGenerator

        Returns
        -------
        numpy.ndarray of int64, same shape

        Raises
        ------
        DataError
            If a value is not an integer in [0, k).
        """
        x = np.asarray(values)
        if x.size and (
            not np.issubdtype(x.dtype, np.integer) or int(x.min()) < 0 or int(x.max()) >= self.k
        ):
            raise DataError(f"values must be integers in [0, {self.k - 1}]")
        xi = x.astype(np.int64).ravel()
        keep = bernoulli(self.keep_probability, xi.size, rng)
        other = np.asarray(rng.integers(0, self.k - 1, size=xi.size), dtype=np.int64)
        other += other >= xi  # skip the true value: uniform over the k - 1 others
        return np.where(keep, xi, other).reshape(x.shape)

    def estimate_frequencies(self, counts: ArrayLike, n: int) -> np.ndarray:
        """Unbiased frequency estimates :math:`(c_v/n - q)/(p - q)` from report counts.

        Parameters
        ----------
        counts : array_like of int, shape (k,)
            Number of reports of each value.
        n : int
            Number of reports (clients), >= 1.

        Returns
        -------
        numpy.ndarray of float64, shape (k,)
            Estimates (may leave [0, 1]; project afterwards if needed).

        Raises
        ------
        DataError
            If ``counts`` has the wrong shape or negative entries.
        """
        nn = check_int("n", n, low=1)
        c = np.asarray(counts, dtype=np.float64)
        if c.shape != (self.k,) or (c < 0).any():
            raise DataError(f"counts must be {self.k} non-negative numbers, got shape {c.shape}")
        p, q = self.keep_probability, self.other_probability
        return (c / nn - q) / (p - q)

    def variance(self, value: ArrayLike | None = None) -> Any:
        """Variance of one report's contribution to a frequency estimate, for true frequency ``value``.

        ``value`` is the true frequency f in [0, 1] (None: worst case over f); divide by n for the
        estimate from n reports (Wang et al. 2017, Eq. (3)).
        """
        p, q = self.keep_probability, self.other_probability
        f = np.asarray(1.0 if value is None else value, dtype=np.float64)
        v = q * (1 - q) / (p - q) ** 2 + f * (1 - p - q) / (p - q)
        if value is None:
            return max(float(v), q * (1 - q) / (p - q) ** 2)
        return v

    def bias(self, value: ArrayLike | None = None) -> Any:
        """0: the frequency estimator is unbiased."""
        return 0.0 if value is None else np.zeros(np.shape(value))

    def probabilities(self) -> np.ndarray:
        """Output distribution per input, shape (k, k) (only for k <= 4096)."""
        if self.k > 4096:
            raise DataError("the full matrix is only built for k <= 4096")
        m = np.full((self.k, self.k), self.other_probability)
        np.fill_diagonal(m, self.keep_probability)
        return m

    def privacy_loss(self) -> PrivacyLoss:
        """Exact loss from the reduced matrix of inputs {a, b} over outputs {a, b, other}.

        Described as k-ary randomized response (for k up to 10^6).
        """
        lp, lq = self._log_p, self._log_q
        if self.k == 2:
            rows = [[lp, lq], [lq, lp]]
        else:  # "other" = the event of reporting one of the k - 2 remaining values (same ratio per value)
            lo = lq + math.log(self.k - 2)
            rows = [[lp, lq, lo], [lq, lp, lo]]
        specs = randomized_response_specs(self.epsilon, min(self.k, 10**6 + 1))
        return PrivacyLoss(discrete_privacy_loss(rows, log_space=True), mechanisms=specs)
