r"""Privacy accounting: a ledger of releases with budgets, and a meter of disclosed private bits.

:class:`PrivacyLedger` records every release as (epsilon, delta) and, for Gaussian releases, rho (zCDP).
Releases compose

* **sequentially** for the clients they share, by the smallest epsilon of the valid bounds: basic
  composition (epsilons and deltas add, Dwork & Roth Thm. 3.16) at the summed delta D; and, at the delta
  ``max(D, delta_target)`` (the *delta target*, :data:`DEFAULT_DELTA_TARGET` = 1e-6, capped by the delta
  budget), zCDP composition of Gaussian releases (rhos add, Bun & Steinke 2016, Lemma 2.3; converted once,
  Canonne, Kamath & Steinke 2020, Prop. 12), and privacy-loss-distribution composition
  (:func:`~fedstats.privacy.analysis.pld.pld_epsilon`) of the releases that describe their mechanism
  (:class:`~fedstats.privacy.analysis.loss.MechanismSpec`) and of every pure-DP release, composed as
  randomized response at its epsilon, which dominates it (:func:`pld_specs`; Kairouz, Oh & Viswanath 2015,
  Thm. 2.2), the other releases added by the better of the first two. Composing at the target is what lets
  pure-DP releases gain: at delta 0 every accounting gives their sum (100 randomized responses at epsilon
  0.1: 4.77 at 1e-6, 10 at 0). A gain below a relative 1e-4 keeps basic composition and its smaller delta;
* **in parallel** over disjoint client sets (McSherry 2009): each client is charged only for the releases
  that touch it, and the ledger reports the worst-charged client.

Client sets are ``None`` (every client), a ``range`` of client ids, or an array of ids; they are stored as
sorted runs of consecutive ids, so a range of 10^9 clients costs two integers.

Examples
--------
>>> ledger = PrivacyLedger(epsilon_budget=1.0)
>>> ledger.spend(epsilon=0.5, label="group A mean", clients=range(0, 500))
>>> ledger.spend(epsilon=0.5, label="group B mean", clients=range(500, 1000))
>>> ledger.total().epsilon  # disjoint clients: parallel composition
0.5
>>> ledger.spend(epsilon=0.5, label="overall count")
>>> ledger.total().epsilon
1.0

A request of several releases is charged all or nothing inside :meth:`PrivacyLedger.atomic`:

>>> try:
...     with ledger.atomic():
...         ledger.spend(epsilon=0.2, label="stage 1")
...         ledger.spend(epsilon=0.2, label="stage 2")
... except Exception as err:
...     print(type(err).__name__)
BudgetExceededError
>>> ledger.total().epsilon  # stage 1 was rolled back with the refused stage 2
1.0

Pure-DP releases compose by their privacy loss distributions at the delta target:

>>> tasks = PrivacyLedger()
>>> for i in range(100):
...     tasks.spend(epsilon=0.1, label=f"task {i}")
>>> round(tasks.total().epsilon, 3), tasks.total().delta  # basic composition: 10
(4.775, 1e-06)
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedstats._validation import check_int, check_real
from fedstats.errors import BudgetExceededError, ParameterError
from fedstats.privacy.analysis.loss import MechanismSpec, PrivacyLoss
from fedstats.privacy.analysis.zcdp import zcdp_to_approx_dp
from fedstats.privacy.client_sets import (
    ClientSet,
    all_or_nothing,
    client_runs,
    describe_clients,
    membership,
    segment_sums,
    unique_rows,
)

__all__ = [
    "DEFAULT_DELTA_TARGET",
    "BitMeter",
    "LedgerEntry",
    "PrivacyLedger",
    "compose_losses",
    "mechanisms_of",
    "pld_specs",
]

_TOL = 1e-12
_BUDGET_CHECKS = {
    "epsilon_budget": functools.partial(
        check_real, "epsilon_budget", low=0.0, high=math.inf, low_open=True
    ),
    "delta_budget": functools.partial(
        check_real, "delta_budget", low=0.0, high=1.0, high_open=True
    ),
}


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded release.

    Attributes
    ----------
    label : str
        What was released.
    epsilon, delta : float
        Its (epsilon, delta)-DP guarantee.
    rho : float or None
        Its zCDP guarantee (Gaussian releases), else None.
    clients : str
        Description of the clients it touched ("all", "range(0, 500)", "1234 ids").
    runs : numpy.ndarray or None
        The client set as runs of ids, shape (m, 2); None for all clients.
    mechanisms : tuple of MechanismSpec
        The mechanisms the release is made of, when described (then composed by PLD too), else ``()``.
    """

    label: str
    epsilon: float
    delta: float
    rho: float | None
    clients: str
    runs: np.ndarray | None
    mechanisms: tuple[MechanismSpec, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (without the runs array; ``"mechanisms"`` only when described)."""
        out: dict[str, Any] = {
            "label": self.label,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
            "clients": self.clients,
        }
        if self.mechanisms:
            out["mechanisms"] = [m.as_dict() for m in self.mechanisms]
        return out


def _columns(entries: list[LedgerEntry]) -> np.ndarray:
    """Per entry: eps (no rho), eps (rho), delta (no rho), delta (rho), rho; shape (n, 5)."""
    n = len(entries)
    eps = np.fromiter((e.epsilon for e in entries), dtype=np.float64, count=n)
    dlt = np.fromiter((e.delta for e in entries), dtype=np.float64, count=n)
    rho = np.fromiter((math.nan if e.rho is None else e.rho for e in entries), np.float64, n)
    has = ~np.isnan(rho)
    return np.stack(
        [
            np.where(has, 0.0, eps),
            np.where(has, eps, 0.0),
            np.where(has, 0.0, dlt),
            np.where(has, dlt, 0.0),
            np.where(has, rho, 0.0),
        ],
        axis=1,
    )


DEFAULT_DELTA_TARGET = 1e-6
"""The delta at which a ledger composes by privacy loss distributions (:class:`PrivacyLedger`'s
``delta_target``, the device's :class:`~fedstats.client.policy.LocalBudget` and the server's ledger: one
default, docs/privacy.md "Delta target"). Capped by the ledger's delta budget."""

_MAX_RR_EPSILON = 50.0  # MechanismSpec's largest randomized-response epsilon
_TIE = 1e-4  # relative gain over basic composition below which spending the delta target is not worth it
_SPLITS = (0.5, 0.9, 0.99, 0.1)  # shares of delta given to the PLD when zCDP releases share it


def pld_specs(entry: LedgerEntry) -> tuple[MechanismSpec, ...] | None:
    r"""The mechanisms a release is composed as by its privacy loss distribution, or None (it is not).

    A release that describes its mechanisms is composed as them. A pure :math:`\varepsilon`-DP release
    (delta 0, no rho) that does not is composed as binary randomized response
    :math:`RR(\varepsilon)`: the privacy region of every :math:`\varepsilon`-DP mechanism lies inside
    that of :math:`RR(\varepsilon)` (Kairouz, Oh & Viswanath 2015, Thm. 2.2 and its privacy region,
    Eq. (3)), so :math:`RR(\varepsilon)` dominates it, and the composition of dominated releases is
    dominated by the composition of their dominating ones (ibid., proof of Thm. 3.3): composing the
    :math:`RR(\varepsilon)` PLDs is a valid bound on any sequence of pure-DP releases. A release with
    epsilon 0 is ``()`` (it adds nothing); one with delta > 0 or rho and no description is None.

    Parameters
    ----------
    entry : LedgerEntry

    Returns
    -------
    tuple of MechanismSpec or None
    """
    if entry.mechanisms:
        return entry.mechanisms
    if entry.delta > 0.0 or entry.rho is not None:
        return None
    if entry.epsilon == 0.0:
        return ()
    if entry.epsilon <= _MAX_RR_EPSILON:
        return _dominating_rr(entry.epsilon)
    return None


def mechanisms_of(items: Iterable[Any]) -> tuple[MechanismSpec, ...]:
    """:meth:`MechanismSpec.from_dict` of each stored dict, one shared tuple per distinct list.

    What the device's budget and the server's ledger call when they replay their stored charges: equal
    descriptions give the same tuple object, which the ledger counts by identity (:func:`_spec_counts`),
    and each is read once.

    Parameters
    ----------
    items : iterable of dict
        :meth:`MechanismSpec.as_dict` forms.

    Returns
    -------
    tuple of MechanismSpec

    Raises
    ------
    ParameterError
        If an item is not such a dict or a field is out of range.
    """
    dicts = list(items)
    try:
        key = tuple(tuple(sorted(d.items())) for d in dicts)
        hash(key)
    except (AttributeError, TypeError):  # not dicts of plain values: read one by one (and refused)
        return tuple(MechanismSpec.from_dict(d) for d in dicts)
    return _interned(key)


@functools.lru_cache(maxsize=4096)
def _interned(key: tuple[tuple[tuple[str, Any], ...], ...]) -> tuple[MechanismSpec, ...]:
    return tuple(MechanismSpec.from_dict(dict(k)) for k in key)


@functools.lru_cache(maxsize=1024)
def _dominating_rr(epsilon: float) -> tuple[MechanismSpec, ...]:
    """RR(epsilon) as a spec, built once per epsilon (a ledger replays thousands of equal charges)."""
    return (MechanismSpec("randomized_response", epsilon),)


def _basic_or_zcdp(sums: np.ndarray, delta: float) -> float:
    """The better of basic and zCDP composition of releases with these column sums (see _columns).

    Valid at ``delta`` (>= their summed deltas, else inf): the releases without rho take their own deltas,
    those with rho either theirs (basic) or everything left (zCDP, Canonne, Kamath & Steinke 2020, Prop. 12).
    """
    eps_n, eps_r, d_n, d_r, rho = (float(v) for v in sums)
    if delta < (d_n + d_r) * (1 - 1e-12) - 1e-300:
        out = math.inf
    else:
        out = eps_n + eps_r
    left = min(delta - d_n, 1.0 - 1e-12)
    if rho > 0.0 and left > 0.0:
        out = min(out, eps_n + zcdp_to_approx_dp(rho=rho, delta=left))
    return out


Described = tuple[LedgerEntry, tuple[MechanismSpec, ...] | None]  # a release and its pld_specs


def _spec_counts(described: list[Described]) -> dict[MechanismSpec, int]:
    """How many times each mechanism occurs in the releases' descriptions.

    Counted by the identity of the description tuples first (a ledger's charges of one kind share one
    tuple, :func:`_dominating_rr`, or the loss they were charged from), so 1,000 charges cost 1,000
    integer counts and a few hashes of the mechanisms.
    """
    tuples = [s for _, s in described if s]
    objects = {id(t): t for t in tuples}
    counts: dict[MechanismSpec, int] = {}
    for key, times in Counter(map(id, tuples)).items():
        for m in objects[key]:
            counts[m] = counts.get(m, 0) + times
    return counts


def _sequential(
    sums: np.ndarray, described: list[Described] | None = None, target: float = 0.0
) -> tuple[float, float, float]:
    """(epsilon, delta, rho) of releases composed sequentially: the smallest of the valid accountings.

    ``sums`` are their column sums (:func:`_columns`); ``described`` the releases themselves with their
    :func:`pld_specs`, needed only when some compose by their privacy loss distributions; ``target`` the ledger's
    delta target. Candidates: basic composition at the summed deltas D; at ``max(D, target)``, zCDP for the
    releases with rho plus basic for the others, and the PLD of the PLD-composable releases plus the better
    of basic and zCDP for the others (the delta shared between the two parts at a few fixed splits). The
    smallest epsilon wins; on a tie the smaller delta (an epsilon within a relative ``_TIE`` = 1e-4 of basic
    composition, the PLD's own grid step, is a tie: it does not spend the delta target for nothing).
    """
    d_sum = float(sums[2] + sums[3])
    basic = float(sums[0] + sums[1])
    best = (basic, d_sum)
    delta = max(d_sum, target)
    zc = _basic_or_zcdp(sums, delta)
    if zc < best[0]:
        best = (zc, delta)
    if best[1] > d_sum and best[0] >= basic * (1 - _TIE):  # no real gain: keep the smaller delta
        best = (basic, d_sum)
    parts = described or []
    specs = _spec_counts(parts)
    if sum(specs.values()) > 1 and delta > 0.0:  # at delta 0 a PLD gives pure releases their sum
        from fedstats.privacy.analysis.pld import pld_epsilon  # scipy: loaded only when needed

        rest = [e for e, s in parts if s is None]
        rest_sums = _columns(rest).sum(axis=0) if rest else np.zeros(5)
        fixed = float(rest_sums[2])  # deltas of the others without rho: theirs, always
        room = min(delta - fixed, 1.0 - 1e-12)
        shares = [room - float(rest_sums[3])]
        if rest_sums[4] > 0.0:
            shares += [room * f for f in _SPLITS]
        for d1 in shares:
            if d1 < 0.0:
                continue
            eps = pld_epsilon(specs, delta=d1)
            if eps < best[0]:
                eps += _basic_or_zcdp(rest_sums, delta - d1) if rest else 0.0
            if eps < best[0] and (best[1] >= delta or eps < best[0] * (1 - _TIE)):
                best = (eps, delta)
    return best[0], best[1], float(sums[4])


class PrivacyLedger:
    """Records every DP release and enforces an optional total budget.

    Parameters
    ----------
    epsilon_budget : float or None, default None
        Total epsilon allowed for any single client, in (0, inf); None: unlimited (record only).
    delta_budget : float or None, default None
        Total delta allowed, in [0, 1); None: unlimited.
    delta_target : float, default DEFAULT_DELTA_TARGET (1e-6)
        The delta at which releases are composed when their declared deltas sum to less, in [0, 1); capped
        by ``delta_budget``. 0 keeps pure-DP releases at delta 0 (then they compose by their sum).

    Raises
    ------
    ParameterError
        If a budget or the target is outside its range.

    Notes
    -----
    The budgets can be changed later (``ledger.epsilon_budget = 2.0``, None for unlimited), but not set
    below what is already spent: that raises :class:`BudgetExceededError` and leaves the budget as it was.
    A smaller delta budget can raise the spent epsilon (the composition is evaluated at a smaller delta),
    so it is checked against the epsilon budget too.
    """

    def __init__(
        self,
        epsilon_budget: float | None = None,
        delta_budget: float | None = None,
        *,
        delta_target: float = DEFAULT_DELTA_TARGET,
    ) -> None:
        self._entries: list[LedgerEntry] = []
        self._memo: tuple[int, LedgerEntry | None, float, PrivacyLoss] | None = None
        self._epsilon_budget: float | None = None
        self._delta_budget: float | None = None
        self.delta_target = check_real(
            "delta_target", delta_target, low=0.0, high=1.0, high_open=True
        )
        self.epsilon_budget = epsilon_budget
        self.delta_budget = delta_budget

    def _target(self, delta_budget: float | None) -> float:
        return self.delta_target if delta_budget is None else min(self.delta_target, delta_budget)

    def _set_budget(self, name: str, value: float | None) -> None:
        """Set ``epsilon_budget`` or ``delta_budget`` (``name``) to ``value``, checked.

        A budget below what is spent (composed at the target the new budgets give) is refused.
        """
        value = None if value is None else _BUDGET_CHECKS[name](value)
        budgets = {"epsilon_budget": self._epsilon_budget, "delta_budget": self._delta_budget}
        budgets[name] = value
        eps_budget, delta_budget = budgets["epsilon_budget"], budgets["delta_budget"]
        spent = self._spent(self._target(delta_budget))
        if eps_budget is not None and spent.epsilon > eps_budget * (1 + _TOL):
            what = f"below the epsilon already spent ({spent.epsilon:.6g})"
        elif delta_budget is not None and spent.delta > delta_budget * (1 + _TOL) + 1e-300:
            what = f"below the delta already spent ({spent.delta:.6g})"
        else:
            setattr(self, "_" + name, value)
            return
        shown = "None" if value is None else f"{value:.6g}"
        raise BudgetExceededError(
            f"{name}={shown} refused: {what}; the budget stays {getattr(self, '_' + name)}"
        )

    @property
    def epsilon_budget(self) -> float | None:
        """Total epsilon allowed, in (0, inf), or None (unlimited); never below the spent epsilon."""
        return self._epsilon_budget

    @epsilon_budget.setter
    def epsilon_budget(self, value: float | None) -> None:
        self._set_budget("epsilon_budget", value)

    @property
    def delta_budget(self) -> float | None:
        """Total delta allowed, in [0, 1), or None (unlimited); never below the spent delta."""
        return self._delta_budget

    @delta_budget.setter
    def delta_budget(self, value: float | None) -> None:
        self._set_budget("delta_budget", value)

    @contextmanager
    def atomic(self) -> Iterator[PrivacyLedger]:
        """Charge every release made inside the block, or none of them.

        A request is often several releases (two rounds, two stages); if any is refused, or anything else
        raises inside the block, the releases already recorded in it are removed, so a refused request
        charges nothing. Blocks nest (an inner failure that the outer block catches rolls back only the
        inner block).

        Yields
        ------
        PrivacyLedger
            This ledger.
        """
        with all_or_nothing(self._entries):
            yield self

    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        """Every recorded release, in order."""
        return tuple(self._entries)

    @staticmethod
    def _totals(entries: list[LedgerEntry], target: float) -> PrivacyLoss:
        if not entries:
            return PrivacyLoss(0.0, 0.0, None)
        rows = _columns(entries)
        runs = [e.runs for e in entries]
        any_rho = any(e.rho is not None for e in entries)
        described = [(e, pld_specs(e)) for e in entries]
        if sum(map(len, filter(None, [s for _, s in described]))) < 2:
            seg = segment_sums(runs, rows)
            worst = [_sequential(r, None, target) for r in seg]
        elif all(r is None for r in runs):  # every release touches every client: one segment
            worst = [_sequential(rows.sum(axis=0), described, target)]
        else:  # the PLD needs each segment's releases, not only their sums
            member = membership(runs)
            worst = [
                _sequential(
                    rows[m].sum(axis=0), [d for d, i in zip(described, m, strict=True) if i], target
                )
                for m in unique_rows(member)
            ]
        eps = max(w[0] for w in worst)
        delta = max(w[1] for w in worst)
        rho = max(w[2] for w in worst)
        return PrivacyLoss(eps, min(1.0, delta), rho if any_rho else None)

    def total(self) -> PrivacyLoss:
        """Privacy spent by the worst-charged client: (epsilon, delta, rho of its Gaussian releases).

        Composed at delta ``max(D, target)`` (D the sum of the declared deltas, target the delta target
        capped by the delta budget) when that gives a smaller epsilon than basic composition at D.
        """
        return self._spent(self._target(self._delta_budget))

    def remaining(self) -> tuple[float, float]:
        """(epsilon, delta) still available (inf when there is no budget)."""
        t = self.total()
        e = math.inf if self.epsilon_budget is None else max(0.0, self.epsilon_budget - t.epsilon)
        d = math.inf if self.delta_budget is None else max(0.0, self.delta_budget - t.delta)
        return e, d

    def spend(
        self,
        *,
        epsilon: float,
        delta: float = 0.0,
        rho: float | None = None,
        label: str,
        clients: ClientSet = None,
        mechanisms: Iterable[MechanismSpec] = (),
    ) -> None:
        """Record a release, or refuse it if it would exceed the budget.

        Parameters
        ----------
        epsilon : float
            The release's epsilon, in [0, inf).
        delta : float, default 0.0
            Its delta, in [0, 1).
        rho : float or None, default None
            Its zCDP rho when it is a (discrete) Gaussian release, in [0, inf).
        label : str
            What is released (kept in the ledger and in error messages).
        clients : None, range or array of int, default None
            The clients whose data the release uses; None means every client. Releases on disjoint client
            sets compose in parallel.
        mechanisms : iterable of MechanismSpec, default ()
            What the release is made of, when it can be described exactly (it is then also composed by
            its privacy loss distribution); ``epsilon``, ``delta`` and ``rho`` must be valid for it.

        Raises
        ------
        BudgetExceededError
            If the total after this release would exceed ``epsilon_budget`` or ``delta_budget``; the message
            states what was spent, what was requested and what remains. Nothing is recorded then.
        ParameterError
            If a parameter is outside its range.
        """
        eps = check_real("epsilon", epsilon, low=0.0, high=math.inf, high_open=True)
        dlt = check_real("delta", delta, low=0.0, high=1.0, high_open=True)
        r = None if rho is None else check_real("rho", rho, low=0.0, high=math.inf, high_open=True)
        if not isinstance(label, str) or not label:
            raise ParameterError("label", label, "a non-empty string")
        specs = tuple(mechanisms)
        if not all(isinstance(m, MechanismSpec) for m in specs):
            raise ParameterError("mechanisms", specs, "MechanismSpec values")
        runs = client_runs(clients)
        entry = LedgerEntry(label, eps, dlt, r, describe_clients(clients, runs), runs, specs)
        if self.epsilon_budget is None and self.delta_budget is None:
            self._entries.append(entry)  # nothing to check: composing now would be wasted work
            return
        after = self._totals([*self._entries, entry], self._target(self.delta_budget))
        over_eps = self.epsilon_budget is not None and after.epsilon > self.epsilon_budget * (
            1 + _TOL
        )
        over_delta = (
            self.delta_budget is not None and after.delta > self.delta_budget * (1 + _TOL) + 1e-300
        )
        if over_eps or over_delta:
            before = self.total()
            rem_e, rem_d = self.remaining()
            raise BudgetExceededError(
                f"release {label!r} refused: spent epsilon={before.epsilon:.6g}, delta={before.delta:.6g}; "
                f"requested epsilon={eps:.6g}, delta={dlt:.6g}; remaining epsilon={rem_e:.6g}, "
                f"delta={rem_d:.6g} (budget epsilon={self.epsilon_budget}, delta={self.delta_budget})"
            )
        self._entries.append(entry)
        self._memo = (len(self._entries), entry, self._target(self.delta_budget), after)

    def _spent(self, target: float) -> PrivacyLoss:
        """:meth:`_totals` of the entries at ``target``, remembered until they change.

        A check composes the same entries at the same target several times (the device and the server
        set both budgets on a replayed ledger, then charge). The entries only change by appending a new
        one or removing the last ones (:meth:`atomic`), so their number and the identity of the last one
        (held here, so it cannot be reused) tell whether the remembered total is theirs.
        """
        last = self._entries[-1] if self._entries else None
        memo = self._memo
        if (
            memo is not None
            and memo[0] == len(self._entries)
            and memo[1] is last
            and memo[2] == target
        ):
            return memo[3]
        out = self._totals(self._entries, target)
        self._memo = (len(self._entries), last, target, out)
        return out

    def spend_loss(self, loss: PrivacyLoss, *, label: str, clients: ClientSet = None) -> None:
        """Record a release described by a :class:`PrivacyLoss` (e.g. ``mechanism.privacy_loss()``).

        Same as :meth:`spend` with ``epsilon=loss.epsilon, delta=loss.delta, rho=loss.rho,
        mechanisms=loss.mechanisms``.

        Raises
        ------
        BudgetExceededError
            If the release would exceed the budget.
        ParameterError
            If the loss is not finite (a non-private mechanism cannot be recorded).
        """
        if not math.isfinite(loss.epsilon):
            raise ParameterError("loss", loss, "a finite privacy loss (the mechanism is not DP)")
        self.spend(
            epsilon=loss.epsilon,
            delta=loss.delta,
            rho=loss.rho,
            label=label,
            clients=clients,
            mechanisms=loss.mechanisms,
        )

    def explain(self) -> str:
        """The ledger in words: one line per release, then the total and what remains."""
        lines = []
        for i, e in enumerate(self._entries, 1):
            rho = f", rho={e.rho:.4g} (zCDP)" if e.rho is not None else ""
            mech = ""
            if e.mechanisms:
                mech = ", " + " + ".join(_explain_spec(m) for m in e.mechanisms)
            lines.append(
                f"{i}. {e.label}: epsilon={e.epsilon:.4g}, delta={e.delta:.3g}{rho}{mech}, "
                f"clients: {e.clients}"
            )
        t = self.total()
        lines.append(
            f"total for the worst-charged client: epsilon={t.epsilon:.4g}, delta={t.delta:.3g} "
            "(the smallest of basic composition, zCDP for Gaussian releases and privacy loss "
            "distributions for described mechanisms; parallel over disjoint clients)"
        )
        if self.epsilon_budget is not None or self.delta_budget is not None:
            rem_e, rem_d = self.remaining()
            lines.append(f"remaining: epsilon={rem_e:.4g}, delta={rem_d:.3g}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly summary: budgets, entries and totals."""
        return {
            "epsilon_budget": self.epsilon_budget,
            "delta_budget": self.delta_budget,
            "entries": [e.as_dict() for e in self._entries],
            "total": self.total().as_dict(),
        }


def compose_losses(losses: Iterable[PrivacyLoss]) -> PrivacyLoss:
    """The privacy loss of one record that takes part in every release of ``losses`` (one task's loss).

    Composed by :class:`PrivacyLedger` at delta target 0 (so a task of pure-DP releases stays pure: its
    delta is what its releases declare), and carrying the releases' mechanisms, so that the ledgers that
    charge the task compose them by their privacy loss distributions (:func:`pld_specs`: a pure-DP release
    without a description is carried as randomized response at its epsilon). When some release has
    neither (delta > 0 or rho without a description), the result carries none.

    Parameters
    ----------
    losses : iterable of PrivacyLoss
        Finite losses, at least one.

    Returns
    -------
    PrivacyLoss

    Raises
    ------
    ParameterError
        If ``losses`` is empty or a loss is not finite.
    """
    ledger = PrivacyLedger(delta_target=0.0)
    for k, loss in enumerate(losses):
        ledger.spend_loss(loss, label=f"release {k + 1}")
    if not ledger.entries:
        raise ParameterError("losses", "[]", "at least one privacy loss")
    specs = [pld_specs(e) for e in ledger.entries]
    total = ledger.total()
    if any(s is None for s in specs):
        return total
    return replace(total, mechanisms=tuple(m for s in specs if s for m in s))


def _explain_spec(m: MechanismSpec) -> str:
    text = f"{m.kind.replace('_', ' ')} ({m.parameter:.4g}"
    if m.sensitivity != 1.0:
        text += f", sensitivity {m.sensitivity:.4g}"
    if m.categories != 2:
        text += f", {m.categories} categories"
    if m.sampling_rate != 1.0:
        text += f", sampled at {m.sampling_rate:.4g}"
    return text + ")"


class BitMeter:
    """Counts how many private bits each client disclosed (Cormode & Markov, paper 001).

    In bit pushing a client reveals (a randomized version of) one bit of its value per report; the meter
    records each disclosure and reports the worst-case number of bits any client has revealed.

    Parameters
    ----------
    bit_budget : int or None, default None
        Maximum bits any client may disclose; None: unlimited.

    Raises
    ------
    ParameterError
        If ``bit_budget`` is negative.
    """

    def __init__(self, bit_budget: int | None = None) -> None:
        self.bit_budget = None if bit_budget is None else check_int("bit_budget", bit_budget, low=0)
        self._records: list[tuple[str, int, np.ndarray | None]] = []

    @contextmanager
    def atomic(self) -> Iterator[BitMeter]:
        """Record every disclosure made inside the block, or none (see :meth:`PrivacyLedger.atomic`).

        Yields
        ------
        BitMeter
            This meter.
        """
        with all_or_nothing(self._records):
            yield self

    def _max(self, records: list[tuple[str, int, np.ndarray | None]]) -> int:
        if not records:
            return 0
        seg = segment_sums([r[2] for r in records], np.array([[float(r[1])] for r in records]))
        return round(float(seg.max()))

    def record(self, *, bits: int, label: str, clients: ClientSet = None) -> None:
        """Record that each client in ``clients`` disclosed ``bits`` private bits.

        Parameters
        ----------
        bits : int
            Bits disclosed per client in this report, >= 0.
        label : str
            What was disclosed (e.g. "round 1: bit j").
        clients : None, range or array of int
            Who disclosed them (None: every client).

        Raises
        ------
        BudgetExceededError
            If a client would exceed ``bit_budget`` (nothing is recorded then).
        ParameterError
            If a parameter is invalid.
        """
        b = check_int("bits", bits, low=0)
        if not isinstance(label, str) or not label:
            raise ParameterError("label", label, "a non-empty string")
        rec = (label, b, client_runs(clients))
        spent = self._max(self._records)
        after = self._max([*self._records, rec])
        if self.bit_budget is not None and after > self.bit_budget:
            raise BudgetExceededError(
                f"disclosure {label!r} refused: spent {spent} bit(s) per client, requested {b}, "
                f"remaining {self.bit_budget - spent} (budget {self.bit_budget})"
            )
        self._records.append(rec)

    def max_bits_per_client(self) -> int:
        """The largest number of bits any client has disclosed."""
        return self._max(self._records)

    def bits_of(self, client: int) -> int:
        """Bits disclosed by one client id."""
        cid = check_int("client", client, low=0)
        total = 0
        for _, b, runs in self._records:
            if runs is None or bool(((runs[:, 0] <= cid) & (cid < runs[:, 1])).any()):
                total += b
        return total

    def total_bits(self, n_clients: int) -> int:
        """Total bits disclosed by clients ``0..n_clients-1`` (for communication and leakage reports)."""
        n = check_int("n_clients", n_clients, low=0)
        total = 0
        for _, b, runs in self._records:
            if runs is None:
                total += b * n
            else:
                total += b * int((np.minimum(runs[:, 1], n) - np.minimum(runs[:, 0], n)).sum())
        return total

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        return {
            "bit_budget": self.bit_budget,
            "records": [
                {
                    "label": lab,
                    "bits": b,
                    "clients": describe_clients(None, r) if r is not None else "all",
                }
                for lab, b, r in self._records
            ],
            "max_bits_per_client": self.max_bits_per_client(),
        }
