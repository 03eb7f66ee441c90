"""The persistent privacy ledger: budgets per data population and per analyst, reserve-then-spend.

A run is charged when it is created, with its task's privacy loss
(:func:`fedstats.wire.registry.privacy_loss_for`: the loss devices reserve on their own budgets too): inside
one transaction the ledger locks the two budget rows
(population, analyst; ``SELECT ... FOR UPDATE`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), composes the
charges already reserved or spent with the new one through :class:`fedstats.privacy.ledger.PrivacyLedger`
(basic composition, zCDP for Gaussian releases, privacy loss distributions for releases whose mechanisms
are described and stored with the charge and for pure-DP ones, at the delta target
:data:`~fedstats.privacy.ledger.DEFAULT_DELTA_TARGET` capped by the budget's delta, as the device's budget
does; no DP arithmetic here), and either inserts the reservation
or refuses with spent / requested / remaining. Two concurrent requests therefore cannot both pass on the
same remaining budget. When the run's result is stored the charge becomes ``spent`` in the same transaction
(before the result can be read); an aborted run whose rounds released nothing gets it ``released``. One
charge per run (a unique constraint), so a restarted server never charges twice. A released charge is
final: :func:`spend` refuses it (spending it again would skip the budget check that a new reservation makes).
A budget can be raised at any time but not set below what its reserved and spent charges already compose
to (:func:`set_budget`). Every step is written to the audit log.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from typing import Any

from fedstats._validation import check_identifier
from fedstats.errors import BudgetExceededError
from fedstats.privacy.analysis.loss import MechanismSpec, PrivacyLoss
from fedstats.privacy.ledger import DEFAULT_DELTA_TARGET, PrivacyLedger, mechanisms_of
from fedstats.service.store import State
from fedstats.service.store.rows import BudgetRow, ChargeRow

__all__ = [
    "Charge",
    "audit",
    "budget_status",
    "release",
    "reserve",
    "reserved_total",
    "set_budget",
    "spend",
]

SCOPES = ("population", "analyst")


@dataclass(frozen=True)
class Charge:
    """A privacy charge requested for a run.

    Attributes
    ----------
    epsilon : float
    delta : float
    rho : float or None
        zCDP of a Gaussian release (composes by zCDP in the ledger), else None.
    label : str
    mechanisms : tuple of MechanismSpec
        The release's mechanisms when described (composed by their privacy loss distributions too, and
        stored with the charge), else ``()``.
    """

    epsilon: float
    delta: float
    rho: float | None
    label: str
    mechanisms: tuple[MechanismSpec, ...] = ()

    @classmethod
    def of(cls, loss: PrivacyLoss, label: str) -> Charge:
        """The charge of a run whose task has privacy loss ``loss`` (``privacy_loss_for(task)``)."""
        return cls(
            float(loss.epsilon),
            float(loss.delta),
            None if loss.rho is None else float(loss.rho),
            label,
            tuple(loss.mechanisms),
        )


def _mechanisms_json(mechanisms: tuple[MechanismSpec, ...]) -> str | None:
    return json.dumps([m.as_dict() for m in mechanisms]) if mechanisms else None


@functools.lru_cache(maxsize=4096)
def _mechanisms_of(stored: str | None) -> tuple[MechanismSpec, ...]:
    """The mechanisms a charge row stores (none for rows written before they were kept)."""
    return mechanisms_of(json.loads(stored)) if stored else ()


def audit(tx: State, actor: str, action: str, run_id: str | None, **detail: Any) -> None:
    """Append an audit record (in the caller's transaction ``tx``)."""
    tx.add_audit(
        time.time(), actor, action, run_id, json.dumps(detail, sort_keys=True, default=str)
    )


def _replay(rows: list[ChargeRow], delta: float | None) -> PrivacyLedger:
    """Charge rows replayed into a ledger without budget, its delta target capped by ``delta``."""
    # no budget while replaying: these charges were accepted when they were reserved, and checking them
    # again one by one would blame an old run for a budget that is too small now (the budget, once set,
    # caps the delta target itself)
    target = DEFAULT_DELTA_TARGET if delta is None else min(DEFAULT_DELTA_TARGET, delta)
    ledger = PrivacyLedger(delta_target=target)
    for r in rows:
        ledger.spend(
            epsilon=r.epsilon,
            delta=r.delta,
            rho=r.rho,
            label=f"run {r.run_id}",
            mechanisms=_mechanisms_of(r.mechanisms),
        )
    return ledger


def _ledger_of(
    tx: State, budget: BudgetRow, scope: str, delta: float | None = None
) -> PrivacyLedger:
    """The budget's reserved and spent charges replayed (:func:`_replay`)."""
    return _replay(list(tx.charges_on(scope, budget.name)), delta)


def reserved_total(tx: State, scope: str, name: str) -> tuple[float, float, int]:
    """Epsilon and delta of the charges still reserved (not yet spent) on one budget, and their number.

    Composed as :func:`budget_status` composes every charge (the dashboard's "reserved" column).
    """
    rows = list(tx.reserved_charges(scope, name))
    b = tx.budget(scope, name)
    total = _replay(rows, None if b is None else b.delta).total()
    return total.epsilon, total.delta, len(rows)


def _with_budget(ledger: PrivacyLedger, budget: BudgetRow, scope: str) -> PrivacyLedger:
    """Put ``budget`` on a replayed ledger; refuse (naming the budget) if it is below what is spent."""
    try:
        ledger.delta_budget = budget.delta  # first: it caps the delta target
        ledger.epsilon_budget = budget.epsilon
    except BudgetExceededError as exc:  # only a database written before set_budget checked this
        raise BudgetExceededError(f"{scope} {budget.name!r}: {exc}") from None
    return ledger


def reserve(tx: State, *, run_id: str, population: str, analyst: str, charge: Charge) -> None:
    """Reserve ``charge`` on both budgets, in the caller's transaction.

    A population or analyst without a budget row has no budget: nothing can be charged to it.

    Raises
    ------
    BudgetExceededError
        If either budget is missing or would be exceeded; the message gives spent, requested and
        remaining (from :meth:`PrivacyLedger.spend`). Nothing is reserved then.
    """
    # lock in a fixed order (population, then analyst) so concurrent reservations cannot deadlock
    for scope, name in (("population", population), ("analyst", analyst)):
        budget = tx.budget(scope, name, lock=True)
        if budget is None:
            raise BudgetExceededError(
                f"no privacy budget for {scope} {name!r}: spent epsilon=0, delta=0; requested "
                f"epsilon={charge.epsilon:.6g}, delta={charge.delta:.6g}; remaining epsilon=0, delta=0"
            )
        ledger = _with_budget(_ledger_of(tx, budget, scope), budget, scope)
        try:
            ledger.spend(
                epsilon=charge.epsilon,
                delta=charge.delta,
                rho=charge.rho,
                label=charge.label,
                mechanisms=charge.mechanisms,
            )
        except BudgetExceededError as exc:
            raise BudgetExceededError(f"{scope} {name!r}: {exc}") from None
    row = ChargeRow(
        run_id,
        population,
        analyst,
        charge.epsilon,
        charge.delta,
        charge.rho,
        "reserved",
        charge.label,
        _mechanisms_json(charge.mechanisms),
    )
    tx.add_charge(row, time.time())
    audit(
        tx,
        analyst,
        "reserve",
        run_id,
        population=population,
        epsilon=charge.epsilon,
        delta=charge.delta,
        rho=charge.rho,
        **({"mechanisms": [m.as_dict() for m in charge.mechanisms]} if charge.mechanisms else {}),
    )


def spend(tx: State, run_id: str, *, actor: str = "server") -> bool:
    """Turn the run's reservation into a spend (idempotent); return True if it changed now.

    Raises
    ------
    BudgetExceededError
        If the run's charge was released: it no longer counts against any budget, and turning it back
        into a spend would skip the budget check (a released run must not publish a result).
    """
    c = tx.charge_of(run_id)
    if c is None or c.status == "spent":
        return False
    if c.status == "released":
        raise BudgetExceededError(
            f"the privacy charge of run {run_id!r} (epsilon={c.epsilon:.6g}, delta={c.delta:.6g}) was "
            "released; a released charge cannot be spent (it is no longer reserved on any budget)"
        )
    tx.set_charge_status(run_id, "spent", time.time())
    audit(tx, actor, "spend", run_id, epsilon=c.epsilon, delta=c.delta, rho=c.rho)
    return True


def release(tx: State, run_id: str, *, actor: str = "server", reason: str = "") -> bool:
    """Give a reservation back (a run that released nothing); return True if it changed now."""
    c = tx.charge_of(run_id)
    if c is None or c.status != "reserved":
        return False
    tx.set_charge_status(run_id, "released", time.time())
    audit(tx, actor, "release", run_id, reason=reason)
    return True


def set_budget(
    tx: State, scope: str, name: str, *, epsilon: float, delta: float, actor: str
) -> None:
    """Create or change a budget, in the caller's transaction; refuse one below what is already charged.

    Parameters
    ----------
    scope : {"population", "analyst"}
    name : str
    epsilon, delta : float
        The new budget, epsilon in (0, inf), delta in [0, 1).
    actor : str
        Who sets it (audit log).

    Raises
    ------
    BudgetExceededError
        If the reserved and spent charges of ``scope``/``name`` already compose to more than the new
        budget (HTTP 409); the message names the budget, the spent amount and the requested one. Nothing
        changes then.
    """
    check_identifier("name", name)
    b = tx.budget(scope, name, lock=True)
    if b is not None:
        spent = _ledger_of(tx, b, scope)
        try:
            spent.delta_budget = delta
            spent.epsilon_budget = epsilon
        except BudgetExceededError:
            t = spent.total()
            raise BudgetExceededError(
                f"budget of {scope} {name!r} refused: requested epsilon={epsilon:.6g}, "
                f"delta={delta:.6g} is below what is already spent or reserved: epsilon={t.epsilon:.6g}, "
                f"delta={t.delta:.6g} (current budget epsilon={b.epsilon:.6g}, delta={b.delta:.6g})"
            ) from None
    tx.put_budget(scope, name, epsilon, delta)
    audit(tx, actor, "budget", None, scope=scope, name=name, epsilon=epsilon, delta=delta)


def budget_status(tx: State, scope: str, name: str) -> dict[str, Any] | None:
    """Budget, spent (reserved + spent) and remaining of one population or analyst, or None."""
    b = tx.budget(scope, name)
    if b is None:
        return None
    ledger = _ledger_of(tx, b, scope, b.delta)
    total = ledger.total()
    # computed here, not by PrivacyLedger.remaining(): a database written before set_budget refused
    # lower budgets may hold a budget below its spent total (then 0 remains)
    rem_e = max(0.0, b.epsilon - total.epsilon)
    rem_d = max(0.0, b.delta - total.delta)
    return {
        "scope": scope,
        "name": name,
        "epsilon_budget": b.epsilon,
        "delta_budget": b.delta,
        "spent_epsilon": total.epsilon,
        "spent_delta": total.delta,
        "remaining_epsilon": rem_e,
        "remaining_delta": rem_d,
        "charges": len(ledger.entries),
    }
