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

import functools
import math
import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedstats._validation import check_choice, check_int, check_real
from fedstats.analyses._config import (
    NOT_PRIVATE,
    AnalysisConfig,
    check_public_seed,
    plan_randomness,
)
from fedstats.analyses.heterogeneity.calibration import (
    MECHANISMS,
    NOISE_MODES,
    Sensitivities,
    ddg_rho,
    ddg_share_variance,
    quiet_gaussian_sigma,
    sensitivities,
    split_budget,
)
from fedstats.analyses.heterogeneity.exact import WEIGHTED_MEAN_FORMS
from fedstats.errors import OverflowRiskError, ParameterError
from fedstats.privacy.analysis.gaussian import PrivacyWarning
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.privacy.analysis.zcdp import approx_dp_to_zcdp, zcdp_to_approx_dp
from fedstats.privacy.mechanisms.noise import GaussianMechanism
from fedstats.randomness import RandomSource
from fedstats.results import to_jsonable

__all__ = [
    "ACCOUNTINGS",
    "STATISTICS",
    "HeterogeneityConfig",
    "RoundPlan",
    "aggregator_variance",
    "central_mechanism",
    "plan_rounds",
]

STATISTICS: tuple[str, ...] = ("dispersion", "q", "i2", "all")
ACCOUNTINGS: tuple[str, ...] = ("basic", "zcdp")
FLOAT_NOTE = "floating-point noise: simulation only, not for release"
_NOISE_MARGIN = (
    16.0  # fixed-point clip = data range + 16 share standard deviations (P(clip) < 1e-57)
)


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
            if not isinstance(getattr(self, name), bool):
                raise ParameterError(name, getattr(self, name), "true or false")
        if not isinstance(self.column, str) or not self.column:
            raise ParameterError("column", self.column, "a non-empty column name")
        check_choice("statistic", self.statistic, STATISTICS)
        check_choice("mechanism", self.mechanism, MECHANISMS)
        if self.accounting is None:  # the tightest calibration the mechanism allows
            object.__setattr__(
                self, "accounting", "basic" if self.mechanism == "classical" else "zcdp"
            )
        check_choice("accounting", self.accounting, ACCOUNTINGS)
        check_choice("noise", self.noise, NOISE_MODES)
        check_choice("form", self.form, WEIGHTED_MEAN_FORMS)
        check_real(
            "round1_fraction",
            self.round1_fraction,
            low=0.0,
            high=1.0,
            low_open=True,
            high_open=True,
        )
        check_real("p", self.p, low=1.0, high=64.0)
        check_real("min_variance", self.min_variance, low=0.0, high=0.25, low_open=True)
        check_real("confidence", self.confidence, low=0.0, high=1.0, low_open=True, high_open=True)
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
            check_real("delta", self.delta, low=0.0, high=1.0, low_open=True, high_open=True)
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
                out.append(PrivacyLoss(zcdp_to_approx_dp(rho=rho_r, delta=delta_r), delta_r, rho_r))
                continue
            if self.mechanism == "classical" or self.float_noise:
                sigma = quiet_gaussian_sigma(
                    self.mechanism, epsilon=eps_r, delta=delta_r, sensitivity=1.0
                )
                rho_r = 1.0 / (2.0 * sigma * sigma)
            else:
                rho_r = approx_dp_to_zcdp(epsilon=eps_r, delta=delta_r)
            if self.float_noise:
                out.append(PrivacyLoss(eps_r, delta_r, rho_r))
            else:
                out.append(PrivacyLoss(zcdp_to_approx_dp(rho=rho_r, delta=delta_r), delta_r, rho_r))
        return tuple(out)

    def privacy_loss(self) -> PrivacyLoss:
        """Privacy loss of one run on each record: the two rounds composed as the ledger composes them.

        Returns
        -------
        PrivacyLoss
            :class:`~fedstats.privacy.ledger.PrivacyLedger` composition of :meth:`round_losses` (the
            smaller of basic composition and the zCDP conversion of the summed rho, delta summed, rho
            summed); :data:`~fedstats.analyses._config.NOT_PRIVATE` without a budget.
        """
        from fedstats.privacy.ledger import PrivacyLedger

        if not self.private:
            return NOT_PRIVATE
        ledger = PrivacyLedger()
        for name, loss in zip(("centre", "spread"), self.round_losses(), strict=True):
            ledger.spend_loss(loss, label=f"heterogeneity round {name}")
        return ledger.total()

    def plan(
        self, *, n_clients: int, public_seed: bytes, randomness: RandomSource | None = None
    ) -> Any:
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
        from fedstats.analyses.heterogeneity.protocol import heterogeneity_protocol

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


