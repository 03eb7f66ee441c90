"""What a client encodes, and the common shape of one estimation *stage* (a mean of codes).

A stage estimates the mean of the clients' integer codes over a range of clients, in one or more engine
rounds, and returns a :class:`StageEstimate` (the mean code and its variance). Bit pushing
(:mod:`fedstats.analyses.bitpushing.bit_stages`) and the baselines (:mod:`fedstats.analyses.mean_baselines`)
are stages; :func:`fedstats.analyses.bitpushing.protocol.mean_protocol` and
:func:`~fedstats.analyses.bitpushing.protocol.variance_protocol` compose them, so every method is compared
on the same data, encoding and engine.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedstats.analyses.bitpushing.encoding import BitEncoding, bits_needed
from fedstats.engine.core import ProtocolGenerator

__all__ = ["BitSums", "CodeSpec", "Stage", "StageEstimate"]


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
        r"""Codes of ``(x - center)**2 - offset`` at resolution ``resolution**2``.

        The resolution is ``resolution**2``, times the power of two that keeps the codes below
        2^52 (exact float64 integers) when the squares' range needs more bits.
        The center is the published mean estimate, **not clipped** to the declared range: clipping it
        would shrink :math:`(\hat\mu - \mu)^2` below what the variance protocol's correction subtracts
        and bias the variance low (by several times the variance at epsilon = 0.5 and n = 300). A center
        outside ``[low, high]`` moves the codes' floor to ``offset = dist(center, [low, high])**2`` and
        widens their range. The bit depth keeps the same number of spare high-order bits as
        ``encoding`` has over its range (twice as many, as squaring doubles bit lengths), so a loose
        bound stays loose.
        """
        c = float(center)
        res2 = encoding.resolution**2
        dist = max(0.0, encoding.low - c, c - encoding.high)
        off = dist * dist
        top = max((encoding.high - c) ** 2, (c - encoding.low) ** 2) - off
        # codes are exact float64 integers below 2^52: a wider range of squares (a loose range of more
        # than 26 bits, or a far center) gets a coarser resolution, 2^k times resolution^2, instead of
        # codes clipped at 2^52 - 1 (randomized rounding keeps E[code] exact; clipping biased the
        # variance of capital_gain declared on 34 bits by -10^9 times its value under DP)
        k = max(0, math.ceil(math.log2(max(top / res2, 1.0))) - 52)
        res2 *= 2.0**k
        max_code = max(1, math.ceil(top / res2 - 1e-9 * max(1.0, top / res2)))
        max_code = min(max_code, 2**52 - 1)
        spare = encoding.b - bits_needed(encoding.max_code)
        depth = min(52, bits_needed(max_code) + 2 * spare)
        return cls(
            column,
            encoding.low,
            encoding.high,
            encoding.out_of_range,
            off,
            res2,
            max_code,
            depth,
            c,
        )

    def params(self) -> dict[str, Any]:
        """Plain serializable form for round parameters: every field, in order."""
        return dataclasses.asdict(self)

    def decode_mean(self, code_mean: float) -> float:
        """Mean value from the mean code."""
        return self.offset + self.resolution * float(code_mean)

    def decode_variance(self, code_variance: float) -> float:
        """Variance in value units from one in code units."""
        return float(code_variance) * self.resolution**2


@dataclass(frozen=True)
class BitSums:
    """What the server learns from one bit-pushing round.

    Attributes
    ----------
    counts : numpy.ndarray of int64, shape (b,)
        Reports per bit :math:`c_j`.
    sums : numpy.ndarray of int64, shape (b,)
        Sum of reported (randomized) bits :math:`s_j`.
    n_clients : int
    probabilities : numpy.ndarray of float64, shape (b,)
        The sampling vector p used.
    """

    counts: np.ndarray
    sums: np.ndarray
    n_clients: int
    probabilities: np.ndarray


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
    code_variance_unbiased : float or None
        An unbiased estimate of the variance, where the method has one that differs from
        ``code_variance`` (bit pushing: ``code_variance`` is the small-sample corrected, slightly
        conservative plug-in that intervals use; this one is what bias corrections subtract). None: use
        ``code_variance``.
    """

    code_mean: float
    code_variance: float
    n_clients: int
    bits_per_client: int
    epsilon: float | None
    details: dict[str, Any] = field(default_factory=dict)
    code_variance_unbiased: float | None = None


Stage = Callable[[CodeSpec, tuple[int, int], int], ProtocolGenerator[StageEstimate]]
"""A stage: ``stage(spec, client_range, public_seed)`` -> protocol returning a :class:`StageEstimate`."""
