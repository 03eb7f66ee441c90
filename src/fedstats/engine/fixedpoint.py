"""Fixed-point encoding of real reports into integers, with counted clipping.

Reports must be integers for the sum to be exact (and for secure aggregation mod 2^b). A real value ``x``
in ``[-clip, clip]`` becomes ``round(x * 2**frac_bits)``; values outside are clipped and *counted*, never
silently. Randomized rounding (``rng`` given) makes the encoding unbiased: ``E[q] = x * 2**frac_bits``.
With ``bits``, reports are reduced modulo ``2**bits`` (the secure-aggregation field) and a sum is read back
modulo ``2**bits``. The clipping, rounding and modular reduction are those of
:mod:`fedstats.secagg.quantize` (the one codec, in the lower layer); this class fixes the scale to a power of
two and speaks in the engine's terms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedstats._validation import check_int, check_real
from fedstats.errors import ParameterError
from fedstats.randomness import RNG
from fedstats.secagg.quantize import FixedPoint as _Quantizer
from fedstats.secagg.quantize import reduce_signed, wrap_reports

__all__ = ["FixedPoint"]


@dataclass(frozen=True)
class FixedPoint:
    """A fixed-point format: ``frac_bits`` fractional bits, values clipped to ``[-clip, clip]``.

    Parameters
    ----------
    frac_bits : int
        Fractional bits, in [0, 52].
    clip : float
        Largest magnitude represented, > 0.

    Raises
    ------
    ParameterError
        If a parameter is outside its range, or encoded values could reach 2**62.
    """

    frac_bits: int
    clip: float

    def __post_init__(self) -> None:
        check_int("frac_bits", self.frac_bits, low=0, high=52)
        check_real("clip", self.clip, low=0.0, high=2.0**60, low_open=True)
        if self.bound >= 2**62:
            raise ParameterError(
                "frac_bits",
                self.frac_bits,
                f"a value with clip * 2**frac_bits < 2**62 (clip={self.clip:g})",
            )

    @property
    def scale(self) -> float:
        """``2**frac_bits``."""
        return float(2**self.frac_bits)

    @property
    def bound(self) -> int:
        """Largest magnitude of an encoded integer (use as a round's ``bound``)."""
        return int(np.ceil(self.clip * self.scale))

    def report_bound(self, bits: int) -> int:
        """Largest magnitude of a report reduced modulo ``2**bits`` (a round's ``bound``), at least 1.

        Parameters
        ----------
        bits : {16, 32, 64}
            Width of the modular sum.

        Returns
        -------
        int
            ``2**(bits-1)`` below 64 bits (a wrapped report may take any value); else ``max(bound, 1)``.
        """
        return (1 << (bits - 1)) if bits < 64 else max(self.bound, 1)

    def encode(
        self, values: np.ndarray, rng: RNG | None = None, *, bits: int | None = None
    ) -> tuple[np.ndarray, int]:
        """Encode reals as int64.

        Parameters
        ----------
        values : numpy.ndarray of float
            Any shape; must be finite.
        rng : RNG, optional
            When given, randomized (unbiased) rounding; otherwise round-half-to-even.
        bits : {16, 32, 64}, optional
            When given, reduce each encoded integer to its signed representative modulo ``2**bits``.

        Returns
        -------
        encoded : numpy.ndarray of int64
            Same shape as ``values``.
        clipped : int
            How many values lay outside ``[-clip, clip]`` and were clipped.

        Raises
        ------
        DataError
            If ``values`` has a NaN or infinite entry.
        """
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            return np.zeros(v.shape, dtype=np.int64), 0
        q = _Quantizer(clip=self.clip, scale=self.scale).quantize(v, rng)
        if bits is not None:
            return wrap_reports(q.values, bits), q.clipped
        return q.values, q.clipped

    def decode(self, total: np.ndarray | int, *, bits: int | None = None) -> np.ndarray:
        """Turn a sum of encoded integers back into reals.

        Parameters
        ----------
        total : numpy.ndarray or int
            The sum of encoded reports (int64, object of Python ints, or float64 integers), any shape.
        bits : {16, 32, 64}, optional
            When given, the sum is first read modulo ``2**bits`` as a signed integer (and flattened).

        Returns
        -------
        numpy.ndarray
            float64: ``total / 2**frac_bits``.
        """
        if bits is not None:
            total = reduce_signed(np.asarray(total), bits)
        return np.asarray(total, dtype=np.float64) / self.scale
