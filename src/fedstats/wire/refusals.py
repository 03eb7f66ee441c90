"""The reason codes a device states when it refuses a run (both sides speak them).

A device that refuses an offered task, a round or a run tells the server why
(``POST /v1/client/runs/{run_id}/refuse``, :mod:`fedstats.service.domain.refusals`): one of
:data:`REASONS` and a message of at most :data:`MAX_MESSAGE` characters without control characters that
names the user's column or file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["MAX_MESSAGE", "REASONS"]

REASONS: Final[Mapping[str, str]] = {
    "data_invalid": "the device's data does not fit the task (a column missing, of the wrong type or "
    "out of range, or the data file unreadable)",
    "policy_refused": "the device's policy refuses the task (analysis not allowed, privacy loss above "
    "its limits, a non-private task, a session or batch below its floor)",
    "budget_exhausted": "the device's local privacy budget cannot cover the task",
    "task_expired": "the task, or its analyst's certificate, expired before the device accepted it",
    "task_unverified": "the task's signature, certificate, population or content did not verify",
    "round_mismatch": "a round differs from the plan the device derived from the task",
    "restarted": "the device restarted and no longer holds the run's accepted task",
    "other": "any other reason (the message says which)",
}
"""The reason codes a device may state, and what each means."""

MAX_MESSAGE: Final = 300
"""Longest refusal message, characters."""
