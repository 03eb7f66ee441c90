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
from fedstats.privacy.ledger import DEFAULT_DELTA_TARGET, PrivacyLedger, mechanisms_of
from fedstats.secagg.collusion import MIN_COLLUDER_FRACTION
from fedstats.wire.registry import lookup, privacy_loss_for
from fedstats.wire.tasks import DEFAULT_MIN_BATCH_SIZE

__all__ = ["LocalBudget", "Policy", "RefusedTask", "is_exact"]


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
        Largest delta of a task's privacy loss, in [0, 1). Default 1e-5. (Across tasks, the device's
        :class:`LocalBudget` composes at its ``delta_target``, default 1e-6, below this.)
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
    min_colluder_fraction : float
        A secure session is refused unless isolating one member's input with 1e-3 chance per run takes at
        least this share of the session as colluders (:func:`fedstats.secagg.collusion.meets_colluder_fraction`
        for the parameters the device derives), in [0, 1]. Default 1/3; every session the service forms
        meets it (:func:`fedstats.secagg.collusion.session_parameters`).
    max_aborted_runs : int
        Runs of one secure task that may abort after this device revealed its seed contribution before it
        stops joining that task (each aborted run is a fresh seed, hence a fresh graph, for a server that
        grinds), >= 0. Default 2.
    max_exact_runs_per_task, max_exact_runs_per_analyst : int
        Runs of exact (non-private) tasks this device takes part in, per task and per analyst (the name
        in the task's signed certificate), >= 0: two exact releases whose cohorts differ in this device
        give its value by subtraction, so a second one needs the device's consent (a larger limit).
        Counted at check-in and given back if the run ends before the device encoded anything
        (:class:`LocalBudget`). Default 1 and 1.
    """

    allowed_analyses: tuple[str, ...] | None = None
    max_epsilon: float = 4.0
    max_delta: float = 1e-5
    max_bits: float | None = None
    allow_non_private: bool = False
    min_session_size: int = 10
    min_batch_size: int = DEFAULT_MIN_BATCH_SIZE
    min_colluder_fraction: float = MIN_COLLUDER_FRACTION
    max_aborted_runs: int = 2
    max_exact_runs_per_task: int = 1
    max_exact_runs_per_analyst: int = 1

    def __post_init__(self) -> None:
        f = self.min_colluder_fraction
        if not (isinstance(f, (int, float)) and 0.0 <= f <= 1.0):
            raise ParameterError("min_colluder_fraction", f, "a number in [0, 1]")
        for name in ("max_aborted_runs", "max_exact_runs_per_task", "max_exact_runs_per_analyst"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ParameterError(name, v, "an integer >= 0")

    def check_history(
        self,
        task: Mapping[str, Any],
        task_id: str,
        analyst: str,
        budget: LocalBudget,
        run_id: str | None = None,
    ) -> None:
        """Raise :class:`RefusedTask` if this device's own history with the task refuses another run.

        A secure task with ``max_aborted_runs`` runs that aborted after this device revealed
        (:meth:`LocalBudget.aborted_runs`), or an exact task past ``max_exact_runs_per_task`` or
        ``max_exact_runs_per_analyst`` (:meth:`LocalBudget.exact_runs`; ``run_id``, a run offered
        again after this device counted it, is not counted against itself).
        """
        if task.get("secure_aggregation") is not None:
            aborted = budget.aborted_runs(task_id)
            if aborted >= self.max_aborted_runs:
                raise RefusedTask(
                    f"{aborted} run(s) of this task aborted after this device revealed its seed "
                    f"contribution; the policy's max_aborted_runs is {self.max_aborted_runs}"
                )
        if not is_exact(task):
            return
        per_task = budget.exact_runs(task=task_id, excluding=run_id)
        per_analyst = budget.exact_runs(analyst=analyst, excluding=run_id)
        if per_task >= self.max_exact_runs_per_task:
            raise RefusedTask(
                f"this device took part in {per_task} run(s) of this exact task; the policy's "
                f"max_exact_runs_per_task is {self.max_exact_runs_per_task} (two exact releases "
                "difference to one device's value)"
            )
        if per_analyst >= self.max_exact_runs_per_analyst:
            raise RefusedTask(
                f"this device took part in {per_analyst} exact run(s) of analyst {analyst!r}; the "
                f"policy's max_exact_runs_per_analyst is {self.max_exact_runs_per_analyst}"
            )

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


def is_exact(task: Mapping[str, Any]) -> bool:
    """Whether a (verified) task releases exact, non-private values (infinite epsilon, or privacy none)."""
    try:
        spec = lookup(str(task["analysis"]), int(task["version"]))
        return spec.privacy == "none" or not math.isfinite(privacy_loss_for(task).epsilon)
    except (ParameterError, KeyError, TypeError, ValueError):
        return False


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
    :class:`fedstats.privacy.ledger.PrivacyLedger` (the smallest of basic composition, zCDP for Gaussian
    releases with rho, and privacy loss distributions, at ``delta_target`` for pure-DP charges), every
    charge counted against every record of the device (it cannot
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
    has them (a file of the older form ``{run_id: [epsilon, delta]}`` reads as spent charges), and the
    device's history that its :class:`Policy` counts: ``"exact"`` (:attr:`exact`) and ``"aborted"``
    (:attr:`aborted`).

    Parameters
    ----------
    path : path or None
        File of the charges (None: in memory only).
    epsilon : float
        Total epsilon the device will spend, > 0.
    delta : float
        Total delta, in [0, 1).
    delta_target : float
        The delta at which the charges are composed when their declared deltas sum to less, in [0, 1),
        capped by ``delta``: pure-DP charges (randomized response, Laplace, the performance gap's
        randomizers) compose by their privacy loss distributions at this delta, far below their summed
        epsilons (100 randomized responses at epsilon 0.1: 4.77 at 1e-6, 10 by basic composition).
        Default :data:`fedstats.privacy.ledger.DEFAULT_DELTA_TARGET` (1e-6), the server ledger's too
        (docs/privacy.md, "Delta target").
    """

    path: Path | None
    epsilon: float = 10.0
    delta: float = 1e-4
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    delta_target: float = DEFAULT_DELTA_TARGET
    exact: dict[str, dict[str, str]] = field(default_factory=dict)
    """``run_id -> {"task", "analyst", "status"}``: the exact (non-private) runs this device joined
    (:meth:`reserve_exact`), ``"reserved"`` until it encodes, then ``"spent"``."""
    aborted: dict[str, list[str]] = field(default_factory=dict)
    """``task_id -> [run_id, ...]``: runs of a secure task that aborted after this device revealed."""

    def __post_init__(self) -> None:
        if not (isinstance(self.epsilon, (int, float)) and 0 < self.epsilon < math.inf):
            raise ParameterError("budget epsilon", self.epsilon, "a number in (0, inf)")
        if not (isinstance(self.delta, (int, float)) and 0 <= self.delta < 1):
            raise ParameterError("budget delta", self.delta, "a number in [0, 1)")
        if not (isinstance(self.delta_target, (int, float)) and 0 <= self.delta_target < 1):
            raise ParameterError("budget delta_target", self.delta_target, "a number in [0, 1)")
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
            try:
                self.exact, self.aborted = _history_of(data, str(self.path))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ParameterError(
                    "budget file", str(self.path), f"a local budget file ({exc})"
                ) from None

    # -- the arithmetic: the server's (fedstats.service.domain.ledger replays its charges the same way)
    def _ledger(self) -> PrivacyLedger:
        ledger = PrivacyLedger(delta_target=min(self.delta_target, self.delta))
        for rid, c in self.charges.items():
            ledger.spend(
                epsilon=c["epsilon"],
                delta=c["delta"],
                rho=c["rho"],
                label=f"run {rid}",
                mechanisms=mechanisms_of(c.get("mechanisms", ())),
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
            ledger.delta_budget = (
                self.delta
            )  # first: it caps the delta target the epsilon is read at
            ledger.epsilon_budget = self.epsilon
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

        An exact run's entry (:meth:`reserve_exact`) becomes spent too.

        Raises
        ------
        BudgetExceededError
            If there was no reservation and ``loss`` does not fit.
        """
        entry = self.exact.get(run_id)
        if entry is not None and entry["status"] != "spent":
            entry["status"] = "spent"
            self._save()
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
        """Give back a reservation (a charge, an exact run) never spent; return whether one was released."""
        released = False
        entry = self.exact.get(run_id)
        if entry is not None and entry["status"] == "reserved":
            del self.exact[run_id]
            released = True
        c = self.charges.get(run_id)
        if c is not None and c["status"] == "reserved":
            del self.charges[run_id]
            released = True
        if released:
            self._save()
        return released

    def reserve_exact(self, run_id: str, task_id: str, analyst: str) -> None:
        """Count an exact run this device checks in to (idempotent; given back by :meth:`release`)."""
        if run_id not in self.exact:
            self.exact[run_id] = {"task": task_id, "analyst": analyst, "status": "reserved"}
            self._save()

    def exact_runs(
        self, *, task: str | None = None, analyst: str | None = None, excluding: str | None = None
    ) -> int:
        """Exact runs counted (reserved or spent) of ``task``, or of ``analyst``, but ``excluding``."""
        return sum(
            1
            for rid, e in self.exact.items()
            if rid != excluding
            and (task is None or e["task"] == task)
            and (analyst is None or e["analyst"] == analyst)
        )

    def note_aborted(self, task_id: str, run_id: str) -> None:
        """Count a run of a secure task that aborted after this device revealed (idempotent)."""
        runs = self.aborted.setdefault(task_id, [])
        if run_id not in runs:
            runs.append(run_id)
            self._save()

    def aborted_runs(self, task_id: str) -> int:
        """Runs of ``task_id`` counted by :meth:`note_aborted`."""
        return len(self.aborted.get(task_id, ()))

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
                        "exact": self.exact,
                        "aborted": self.aborted,
                    },
                    indent=1,
                    sort_keys=True,
                ),
                durable=True,  # on disk (file and folder) before the device checks in or uploads
            )


def _history_of(
    data: Mapping[str, Any], path: str
) -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
    """The ``"exact"`` and ``"aborted"`` parts of a budget file (absent in files written before them)."""
    exact: dict[str, dict[str, str]] = {}
    for rid, e in (data.get("exact") or {}).items():
        if e.get("status") not in _STATUSES:
            raise ParameterError("budget file", path, f"a local budget file (exact run {rid!r})")
        exact[str(rid)] = {
            "task": str(e["task"]),
            "analyst": str(e["analyst"]),
            "status": str(e["status"]),
        }
    aborted = {str(t): [str(r) for r in runs] for t, runs in (data.get("aborted") or {}).items()}
    return exact, aborted
