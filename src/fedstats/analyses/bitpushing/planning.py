r"""Planning bit pushing: the clients or epsilon a mean or variance needs for a target interval width.

The released interval is the normal one, ``estimate +- z se`` (clipped to the parameter space), with
``se^2`` Lemma 1's variance (Cormode & Markov 2021; :func:`~fedstats.analyses.bitpushing.allocation.lemma1_variance`,
randomized response included). The planner evaluates that variance before any data is seen, with the
rounds' sampling vectors computed as the stages compute them:

* ``basic`` (the default, :data:`DEFAULT_METHOD`; :math:`p_j \propto 2^j`) and ``weighted`` (:math:`p_j \propto 2^{j/2}`): one round of all n
  clients;
* ``adaptive`` (split estimator): round 1, ``round1_fraction`` of the clients,
  :math:`p_j \propto 2^j` mixed with the uniform floor of
  :func:`~fedstats.analyses.bitpushing.bit_stages.adaptive_stage`; round 2, Lemma 3's allocation
  :math:`\sqrt{4^j(\bar x^{(j)}(1-\bar x^{(j)}) + v_\varepsilon)}` (computed here from the assumed bit means,
  in a run from round 1's noisy ones) with its floor; :math:`V = \lambda^2 V_1 + (1 - \lambda)^2 V_2`,
  :math:`\lambda = n_1 / n`;
* variance: the mean stage on ``mean_fraction`` of the clients, the squares' stage on the others;
  :math:`V = V_{squares} + 2 V_{mean}^2` (:func:`~fedstats.analyses.bitpushing.protocol.variance_protocol`).

The bit means :math:`\bar x^{(j)}` are unknown before the run: by default every bit is taken at 1/2, the
largest :math:`\bar x(1 - \bar x)`, so the plan is conservative (under local DP at epsilon <= 2 the
randomized-response term :math:`v_\varepsilon = e^\varepsilon / (e^\varepsilon - 1)^2 \ge 0.3` dominates
1/4 anyway); ``values`` (a public sample, or last year's data) gives them instead. The variance falls with
n and with epsilon, so the clients or epsilon are found by bisection.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fedstats._numeric import two_sided_z
from fedstats._validation import (
    check_choice,
    check_int,
    check_local_epsilon,
    check_open_unit,
    check_real,
)
from fedstats.analyses._planning import Plan, check_one_unknown, solve_width
from fedstats.analyses.bitpushing.allocation import (
    lemma1_variance,
    rr_noise_variance,
    split_clients,
    weighted_probabilities,
)
from fedstats.analyses.bitpushing.bit_stages import FLOOR_SHARE
from fedstats.analyses.bitpushing.config import ROUND1_FRACTION, BitPushingMeanConfig
from fedstats.analyses.bitpushing.encoding import BitEncoding
from fedstats.analyses.bitpushing.stages import CodeSpec
from fedstats.errors import ParameterError

__all__ = [
    "DEFAULT_METHOD",
    "plan_mean",
    "plan_variance",
    "predicted_mean_variance",
    "predicted_variance_variance",
]

_METHODS = ("adaptive", "weighted", "basic")

DEFAULT_METHOD: str = BitPushingMeanConfig.method
"""The method planned when none is named: the library's default (``BitPushingMeanConfig.method``)."""
_MIN_REPORTS = 16  # adaptive_stage's default min_reports
_LIMITS = (10**12, 700.0)  # the most clients and the largest epsilon a plan searches


def _bit_means(spec: CodeSpec, values: Any) -> np.ndarray:
    """Bit means of the codes of ``values`` under ``spec`` (each bit at 1/2 when ``values`` is None)."""
    b = spec.bit_depth
    if values is None:
        return np.full(b, 0.5)
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0 or not np.isfinite(x).all():
        raise ParameterError("values", "...", "a non-empty sample of finite numbers")
    x = np.clip(x, spec.low, spec.high)
    if spec.center is not None:
        x = (x - spec.center) ** 2
    codes = np.clip(np.round((x - spec.offset) / spec.resolution), 0, spec.max_code).astype(
        np.int64
    )
    bits = (codes[:, None] >> np.arange(b)) & 1
    out: np.ndarray = bits.mean(axis=0)
    return out


