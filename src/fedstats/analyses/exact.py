"""Exact (non-private) federated aggregates on the engine: a global contingency table and a mean.

These are the baselines every private analysis is measured against, computed through the same engine
(so the same routes, shards and secure aggregation apply): the server learns only the sum.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.stats

from fedstats._validation import check_int
from fedstats.engine import ClientBatch, Engine, FixedPoint, Population, Round, RoundSum
from fedstats.engine.core import ProtocolGenerator
from fedstats.errors import DataError
from fedstats.randomness import RNG
from fedstats.results import AnalysisResult

__all__ = ["ChiSquareResult", "MeanResult", "chi_square_protocol", "mean_protocol"]


def encode_table(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Client side: flatten the client's ``(m_x, m_y)`` table into a report of length ``m_x * m_y``."""
    t = batch.column(params.get("column", "table"))
    return np.asarray(t, dtype=np.int64).reshape(batch.n, -1)


@dataclass
class ChiSquareResult(AnalysisResult):
    """Pearson chi-square test of independence on the summed table.

    Attributes
    ----------
    statistic : float
        Pearson's X^2 (no continuity correction).
    p_value : float
    dof : int
        ``(m_x - 1)(m_y - 1)`` after dropping empty rows and columns.
    table : numpy.ndarray
        The global table (int64, ``(m_x, m_y)``) the server assembled.
    """

    statistic: float = 0.0
    p_value: float = 1.0
    dof: int = 0
    table: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))


def chi_square_protocol(
    shape: tuple[int, int], *, max_cell: int, column: str = "table"
) -> ProtocolGenerator[ChiSquareResult]:
    """One round: clients send their contingency tables; the server tests independence on the sum.

    Parameters
    ----------
    shape : tuple of int
        ``(m_x, m_y)``, each >= 2.
    max_cell : int
        Largest count any single client holds in one cell (the round's bound), >= 1.
    column : str
        Population column holding the ``(n, m_x, m_y)`` tables.

    Returns
    -------
    ProtocolGenerator[ChiSquareResult]
        Use with :meth:`fedstats.engine.Engine.run`.

    Raises
    ------
    DataError
        If the summed table has fewer than two non-empty rows or columns.
    """
    m_x = check_int("m_x", shape[0], low=2)
    m_y = check_int("m_y", shape[1], low=2)
    s: RoundSum = yield Round(
        "table", encode_table, {"column": column}, dim=m_x * m_y, bound=max(1, int(max_cell))
    )
    table = np.asarray(s.total, dtype=np.int64).reshape(m_x, m_y)
    kept = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
    if kept.shape[0] < 2 or kept.shape[1] < 2:
        raise DataError(
            f"the summed table has only {kept.shape} non-empty rows x columns; need 2 x 2"
        )
    stat, p, dof, _ = scipy.stats.chi2_contingency(kept, correction=False)
    return ChiSquareResult(
        analysis="chi2-exact",
        estimate=float(stat),
        n_clients=s.n_clients,
        statistic=float(stat),
        p_value=float(p),
        dof=int(dof),
        table=table,
        truth=float(stat),
    )


def encode_value(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Client side: the fixed-point value and a count of one, report ``(q, 1)``."""
    fp = FixedPoint(params["frac_bits"], params["clip"])
    q, _ = fp.encode(np.asarray(batch.column(params["column"]), dtype=np.float64))
    return np.stack([q, np.ones_like(q)], axis=1)


@dataclass
class MeanResult(AnalysisResult):
    """Exact federated mean (non-private)."""


def mean_protocol(
    column: str, *, clip: float, frac_bits: int = 16
) -> ProtocolGenerator[MeanResult]:
    """One round: each client sends its value in fixed point and a 1; the server divides.

    Parameters
    ----------
    column : str
        The population column holding one real value per client.
    clip : float
        Declared bound: values must lie in ``[-clip, clip]`` (> 0).
    frac_bits : int
        Fixed-point fractional bits, in [0, 52].

    Returns
    -------
    ProtocolGenerator[MeanResult]
    """
    fp = FixedPoint(frac_bits, clip)
    s: RoundSum = yield Round(
        "sum",
        encode_value,
        {"column": column, "frac_bits": frac_bits, "clip": clip},
        dim=2,
        bound=max(fp.bound, 1),
    )
    total, count = int(s.total[0]), int(s.total[1])
    est = total / fp.scale / count
    return MeanResult(
        analysis="mean-exact",
        estimate=est,
        n_clients=count,
        truth=None,
        details={"resolution": 1 / fp.scale},
    )


def federated_mean(values: np.ndarray, *, engine: Engine, clip: float | None = None) -> MeanResult:
    """Mean of one value per client, computed through the engine (a convenience wrapper).

    Parameters
    ----------
    values : numpy.ndarray of float, shape (n_clients,)
    engine : Engine
    clip : float, optional
        Declared bound (default: the largest |value|, rounded up to a power of two; a real deployment
        must declare it instead of reading it from the data).

    Raises
    ------
    DataError
        If ``values`` is empty or not finite.
    """
    from fedstats._validation import check_finite_array
    from fedstats.engine import InMemoryPopulation

    v = check_finite_array("values", values, ndim=1)
    bound = clip if clip is not None else float(2.0 ** np.ceil(np.log2(max(np.abs(v).max(), 1.0))))
    pop: Population = InMemoryPopulation({"value": v})
    res = engine.run(mean_protocol("value", clip=bound), pop)
    res.truth = float(v.mean())
    return res
