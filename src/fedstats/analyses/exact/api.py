"""One-call exact baselines, following :mod:`fedstats.analyses._api` for ``engine`` and ``randomness``.

Nothing is released privately, so there is no ``ledger``: these are the non-private references.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedstats._validation import check_finite_array, check_int
from fedstats.analyses._api import resolve
from fedstats.analyses.exact.config import ExactMeanConfig
from fedstats.analyses.exact.protocol import (
    ChiSquareResult,
    MeanResult,
    chi_square_protocol,
    mean_protocol,
)
from fedstats.engine.core import Engine
from fedstats.engine.populations import InMemoryPopulation
from fedstats.errors import DataError
from fedstats.randomness import RandomSource

__all__ = ["chi_square", "federated_mean"]


def chi_square(
    tables: Any,
    *,
    max_cell: int | None = None,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
) -> ChiSquareResult:
    """Pearson's chi-square test on the sum of the clients' contingency tables, through the engine.

    Parameters
    ----------
    tables : array_like of int, shape (n_clients, m_x, m_y)
        One non-negative table per client, ``m_x, m_y >= 2``.
    max_cell : int, optional
        Declared largest count of one client in one cell (default: read from the tables; a deployment must
        declare it).
    engine, randomness : optional
        See :mod:`fedstats.analyses._api` (nothing here is random).

    Returns
    -------
    ChiSquareResult

    Raises
    ------
    DataError
        If ``tables`` is not 3-D, has a negative or non-integer count, or the summed table has fewer than
        two non-empty rows or columns.
    """
    arr = np.asarray(tables)
    if arr.ndim != 3 or arr.shape[0] < 1:
        raise DataError(f"tables must have shape (n_clients, m_x, m_y), got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"tables must hold integer counts, got dtype {arr.dtype}")
    if arr.size and int(arr.min()) < 0:
        raise DataError("tables hold a negative count")
    bound = (
        max(1, int(arr.max()) if arr.size else 1)
        if max_cell is None
        else check_int("max_cell", max_cell, low=1)
    )
    eng, _ = resolve(engine, randomness)
    m_x, m_y = int(arr.shape[1]), int(arr.shape[2])
    return eng.run(
        chi_square_protocol((m_x, m_y), max_cell=bound), InMemoryPopulation.from_tables(arr)
    )


def federated_mean(
    values: Any,
    *,
    clip: float | None = None,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
) -> MeanResult:
    """Mean of one value per client, computed through the engine (fixed point, exact to 2^-16).

    Parameters
    ----------
    values : array_like of float, shape (n_clients,)
        Finite values, ``n_clients >= 1``.
    clip : float, optional
        Declared bound on ``|value|`` (default: the largest ``|value|`` rounded up to a power of two, at
        least 1; a real deployment must declare it instead of reading it from the data).
    engine, randomness : optional
        See :mod:`fedstats.analyses._api` (nothing here is random).

    Returns
    -------
    MeanResult
        With ``truth`` (the float64 mean) filled in.

    Raises
    ------
    DataError
        If ``values`` is empty or not finite.
    """
    v = check_finite_array("values", values, ndim=1)
    bound = clip if clip is not None else float(2.0 ** np.ceil(np.log2(max(np.abs(v).max(), 1.0))))
    cfg = ExactMeanConfig(clip=bound)  # the task's config: one set of defaults (frac_bits, column)
    eng, _ = resolve(engine, randomness)
    res = eng.run(
        mean_protocol(cfg.column, clip=cfg.clip, frac_bits=cfg.frac_bits),
        InMemoryPopulation({cfg.column: v}),
    )
    res.truth = float(v.mean())
    return res