def _stage_variance(
    m: np.ndarray, n: int, method: str, epsilon: float | None, bits_per_client: int, f1: float
) -> float:
    """Predicted variance (code units) of one stage over n clients with bit means ``m``."""
    b = m.size
    s = bits_per_client
    eps_bit = None if epsilon is None else epsilon / s
    if method != "adaptive":
        p = weighted_probabilities(b, 1.0 if method == "basic" else 0.5)
        return lemma1_variance(m, p, n, bits_per_client=s, epsilon=eps_bit)
    n1 = split_clients("round1_fraction", f1, n, "rounds")
    n2 = n - n1
    floor = min(_MIN_REPORTS / (n1 * s), FLOOR_SHARE / b)
    floor = min(max(floor, 2.0 / (n1 * s)), 1.0 / b)
    p1 = (1.0 - b * floor) * weighted_probabilities(b, 1.0) + floor
    beta = 4.0 ** np.arange(b) * (m * (1.0 - m) + rr_noise_variance(eps_bit))
    root = np.sqrt(beta)
    p2 = root / root.sum() if root.sum() > 0 else np.full(b, 1.0 / b)
    n2s = n2 * s
    floor2 = min(max(min(_MIN_REPORTS / n2s, FLOOR_SHARE / b), 2.0 / n2s), 1.0 / b)
    p2 = (1.0 - b * floor2) * p2 + floor2
    lam = n1 / n
    v1 = lemma1_variance(m, p1, n1, bits_per_client=s, epsilon=eps_bit)
    v2 = lemma1_variance(m, p2, n2, bits_per_client=s, epsilon=eps_bit)
    return lam * lam * v1 + (1.0 - lam) ** 2 * v2


def _encoding(low: float, high: float, resolution: float, bit_depth: int | None) -> BitEncoding:
    return BitEncoding(low, high, resolution=resolution, bit_depth=bit_depth)


def predicted_mean_variance(
    n_clients: int,
    *,
    low: float,
    high: float,
    epsilon: float | None,
    resolution: float = 1.0,
    bit_depth: int | None = None,
    method: str = DEFAULT_METHOD,
    bits_per_client: int = 1,
    round1_fraction: float = ROUND1_FRACTION,
    values: Any = None,
) -> float:
    """Predicted variance (value units squared) of bit pushing's mean of ``n_clients`` records.

    Parameters
    ----------
    n_clients : int
        Records, >= 2.
    low, high, resolution, bit_depth, method, bits_per_client, round1_fraction, epsilon
        As :class:`~fedstats.analyses.bitpushing.config.BitPushingMeanConfig` (epsilon None: no DP).
    values : array_like of float, optional
        A sample of values like the clients' (their code bits' means enter Lemma 1); default every bit at
        1/2 (the largest variance per report).

    Returns
    -------
    float
        ``se^2`` of the estimate, > 0.
    """
    n = check_int("n_clients", n_clients, low=2)
    check_choice("method", method, _METHODS)
    spec = CodeSpec.for_mean("value", _encoding(low, high, resolution, bit_depth))
    m = _bit_means(spec, values)
    v = _stage_variance(m, n, method, epsilon, bits_per_client, round1_fraction)
    return v * spec.resolution**2


