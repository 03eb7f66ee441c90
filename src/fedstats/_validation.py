"""Small validators that raise :class:`~fedstats.errors.ParameterError` naming the user's parameter."""

from __future__ import annotations

import math
import re
import unicodedata
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
    if not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)):
        v = float(value)
        if low <= v <= high and not (low_open and v == low) and not (high_open and v == high):
            return v  # (NaN fails the comparison)
    lo_br = "(" if low_open else "["
    hi_br = ")" if high_open else "]"
    raise ParameterError(name, value, f"a real number in {lo_br}{low:g}, {high:g}{hi_br}")


def check_open_unit(name: str, value: Any) -> float:
    """Return ``value`` as a float after checking it lies in the open interval (0, 1).

    A share, a probability strictly between the ends, or a delta.

    Raises
    ------
    ParameterError
        If ``value`` is not a real number in (0, 1).
    """
    return check_real(name, value, low=0.0, high=1.0, low_open=True, high_open=True)


def check_epsilon_delta(epsilon: Any, delta: Any) -> tuple[float, float]:
    """Return ``(epsilon, delta)`` as floats after checking epsilon in (0, inf) and delta in (0, 1).

    Raises
    ------
    ParameterError
        Naming ``epsilon`` or ``delta``, whichever is out of range (epsilon first).
    """
    eps = check_real("epsilon", epsilon, low=0.0, high=math.inf, low_open=True, high_open=True)
    return eps, check_open_unit("delta", delta)


MIN_LOCAL_EPSILON = 1e-12
"""Smallest epsilon of a pure-epsilon mechanism (randomized response, Laplace, the local-DP mean and gap
mechanisms). Below it the mechanism cannot be calibrated in double precision: its output probabilities
differ from a fair coin's by less than 1 part in 10^12 (at 1e-16 they round to exactly 1/2, so the loss
computed from the output distribution is 0), and its variance, about 1/epsilon^2, overflows near 1e-154."""


MIN_GRID_EPSILON = 1e-5
"""Smallest epsilon of the mechanisms that release their noisy values on a fixed-point grid (the Laplace and
Piecewise mean baselines, the performance-gap mechanisms): below it their noise, on the default grid of
2^-20, no longer fits the 64-bit integers the exact sums use."""

GRID_WHY = "the mechanism's noise on its release grid no longer fits 64-bit integers"
"""Why epsilon below :data:`MIN_GRID_EPSILON` is refused (said in the error)."""


def check_local_epsilon(
    name: str,
    value: Any,
    *,
    high: float = math.inf,
    low: float = MIN_LOCAL_EPSILON,
    why: str = "the mechanism cannot be calibrated in double precision: its noise is "
    "indistinguishable from a fair coin's and its variance overflows",
) -> float:
    """Return ``value`` as a float after checking it is an epsilon a pure-epsilon mechanism can take.

    Parameters
    ----------
    name : str
        The parameter's name (``"epsilon"``), named in the error.
    value : object
        The epsilon.
    high : float
        Largest accepted value (inclusive when finite).
    low : float
        Smallest accepted value (default :data:`MIN_LOCAL_EPSILON`).
    why : str
        Why values below ``low`` cannot be used (said in the error).

    Returns
    -------
    float

    Raises
    ------
    ParameterError
        If ``value`` is not a real number in ``[low, high]``.
    """
    v = check_real(name, value, low=0.0, high=high, low_open=True, high_open=math.isinf(high))
    if v < low:
        top = "inf)" if math.isinf(high) else f"{high:g}]"
        raise ParameterError(name, value, f"a real number in [{low:g}, {top} (below {low:g} {why})")
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


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool (``True``/``False``, not 0/1).

    Parameters
    ----------
    name : str
        The parameter's name, as the caller passed it (named in the error).
    value : object
        The value given.

    Returns
    -------
    bool
        ``value``.

    Raises
    ------
    ParameterError
        If ``value`` is not a bool.
    """
    if not isinstance(value, bool):
        raise ParameterError(name, value, "true or false")
    return value


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


_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode categories of control characters, refused in every identifier and free-text field (task
labels, names, path and query parameters): Cc (C0 U+0000-U+001F, DEL U+007F, C1 U+0080-U+009F), Cf
(format: bidi controls such as U+202E, zero-width characters such as U+200B, U+FEFF), Cs (lone
surrogates, which no UTF-8 store holds), and the line and paragraph separators Zl (U+2028) and Zp
(U+2029), which break a log line as a newline does."""

CONTROL_RULE = (
    "no control characters (Unicode categories Cc, Cf, Cs, Zl and Zp: C0, DEL, C1, bidi and "
    "zero-width controls, surrogates, line separators)"
)
""":data:`CONTROL_CATEGORIES` in words: the accepted range named by every refusal of such a character."""


def control_character(value: str) -> str | None:
    """The first control character (:data:`CONTROL_CATEGORIES`) of ``value``, or None.

    Parameters
    ----------
    value : str
        Any text.

    Returns
    -------
    str or None
        The first character of a category in :data:`CONTROL_CATEGORIES`, or None if ``value`` holds
        none. One regular-expression scan when ``value`` is ASCII (where only C0 and DEL can occur).
    """
    if value.isascii():
        m = _ASCII_CONTROL.search(value)
        return None if m is None else m.group()
    return next((c for c in value if unicodedata.category(c) in CONTROL_CATEGORIES), None)


IDENTIFIER_RULE = (
    "1 to 128 characters, no control characters (Unicode category C: C0, DEL, C1, bidi and "
    "zero-width controls), no '/' or '\\', no '..', no leading or trailing whitespace"
)
"""The charset of identifiers (client ids, populations, analyst and operator names, budget names, task
and run ids): docs/deploy.md, "Identifiers". The one rule of the enrollment tools, ``server
add-operator`` and the server (path parameters and names in request bodies)."""


def is_identifier(value: Any) -> bool:
    """Whether ``value`` is an identifier (:data:`IDENTIFIER_RULE`).

    Parameters
    ----------
    value : object
        Anything; only a str can be an identifier.

    Returns
    -------
    bool
    """
    return (
        isinstance(value, str)
        and 1 <= len(value) <= 128
        and value == value.strip()
        and "/" not in value
        and "\\" not in value
        and ".." not in value
        and (
            _ASCII_CONTROL.search(value) is None
            if value.isascii()
            else not any(
                unicodedata.category(c)[0] == "C" or unicodedata.category(c) in CONTROL_CATEGORIES
                for c in value
            )
        )
    )


def check_identifier(name: str, value: Any) -> str:
    """Return ``value`` if it is a valid identifier (:data:`IDENTIFIER_RULE`).

    Client ids, populations, analyst and operator names become file names, URL path segments and log
    fields: a path separator, ``..`` or a control character in one could address another file or forge a
    log line, so they are refused where identifiers are made.

    Parameters
    ----------
    name : str
        The user's parameter (``--client-id``), named in the error.
    value : str
        The identifier.

    Raises
    ------
    ParameterError
        If ``value`` is not a string, is empty or longer than 128 characters, or holds a control character
        (Unicode category C*), ``/``, a backslash, ``..``, or leading or trailing whitespace.
    """
    if not is_identifier(value):
        raise ParameterError(name, value, IDENTIFIER_RULE)
    return str(value)
