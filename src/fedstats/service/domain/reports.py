"""Checks of a plain round's report: the device's records, the round's shape, the encoder's output set.

A device reports the sum of its records' reports and their count. The count must equal the number of the
device's slots inside the round's client range; the vector must have the round's length and integer
entries within ``bound x count``; and, for every encoder that registers an output check
(:mod:`fedstats.engine.validity`: a bit is 0 or 1, a one-hot vector has one 1 per record, a value lies in
its clipping range, ...), the vector must be a sum of ``count`` outputs the encoder can produce for the
device's records (issue 29, item 1). :func:`report_problem` gives the reason a report fails, or None.

The server refuses such a report at submission (422, :func:`fedstats.service.domain.runs.submit_report`)
and, should one be stored anyway (a row written by an older server, a membership changed since), the
driver leaves it out of the round's sum with ``reports.excluded`` set, a logged line and a counter
(``fedstats_reports_excluded_total{reason=...}``) instead of aborting the run
(:mod:`fedstats.service.domain.driver`). Only plain (clear) rounds are checked here: a secure round's
reports are masked, and Prio3 tasks carry validity proofs instead (:mod:`fedstats.service.domain.vdaf`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from fedstats.engine.rounds import Round
from fedstats.engine.validity import check_reports, has_output_check
from fedstats.wire.registry import resolve

__all__ = ["report_problem", "report_problems"]


@functools.lru_cache(maxsize=256)
def _round(encode: str, params: str, dim: int, bound: int) -> Round | None:
    """The round a stored description stands for, if its encoder registers an output check."""
    fn = resolve(encode)
    if not has_output_check(fn):
        return None
    return Round("report-check", fn, json.loads(params), dim=dim, bound=bound)


def _precheck(vector: Any, count: Any, dim: int, records: int) -> str | None:
    """The checks before the encoder's: the claimed count, the shape, integer entries."""
    if isinstance(count, bool) or not isinstance(count, int) or count != records or count < 1:
        return f"count: {count!r} record(s) claimed, the device has {records} in the round"
    if not isinstance(vector, list) or len(vector) != dim:
        return f"shape: the report must be a list of {dim} integers"
    if not all(type(v) is int for v in vector) and any(
        isinstance(v, bool) or not isinstance(v, int) for v in vector
    ):
        return "type: report entries must be integers"
    return None


def report_problems(
    reports: Sequence[tuple[Any, Any, int, int]],
    *,
    encode: str,
    params: str,
    dim: int,
    bound: int,
) -> list[str | None]:
    """:func:`report_problem` of many reports of one round, the encoder's check vectorized over them.

    Parameters
    ----------
    reports : sequence of (vector, count, records, first_index)
        Per report, as the parameters of :func:`report_problem`.
    encode, params, dim, bound
        The round, as for :func:`report_problem`.

    Returns
    -------
    list of (str or None)
        Per report, what :func:`report_problem` returns for it.
    """
    out: list[str | None] = [
        _precheck(vector, count, dim, records) for vector, count, records, _a in reports
    ]
    todo = [i for i, why in enumerate(out) if why is None]
    rnd = _round(encode, params, dim, bound)
    if rnd is not None and todo:  # before the generic bound: a bit of 2 is "bit_out_of_range"
        verdicts = check_reports(
            rnd,
            [reports[i][0] for i in todo],
            [reports[i][1] for i in todo],
            starts=[int(reports[i][3]) for i in todo],
        )
        for i, why in zip(todo, verdicts, strict=True):
            out[i] = why
    for i in todo if rnd is None else ():  # check_reports ends with this bound (bound x count)
        if out[i] is None:
            vector, count = reports[i][0], reports[i][1]
            limit = bound * count
            if any(abs(v) > limit for v in vector):
                out[i] = f"bound: report entries must lie within +-{limit} (bound x records)"
    return out


def report_problem(
    vector: Any,
    count: Any,
    *,
    encode: str,
    params: str,
    dim: int,
    bound: int,
    records: int,
    first_index: int,
) -> str | None:
    """Why a plain report cannot be summed, or None if it is one an honest device could send.

    Parameters
    ----------
    vector : Any
        The reported sum (should be a list of ``dim`` integers).
    count : Any
        The number of records the device claims to have summed.
    encode : str
        The round's encoder (``"module:qualname"``, as the server journaled it from its own plan).
    params : str
        The round's public parameters, as journaled (JSON).
    dim, bound : int
        The round's report length and per-record bound.
    records : int
        The device's slots inside the round's client range (what ``count`` must be).
    first_index : int
        Global index of the device's first slot inside the round's client range.

    Returns
    -------
    str or None
        ``"reason: detail"``; the reason (before the colon) is ``count`` (a claim other than the device's
        records), ``shape``, ``type``, ``bound``, or one of
        :data:`fedstats.engine.validity.REASONS` for an encoder's output check.
    """
    return report_problems(
        [(vector, count, records, first_index)], encode=encode, params=params, dim=dim, bound=bound
    )[0]
