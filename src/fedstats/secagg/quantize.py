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

This module is fedstats' one fixed-point/modular codec: every encoding of reals into integers for an exact
sum clips here (counted), rounds with :func:`fedstats._numeric.round_to_integers`, reduces modulo ``2**b``
with :func:`wrap_reports` and reads a sum back with :func:`reduce_signed`. It sits in ``secagg`` because
that is the lowest layer whose arithmetic is modulo ``2**b`` (the engine's
:class:`fedstats.engine.fixedpoint.FixedPoint` and the analyses build on it; ``privacy`` and ``sketches``
never reduce modulo ``2**b``).

Sketches summed modulo ``2**bits`` (Pang et al. 2023 sum each client's 64-bit fixed-point encoding with
secure aggregation modulo ``2**64``; Appendix O also tries ``2**16`` and ``2**32``) are the true sum only
when the *aggregate* fits in ``bits`` signed bits; partial sums may wrap freely. :func:`choose_frac_bits`
therefore chooses the number of fractional bits from a bound on the aggregate that the server can compute
from public values (marginals, the public projection), never from the private data:

* ``bits < 64``: every client reports its fixed-point value reduced to ``[-2**(bits-1), 2**(bits-1))``; the
  server reduces the sum the same way. ``frac_bits = floor(log2((2**(bits-1) - 1) / aggregate_bound))``.
* ``bits = 64``: reports are left unreduced (an exact integer sum is the sum modulo ``2**64`` when it fits);
  ``frac_bits`` is limited so that one client's report stays below ``2**40`` (any engine block size up to
  ``2**22`` then sums exactly in int64) and the aggregate below ``2**62``; at most 52 (float64 precision).

With randomized rounding, quantisation adds zero-mean noise of variance at most ``n / 4 * 4**(-frac_bits)``
per coordinate over ``n`` clients.

Examples
--------
>>> fp = FixedPoint.for_clients(clip=1.0, n_clients=1000, bits=32)
>>> q = fp.quantize(np.array([0.25, -2.0]))
>>> q.clipped, fp.dequantize(q.values.astype(np.uint32), 32).tolist()
(1, [0.25, -1.0])
>>> wrap_reports(np.array([2**15, -(2**15) - 1]), 16).tolist()
[-32768, 32767]
>>> reduce_signed(np.array([2**16 + 3, 2**16 - 1]), 16).tolist()
[3.0, -1.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedstats._numeric import round_to_integers
from fedstats._validation import check_choice, check_finite_array, check_int, check_real
from fedstats.errors import DataError, OverflowRiskError, ParameterError
from fedstats.randomness import RNG
from fedstats.secagg.crypto import DTYPES, check_bits

__all__ = [
    "BITS",
    "FixedPoint",
    "Quantized",
    "check_overflow",
    "choose_frac_bits",
    "reduce_signed",
    "to_modular",
    "wrap_reports",
]

BITS: tuple[int, ...] = tuple(DTYPES)
_CLIENT_LIMIT_64 = 2.0**40
_SUM_LIMIT_64 = 2.0**62


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
        check_bits(bits)
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
        q = round_to_integers(scaled, rng)
        return Quantized(values=q.astype(np.int64), clipped=clipped)

    def encode(
        self, values: np.ndarray, bits: int, rng: RNG | None = None
    ) -> tuple[np.ndarray, int]:
        """Quantize and reduce mod 2^bits: returns (``uint{bits}`` array, number clipped)."""
        check_bits(bits)
        q = self.quantize(values, rng)
        return to_modular(q.values, bits).reshape(q.values.shape), q.clipped

    def dequantize(self, total: np.ndarray, bits: int) -> np.ndarray:
        """Read a sum mod 2^bits as signed (two's complement) and divide by ``scale``.

        Returns
        -------
        numpy.ndarray
            float64, same shape as ``total``.
        """
        check_bits(bits)
        out: np.ndarray = reduce_signed(total, bits).reshape(np.shape(total)) / self.scale
        return out


def choose_frac_bits(bits: int, client_bound: float, aggregate_bound: float) -> int:
    """Fractional bits for reports bounded by ``client_bound`` whose sum is bounded by ``aggregate_bound``.

    Parameters
    ----------
    bits : {16, 32, 64}
        Width of the modular sum.
    client_bound : float
        Upper bound on ``|entry|`` of any one client's real-valued report (> 0).
    aggregate_bound : float
        Upper bound on ``|entry|`` of the sum of all reports (> 0).

    Returns
    -------
    int
        In ``[0, 52]``.

    Raises
    ------
    OverflowRiskError
        If even integer resolution (``frac_bits = 0``) cannot hold the bound in ``bits`` bits.
    """
    check_choice("bits", str(bits), tuple(str(b) for b in BITS))
    cb = max(float(client_bound), 1e-300)
    ab = max(float(aggregate_bound), 1e-300)
    if bits < 64:
        f = math.floor(math.log2((2.0 ** (bits - 1) - 1) / ab))
    else:
        f = min(
            math.floor(math.log2(_CLIENT_LIMIT_64 / cb)), math.floor(math.log2(_SUM_LIMIT_64 / ab))
        )
    if f < 0:
        raise OverflowRiskError(
            f"bits={bits} cannot hold the aggregated encoding (bound {ab:.4g}) even at integer "
            f"resolution; use a wider field (bits=32 or 64)"
        )
    return min(f, 52)


def wrap_reports(q: np.ndarray, bits: int) -> np.ndarray:
    """Reduce integers into ``[-2**(bits-1), 2**(bits-1))`` modulo ``2**bits`` (signed representatives).

    Parameters
    ----------
    q : numpy.ndarray
        int64, integer-valued float64 (exact below ``2**53``) or object (Python ints), any shape.
    bits : {16, 32, 64}
        Width of the modular sum.

    Returns
    -------
    numpy.ndarray
        Same shape and dtype as ``q``. An int64 or float64 ``q`` is returned as is for ``bits = 64`` (an
        int64 is its own representative).
    """
    if bits >= 64 and q.dtype != object:
        return q
    half: int | np.int64 = 1 << (bits - 1)
    mod: int | np.int64 = 1 << bits
    if q.dtype != object:  # numpy scalars: int64 stays int64, float64 stays float64
        half, mod = np.int64(half), np.int64(mod)
    out: np.ndarray = ((q + half) % mod) - half
    return out


def to_modular(values: np.ndarray, bits: int) -> np.ndarray:
    """Integers reduced mod 2^bits (two's complement for negatives) as ``uint{bits}``.

    Raises
    ------
    DataError
        If ``values`` is not an integer array.
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise DataError(f"secure aggregation inputs must be integers, got dtype {arr.dtype}")
    return arr.astype(DTYPES[bits], copy=True).ravel()


def reduce_signed(total: np.ndarray, bits: int) -> np.ndarray:
    """The sum modulo ``2**bits`` as signed integers (object or int64 in, float64 out, exact below 2**53).

    Parameters
    ----------
    total : numpy.ndarray
        The exact integer sum of the reports (int64, uint or object of Python ints), any shape.
    bits : {16, 32, 64}
        Width of the modular sum.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(total.size,)`` (flattened).
    """
    exact = np.array([int(t) for t in np.asarray(total).ravel()], dtype=object)
    out: np.ndarray = wrap_reports(exact, bits).astype(np.float64)
    return out
