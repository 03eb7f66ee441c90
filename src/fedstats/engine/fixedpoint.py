"""Fixed-point encoding of real reports into integers, with counted clipping.

Reports must be integers for the sum to be exact (and for secure aggregation mod 2^b). A real value ``x``
in ``[-clip, clip]`` becomes ``round(x * 2**frac_bits)``; values outside are clipped and *counted*, never
silently. Randomized rounding (``rng`` given) makes the encoding unbiased: ``E[q] = x * 2**frac_bits``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedstats._validation import check_int, check_real
from fedstats.randomness import RNG

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
        If a parameter is outside its range.
    """

    frac_bits: int
    clip: float

    def __post_init__(self) -> None:
        check_int("frac_bits", self.frac_bits, low=0, high=52)
        check_real("clip", self.clip, low=0.0, high=2.0**60, low_open=True)

    @property
    def scale(self) -> float:
        """``2**frac_bits``."""
        return float(2**self.frac_bits)

    @property
    def bound(self) -> int:
        """Largest magnitude of an encoded integer (use as a round's ``bound``)."""
        return int(np.ceil(self.clip * self.scale))

    def encode(self, values: np.ndarray, rng: RNG | None = None) -> tuple[np.ndarray, int]:
        """Encode reals as int64.

        Parameters
        ----------
        values : numpy.ndarray of float
            Any shape; must be finite.
        rng : RNG, optional
            When given, randomized (unbiased) rounding; otherwise round-half-to-even.

        Returns
        -------
        encoded : numpy.ndarray of int64
            Same shape as ``values``.
        clipped : int
            How many values lay outside ``[-clip, clip]`` and were clipped.
        """
        v = np.asarray(values, dtype=np.float64)
        clipped = int(np.count_nonzero(np.abs(v) > self.clip))
        x = np.clip(v, -self.clip, self.clip) * self.scale
        if rng is None:
            q = np.rint(x)
        else:
            fl = np.floor(x)
            q = fl + (rng.random(x.shape) < (x - fl))
        return q.astype(np.int64), clipped

    def decode(self, total: np.ndarray | int) -> np.ndarray:
        """Turn a sum of encoded integers back into a real (float64)."""
        return np.asarray(total, dtype=np.float64) / self.scale
