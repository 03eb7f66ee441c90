"""Fixed-point encoding of real vectors for secure aggregation mod 2^b, with counted clipping.

A real value ``v`` is clipped to ``[-clip, clip]`` (each clipped coordinate is counted and reported, never
silent), scaled by ``scale`` and rounded to an integer ``q`` (deterministic round-half-to-even, or unbiased
stochastic rounding when a generator is given); negatives are sent in two's complement mod 2^b. The sum of
``n`` such integers is exact as long as it cannot wrap, which :func:`check_overflow` enforces before any
client sends anything:

    b >= value_bits + ceil(log2 n) + headroom,

where ``value_bits`` is the width of one signed quantized value. Pang et al. 2023 (Sec. 4 and App. O)
quantize to 64-bit fixed point; fedstats chooses the largest scale the modulus allows
(:meth:`FixedPoint.for_clients`).

Examples
--------
>>> fp = FixedPoint.for_clients(clip=1.0, n_clients=1000, bits=32)
>>> q = fp.quantize(np.array([0.25, -2.0]))
>>> q.clipped, fp.dequantize(q.values.astype(np.uint32), 32).tolist()
(1, [0.25, -1.0])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedstats._validation import check_finite_array, check_int, check_real
from fedstats.errors import OverflowRiskError, ParameterError
from fedstats.randomness import RNG
from fedstats.secagg.crypto import DTYPES

__all__ = ["FixedPoint", "Quantized", "check_overflow"]


def check_overflow(*, value_bits: int, n_clients: int, bits: int, headroom: int = 1) -> None:
    """Refuse a modulus that ``n_clients`` signed values of ``value_bits`` bits could overflow.

    Parameters
    ----------
    value_bits : int
        Bits of one signed value (including the sign bit), >= 1.
    n_clients : int
        Number of summands, >= 1.
    bits : int
        Modulus width b.
    headroom : int, default 1
        Extra bits kept free, >= 0.

    Raises
    ------
    OverflowRiskError
        If ``bits < value_bits + ceil(log2 n_clients) + headroom``.
    """
    need = value_bits + math.ceil(math.log2(max(n_clients, 1))) + headroom
    if bits < need:
        raise OverflowRiskError(
            f"bits={bits} can overflow: {n_clients} clients with {value_bits}-bit values and "
            f"{headroom} bit(s) of headroom need bits >= {need}; use a wider modulus, fewer clients per "
            "cohort, or a coarser scale"
        )


@dataclass(frozen=True)
class Quantized:
    """Quantized client vectors.

    Attributes
    ----------
    values : numpy.ndarray
        Same shape as the input, int64, in ``[-max_int, max_int]``.
    clipped : int
        Number of coordinates that were clipped to ``[-clip, clip]``.
    """

    values: np.ndarray
    clipped: int


@dataclass(frozen=True)
class FixedPoint:
    """A fixed-point code: clip to ``[-clip, clip]``, multiply by ``scale``, round.

    Parameters
    ----------
    clip : float
        Clipping bound, > 0.
    scale : float
        Quantization scale (the quantum is ``1 / scale``), > 0.
    """

    clip: float
    scale: float

    def __post_init__(self) -> None:
        check_real("clip", self.clip, low=0.0, low_open=True, high=1e300)
        check_real("scale", self.scale, low=0.0, low_open=True, high=1e300)
        if self.max_int >= 2**62:
            raise ParameterError(
                "scale", self.scale, f"at most {2**62 / self.clip:g} for clip={self.clip:g}"
            )

    @property
    def max_int(self) -> int:
        """Largest quantized magnitude ``ceil(clip * scale)`` (stochastic rounding can reach it)."""
        return math.ceil(self.clip * self.scale)

    @property
    def value_bits(self) -> int:
        """Width of one signed quantized value, sign bit included."""
        return self.max_int.bit_length() + 1

    @classmethod
    def for_clients(
        cls, *, clip: float, n_clients: int, bits: int, headroom: int = 1
    ) -> FixedPoint:
        """The finest power-of-two scale whose sum over ``n_clients`` cannot overflow ``bits``.

        Raises
        ------
        ParameterError
            If ``bits`` is not 16, 32 or 64 or the other arguments are out of range.
        OverflowRiskError
            If not even integer values fit.
        """
        if bits not in DTYPES:
            raise ParameterError("bits", bits, "one of 16, 32, 64")
        n_clients = check_int("clients", n_clients, low=1)
        headroom = check_int("headroom", headroom, low=0)
        clip = check_real("clip", clip, low=0.0, low_open=True, high=1e300)
        budget = bits - math.ceil(math.log2(n_clients)) - headroom - 1  # magnitude bits per value
        if budget < 1:
            check_overflow(value_bits=2, n_clients=n_clients, bits=bits, headroom=headroom)
        # need ceil(clip * 2^f) < 2^budget
        f = math.floor(budget - math.log2(clip)) - 1
        while f > -1000 and math.ceil(clip * 2.0**f) >= 2**budget:
            f -= 1
        out = cls(clip=clip, scale=2.0**f)
        check_overflow(value_bits=out.value_bits, n_clients=n_clients, bits=bits, headroom=headroom)
        return out

    def quantize(self, values: np.ndarray, rng: RNG | None = None) -> Quantized:
        """Clip, scale and round.

        Parameters
        ----------
        values : array_like
            Finite reals, any shape.
        rng : numpy.random.Generator or SecureGenerator, optional
            If given, stochastic rounding (unbiased: ``E[q] = scale * clipped value``); else round half to
            even.

        Returns
        -------
        Quantized

        Raises
        ------
        DataError
            If ``values`` has NaN or inf.
        """
        arr = check_finite_array("values", values)
        clipped = int(np.count_nonzero(np.abs(arr) > self.clip))
        scaled = np.clip(arr, -self.clip, self.clip) * self.scale
        if rng is None:
            q = np.rint(scaled)
        else:
            low = np.floor(scaled)
            q = low + (np.asarray(rng.random(scaled.shape)) < (scaled - low))
        return Quantized(values=q.astype(np.int64), clipped=clipped)

    def encode(
        self, values: np.ndarray, bits: int, rng: RNG | None = None
    ) -> tuple[np.ndarray, int]:
        """Quantize and reduce mod 2^bits: returns (``uint{bits}`` array, number clipped)."""
        if bits not in DTYPES:
            raise ParameterError("bits", bits, "one of 16, 32, 64")
        q = self.quantize(values, rng)
        return q.values.astype(DTYPES[bits]), q.clipped

    def dequantize(self, total: np.ndarray, bits: int) -> np.ndarray:
        """Read a sum mod 2^bits as signed (two's complement) and divide by ``scale``.

        Returns
        -------
        numpy.ndarray
            float64, same shape as ``total``.
        """
        if bits not in DTYPES:
            raise ParameterError("bits", bits, "one of 16, 32, 64")
        signed = np.asarray(total).astype(DTYPES[bits]).view(f"int{bits}")
        return signed.astype(np.float64) / self.scale