def predicted_variance_variance(
    n_clients: int,
    *,
    low: float,
    high: float,
    epsilon: float | None,
    resolution: float = 1.0,
    bit_depth: int | None = None,
    method: str = DEFAULT_METHOD,
    bits_per_client: int = 1,
    round1_fraction: float = ROUND1_FRACTION,
    mean_fraction: float = 0.2,
    values: Any = None,
) -> float:
    """Predicted variance of bit pushing's variance estimate (value units to the fourth power).

    The mean stage on ``round(mean_fraction n)`` records, the squares' stage on the others, centred at
    the mean of ``values`` (default the range's midpoint); ``V_squares + 2 V_mean^2``.

    Parameters
    ----------
    n_clients : int
        Records, >= 3.
    mean_fraction : float
        In (0, 1).
    low, high, epsilon, resolution, bit_depth, method, bits_per_client, round1_fraction, values
        As :func:`predicted_mean_variance`.

    Returns
    -------
    float
    """
    n = check_int("n_clients", n_clients, low=3)
    check_choice("method", method, _METHODS)
    mf = check_open_unit("mean_fraction", mean_fraction)
    n_m = split_clients("mean_fraction", mf, n, "stages")
    enc = _encoding(low, high, resolution, bit_depth)

    def stage(spec: CodeSpec, n_stage: int) -> float:
        m = _bit_means(spec, values)
        v = _stage_variance(m, n_stage, method, epsilon, bits_per_client, round1_fraction)
        return v * spec.resolution**2

    v_mean = stage(CodeSpec.for_mean("value", enc), n_m)
    centre = (
        (enc.low + enc.high) / 2.0
        if values is None
        else float(np.mean(np.clip(np.asarray(values, dtype=np.float64), enc.low, enc.high)))
    )
    v_sq = stage(CodeSpec.for_squares("value", enc, centre), n - n_m)
    return v_sq + 2.0 * v_mean**2


def _plan(
    statistic: str,
    width: float,
    predict: Callable[..., float],
    model: dict[str, Any],
    *,
    n_clients: int | None,
    epsilon: float | None,
    confidence: float,
    inputs: dict[str, Any],
    space: float,
) -> Plan:
    """Solve for the unknown of ``n_clients``/``epsilon`` with ``predict(n, epsilon=eps, **model)``."""
    check_one_unknown(n_clients=n_clients, epsilon=epsilon)
    z = two_sided_z(confidence)

    def w_at(n: int, eps: float) -> float:
        try:
            return 2.0 * z * math.sqrt(predict(n, epsilon=eps, **model))
        except ParameterError:  # too few clients to give every round or stage some
            return math.inf

    goal = f"{100 * confidence:g}% interval width <= {width:g}"
    inputs = {
        "low": model["low"],
        "high": model["high"],
        "method": model["method"],
        **inputs,
        "bit_means": "assumed 1/2 (worst case)" if model["values"] is None else "from values",
        "confidence": confidence,
        "width": width,
        "range_width": space,
    }

    def epsilon_note() -> str:
        assert n_clients is not None
        floor = w_at(n_clients, 700.0)
        return f"no epsilon up to 700 reaches it (width at epsilon 700: {floor:.4g}; add clients)"

    notes = ("not within 10^12 clients", epsilon_note)
    return solve_width(statistic, w_at, width, goal, inputs, n_clients, epsilon, _LIMITS, notes)


def _check_common(
    width: float,
    low: float,
    high: float,
    n_clients: int | None,
    epsilon: float | None,
    confidence: float,
    method: str,
) -> tuple[float, float, float, float]:
    """``(width, low, high, confidence)`` checked, and ``n_clients``, ``epsilon`` and ``method``."""
    lo = check_real("low", low)
    hi = check_real("high", high)
    if not hi > lo:
        raise ParameterError("high", high, f"a number above low={lo:g}")
    w = check_real("width", width, low=0.0, low_open=True)
    if n_clients is not None:
        check_int("n_clients", n_clients, low=2)
    if epsilon is not None:
        check_local_epsilon("epsilon", epsilon, high=700.0)
    conf = check_open_unit("confidence", confidence)
    check_choice("method", method, _METHODS)
    return w, lo, hi, conf


