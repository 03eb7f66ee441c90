"""The DP noise an aggregator adds to its aggregate share of a sum (Prio3's two aggregators).

One class serves the in-process Prio3 route (:mod:`fedstats.analyses._prio3`, which calibrates it) and the
service's two-aggregator mode (:class:`fedstats.service.domain.vdaf_tasks.Noise`, which reads it from a
task's JSON). An aggregator's additions depend only on its aggregate share, which is uniformly random and
independent of the data, so they are post-processing: the release is DP if at least one aggregator is
honest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats._validation import check_real
from fedstats.errors import ParameterError
from fedstats.privacy.mechanisms.samplers import sample_discrete_gaussian, sample_discrete_laplace

__all__ = ["AggregatorNoise"]


@dataclass(frozen=True)
class AggregatorNoise:
    """Each aggregator's DP noise on a round's aggregate share (the full scale each; see the module).

    Attributes
    ----------
    mechanism : {"discrete_gaussian", "discrete_laplace"}
    parameter : float
        ``sigma2`` of :func:`~fedstats.privacy.mechanisms.samplers.sample_discrete_gaussian` or ``scale``
        of :func:`~fedstats.privacy.mechanisms.samplers.sample_discrete_laplace`, > 0.
    """

    mechanism: str
    parameter: float

    def __post_init__(self) -> None:
        if self.mechanism not in ("discrete_gaussian", "discrete_laplace"):
            raise ParameterError(
                "mechanism", self.mechanism, "'discrete_gaussian' or 'discrete_laplace'"
            )
        check_real("parameter", self.parameter, low=0.0, high=2.0**84, low_open=True)

    def sample(self, size: int, rng: Any) -> np.ndarray:
        """One aggregator's noise for an aggregate share of ``size`` entries.

        Parameters
        ----------
        size : int
            Entries, >= 0.
        rng : numpy.random.Generator
            The aggregator's randomness.

        Returns
        -------
        numpy.ndarray
            ``(size,)`` int64, the exact discrete Gaussian or Laplace samples of
            :mod:`fedstats.privacy.mechanisms.samplers` (Canonne, Kamath and Steinke 2020).
        """
        if self.mechanism == "discrete_gaussian":
            return sample_discrete_gaussian(float(self.parameter), size, rng)
        return sample_discrete_laplace(float(self.parameter), size, rng)

    @property
    def variance_bound(self) -> float:
        """An upper bound on one aggregator's noise variance per entry (sigma2; Laplace: its variance)."""
        if self.mechanism == "discrete_gaussian":
            return float(self.parameter)
        t = float(self.parameter)
        return 2.0 * math.exp(-1.0 / t) / (1.0 - math.exp(-1.0 / t)) ** 2
