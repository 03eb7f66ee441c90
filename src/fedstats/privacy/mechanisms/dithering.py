r"""Subtractive dithering: unbiased b-bit quantization with a shared random offset.

Ben-Basat, Mitzenmacher, Vargaftik (2021, "How to Send a Real Number Using a Single Bit (And Some Shared
Randomness)", ICALP), subtractive dithering: with :math:`L = 2^b - 1` levels, a value x in [low, high] is
scaled to :math:`y = L (x - \text{low})/(\text{high} - \text{low}) \in [0, L]`; client and server share
:math:`h \sim U[-1/2, 1/2)` (public randomness); the client sends :math:`q = \lfloor y + h + 1/2\rfloor` (for
b = 1: the bit :math:`1[y + h \ge 1/2]`) and the server estimates :math:`y` by :math:`q - h`. The error
:math:`q - h - y` is uniform on :math:`[-1/2, 1/2)` whatever y, so the estimate is unbiased with variance
:math:`(\text{high} - \text{low})^2 / (12 L^2)` (1/12 for one bit on [0, 1]).

This is a compression scheme, **not** a privacy mechanism: given the public h the message is a deterministic
function of x, so its privacy loss is infinite. Combine it with a DP mechanism when privacy is needed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fedstats._validation import check_finite_array, check_int, check_real
from fedstats.errors import DataError, ParameterError
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.privacy.mechanisms.base import Mechanism
from fedstats.randomness import RNG

__all__ = ["SubtractiveDithering"]


class SubtractiveDithering(Mechanism):
    """Subtractive dithered quantization to ``bit_depth`` bits (Ben-Basat, Mitzenmacher, Vargaftik 2021).

    Parameters
    ----------
    bit_depth : int, default 1
        Bits per message b, in [1, 32]; messages are integers in [0, 2^b - 1].
    low, high : float, default 0.0 and 1.0
        Range of the values, low < high.

    Raises
    ------
    ParameterError
        If a parameter is invalid.
    """

    _PARAMETERS = ("bit_depth", "low", "high")

    def __init__(self, *, bit_depth: int = 1, low: float = 0.0, high: float = 1.0) -> None:
        self.bit_depth = check_int("bit_depth", bit_depth, low=1, high=32)
        self.low = check_real("low", low)
        self.high = check_real("high", high)
        if not self.high > self.low:
            raise ParameterError("high", high, f"a value above low={low!r}")
        self.levels = 2**self.bit_depth - 1

    @property
    def release_grid(self) -> str:
        """Where the outputs lie: a finite set, a ``2**-k`` grid, or floats (simulation only)."""
        return (
            f"integers {{0, ..., {self.levels}}} ({self.bit_depth} bit(s)); not private on its own"
        )

    def sample_dither(self, size: int | tuple[int, ...], rng: RNG) -> np.ndarray:
        """Shared offsets h ~ U[-1/2, 1/2), from *public* randomness (both sides must know them)."""
        return np.asarray(rng.random(size=size)) - 0.5

    def _scaled(self, values: ArrayLike) -> np.ndarray:
        x = check_finite_array("values", values)
        if (x < self.low).any() or (x > self.high).any():
            raise DataError(f"values must lie in [{self.low:g}, {self.high:g}] (clip them first)")
        return np.asarray((x - self.low) * (self.levels / (self.high - self.low)))

    def encode(self, values: ArrayLike, dither: ArrayLike) -> np.ndarray:
        """Client side: messages ``floor(y + h + 1/2)`` clipped to [0, L], dtype int64, shape of ``values``."""
        y = self._scaled(values)
        h = np.broadcast_to(np.asarray(dither, dtype=np.float64), y.shape)
        return np.clip(np.floor(y + h + 0.5), 0, self.levels).astype(np.int64)

    def decode(self, messages: ArrayLike, dither: ArrayLike) -> np.ndarray:
        """Server side: unbiased estimates ``low + (q - h) (high - low) / L`` of the values."""
        q = np.asarray(messages, dtype=np.float64)
        h = np.asarray(dither, dtype=np.float64)
        return np.asarray(self.low + (q - h) * ((self.high - self.low) / self.levels))

    def randomize(self, values: ArrayLike, rng: RNG) -> np.ndarray:
        """Encode and decode in one step (simulation): returns the server's unbiased estimates."""
        x = np.asarray(values, dtype=np.float64)
        h = self.sample_dither(x.shape, rng)
        return self.decode(self.encode(x, h), h)

    def variance(self, value: ArrayLike | None = None) -> Any:
        """``(high - low)^2 / (12 L^2)`` for every value."""
        v = (self.high - self.low) ** 2 / (12.0 * self.levels**2)
        return v if value is None else np.full(np.shape(value), v)

    def bias(self, value: ArrayLike | None = None) -> Any:
        """0: the estimate is unbiased."""
        return 0.0 if value is None else np.zeros(np.shape(value))

    def privacy_loss(self) -> PrivacyLoss:
        """Infinite: a deterministic function of the value given the public dither."""
        return PrivacyLoss(math.inf)
