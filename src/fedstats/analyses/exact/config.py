"""The face of the exact federated mean (task ``exact-mean``): its config, plan and privacy loss."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedstats._validation import check_int, check_real
from fedstats.analyses._config import ExactSumsConfig, check_columns, check_public_seed

if TYPE_CHECKING:  # the plan's types only: the protocol is imported when a plan is made
    from fedstats.analyses.exact.protocol import MeanResult
    from fedstats.engine.core import ProtocolGenerator

__all__ = ["ExactMeanConfig"]


@dataclass(frozen=True)
class ExactMeanConfig(ExactSumsConfig):
    """Options of the exact (non-private) federated mean.

    Parameters
    ----------
    clip : float
        Declared bound: values lie in ``[-clip, clip]`` (larger ones are clipped), in (0, inf). Required.
    column : str
        Data column holding one value per record (default ``"value"``).
    frac_bits : int
        Fixed-point fractional bits, in [0, 52] (default 16: the mean is exact to 2^-16).

    Raises
    ------
    ParameterError
        Naming ``clip`` (not positive and finite), ``frac_bits`` (outside [0, 52]) or ``column`` (not a
        non-empty string).
    """

    clip: float
    column: str = "value"
    frac_bits: int = 16

    def __post_init__(self) -> None:
        """Validate every option (see the class docstring)."""
        clip = check_real("clip", self.clip, low=0.0, high=math.inf, low_open=True, high_open=True)
        object.__setattr__(self, "clip", clip)
        check_int("frac_bits", self.frac_bits, low=0, high=52)
        check_columns(column=self.column)

    def plan(self, *, n_clients: int, public_seed: bytes) -> ProtocolGenerator[MeanResult]:
        """The one round: values in fixed point and a count (:func:`~.protocol.mean_protocol`).

        Parameters
        ----------
        n_clients : int
            Records in the cohort (unused: the count is summed).
        public_seed : bytes
            The run's 32-byte public seed (unused: nothing is random).

        Returns
        -------
        ProtocolGenerator[MeanResult]
        """
        from fedstats.analyses.exact.protocol import mean_protocol

        check_int("n_clients", n_clients, low=1)
        check_public_seed(public_seed)
        return mean_protocol(self.column, clip=self.clip, frac_bits=self.frac_bits)
