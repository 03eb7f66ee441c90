"""Small validators that raise :class:`~fedstats.errors.ParameterError` naming the user's parameter."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedstats.errors import DataError, ParameterError


def check_real(
    name: str,
    value: Any,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a float after checking it is finite (unless a bound is inf) and in range.

    Raises
    ------
    ParameterError
        If ``value`` is not a real number or lies outside the interval.
    """
    lo_br = "(" if low_open else "["
    hi_br = ")" if high_open else "]"
    accepted = f"a real number in {lo_br}{low:g}, {high:g}{hi_br}"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ParameterError(name, value, accepted)
    v = float(value)
    if math.isnan(v):
        raise ParameterError(name, value, accepted)
    if (v < low) or (v > high) or (low_open and v == low) or (high_open and v == high):
        raise ParameterError(name, value, accepted)
    return v


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an int after checking it is an integer in ``[low, high]``.

    Raises
    ------
    ParameterError
        If ``value`` is not an integer or lies outside the range.
    """
    lo = "-inf" if low is None else str(low)
    hi = "inf" if high is None else str(high)
    accepted = f"an integer in [{lo}, {hi}]"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ParameterError(name, value, accepted)
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        raise ParameterError(name, value, accepted)
    return v


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``.

    Raises
    ------
    ParameterError
        If ``value`` is not one of ``choices``.
    """
    if value not in choices:
        raise ParameterError(name, value, "one of " + ", ".join(repr(c) for c in choices))
    return str(value)


def check_finite_array(name: str, values: Any, *, ndim: int | None = None) -> np.ndarray:
    """Return ``values`` as a float64 array after checking it is non-empty and finite.

    Raises
    ------
    DataError
        If the array is empty, has NaN or inf, or has the wrong number of dimensions.
    """
    arr = np.asarray(values, dtype=np.float64)
    if ndim is not None and arr.ndim != ndim:
        raise DataError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if arr.size == 0:
        raise DataError(f"{name} is empty: at least one value is needed")
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = int(np.flatnonzero(bad.ravel())[0])
        raise DataError(f"{name} has a NaN or infinite value (first at flat index {idx})")
    return arr
