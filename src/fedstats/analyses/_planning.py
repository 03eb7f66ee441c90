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

__all__ = ["Plan", "check_one_unknown", "smallest_int", "smallest_real", "solve_width"]


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


def solve_width(
    analysis: str,
    width_at: Callable[[int, float], float],
    width: float,
    goal: str,
    inputs: dict[str, Any],
    n_clients: int | None,
    epsilon: float | None,
    limits: tuple[int, float],
    notes: tuple[str, Callable[[], str]],
) -> Plan:
    """The smallest clients (or epsilon) whose predicted interval is at most ``width`` wide.

    Solves for whichever of ``n_clients`` / ``epsilon`` is None, the other fixed (and recorded in
    ``inputs``): clients by :func:`smallest_int` in ``[2, limits[0]]``, epsilon by :func:`smallest_real`
    in ``[1e-3, limits[1]]`` to a relative 1e-4.

    Parameters
    ----------
    analysis : str
        :attr:`Plan.analysis`.
    width_at : callable
        ``width_at(n, epsilon)``: the predicted width at ``n`` clients and budget ``epsilon``, falling in
        both (``inf`` where the run cannot be made).
    width : float
        The target width, > 0.
    goal : str
        :attr:`Plan.target`.
    inputs : dict
        The plan's fixed inputs; the given one of ``n_clients`` / ``epsilon`` is added.
    n_clients, epsilon : int or float or None
        Exactly one None (:func:`check_one_unknown`).
    limits : (int, float)
        The largest clients and epsilon searched.
    notes : (str, callable)
        The note when no number of clients reaches the width, and a function giving the note when no
        epsilon does (called only then).

    Returns
    -------
    Plan
        ``value`` None, with the note, when the width is out of reach.
    """
    if n_clients is None:
        assert epsilon is not None
        inputs["epsilon"] = epsilon
        found = smallest_int(lambda n: width_at(n, epsilon) <= width, 2, limits[0])
        if found is None:
            return Plan(analysis, "n_clients", None, goal, None, inputs, notes[0])
        return Plan(analysis, "n_clients", found, goal, width_at(found, epsilon), inputs)
    inputs["n_clients"] = n_clients
    eps = smallest_real(lambda e: width_at(n_clients, e) <= width, 1e-3, limits[1], rtol=1e-4)
    if eps is None:
        return Plan(analysis, "epsilon", None, goal, None, inputs, notes[1]())
    return Plan(analysis, "epsilon", eps, goal, width_at(n_clients, eps), inputs)
