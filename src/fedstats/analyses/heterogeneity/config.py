r"""Public parameters and per-round calibration of the private heterogeneity protocol (paper 000).

:class:`HeterogeneityConfig` holds what the analyst chooses; :func:`plan_rounds` turns it into one
:class:`RoundPlan` per round: the blocks, the fixed-point grid, the noise and the privacy loss that the
round's mechanism reports (charged to the ledger before anything runs).

Noise paths (every block is divided by its sensitivity on the client, so a round with k blocks has L2
sensitivity :math:`\sqrt k` in normalised units, slightly more on the integer grid after rounding):

===================  =============================================================  ======================
path                 noise                                                          privacy loss
===================  =============================================================  ======================
central (release)    server adds :class:`~fedstats.privacy.mechanisms.GaussianMechanism`  the mechanism's
                     (discrete Gaussian) to the integer sum on the grid :math:`2^{-f}`   ``privacy_loss()``
distributed          each client adds an integer :math:`N_{\mathbb Z}(0,\sigma_s^2)`  Kairouz, Liu &
(release)            share on the grid (the distributed discrete Gaussian)          Steinke 2021, Prop. 14
aggregators          each of Prio3's two aggregators adds an integer                the round's stated
(release)            :math:`N_{\mathbb Z}(0,\sigma_a^2)` to its aggregate share,    loss,
                     :math:`\sigma_a^2 = \Delta_2^2/(2\rho_r)`; one honest one suffices      ``round_losses()``
float (simulation)   floating-point Gaussian (central or per-client shares), the    analytic Gaussian;
                     paper's design; outputs marked "simulation only"               never charged
===================  =============================================================  ======================

With ``noise="aggregators"`` the clients send their fixed-point reports without a share, the server adds
nothing, and the route must be :class:`~fedstats.analyses._prio3.Prio3Backend`, whose two aggregators each
add the planned discrete Gaussian (the round's ``aggregator_variance`` parameter); the protocol refuses a
sum that does not carry it. :math:`\Delta_2` is the L2 sensitivity of one client's integer report on the
grid (the fixed-point scale :math:`2^f`, the clip and the randomized rounding included), so one honest
aggregator's noise alone is :math:`\rho_r`-zCDP (Canonne, Kamath & Steinke 2020, Thm. 14), the round's
stated loss; with both honest the sum carries twice the variance, :math:`2\sigma_a^2`, which the error
bars use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from fedstats._validation import check_bool, check_choice, check_int, check_open_unit, check_real
from fedstats.analyses._config import (
    NOT_PRIVATE,
    AnalysisConfig,
    check_columns,
    check_public_seed,
    plan_randomness,
)
from fedstats.analyses.heterogeneity.calibration import (
    MECHANISMS,
    NOISE_MODES,
    quiet_gaussian_sigma,
    split_budget,
)
from fedstats.analyses.heterogeneity.exact import WEIGHTED_MEAN_FORMS
from fedstats.analyses.heterogeneity.protocol import HeterogeneityResult, heterogeneity_protocol
from fedstats.analyses.heterogeneity.rounds import (
    FLOAT_NOTE,
    RoundPlan,
    aggregator_variance,
    central_mechanism,
    plan_rounds,
)
from fedstats.engine.core import ProtocolGenerator
from fedstats.errors import ParameterError
from fedstats.privacy.analysis.loss import MechanismSpec, PrivacyLoss
from fedstats.privacy.analysis.zcdp import approx_dp_to_zcdp, zcdp_to_approx_dp
from fedstats.privacy.ledger import compose_losses
from fedstats.randomness import RandomSource

__all__ = [
    "ACCOUNTINGS",
    "FLOAT_NOTE",
    "STATISTICS",
    "HeterogeneityConfig",
    "RoundPlan",
    "aggregator_variance",
    "central_mechanism",
    "plan_rounds",
]

STATISTICS: tuple[str, ...] = ("dispersion", "q", "i2", "all")
ACCOUNTINGS: tuple[str, ...] = ("basic", "zcdp")


def _gaussian_spec(rho: float) -> tuple[MechanismSpec, ...]:
    """A continuous Gaussian round of zCDP ``rho``: sigma / sensitivity = 1 / sqrt(2 rho)."""
    return (MechanismSpec("gaussian", 1.0 / math.sqrt(2.0 * rho)),)


@dataclass(frozen=True)
class HeterogeneityConfig(AnalysisConfig):
    """Public parameters of a heterogeneity run (the one face of the ``heterogeneity`` task).

    Parameters
    ----------
    statistic : {"dispersion", "q", "i2", "all"}
        What to release; ``"q"`` and ``"i2"`` run the same rounds (I^2 is post-processing of Q).
    epsilon, delta : float or None
        Total privacy budget of both rounds (epsilon > 0, delta in (0, 1)); both None: no noise (exact
        sums through the engine).
    mechanism : {"analytic", "classical"}
        Gaussian calibration of central noise and of the float path. Distributed shares on the grid are
        always the distributed discrete Gaussian, so ``"classical"`` is refused there.
    noise : {"central", "distributed", "aggregators"}
        Where the noise is added: by the server after the sum, by each client (a share), or by each of
        Prio3's two aggregators on its aggregate share (run on
        :class:`~fedstats.analyses._prio3.Prio3Backend`; see the module docstring).
    secure : bool
        Pair with the secure-aggregation route (distributed shares; 16 fractional bits by default so the
        sums fit a small modulus); requires ``noise="distributed"`` and the grid path.
    accounting : {"basic", "zcdp"} or None
        ``"zcdp"``: take the largest total rho whose conversion gives (epsilon, delta)
        (:func:`~fedstats.privacy.analysis.zcdp.approx_dp_to_zcdp`) and split rho; the ledger composes the
        rounds by the same zCDP arithmetic, so a run spends exactly the (epsilon, delta) asked for (to
        1e-9 relative). ``"basic"`` (the paper's design): split (epsilon, delta) between the rounds and
        calibrate each round to its share; the ledger's composition of the two rounds is then tighter than
        the split, and a run spends only part of the budget (0.70 of epsilon 1, 2.83 of 4 at delta 1e-6).
        None (default): ``"zcdp"`` with the analytic calibration, ``"basic"`` with the classical one
        (whose sigma is not a zCDP calibration).
    round1_fraction : float
        Share of the budget spent on round 1, in (0, 1) (default 0.5).
    p : float
        Dispersion exponent in [1, 64] (default 2).
    min_variance : float
        Floor on each client's within-vector variance, in (0, 1/4]; bounds the weights by
        ``1/min_variance`` (default 0.05, i.e. w <= 20). The floor must be public, not read from the data.
    form : {"standard", "paper"}
        Weighted mean: the meta-analysis one, or paper 000's Def. 3.5 with an extra 1/n.
    frac_bits : int or None
        Fixed-point fractional bits f in [4, 38] (default 24, or 16 with ``secure``; lowered if the sums
        could overflow).
    confidence : float
        Level of the intervals, in (0, 1).
    column : str
        Population column holding the ``(n, d)`` vectors.
    min_reporting : float
        Distributed noise only: fraction in (0, 1] of the clients whose shares are guaranteed to reach the
        sum (dropouts); each share is calibrated for ``ceil(min_reporting * n)`` shares, so the target holds
        as long as at least that many clients report (default 1). Fewer reports give a larger epsilon,
        which is recomputed and reported.
    float_noise : bool
        Draw floating-point Gaussian noise (the paper's continuous design) instead of the discrete
        Gaussian on the grid: for Monte Carlo studies only, never for release (Mironov 2012). Results are
        marked so, and a ledger refuses to be charged for them.
    dim : int or None
        Vector length d >= 1 (a task must give it; the library reads it from the data when None).

    Raises
    ------
    ParameterError
        If a parameter is outside its range or the combination is invalid.

    Notes
    -----
    A task (:meth:`from_params`) cannot set ``noise``, ``secure`` or ``float_noise``: in a deployment the
    devices add the noise (``noise="distributed"``, on the integer grid, ``secure`` when private) since
    the server is not trusted to add it. The library's default stays central noise.
    """

    PRIVACY = "distributed"
    TASK_FIXED = ("noise", "secure", "float_noise")
    TASK_REQUIRED = ("dim",)

    statistic: str = "all"
    epsilon: float | None = None
    delta: float | None = None
    mechanism: str = "analytic"
    noise: str = "central"
    secure: bool = False
    accounting: str | None = None
    round1_fraction: float = 0.5
    p: float = 2.0
    min_variance: float = 0.05
    form: str = "standard"
    frac_bits: int | None = None
    confidence: float = 0.95
    column: str = "x"
    min_reporting: float = 1.0
    float_noise: bool = False
    dim: int | None = None

    def __post_init__(self) -> None:
        """Validate every parameter and their combination (see the class docstring)."""
        if self.dim is not None:
            check_int("dim", self.dim, low=1, high=10**7)
        for name in ("secure", "float_noise"):
            check_bool(name, getattr(self, name))
        check_columns(column=self.column)
        check_choice("statistic", self.statistic, STATISTICS)
        check_choice("mechanism", self.mechanism, MECHANISMS)
        if self.accounting is None:  # the tightest calibration the mechanism allows
            object.__setattr__(
                self, "accounting", "basic" if self.mechanism == "classical" else "zcdp"
            )
        check_choice("accounting", self.accounting, ACCOUNTINGS)
        check_choice("noise", self.noise, NOISE_MODES)
        check_choice("form", self.form, WEIGHTED_MEAN_FORMS)
        check_open_unit("round1_fraction", self.round1_fraction)
        check_real("p", self.p, low=1.0, high=64.0)
        check_real("min_variance", self.min_variance, low=0.0, high=0.25, low_open=True)
        check_open_unit("confidence", self.confidence)
        check_real("min_reporting", self.min_reporting, low=0.0, high=1.0, low_open=True)
        if self.frac_bits is not None:
            check_int("frac_bits", self.frac_bits, low=4, high=38)
        if (self.epsilon is None) != (self.delta is None):
            raise ParameterError(
                "epsilon/delta", (self.epsilon, self.delta), "both given (private) or both omitted"
            )
        if self.epsilon is not None:
            check_real(
                "epsilon", self.epsilon, low=0.0, high=math.inf, low_open=True, high_open=True
            )
            check_open_unit("delta", self.delta)
        if self.secure and self.noise != "distributed":
            raise ParameterError("noise", self.noise, "'distributed' with secure aggregation")
        if self.secure and self.float_noise:
            raise ParameterError(
                "float_noise",
                True,
                "False with secure aggregation (shares live on the integer grid)",
            )
        if self.min_reporting != 1.0 and not (self.private and self.noise == "distributed"):
            raise ParameterError(
                "min_reporting", self.min_reporting, "1 unless noise='distributed' with a budget"
            )
        if self.noise == "aggregators" and self.float_noise:
            raise ParameterError(
                "float_noise",
                True,
                "False with noise='aggregators' (discrete Gaussian on the grid)",
            )
        if self.float_noise and not self.private:
            raise ParameterError("float_noise", True, "False without a budget (no noise is added)")
        if self.accounting == "zcdp" and self.mechanism != "analytic":
            raise ParameterError(
                "mechanism",
                self.mechanism,
                "'analytic' with accounting='zcdp' (calibrated through zCDP)",
            )
        if self.grid_shares and self.mechanism != "analytic":
            raise ParameterError(
                "mechanism",
                self.mechanism,
                "'analytic' with distributed noise on the grid (the shares are the distributed "
                "discrete Gaussian; the classical formula applies to central or float noise only)",
            )

    @property
    def private(self) -> bool:
        """True when noise is added."""
        return self.epsilon is not None

    @classmethod
    def _task_fixed(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A task's noise is added by the devices (distributed, on the grid, secure when private)."""
        return {
            "noise": "distributed",
            "secure": kwargs.get("epsilon") is not None,
            "float_noise": False,
        }

    def on_aggregators(self) -> HeterogeneityConfig:
        """Return the config with its noise added by Prio3's two aggregators (``noise="aggregators"``).

        The same options and budget (so the same :meth:`privacy_loss`), with ``secure`` and
        ``min_reporting`` reset (the aggregators' noise does not depend on who reports). A task's config
        (``noise="distributed"``) becomes the config a two-aggregator deployment plans and runs with
        :class:`~fedstats.analyses._prio3.Prio3Backend`.

        Returns
        -------
        HeterogeneityConfig

        Raises
        ------
        ParameterError
            With ``float_noise`` (the aggregators add discrete Gaussian noise on the grid).
        """
        return replace(self, noise="aggregators", secure=False, min_reporting=1.0)

    def to_params(self) -> dict[str, Any]:
        """The canonical task ``params`` (see :meth:`AnalysisConfig.to_params`).

        Raises
        ------
        ParameterError
            If the config is not a task's (central or floating-point noise, or no ``dim``).
        """
        fixed = self._task_fixed({"epsilon": self.epsilon})
        for name, value in fixed.items():
            if getattr(self, name) != value:
                raise ParameterError(name, getattr(self, name), f"{value!r} in a task")
        if self.dim is None:
            raise ParameterError("dim", None, "the vector length in a task")
        return super().to_params()

    def round_losses(self) -> tuple[PrivacyLoss, ...]:
        """The privacy loss each round is calibrated to: ``()`` without privacy, else (centre, spread).

        Each round's noise is calibrated to a zCDP target: basic accounting splits (epsilon, delta) by
        ``round1_fraction`` and targets ``rho_r = approx_dp_to_zcdp(epsilon_r, delta_r)``; zCDP accounting
        splits ``rho = approx_dp_to_zcdp(epsilon, delta)``. Grid noise (distributed discrete Gaussian, or
        the central discrete Gaussian) then has ``rho_r`` and ``epsilon = zcdp_to_approx_dp(rho_r,
        delta_r)``; the classical calibration has the rho of its sigma. Float noise (simulation) has the
        round's epsilon with basic accounting. These depend on neither the number of clients nor ``dim``;
        the rounds' mechanisms report them (:func:`plan_rounds`, to floating-point rounding, at or below).

        Returns
        -------
        tuple of PrivacyLoss
        """
        if not self.private:
            return ()
        assert self.epsilon is not None and self.delta is not None
        budgets = split_budget(self.epsilon, self.delta, self.round1_fraction)
        out = []
        for k, (eps_r, delta_r) in enumerate(budgets):
            if self.accounting == "zcdp":
                rho = approx_dp_to_zcdp(epsilon=self.epsilon, delta=self.delta)
                rho_r = rho * (self.round1_fraction if k == 0 else 1.0 - self.round1_fraction)
                eps_r = zcdp_to_approx_dp(rho=rho_r, delta=delta_r)
                specs = _gaussian_spec(rho_r) if self.float_noise else ()
                out.append(PrivacyLoss(eps_r, delta_r, rho_r, specs))
                continue
            if self.mechanism == "classical" or self.float_noise:
                sigma = quiet_gaussian_sigma(
                    self.mechanism, epsilon=eps_r, delta=delta_r, sensitivity=1.0
                )
                rho_r = 1.0 / (2.0 * sigma * sigma)
            else:
                rho_r = approx_dp_to_zcdp(epsilon=eps_r, delta=delta_r)
            if self.float_noise:
                out.append(PrivacyLoss(eps_r, delta_r, rho_r, _gaussian_spec(rho_r)))
            else:
                out.append(PrivacyLoss(zcdp_to_approx_dp(rho=rho_r, delta=delta_r), delta_r, rho_r))
        return tuple(out)

    def privacy_loss(self) -> PrivacyLoss:
        """Privacy loss of one run on each record: the two rounds composed as the ledger composes them.

        Returns
        -------
        PrivacyLoss
            :func:`~fedstats.privacy.ledger.compose_losses` of :meth:`round_losses` (the smaller of basic
            composition and the zCDP conversion of the summed rho, delta summed, rho summed);
            :data:`~fedstats.analyses._config.NOT_PRIVATE` without a budget. Float noise (simulation) is
            a continuous Gaussian and carries its :class:`~fedstats.privacy.analysis.loss.MechanismSpec`
            (the ledgers compose it by its privacy loss distribution too); grid noise (the distributed
            discrete Gaussian of a task, or a multi-dimensional discrete Gaussian) has no exact PLD here
            and composes by zCDP.
        """
        if not self.private:
            return NOT_PRIVATE
        return compose_losses(self.round_losses())

    def plan(
        self, *, n_clients: int, public_seed: bytes, randomness: RandomSource | None = None
    ) -> ProtocolGenerator[HeterogeneityResult]:
        """The two rounds (:func:`~fedstats.analyses.heterogeneity.protocol.heterogeneity_protocol`).

        Parameters
        ----------
        n_clients : int
            Records in the cohort, >= 2 (the noise shares are calibrated for it).
        public_seed : bytes
            The run's 32-byte public seed (the plan makes no public random choice).
        randomness : RandomSource, optional
            The server's secret randomness, required for central noise only (the server adds it); a task's
            plan (distributed noise) uses none.

        Returns
        -------
        ProtocolGenerator[HeterogeneityResult]

        Raises
        ------
        ParameterError
            If ``dim`` is unset, or central noise is planned without ``randomness``.
        """
        check_public_seed(public_seed)
        if self.dim is None:
            raise ParameterError("dim", None, "the vector length (required to plan the rounds)")
        if self.private and self.noise == "central" and randomness is None:
            raise ParameterError(
                "randomness", None, "the server's secret randomness with central noise"
            )
        return heterogeneity_protocol(
            self,
            n_clients=check_int("n_clients", n_clients, low=2),
            dim=self.dim,
            # without central noise the protocol draws nothing: the public seed's source keeps it pure
            randomness=randomness if randomness is not None else plan_randomness(public_seed),
        )

    @property
    def grid_shares(self) -> bool:
        """True when clients add discrete Gaussian shares (distributed noise, release path)."""
        return self.private and self.noise == "distributed" and not self.float_noise

    @property
    def noise_path(self) -> str:
        """``"none"``, ``"grid"`` (discrete Gaussian: releasable) or ``"float"`` (simulation only)."""
        if not self.private:
            return "none"
        return "float" if self.float_noise else "grid"

    @property
    def wants_dispersion(self) -> bool:
        """True when the dispersion is released."""
        return self.statistic in ("dispersion", "all")

    @property
    def wants_q(self) -> bool:
        """True when Q (and I^2) are released."""
        return self.statistic in ("q", "i2", "all")
