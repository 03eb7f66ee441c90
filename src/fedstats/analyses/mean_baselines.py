r"""Baselines for bit pushing on the same engine, data and encoding: dithering, Piecewise, Duchi, Laplace.

Each is a :data:`~fedstats.analyses.bitpushing.stages.Stage`, so :func:`~fedstats.analyses.bitpushing.mean_protocol`
and :func:`~fedstats.analyses.bitpushing.variance_protocol` run it exactly like bit pushing (same clients,
same codes, same declared range), and every comparison is like for like.

* ``dithering``: subtractive dithering (Ben-Basat, Mitzenmacher, Vargaftik 2021) with the power-of-two
  range bound of Cormode & Markov's experiments: a code k in ``[0, 2^b)`` maps to ``u = k / 2^b``; client
  and server share a public ``h ~ U[-1/2, 1/2)`` per client (:func:`public_uniform` of the public seed and
  the client index); the client sends ``1[u + h >= 1/2]`` (with ``bits_per_client = S``: S-bit dithering);
  the server estimates ``y - h``. Variance ``4^b / (12 (2^S - 1)^2)`` per client in code units; with
  ``epsilon`` (only for one bit) the bit goes through randomized response and the variance becomes
  ``4^b (1/12 + e^eps/(e^eps-1)^2)``.
* ``piecewise`` and ``duchi`` (Wang et al., ICDE 2019) and ``laplace`` (sensitivity 2): the code maps to
  ``t = 2 k / (2^b - 1) - 1`` in [-1, 1]; Duchi's +-C report travels as one bit; Piecewise and Laplace
  outputs travel in fixed point (``frac_bits`` fractional bits, randomized rounding: unbiased). Their
  variance uses the mechanism's worst case over t (conservative). Laplace outputs are clipped at
  ``1 + 40 * 2 / epsilon`` (probability below 1e-17).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np

from fedstats._validation import check_choice, check_int, check_real
from fedstats.analyses.bitpushing.stages import (
    CodeSpec,
    Stage,
    StageEstimate,
    client_codes,
    public_uniform,
)
from fedstats.engine.core import ProtocolGenerator
from fedstats.engine.fixedpoint import FixedPoint
from fedstats.engine.rounds import ClientBatch, Round, RoundSum
from fedstats.errors import ParameterError
from fedstats.privacy.mechanisms import (
    DuchiMechanism,
    LaplaceMechanism,
    PiecewiseMechanism,
    RandomizedResponse,
    SubtractiveDithering,
)
from fedstats.randomness import RNG

__all__ = [
    "BASELINE_METHODS",
    "baseline_stage",
    "dither_sum",
    "dithering_stage",
    "encode_dithering",
    "encode_ldp",
    "ldp_stage",
]

BASELINE_METHODS = ("dithering", "piecewise", "duchi", "laplace")
LAPLACE_TAIL = 40.0
_DITHER_KEY = 0x5D17


def _dither(seed: int, indices: np.ndarray) -> np.ndarray:
    return public_uniform(seed ^ _DITHER_KEY, indices) - 0.5


def encode_dithering(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Client side of subtractive dithering: ``S``-bit message of ``u = code / 2^b`` (randomized if private).

    Returns
    -------
    numpy.ndarray of int64, shape (batch.n, 1), in ``[0, 2^S - 1]``.
    """
    codes = client_codes(batch, params, rng)
    u = codes.astype(np.float64) / float(2 ** int(params["bit_depth"]))
    h = _dither(int(params["seed"]), batch.indices)
    q = SubtractiveDithering(bit_depth=int(params["message_bits"])).encode(u, h)
    eps = params.get("epsilon")
    if eps is not None:
        q = RandomizedResponse(epsilon=eps).randomize(q, rng).astype(np.int64)
    return q.reshape(-1, 1)


def dither_sum(seed: int, lo: int, hi: int, chunk: int = 1 << 20) -> float:
    """Server side: the sum of the public dithers of clients ``[lo, hi)``, computed in bounded memory."""
    total = 0.0
    for start in range(lo, hi, chunk):
        idx = np.arange(start, min(hi, start + chunk), dtype=np.int64)
        total += float(_dither(seed, idx).sum())
    return total


def dithering_stage(
    spec: CodeSpec,
    client_range: tuple[int, int],
    public_seed: int,
    *,
    bits_per_client: int = 1,
    epsilon: float | None = None,
    **_: Any,
) -> ProtocolGenerator[StageEstimate]:
    """Subtractive dithering with the power-of-two bound ``2^b`` (see module docstring).

    Raises
    ------
    ParameterError
        If ``epsilon`` is combined with ``bits_per_client > 1`` (randomized response is on one bit).
    """
    s = check_int("bits_per_client", bits_per_client, low=1, high=32)
    if epsilon is not None:
        epsilon = check_real("epsilon", epsilon, low=0.0, low_open=True, high=700.0)
        if s != 1:
            raise ParameterError(
                "bits_per_client", bits_per_client, "1 for private dithering (one randomized bit)"
            )
    lo, hi = client_range
    params = {
        **spec.params(),
        "seed": int(public_seed),
        "message_bits": s,
        "epsilon": epsilon,
    }
    r: RoundSum = yield Round(
        "dithering", encode_dithering, params, dim=1, bound=2**s - 1, client_range=(lo, hi)
    )
    n = r.n_clients
    levels = 2**s - 1
    qbar = float(r.total[0]) / n
    if epsilon is not None:
        qbar = float(RandomizedResponse(epsilon=epsilon).debias_mean(qbar))
        noise = float(RandomizedResponse(epsilon=epsilon).variance())
    else:
        noise = 0.0
    hbar = dither_sum(int(public_seed), lo, hi) / n
    top = float(2**spec.bit_depth)
    u_mean = (qbar - hbar) / levels
    per = 1.0 / (12.0 * levels**2) + noise
    details = {"range_bound": top, "message_bits": s}
    return StageEstimate(u_mean * top, per * top**2 / n, n, s, epsilon, details)


