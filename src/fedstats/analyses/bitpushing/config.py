"""The face of bit pushing in a deployment (tasks ``bitpushing-mean`` and ``bitpushing-variance``).

Cormode & Markov 2021: one config per task, its plan of rounds (keyed by the run's public seed) and its
privacy loss, the composition of the randomized responses each record applies (what the library's
:func:`~fedstats.analyses.bitpushing.mean` reports and charges).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedstats._validation import (
    check_choice,
    check_int,
    check_local_epsilon,
    check_open_unit,
    check_real,
)
from fedstats.analyses._config import NOT_PRIVATE, AnalysisConfig, check_columns, plan_randomness
from fedstats.analyses.bitpushing.encoding import BitEncoding
from fedstats.analyses.bitpushing.methods import make_stage, stage_mechanisms
from fedstats.analyses.bitpushing.protocol import (
    MeanEstimate,
    VarianceEstimate,
    mean_protocol,
    variance_protocol,
)
from fedstats.analyses.bitpushing.stages import Stage
from fedstats.engine.core import ProtocolGenerator
from fedstats.errors import ParameterError
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.privacy.ledger import compose_losses

__all__ = ["ROUND1_FRACTION", "BitPushingMeanConfig", "BitPushingVarianceConfig"]

ROUND1_FRACTION = 1.0 / 3.0
"""Adaptive bit pushing's default share of the records in round 1 (``adaptive_stage``'s default)."""

_METHODS = ("adaptive", "weighted", "basic")


@dataclass(frozen=True)
class BitPushingMeanConfig(AnalysisConfig):
    r"""Options of a bit-pushing mean (local DP: each record's reported bits are randomized).

    Parameters
    ----------
    low, high : float
        Declared range of the values (``high > low``). Required.
    column : str
        Data column (default ``"value"``).
    resolution : float
        Fixed-point step of the codes, > 0 (default 1).
    bit_depth : int or None
        Bits of the codes, in [1, 52] (default: the fewest that hold the range at ``resolution``).
    method : {"basic", "adaptive", "weighted"}
        Algorithm 1 with :math:`p_j \propto 2^j` (one round, the default of the library, the CLI and
        the service: lower error than adaptive in most cells of ``benchmarks/bitpushing_default.py``,
        ``docs/bitpushing.md`` "Which protocol is the default"), Algorithm 2 (two rounds; pays without
        DP at loose declared ranges) or Algorithm 1 with :math:`p_j \propto 2^{j/2}` (weighted).
    bits_per_client : int
        Bits each record reports, in [1, bit_depth] (default 1); each gets ``epsilon / bits_per_client``.
    round1_fraction : float
        Adaptive only: share of the records in round 1, in (0, 1) (default 1/3).
    epsilon : float or None
        Local DP epsilon per record, in (0, 700]; None: no randomization (library only; tasks need it).

    Raises
    ------
    ParameterError
        If an option is out of range (named).
    """

    PRIVACY = "local"

    low: float
    high: float
    column: str = "value"
    resolution: float = 1.0
    bit_depth: int | None = None
    method: str = "basic"
    bits_per_client: int = 1
    round1_fraction: float = ROUND1_FRACTION
    epsilon: float | None = None

    def __post_init__(self) -> None:
        """Validate every option (see the class docstring)."""
        check_columns(column=self.column)
        check_choice("method", self.method, _METHODS)
        for name in ("low", "high", "resolution", "round1_fraction"):
            object.__setattr__(self, name, check_real(name, getattr(self, name)))
        check_open_unit("round1_fraction", self.round1_fraction)
        if self.method != "adaptive" and self.round1_fraction != ROUND1_FRACTION:
            raise ParameterError(
                "round1_fraction", self.round1_fraction, f"the default with method={self.method!r}"
            )
        if self.bit_depth is not None:
            check_int("bit_depth", self.bit_depth, low=1, high=52)
        check_int("bits_per_client", self.bits_per_client, low=1, high=52)
        if self.epsilon is not None:
            eps = check_local_epsilon("epsilon", self.epsilon, high=700.0)
            object.__setattr__(self, "epsilon", eps)
        enc = self.encoding()  # validates low < high, resolution and bit depth together
        if self.bits_per_client > enc.b:
            raise ParameterError(
                "bits_per_client", self.bits_per_client, f"an integer in [1, bit_depth={enc.b}]"
            )

    def encoding(self) -> BitEncoding:
        """The :class:`~fedstats.analyses.bitpushing.encoding.BitEncoding` of the declared range."""
        return BitEncoding(
            self.low, self.high, resolution=self.resolution, bit_depth=self.bit_depth
        )

    def stage_options(self) -> dict[str, Any]:
        """The options of one stage (:func:`~fedstats.analyses.bitpushing.methods.make_stage`)."""
        options: dict[str, Any] = {"epsilon": self.epsilon, "bits_per_client": self.bits_per_client}
        if self.method == "adaptive":
            options["round1_fraction"] = self.round1_fraction
        return options

    def stage(self) -> Stage:
        """The bound stage of :attr:`method`."""
        return make_stage(self.method, **self.stage_options())

    def privacy_loss(self) -> PrivacyLoss:
        """Composition of the randomized responses one record applies (the library ledger's arithmetic).

        Returns
        -------
        PrivacyLoss
            ``bits_per_client`` randomized responses at ``epsilon / bits_per_client`` each (the baselines:
            their mechanism), composed by :func:`~fedstats.privacy.ledger.compose_losses` (each record takes
            part in one stage) and carrying each release's
            :class:`~fedstats.privacy.analysis.loss.MechanismSpec` (randomized response at the per-bit
            epsilon; no subsampling is claimed: which records report which bit is public), so the device's
            budget and the server's ledger compose many runs by their privacy loss distributions;
            :data:`~fedstats.analyses._config.NOT_PRIVATE` without epsilon.
        """
        mechanisms = stage_mechanisms(self.method, **self.stage_options())
        if not mechanisms:
            return NOT_PRIVATE
        return compose_losses(mech.privacy_loss() for mech in mechanisms)

    def plan(self, *, n_clients: int, public_seed: bytes) -> ProtocolGenerator[MeanEstimate]:
        """The rounds of the mean (:func:`~fedstats.analyses.bitpushing.protocol.mean_protocol`).

        Parameters
        ----------
        n_clients : int
            Records in the cohort, >= 1.
        public_seed : bytes
            The run's 32-byte public seed; the stage's public seed (which records report which bit) is
            ``plan_randomness(public_seed).public_seed("bitpushing")``.

        Returns
        -------
        ProtocolGenerator[MeanEstimate]
        """
        seed = plan_randomness(public_seed).public_seed("bitpushing")
        return mean_protocol(*self._inputs(n_clients), method=self.method, public_seed=seed)

    def _inputs(self, n_clients: int) -> tuple[Stage, str, BitEncoding, int]:
        """The protocols' first arguments: the stage, the column, the encoding and the checked cohort."""
        return self.stage(), self.column, self.encoding(), check_int("n_clients", n_clients, low=1)


@dataclass(frozen=True)
class BitPushingVarianceConfig(BitPushingMeanConfig):
    """Options of a bit-pushing variance (Cormode & Markov 2021, Sec. 4): a mean stage, then squares.

    Parameters
    ----------
    mean_fraction : float
        Share of the records in the mean stage, in (0, 1) (default 0.2); every other option as
        :class:`BitPushingMeanConfig`. Each record takes part in one stage only.
    """

    mean_fraction: float = 0.2

    def __post_init__(self) -> None:
        """Validate every option."""
        super().__post_init__()
        mf = check_open_unit("mean_fraction", self.mean_fraction)
        object.__setattr__(self, "mean_fraction", mf)

    def plan(  # type: ignore[override]
        self, *, n_clients: int, public_seed: bytes
    ) -> ProtocolGenerator[VarianceEstimate]:
        """The rounds of the variance (:func:`~fedstats.analyses.bitpushing.protocol.variance_protocol`).

        The stage seed is ``plan_randomness(public_seed).public_seed("bitpushing", "variance")``.
        """
        seed = plan_randomness(public_seed).public_seed("bitpushing", "variance")
        return variance_protocol(
            *self._inputs(n_clients),
            method=self.method,
            mean_fraction=self.mean_fraction,
            public_seed=seed,
        )
