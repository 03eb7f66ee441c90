"""Devices' refusals of runs: why a device did not take part, stated to the server and counted per run.

A device that refuses an offered task, a round, or a whole run (:mod:`fedstats.client`) tells the server
why, in a signed request (``POST /v1/client/runs/{run_id}/refuse``, signed as its other requests) with
a **reason code** from :data:`REASONS` and a short **message** that names the user's column or file (never
an internal parameter name nor a path on the device). The server keeps the first refusal of each
(run, device) (:meth:`~fedstats.service.store.core.CoreQueries.add_refusal`); the operator reads them
per run (``fedstats admin runs show``, the dashboard), and a run that aborts says how many devices
refused it and why (:func:`abort_summary`), e.g. ``20 of 20 devices refused: category column colour must
hold integer codes in [0, 2) (20)``.

The message follows the edge rules of identifiers and labels: at most :data:`MAX_MESSAGE` characters, no
control character (Unicode category C: NUL, tab, newline, escape, ...).
"""

from __future__ import annotations

import time
import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import Any

from fedstats.errors import ParameterError
from fedstats.service.domain.tasks import NotFoundError, task_config
from fedstats.service.store import State
from fedstats.service.store.rows import RefusalRow
from fedstats.wire.refusals import MAX_MESSAGE, REASONS

__all__ = [
    "MAX_MESSAGE",
    "REASONS",
    "abort_summary",
    "check_refusal",
    "record_refusal",
    "refusal_view",
]


def check_refusal(reason: Any, message: Any) -> tuple[str, str]:
    """A refusal's ``(reason, message)`` if they are acceptable.

    Raises
    ------
    ParameterError
        Naming ``reason`` if it is not one of :data:`REASONS`; naming ``message`` if it is not a string
        of 1 to :data:`MAX_MESSAGE` characters without control characters (HTTP 422).
    """
    if not isinstance(reason, str) or reason not in REASONS:
        raise ParameterError("reason", reason, f"one of {', '.join(REASONS)}")
    if not isinstance(message, str) or not 1 <= len(message) <= MAX_MESSAGE:
        shown = message if not isinstance(message, str) else f"{len(message)} characters"
        raise ParameterError("message", shown, f"a string of 1 to {MAX_MESSAGE} characters")
    if any(unicodedata.category(c).startswith("C") for c in message):
        raise ParameterError(
            "message", "a control character", "text without control characters (Unicode category C)"
        )
    return reason, message


def record_refusal(
    tx: State, run_id: str, client_id: str, population: str, reason: Any, message: Any
) -> bool:
    """Record a device's refusal of a run (in the caller's transaction); False if it refused it already.

    Parameters
    ----------
    tx : State
    run_id, client_id : str
    population : str
        The device's population (from its certificate): a run of another population is refused.
    reason, message
        As the device sent them (checked by :func:`check_refusal`).

    Raises
    ------
    ParameterError
        See :func:`check_refusal`.
    NotFoundError
        If there is no such run, or it is for another population (the device learns nothing of it).
    """
    reason, message = check_refusal(reason, message)
    run = tx.run(run_id)
    if run is None or task_config(tx, run.task_id)["privacy"]["population"] != population:
        raise NotFoundError(f"no run {run_id!r} for this device")
    return tx.add_refusal(run_id, client_id, reason, message, time.time())


def _groups(rows: Sequence[RefusalRow]) -> list[tuple[str, int]]:
    """Distinct messages with the number of devices that gave each, most frequent first."""
    return Counter(r.message for r in rows).most_common()


def abort_summary(tx: State, run_id: str) -> str | None:
    """``"k of n devices refused: message (count); ..."`` for a run some devices refused, else None.

    ``n`` counts the devices that answered the run: those in its cohort and those that refused the offer
    without checking in. The three most frequent messages are shown with their numbers of devices.
    """
    rows = tx.refusals_of(run_id)
    if not rows:
        return None
    devices = tx.cohort(run_id).devices + sum(
        1 for r in rows if tx.member(run_id, r.client_id) is None
    )
    groups = _groups(rows)
    shown = "; ".join(f"{m} ({n})" for m, n in groups[:3])
    more = "" if len(groups) <= 3 else f"; {len(groups) - 3} other reason(s)"
    return f"{len(rows)} of {max(devices, len(rows))} devices refused: {shown}{more}"


def refusal_view(tx: State, run_id: str) -> dict[str, Any]:
    """A run's refusals for the operator: their count, by reason code, and each distinct message.

    Returns
    -------
    dict
        ``{"count", "by_reason": {code: devices}, "messages": [{"reason", "message", "devices"}]}``
        (messages most frequent first, at most 20).
    """
    rows = tx.refusals_of(run_id)
    by_reason = Counter(r.reason for r in rows)
    pairs = Counter((r.reason, r.message) for r in rows).most_common(20)
    return {
        "count": len(rows),
        "by_reason": dict(sorted(by_reason.items())),
        "messages": [{"reason": c, "message": m, "devices": n} for (c, m), n in pairs],
    }
