"""What a device agrees to: its :class:`Policy` for offered tasks and its :class:`LocalBudget` of privacy.

The device (:class:`fedstats.client.Device`) checks every offered (signed) task against both before it
checks in. Both use the analysis's one privacy loss (:func:`fedstats.wire.registry.privacy_loss_for`:
epsilon, delta and rho where the mechanism gives it), the loss the server's ledger charges too, and the
budget composes charges with :class:`fedstats.privacy.ledger.PrivacyLedger`, as the server does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedstats._io import atomic_write_text
from fedstats.errors import BudgetExceededError, FedstatsError, ParameterError
from fedstats.privacy.analysis.loss import MechanismSpec, PrivacyLoss
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.wire.registry import lookup, privacy_loss_for
from fedstats.wire.tasks import DEFAULT_MIN_BATCH_SIZE

__all__ = ["LocalBudget", "Policy", "RefusedTask"]


@dataclass(frozen=True)
class Policy:
    """What a device agrees to take part in.

    Parameters
    ----------
    allowed_analyses : tuple of str or None
        Analysis names the device runs (None: every installed analysis).
    max_epsilon : float
        Largest epsilon one task may spend on this device's records (> 0): a task whose privacy loss
        (:func:`fedstats.wire.registry.privacy_loss_for`, the mechanism's true loss, not the task's nominal
        epsilon) is larger is weaker privacy and is refused. Default 4.
    max_delta : float
        Largest delta of a task's privacy loss, in [0, 1). Default 1e-5.
    max_bits : float or None
        Largest number of private bits one record may disclose (bit metering); tasks whose analysis does not
        meter bits disclose a full (noisy) value and pass only when this is None. Default None.
    allow_non_private : bool
        Take part in exact, non-private analyses (default False).
    min_session_size : int
        Smallest secure-aggregation session the device joins (its floor beside the task's own minimum;
        a smaller session is refused before anything is computed). Default 10.
    min_batch_size : int
        Smallest Prio3 batch the device contributes to: a Prio3 task whose ``prio3.min_batch_size`` is
        smaller is refused before anything is reserved or sharded (a leader that aggregates the victim's
        report alone needs ``min_batch_size - 1`` enrolled Sybils to pass collection). Default 10.
    """

    allowed_analyses: tuple[str, ...] | None = None
    max_epsilon: float = 4.0
    max_delta: float = 1e-5
    max_bits: float | None = None
    allow_non_private: bool = False
    min_session_size: int = 10
    min_batch_size: int = DEFAULT_MIN_BATCH_SIZE

    def check(self, task: Mapping[str, Any]) -> None:
        """Raise :class:`RefusedTask` saying why, if a verified task is weaker than this policy allows.

        The task's privacy is judged by its privacy loss (:func:`fedstats.wire.registry.privacy_loss_for`);
        an infinite epsilon (or an analysis registered as not private) is a non-private task.
        """
        name, version = str(task["analysis"]), int(task["version"])
        if self.allowed_analyses is not None and name not in self.allowed_analyses:
            raise RefusedTask(f"analysis {name!r} is not in the allowed analyses")
        try:
            spec = lookup(name, version)
            loss = privacy_loss_for(task)
        except (ParameterError, KeyError, TypeError, ValueError) as exc:
            raise RefusedTask(
                f"analysis {name} v{version} is not installed or invalid: {exc}"
            ) from None
        if not math.isfinite(loss.epsilon) or spec.privacy == "none":
            if not self.allow_non_private:
                raise RefusedTask(f"{name} is not private and the policy refuses non-private tasks")
        else:
            if loss.epsilon > self.max_epsilon:
                raise RefusedTask(
                    f"privacy loss epsilon {loss.epsilon:.6g} exceeds the policy's max_epsilon "
                    f"{self.max_epsilon}"
                )
            if loss.delta > self.max_delta:
                raise RefusedTask(
                    f"privacy loss delta {loss.delta:.3g} exceeds the policy's max_delta {self.max_delta}"
                )
        route = task.get("prio3")
        if isinstance(route, Mapping):
            batch = int(route.get("min_batch_size", 0))
            if batch < self.min_batch_size:
                raise RefusedTask(
                    f"the Prio3 task's min_batch_size {batch} is below the policy's min_batch_size "
                    f"{self.min_batch_size}"
                )
        if self.max_bits is not None:
            bits = spec.bits_per_record(task.get("params") or {})
            if bits is None or bits > self.max_bits:
                raise RefusedTask(
                    f"{name} discloses {'unmetered' if bits is None else bits} bit(s) per record; "
                    f"the policy allows {self.max_bits}"
                )


class RefusedTask(FedstatsError):
    """A task the device's policy or local budget refuses."""


