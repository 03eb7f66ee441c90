"""What a device agrees to: its :class:`Policy` for offered tasks and its :class:`LocalBudget` of privacy.

The device (:class:`fedstats.client.Device`) checks every offered task against both before it checks in,
and charges the budget before any report leaves the device.
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
from fedstats.wire.registry import lookup

__all__ = ["LocalBudget", "Policy", "RefusedTask"]


@dataclass(frozen=True)
class Policy:
    """What a device agrees to take part in.

    Parameters
    ----------
    allowed_analyses : tuple of str or None
        Analysis names the device runs (None: every installed analysis).
    max_epsilon : float
        Largest epsilon one task may spend on this device's records (> 0): a task asking more is weaker
        privacy and is refused. Default 4.
    max_delta : float
        Largest delta per task, in [0, 1). Default 1e-5.
    max_bits : float or None
        Largest number of private bits one record may disclose (bit metering); tasks whose analysis does not
        meter bits disclose a full (noisy) value and pass only when this is None. Default None.
    allow_non_private : bool
        Take part in exact, non-private analyses (default False).
    min_session_size : int
        Smallest secure-aggregation session the device joins (its floor beside the task's own minimum;
        a smaller session is refused before anything is computed). Default 10.
    """

    allowed_analyses: tuple[str, ...] | None = None
    max_epsilon: float = 4.0
    max_delta: float = 1e-5
    max_bits: float | None = None
    allow_non_private: bool = False
    min_session_size: int = 10

    def check(self, task: Mapping[str, Any]) -> None:
        """Raise :class:`RefusedTask` saying why, if ``task`` is weaker than this policy allows."""
        name, version = str(task["analysis"]), int(task["version"])
        if self.allowed_analyses is not None and name not in self.allowed_analyses:
            raise RefusedTask(f"analysis {name!r} is not in the allowed analyses")
        try:
            spec = lookup(name, version)
        except ParameterError:
            raise RefusedTask(f"analysis {name} v{version} is not installed") from None
        eps = task["privacy"]["epsilon"]
        delta = float(task["privacy"].get("delta") or 0.0)
        if eps is None or spec.privacy == "none":
            if not self.allow_non_private:
                raise RefusedTask(f"{name} is not private and the policy refuses non-private tasks")
        else:
            if float(eps) > self.max_epsilon:
                raise RefusedTask(
                    f"epsilon {eps} exceeds the policy's max_epsilon {self.max_epsilon}"
                )
            if delta > self.max_delta:
                raise RefusedTask(f"delta {delta} exceeds the policy's max_delta {self.max_delta}")
        if self.max_bits is not None:
            bits = spec.bits_per_record(task.get("params") or {})
            if bits is None or bits > self.max_bits:
                raise RefusedTask(
                    f"{name} discloses {'unmetered' if bits is None else bits} bit(s) per record; "
                    f"the policy allows {self.max_bits}"
                )


class RefusedTask(FedstatsError):
    """A task the device's policy or local budget refuses."""


@dataclass
class LocalBudget:
    """The device's own local-DP budget across tasks, kept in a JSON file (written atomically).

    Each run the device reports to is charged once, with the task's (epsilon, delta), by basic composition
    (the device cannot know how the server's other runs relate to its data).

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
    charges: dict[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.path is not None and Path(self.path).exists():
            data = json.loads(Path(self.path).read_text())
            self.charges = {k: (float(v[0]), float(v[1])) for k, v in data["charges"].items()}

    def spent(self) -> tuple[float, float]:
        """(epsilon, delta) spent so far."""
        return (
            math.fsum(e for e, _ in self.charges.values()),
            math.fsum(d for _, d in self.charges.values()),
        )

    def check(self, epsilon: float, delta: float) -> None:
        """Raise :class:`RefusedTask` if (epsilon, delta) more would exceed the budget."""
        e, d = self.spent()
        if (
            e + epsilon > self.epsilon * (1 + 1e-12)
            or d + delta > self.delta * (1 + 1e-12) + 1e-300
        ):
            raise RefusedTask(
                f"local budget: spent epsilon={e:.6g}, delta={d:.3g}; requested epsilon={epsilon:.6g}, "
                f"delta={delta:.3g}; remaining epsilon={max(0.0, self.epsilon - e):.6g}, "
                f"delta={max(0.0, self.delta - d):.3g}"
            )

    def charge(self, run_id: str, epsilon: float, delta: float) -> None:
        """Record the charge of a run (idempotent), then save.

        Raises
        ------
        BudgetExceededError
            If it does not fit.
        """
        if run_id in self.charges:
            return
        try:
            self.check(epsilon, delta)
        except RefusedTask as exc:
            raise BudgetExceededError(str(exc)) from None
        self.charges[run_id] = (float(epsilon), float(delta))
        if self.path is not None:
            atomic_write_text(
                self.path,
                json.dumps({"epsilon": self.epsilon, "delta": self.delta, "charges": self.charges}),
            )
