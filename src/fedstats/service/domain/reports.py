"""Checks of a plain round's report against what the device may claim: its records, the round's shape.

A device reports the sum of its records' reports and their count. The count must equal the number of the
device's slots inside the round's client range; the vector must have the round's length, integer entries
within ``bound x count``; and where an encoder's report carries a count of its own (the exact mean's
``(value, 1)`` per record), that entry must equal the count. :func:`report_problem` gives the reason a
report fails, or None. The server refuses such a report at submission (422,
:func:`fedstats.service.domain.runs.submit_report`) and, should one be stored anyway (a row written by an older
server, a membership changed since), the driver leaves it out of the round's sum with ``reports.excluded``
set, a logged line and a counter (``fedstats_reports_excluded_total{reason=...}``) instead of aborting
the run (:mod:`fedstats.service.domain.driver`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["report_problem"]

# encoder -> index of the entry that counts the records summed in the report (one per record)
_COUNT_ENTRY: dict[str, int] = {
    "fedstats.analyses.exact.client:encode_value": 1,
}


def _count_entry(index: int) -> Callable[[list[int], int], str | None]:
    def check(vector: list[int], count: int) -> str | None:
        if vector[index] != count:
            return (
                f"count_entry: entry {index} is {vector[index]}, not the report's {count} record(s)"
            )
        return None

    return check


_CHECKS: dict[str, Callable[[list[int], int], str | None]] = {
    enc: _count_entry(i) for enc, i in _COUNT_ENTRY.items()
}


def report_problem(
    vector: Any, count: Any, *, encode: str, dim: int, bound: int, records: int
) -> str | None:
    """Why a plain report cannot be summed, or None if it is consistent.

    Parameters
    ----------
    vector : Any
        The reported sum (should be a list of ``dim`` integers).
    count : Any
        The number of records the device claims to have summed.
    encode : str
        The round's encoder (``"module:qualname"``).
    dim, bound : int
        The round's report length and per-record bound.
    records : int
        The device's slots inside the round's client range (what ``count`` must be).

    Returns
    -------
    str or None
        ``"reason: detail"``; the reason (before the colon) is one of ``count``, ``shape``, ``type``,
        ``bound``, ``count_entry``.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count != records or count < 1:
        return f"count: {count!r} record(s) claimed, the device has {records} in the round"
    if not isinstance(vector, list) or len(vector) != dim:
        return f"shape: the report must be a list of {dim} integers"
    if any(isinstance(v, bool) or not isinstance(v, int) for v in vector):
        return "type: report entries must be integers"
    limit = bound * count
    if any(abs(v) > limit for v in vector):
        return f"bound: report entries must lie within +-{limit} (bound x records)"
    check = _CHECKS.get(encode)
    return None if check is None else check(vector, count)
