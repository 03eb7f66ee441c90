r"""The calibration of each round of the private heterogeneity protocol (paper 000).

:func:`plan_rounds` turns a :class:`~fedstats.analyses.heterogeneity.config.HeterogeneityConfig` into one
:class:`RoundPlan` per round: the blocks, the fixed-point grid, the noise and the privacy loss that the
round's mechanism reports (charged to the ledger before anything runs). The noise paths are tabled in
:mod:`fedstats.analyses.heterogeneity.config`.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstats._validation import check_int, check_real
from fedstats.analyses.heterogeneity.calibration import (
    Sensitivities,
    ddg_rho,
    ddg_share_variance,
    quiet_gaussian_sigma,
    sensitivities,
    split_budget,
)
from fedstats.errors import OverflowRiskError, ParameterError
from fedstats.privacy.analysis.gaussian import PrivacyWarning
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.privacy.analysis.zcdp import approx_dp_to_zcdp, zcdp_to_approx_dp
from fedstats.privacy.mechanisms.noise import GaussianMechanism
from fedstats.results import to_jsonable

if TYPE_CHECKING:  # the config's type only: the config imports this module (its plan)
    from fedstats.analyses.heterogeneity.config import HeterogeneityConfig

__all__ = [
    "FLOAT_NOTE",
    "RoundPlan",
    "aggregator_variance",
    "central_mechanism",
    "plan_rounds",
]

FLOAT_NOTE = "floating-point noise: simulation only, not for release"
_NOISE_MARGIN = (
    16.0  # fixed-point clip = data range + 16 share standard deviations (P(clip) < 1e-57)
)


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
