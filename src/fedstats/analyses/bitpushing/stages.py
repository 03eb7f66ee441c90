"""What a client encodes, and the common shape of one estimation *stage* (a mean of codes).

A stage estimates the mean of the clients' integer codes over a range of clients, in one or more engine
rounds, and returns a :class:`StageEstimate` (the mean code and its variance). Bit pushing
(:mod:`fedstats.analyses.bitpushing.protocols`) and the baselines (:mod:`fedstats.analyses.mean_baselines`)
are stages; :func:`fedstats.analyses.bitpushing.protocols.mean_protocol` and
:func:`~fedstats.analyses.bitpushing.protocols.variance_protocol` compose them, so every method is compared
on the same data, encoding and engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedstats.analyses.bitpushing.encoding import BitEncoding, bits_needed, enforce_range, to_codes
from fedstats.engine.core import ProtocolGenerator
from fedstats.engine.rounds import ClientBatch
from fedstats.randomness import RNG

__all__ = ["CodeSpec", "Stage", "StageEstimate", "client_codes", "public_uniform"]


@dataclass(frozen=True)
class CodeSpec:
    """The public description of the integer code each client computes from its value.

    ``v = clip_or_refuse(x, [low, high])``; if ``center`` is set, ``v = (v - center)**2`` (variance stage);
    ``code = round((v - offset) / resolution)`` (randomized rounding), in ``[0, max_code]``, on
    ``bit_depth`` bits.

    Attributes
    ----------
    column : str
        Population column holding each client's value.
    low, high : float
        Declared input range.
    out_of_range : {"clip", "refuse"}
    offset, resolution : float
        Code mapping.
    max_code : int
        Largest code.
    bit_depth : int
        Bits b (``2**b - 1 >= max_code``).
    center : float or None
        Public center for the squared-deviation codes.
    """

    column: str
    low: float
    high: float
    out_of_range: str
    offset: float
    resolution: float
    max_code: int
    bit_depth: int
    center: float | None = None

    @classmethod
    def for_mean(cls, column: str, encoding: BitEncoding) -> CodeSpec:
        """Codes of the values themselves (``offset = low``)."""
        return cls(
            column,
            encoding.low,
            encoding.high,
            encoding.out_of_range,
            encoding.low,
            encoding.resolution,
            encoding.max_code,
            encoding.b,
        )

    @classmethod
    def for_squares(cls, column: str, encoding: BitEncoding, center: float) -> CodeSpec:
        """Codes of ``(x - center)**2`` at resolution ``resolution**2``.

        The bit depth keeps the same number of spare high-order bits as ``encoding`` has over its range
        (twice as many, as squaring doubles bit lengths), so a loose bound stays loose.
        """
        c = min(max(float(center), encoding.low), encoding.high)
        res2 = encoding.resolution**2
        top = max((encoding.high - c) ** 2, (c - encoding.low) ** 2)
        max_code = max(1, math.ceil(top / res2 - 1e-9 * max(1.0, top / res2)))
        spare = encoding.b - bits_needed(encoding.max_code)
        depth = min(52, bits_needed(max_code) + 2 * spare)
        return cls(
            column,
            encoding.low,
            encoding.high,
            encoding.out_of_range,
            0.0,
            res2,
            max_code,
            depth,
            c,
        )

    def params(self) -> dict[str, Any]:
        """Plain serializable form for round parameters."""
        return {
            "column": self.column,
            "low": self.low,
            "high": self.high,
            "out_of_range": self.out_of_range,
            "offset": self.offset,
            "resolution": self.resolution,
            "max_code": self.max_code,
            "bit_depth": self.bit_depth,
            "center": self.center,
        }

    def decode_mean(self, code_mean: float) -> float:
        """Mean value from the mean code."""
        return self.offset + self.resolution * float(code_mean)

    def decode_variance(self, code_variance: float) -> float:
        """Variance in value units from one in code units."""
        return float(code_variance) * self.resolution**2

    def values(self, x: Any) -> np.ndarray:
        """Server-side (simulation) mirror of the client transform, without rounding: clipped values or squares."""
        v = np.clip(np.asarray(x, dtype=np.float64), self.low, self.high)
        return v if self.center is None else (v - self.center) ** 2


def client_codes(batch: ClientBatch, params: Any, rng: RNG) -> np.ndarray:
    """Client side: the codes of a batch (range policy, optional squaring, randomized rounding).

    Returns
    -------
    numpy.ndarray of int64, shape (batch.n,)

    Raises
    ------
    DataError
        If a value is outside the declared range under ``out_of_range="refuse"`` or not finite.
    """
    x = batch.column(params["column"])
    v, _ = enforce_range(
        x, params["low"], params["high"], params["out_of_range"], name=f"{params['column']} values"
    )
    center = params.get("center")
    if center is not None:
        v = (v - center) ** 2
    return to_codes(v, params["offset"], params["resolution"], params["max_code"], rng)


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def public_uniform(seed: int, indices: np.ndarray) -> np.ndarray:
    """Public uniforms in [0, 1) for global client indices (SplitMix64 of ``seed`` and the index).

    Shared randomness that client and server both compute from the public seed (the dither of subtractive
    dithering): counter-based, so any range of clients can be regenerated in bounded memory.

    Returns
    -------
    numpy.ndarray of float64, shape of ``indices``, with 53 random bits each.
    """
    s = np.uint64(int(seed) % (1 << 64))
    with np.errstate(over="ignore"):
        z = np.asarray(indices).astype(np.uint64) * _GOLDEN + s
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    out: np.ndarray = (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    return out


@dataclass
class StageEstimate:
    """Result of one stage: the mean code over the stage's clients and its variance.

    Attributes
    ----------
    code_mean : float
        Estimate of the mean code.
    code_variance : float
        Its variance (plug-in formula of the method; Lemma 1 for bit pushing).
    n_clients : int
        Clients that reported.
    bits_per_client : int
        Private bits each of those clients disclosed.
    epsilon : float or None
        Local DP epsilon per client (None: not private).
    details : dict
        Method-specific values (bit means, probabilities, ...).
    """

    code_mean: float
    code_variance: float
    n_clients: int
    bits_per_client: int
    epsilon: float | None
    details: dict[str, Any] = field(default_factory=dict)


Stage = Callable[[CodeSpec, tuple[int, int], int], ProtocolGenerator[StageEstimate]]
"""A stage: ``stage(spec, client_range, public_seed)`` -> protocol returning a :class:`StageEstimate`."""
