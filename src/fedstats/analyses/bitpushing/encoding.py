"""Fixed-point encoding of real values into b-bit non-negative integers, with a declared, enforced range.

Bit pushing (Cormode & Markov 2021, Sec. 2) works on b-bit non-negative integers. A real value ``x`` with a
declared range ``[low, high]`` becomes the integer *code*

    ``k = (x - low) / resolution``, rounded (randomized rounding, so ``E[k]`` is exact),

an integer in ``[0, max_code]`` with ``max_code = ceil((high - low) / resolution) <= 2**bit_depth - 1``.
The offset ``low`` handles negative values (no sign bit is needed) and ``resolution`` is the fixed-point
step (``1`` for integer data such as ages; ``2**-k`` for ``k`` fractional bits). The mean of the codes maps
back to the mean of the values by ``low + resolution * mean(k)``.

Values outside ``[low, high]`` are never silently used: ``out_of_range="clip"`` clips them to the range
and the analysis counts them; ``out_of_range="refuse"`` raises :class:`~fedstats.errors.DataError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats._validation import check_choice, check_int, check_real
from fedstats.analyses.bitpushing.client import enforce_range, to_codes
from fedstats.errors import ParameterError
from fedstats.randomness import RNG

__all__ = ["OUT_OF_RANGE", "BitEncoding", "bits_needed"]

OUT_OF_RANGE = ("clip", "refuse")
MAX_BIT_DEPTH = 52


def bits_needed(max_code: int) -> int:
    """Smallest ``b >= 1`` with ``2**b - 1 >= max_code``."""
    return max(1, int(max_code).bit_length())


@dataclass(frozen=True)
class BitEncoding:
    """Declared value range and fixed-point format of a bit-pushing analysis.

    Parameters
    ----------
    low, high : float
        Declared range of the values, ``low < high``, finite.
    resolution : float, optional
        Fixed-point step (value units per code unit), > 0; default 1 (integers).
    bit_depth : int, optional
        Bits ``b`` of the code, in ``[1, 52]``; default: the fewest that hold
        ``max_code = ceil((high - low) / resolution)``. A larger ``b`` adds vacuous high-order bits (the
        "loose bound" setting of the paper's Figure 1b).
    out_of_range : {"clip", "refuse"}, optional
        What a client does with a value outside ``[low, high]``: clip it (the analysis counts how many), or
        refuse (a :class:`~fedstats.errors.DataError`). Default ``"clip"``.

    Raises
    ------
    ParameterError
        If a parameter is outside its range, or ``bit_depth`` is too small for the declared range.

    Examples
    --------
    >>> enc = BitEncoding(0, 90)
    >>> enc.bit_depth, enc.max_code
    (7, 90)
    """

    low: float
    high: float
    resolution: float = 1.0
    bit_depth: int | None = None
    out_of_range: str = "clip"

    def __post_init__(self) -> None:
        """Validate the range and resolution, and choose the bit depth."""
        low = check_real("low", self.low)
        high = check_real("high", self.high)
        if not high > low:
            raise ParameterError("high", self.high, f"a real number > low={low:g}")
        res = check_real("resolution", self.resolution, low=0.0, low_open=True, high=math.inf)
        check_choice("out_of_range", self.out_of_range, OUT_OF_RANGE)
        span = (high - low) / res
        if not span < 2.0**MAX_BIT_DEPTH:
            raise ParameterError(
                "resolution", self.resolution, f"a step giving at most 2**{MAX_BIT_DEPTH} codes"
            )
        max_code = math.ceil(span - 1e-9 * max(1.0, span))
        need = bits_needed(max_code)
        if self.bit_depth is None:
            object.__setattr__(self, "bit_depth", need)
        else:
            check_int("bit_depth", self.bit_depth, low=need, high=MAX_BIT_DEPTH)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "resolution", res)

    @property
    def b(self) -> int:
        """The bit depth as an int."""
        assert self.bit_depth is not None
        return int(self.bit_depth)

    @property
    def max_code(self) -> int:
        """Largest code a value in the declared range can take."""
        span = (self.high - self.low) / self.resolution
        return math.ceil(span - 1e-9 * max(1.0, span))

    def params(self) -> dict[str, Any]:
        """Plain, serializable form (public round parameters)."""
        return {
            "low": self.low,
            "high": self.high,
            "resolution": self.resolution,
            "bit_depth": self.b,
            "out_of_range": self.out_of_range,
        }

    def enforce(self, values: Any, *, name: str = "values") -> tuple[np.ndarray, int]:
        """Apply the range policy.

        :func:`~fedstats.analyses.bitpushing.client.enforce_range` with this encoding's ``low``, ``high``
        and ``out_of_range``: the clipped float64 values and how many were outside, or its ``DataError``.
        """
        return enforce_range(values, self.low, self.high, self.out_of_range, name=name)

    def encode(self, values: Any, rng: RNG | None = None) -> tuple[np.ndarray, int]:
        """Codes of ``values`` (after :meth:`enforce`).

        Parameters
        ----------
        values : array_like of float, shape (n,)
        rng : RNG, optional
            Needed when a value is not on the grid ``low + resolution * k``: randomized rounding, unbiased.

        Returns
        -------
        codes : numpy.ndarray of int64, shape (n,)
            In ``[0, max_code]``.
        n_clipped : int
        """
        v, n_clipped = self.enforce(values)
        return to_codes(v, self.low, self.resolution, self.max_code, rng), n_clipped

    def decode_mean(self, code_mean: float) -> float:
        """Mean of the values from the mean of the codes: ``low + resolution * code_mean``."""
        return self.low + self.resolution * float(code_mean)

    def decode_variance(self, code_variance: float) -> float:
        """Variance in value units from a variance in code units (times ``resolution**2``)."""
        return float(code_variance) * self.resolution**2