_STATUSES = ("reserved", "spent")


def _check_charge(run: str, charge: Mapping[str, Any]) -> None:
    """Refuse a budget-file charge that is negative or not finite: it would read as extra budget."""
    for name, high in (("epsilon", math.inf), ("delta", 1.0), ("rho", math.inf)):
        value = charge.get(name)
        if name == "rho" and value is None:
            continue
        if not (isinstance(value, (int, float)) and 0 <= value <= high and math.isfinite(value)):
            raise ValueError(
                f"run {run!r} charges {name} {value!r}: a charge must be finite and >= 0 (a negative "
                "charge would add budget)"
            )


@dataclass
class LocalBudget:
    """The device's own privacy budget across runs, kept in a JSON file (written atomically, fsync'd).

    Each run is charged once, with its task's privacy loss (:func:`fedstats.wire.registry.privacy_loss_for`,
    the loss the server's ledger charges), and charges compose exactly as the server composes them: through
    :class:`fedstats.privacy.ledger.PrivacyLedger` (basic composition of epsilon and delta; Gaussian
    releases with rho also by zCDP, described releases also by their privacy loss distributions), every charge counted against every record of the device (it cannot
    know how the server's other runs relate to its data). A non-private loss (infinite epsilon) is not a
    DP charge: the policy decides about non-private tasks, and nothing is recorded.

    A charge is **reserved** when the device checks in (before anything of its data is used), becomes
    **spent** just before the device first encodes its data for the run, and is **released** (removed) if
    the run is refused, the check-in fails, or the run ends before the device encoded anything. Every
    change is on disk (the file and its folder ``fsync``'d) before the method returns, so before the
    device checks in or uploads: a power loss cannot lose a charge whose report left the device.

    The file: ``{"epsilon", "delta", "composition": "PrivacyLedger", "charges": {run_id: {"epsilon",
    "delta", "rho", "status"[, "mechanisms"]}}}``, ``"mechanisms"`` (the
    :class:`~fedstats.privacy.analysis.loss.MechanismSpec` dicts of a described loss) only when the loss
    has them (a file of the older form ``{run_id: [epsilon, delta]}`` reads as spent charges).

    Parameters
    ----------
    path : path or None
        File of the charges (None: in memory only).
    epsilon : float
        Total epsilon the device will spend, > 0.
    delta : float
        Total delta, in [0, 1).
    """

    path: Path | None
    epsilon: float = 10.0
    delta: float = 1e-4
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.epsilon, (int, float)) and 0 < self.epsilon < math.inf):
            raise ParameterError("budget epsilon", self.epsilon, "a number in (0, inf)")
        if not (isinstance(self.delta, (int, float)) and 0 <= self.delta < 1):
            raise ParameterError("budget delta", self.delta, "a number in [0, 1)")
        if self.path is not None and Path(self.path).exists():
            try:
                data = json.loads(Path(self.path).read_text())
                charges: dict[str, dict[str, Any]] = {}
                for k, v in data["charges"].items():
                    if isinstance(v, list):  # the older form: [epsilon, delta], spent
                        v = {"epsilon": v[0], "delta": v[1], "rho": None, "status": "spent"}
                    if v["status"] not in _STATUSES:
                        raise ValueError(f"status {v['status']!r}")
                    _check_charge(str(k), v)
                    charges[str(k)] = {
                        "epsilon": float(v["epsilon"]),
                        "delta": float(v["delta"]),
                        "rho": None if v.get("rho") is None else float(v["rho"]),
                        "status": str(v["status"]),
                    }
                    if v.get("mechanisms"):  # files written before mechanisms were kept have none
                        charges[str(k)]["mechanisms"] = [
                            MechanismSpec.from_dict(m).as_dict() for m in v["mechanisms"]
                        ]
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ParameterError(
                    "budget file", str(self.path), f"a local budget file ({exc})"
                ) from None
            self.charges = charges

    # -- the arithmetic: the server's (fedstats.service.domain.ledger replays its charges the same way)
    def _ledger(self) -> PrivacyLedger:
        ledger = PrivacyLedger()
        for rid, c in self.charges.items():
            ledger.spend(
                epsilon=c["epsilon"],
                delta=c["delta"],
                rho=c["rho"],
                label=f"run {rid}",
                mechanisms=[MechanismSpec.from_dict(m) for m in c.get("mechanisms", ())],
            )
        return ledger

    def total(self) -> PrivacyLoss:
        """The composed loss of every reserved and spent charge (epsilon, delta, rho)."""
        return self._ledger().total()

    def spent(self) -> tuple[float, float]:
        """(epsilon, delta) composed over the reserved and spent charges."""
        t = self.total()
        return t.epsilon, t.delta

    def check(self, loss: PrivacyLoss) -> None:
        """Raise :class:`RefusedTask` if a charge of ``loss`` more would exceed the budget."""
        if not math.isfinite(loss.epsilon):
            return
        ledger = self._ledger()
        try:
            ledger.epsilon_budget = self.epsilon
            ledger.delta_budget = self.delta
            ledger.spend_loss(loss, label="requested")
        except BudgetExceededError as exc:
            raise RefusedTask(f"local budget: {exc}") from None

    def reserve(self, run_id: str, loss: PrivacyLoss) -> None:
        """Reserve ``loss`` for ``run_id`` (idempotent), then save.

        Raises
        ------
        BudgetExceededError
            If it does not fit (nothing is recorded then).
        """
        if run_id in self.charges or not math.isfinite(loss.epsilon):
            return
        try:
            self.check(loss)
        except RefusedTask as exc:
            raise BudgetExceededError(str(exc)) from None
        self.charges[run_id] = {
            "epsilon": float(loss.epsilon),
            "delta": float(loss.delta),
            "rho": None if loss.rho is None else float(loss.rho),
            "status": "reserved",
        }
        if loss.mechanisms:
            self.charges[run_id]["mechanisms"] = [m.as_dict() for m in loss.mechanisms]
        self._save()

    def spend(self, run_id: str, loss: PrivacyLoss) -> None:
        """Turn the run's reservation into a spend (reserving ``loss`` first if there is none); save.

        Raises
        ------
        BudgetExceededError
            If there was no reservation and ``loss`` does not fit.
        """
        if not math.isfinite(loss.epsilon):
            return
        self.reserve(run_id, loss)
        if self.charges[run_id]["status"] != "spent":
            self.charges[run_id]["status"] = "spent"
            self._save()

    def unspend(self, run_id: str) -> None:
        """Turn a spend back into a reservation (the device's first encoding failed: nothing was sent)."""
        c = self.charges.get(run_id)
        if c is not None and c["status"] == "spent":
            c["status"] = "reserved"
            self._save()

    def charge(self, run_id: str, loss: PrivacyLoss) -> None:
        """Reserve and spend ``loss`` for ``run_id`` at once (idempotent)."""
        self.spend(run_id, loss)

    def release(self, run_id: str) -> bool:
        """Give back a reservation that was never spent; return whether one was released."""
        c = self.charges.get(run_id)
        if c is None or c["status"] != "reserved":
            return False
        del self.charges[run_id]
        self._save()
        return True

    def status(self, run_id: str) -> str | None:
        """``"reserved"``, ``"spent"`` or None (no charge) for ``run_id``."""
        c = self.charges.get(run_id)
        return None if c is None else str(c["status"])

    def _save(self) -> None:
        if self.path is not None:
            atomic_write_text(
                self.path,
                json.dumps(
                    {
                        "epsilon": self.epsilon,
                        "delta": self.delta,
                        "composition": "PrivacyLedger",
                        "charges": self.charges,
                    },
                    indent=1,
                    sort_keys=True,
                ),
                durable=True,  # on disk (file and folder) before the device checks in or uploads
            )
