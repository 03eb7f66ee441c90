r"""Splitting a privacy budget between the group (:math:`\varepsilon_1`) and the value (:math:`\varepsilon_2`).

Two accountings:

* ``"exact"`` (default): minimize the variance of the gap estimator (Theorem 9) subject to the *true*
  privacy loss being at most :math:`\varepsilon` (:meth:`GapMechanism.closed_form_loss`, checked against the
  output distributions). For :math:`\mathcal M_R` the constraint is
  :math:`\varepsilon_1 = \varepsilon - \log 2b(\varepsilon_2)`, :math:`\varepsilon_2 \le \varepsilon`; for
  :math:`\mathcal M_L` it forces ``k = 2`` and :math:`\varepsilon_1 = \varepsilon - \varepsilon_2/2`. The
  remaining one-dimensional problem in :math:`\varepsilon_2` is solved on a grid refined by a bounded
  scalar search.
* ``"paper"``: the allocation the paper uses (Sec. 5 and App. B), needed to reproduce its Table 1 and
  Figure 1, returned with its true loss: :math:`\mathcal M_R` :math:`\varepsilon_1 = \varepsilon_2 =
  \varepsilon` (true loss :math:`\varepsilon + \log(2e^\varepsilon/(1+e^\varepsilon)) > \varepsilon`);
  :math:`\mathcal M_L` "opt." :math:`\varepsilon_2 = \varepsilon` and ``k = 2/3``,
  :math:`\varepsilon_1 = \ln 3 - \varepsilon/2` for :math:`\varepsilon < 2/3`, ``k = eps``,
  :math:`\varepsilon_1 = \ln(2/\varepsilon) + \varepsilon - 1` otherwise (true loss infinite unless
  :math:`\varepsilon = 2`); :math:`\mathcal M_L` with ``k = 2``: :math:`\varepsilon_2 = \varepsilon`,
  :math:`\varepsilon_1 = \varepsilon/2` (true loss :math:`\varepsilon`: this one is correct).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats._validation import check_choice, check_int, check_real
from fedstats.analyses.performance_gap.mechanisms import GapMechanism, check_mechanism
from fedstats.errors import DataError

__all__ = [
    "ACCOUNTINGS",
    "Allocation",
    "GroupLayout",
    "allocate",
    "optimal_allocation",
    "paper_allocation",
]

ACCOUNTINGS: tuple[str, ...] = ("exact", "paper")
_LOG2 = math.log(2.0)


@dataclass(frozen=True)
class GroupLayout:
    """How many clients each group has, and which two groups' gap is measured.

    Parameters
    ----------
    sizes : sequence of float
        Clients per group (``d >= 2`` entries, each > 0).
    pair : (int, int), default (0, 1)
        Indices of the two compared groups.
    nu2 : sequence of float or None, optional
        Mean squared value of each group, in [0, 1]; None: the worst case for each mechanism.

    Raises
    ------
    DataError
        If there are fewer than two groups or a group is empty.
    ParameterError
        If ``pair`` does not name two different groups.
    """

    sizes: tuple[float, ...]
    pair: tuple[int, int] = (0, 1)
    nu2: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        """Validate the fields."""
        sizes = tuple(float(s) for s in self.sizes)
        if len(sizes) < 2:
            raise DataError(
                f"a performance gap needs at least two groups, got {len(sizes)} group(s)"
            )
        if min(sizes) <= 0:
            raise DataError(f"every group needs at least one client, got sizes {sizes}")
        object.__setattr__(self, "sizes", sizes)
        i, j = (check_int("pair", p, low=0, high=len(sizes) - 1) for p in self.pair)
        if i == j:
            from fedstats.errors import ParameterError

            raise ParameterError("pair", self.pair, "two different groups")
        object.__setattr__(self, "pair", (i, j))
        if self.nu2 is not None:
            nu = tuple(check_real("nu2", x, low=0.0, high=1.0) for x in self.nu2)
            if len(nu) != len(sizes):
                raise DataError(f"nu2 needs one entry per group ({len(sizes)}), got {len(nu)}")
            object.__setattr__(self, "nu2", nu)

    @classmethod
    def balanced(cls, n_clients: float, n_groups: int = 2) -> GroupLayout:
        """``n_groups`` groups of ``n_clients / n_groups`` clients each (the paper's Table 1 setting)."""
        return cls(tuple([float(n_clients) / n_groups] * n_groups))

    @property
    def n_clients(self) -> float:
        """All clients ``K``."""
        return float(sum(self.sizes))

    @property
    def n_groups(self) -> int:
        """Number of groups ``d``."""
        return len(self.sizes)

    def nu2_of(self, g: int) -> float | None:
        r"""Return the given :math:`\nu^2` of group ``g`` (None for the worst case)."""
        return None if self.nu2 is None else self.nu2[g]

    def gap_variance(self, mech: GapMechanism) -> float:
        """Variance of the measured gap under ``mech`` (Theorem 9), in value units."""
        i, j = self.pair
        return mech.gap_variance(
            (self.sizes[i], self.sizes[j]), self.n_clients, (self.nu2_of(i), self.nu2_of(j))
        )


@dataclass(frozen=True)
class Allocation:
    """A budget split and what it really costs.

    Attributes
    ----------
    mechanism : GapMechanism
        The parameters (epsilon1, epsilon2, k).
    epsilon : float
        The budget the split was made for.
    accounting : str
        ``"exact"`` (true loss <= epsilon) or ``"paper"`` (the paper's rule).
    true_loss : float
        The mechanism's real worst-case privacy loss (may exceed ``epsilon``, or be inf, for ``"paper"``).
    paper_loss : float
        What the paper's Theorem 5/6 claims for these parameters.
    """

    mechanism: GapMechanism
    epsilon: float
    accounting: str
    true_loss: float
    paper_loss: float

    @property
    def epsilon1(self) -> float:
        """Group budget."""
        return self.mechanism.epsilon1

    @property
    def epsilon2(self) -> float:
        """Value budget."""
        return self.mechanism.epsilon2

    @property
    def k(self) -> float | None:
        r""":math:`\mathcal M_L`'s k (None for :math:`\mathcal M_R`)."""
        return self.mechanism.k if self.mechanism.kind == "L" else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly: mechanism, epsilon, accounting, epsilon1, epsilon2, (k), true_loss, paper_loss."""
        out: dict[str, Any] = {
            "mechanism": self.mechanism.kind,
            "epsilon": self.epsilon,
            "accounting": self.accounting,
            "epsilon1": self.epsilon1,
            "epsilon2": self.epsilon2,
        }
        if self.mechanism.kind == "L":
            out["k"] = self.mechanism.k
        out["true_loss"] = self.true_loss
        out["paper_loss"] = self.paper_loss
        return out


def _check_epsilon(epsilon: Any) -> float:
    return check_real("epsilon", epsilon, low=0.0, high=math.inf, low_open=True, high_open=True)


def _make(mech: GapMechanism, epsilon: float, accounting: str, *, exact_loss: bool) -> Allocation:
    loss = mech.true_loss() if exact_loss else mech.closed_form_loss()
    return Allocation(mech, epsilon, accounting, loss, mech.paper_loss())


def paper_allocation(
    mechanism: str,
    epsilon: float,
    *,
    n_groups: int = 2,
    variant: str = "opt",
    exact_loss: bool = True,
) -> Allocation:
    r"""Return the paper's budget split (Sec. 5, App. B), labelled with its true privacy loss.

    Parameters
    ----------
    mechanism : {"R", "L"}
    epsilon : float
        Budget the paper allocates, in (0, inf).
    n_groups : int, default 2
    variant : {"opt", "k2"}
        For :math:`\mathcal M_L`: ``"opt"`` (App. B, k = 2/3 or k = eps) or ``"k2"`` (k = 2,
        epsilon1 = eps/2). Ignored for :math:`\mathcal M_R`.
    exact_loss : bool, default True
        Compute the true loss from the output distributions (else from the closed form; they agree).

    Returns
    -------
    Allocation

    Raises
    ------
    ParameterError
        If an argument is outside its range.
    """
    kind = check_mechanism(mechanism)
    eps = _check_epsilon(epsilon)
    check_choice("variant", variant, ("opt", "k2"))
    if kind == "R":
        mech = GapMechanism("R", eps, eps, n_groups)
    elif variant == "k2":
        mech = GapMechanism("L", eps / 2.0, eps, n_groups, k=2.0)
    elif eps < 2.0 / 3.0:
        mech = GapMechanism("L", math.log(3.0) - eps / 2.0, eps, n_groups, k=2.0 / 3.0)
    else:
        mech = GapMechanism("L", math.log(2.0 / eps) + eps - 1.0, eps, n_groups, k=eps)
    return _make(mech, eps, "paper", exact_loss=exact_loss)


def _exact_split(kind: str, eps: float, eps2: np.ndarray) -> np.ndarray:
    """epsilon1 that spends the rest of the budget for each candidate epsilon2 (vectorized)."""
    if kind == "R":
        log2b = _LOG2 - np.logaddexp(0.0, -eps2)
        out: np.ndarray = np.maximum(eps - log2b, 0.0)
        return out
    out = np.maximum(eps - eps2 / 2.0, 0.0)
    return out


def _variance_curve(kind: str, eps: float, eps2: np.ndarray, layout: GroupLayout) -> np.ndarray:
    """Gap variance for each candidate epsilon2 (vectorized closed forms of Eqs. 19/20)."""
    eps1 = _exact_split(kind, eps, eps2)
    d = layout.n_groups
    e = np.exp(-eps1)
    a = 1.0 / (1.0 + (d - 1) * e)
    ao = e / (1.0 + (d - 1) * e)
    K = layout.n_clients
    total = np.zeros_like(eps2)
    for g in layout.pair:
        n = layout.sizes[g]
        nu = layout.nu2_of(g)
        rest = (K - n) / n
        if kind == "R":
            nu2 = 0.0 if nu is None else nu
            t2 = np.tanh(eps2 / 2.0) ** 2
            total += (1.0 - a * t2 * nu2 + rest * ao / a) / (a * t2 * n)
        else:
            nu2 = 1.0 if nu is None else nu
            s2 = 8.0 / eps2**2
            total += ((1.0 - a) / a * nu2 + s2 / a + rest * ao * s2 / (a * a)) / n
    return total


def optimal_allocation(
    mechanism: str,
    epsilon: float,
    layout: GroupLayout,
    *,
    exact_loss: bool = True,
) -> Allocation:
    r"""Find the split minimizing the gap's variance subject to the true privacy loss <= ``epsilon``.

    Parameters
    ----------
    mechanism : {"R", "L"}
    epsilon : float
        Budget, in (0, inf).
    layout : GroupLayout
        Group sizes, compared pair and :math:`\nu^2` (None: worst case) the variance is computed for.
    exact_loss : bool, default True
        Report the true loss computed from the output distributions (else the closed form).

    Returns
    -------
    Allocation
        With ``accounting="exact"``; ``true_loss <= epsilon`` (up to 1e-9). For :math:`\mathcal M_L`,
        ``k = 2``.

    Raises
    ------
    ParameterError
        If ``epsilon`` or ``mechanism`` is invalid.
    """
    kind = check_mechanism(mechanism)
    eps = _check_epsilon(epsilon)
    mech = _best_mechanism(kind, eps, layout)
    return _make(mech, eps, "exact", exact_loss=exact_loss)


def _best_mechanism(kind: str, eps: float, layout: GroupLayout) -> GapMechanism:
    grid = eps * np.concatenate([np.geomspace(1e-4, 1.0, 160)])
    curve = _variance_curve(kind, eps, grid, layout)
    i = int(np.nanargmin(curve))
    lo = grid[max(i - 1, 0)]
    hi = grid[min(i + 1, grid.size - 1)]
    best = float(grid[i])
    if hi > lo:
        from scipy.optimize import minimize_scalar  # lazily (about 0.2 s to import)

        res = minimize_scalar(
            lambda x: float(_variance_curve(kind, eps, np.array([x]), layout)[0]),
            bounds=(float(lo), float(hi)),
            method="bounded",
            options={"xatol": 1e-10 * max(eps, 1e-12)},
        )
        if res.success and float(res.fun) <= float(curve[i]):
            best = float(res.x)
    eps2 = min(best, eps)
    eps1 = float(_exact_split(kind, eps, np.array([eps2]))[0])
    return _within_budget(GapMechanism(kind, eps1, eps2, layout.n_groups, k=2.0), eps)


def _within_budget(mech: GapMechanism, eps: float) -> GapMechanism:
    """Shrink a split by a few ulps until its computed loss (closed form and exact) is <= ``eps``.

    ``eps1 = eps - eps2 / 2`` (or ``eps - log 2b``) in floating point can leave the loss an ulp or a few
    above the budget; the loss increases in both epsilons, so scaling both down by a relative
    ``2**-52``, doubling, reaches a split whose reported loss is at most the budget (never above).
    """
    step = 2.0**-52
    while max(mech.closed_form_loss(), mech.true_loss()) > eps:
        mech = GapMechanism(
            mech.kind,
            mech.epsilon1 * (1.0 - step),
            mech.epsilon2 * (1.0 - step),
            mech.n_groups,
            k=mech.k,
        )
        step *= 2.0
    return mech


def allocate(
    mechanism: str,
    epsilon: float,
    layout: GroupLayout,
    *,
    accounting: str = "exact",
    exact_loss: bool = True,
) -> Allocation:
    """:func:`optimal_allocation` (``accounting="exact"``) or :func:`paper_allocation` (``"paper"``).

    Raises
    ------
    ParameterError
        If ``accounting`` is not ``"exact"`` or ``"paper"``, or another argument is invalid.
    """
    check_choice("accounting", accounting, ACCOUNTINGS)
    if accounting == "paper":
        return paper_allocation(mechanism, epsilon, n_groups=layout.n_groups, exact_loss=exact_loss)
    return optimal_allocation(mechanism, epsilon, layout, exact_loss=exact_loss)


def layout_from_fractions(
    n_clients: float, fractions: Sequence[float] | None = None, pair: tuple[int, int] = (0, 1)
) -> GroupLayout:
    """Group sizes ``n_clients * fraction`` (default: two balanced groups).

    Raises
    ------
    DataError
        If the fractions are not positive or do not sum to 1.
    """
    if fractions is None:
        return GroupLayout.balanced(n_clients)
    fr = np.asarray(fractions, dtype=np.float64)
    if fr.ndim != 1 or fr.size < 2 or (fr <= 0).any() or abs(float(fr.sum()) - 1.0) > 1e-9:
        raise DataError(
            f"group fractions must be at least two positive numbers summing to 1, got {fractions}"
        )
    return GroupLayout(tuple(float(x) * n_clients for x in fr), pair)
