r"""Server side of the mean baselines: stages for dithering, Piecewise, Duchi and Laplace, and protocols.

Each baseline is a :data:`~fedstats.analyses.bitpushing.stages.Stage`, so the mean and variance protocols
of bit pushing run it exactly like bit pushing (same clients, same codes, same declared range) and every
comparison of Cormode & Markov 2021 (Sec. 5, Figures 1-2) is like for like.

* ``dithering``: subtractive dithering (Ben-Basat, Mitzenmacher, Vargaftik 2021) with the power-of-two
  range bound of Cormode & Markov's experiments: a code k in ``[0, 2^b)`` maps to ``u = k / 2^b``; client
  and server share a public ``h ~ U[-1/2, 1/2)`` per client; the client sends ``1[u + h >= 1/2]`` (with
  ``bits_per_client = S``: S-bit dithering); the server estimates ``y - h``. Variance
  ``4^b / (12 (2^S - 1)^2)`` per client in code units; with ``epsilon`` (only for one bit) the bit goes
  through randomized response and the variance becomes ``4^b (1/12 + e^eps/(e^eps-1)^2)``.
* ``piecewise``, ``duchi`` (Wang et al., ICDE 2019) and ``laplace`` (sensitivity 2) on
  ``t = 2 k / (2^b - 1) - 1`` in [-1, 1], on their release grids (:mod:`~fedstats.analyses.mean_baselines.
  client`). The variance uses the mechanism's worst case over t (conservative). Laplace reports are
  clipped at ``1 + 40 * 2 / epsilon`` (probability below 1e-17).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from fedstats._validation import (
    GRID_WHY,
    MIN_GRID_EPSILON,
    MIN_LOCAL_EPSILON,
    check_choice,
    check_int,
    check_local_epsilon,
)
from fedstats.analyses.bitpushing.encoding import BitEncoding
from fedstats.analyses.bitpushing.protocol import MeanEstimate, VarianceEstimate, check_options
from fedstats.analyses.bitpushing.protocol import mean_protocol as _mean_protocol
from fedstats.analyses.bitpushing.protocol import variance_protocol as _variance_protocol
from fedstats.analyses.bitpushing.stages import CodeSpec, Stage, StageEstimate
from fedstats.analyses.mean_baselines.client import (
    ceil_log2,
    dither,
    encode_dithering,
    encode_ldp,
    ldp_mechanism,
)
from fedstats.engine.core import ProtocolGenerator
from fedstats.engine.fixedpoint import FixedPoint
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import ParameterError
from fedstats.privacy.mechanisms import (
    DuchiMechanism,
    Mechanism,
    PiecewiseMechanism,
    RandomizedResponse,
)

__all__ = [
    "BASELINE_METHODS",
    "BASELINE_OPTIONS",
    "baseline_mechanisms",
    "baseline_stage",
    "dither_sum",
    "dithering_stage",
    "ldp_stage",
    "mean_protocol",
    "variance_protocol",
]

BASELINE_METHODS = ("dithering", "piecewise", "duchi", "laplace")
BASELINE_OPTIONS: dict[str, tuple[str, ...]] = {
    "dithering": ("epsilon", "bits_per_client"),
    "piecewise": ("epsilon", "frac_bits"),
    "duchi": ("epsilon",),
    "laplace": ("epsilon", "frac_bits"),
}
"""The options each baseline accepts."""
LAPLACE_TAIL = 40.0
_MAX_GRID_BITS = 40  # resolution_bits of the mechanisms' grid paths


def dither_sum(seed: int, lo: int, hi: int, chunk: int = 1 << 20) -> float:
    """Sum the public dithers of clients ``[lo, hi)`` in bounded memory.

    Parameters
    ----------
    seed : int
        The round's public seed.
    lo, hi : int
        Global client range.
    chunk : int
        Clients per step.

    Returns
    -------
    float
    """
    total = 0.0
    for start in range(lo, hi, chunk):
        idx = np.arange(start, min(hi, start + chunk), dtype=np.int64)
        total += float(dither(seed, idx).sum())
    return total


def _dithering_checks(bits_per_client: int, epsilon: float | None) -> tuple[int, float | None]:
    s = check_int("bits_per_client", bits_per_client, low=1, high=32)
    if epsilon is None:
        return s, None
    eps = check_local_epsilon("epsilon", epsilon, high=700.0)
    if s != 1:
        raise ParameterError(
            "bits_per_client", bits_per_client, "1 for private dithering (one randomized bit)"
        )
    return s, eps


def dithering_stage(
    spec: CodeSpec,
    client_range: tuple[int, int],
    public_seed: int,
    *,
    bits_per_client: int = 1,
    epsilon: float | None = None,
) -> ProtocolGenerator[StageEstimate]:
    """Subtractive dithering with the power-of-two bound ``2^b`` (see module docstring).

    Parameters
    ----------
    spec : CodeSpec
        The public code.
    client_range : (int, int)
        Clients ``[lo, hi)`` taking part.
    public_seed : int
        Seed of the public dithers.
    bits_per_client : int
        Message bits S, in [1, 32] (1 when private).
    epsilon : float, optional
        Randomized response on the one bit, in (0, 700].

    Returns
    -------
    ProtocolGenerator[StageEstimate]
        One round: the code mean from the dithered messages (debiased for randomized response) and
        its variance.

    Raises
    ------
    ParameterError
        If ``epsilon`` is combined with ``bits_per_client > 1`` (randomized response is on one bit).
    """
    s, eps = _dithering_checks(bits_per_client, epsilon)
    lo, hi = client_range
    params = {**spec.params(), "seed": int(public_seed), "message_bits": s, "epsilon": eps}
    r: RoundSum = yield Round(
        "dithering", encode_dithering, params, dim=1, bound=2**s - 1, client_range=(lo, hi)
    )
    n = r.n_clients
    levels = 2**s - 1
    qbar = float(r.total[0]) / n
    if eps is not None:
        qbar = float(RandomizedResponse(epsilon=eps).debias_mean(qbar))
        noise = float(RandomizedResponse(epsilon=eps).variance())
    else:
        noise = 0.0
    hbar = dither_sum(int(public_seed), lo, hi) / n
    top = float(2**spec.bit_depth)
    u_mean = (qbar - hbar) / levels
    per = 1.0 / (12.0 * levels**2) + noise
    details = {"range_bound": top, "message_bits": s}
    return StageEstimate(u_mean * top, per * top**2 / n, n, s, eps, details)


def _ldp_checks(mechanism: str, epsilon: float | None, frac_bits: int) -> tuple[float, int]:
    if epsilon is None:
        raise ParameterError(
            "epsilon", None, f"a positive epsilon (the {mechanism} mechanism is DP)"
        )
    if mechanism == "duchi":  # one randomized bit: no release grid
        eps = check_local_epsilon("epsilon", epsilon, high=700.0, low=MIN_LOCAL_EPSILON)
    else:
        eps = check_local_epsilon(
            "epsilon", epsilon, high=700.0, low=MIN_GRID_EPSILON, why=GRID_WHY
        )
    top = {"laplace": _MAX_GRID_BITS - 1, "duchi": _MAX_GRID_BITS}.get(mechanism)
    if top is None:  # piecewise: the grid needs frac_bits + ceil(log2 C) <= 40 bits
        top = _MAX_GRID_BITS - ceil_log2(PiecewiseMechanism(epsilon=eps).C)
    fb = check_int("frac_bits", frac_bits, low=0, high=top)
    return eps, fb


def _report_clip(mechanism: str, epsilon: float, frac_bits: int) -> float:
    if mechanism == "piecewise":  # the grid point just above C: no report is ever clipped
        scale = float(2**frac_bits)
        return math.ceil(PiecewiseMechanism(epsilon=epsilon).C * scale) / scale
    return 1.0 + LAPLACE_TAIL * 2.0 / epsilon


def ldp_stage(
    spec: CodeSpec,
    client_range: tuple[int, int],
    public_seed: int,
    *,
    mechanism: str = "piecewise",
    epsilon: float | None = None,
    frac_bits: int = 20,
) -> ProtocolGenerator[StageEstimate]:
    """Piecewise, Duchi or Laplace local DP mean on their release grids (see module docstring).

    Parameters
    ----------
    spec : CodeSpec
        The public code.
    client_range : (int, int)
        Clients ``[lo, hi)`` taking part.
    public_seed : int
        Unused by these mechanisms (no public randomness); part of the stage signature.
    mechanism : {"piecewise", "duchi", "laplace"}
        The baseline.
    epsilon : float
        Local DP epsilon, in (0, 700] (required).
    frac_bits : int
        Fractional bits of the release grid ``2**-frac_bits`` (Piecewise, Laplace), default 20.

    Returns
    -------
    ProtocolGenerator[StageEstimate]
        One round: the code mean from the clients' unbiased reports and its variance (worst case over
        ``t``).

    Raises
    ------
    ParameterError
        If ``epsilon`` is missing (these mechanisms exist only with privacy) or a parameter is invalid.
    """
    del public_seed  # the stage signature is shared with the mechanisms that use public randomness
    check_choice("mechanism", mechanism, ("piecewise", "duchi", "laplace"))
    eps, fb = _ldp_checks(mechanism, epsilon, frac_bits)
    clip = _report_clip(mechanism, eps, fb)
    params = {
        **spec.params(),
        "mechanism": mechanism,
        "epsilon": eps,
        "frac_bits": fb,
        "clip": clip,
    }
    bound = 1 if mechanism == "duchi" else FixedPoint(fb, clip).bound
    r: RoundSum = yield Round(
        mechanism,
        encode_ldp,
        params,
        dim=1,
        bound=bound,
        client_range=(client_range[0], client_range[1]),
    )
    n = r.n_clients
    mech = ldp_mechanism(mechanism, eps, fb)
    if mechanism == "duchi":
        pos = float(r.total[0])
        t_mean = DuchiMechanism(epsilon=eps).c * (2.0 * pos - n) / n
    else:
        t_mean = float(FixedPoint(fb, clip).decode(r.total[0])) / n
    per_t = float(mech.variance())
    if mechanism == "laplace":  # the randomized rounding of t onto the grid
        per_t += 0.25 / float(4**fb)
    width = float(2**spec.bit_depth - 1)
    code_mean = (t_mean + 1.0) / 2.0 * width
    code_var = per_t * (width / 2.0) ** 2 / n
    details = {
        "mechanism": mechanism,
        "variance_bound": "worst case over t",
        "release_grid": mech.release_grid,
    }
    return StageEstimate(code_mean, code_var, n, 1, eps, details)


def baseline_stage(method: str, **options: Any) -> Stage:
    """Bind a baseline's stage to its options.

    Parameters
    ----------
    method : {"dithering", "piecewise", "duchi", "laplace"}
        The baseline.
    **options
        Its options, and only those (:data:`BASELINE_OPTIONS`): ``epsilon``, ``bits_per_client``
        (dithering), ``frac_bits`` (Piecewise, Laplace).

    Returns
    -------
    Stage
        :func:`dithering_stage` or :func:`ldp_stage` with the options bound (checked here, before any
        round).

    Raises
    ------
    ParameterError
        If ``method`` is unknown, an option is not one of its, or an option is invalid.
    """
    check_choice("method", method, BASELINE_METHODS)
    check_options(method, options, BASELINE_OPTIONS[method])
    if method == "dithering":
        _dithering_checks(options.get("bits_per_client", 1), options.get("epsilon"))
        stage: Stage = partial(dithering_stage, **options)
        return stage
    _ldp_checks(method, options.get("epsilon"), options.get("frac_bits", 20))
    stage = partial(ldp_stage, mechanism=method, **options)
    return stage


def baseline_mechanisms(method: str, **options: Any) -> list[Mechanism]:
    """List the mechanisms each client of a baseline's stage applies (what the ledger is charged).

    Parameters
    ----------
    method : {"dithering", "piecewise", "duchi", "laplace"}
        The baseline.
    **options
        As :func:`baseline_stage`.

    Returns
    -------
    list of Mechanism
        Empty for dithering without ``epsilon``.

    Raises
    ------
    ParameterError
        If ``method`` or an option is invalid.
    """
    check_choice("method", method, BASELINE_METHODS)
    check_options(method, options, BASELINE_OPTIONS[method])
    if method == "dithering":
        _, eps = _dithering_checks(options.get("bits_per_client", 1), options.get("epsilon"))
        return [] if eps is None else [RandomizedResponse(epsilon=eps)]
    eps, fb = _ldp_checks(method, options.get("epsilon"), options.get("frac_bits", 20))
    return [ldp_mechanism(method, eps, fb)]


def mean_protocol(
    method: str,
    column: str,
    encoding: BitEncoding,
    n_clients: int,
    *,
    public_seed: int,
    client_range: tuple[int, int] | None = None,
    confidence: float = 0.95,
    **options: Any,
) -> ProtocolGenerator[MeanEstimate]:
    """Estimate the mean of ``column`` by a baseline: one stage, tagged ``"mean_baselines.mean"``.

    Parameters
    ----------
    method : {"dithering", "piecewise", "duchi", "laplace"}
        The baseline.
    column, encoding, n_clients, public_seed, client_range, confidence
        As :func:`fedstats.analyses.bitpushing.protocol.mean_protocol`.
    **options
        As :func:`baseline_stage`.

    Returns
    -------
    ProtocolGenerator[MeanEstimate]
    """
    stage = baseline_stage(method, **options)
    return (
        yield from _mean_protocol(
            stage,
            column,
            encoding,
            n_clients,
            public_seed=public_seed,
            method=method,
            client_range=client_range,
            confidence=confidence,
        )
    )


def variance_protocol(
    method: str,
    column: str,
    encoding: BitEncoding,
    n_clients: int,
    *,
    public_seed: int,
    mean_fraction: float = 0.2,
    client_range: tuple[int, int] | None = None,
    confidence: float = 0.95,
    **options: Any,
) -> ProtocolGenerator[VarianceEstimate]:
    """Estimate the variance of ``column`` by a baseline (mean stage, then squared deviations).

    Tagged ``"mean_baselines.variance"``; see
    :func:`fedstats.analyses.bitpushing.protocol.variance_protocol`.

    Parameters
    ----------
    method : {"dithering", "piecewise", "duchi", "laplace"}
        The baseline.
    column, encoding, n_clients, public_seed, mean_fraction, client_range, confidence
        As :func:`fedstats.analyses.bitpushing.protocol.variance_protocol`.
    **options
        As :func:`baseline_stage`.

    Returns
    -------
    ProtocolGenerator[VarianceEstimate]
    """
    stage = baseline_stage(method, **options)
    return (
        yield from _variance_protocol(
            stage,
            column,
            encoding,
            n_clients,
            public_seed=public_seed,
            method=method,
            mean_fraction=mean_fraction,
            client_range=client_range,
            confidence=confidence,
        )
    )
