"""What every planner shares: its answer (:class:`Plan`) and the two searches behind it.

Each analysis's ``planning`` module predicts a run's interval width (or a test's power) from the same
variance or power formulas its estimator reports, as a function of the clients ``n`` or the budget
``epsilon`` (or the encoding size ``l``), and inverts it here: the smallest integer (:func:`smallest_int`)
or the smallest positive real (:func:`smallest_real`) at which the prediction reaches the target. Both
searches assume the prediction improves monotonically in the searched quantity (more clients, more budget,
a longer encoding never widen an interval), which each planner's docstring states for its formula.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fedstats.errors import ParameterError
from fedstats.results import to_jsonable

__all__ = ["Plan", "check_one_unknown", "smallest_int", "smallest_real"]


@dataclass(frozen=True)
class Plan:
    """A planner's answer: the value of the one unknown that reaches the target, and what it achieves.

    Attributes
    ----------
    analysis : str
        ``"mean"``, ``"variance"``, ``"gap"``, ``"chi2"``, ``"entropy"`` or ``"heterogeneity"``.
    solved_for : str
        The unknown: ``"n_clients"``, ``"epsilon"`` or ``"encoding_size"``.
    value : float or None
        Its smallest value reaching the target (an int for clients and encoding size); None when no value
        in the searched range reaches it (see :attr:`note`).
    target : str
        What was asked, in words (``"95% interval width <= 5"``, ``"power >= 0.8 at w = 0.3"``).
    achieved : float or None
        The predicted width (or power) at :attr:`value` (None when unreachable).
    inputs : dict
        Every fixed input of the prediction (range, the other parameter, assumptions).
    note : str or None
        Why no value was found, or the assumption that matters most.
    """

    analysis: str
    solved_for: str
    value: float | None
    target: str
    achieved: float | None
    inputs: dict[str, Any] = field(default_factory=dict)
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return {
            "analysis": self.analysis,
            "solved_for": self.solved_for,
            self.solved_for: to_jsonable(self.value),
            "value": to_jsonable(self.value),
            "target": self.target,
            "achieved": to_jsonable(self.achieved),
            "inputs": to_jsonable(self.inputs),
            "note": self.note,
        }


def check_one_unknown(**given: Any) -> str:
    """The name of the one parameter left None (the planner solves for it).

    Raises
    ------
    ParameterError
        Naming the parameters, when none or more than one is None.
    """
    missing = [k for k, v in given.items() if v is None]
    if len(missing) != 1:
        names = "/".join(given)
        raise ParameterError(
            names,
            tuple(given.values()),
            f"exactly one of {', '.join(given)} left unset (the planner solves for it)",
        )
    return missing[0]


def smallest_int(ok: Callable[[int], bool], low: int, high: int) -> int | None:
    """The smallest integer ``k`` in ``[low, high]`` with ``ok(k)``, for a monotone ``ok`` (None if none).

    Doubling from ``low``, then bisection: ``O(log high)`` calls.
    """
    if ok(low):
        return low
    lo, hi = low, low
    while True:
        if hi >= high:
            if not ok(high):
                return None
            hi = high
            break
        lo, hi = hi, min(high, 2 * hi)
        if ok(hi):
            break
    while hi - lo > 1:  # ok(hi), not ok(lo)
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def smallest_real(
    ok: Callable[[float], bool], low: float, high: float, *, rtol: float = 1e-4
) -> float | None:
    """The smallest ``x`` in ``[low, high]`` (> 0) with ``ok(x)``, for a monotone ``ok``, to ``rtol``.

    Bisection on ``log x``; the value returned satisfies ``ok``. None when ``ok(high)`` fails.
    """
    if ok(low):
        return low
    if not ok(high):
        return None
    lo, hi = math.log(low), math.log(high)
    while hi - lo > rtol:
        mid = (lo + hi) / 2.0
        if ok(math.exp(mid)):
            hi = mid
        else:
            lo = mid
    return math.exp(hi)