@dataclass(frozen=True)
class RoundPlan:
    r"""Public calibration of one round.

    Attributes
    ----------
    name : str
        ``"centre"`` or ``"spread"``.
    blocks : tuple of str
        ``("mean", "weighted")`` in round 1, ``("dispersion", "q")`` in round 2 (those requested).
    dim : int
        Report length.
    noise : {"none", "central", "distributed", "aggregators"}
        Where this round's noise is added.
    path : {"none", "grid", "float"}
        Discrete Gaussian on the grid (releasable) or floating-point noise (simulation only).
    epsilon, delta : float or None
        This round's budget (the target its mechanism is calibrated to).
    rho : float or None
        The zCDP rho of its noise at the planned number of shares.
    sigma : float
        Standard deviation of the noise on each coordinate of the normalised sum (0 without privacy;
        ``"aggregators"``: both aggregators' noise, :math:`\sqrt{2\sigma_a^2}/2^f`).
    share_sd : float
        Each client's floating-point share (float path, distributed), normalised units.
    share_variance : float
        Each client's discrete Gaussian share :math:`\sigma_s^2` (grid path, distributed), integer units;
        with ``"aggregators"``, each aggregator's :math:`\sigma_a^2 = \Delta_2^2/(2\rho_r)` (integer
        units).
    frac_bits : int
        f of the grid :math:`2^{-f}`.
    clip : float
        Fixed-point clip of a report entry (normalised units).
    bound : int
        Largest absolute report entry (the round's bound).
    l2, l1 : float
        Sensitivities of the summed reports on the integer grid (normalised ones on the float path).
    analytic : bool
        Analytic (True) or classical Gaussian calibration (central and float noise).
    spent : PrivacyLoss or None
        What the round's mechanism reports at the planned number of shares: what the ledger is charged.
    """

    name: str
    blocks: tuple[str, ...]
    dim: int
    noise: str
    path: str
    epsilon: float | None
    delta: float | None
    rho: float | None
    sigma: float
    share_sd: float
    share_variance: float
    frac_bits: int
    clip: float
    bound: int
    l2: float
    l1: float
    analytic: bool = True
    spent: PrivacyLoss | None = None

    @property
    def loss(self) -> PrivacyLoss | None:
        """Privacy loss of the round as planned (:attr:`spent`; None without privacy)."""
        return self.spent

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: to_jsonable(v) for k, v in self.__dict__.items()}


def _ranges(block: str, sens: Sensitivities) -> tuple[np.ndarray, np.ndarray]:
    """Per-coordinate (low, high) of a normalised report block."""
    d = sens.dim
    if block == "mean":
        return np.zeros(d), np.full(d, 1.0 / sens.mean_sum)
    if block == "weighted":
        lo = np.zeros(d + 1)
        lo[d] = sens.u_min / sens.weighted_sum
        return lo, np.full(d + 1, 1.0 / sens.weighted_sum)
    return np.zeros(1), np.ones(1)


def _ceil_log2(x: float) -> int:
    mant, exp = math.frexp(x)
    return exp - 1 if mant == 0.5 else exp


def central_mechanism(plan: RoundPlan) -> GaussianMechanism:
    """Build the discrete Gaussian mechanism that releases a central round's sum on the grid 2^-f.

    Its sensitivity is the L2 diameter of one client's integer report (``plan.l2``, randomized rounding
    included) in normalised units, and its grid is exactly the fixed-point grid, so snapping the sum is
    the identity and the mechanism's :meth:`~fedstats.privacy.mechanisms.GaussianMechanism.privacy_loss`
    describes the release.

    Parameters
    ----------
    plan : RoundPlan
        A central round on the grid path (``plan.epsilon``/``plan.delta`` are its budget).

    Returns
    -------
    GaussianMechanism

    Raises
    ------
    ParameterError
        If the round is not a private central round, or the grid needs more than 40 resolution bits.
    """
    if plan.noise != "central" or plan.epsilon is None or plan.delta is None:
        raise ParameterError("plan", plan.name, "a private round with central noise")
    sensitivity = plan.l2 / 2.0**plan.frac_bits
    bits = plan.frac_bits + _ceil_log2(sensitivity)
    if not 1 <= bits <= 40:
        raise ParameterError("frac_bits", plan.frac_bits, "a grid the release mechanism supports")
    return _grid_mechanism(plan.epsilon, plan.delta, sensitivity, plan.analytic, bits, plan.dim)


