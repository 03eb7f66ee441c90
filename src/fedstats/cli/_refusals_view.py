"""How ``fedstats admin runs show`` (and ``runs wait``) shows a run's refusals: why devices did not take part."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["refusal_line", "show_refusals"]


def refusal_line(refusals: Any) -> str | None:
    """``"3 devices: data_invalid 2, policy_refused 1"``, or None if no device refused the run."""
    if not isinstance(refusals, dict) or not refusals.get("count"):
        return None
    n = int(refusals["count"])
    parts = ", ".join(f"{code} {k}" for code, k in (refusals.get("by_reason") or {}).items())
    return f"{n} device{'s' if n != 1 else ''}: {parts}"


def show_refusals(console: Console, refusals: Any) -> None:
    """A table of the run's refusal messages (reason code, devices, message), if any."""
    if refusal_line(refusals) is None:
        return
    table = Table(title="refusals")
    for column in ("reason", "devices", "message"):
        table.add_column(column, overflow="fold")
    for m in refusals.get("messages") or ():
        table.add_row(str(m.get("reason")), str(m.get("devices")), str(m.get("message")))
    console.print(table)