def _mechanism(name: str, epsilon: float) -> Any:
    if name == "piecewise":
        return PiecewiseMechanism(epsilon=epsilon)
    if name == "duchi":
        return DuchiMechanism(epsilon=epsilon)
    return LaplaceMechanism(epsilon=epsilon, sensitivity=2.0, resolution_bits=None)


def _report_clip(name: str, epsilon: float) -> float:
    if name == "piecewise":
        return float(PiecewiseMechanism(epsilon=epsilon).C)
    return 1.0 + LAPLACE_TAIL * 2.0 / epsilon


def encode_ldp(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Client side of Piecewise / Duchi / Laplace on ``t = 2 code / (2^b - 1) - 1``.

    Returns
    -------
    numpy.ndarray of int64, shape (batch.n, 1)
        Duchi: 1 for +C, 0 for -C. Piecewise, Laplace: the output in fixed point.
    """
    codes = client_codes(batch, params, rng)
    t = np.clip(2.0 * codes / float(2 ** int(params["bit_depth"]) - 1) - 1.0, -1.0, 1.0)
    name = params["mechanism"]
    mech = _mechanism(name, float(params["epsilon"]))
    z = mech.randomize(t, rng)
    if name == "duchi":
        sign: np.ndarray = (z > 0).astype(np.int64).reshape(-1, 1)
        return sign
    fp = FixedPoint(int(params["frac_bits"]), float(params["clip"]))
    q, _ = fp.encode(z, rng)
    return q.reshape(-1, 1)


def ldp_stage(
    spec: CodeSpec,
    client_range: tuple[int, int],
    public_seed: int,
    *,
    mechanism: str = "piecewise",
    epsilon: float | None = None,
    frac_bits: int = 20,
    **_: Any,
) -> ProtocolGenerator[StageEstimate]:
    """Piecewise, Duchi or Laplace local DP mean (see module docstring).

    Raises
    ------
    ParameterError
        If ``epsilon`` is missing (these mechanisms exist only with privacy) or invalid.
    """
    check_choice("protocol", mechanism, ("piecewise", "duchi", "laplace"))
    if epsilon is None:
        raise ParameterError(
            "epsilon", None, f"a positive epsilon (the {mechanism} mechanism is DP)"
        )
    eps = check_real("epsilon", epsilon, low=0.0, low_open=True, high=700.0)
    fb = check_int("frac_bits", frac_bits, low=0, high=40)
    clip = _report_clip(mechanism, eps)
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
    mech = _mechanism(mechanism, eps)
    if mechanism == "duchi":
        pos = float(r.total[0])
        t_mean = float(mech.c) * (2.0 * pos - n) / n
    else:
        t_mean = float(r.total[0]) / float(2**fb) / n
    per_t = float(mech.variance())
    width = float(2**spec.bit_depth - 1)
    code_mean = (t_mean + 1.0) / 2.0 * width
    code_var = per_t * (width / 2.0) ** 2 / n
    details = {"mechanism": mechanism, "variance_bound": "worst case over t"}
    return StageEstimate(code_mean, code_var, n, 1, eps, details)


def baseline_stage(method: str, **options: Any) -> Stage:
    """The stage of a baseline with its options bound.

    Parameters
    ----------
    method : {"dithering", "piecewise", "duchi", "laplace"}
    **options
        ``epsilon``, ``bits_per_client`` (dithering), ``frac_bits`` (fixed point of real reports); bit-pushing
        options are accepted and ignored, so one option set serves every method.

    Raises
    ------
    ParameterError
        If ``method`` is unknown.
    """
    check_choice("protocol", method, BASELINE_METHODS)
    if method == "dithering":
        keep = {k: v for k, v in options.items() if k in ("bits_per_client", "epsilon")}
        return partial(dithering_stage, **keep)  # type: ignore[return-value]
    if options.get("epsilon") is None:
        raise ParameterError("epsilon", None, f"a positive epsilon (the {method} mechanism is DP)")
    if int(options.get("bits_per_client", 1)) != 1:
        raise ParameterError("bits_per_client", options["bits_per_client"], f"1 for {method}")
    keep = {k: v for k, v in options.items() if k in ("epsilon", "frac_bits")}
    return partial(ldp_stage, mechanism=method, **keep)  # type: ignore[return-value]
