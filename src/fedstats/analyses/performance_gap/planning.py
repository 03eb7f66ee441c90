r"""Planning: the smallest budget that bounds the gap's error by ``alpha`` with probability ``p``.

Given ``K`` clients (by default two balanced groups and the worst-case :math:`\nu^2`, as in the paper's
Table 1), find the smallest :math:`\varepsilon` whose allocation (exact or the paper's) gives
:math:`P(|\widehat{\Delta m} - \Delta m| \ge \alpha) \le 1 - p` under one of three bounds:

* ``"chebyshev"`` (the paper, Sec. 5): :math:`\mathrm{Var} \le (1 - p)\,\alpha^2`. Holds always.
* ``"bernstein"``: :math:`2\exp\!\big(-\alpha^2 / (2(V + M\alpha/3))\big) \le 1 - p`, with :math:`V` the
  variance and :math:`M` the largest centred contribution of one client,
  :math:`M = (1 + a(2b-1))/(a(2b-1)\,n_{\min})`. Holds always, for :math:`\mathcal M_R` only (its reports
  are bounded; :math:`\mathcal M_L`'s Laplace reports are not).
* ``"normal"``: :math:`\alpha \ge z_{(1+p)/2}\sqrt{\mathrm{Var}}`, the central-limit approximation (the
  estimator is a sum of ``K`` independent bounded-variance terms); validated by simulation in the tests
  and the reproduction, the sharpest and the one to use for large ``K``.

The variance decreases with :math:`\varepsilon` for either accounting, so the smallest budget is found by
a log-spaced scan refined by bisection. When even :math:`\varepsilon \to \infty` cannot reach ``alpha``
(:math:`\mathcal M_R`'s variance floors at :math:`\sum_g 1/n_g`), the plan's ``epsilon`` is ``None``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri  # what scipy.stats.norm's sf and ppf call

from fedstats._validation import check_choice, check_int, check_open_unit, check_real
from fedstats.analyses._planning import Plan, check_one_unknown, smallest_int
from fedstats.analyses.performance_gap.allocation import (
    ACCOUNTINGS,
    Allocation,
    GroupLayout,
    allocate,
)
from fedstats.analyses.performance_gap.mechanisms import GapMechanism, check_mechanism
from fedstats.errors import ParameterError

__all__ = ["BOUNDS", "GapPlan", "error_bound", "plan_epsilon", "plan_gap", "tail_probability"]

BOUNDS: tuple[str, ...] = ("chebyshev", "bernstein", "normal")
SCALES: tuple[str, ...] = ("signed", "rate")
_EPS_LO, _EPS_HI = 1e-4, 1e4


def _check_probability(p: Any) -> float:
    return check_open_unit("probability", p)


def _bernstein_m(mech: GapMechanism, layout: GroupLayout) -> float:
    c = mech.value_gain
    n_min = min(layout.sizes[i] for i in layout.pair)
    return (1.0 + c) / (c * n_min)


def tail_probability(
    alpha: float, variance: float, *, bound: str = "chebyshev", bernstein_m: float | None = None
) -> float:
    """Upper bound (or normal approximation) on ``P(|error| >= alpha)`` for an estimator of the given variance.

    Parameters
    ----------
    alpha : float
        Error, > 0 (same units as the square root of ``variance``).
    variance : float
        Variance of the estimator, >= 0.
    bound : {"chebyshev", "bernstein", "normal"}
    bernstein_m : float, optional
        Largest centred contribution of one client (needed for ``"bernstein"``).

    Returns
    -------
    float
        In [0, 1].
    """
    check_choice("bound", bound, BOUNDS)
    if variance <= 0:
        return 0.0
    if bound == "chebyshev":
        return min(1.0, variance / alpha**2)
    if bound == "normal":
        return float(min(1.0, 2.0 * ndtr(-alpha / math.sqrt(variance))))  # 2 P(Z > a/sd)
    if bernstein_m is None:
        raise ParameterError("bernstein_m", None, "a positive number for the Bernstein bound")
    return min(1.0, 2.0 * math.exp(-(alpha**2) / (2.0 * (variance + bernstein_m * alpha / 3.0))))


def error_bound(
    variance: float,
    probability: float,
    *,
    bound: str = "chebyshev",
    bernstein_m: float | None = None,
) -> float:
    """Smallest ``alpha`` with ``P(|error| >= alpha) <= 1 - probability`` under ``bound``.

    Chebyshev: ``sqrt(variance / (1 - p))``; normal: ``z_{(1+p)/2} sqrt(variance)``; Bernstein: the positive
    root of ``alpha^2 = 2 L (V + M alpha / 3)`` with ``L = log(2 / (1 - p))``.

    Raises
    ------
    ParameterError
        If ``probability`` is not in (0, 1) or ``bound`` is unknown.
    """
    p = _check_probability(probability)
    check_choice("bound", bound, BOUNDS)
    v = max(float(variance), 0.0)
    if bound == "chebyshev":
        return math.sqrt(v / (1.0 - p))
    if bound == "normal":
        return float(ndtri((1.0 + p) / 2.0)) * math.sqrt(v)
    if bernstein_m is None:
        raise ParameterError("bernstein_m", None, "a positive number for the Bernstein bound")
    L = math.log(2.0 / (1.0 - p))
    bm = 2.0 * L * bernstein_m / 3.0
    return (bm + math.sqrt(bm * bm + 8.0 * L * v)) / 2.0


@dataclass(frozen=True)
class GapPlan:
    """The smallest budget reaching an error target, and its allocation.

    Attributes
    ----------
    epsilon : float or None
        Smallest budget (None when no budget reaches ``alpha``).
    allocation : Allocation or None
        Its split, with ``true_loss`` (None when ``epsilon`` is None).
    alpha, probability : float
        The target: ``P(|error| < alpha) >= probability``.
    n_clients : float
    bound, accounting, mechanism, scale : str
    error_at_epsilon : float or None
        The bound's ``alpha`` at the returned budget (equal to the target up to the solver's tolerance).
    floor : float
        The error bound as epsilon -> infinity (the best any budget can do).
    """

    epsilon: float | None
    allocation: Allocation | None
    alpha: float
    probability: float
    n_clients: float
    bound: str
    accounting: str
    mechanism: str
    scale: str
    error_at_epsilon: float | None
    floor: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly: ``epsilon``, ``allocation`` (epsilon1, epsilon2, k, true_loss) and the target."""
        return {
            "epsilon": self.epsilon,
            "allocation": None if self.allocation is None else self.allocation.to_dict(),
            "true_loss": None if self.allocation is None else self.allocation.true_loss,
            "alpha": self.alpha,
            "probability": self.probability,
            "n_clients": self.n_clients,
            "mechanism": self.mechanism,
            "accounting": self.accounting,
            "bound": self.bound,
            "scale": self.scale,
            "error_at_epsilon": self.error_at_epsilon,
            "error_floor": self.floor,
        }


