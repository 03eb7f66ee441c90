"""Validity of clear reports: whether a device's report is a possible output of its round's encoder.

A device answers a round with one report per round: the sum of its ``count`` records' encoder outputs
(``{"vector": [...], "count": k}``). When the round is sent **in the clear** (the local-DP rounds, the exact
baselines, a library simulation without secure aggregation) the server sees every report, so it can check
each against the *output set* of the round's encoder: the set of vectors one record can produce, summed
``count`` times. A report outside that set cannot come from an honest device, and including it would let
one device move the statistic arbitrarily far (a bit of 10^6 in a bit-pushing round shifts the mean by
10^6 bits' worth), so the server leaves it out of the sum with a counted reason.

Each encoder that may run in the clear registers an *output check* beside it, in its analysis's
``client.py`` (:func:`output_check`); :func:`check_report` and its vectorized form :func:`check_reports`
look the check up from the round's encoder. A check is **exact on the honest set**: every vector an honest
device can send passes (a false rejection would bias the statistic); where the set of sums of ``count``
outputs is not cheaply characterizable, it checks tight necessary conditions (ranges, totals, parity) and
its docstring says which.

Secure rounds are not checkable here: under secure aggregation the server sees only masked reports
(uniform modulo ``2^b``) and their sum; validating those needs a proof with each report (Prio3,
:mod:`fedstats.vdaf`). :func:`check_report` applies to clear reports only, and refuses a round whose
encoder registers no output check (e.g. FED-chi^2's projections, which run under secure aggregation only).

:func:`screened_sum` is the server's clear-round path in simulation: devices upload their reports, the
check excludes the bad ones with a counted reason and the rest are summed exactly; with ``malicious`` it
injects deviating devices, to show that the check catches them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from fedstats.engine.rounds import ClientBatch, Round
from fedstats.errors import ParameterError
from fedstats.randomness import RNG

__all__ = [
    "REASONS",
    "OutputCheck",
    "ScreenedSum",
    "Verdicts",
    "check_report",
    "check_reports",
    "exceeds",
    "has_output_check",
    "output_check",
    "screened_sum",
    "small_output_check",
]

REASONS: dict[str, str] = {
    "count": "the report's record count is not an integer >= 1",
    "shape": "the report is not a vector of the round's length",
    "not_integer": "a report entry is not an integer",
    "out_of_range": "an entry exceeds the round's per-record bound times the count (or 2^62)",
    "value_out_of_range": "a value entry lies outside the encoder's range times the records it sums",
    "bit_out_of_range": "a bit count lies outside [0, the records that report that bit]",
    "unassigned_bit": "a bit no record of the device reports is non-zero",
    "vacuous_bit": "a bit no code in the declared range has is non-zero (non-private round)",
    "total_mismatch": "the per-record totals (one-hot counts, count entry) do not add up to the count",
    "group_out_of_range": "a group count is negative",
    "parity": "a sum of +-1 values has the wrong parity for its count",
    "clip_flag": "the clipping flags are not consistent with the clipped values possible",
    "weight_mismatch": "a weighted entry exceeds what the reported weight allows",
}
"""Every reason a check can give (the text before the colon of its answer), with its meaning."""


class OutputCheck(Protocol):
    """An encoder's output check: the reasons each of ``n`` clear reports falls outside its output set.

    ``check(vectors, counts, params, starts) -> Verdicts`` with ``vectors`` int64 ``(n, dim)`` (the
    round's length, entries within ``bound x count``: :func:`check_reports` checked these), ``counts``
    int64 ``(n,)`` (>= 1), ``params`` the round's public parameters (possibly JSON-decoded: lists for
    arrays), and ``starts`` int64 ``(n,)``, each report's first global record index (its records are
    ``[start, start + count)``), or None when unknown (the check then uses conditions that hold for every
    record index). Module-level, beside the encoder, registered with :func:`output_check`.
    """

    def __call__(
        self,
        vectors: np.ndarray,
        counts: np.ndarray,
        params: Mapping[str, Any],
        starts: np.ndarray | None,
    ) -> Verdicts:
        """Return each report's first failed reason (None where the report is in the output set)."""
        ...


class SmallOutputCheck(Protocol):
    """An encoder's output check of one report in plain Python (:func:`small_output_check`).

    ``check(vector, count, params, start) -> reason`` with ``vector`` a list of ``dim`` Python ints (each
    within ``+-2^62``), ``count`` an int in ``[1, 2^62]``, ``params`` and ``start`` (an int, or None) as for
    :class:`OutputCheck`. Returns exactly what the encoder's :class:`OutputCheck` gives that report alone
    (``"reason: detail"`` or None), or :data:`NOT_SMALL` where it does not decide (a count too large to
    walk record by record, a start outside the round): the report then takes the vectorized check.
    """

    def __call__(
        self, vector: list[int], count: int, params: Mapping[str, Any], start: int | None
    ) -> str | None:
        """Return the report's first failed reason, None if it is in the output set, or NOT_SMALL."""
        ...


