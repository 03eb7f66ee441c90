"""Typed results shared by every analysis, with a JSON-ready ``to_dict()``.

Every analysis returns a dataclass deriving from :class:`AnalysisResult`: the estimate and its error
(standard error and/or confidence interval), the true value and realised error when simulating, the privacy
spent, and what each client sent.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["AnalysisResult", "to_jsonable"]


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays, tuples, dataclasses and non-finite floats into JSON-ready values.

    Non-finite floats become the strings ``"inf"``, ``"-inf"`` or ``"nan"`` (strict JSON has no such
    numbers).
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if hasattr(obj, "to_dict"):
            return obj.to_dict()
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, float):
        if math.isnan(obj):
            return "nan"
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    return obj


@dataclass
class AnalysisResult:
    """Fields every analysis reports.

    Attributes
    ----------
    analysis : str
        Name of the analysis (``"chi2"``, ``"mean"``, ...).
    estimate : float
        The released estimate.
    ci : tuple of float or None
        Confidence interval ``(low, high)`` at level :attr:`confidence`.
    standard_error : float or None
        Standard error of the estimate, where it has a closed form.
    confidence : float
        Level of :attr:`ci` (default 0.95).
    truth : float or None
        The exact (non-private) value, when simulating.
    epsilon, delta : float or None
        Privacy spent (``None`` when not private).
    n_clients : int
        Clients that took part.
    bits_per_client : float or None
        Private bits each client disclosed (bit metering, paper 001), where meaningful.
    bytes_per_client : int or None
        Bytes each client sent, summed over rounds.
    release_note : str or None
        ``"reproducible (seeded) run: not for release"`` for seeded runs.
    details : dict
        Analysis-specific extra values.
    """

    analysis: str
    estimate: float
    ci: tuple[float, float] | None = None
    standard_error: float | None = None
    confidence: float = 0.95
    truth: float | None = None
    epsilon: float | None = None
    delta: float | None = None
    n_clients: int = 0
    bits_per_client: float | None = None
    bytes_per_client: int | None = None
    release_note: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def error(self) -> float | None:
        """Realised error ``estimate - truth`` (``None`` when the truth is unknown)."""
        return None if self.truth is None else self.estimate - self.truth

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field plus ``error``."""
        out = {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["error"] = to_jsonable(self.error)
        return out
