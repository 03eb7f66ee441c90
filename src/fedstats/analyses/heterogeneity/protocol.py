r"""The two-round private heterogeneity protocol on the engine (paper 000, Algorithm 4.11, corrected).

Round 1 (``"centre"``): each client sends its vector :math:`x_i` and/or :math:`(u_i x_i, u_i)` with
:math:`u_i = w_i/w_{\max}` (bounded inverse-variance weights), each block divided by its sensitivity
(:mod:`~fedstats.analyses.heterogeneity.client`). The server releases the noisy mean :math:`\mu'` and/or
weighted mean :math:`\bar\mu'`, clipped to :math:`[0,1]^d`.

Round 2 (``"spread"``): each client sends :math:`\lVert x_i - \mu'\rVert^p` and/or
:math:`u_i\lVert x_i - \bar\mu'\rVert^2`; the server receives the noisy sums :math:`D''` and :math:`Q''`
(paper 000's plug-ins, biased up by the round-1 noise), subtracts their expected excess (computed from the
public noise scales and the released centres: post-processing, see
:func:`~fedstats.analyses.heterogeneity.accuracy.attach_errors`), clamps at 0, and releases
:math:`I^2 = \max(0, 1 - (n-1)/\hat Q)` by post-processing.

The noise of each round is planned by :func:`~fedstats.analyses.heterogeneity.rounds.plan_rounds`: central
noise is the discrete Gaussian mechanism on the integer sum, distributed noise is one discrete Gaussian
share per client (the distributed discrete Gaussian, Kairouz, Liu & Steinke 2021), and the float path
(``float_noise=True``) reproduces the paper's continuous Gaussian for simulation only. With
``noise="aggregators"`` (Prio3, :class:`~fedstats.analyses._prio3.Prio3Backend`) each of the two
aggregators adds a discrete Gaussian to its aggregate share, the server adds nothing, and :func:`_release`
refuses a sum that does not carry the planned noise (a route without it would release exact sums). If
some clients drop
out, fewer shares reach the sum; the privacy actually achieved is recomputed from the shares summed and
composed by a :class:`~fedstats.privacy.ledger.PrivacyLedger` (:attr:`HeterogeneityResult.rounds`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstats.analyses.heterogeneity.accuracy import attach_errors
from fedstats.analyses.heterogeneity.calibration import Sensitivities, ddg_rho
from fedstats.analyses.heterogeneity.client import encode_centre, encode_spread
from fedstats.analyses.heterogeneity.exact import i_squared
from fedstats.analyses.heterogeneity.rounds import (
    FLOAT_NOTE,
    RoundPlan,
    central_mechanism,
    plan_rounds,
)
from fedstats.engine.core import ProtocolGenerator
from fedstats.engine.fixedpoint import FixedPoint
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import ParameterError
from fedstats.privacy.analysis.gaussian import analytic_gaussian_epsilon
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.privacy.analysis.zcdp import zcdp_to_approx_dp
from fedstats.privacy.ledger import compose_losses
from fedstats.randomness import RNG, RandomSource
from fedstats.results import AnalysisResult, to_jsonable

if TYPE_CHECKING:  # the config's type only: the config imports this module (its plan)
    from fedstats.analyses.heterogeneity.config import HeterogeneityConfig

__all__ = [
    "HeterogeneityResult",
    "StatisticEstimate",
    "achieved_loss",
    "effective_sigma",
    "heterogeneity_protocol",
]


@dataclass
class StatisticEstimate:
    """One released statistic with its error.

    Attributes
    ----------
    name : str
        ``"dispersion"``, ``"q"`` or ``"i2"``.
    estimate : float
        The released value.
    interval : tuple of float or None
        Confidence interval derived from the actual noise (coverage at least the nominal level), or None.
    standard_error : float or None
        Root of the closed-form MSE, where available.
    truth : float or None
        Exact value (simulation only).
    sensitivity : float or None
        L2 sensitivity of the released sum in the statistic's units (average dispersion: per n).
    noise_sd : float or None
        Standard deviation of the noise on the statistic in its units.
    mse_theory : float or None
        Closed-form mean squared error (``accuracy`` module), where available.
    paper_interval : tuple of float or None
        Paper 000's Theorem 4.7 / 4.15 / 4.19 interval, for comparison.
    details : dict
        ``unclipped_estimate`` (the debiased estimate before the clamp to the parameter space; dispersion
        and Q only), ``plugin_estimate`` (paper 000's plug-in, biased up by the round-1 noise, as released
        before issue 26), ``plugin_unclipped``, ``bias_correction`` (what was subtracted from the plug-in),
        ``plugin_mse_theory`` and ``plugin_standard_error`` (the plug-in's closed-form error), where they
        apply.
    """

    name: str
    estimate: float
    interval: tuple[float, float] | None = None
    standard_error: float | None = None
    truth: float | None = None
    sensitivity: float | None = None
    noise_sd: float | None = None
    mse_theory: float | None = None
    paper_interval: tuple[float, float] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def error(self) -> float | None:
        """``estimate - truth`` (None when the truth is unknown)."""
        return None if self.truth is None else self.estimate - self.truth

    def covers(self) -> bool | None:
        """Whether :attr:`interval` contains :attr:`truth` (None if either is missing)."""
        if self.interval is None or self.truth is None:
            return None
        return self.interval[0] <= self.truth <= self.interval[1]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (with ``error``)."""
        out = {k: to_jsonable(v) for k, v in self.__dict__.items()}
        out["error"] = to_jsonable(self.error)
        return out


@dataclass
class HeterogeneityResult(AnalysisResult):
    """Result of :func:`heterogeneity_protocol` (``analysis="heterogeneity"``).

    ``estimate`` is I^2 when Q was released, else the dispersion; ``ci``, ``standard_error`` and ``truth``
    are that statistic's.

    Attributes
    ----------
    dispersion, q, i2 : StatisticEstimate or None
        The released statistics.
    mean, weighted_mean : numpy.ndarray or None
        The released (noisy, clipped) centres, ``(d,)``.
    weight_sum : float or None
        Released (noisy) sum of the weights, in weight units.
    rounds : list of dict
        Each round's calibration (:class:`~fedstats.analyses.heterogeneity.rounds.RoundPlan`) plus the
        clients summed and the privacy achieved.
    mechanism : str
        ``"discrete-gaussian"`` (central, grid), ``"distributed-discrete-gaussian"`` (shares, grid),
        ``"aggregator-discrete-gaussian"`` (Prio3's two aggregators, grid), or the float path's calibration (``"analytic"``, ``"classical"``, ``"gaussian-zcdp"``).
    noise : {"central", "distributed", "aggregators"}
    secure : bool
    p, min_variance : float
    form : str
    """

    dispersion: StatisticEstimate | None = None
    q: StatisticEstimate | None = None
    i2: StatisticEstimate | None = None
    mean: np.ndarray | None = None
    weighted_mean: np.ndarray | None = None
    weight_sum: float | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    mechanism: str = "analytic"
    noise: str = "central"
    secure: bool = False
    p: float = 2.0
    min_variance: float = 0.05
    form: str = "standard"


def effective_sigma(plan: RoundPlan, n_summed: int) -> float:
    """Return the standard deviation of the noise on the normalised sum, given the shares summed.

    Parameters
    ----------
    plan : RoundPlan
    n_summed : int
        Clients whose reports reached the sum.

    Returns
    -------
    float
    """
    if plan.noise == "none":
        return 0.0
    if plan.noise in ("central", "aggregators"):
        return plan.sigma  # aggregators: both honest aggregators' noise, sqrt(2 sigma_a^2) / 2^f
    if plan.path == "grid":
        return math.sqrt(n_summed * plan.share_variance) / 2.0**plan.frac_bits
    return plan.share_sd * math.sqrt(n_summed)


def achieved_loss(plan: RoundPlan, n_summed: int) -> PrivacyLoss | None:
    """Privacy the round achieved given the noise that reached the sum (None without privacy).

    Central noise and the aggregators' noise do not depend on who reported. Distributed shares: fewer shares than planned (dropouts)
    give less noise, so a larger loss: Prop. 14 of Kairouz, Liu & Steinke (2021) with the shares summed on
    the grid, the analytic Gaussian epsilon (Balle & Wang 2018) of the float noise otherwise.

    Parameters
    ----------
    plan : RoundPlan
    n_summed : int
        Clients whose reports reached the sum, >= 1.

    Returns
    -------
    PrivacyLoss or None
    """
    if plan.loss is None or plan.delta is None:
        return None
    if plan.noise in ("central", "aggregators"):
        return plan.loss
    if plan.path == "grid":
        r = ddg_rho(
            share_variance=plan.share_variance, n=n_summed, l2=plan.l2, l1=plan.l1, dim=plan.dim
        )
        return PrivacyLoss(zcdp_to_approx_dp(rho=r, delta=plan.delta), plan.delta, r)
    sig = effective_sigma(plan, n_summed)
    k = len(plan.blocks)
    return PrivacyLoss(
        analytic_gaussian_epsilon(delta=plan.delta, sigma=sig, sensitivity=math.sqrt(k)),
        plan.delta,
        k / (2.0 * sig**2),
    )


def _round_params(cfg: HeterogeneityConfig, plan: RoundPlan, sens: Sensitivities) -> dict[str, Any]:
    share = "none"
    if plan.noise == "distributed":
        share = "discrete" if plan.path == "grid" else "gaussian"
    out: dict[str, Any] = {
        "column": cfg.column,
        "blocks": list(plan.blocks),
        "noise": share,
        "share_sd": plan.share_sd,
        "share_variance": plan.share_variance,
        "frac_bits": plan.frac_bits,
        "clip": plan.clip,
        "bound": plan.bound,
        "min_variance": sens.min_variance,
        "sens_mean": sens.mean_sum,
        "sens_weighted": sens.weighted_sum,
        "sens_dispersion": sens.dispersion_sum,
        "sens_q": sens.q_sum,
        "p": sens.p,
    }
    if plan.noise == "aggregators":  # what each aggregator adds (public: the route reads it)
        out["aggregator_variance"] = plan.share_variance
    return out


def _check_aggregator_noise(s: RoundSum, plan: RoundPlan) -> None:
    """Refuse a sum of an ``"aggregators"`` round that does not carry both aggregators' planned noise.

    The route marks its sum (:class:`~fedstats.analyses._prio3.AggregatorSum`): ``aggregator_noise``
    is what each aggregator added and ``aggregators`` how many did.

    Raises
    ------
    ParameterError
        Naming ``engine`` if the sum carries no noise, another mechanism or scale, or not two aggregators'.
    """
    added = getattr(s, "aggregator_noise", None)
    ok = (
        added is not None
        and getattr(added, "mechanism", None) == "discrete_gaussian"
        and math.isclose(float(added.parameter), plan.share_variance, rel_tol=1e-12)
        and getattr(s, "aggregators", 0) == 2
    )
    if not ok:
        raise ParameterError(
            "engine",
            f"a route that added {added!r} to round {plan.name!r}",
            "a Prio3 route whose two aggregators each add the planned discrete Gaussian "
            f"(sigma2={plan.share_variance!r}; fedstats.analyses._prio3.Prio3Backend) with "
            "noise='aggregators'",
        )


def _release(s: RoundSum, plan: RoundPlan, server: RNG | None) -> np.ndarray:
    """Return the round's released normalised sum, with the server's central noise if any.

    With ``noise="aggregators"`` the aggregators have added the noise already (checked): nothing more.
    """
    vals = FixedPoint(plan.frac_bits, plan.clip).decode(s.total)
    if plan.noise == "aggregators":
        _check_aggregator_noise(s, plan)
    if plan.noise != "central":
        return vals
    assert server is not None
    if plan.path == "grid":
        return central_mechanism(plan).randomize(vals, server)
    out: np.ndarray = vals + np.asarray(server.normal(0.0, plan.sigma, size=vals.shape))
    return out  # float path: simulation only


def _mechanism_name(cfg: HeterogeneityConfig) -> str:
    if cfg.noise_path == "grid":
        return {
            "distributed": "distributed-discrete-gaussian",
            "aggregators": "aggregator-discrete-gaussian",
        }.get(cfg.noise, "discrete-gaussian")
    return "gaussian-zcdp" if cfg.accounting == "zcdp" else cfg.mechanism


def _round_report(plan: RoundPlan, n_summed: int) -> dict[str, Any]:
    out: dict[str, Any] = {**plan.as_dict(), "clients_summed": n_summed}
    loss = achieved_loss(plan, n_summed)
    if loss is not None:
        out.update(
            sigma_effective=effective_sigma(plan, n_summed),
            epsilon_achieved=loss.epsilon,
            delta_achieved=loss.delta,
            rho_achieved=loss.rho,
        )
    return out


def heterogeneity_protocol(
    cfg: HeterogeneityConfig, *, n_clients: int, dim: int, randomness: RandomSource
) -> ProtocolGenerator[HeterogeneityResult]:
    """Run the two-round protocol (module docstring) as a generator for :meth:`~fedstats.engine.Engine.run`.

    Parameters
    ----------
    cfg : HeterogeneityConfig
        Public parameters.
    n_clients : int
        Number of clients (public), >= 2.
    dim : int
        Vector length d, >= 1.
    randomness : RandomSource
        The server's randomness: central noise is drawn from
        ``randomness.generator("server", "heterogeneity", "noise")``.

    Returns
    -------
    ProtocolGenerator[HeterogeneityResult]
        Truth fields are left empty (the server does not know them); see
        :func:`fedstats.analyses.heterogeneity.heterogeneity` for simulation.

    Raises
    ------
    ParameterError
        If a parameter is out of range.
    """
    p1, p2, sens = plan_rounds(cfg, n_clients, dim)
    server = randomness.generator("server", "heterogeneity", "noise") if cfg.private else None
    d = dim
    s1: RoundSum = yield Round(
        "centre", encode_centre, _round_params(cfg, p1, sens), dim=p1.dim, bound=p1.bound
    )
    n = s1.n_clients
    v1 = _release(s1, p1, server)
    mu = mu_w = centre_w = None
    s_u = None
    off = 0
    if "mean" in p1.blocks:
        mu = np.clip(v1[:d] * sens.mean_sum / n, 0.0, 1.0)
        off = d
    if "weighted" in p1.blocks:
        nu = v1[off : off + d] * sens.weighted_sum
        s_u = float(np.clip(v1[off + d] * sens.weighted_sum, n * sens.u_min, n))
        mu_w = np.clip(nu / s_u, 0.0, 1.0)
        centre_w = mu_w / n if cfg.form == "paper" else mu_w
    par2 = _round_params(cfg, p2, sens)
    if mu is not None:
        par2["mu"] = mu.tolist()
    if centre_w is not None:
        par2["mu_w"] = centre_w.tolist()
    s2: RoundSum = yield Round("spread", encode_spread, par2, dim=p2.dim, bound=p2.bound)
    n2 = s2.n_clients
    v2 = _release(s2, p2, server)
    notes = [x for x in (randomness.release_note, FLOAT_NOTE if cfg.float_noise else None) if x]
    res = HeterogeneityResult(
        analysis="heterogeneity",
        estimate=math.nan,
        confidence=cfg.confidence,
        epsilon=cfg.epsilon,
        delta=cfg.delta,
        n_clients=n2,
        release_note="; ".join(notes) or None,
        mean=mu,
        weighted_mean=centre_w,
        weight_sum=None if s_u is None else s_u * sens.w_max,
        mechanism=_mechanism_name(cfg),
        noise=cfg.noise,
        secure=cfg.secure,
        p=cfg.p,
        min_variance=cfg.min_variance,
        form=cfg.form,
    )
    res.details["noise_path"] = cfg.noise_path
    k = 0
    if "dispersion" in p2.blocks:
        raw = float(v2[k]) * sens.dispersion_sum / n2
        res.details["dispersion_unclipped"] = raw  # post-processing below: dispersion >= 0
        disp = max(0.0, raw)
        res.dispersion = StatisticEstimate(
            "dispersion",
            disp,
            sensitivity=sens.dispersion_sum / n2,
            details={"unclipped_estimate": raw, "plugin_estimate": disp, "plugin_unclipped": raw},
        )
        k += 1
    if "q" in p2.blocks:
        raw = float(v2[k]) * sens.q_sum * sens.w_max
        res.details["q_unclipped"] = raw  # post-processing below: Q >= 0, I^2 in [0, 1]
        q = max(0.0, raw)
        res.q = StatisticEstimate(
            "q",
            q,
            sensitivity=sens.q_weight_units,
            details={"unclipped_estimate": raw, "plugin_estimate": q, "plugin_unclipped": raw},
        )
        res.i2 = StatisticEstimate(
            "i2", i_squared(q, n2), details={"plugin_estimate": i_squared(q, n2)}
        )
    res.rounds = [_round_report(p1, n), _round_report(p2, n2)]
    if cfg.private:
        # the ledger composes the rounds' achieved losses (basic or zCDP, whichever is smaller)
        # at the rounds' own deltas (no delta target): the achieved loss of the requested (epsilon, delta)
        losses = [achieved_loss(plan, summed) for plan, summed in ((p1, n), (p2, n2))]
        total = compose_losses(loss for loss in losses if loss is not None)
        res.details["epsilon_achieved"] = total.epsilon
        res.details["delta_achieved"] = total.delta
        res.details["rho_achieved"] = total.rho
        if (
            cfg.mechanism == "classical"
            and max(
                float(cfg.epsilon or 0.0) * f
                for f in (cfg.round1_fraction, 1.0 - cfg.round1_fraction)
            )
            >= 1.0
        ):
            res.details["warning"] = (
                "classical Gaussian calibration used at a per-round epsilon >= 1, outside its theorem "
                "(Dwork & Roth Thm. A.1); epsilon_achieved gives the exact privacy of the noise added"
            )
    attach_errors(  # debiases D'' and Q'' (post-processing), then their errors and intervals
        res,
        cfg,
        replace(p1, sigma=effective_sigma(p1, n)),
        replace(p2, sigma=effective_sigma(p2, n2)),
        sens,
        n2,
        d,
        n_centre=n,
    )
    res.estimate = (
        res.i2.estimate
        if res.i2 is not None
        else res.dispersion.estimate
        if res.dispersion
        else math.nan
    )
    headline = res.i2 if res.i2 is not None else res.dispersion
    if headline is not None:  # the base fields describe the headline estimate
        res.ci, res.standard_error = headline.interval, headline.standard_error
    return res