def plan_epsilon(
    n_clients: float,
    alpha: float,
    probability: float,
    mechanism: str,
    *,
    accounting: str = "exact",
    bound: str = "chebyshev",
    layout: GroupLayout | None = None,
    scale: str = "signed",
) -> GapPlan:
    r"""Smallest epsilon bounding the gap's error by ``alpha`` with probability ``probability``.

    Parameters
    ----------
    n_clients : int or float
        Clients ``K`` >= 2.
    alpha : float
        Error target, > 0, in value units (``scale="signed"``, the paper's Table 1) or rate units
        (``scale="rate"``: values were rates r with v = 2r - 1, so the rate gap's error is half).
    probability : float
        In (0, 1) (the paper uses 0.99).
    mechanism : {"R", "L"}
    accounting : {"exact", "paper"}
        ``"exact"``: allocation optimal under the true loss (``true_loss <= epsilon``); ``"paper"``: the
        paper's allocation (reproduces Table 1; its ``true_loss`` is reported and exceeds ``epsilon``).
    bound : {"chebyshev", "bernstein", "normal"}
    layout : GroupLayout, optional
        Group sizes (summing to ``n_clients``), pair and nu^2; default two balanced groups, worst case.
    scale : {"signed", "rate"}

    Returns
    -------
    GapPlan

    Raises
    ------
    ParameterError
        If an argument is outside its range (``n_clients < 2``, ``alpha <= 0``, Bernstein with
        :math:`\mathcal M_L`, ...).
    """
    kind = check_mechanism(mechanism)
    if isinstance(n_clients, float) and n_clients.is_integer():
        n_clients = int(n_clients)
    K = check_int("clients", n_clients, low=2)
    a = check_real("alpha", alpha, low=0.0, high=math.inf, low_open=True, high_open=True)
    p = _check_probability(probability)
    check_choice("accounting", accounting, ACCOUNTINGS)
    check_choice("bound", bound, BOUNDS)
    check_choice("scale", scale, SCALES)
    if bound == "bernstein" and kind == "L":
        raise ParameterError(
            "bound",
            bound,
            "'chebyshev' or 'normal' for mechanism L (Laplace reports are unbounded)",
        )
    layout = layout or GroupLayout.balanced(K)
    if abs(layout.n_clients - K) > 1e-6 * K:
        raise ParameterError("layout", layout.sizes, f"group sizes summing to clients={K}")
    alpha_v = a * 2.0 if scale == "rate" else a  # work in value units

    def err(eps: float) -> tuple[float, Allocation]:
        alloc = allocate(kind, eps, layout, accounting=accounting, exact_loss=False)
        var = layout.gap_variance(alloc.mechanism)
        m = _bernstein_m(alloc.mechanism, layout) if bound == "bernstein" else None
        return error_bound(var, p, bound=bound, bernstein_m=m), alloc

    grid = np.geomspace(_EPS_LO, _EPS_HI, 81)
    errs = [err(float(e))[0] for e in grid]
    floor_eps = 700.0 if kind == "R" else _EPS_HI
    floor = err(floor_eps)[0]
    ok = [i for i, e in enumerate(errs) if e <= alpha_v]
    unit = 0.5 if scale == "rate" else 1.0
    if not ok:
        return GapPlan(None, None, a, p, K, bound, accounting, kind, scale, None, floor * unit)
    i = ok[0]
    if i == 0:
        eps_star = float(grid[0])
    else:
        from scipy.optimize import brentq  # lazily (about 0.2 s to import)

        eps_star = float(
            brentq(lambda e: err(e)[0] - alpha_v, grid[i - 1], grid[i], xtol=1e-12, rtol=1e-12)
        )
        # brentq's root may sit a hair below the crossing: step up to the feasible side
        if err(eps_star)[0] > alpha_v * (1 + 1e-9):
            eps_star = float(grid[i])
    e_val, _ = err(eps_star)
    alloc = allocate(kind, eps_star, layout, accounting=accounting, exact_loss=True)
    return GapPlan(
        eps_star, alloc, a, p, K, bound, accounting, kind, scale, e_val * unit, floor * unit
    )


