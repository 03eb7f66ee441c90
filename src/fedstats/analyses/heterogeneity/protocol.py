r"""The two-round private heterogeneity protocol on the engine (paper 000, Algorithm 4.11, corrected).

Round 1 (``"centre"``): each client sends its vector :math:`x_i` and/or :math:`(u_i x_i, u_i)` with
:math:`u_i = w_i/w_{\max}` (bounded inverse-variance weights), each block divided by its sensitivity
(:mod:`~fedstats.analyses.heterogeneity.calibration`). The server releases the noisy mean
:math:`\mu'` and/or weighted mean :math:`\bar\mu'`, clipped to :math:`[0,1]^d`.

Round 2 (``"spread"``): each client sends :math:`\lVert x_i - \mu'\rVert^p` and/or
:math:`u_i\lVert x_i - \bar\mu'\rVert^2`; the server releases the noisy dispersion :math:`D''` and Cochran's
:math:`Q''` (both clamped at 0), and :math:`I^2 = \max(0, 1 - (n-1)/Q'')` by post-processing.

Noise, per round, is Gaussian with standard deviation :math:`\sigma` (normalised units) on the sum:

* ``central``: the server adds :math:`N(0, \sigma^2)` after the (secure) sum;
* ``distributed``: each of the n clients adds :math:`N(0, \sigma^2/n)` to its report before fixed-point
  encoding, so the sum carries :math:`N(0, \sigma^2)` (plus rounding at :math:`2^{-f}`);
* ``secure`` (distributed discrete Gaussian, Kairouz, Liu & Steinke 2021): the report is rounded to the
  integer grid :math:`2^{-f}` first and each client adds an integer :math:`N_{\mathbb Z}(0, \sigma_s^2)`
  share; the sum is reduced mod :math:`2^b` by secure aggregation and accounted with their Prop. 14.

If some clients drop out (secure route), fewer shares reach the sum; the privacy actually achieved is
recomputed from the number of shares summed and reported in :attr:`HeterogeneityResult.rounds`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedstats._validation import check_choice, check_int, check_real
from fedstats.analyses.heterogeneity.calibration import (
    MECHANISMS,
    NOISE_MODES,
    Sensitivities,
    ddg_rho,
    ddg_share_variance,
    quiet_gaussian_sigma,
    rho_for_epsilon,
    sensitivities,
    split_budget,
)
from fedstats.analyses.heterogeneity.exact import WEIGHTED_MEAN_FORMS, i_squared
from fedstats.engine import ClientBatch, FixedPoint, Round, RoundSum
from fedstats.engine.core import ProtocolGenerator
from fedstats.errors import OverflowRiskError, ParameterError
from fedstats.privacy.analysis.gaussian import analytic_gaussian_epsilon
from fedstats.privacy.analysis.zcdp import zcdp_to_approx_dp
from fedstats.privacy.mechanisms.samplers import sample_discrete_gaussian
from fedstats.randomness import RNG, RandomSource
from fedstats.results import AnalysisResult, to_jsonable

__all__ = [
    "STATISTICS",
    "HeterogeneityConfig",
    "HeterogeneityResult",
    "RoundPlan",
    "StatisticEstimate",
    "encode_centre",
    "encode_spread",
    "heterogeneity_protocol",
    "plan_rounds",
]

STATISTICS: tuple[str, ...] = ("dispersion", "q", "i2", "all")
ACCOUNTINGS: tuple[str, ...] = ("basic", "zcdp")
_NOISE_MARGIN = (
    16.0  # fixed-point clip = data range + 16 share standard deviations (P(clip) < 1e-57)
)


@dataclass(frozen=True)
class HeterogeneityConfig:
    """Public parameters of a heterogeneity run.

    Parameters
    ----------
    statistic : {"dispersion", "q", "i2", "all"}
        What to release; ``"q"`` and ``"i2"`` run the same rounds (I^2 is post-processing of Q).
    epsilon, delta : float or None
        Total privacy budget of both rounds (epsilon > 0, delta in (0, 1)); both None: no noise (exact
        sums through the engine).
    mechanism : {"analytic", "classical"}
        Gaussian calibration (ignored with ``secure``, which uses the discrete-Gaussian accounting).
    noise : {"central", "distributed"}
        Where the noise is added.
    secure : bool
        Distributed discrete Gaussian shares on the integer grid (for the secure-aggregation route);
        requires ``noise="distributed"``.
    accounting : {"basic", "zcdp"}
        ``"basic"`` (the paper's design): split (epsilon, delta) between the rounds and calibrate each
        round exactly with ``mechanism``. ``"zcdp"``: find the largest total rho whose zCDP conversion gives
        (epsilon, delta), split rho, and set sigma = sqrt(k / (2 rho_r)); composing Gaussians in zCDP is
        tighter than adding epsilons, so this adds less noise for the same guarantee (``mechanism`` is then
        unused). Secure runs always use zCDP.
    round1_fraction : float
        Share of the budget spent on round 1, in (0, 1) (default 0.5).
    p : float
        Dispersion exponent in [1, 64] (default 2).
    min_variance : float
        Floor on each client's within-vector variance, in (0, 1/4]; bounds the weights by
        ``1/min_variance`` (default 0.05, i.e. w <= 20; image pixels in [0, 1] typically have a
        within-image variance of 0.05-0.2). The floor must be public, not read from the data.
    form : {"standard", "paper"}
        Weighted mean: the meta-analysis one, or paper 000's Def. 3.5 with an extra 1/n.
    frac_bits : int or None
        Fixed-point fractional bits (default 24, or 16 with ``secure``; lowered if the sums could
        overflow int64).
    confidence : float
        Level of the intervals, in (0, 1).
    column : str
        Population column holding the ``(n, d)`` vectors.
    min_reporting : float
        Distributed noise only: fraction f in (0, 1] of the clients whose shares are guaranteed to reach the
        sum (dropouts); each share is calibrated for ``ceil(f n)`` shares, so the privacy target holds as
        long as at least that many clients report (default 1: no dropout tolerated). Fewer reports give a
        larger epsilon, which is recomputed and reported.

    Raises
    ------
    ParameterError
        If a parameter is outside its range or the combination is invalid.
    """

    statistic: str = "all"
    epsilon: float | None = None
    delta: float | None = None
    mechanism: str = "analytic"
    noise: str = "central"
    secure: bool = False
    accounting: str = "basic"
    round1_fraction: float = 0.5
    p: float = 2.0
    min_variance: float = 0.05
    form: str = "standard"
    frac_bits: int | None = None
    confidence: float = 0.95
    column: str = "x"
    min_reporting: float = 1.0

    def __post_init__(self) -> None:
        check_choice("statistic", self.statistic, STATISTICS)
        check_choice("mechanism", self.mechanism, MECHANISMS)
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
            check_int("frac_bits", self.frac_bits, low=4, high=40)
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

    @property
    def private(self) -> bool:
        """True when noise is added."""
        return self.epsilon is not None

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
    """Public calibration of one round.

    Attributes
    ----------
    name : str
    blocks : tuple of str
        ``("mean", "weighted")`` in round 1, ``("dispersion", "q")`` in round 2 (those requested).
    dim : int
        Report length.
    epsilon, delta : float or None
        This round's budget.
    rho : float or None
        zCDP of the round (Gaussian), or None.
    sigma : float
        Standard deviation of the noise on each coordinate of the normalised sum (0 without privacy).
    share_sd : float
        Standard deviation of each client's Gaussian share (``distributed``), normalised units.
    share_variance : float
        Variance parameter of each client's discrete Gaussian share (``secure``), integer units.
    frac_bits : int
    clip : float
        Fixed-point clip of a report entry (normalised units).
    bound : int
        Largest absolute report entry (the round's bound).
    l2, l1 : float
        Sensitivities of the (integer, secure; else normalised) sum.
    """

    name: str
    blocks: tuple[str, ...]
    dim: int
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


def _block_dim(block: str, d: int) -> int:
    return {"mean": d, "weighted": d + 1}.get(block, 1)


def _plan_one(
    name: str,
    blocks: tuple[str, ...],
    cfg: HeterogeneityConfig,
    sens: Sensitivities,
    n: int,
    budget: tuple[float, float] | None,
    rho: float | None,
) -> RoundPlan:
    dim = sum(_block_dim(b, sens.dim) for b in blocks)
    k = len(blocks)
    lo = np.concatenate([_ranges(b, sens)[0] for b in blocks])
    hi = np.concatenate([_ranges(b, sens)[1] for b in blocks])
    f = cfg.frac_bits if cfg.frac_bits is not None else (16 if cfg.secure else 24)
    n_shares = max(1, math.ceil(cfg.min_reporting * n - 1e-9))
    sigma = share_sd = share_var = 0.0
    r = None
    l2, l1 = math.sqrt(k), float((hi - lo).sum())
    eps_r = delta_r = None
    if budget is not None:
        eps_r, delta_r = budget
    if cfg.private and not cfg.secure:
        assert eps_r is not None and delta_r is not None
        if cfg.accounting == "zcdp":
            assert rho is not None
            sigma = math.sqrt(k / (2.0 * rho))
            eps_r = zcdp_to_approx_dp(rho=rho, delta=delta_r)
        else:
            sigma = quiet_gaussian_sigma(
                cfg.mechanism, epsilon=eps_r, delta=delta_r, sensitivity=math.sqrt(k)
            )
        r = k / (2.0 * sigma * sigma)
        share_sd = sigma / math.sqrt(n_shares) if cfg.noise == "distributed" else 0.0
    clip = 1.0 + _NOISE_MARGIN * share_sd
    # keep every sum inside int64: n * clip * 2^f < 2^61 (noise margin included)
    for _ in range(64):
        margin = 0.0
        if cfg.secure and rho is not None:
            scale = 2.0**f
            width = np.ceil(hi * scale) - np.floor(lo * scale)
            l2, l1 = float(np.sqrt((width**2).sum())), float(width.sum())
            share_var = ddg_share_variance(rho=rho, n=n_shares, l2=l2, l1=l1, dim=dim)
            margin = _NOISE_MARGIN * math.sqrt(share_var) / scale
            sigma = math.sqrt(n * share_var) / scale  # normalised units, when all n report
            r = ddg_rho(share_variance=share_var, n=n_shares, l2=l2, l1=l1, dim=dim)
            assert delta_r is not None
            eps_r = zcdp_to_approx_dp(rho=r, delta=delta_r)
        total = n * (clip + margin) * 2.0**f
        if total < 2.0**61 or f <= 4:
            break
        f -= 1
    if n * (clip + margin) * 2.0**f >= 2.0**61:
        raise OverflowRiskError(
            f"round {name!r}: {n} clients with noise up to {clip + margin:g} cannot be summed in int64"
        )
    bound = math.ceil((clip + margin) * 2.0**f) + 1
    return RoundPlan(
        name, blocks, dim, eps_r, delta_r, r, sigma, share_sd, share_var, f, clip, bound, l2, l1
    )


def plan_rounds(
    cfg: HeterogeneityConfig, n: int, d: int
) -> tuple[RoundPlan, RoundPlan, Sensitivities]:
    """Calibrate both rounds for n clients holding d-dimensional vectors.

    Returns
    -------
    (RoundPlan, RoundPlan, Sensitivities)

    Raises
    ------
    ParameterError
        If a parameter is out of range (e.g. n < 2).
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
        if cfg.secure or cfg.accounting == "zcdp":
            rho = rho_for_epsilon(epsilon=cfg.epsilon, delta=cfg.delta)
            rhos = (rho * cfg.round1_fraction, rho * (1.0 - cfg.round1_fraction))
    p1 = _plan_one("centre", b1, cfg, sens, n, budgets[0], rhos[0])
    p2 = _plan_one("spread", b2, cfg, sens, n, budgets[1], rhos[1])
    return p1, p2, sens


# ---------------------------------------------------------------- client side (module-level, picklable)
def _finish_report(values: np.ndarray, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    fp = FixedPoint(int(params["frac_bits"]), float(params["clip"]))
    noise = params["noise"]
    if noise == "gaussian":
        values = values + rng.normal(0.0, float(params["share_sd"]), size=values.shape)
    q, _ = fp.encode(values, rng)
    if noise == "discrete":
        q = q + sample_discrete_gaussian(float(params["share_variance"]), values.shape, rng)
        b = int(params["bound"])
        q = np.clip(q, -b, b)
    out: np.ndarray = q
    return out


def _weights_u(x: np.ndarray, min_variance: float) -> np.ndarray:
    # u = w / w_max = min_variance / max(s^2, min_variance), in [4 min_variance, 1]
    u: np.ndarray = min_variance / np.maximum(x.var(axis=1), min_variance)
    return u


def encode_centre(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Round 1, client side: normalised ``x_i`` and/or ``(u_i x_i, u_i)``, plus a noise share.

    Returns
    -------
    numpy.ndarray
        int64 ``(batch.n, dim)``.
    """
    x = np.asarray(batch.column(params["column"]), dtype=np.float64)
    parts = []
    if "mean" in params["blocks"]:
        parts.append(x / float(params["sens_mean"]))
    if "weighted" in params["blocks"]:
        u = _weights_u(x, float(params["min_variance"]))
        parts.append(
            np.concatenate([u[:, None] * x, u[:, None]], axis=1) / float(params["sens_weighted"])
        )
    return _finish_report(np.concatenate(parts, axis=1), params, rng)


def encode_spread(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Round 2, client side: normalised ``||x_i - mu'||^p`` and/or ``u_i ||x_i - mu_w'||^2``, plus noise.

    Returns
    -------
    numpy.ndarray
        int64 ``(batch.n, dim)``.
    """
    x = np.asarray(batch.column(params["column"]), dtype=np.float64)
    parts = []
    if "dispersion" in params["blocks"]:
        diff = x - np.asarray(params["mu"], dtype=np.float64)
        sq = np.einsum("ij,ij->i", diff, diff)
        p = float(params["p"])
        t = sq if p == 2.0 else np.power(sq, p / 2.0)
        parts.append((t / float(params["sens_dispersion"]))[:, None])
    if "q" in params["blocks"]:
        u = _weights_u(x, float(params["min_variance"]))
        diff = x - np.asarray(params["mu_w"], dtype=np.float64)
        parts.append((u * np.einsum("ij,ij->i", diff, diff) / float(params["sens_q"]))[:, None])
    return _finish_report(np.concatenate(parts, axis=1), params, rng)


# ---------------------------------------------------------------- results
@dataclass
class StatisticEstimate:
    """One released statistic with its error.

    Attributes
    ----------
    name : str
        ``"dispersion"``, ``"q"`` or ``"i2"``.
    estimate : float
    interval : tuple of float or None
        Confidence interval derived from the actual noise (coverage at least the nominal level), or None.
    standard_error : float or None
        Root of the closed-form MSE, where available.
    truth : float or None
        Exact value (simulation only).
    sensitivity : float or None
        L2 sensitivity of the released sum in the statistic's units (average dispersion: per n).
    noise_sd : float or None
        Standard deviation of the Gaussian noise on the statistic in its units.
    mse_theory : float or None
        Closed-form mean squared error (``accuracy`` module), where available.
    paper_interval : tuple of float or None
        Paper 000's Theorem 4.7 / 4.15 / 4.19 interval, for comparison.
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
    """Result of :func:`heterogeneity_protocol`.

    ``estimate`` is I^2 when Q was released, else the dispersion.

    Attributes
    ----------
    dispersion, q, i2 : StatisticEstimate or None
    mean, weighted_mean : numpy.ndarray or None
        The released (noisy, clipped) centres, ``(d,)``.
    weight_sum : float or None
        Released (noisy) sum of the weights, in weight units.
    rounds : list of dict
        Each round's calibration (:class:`RoundPlan`) plus the clients summed and the privacy achieved.
    mechanism, noise : str
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


def _round_params(cfg: HeterogeneityConfig, plan: RoundPlan, sens: Sensitivities) -> dict[str, Any]:
    noise = "none"
    if cfg.private and cfg.noise == "distributed":
        noise = "discrete" if cfg.secure else "gaussian"
    return {
        "column": cfg.column,
        "blocks": list(plan.blocks),
        "noise": noise,
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


def _decode(s: RoundSum, plan: RoundPlan, cfg: HeterogeneityConfig, rng: RNG | None) -> np.ndarray:
    vals = np.asarray(s.total, dtype=np.float64) / 2.0**plan.frac_bits
    if cfg.private and cfg.noise == "central":
        assert rng is not None
        vals = vals + np.asarray(rng.normal(0.0, plan.sigma, size=vals.shape), dtype=np.float64)
    return vals


def effective_sigma(plan: RoundPlan, cfg: HeterogeneityConfig, n_summed: int) -> float:
    """Standard deviation of the noise actually on the normalised sum, given the shares summed."""
    if not cfg.private:
        return 0.0
    if cfg.noise == "central":
        return plan.sigma
    if cfg.secure:
        return math.sqrt(n_summed * plan.share_variance) / 2.0**plan.frac_bits
    return plan.share_sd * math.sqrt(n_summed)


def _achieved(plan: RoundPlan, cfg: HeterogeneityConfig, n_summed: int) -> dict[str, Any]:
    """Privacy the round actually achieved given the noise that reached the sum.

    Gaussian rounds: the exact (analytic) epsilon of the noise on the sum at this round's delta, so a
    classical calibration at large epsilon, or missing shares, show their true cost. Discrete shares: Prop. 14
    of Kairouz, Liu & Steinke (2021) with the number of shares summed.
    """
    out: dict[str, Any] = {"clients_summed": n_summed}
    if not cfg.private or plan.delta is None:
        return out
    sig = effective_sigma(plan, cfg, n_summed)
    out["sigma_effective"] = sig
    if cfg.secure:
        rho = ddg_rho(
            share_variance=plan.share_variance, n=n_summed, l2=plan.l2, l1=plan.l1, dim=plan.dim
        )
        out.update(
            rho_achieved=rho,
            epsilon_achieved=zcdp_to_approx_dp(rho=rho, delta=plan.delta),
            delta_achieved=plan.delta,
        )
        return out
    k = len(plan.blocks)
    out.update(
        epsilon_achieved=analytic_gaussian_epsilon(
            delta=plan.delta, sigma=sig, sensitivity=math.sqrt(k)
        ),
        delta_achieved=plan.delta,
        rho_achieved=k / (2.0 * sig**2),
    )
    return out


def heterogeneity_protocol(
    cfg: HeterogeneityConfig, *, n_clients: int, dim: int, randomness: RandomSource
) -> ProtocolGenerator[HeterogeneityResult]:
    """The two-round protocol (module docstring); run it with :meth:`fedstats.engine.Engine.run`.

    Parameters
    ----------
    cfg : HeterogeneityConfig
    n_clients : int
        Number of clients (public), >= 2.
    dim : int
        Vector length d, >= 1.
    randomness : RandomSource
        Server-side randomness (central noise).

    Returns
    -------
    ProtocolGenerator[HeterogeneityResult]
        Truth fields are left empty (the server does not know them); see
        :func:`fedstats.analyses.heterogeneity.heterogeneity` for simulation.
    """
    from fedstats.analyses.heterogeneity.accuracy import attach_errors

    p1, p2, sens = plan_rounds(cfg, n_clients, dim)
    server = randomness.generator("heterogeneity", "server") if cfg.private else None
    d = dim
    par1 = _round_params(cfg, p1, sens)
    s1: RoundSum = yield Round("centre", encode_centre, par1, dim=p1.dim, bound=p1.bound)
    n = s1.n_clients
    v1 = _decode(s1, p1, cfg, server)
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
    v2 = _decode(s2, p2, cfg, server)
    res = HeterogeneityResult(
        analysis="heterogeneity",
        estimate=math.nan,
        confidence=cfg.confidence,
        epsilon=cfg.epsilon,
        delta=cfg.delta,
        n_clients=n2,
        release_note=randomness.release_note,
        mean=mu,
        weighted_mean=centre_w,
        weight_sum=None if s_u is None else s_u * sens.w_max,
        mechanism=(
            "discrete-gaussian"
            if cfg.secure
            else "gaussian-zcdp"
            if cfg.accounting == "zcdp"
            else cfg.mechanism
        ),
        noise=cfg.noise,
        secure=cfg.secure,
        p=cfg.p,
        min_variance=cfg.min_variance,
        form=cfg.form,
    )
    k = 0
    if "dispersion" in p2.blocks:
        disp = max(0.0, float(v2[k]) * sens.dispersion_sum / n2)
        res.dispersion = StatisticEstimate("dispersion", disp, sensitivity=sens.dispersion_sum / n2)
        k += 1
    if "q" in p2.blocks:
        q = max(0.0, float(v2[k]) * sens.q_sum * sens.w_max)
        res.q = StatisticEstimate("q", q, sensitivity=sens.q_weight_units)
        res.i2 = StatisticEstimate("i2", i_squared(q, n2))
    res.rounds = [
        {**p1.as_dict(), **_achieved(p1, cfg, n)},
        {**p2.as_dict(), **_achieved(p2, cfg, n2)},
    ]
    if cfg.private:
        # basic composition of the rounds, or zCDP composition (both valid at the total delta): the smaller
        assert cfg.delta is not None
        rho_tot = sum(float(r.get("rho_achieved") or 0.0) for r in res.rounds)
        eps_zcdp = zcdp_to_approx_dp(rho=rho_tot, delta=cfg.delta)
        eps_basic = sum(float(r.get("epsilon_achieved") or 0.0) for r in res.rounds)
        res.details["epsilon_achieved"] = eps_zcdp if cfg.secure else min(eps_basic, eps_zcdp)
        if (
            not cfg.secure
            and cfg.mechanism == "classical"
            and max(float(p1.epsilon or 0.0), float(p2.epsilon or 0.0)) >= 1.0
        ):
            res.details["warning"] = (
                "classical Gaussian calibration used at a per-round epsilon >= 1, outside its theorem "
                "(Dwork & Roth Thm. A.1); epsilon_achieved gives the exact privacy of the noise added"
            )
    res.estimate = (
        res.i2.estimate
        if res.i2 is not None
        else res.dispersion.estimate
        if res.dispersion
        else math.nan
    )
    attach_errors(
        res,
        cfg,
        replace(p1, sigma=effective_sigma(p1, cfg, n)),
        replace(p2, sigma=effective_sigma(p2, cfg, n2)),
        sens,
        n2,
        d,
        randomness,
    )
    return res