def _model(
    low: float,
    high: float,
    resolution: float,
    bit_depth: int | None,
    method: str,
    bits_per_client: int,
    round1_fraction: float,
    values: Any,
) -> dict[str, Any]:
    """The predictor's keyword arguments, the encoding checked."""
    _encoding(low, high, resolution, bit_depth)
    return {
        "low": low,
        "high": high,
        "resolution": resolution,
        "bit_depth": bit_depth,
        "method": method,
        "bits_per_client": bits_per_client,
        "round1_fraction": round1_fraction,
        "values": values,
    }


def plan_mean(
    width: float,
    *,
    low: float,
    high: float,
    n_clients: int | None = None,
    epsilon: float | None = None,
    confidence: float = 0.95,
    resolution: float = 1.0,
    bit_depth: int | None = None,
    method: str = DEFAULT_METHOD,
    bits_per_client: int = 1,
    round1_fraction: float = ROUND1_FRACTION,
    values: Any = None,
) -> Plan:
    """The clients (or epsilon) bit pushing's mean needs for a ``confidence`` interval of width ``width``.

    Give one of ``n_clients`` and ``epsilon``; the other is solved for (the smallest that reaches the
    width, from :func:`predicted_mean_variance`).

    Parameters
    ----------
    width : float
        Target width of the interval (``2 z se``), in value units, > 0.
    low, high : float
        Declared range (``high > low``).
    n_clients : int, optional
        Records, >= 2.
    epsilon : float, optional
        Local epsilon per record, in (0, 700].
    confidence : float
        In (0, 1).
    resolution, bit_depth, method, bits_per_client, round1_fraction, values
        As :func:`predicted_mean_variance`.

    Returns
    -------
    Plan
        ``value``: the clients or epsilon found (None, with a ``note``, when out of reach);
        ``achieved``: the interval width there.

    Raises
    ------
    ParameterError
        Naming the parameter out of range, or when not exactly one of ``n_clients``/``epsilon`` is unset.
    """
    w, lo, hi, conf = _check_common(width, low, high, n_clients, epsilon, confidence, method)
    model = _model(lo, hi, resolution, bit_depth, method, bits_per_client, round1_fraction, values)
    return _plan(
        "mean",
        w,
        predicted_mean_variance,
        model,
        n_clients=n_clients,
        epsilon=epsilon,
        confidence=conf,
        inputs={},
        space=hi - lo,
    )


def plan_variance(
    width: float,
    *,
    low: float,
    high: float,
    n_clients: int | None = None,
    epsilon: float | None = None,
    confidence: float = 0.95,
    resolution: float = 1.0,
    bit_depth: int | None = None,
    method: str = DEFAULT_METHOD,
    bits_per_client: int = 1,
    round1_fraction: float = ROUND1_FRACTION,
    mean_fraction: float = 0.2,
    values: Any = None,
) -> Plan:
    """The clients (or epsilon) bit pushing's variance needs for an interval of width ``width``.

    As :func:`plan_mean`, with :func:`predicted_variance_variance`; ``width`` is in squared value units.

    Parameters
    ----------
    width : float
        Target width, > 0.
    low, high, n_clients, epsilon, confidence, resolution, bit_depth, method, bits_per_client
        As :func:`plan_mean` (``n_clients >= 3``).
    round1_fraction, mean_fraction, values
        As :func:`predicted_variance_variance`.

    Returns
    -------
    Plan
        As :func:`plan_mean`.

    Raises
    ------
    ParameterError
        Naming the parameter out of range, or when not exactly one of ``n_clients``/``epsilon`` is unset.
    """
    w, lo, hi, conf = _check_common(width, low, high, n_clients, epsilon, confidence, method)
    check_open_unit("mean_fraction", mean_fraction)
    model = _model(lo, hi, resolution, bit_depth, method, bits_per_client, round1_fraction, values)
    model["mean_fraction"] = mean_fraction
    return _plan(
        "variance",
        w,
        predicted_variance_variance,
        model,
        n_clients=n_clients,
        epsilon=epsilon,
        confidence=conf,
        inputs={"mean_fraction": mean_fraction},
        space=((hi - lo) / 2.0) ** 2,
    )