@functools.lru_cache(maxsize=64)
def _grid_mechanism(
    epsilon: float, delta: float, sensitivity: float, analytic: bool, bits: int, dim: int
) -> GaussianMechanism:
    """Return the calibrated mechanism, cached.

    Its calibration (a zCDP search) dominated a small run's time; a mechanism is immutable after
    construction (its randomness comes from the caller's generator), so sharing it changes no result.
    """
    with (
        warnings.catch_warnings()
    ):  # the classical formula at epsilon >= 1 is flagged in the result
        warnings.simplefilter("ignore", PrivacyWarning)
        return GaussianMechanism(
            epsilon=epsilon,
            delta=delta,
            sensitivity=sensitivity,
            analytic=analytic,
            resolution_bits=bits,
            allow_large_epsilon=True,
            dimension=dim,
        )


def aggregator_variance(*, rho: float, l2: float) -> float:
    r"""Each aggregator's discrete Gaussian parameter :math:`\sigma_a^2` for a :math:`\rho`-zCDP round.

    Independent discrete Gaussians :math:`N_{\mathbb Z}(0, \sigma^2)` on every entry of an integer sum
    whose one-client change has L2 norm at most :math:`\Delta_2` are :math:`\Delta_2^2/(2\sigma^2)`-zCDP
    (Canonne, Kamath & Steinke 2020, Thm. 14), so :math:`\sigma_a^2 = \Delta_2^2/(2\rho)`, rounded up
    by a relative 1e-12 so that floating-point rounding never leaves it below.

    Parameters
    ----------
    rho : float
        The round's zCDP target, > 0.
    l2 : float
        L2 sensitivity of one client's integer report, > 0.

    Returns
    -------
    float
        :math:`\sigma_a^2` in integer (grid) units.

    Raises
    ------
    ParameterError
        If ``rho`` or ``l2`` is not positive and finite.
    """
    r = check_real("rho", rho, low=0.0, high=math.inf, low_open=True, high_open=True)
    s = check_real("l2", l2, low=0.0, high=math.inf, low_open=True, high_open=True)
    return s * s / (2.0 * r) * (1.0 + 1e-12)


def _integer_sensitivities(lo: np.ndarray, hi: np.ndarray, f: int) -> tuple[float, float]:
    scale = 2.0**f
    width = np.ceil(hi * scale) - np.floor(lo * scale)
    return float(np.sqrt((width**2).sum())), float(width.sum())