NOT_SMALL = "\x00not-small"
"""What a :class:`SmallOutputCheck` returns for a report it leaves to the vectorized check."""

SMALL_BATCH = 8
"""Most reports :func:`check_reports` checks one by one with an encoder's :class:`SmallOutputCheck`.

A server that is not busy checks its uploads one or two at a time; the vectorized check then costs
some forty array operations per report, the plain-Python one a handful of list operations.
"""

_CHECKS: dict[str, OutputCheck] = {}
_SMALL: dict[str, SmallOutputCheck] = {}
_LIMIT = (
    2**62
)  # no report entry beyond this is checked further (an honest sum of that size is not summed)


def _name(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


_C = TypeVar("_C")


def _registrar(table: dict[str, Any], encoder: Callable[..., Any]) -> Callable[[_C], _C]:
    """A decorator that files its function in ``table`` under ``encoder``'s name and returns it."""

    def register(check: _C) -> _C:
        table[_name(encoder)] = check
        return check

    return register


def output_check(encoder: Callable[..., Any]) -> Callable[[OutputCheck], OutputCheck]:
    """Register the decorated function as ``encoder``'s output check (see :class:`OutputCheck`).

    Used in an analysis's ``client.py``, beside the encoder: the check is registered when the encoder's
    module is imported, which it is whenever a :class:`~fedstats.engine.rounds.Round` holds the encoder.

    Parameters
    ----------
    encoder : callable
        The module-level encoder whose outputs the check describes.

    Returns
    -------
    callable
        A decorator returning the check unchanged.
    """
    return _registrar(_CHECKS, encoder)


def small_output_check(
    encoder: Callable[..., Any],
) -> Callable[[SmallOutputCheck], SmallOutputCheck]:
    """Register the decorated function as ``encoder``'s one-report check (see :class:`SmallOutputCheck`).

    Optional, beside the encoder's :func:`output_check`, which it must agree with report by report
    (``tests/library/test_report_validity.py`` checks that on random reports, honest and not): batches of at
    most :data:`SMALL_BATCH` well-formed reports are checked with it.

    Parameters
    ----------
    encoder : callable
        The module-level encoder, already registered with :func:`output_check`.

    Returns
    -------
    callable
        A decorator returning the check unchanged.
    """
    return _registrar(_SMALL, encoder)


def _check_small(
    round_: Round, rows: list[Any], counts: list[Any], starts: Sequence[int] | np.ndarray | None
) -> list[str | None] | None:
    """:func:`check_reports` of a few well-formed reports in plain Python; None to take the array path.

    Well-formed: each report a list (or tuple) of ``dim`` Python ints, each count a Python int in
    ``[1, 2^62]``, and the encoder registers a :class:`SmallOutputCheck`. The answers are the array
    path's, reason and detail alike.
    """
    small = _SMALL.get(_name(round_.encode))
    if small is None or len(rows) > SMALL_BATCH:
        return None
    dim, bound = int(round_.dim), int(round_.bound)
    for row, c in zip(rows, counts, strict=True):
        if type(c) is not int or not 1 <= c <= _LIMIT:
            return None
        if not isinstance(row, list | tuple) or len(row) != dim:
            return None
        if not all(type(v) is int for v in row):
            return None
    out: list[str | None] = []
    for k, (row, c) in enumerate(zip(rows, counts, strict=True)):
        far = next((j for j, v in enumerate(row) if v > _LIMIT or v < -_LIMIT), None)
        if far is not None:
            out.append(f"out_of_range: entry {far} is {row[far]}, beyond +-{_LIMIT}")
            continue
        why = small(list(row), c, round_.params, None if starts is None else int(starts[k]))
        if why == NOT_SMALL:
            return None
        if why is None:  # the round's own bound last, as the array path
            limit = c * bound
            j = next((j for j, v in enumerate(row) if abs(v) > limit), None)
            if j is not None:
                why = f"out_of_range: entry {j} is {row[j]}, beyond bound x count"
        out.append(why)
    return out


def has_output_check(encoder: Callable[..., Any]) -> bool:
    """Whether ``encoder`` (a module-level encoder function) registers an output check."""
    return _name(encoder) in _CHECKS


class Verdicts:
    """Each of ``n`` reports' first failed reason, filled check by check (the first failure wins).

    Parameters
    ----------
    n : int
        Number of reports, >= 0.
    """

    def __init__(self, n: int) -> None:
        self.reasons: list[str | None] = [None] * int(n)

    def fail(self, reason: str, bad: Any, detail: str | Callable[[int], str]) -> None:
        """Mark the reports where ``bad`` holds (and none failed yet) with ``"reason: detail"``.

        Parameters
        ----------
        reason : str
            One of :data:`REASONS`.
        bad : array_like of bool, shape (n,)
            Reports that fail this condition.
        detail : str or callable
            A short description of the failure, or ``detail(i)`` giving report ``i``'s (only called for
            failures).

        Raises
        ------
        ParameterError
            If ``reason`` is not one of :data:`REASONS` (a bug in the check).
        """
        if reason not in REASONS:
            raise ParameterError("reason", reason, "one of " + ", ".join(sorted(REASONS)))
        for i in np.flatnonzero(np.asarray(bad, dtype=bool)).tolist():
            if self.reasons[i] is None:
                text = detail if isinstance(detail, str) else detail(i)
                self.reasons[i] = f"{reason}: {text}"

    @property
    def ok(self) -> np.ndarray:
        """Which reports passed every check so far: bool ``(n,)``."""
        return np.array([r is None for r in self.reasons], dtype=bool)


def exceeds(magnitude: np.ndarray, counts: np.ndarray, per_record: Any) -> np.ndarray:
    """``magnitude > counts * per_record`` elementwise, without overflowing int64.

    Parameters
    ----------
    magnitude : numpy.ndarray of int64
        Values >= 0 (below 2^62).
    counts : numpy.ndarray of int64
        Records per report, >= 1, broadcastable against ``magnitude``.
    per_record : int or numpy.ndarray of int64
        Per-record limit, >= 0, broadcastable.

    Returns
    -------
    numpy.ndarray of bool
    """
    # a > k p  <=>  a - 1 >= k p  <=>  (a - 1) // k >= p   (k >= 1; for a = 0 the left side is -1)
    out: np.ndarray = (np.asarray(magnitude) - 1) // np.asarray(counts) >= np.asarray(per_record)
    return out


def _lookup(round_: Round) -> OutputCheck:
    name = _name(round_.encode)
    check = _CHECKS.get(name)
    if check is None:
        raise ParameterError(
            f"round {round_.name!r} encoder",
            name,
            "an encoder that registers an output check: only clear rounds' reports are checkable "
            "(a secure round's reports are masked; Prio3 validity proofs check those)",
        )
    return check


def _is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def _row(vector: Any, dim: int, limit: int) -> tuple[np.ndarray | None, str | None]:
    """One report as int64 ``(dim,)``, or the generic reason it is not a report of this round."""
    if isinstance(vector, np.ndarray):
        if vector.dtype == object:
            items = vector.tolist()
        elif np.issubdtype(vector.dtype, np.integer):
            if vector.shape != (dim,):
                return None, f"shape: shape {vector.shape}, not ({dim},)"
            items = None
        else:
            return None, f"not_integer: dtype {vector.dtype}"
    elif isinstance(vector, list | tuple):
        items = list(vector)
    else:
        return None, f"shape: a {type(vector).__name__}, not a vector of {dim} integers"
    if items is not None:
        if len(items) != dim:
            return None, f"shape: {len(items)} entries, not {dim}"
        if all(type(v) is int for v in items):  # JSON's integers: checked as an array
            try:
                vector = np.array(items, dtype=np.int64)
            except OverflowError:  # beyond int64: the entry-by-entry path names it
                pass
            else:
                items = None
    if items is not None:
        bad = next((i for i, v in enumerate(items) if not _is_int(v)), None)
        if bad is not None:
            return None, f"not_integer: entry {bad} is {items[bad]!r}"
        worst = next((i for i, v in enumerate(items) if abs(int(v)) > limit), None)
        if worst is not None:
            return None, f"out_of_range: entry {worst} is {items[worst]}, beyond +-{limit}"
        return np.array([int(v) for v in items], dtype=np.int64), None
    arr = np.asarray(vector)
    big = np.flatnonzero((arr > limit) | (arr < -limit))
    if big.size:
        i = int(big[0])
        return None, f"out_of_range: entry {i} is {int(arr[i])}, beyond +-{limit}"
    return arr.astype(np.int64), None


def check_reports(
    round: Round,
    vectors: Sequence[Any] | np.ndarray,
    counts: Sequence[Any] | np.ndarray,
    *,
    starts: Sequence[int] | np.ndarray | None = None,
) -> list[str | None]:
    """Check ``n`` clear reports of one round against its encoder's output set (vectorized).

    At most :data:`SMALL_BATCH` well-formed reports given as lists (as decoded from JSON) are checked one
    by one in plain Python when the encoder registers a :func:`small_output_check`, with the same answers.

    Parameters
    ----------
    round : Round
        The round the reports answer (its encoder, public ``params``, ``dim`` and ``bound``). Its encoder
        must register an output check (:func:`output_check`): only clear rounds are checkable.
    vectors : sequence or numpy.ndarray
        ``n`` reports: an int array ``(n, dim)``, or a sequence of vectors as decoded from JSON (any
        entry may be malformed: a float, a bool, a huge integer, a wrong length).
    counts : sequence or numpy.ndarray
        ``(n,)``: the records each report sums (a device's records inside the round's client range).
    starts : sequence or numpy.ndarray of int, optional
        ``(n,)``: each report's first global record index (its records are ``[start, start + count)``,
        inside the round's client range). Given, checks that depend on which records a device holds
        (bit pushing's exact allocation: which bits its records report) are exact; None: they use the
        conditions that hold for any records.

    Returns
    -------
    list of (str or None)
        Per report, None if it is a possible honest report, else ``"reason: detail"`` with ``reason``
        one of :data:`REASONS` (machine-readable: count it by the text before the colon).

    Raises
    ------
    ParameterError
        If the round's encoder registers no output check (a secure-only round), or ``counts`` / ``starts``
        do not have one entry per report.
    """
    check = _lookup(round)
    rows = list(vectors) if not isinstance(vectors, np.ndarray) or vectors.ndim != 2 else None
    n = len(rows) if rows is not None else int(np.asarray(vectors).shape[0])
    cnt = list(counts)
    if len(cnt) != n:
        raise ParameterError("counts", len(cnt), f"one count per report ({n})")
    if starts is not None and len(starts) != n:
        raise ParameterError("starts", len(starts), f"one first index per report ({n})")
    if rows is not None and n <= SMALL_BATCH:  # a few reports as decoded from JSON: plain Python
        got = _check_small(round, rows, cnt, starts)
        if got is not None:
            return got
    dim, bound = int(round.dim), int(round.bound)
    out: list[str | None] = [None] * n
    good_count = np.array([_is_int(c) and 1 <= int(c) <= _LIMIT for c in cnt], dtype=bool)
    for i in np.flatnonzero(~good_count).tolist():
        out[i] = f"count: {cnt[i]!r} record(s)"
    safe = np.array([int(c) if ok else 1 for c, ok in zip(cnt, good_count, strict=True)], np.int64)
    if rows is None:
        arr = np.asarray(vectors)
        if (
            not np.issubdtype(arr.dtype, np.integer)
            or arr.shape[1] != dim
            or (arr.dtype.kind == "u" and arr.size and int(arr.max()) > _LIMIT)
        ):
            rows = list(arr)
    if rows is None:
        mat = np.asarray(vectors).astype(np.int64, copy=False)
        over = (mat > _LIMIT) | (mat < -_LIMIT)
        for i in np.flatnonzero(over.any(axis=1) & good_count).tolist():
            j = int(np.flatnonzero(over[i])[0])
            out[i] = f"out_of_range: entry {j} is {int(mat[i, j])}, beyond +-{_LIMIT}"
    else:
        mat = np.zeros((n, dim), dtype=np.int64)
        for i, row in enumerate(rows):
            if out[i] is not None:
                continue
            vec, why = _row(row, dim, _LIMIT)
            if why is not None:
                out[i] = why
            else:
                assert vec is not None
                mat[i] = vec
    live = np.array([r is None for r in out], dtype=bool)
    if live.any():
        idx = np.flatnonzero(live)
        st = None if starts is None else np.asarray(starts, dtype=np.int64)[idx]
        verdicts = check(mat[idx], safe[idx], round.params, st)
        for k, i in enumerate(idx.tolist()):
            out[i] = verdicts.reasons[k]
    # the round's own bound last (implied by every encoder's check; a guard for the sum's overflow check)
    rest = np.flatnonzero([r is None for r in out])
    if rest.size:
        far = exceeds(np.abs(mat[rest]), safe[rest][:, None], bound)
        for r in np.flatnonzero(far.any(axis=1)).tolist():
            i, j = int(rest[r]), int(np.flatnonzero(far[r])[0])
            out[i] = f"out_of_range: entry {j} is {int(mat[i, j])}, beyond bound x count"
    return out


def check_report(
    round: Round, vector: Any, count: int, *, first_index: int | None = None
) -> str | None:
    """Check one clear report against its round's encoder's output set.

    A report is the sum of ``count`` records' encoder outputs; it passes when it is such a sum for some
    inputs and randomness (exactly, or by the tight necessary conditions the encoder's check documents).
    Only for rounds sent in the clear: a secure round's reports are masked and cannot be checked (Prio3's
    validity proofs do that; :mod:`fedstats.vdaf`).

    Parameters
    ----------
    round : Round
        The round answered (encoder, public ``params``, ``dim``, ``bound``).
    vector : array_like
        The report: ``dim`` integers (a list as decoded from JSON, or an int array).
    count : int
        The records the report sums, >= 1.
    first_index : int, optional
        Global index of the device's first record in the round (its records are
        ``[first_index, first_index + count)``); makes bit pushing's exact-allocation check exact.

    Returns
    -------
    str or None
        None for a possible honest report, else ``"reason: detail"``, ``reason`` one of :data:`REASONS`.

    Raises
    ------
    ParameterError
        If the round's encoder registers no output check (a round that runs only under secure
        aggregation).
    """
    starts = None if first_index is None else [int(first_index)]
    return check_reports(round, [vector], [count], starts=starts)[0]


@dataclass(frozen=True)
class ScreenedSum:
    """A clear round's sum after screening each device's report (:func:`screened_sum`).

    Attributes
    ----------
    total : numpy.ndarray
        int64 ``(dim,)``: the exact sum of the accepted reports.
    n_clients : int
        Records in the accepted reports.
    rejected : dict of int to str
        Device index -> ``"reason: detail"`` of each excluded report.
    excluded : dict of str to int
        Reason -> number of excluded reports (what the server counts and logs).
    """

    total: np.ndarray
    n_clients: int
    rejected: dict[int, str] = field(default_factory=dict)
    excluded: dict[str, int] = field(default_factory=dict)


def screened_sum(
    round: Round,
    batch: ClientBatch,
    rng: RNG,
    *,
    records_per_device: int = 1,
    malicious: Mapping[int, Any] | None = None,
) -> ScreenedSum:
    """Simulate a clear round at the server: devices report, bad reports are excluded and counted.

    The batch's clients are grouped into devices of ``records_per_device`` consecutive records (the last
    may hold fewer); each honest device reports the sum of its records' ``encode`` outputs, a malicious
    device reports the vector given for it instead; every report is checked (:func:`check_reports`, with
    each device's first record index) and the accepted ones are summed exactly.

    Parameters
    ----------
    round : Round
        A clear round whose encoder registers an output check.
    batch : ClientBatch
        The clients' data (global indices ``batch.start ...``).
    rng : RNG
        The clients' private randomness.
    records_per_device : int
        Records per device, >= 1.
    malicious : Mapping of int to array_like, optional
        Device index -> the vector it reports instead of its honest report (any value: a list with a
        float, a huge entry, a wrong length).

    Returns
    -------
    ScreenedSum

    Raises
    ------
    ParameterError
        If ``records_per_device`` < 1, a malicious device index is out of range, or the round has no
        output check.
    """
    per = int(records_per_device)
    if per < 1:
        raise ParameterError("records_per_device", records_per_device, "an integer >= 1")
    reports = round.encode_checked(batch, rng)
    n = int(reports.shape[0])
    first = np.arange(0, n, per, dtype=np.int64)
    sums = np.add.reduceat(reports, first, axis=0) if n else reports[:0]
    counts = np.diff(np.append(first, n))
    bad = dict(malicious or {})
    for dev in bad:
        if not 0 <= int(dev) < first.size:
            raise ParameterError("malicious", dev, f"device indices in [0, {first.size})")
    vectors: list[Any] = [bad.get(i, sums[i]) for i in range(first.size)]
    verdicts = check_reports(
        round, vectors, counts.tolist(), starts=(first + int(batch.start)).tolist()
    )
    keep = np.array([v is None for v in verdicts], dtype=bool)
    kept_rows = [np.asarray(vectors[i], dtype=np.int64) for i in np.flatnonzero(keep).tolist()]
    total: np.ndarray = np.zeros(int(round.dim), dtype=np.int64)
    if kept_rows:
        total = np.stack(kept_rows).sum(axis=0, dtype=np.int64)
    rejected = {i: v for i, v in enumerate(verdicts) if v is not None}
    excluded: dict[str, int] = {}
    for why in rejected.values():
        reason = why.split(":", 1)[0]
        excluded[reason] = excluded.get(reason, 0) + 1
    return ScreenedSum(total, int(counts[keep].sum()), rejected, excluded)
