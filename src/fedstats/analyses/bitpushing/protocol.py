r"""Server side of bit pushing: the mean and variance protocols and their results.

Cormode & Markov, "Bit-efficient numerical aggregation and stronger privacy for trust in federated
analytics" (2021). A protocol composes *stages* (:mod:`~fedstats.analyses.bitpushing.bit_stages` for bit
pushing, :mod:`fedstats.analyses.mean_baselines.protocol` for the baselines): :func:`mean_protocol` runs one
stage over the clients, :func:`variance_protocol` a mean stage and then a stage on the squared deviations
from the published mean. Both are engine generators returning an
:class:`~fedstats.results.AnalysisResult` subclass tagged ``"bitpushing.mean"`` /
``"bitpushing.variance"`` (``"mean_baselines.mean"`` / ``"mean_baselines.variance"`` for a baseline).

:func:`make_stage` binds any method of :data:`METHODS` to its options, refusing options the method would
not use; :func:`stage_mechanisms` lists the mechanisms each client of a stage applies, which is what the
one-call API charges to the :class:`~fedstats.privacy.ledger.PrivacyLedger`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from fedstats._numeric import two_sided_z
from fedstats._validation import (
    check_choice,
    check_int,
    check_local_epsilon,
    check_open_unit,
)
from fedstats.analyses.bitpushing.allocation import split_clients
from fedstats.analyses.bitpushing.bit_stages import (
    ALLOCATIONS,
    ESTIMATORS,
    adaptive_stage,
    basic_stage,
    check_squash,
    weighted_stage,
)
from fedstats.analyses.bitpushing.encoding import BitEncoding
from fedstats.analyses.bitpushing.stages import CodeSpec, Stage
from fedstats.engine.core import ProtocolGenerator
from fedstats.errors import ParameterError
from fedstats.results import AnalysisResult

__all__ = [
    "BASELINE_METHODS",
    "BIT_PUSHING_METHODS",
    "STAGE_OPTIONS",
    "BitPushingResult",
    "MeanEstimate",
    "VarianceEstimate",
    "bit_pushing_stage",
    "check_options",
    "clip_to_space",
    "mean_protocol",
    "variance_protocol",
    "variance_split",
]

BIT_PUSHING_METHODS = ("adaptive", "weighted", "basic")

_COMMON = ("epsilon", "bits_per_client", "allocation", "squash_threshold")
STAGE_OPTIONS: dict[str, tuple[str, ...]] = {
    "adaptive": (
        *_COMMON,
        "round1_fraction",
        "gamma",
        "alpha",
        "min_reports",
        "squash_z",
        "estimator",
    ),
    "weighted": (*_COMMON, "alpha"),
    "basic": (*_COMMON, "probabilities", "alpha", "min_reports"),
}
"""The options each bit-pushing variant accepts (keyword arguments of its stage function)."""


def check_options(method: str, options: Mapping[str, Any], accepted: tuple[str, ...]) -> None:
    """Refuse options that ``method`` would not use (never drop them silently).

    Parameters
    ----------
    method : str
        The method the options are for (named in the error).
    options : Mapping
        Option name to value.
    accepted : tuple of str
        The option names ``method`` uses.

    Raises
    ------
    ParameterError
        Naming the first option ``method`` does not accept, with the accepted ones.
    """
    for name, value in options.items():
        if name not in accepted:
            raise ParameterError(
                name, value, f"no value: {method!r} takes only {', '.join(accepted)}"
            )


def bit_pushing_stage(method: str, **options: Any) -> Stage:
    """Bind a bit-pushing variant's stage to its options.

    Parameters
    ----------
    method : {"adaptive", "weighted", "basic"}
        :func:`adaptive_stage` (Algorithm 2), :func:`weighted_stage` or :func:`basic_stage`
        (Algorithm 1).
    **options
        Keyword options of that stage (:data:`STAGE_OPTIONS`); ``epsilon=None`` means no DP.

    Returns
    -------
    Stage
        The variant's stage function with its options bound (checked here, before any round).

    Raises
    ------
    ParameterError
        If ``method`` is unknown or an option is not one of the method's.
    """
    check_choice("method", method, BIT_PUSHING_METHODS)
    check_options(method, options, STAGE_OPTIONS[method])
    # validate now, so a bad request fails before anything is charged or run
    epsilon = options.get("epsilon")
    if epsilon is not None:
        check_local_epsilon("epsilon", epsilon, high=700.0)
    check_int("bits_per_client", options.get("bits_per_client", 1), low=1)
    check_choice("allocation", options.get("allocation", "exact"), ALLOCATIONS)
    check_squash(options.get("squash_threshold"), epsilon)
    if "estimator" in options:
        check_choice("estimator", options["estimator"], ESTIMATORS)
    fns: dict[str, Callable[..., Any]] = {
        "adaptive": adaptive_stage,
        "weighted": weighted_stage,
        "basic": basic_stage,
    }
    stage: Stage = partial(fns[method], **options)
    return stage


BASELINE_METHODS = ("dithering", "piecewise", "duchi", "laplace")


@dataclass
class BitPushingResult(AnalysisResult):
    """A mean or variance estimated by bit pushing or a baseline on the engine.

    Attributes
    ----------
    method : str
        ``"adaptive"``, ``"weighted"``, ``"basic"``, ``"dithering"``, ``"piecewise"``, ``"duchi"`` or
        ``"laplace"``.
    variance : float
        Variance of the estimate (plug-in formula; ``standard_error**2``).
    bit_depth : int
        Bits of the codes.
    n_clipped : int or None
        Clients whose value lay outside the declared range (clipped), when known (simulation scan).
    """

    method: str = ""
    variance: float = 0.0
    bit_depth: int = 0
    n_clipped: int | None = None


@dataclass
class MeanEstimate(BitPushingResult):
    """Estimated mean (see :func:`mean_protocol`)."""


@dataclass
class VarianceEstimate(BitPushingResult):
    """Estimated population variance (ddof = 0) (see :func:`variance_protocol`).

    Attributes
    ----------
    mean : float
        The mean estimated in the first stage (the public center of the squares).
    """

    mean: float = 0.0


def clip_to_space(
    estimate: float, standard_error: float, z: float, space: tuple[float, float]
) -> tuple[float, tuple[float, float]]:
    r"""Clip an estimate and its normal interval ``estimate +- z * se`` to the parameter space [a, b].

    Post-processing of released values (no privacy cost). The estimate is clipped to [a, b]; the interval
    keeps its part inside [a, b], so its coverage never drops. If the whole normal interval lies outside
    [a, b] (the truth is then missed anyway), it is replaced by ``[a, min(b, a + z se)]`` (below) or
    ``[max(a, b - z se), b]`` (above): the half of a z-interval around the clipped estimate that lies in
    the space, never degenerate while ``se > 0`` (a variance clipped to 0 with a large standard error
    reports ``[0, z se]``, not ``[0, 0]``).

    Parameters
    ----------
    estimate : float
        Unclipped (unbiased) estimate.
    standard_error : float
        Its standard error, >= 0.
    z : float
        Normal quantile of the interval, > 0.
    space : (float, float)
        Parameter space [a, b], a <= b (mean: the declared range; variance: [0, ((high - low)/2)^2],
        Popoviciu's bound).

    Returns
    -------
    (float, (float, float))
        The clipped estimate and interval.
    """
    a, b = float(space[0]), float(space[1])
    half = z * standard_error
    lo, hi = estimate - half, estimate + half
    est = min(max(estimate, a), b)
    if hi < a:
        return est, (a, min(b, a + half))
    if lo > b:
        return est, (max(a, b - half), b)
    return est, (max(lo, a), min(hi, b))


def _full_range(n_clients: int, client_range: tuple[int, int] | None) -> tuple[int, int]:
    n = check_int("n_clients", n_clients, low=1)
    if client_range is None:
        return 0, n
    lo, hi = int(client_range[0]), int(client_range[1])
    if not 0 <= lo < hi <= n:
        raise ParameterError("client_range", client_range, f"a non-empty range inside [0, {n}]")
    return lo, hi


def _tag(method: str, statistic: str) -> str:
    package = "mean_baselines" if method in BASELINE_METHODS else "bitpushing"
    return f"{package}.{statistic}"


def _common(
    analysis: str,
    estimate: float,
    variance: float,
    confidence: float,
    epsilon: float | None,
    space: tuple[float, float],
    details: dict[str, Any],
) -> dict[str, Any]:
    """Collect the fields a mean and a variance result share: estimate, variance, CI, privacy, details.

    The released ``estimate`` is the unbiased estimator and ``ci`` its normal interval ``estimate +- z
    se``; either may leave ``space``. Their versions clipped to ``space`` (:func:`clip_to_space`,
    post-processing: lower error, but biased wherever noise reaches a bound) are
    ``details["clipped_estimate"]`` / ``["clipped_ci"]`` (``docs/bitpushing.md``, "Released = judged").
    """
    se = math.sqrt(max(variance, 0.0))
    z = two_sided_z(confidence)
    clipped, clipped_ci = clip_to_space(estimate, se, z, space)
    return {
        "analysis": analysis,
        "estimate": estimate,
        "ci": (estimate - z * se, estimate + z * se),
        "standard_error": se,
        "confidence": confidence,
        "epsilon": epsilon,
        "delta": 0.0 if epsilon is not None else None,
        "variance": variance,
        "details": {
            **details,
            "clipped_estimate": clipped,
            "clipped_ci": clipped_ci,
            "parameter_space": (float(space[0]), float(space[1])),
        },
    }


def mean_protocol(
    stage: Stage,
    column: str,
    encoding: BitEncoding,
    n_clients: int,
    *,
    public_seed: int,
    method: str,
    client_range: tuple[int, int] | None = None,
    confidence: float = 0.95,
) -> ProtocolGenerator[MeanEstimate]:
    """Estimate the mean of ``column`` over the clients with one stage (bit pushing or a baseline).

    Parameters
    ----------
    stage : Stage
        E.g. ``make_stage("adaptive", epsilon=1.0)``.
    column : str
        Population column holding each client's value.
    encoding : BitEncoding
        Declared range, resolution and bit depth.
    n_clients : int
        Clients in the population (the server knows its cohort size), >= 1.
    public_seed : int
        Public randomness (permutation, dither), from the server's randomness.
    method : str
        The method of ``stage`` (:data:`METHODS`), recorded in the result and its tag.
    client_range : (int, int), optional
        Clients taking part (default all).
    confidence : float
        CI level in (0, 1).

    Returns
    -------
    ProtocolGenerator[MeanEstimate]
        Tagged ``"bitpushing.mean"`` (``"mean_baselines.mean"`` for a baseline), with variance,
        normal-approximation CI and bit metering; ``truth`` is filled by the caller. The estimate is
        the unbiased one (it may leave the declared range ``[low, high]``); the clipped estimate and
        CI are ``details["clipped_estimate"]`` / ``["clipped_ci"]`` (:func:`clip_to_space`).
    """
    conf = check_open_unit("confidence", confidence)
    cohort = _full_range(n_clients, client_range)
    spec = CodeSpec.for_mean(column, encoding)
    st = yield from stage(spec, cohort, int(public_seed))
    est = spec.decode_mean(st.code_mean)
    var = spec.decode_variance(st.code_variance)
    space = (encoding.low, encoding.high)
    return MeanEstimate(
        **_common(_tag(method, "mean"), est, var, conf, st.epsilon, space, dict(st.details)),
        n_clients=st.n_clients,
        bits_per_client=float(st.bits_per_client),
        method=method,
        bit_depth=spec.bit_depth,
    )


def variance_split(n_clients: int, mean_fraction: float) -> int:
    """Clients in the mean stage of :func:`variance_protocol`: ``round(mean_fraction * n_clients)``.

    Parameters
    ----------
    n_clients : int
        Clients taking part, >= 1.
    mean_fraction : float
        In (0, 1).

    Returns
    -------
    int
        In ``[1, n_clients - 1]``.

    Raises
    ------
    ParameterError
        If ``mean_fraction`` leaves a stage without clients.
    """
    return split_clients("mean_fraction", mean_fraction, n_clients, "stages")


def variance_protocol(
    stage: Stage,
    column: str,
    encoding: BitEncoding,
    n_clients: int,
    *,
    public_seed: int,
    method: str,
    mean_fraction: float = 0.2,
    client_range: tuple[int, int] | None = None,
    confidence: float = 0.95,
    mean_stage: Stage | None = None,
) -> ProtocolGenerator[VarianceEstimate]:
    r"""Estimate the population variance: a mean stage, then the mean of :math:`(x - \hat\mu)^2`.

    The first ``mean_fraction`` of the clients estimate the mean :math:`\hat\mu` (published as the center);
    the others push the bits of :math:`(x - \hat\mu)^2` (the :math:`E[(X - EX)^2]` form Cormode & Markov
    found better than :math:`E[X^2] - (EX)^2`). Disjoint cohorts, so each client discloses bits once. Since
    :math:`E[(x-\hat\mu)^2] = \sigma^2 + E[(\hat\mu-\mu)^2]`, the estimate subtracts an unbiased
    estimate of the first stage's variance (Lemma 1 with the unbiased per-bit plug-in,
    :func:`~fedstats.analyses.bitpushing.allocation.bit_mean_variances`; ``details["mean_correction"]``),
    so it is unbiased when the mean stage is. The center :math:`\hat\mu` is not clipped to the declared
    range (clipping it would make the correction too large: :meth:`CodeSpec.for_squares`). The reported
    variance is the squares stage's plus :math:`2\,\widehat{\mathbb V}[\hat\mu]^2` (the variance of
    :math:`(\hat\mu-\mu)^2` for a normal error), which dominates when epsilon * n is small. The
    released estimate is the unbiased one (it may be negative); its version clipped to
    :math:`[0, ((high - low)/2)^2]` (Popoviciu's bound, :func:`clip_to_space`) is
    ``details["clipped_estimate"]``.

    Parameters
    ----------
    stage : Stage
        Stage for the squares (and the mean, unless ``mean_stage`` is given).
    column, encoding, n_clients, public_seed, method, client_range, confidence
        As :func:`mean_protocol`.
    mean_fraction : float
        In (0, 1), default 0.2: the variance stage is the harder one (:func:`variance_split`).
    mean_stage : Stage, optional
        Stage for the mean (default ``stage``).

    Returns
    -------
    ProtocolGenerator[VarianceEstimate]
        Tagged ``"bitpushing.variance"`` (``"mean_baselines.variance"`` for a baseline).
    """
    conf = check_open_unit("confidence", confidence)
    lo, hi = _full_range(n_clients, client_range)
    n_m = variance_split(hi - lo, mean_fraction)
    seed = int(public_seed)
    spec_m = CodeSpec.for_mean(column, encoding)
    st_m = yield from (mean_stage or stage)(spec_m, (lo, lo + n_m), seed)
    mu = spec_m.decode_mean(st_m.code_mean)
    unbiased_code_var = st_m.code_variance_unbiased
    if unbiased_code_var is None:
        unbiased_code_var = st_m.code_variance
    mu_var = spec_m.decode_variance(unbiased_code_var)
    spec_v = CodeSpec.for_squares(column, encoding, mu)
    st_v = yield from stage(spec_v, (lo + n_m, hi), seed + 1)
    raw = spec_v.decode_mean(st_v.code_mean)
    n_v = hi - lo - n_m
    # E[raw] = sigma^2 + E[(mu_hat - mu)^2] for i.i.d. clients, and mu_var (Lemma 1, unbiased plug-in)
    # is unbiased for E[(mu_hat - mu)^2]: est is unbiased (docs/bitpushing.md)
    est = raw - mu_var
    # the squares stage's own variance, plus Var((mu_hat - mu)^2) = 2 Var(mu_hat)^2 for a normal mean
    # error (the center's error enters the squares; it dominates at small epsilon * n)
    mu_var_ci = spec_m.decode_variance(st_m.code_variance)
    var = spec_v.decode_variance(st_v.code_variance) + 2.0 * mu_var_ci**2
    details = {
        "mean_stage": dict(st_m.details),
        "variance_stage": dict(st_v.details),
        "mean_correction": mu_var,
        "uncorrected": raw,
        "squares_bit_depth": spec_v.bit_depth,
        "center": spec_v.center,
        "stage_clients": [n_m, n_v],
    }
    space = (0.0, ((encoding.high - encoding.low) / 2.0) ** 2)
    return VarianceEstimate(
        **_common(_tag(method, "variance"), est, var, conf, st_v.epsilon, space, details),
        n_clients=st_m.n_clients + st_v.n_clients,
        bits_per_client=float(max(st_m.bits_per_client, st_v.bits_per_client)),
        method=method,
        bit_depth=spec_m.bit_depth,
        mean=mu,
    )
