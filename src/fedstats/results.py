"""Typed results shared by every analysis, with a JSON-ready ``to_dict()``.

Every analysis returns a dataclass deriving from :class:`AnalysisResult`: the estimate and its error
(standard error and/or confidence interval), the true value and realised error when simulating, the privacy
spent, and what each client sent.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["AnalysisResult", "non_finite_fields", "released_summary", "to_jsonable"]


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays, tuples, dataclasses and non-finite floats into JSON-ready values.

    Non-finite floats become ``None`` (JSON ``null``): strict JSON has no such numbers, and a string in a
    numeric field would break every consumer that reads it as a number. Results say why a field is null
    (:func:`non_finite_fields`).
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
        return obj if math.isfinite(obj) else None
    return obj


def non_finite_fields(values: dict[str, Any]) -> dict[str, str]:
    """Name the top-level numeric entries of ``values`` that are non-finite, and what they were.

    Parameters
    ----------
    values : dict
        Field name to value (numbers, arrays, anything else is ignored).

    Returns
    -------
    dict of str to str
        ``{"p_value": "nan", "epsilon": "inf"}``: the reason a field is ``null`` in the JSON output.
    """
    out: dict[str, str] = {}
    for name, v in values.items():
        if isinstance(v, (float, np.floating)) and not math.isfinite(float(v)):
            out[name] = "nan" if math.isnan(float(v)) else ("inf" if float(v) > 0 else "-inf")
    return out


def _num(value: Any) -> str:
    return f"{float(value):.4g}" if isinstance(value, (int, float)) else str(value)


_STATISTICS = {
    "chi2": "chi-square statistic",
    "exact.chi2": "chi-square statistic",
    "entropy.g_test": "G statistic",
}
"""Analyses whose estimate is a test statistic: what it is called in a released result's line."""

_QUANTITIES = {"entropy.shannon": "entropy (nats)"}
"""Other analyses whose bare estimate would not say what it is."""


def _test_outcome(payload: dict[str, Any]) -> str:
    """``, dof 2, p = 0.7: independence not rejected at 0.05`` for a test's result (what it holds)."""
    out = ""
    if isinstance(payload.get("dof"), (int, float)):
        out += f", dof {_num(payload['dof'])}"
    p = payload.get("p_value")
    if isinstance(p, (int, float)):
        out += f", p = {_num(p)}"
        level = payload.get("level")
        if isinstance(level, (int, float)):
            verdict = "rejected" if p <= level else "not rejected"
            out += f": independence {verdict} at {_num(level)}"
    return out


def released_summary(payload: Any) -> str:
    """One line for a released result: ``estimate [low, high] (privacy spent: epsilon e, delta d)``.

    A test's statistic is named, with its degrees of freedom, p-value and decision: ``chi-square
    statistic 0.71 [0.5, 1.1], dof 2, p = 0.7: independence not rejected at 0.05 (privacy spent: none
    (exact))``; an entropy says it is one, in nats.

    Used by ``fedstats admin runs wait|show`` and the operator dashboard, instead of the result's JSON.

    Parameters
    ----------
    payload : dict or None
        A result as stored by the server (:meth:`AnalysisResult.to_dict`, possibly with ``n_devices``
        and ``n_records``), or ``{"value": ...}`` for a result that is not an :class:`AnalysisResult`.

    Returns
    -------
    str
        Numbers to 4 significant digits; the interval with its level when it is not 95%; ``-`` for no
        result. The warnings are not included (the caller lists them, one per line).
    """
    if not isinstance(payload, dict):
        return "-" if payload is None else str(payload)
    if "estimate" not in payload:
        return json.dumps(payload.get("value", payload), sort_keys=True, separators=(",", ":"))
    analysis = str(payload.get("analysis", ""))
    name = _STATISTICS.get(analysis) or _QUANTITIES.get(analysis)
    line = (f"{name} " if name else "") + _num(payload["estimate"])
    ci = payload.get("ci")
    if isinstance(ci, (list, tuple)) and len(ci) == 2:
        level = payload.get("confidence", 0.95)
        at = "" if level in (None, 0.95) else f" {100 * float(level):g}%"
        line += f" [{_num(ci[0])}, {_num(ci[1])}]{at}"
    if analysis in _STATISTICS:
        line += _test_outcome(payload)
    spent = [
        f"{name} {_num(payload[name])}"
        for name in ("epsilon", "delta")
        if payload.get(name) is not None
    ]
    line += f" (privacy spent: {', '.join(spent) if spent else 'none (exact)'})"
    if payload.get("n_devices") is not None:
        line += f", {payload['n_devices']} devices"
    return line


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
    warnings : tuple of str
        Why the result may not be useful as it stands: an interval covering most of the declared range, a
        test with little power at a stated effect (:mod:`fedstats.analyses.usefulness`), or an
        analysis-specific caution (an estimate clipped to its range, a rare category). Empty when there
        is nothing to say.
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
    warnings: tuple[str, ...] = ()

    def warn(self, message: str) -> None:
        """Append ``message`` to :attr:`warnings` (once)."""
        if message not in self.warnings:
            self.warnings = (*self.warnings, message)

    @property
    def error(self) -> float | None:
        """Realised error ``estimate - truth`` (``None`` when the truth is unknown)."""
        return None if self.truth is None else self.estimate - self.truth

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field plus ``error``.

        Non-finite numbers are ``null``; ``"non_finite"`` then maps each such field to what it was
        (``"inf"``, ``"-inf"`` or ``"nan"``), so a reader can tell "infinite" from "unknown".
        """
        raw = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        raw["error"] = self.error
        out = {k: to_jsonable(v) for k, v in raw.items()}
        why = non_finite_fields(raw)
        if why:
            out["non_finite"] = why
        return out