def _plan_one(
    name: str,
    blocks: tuple[str, ...],
    cfg: HeterogeneityConfig,
    sens: Sensitivities,
    n: int,
    budget: tuple[float, float] | None,
    rho_round: float | None,
    stated: PrivacyLoss | None = None,
) -> RoundPlan:
    dim = sum({"mean": sens.dim, "weighted": sens.dim + 1}.get(b, 1) for b in blocks)
    k = len(blocks)
    lo = np.concatenate([_ranges(b, sens)[0] for b in blocks])
    hi = np.concatenate([_ranges(b, sens)[1] for b in blocks])
    f = cfg.frac_bits if cfg.frac_bits is not None else (16 if cfg.secure else 24)
    n_shares = max(1, math.ceil(cfg.min_reporting * n - 1e-9))
    noise = cfg.noise if cfg.private else "none"
    analytic = cfg.mechanism == "analytic"
    eps_r, delta_r = budget if budget is not None else (None, None)
    rho_r: float | None = None
    if cfg.private:
        assert eps_r is not None and delta_r is not None
        rho_r = rho_round
        if rho_r is not None:
            eps_r = zcdp_to_approx_dp(rho=rho_r, delta=delta_r)
    sigma = share_sd = share_var = 0.0
    loss: PrivacyLoss | None = None
    l2, l1 = math.sqrt(k), float((hi - lo).sum())
    if cfg.noise_path == "float":
        assert eps_r is not None and delta_r is not None
        if cfg.accounting == "zcdp":
            assert rho_r is not None
            sigma = math.sqrt(k / (2.0 * rho_r))
        else:
            sigma = quiet_gaussian_sigma(
                cfg.mechanism, epsilon=eps_r, delta=delta_r, sensitivity=math.sqrt(k)
            )
        share_sd = sigma / math.sqrt(n_shares) if noise == "distributed" else 0.0
        loss = PrivacyLoss(eps_r, delta_r, k / (2.0 * sigma * sigma))  # the paper's budget
    clip = 1.0 + _NOISE_MARGIN * share_sd
    # keep every sum exact: n * clip * 2^f below 2^61 (int64), or 2^50 for the central release grid
    limit = 2.0**50 if (cfg.noise_path == "grid" and noise == "central") else 2.0**61
    margin = 0.0
    for _ in range(64):
        margin = 0.0
        if cfg.noise_path == "grid":
            assert eps_r is not None and delta_r is not None
            l2, l1 = _integer_sensitivities(lo, hi, f)
            if noise == "distributed":
                target = (
                    rho_r if rho_r is not None else approx_dp_to_zcdp(epsilon=eps_r, delta=delta_r)
                )
                share_var = ddg_share_variance(rho=target, n=n_shares, l2=l2, l1=l1, dim=dim)
                margin = _NOISE_MARGIN * math.sqrt(share_var) / 2.0**f
                sigma = math.sqrt(n * share_var) / 2.0**f  # normalised units, when all n report
                r = ddg_rho(share_variance=share_var, n=n_shares, l2=l2, l1=l1, dim=dim)
                loss = PrivacyLoss(zcdp_to_approx_dp(rho=r, delta=delta_r), delta_r, r)
            elif noise == "aggregators":
                assert stated is not None and stated.rho is not None
                share_var = aggregator_variance(rho=stated.rho, l2=l2)
                sigma = math.sqrt(2.0 * share_var) / 2.0**f  # both aggregators' noise
                loss = stated  # sigma_a^2 >= l2^2 / (2 rho): one aggregator's noise is rho-zCDP
        if n * (clip + margin) * 2.0**f < limit or f <= 4:
            break
        f -= 1
    if n * (clip + margin) * 2.0**f >= limit:
        raise OverflowRiskError(
            f"round {name!r}: {n} clients with reports up to {clip + margin:g} cannot be summed exactly"
        )
    bound = math.ceil((clip + margin) * 2.0**f) + 1
    plan = RoundPlan(
        name=name,
        blocks=blocks,
        dim=dim,
        noise=noise,
        path=cfg.noise_path,
        epsilon=eps_r,
        delta=delta_r,
        rho=None,
        sigma=sigma,
        share_sd=share_sd,
        share_variance=share_var,
        frac_bits=f,
        clip=clip,
        bound=bound,
        l2=l2,
        l1=l1,
        analytic=analytic,
    )
    if cfg.noise_path == "grid" and noise == "central":
        mech = central_mechanism(plan)
        loss = mech.privacy_loss()
        sigma = mech.sigma
    if loss is None:
        return plan
    return replace(plan, rho=loss.rho, sigma=sigma, spent=loss)


def plan_rounds(
    cfg: HeterogeneityConfig, n: int, d: int
) -> tuple[RoundPlan, RoundPlan, Sensitivities]:
    """Calibrate both rounds for n clients holding d-dimensional vectors.

    Parameters
    ----------
    cfg : HeterogeneityConfig
    n : int
        Number of clients (public), >= 2.
    d : int
        Vector length, >= 1.

    Returns
    -------
    (RoundPlan, RoundPlan, Sensitivities)

    Raises
    ------
    ParameterError
        If a parameter is out of range (e.g. n < 2).
    OverflowRiskError
        If the sums cannot be kept exact.
    """
    check_int("n_clients", n, low=2)
    sens = sensitivities(d, p=cfg.p, min_variance=cfg.min_variance)
    b1 = tuple(b for b, on in (("mean", cfg.wants_dispersion), ("weighted", cfg.wants_q)) if on)
    b2 = tuple(b for b, on in (("dispersion", cfg.wants_dispersion), ("q", cfg.wants_q)) if on)
    budgets: tuple[tuple[float, float], tuple[float, float]] | tuple[None, None] = (None, None)
    rhos: tuple[float | None, float | None] = (None, None)
    if cfg.private:
        assert cfg.epsilon is not None and cfg.delta is not None
        budgets = split_budget(cfg.epsilon, cfg.delta, cfg.round1_fraction)
        if cfg.accounting == "zcdp":
            rho = approx_dp_to_zcdp(epsilon=cfg.epsilon, delta=cfg.delta)
            rhos = (rho * cfg.round1_fraction, rho * (1.0 - cfg.round1_fraction))
    stated: tuple[PrivacyLoss | None, ...] = (None, None)
    if cfg.private and cfg.noise == "aggregators":
        stated = cfg.round_losses()  # each round's stated loss is what the aggregators' noise gives
    p1 = _plan_one("centre", b1, cfg, sens, n, budgets[0], rhos[0], stated[0])
    p2 = _plan_one("spread", b2, cfg, sens, n, budgets[1], rhos[1], stated[1])
    return p1, p2, sens
