r"""The face of the performance gap in a deployment (task ``performance-gap``; Juarez & Korolova 2023).

The budget split (:math:`\varepsilon_1` for the group, :math:`\varepsilon_2` for the value) is a public
function of the config alone: the planning layout is the config's group ``fractions`` (balanced by default)
on one unit of clients. Theorem 9's gap variance is proportional to 1/K for fixed shares, so the optimal
split does not depend on the cohort size K, and a device recomputes it without knowing K. The privacy loss
is the mechanism's **true** loss computed from its output distributions
(:meth:`~fedstats.analyses.performance_gap.mechanisms.GapMechanism.privacy_loss`): at most epsilon with
``accounting="exact"``, :math:`\max(\varepsilon_2, \varepsilon_1 + \ln 2b)` for :math:`\mathcal M_R` with
the paper's split (``accounting="paper"``, above epsilon).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fedstats._validation import (
    GRID_WHY,
    MIN_GRID_EPSILON,
    check_choice,
    check_int,
    check_local_epsilon,
    check_open_unit,
    check_real,
)
from fedstats.analyses._config import AnalysisConfig, check_public_seed
from fedstats.errors import ParameterError
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.privacy.ledger import compose_losses

if TYPE_CHECKING:  # the plan's types only: the protocol is imported when a plan is made
    from fedstats.analyses.performance_gap.protocol import PerformanceGapResult
    from fedstats.engine.core import ProtocolGenerator

__all__ = ["PLANNING_CLIENTS", "PerformanceGapConfig"]

PLANNING_CLIENTS = 1.0
"""Clients of the planning layout (the split depends on the group shares only, not on their number)."""


@dataclass(frozen=True)
class PerformanceGapConfig(AnalysisConfig):
    r"""Options of a performance-gap measurement (local DP on each record's (group, value) pair).

    Parameters
    ----------
    mechanism : {"R", "L"}
        :math:`\mathcal M_R` (randomized response on the value bit, default) or :math:`\mathcal M_L`
        (discrete Laplace on a grid).
    n_groups : int
        Groups d, in [2, 1000] (default 2); data column ``group`` holds codes in [0, d).
    pair : (int, int)
        The compared groups (A, B), gap = m_A - m_B (default (0, 1)).
    fractions : tuple of float or None
        Public planning guess of the group shares (d positive numbers summing to 1; default balanced).
    scale : {"signed", "rate"}
        ``"signed"`` (default): values in [-1, 1] and results in those units; ``"rate"``: values were
        mapped ``v = 2 r - 1`` and results are rates.
    confidence : float
        Level of the interval, in (0, 1) (default 0.95).
    accounting : {"exact", "paper"}
        ``"exact"`` (default): the split minimizing the gap's variance with true loss <= epsilon;
        ``"paper"``: the paper's split, whose true loss exceeds epsilon (charged as such).
    resolution_bits : int
        :math:`\mathcal M_L`'s release grid, in [2, 30] (default 16).
    epsilon : float
        Local privacy budget per record, in (0, inf). Required (no non-private mode).

    Raises
    ------
    ParameterError
        If an option is out of range (named).
    """

    PRIVACY = "local"

    mechanism: str = "R"
    n_groups: int = 2
    pair: tuple[int, int] = (0, 1)
    fractions: tuple[float, ...] | None = None
    scale: str = "signed"
    confidence: float = 0.95
    accounting: str = "exact"
    resolution_bits: int = 16
    epsilon: float | None = None

    def __post_init__(self) -> None:
        """Validate every option (see the class docstring)."""
        from fedstats.analyses.performance_gap.allocation import ACCOUNTINGS
        from fedstats.analyses.performance_gap.mechanisms import check_mechanism
        from fedstats.analyses.performance_gap.protocol import check_pair

        object.__setattr__(self, "mechanism", check_mechanism(self.mechanism))
        d = check_int("n_groups", self.n_groups, low=2, high=1000)
        if not isinstance(self.pair, (tuple, list)) or len(self.pair) != 2:
            raise ParameterError("pair", self.pair, "two group indices [i, j]")
        object.__setattr__(self, "pair", tuple(check_pair(tuple(self.pair), d)))
        if self.fractions is not None:
            fr = self.fractions
            if not isinstance(fr, (tuple, list)) or len(fr) != d:
                raise ParameterError("fractions", fr, f"{d} positive shares summing to 1")
            vals = tuple(check_real("fractions", x, low=0.0, high=1.0, low_open=True) for x in fr)
            if abs(math.fsum(vals) - 1.0) > 1e-9:
                raise ParameterError("fractions", fr, f"{d} positive shares summing to 1")
            object.__setattr__(self, "fractions", vals)
        check_choice("scale", self.scale, ("signed", "rate"))
        conf = check_open_unit("confidence", self.confidence)
        object.__setattr__(self, "confidence", conf)
        check_choice("accounting", self.accounting, ACCOUNTINGS)
        check_int("resolution_bits", self.resolution_bits, low=2, high=30)
        if self.epsilon is None:
            raise ParameterError(
                "epsilon", None, "a positive number (local DP; no non-private mode)"
            )
        eps = check_local_epsilon("epsilon", self.epsilon, low=MIN_GRID_EPSILON, why=GRID_WHY)
        object.__setattr__(self, "epsilon", eps)

    def allocation(self) -> Any:
        """The budget split (:func:`~fedstats.analyses.performance_gap.allocation.allocate`) of the config.

        Planned on the layout of :attr:`fractions` over :data:`PLANNING_CLIENTS` clients.
        """
        from fedstats.analyses.performance_gap.allocation import allocate, layout_from_fractions

        fractions = self.fractions or (1.0 / self.n_groups,) * self.n_groups
        layout = layout_from_fractions(PLANNING_CLIENTS, list(fractions), self.pair)
        assert self.epsilon is not None
        return allocate(self.mechanism, self.epsilon, layout, accounting=self.accounting)

    def privacy_loss(self) -> PrivacyLoss:
        """The mechanism's true privacy loss (what the library's gap result reports as ``epsilon``).

        Pure local DP, carried as randomized response at that epsilon
        (:func:`~fedstats.privacy.ledger.compose_losses`; it dominates every epsilon-DP local randomizer,
        Kairouz, Oh & Viswanath 2015, Thm. 2.2), so the ledgers compose many runs by their privacy loss
        distributions; a mechanism that is not DP (infinite epsilon) carries nothing.
        """
        loss: PrivacyLoss = self.allocation().mechanism.privacy_loss()
        return compose_losses([loss]) if math.isfinite(loss.epsilon) else loss

    def plan(
        self, *, n_clients: int, public_seed: bytes
    ) -> ProtocolGenerator[PerformanceGapResult]:
        """The one round of perturbed reports and the estimators (group sizes estimated from them).

        Parameters
        ----------
        n_clients : int
            Records in the cohort, >= n_groups.
        public_seed : bytes
            The run's 32-byte public seed (unused: the split is a function of the config).

        Returns
        -------
        ProtocolGenerator[PerformanceGapResult]
            ``details["budget"]`` is the config's epsilon.
        """
        check_int("n_clients", n_clients, low=self.n_groups)
        check_public_seed(public_seed)
        return self._plan()

    def _plan(self) -> ProtocolGenerator[PerformanceGapResult]:
        from fedstats.analyses.performance_gap.protocol import performance_gap_protocol

        alloc = self.allocation()
        result = yield from performance_gap_protocol(
            alloc.mechanism,
            sizes=None,  # estimated from the perturbed groups: the server learns no exact group size
            pair=self.pair,
            scale=self.scale,
            confidence=self.confidence,
            resolution_bits=self.resolution_bits,
            allocation=alloc.to_dict(),
        )
        result.details["budget"] = self.epsilon
        return result