def plan_gap(
    width: float,
    *,
    n_clients: int | None = None,
    epsilon: float | None = None,
    mechanism: str = "R",
    confidence: float = 0.95,
    accounting: str = "exact",
    fractions: tuple[float, ...] | None = None,
    scale: str = "signed",
) -> Any:
    r"""The clients (or epsilon) whose gap interval is at most ``width`` wide (the normal bound).

    The measured gap's interval is ``gap +- z se`` with ``se^2`` :meth:`GroupLayout.gap_variance` of the
    allocation's mechanism (the estimator's variance with the worst-case :math:`\nu^2`, which bounds it);
    ``width = 2 alpha`` at ``probability = confidence`` with ``bound="normal"`` is :func:`plan_epsilon`'s
    question, and for the clients the same error is searched over ``K`` at fixed epsilon (it falls with
    K: every group's variance is of order ``1 / n_g``).

    Parameters
    ----------
    width : float
        Target interval width, > 0 (value units, or rate units with ``scale="rate"``).
    n_clients : int, optional
        Clients ``K >= 2``.
    epsilon : float, optional
        Local budget per client, > 0.
    mechanism : {"R", "L"}
    confidence : float
        In (0, 1).
    accounting : {"exact", "paper"}
    fractions : tuple of float, optional
        Group fractions (positive, summing to 1); default two equal groups.
    scale : {"signed", "rate"}

    Returns
    -------
    Plan
        The clients or epsilon found (None, with a ``note``, when out of reach) and the gap interval
        width there.

    Raises
    ------
    ParameterError
        Naming the parameter out of range, or when not exactly one of ``n_clients``/``epsilon`` is unset.
    """
    w = check_real("width", width, low=0.0, high=math.inf, low_open=True, high_open=True)
    conf = check_open_unit("confidence", confidence)
    solve = check_one_unknown(n_clients=n_clients, epsilon=epsilon)
    kind = check_mechanism(mechanism)
    check_choice("accounting", accounting, ACCOUNTINGS)
    check_choice("scale", scale, SCALES)
    fr = (0.5, 0.5) if fractions is None else tuple(float(f) for f in fractions)
    if len(fr) < 2 or min(fr) <= 0 or abs(sum(fr) - 1.0) > 1e-6:
        raise ParameterError("fractions", fractions, "at least two positive fractions summing to 1")

    def layout_of(k: int) -> GroupLayout:
        return GroupLayout(tuple(f * k for f in fr))

    goal = f"{100 * conf:g}% interval width <= {w:g}"
    inputs: dict[str, Any] = {
        "mechanism": kind,
        "accounting": accounting,
        "fractions": fr,
        "scale": scale,
        "confidence": conf,
        "range": (-1.0, 1.0) if scale == "rate" else (-2.0, 2.0),
    }
    if solve == "epsilon":
        k = check_int("n_clients", n_clients, low=2)
        gp = plan_epsilon(
            k,
            w / 2.0,
            conf,
            kind,
            accounting=accounting,
            bound="normal",
            layout=layout_of(k),
            scale=scale,
        )
        inputs.update(n_clients=k, allocation=gp.to_dict().get("allocation"))
        achieved = None if gp.error_at_epsilon is None else 2.0 * gp.error_at_epsilon
        note = None
        if gp.epsilon is None:
            note = f"no epsilon reaches it (narrowest possible: {2.0 * gp.floor:.4g}; add clients)"
        return Plan("gap", "epsilon", gp.epsilon, goal, achieved, inputs, note)
    eps = check_real("epsilon", epsilon, low=0.0, high=math.inf, low_open=True, high_open=True)
    unit = 0.5 if scale == "rate" else 1.0

    def width_at(k: int) -> float:
        lay = layout_of(k)
        alloc = allocate(kind, eps, lay, accounting=accounting, exact_loss=False)
        return 2.0 * unit * error_bound(lay.gap_variance(alloc.mechanism), conf, bound="normal")

    found = smallest_int(lambda k: width_at(k) <= w, max(2, len(fr)), 10**12)
    inputs["epsilon"] = eps
    if found is None:
        return Plan("gap", "n_clients", None, goal, None, inputs, "not within 10^12 clients")
    return Plan("gap", "n_clients", found, goal, width_at(found), inputs)
