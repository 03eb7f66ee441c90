"""Client side of the exact (non-private) baselines: the encoders a device runs.

Imports only numpy and the engine's fixed-point codec, so a device can load it without the server stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedstats.engine.fixedpoint import FixedPoint
from fedstats.engine.rounds import ClientBatch, InputHistogram
from fedstats.engine.validity import Verdicts, exceeds, output_check
from fedstats.randomness import RNG

__all__ = [
    "aggregate_table",
    "aggregate_value",
    "check_value_reports",
    "encode_table",
    "encode_value",
]


def encode_table(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Flatten each client's contingency table into one report.

    Parameters
    ----------
    batch : ClientBatch
        Column ``params["column"]`` holds the ``(n, m_x, m_y)`` integer tables.
    params : Mapping
        ``{"column": str}``.
    rng : RNG
        Unused: the report is deterministic (part of the encoder signature).

    Returns
    -------
    numpy.ndarray
        int64 ``(batch.n, m_x * m_y)``.
    """
    del rng  # deterministic report
    t = batch.column(params["column"])
    return np.asarray(t, dtype=np.int64).reshape(batch.n, -1)


def encode_value(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Each client's value in fixed point and a count of one: report ``(q, 1)``.

    Parameters
    ----------
    batch : ClientBatch
        Column ``params["column"]`` holds one real value per client.
    params : Mapping
        ``{"column": str, "frac_bits": int, "clip": float}``.
    rng : RNG
        Unused: round-half-to-even keeps the baseline deterministic.

    Returns
    -------
    numpy.ndarray
        int64 ``(batch.n, 2)``.
    """
    del rng  # deterministic rounding
    fp = FixedPoint(int(params["frac_bits"]), float(params["clip"]))
    q, _ = fp.encode(np.asarray(batch.column(params["column"]), dtype=np.float64))
    return np.stack([q, np.ones_like(q)], axis=1)


@output_check(encode_value)
def check_value_reports(
    vectors: np.ndarray, counts: np.ndarray, params: Mapping[str, Any], starts: np.ndarray | None
) -> Verdicts:
    """Output check of :func:`encode_value` (exact): ``(sum of count values, count)``.

    One record outputs ``(q, 1)`` with ``q = rint(clip(x) * 2**frac_bits)``, any integer in ``[-M, M]``,
    ``M = rint(clip * 2**frac_bits)`` (round half to even is monotone). A sum of ``k`` records is exactly
    ``(s, k)`` with ``|s| <= k M``: reasons ``total_mismatch`` (entry 1 is not the count) and
    ``value_out_of_range``.

    Parameters
    ----------
    vectors : numpy.ndarray
        int64 ``(n, 2)``.
    counts, starts
        As :class:`~fedstats.engine.validity.OutputCheck`; ``starts`` is unused here (every record has
        the same output set).
    params : Mapping
        The round's ``frac_bits`` and ``clip``.

    Returns
    -------
    Verdicts
    """
    del starts  # the output set does not depend on the record
    m = int(np.rint(float(params["clip"]) * float(2 ** int(params["frac_bits"]))))
    out = Verdicts(counts.size)
    out.fail(
        "total_mismatch",
        vectors[:, 1] != counts,
        lambda i: f"count entry {vectors[i, 1]}, not {counts[i]}",
    )
    out.fail(
        "value_out_of_range",
        exceeds(np.abs(vectors[:, 0]), counts, m),
        lambda i: f"value sum {vectors[i, 0]} beyond +-{int(counts[i]) * m}",
    )
    return out


def _weighted(reports: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sum of ``counts[i]`` copies of each distinct input's (deterministic) report, exactly.

    Python integers (object dtype) when a sum leaves int64, as the engine's own wide sums do.
    """
    total = (reports.astype(object) * counts.astype(object)[:, None]).sum(axis=0)
    if all(-(2**63) <= int(v) < 2**63 for v in total):
        return np.asarray([int(v) for v in total], dtype=np.int64)
    return np.asarray([int(v) for v in total], dtype=object)


def aggregate_table(hist: InputHistogram, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Aggregate form of :func:`encode_table` (the aggregate route): each distinct table times its count.

    The report is deterministic, so the sum is exact (not only equal in distribution).

    Parameters
    ----------
    hist : InputHistogram
        Distinct tables and their counts.
    params, rng
        As for :func:`encode_table` (``rng`` is unused).

    Returns
    -------
    numpy.ndarray
        ``(m_x * m_y,)`` int64 (object of Python ints beyond int64).
    """
    batch = ClientBatch(hist.columns, 0, hist.total)
    return _weighted(encode_table(batch, params, rng), hist.counts)


def aggregate_value(hist: InputHistogram, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Aggregate form of :func:`encode_value`: each distinct value's report times its count (exact).

    Parameters
    ----------
    hist, params, rng
        As for :func:`aggregate_table`, with distinct values and :func:`encode_value`'s parameters.

    Returns
    -------
    numpy.ndarray
        ``(2,)`` int64 (object beyond int64): the fixed-point sum and the number of clients.
    """
    batch = ClientBatch(hist.columns, 0, hist.total)
    return _weighted(encode_value(batch, params, rng), hist.counts)
