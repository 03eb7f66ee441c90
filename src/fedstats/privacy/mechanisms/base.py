"""Common interface of fedstats' privacy mechanisms."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.randomness import RNG

__all__ = ["Mechanism"]


class Mechanism(ABC):
    """A randomizer applied independently to each client's value (vectorized over clients).

    Subclasses define :meth:`randomize`, :meth:`variance`, :meth:`bias` and :meth:`privacy_loss`, and say in
    :attr:`release_grid` where their outputs live: a finite set, a documented grid of spacing ``2**-k``, or
    ``"float (simulation only)"`` when a continuous value is released with floating-point noise, which can
    leak the input through the low-order bits (Mironov 2012) and must not be used for a real release.
    """

    #: True when outputs cannot leak through floating-point artefacts (finite set or exact grid).
    floating_point_safe: bool = True
    #: The attributes that define the mechanism, in the order :meth:`explain` and ``repr`` show them.
    _PARAMETERS: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def randomize(self, values: ArrayLike, rng: RNG) -> np.ndarray:
        """Randomize each element of ``values`` independently (one element per client)."""

    @abstractmethod
    def variance(self, value: ArrayLike | None = None) -> Any:
        """Variance of the mechanism's (debiased) per-client estimate, for ``value`` or the worst case."""

    @abstractmethod
    def bias(self, value: ArrayLike | None = None) -> Any:
        """Bias of the (debiased) per-client estimate for ``value``, or its worst-case magnitude."""

    @abstractmethod
    def privacy_loss(self) -> PrivacyLoss:
        """The privacy this mechanism costs per application, computed from its output distribution."""

    @property
    @abstractmethod
    def release_grid(self) -> str:
        """Where the released values live, in words (for ``fedstats privacy explain``)."""

    def explain(self) -> dict[str, Any]:
        """A JSON-friendly description: name, parameters, privacy loss, variance, bias, release grid."""
        loss = self.privacy_loss()
        return {
            "mechanism": type(self).__name__,
            "parameters": self._parameters(),
            "epsilon": loss.epsilon,
            "delta": loss.delta,
            "rho": loss.rho,
            "variance_worst_case": float(np.max(self.variance())),
            "bias_worst_case": float(np.max(np.abs(self.bias()))),
            "release_grid": self.release_grid,
            "floating_point_safe": self.floating_point_safe,
        }

    def _parameters(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._PARAMETERS}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self._parameters().items())
        return f"{type(self).__name__}({params})"
