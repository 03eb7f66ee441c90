"""Populations of clients: who holds which data, read (or generated) one block at a time.

A population is indexed by a global client index in ``[0, n_clients)`` and read in *logical blocks* of
``block_size`` consecutive clients (block ``b`` holds clients ``[b * block_size, (b + 1) * block_size)``).
Randomness used to generate a block is keyed by the block index, so a generated population is the same
whatever the physical shard size, backend or worker that asks for it, and is never materialized.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fedstats._validation import check_int
from fedstats.engine.rounds import ClientBatch
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RNG, RandomSource

__all__ = [
    "GeneratedPopulation",
    "InMemoryPopulation",
    "Population",
    "ResampledPopulation",
    "block_count",
]


def block_count(n_clients: int, block_size: int) -> int:
    """Number of logical blocks covering ``n_clients`` clients."""
    return -(-n_clients // block_size)


@runtime_checkable
class Population(Protocol):
    """A set of ``n_clients`` clients whose data is read one logical block at a time."""

    @property
    def n_clients(self) -> int:
        """Number of clients, >= 1."""
        ...

    def block(
        self, block_index: int, block_size: int, start: int, stop: int, randomness: RandomSource
    ) -> ClientBatch:
        """Data of clients ``[start, stop)``, inside logical block ``block_index`` of size ``block_size``."""
        ...


def _check_columns(columns: Mapping[str, Any]) -> dict[str, np.ndarray]:
    if not columns:
        raise DataError("the population has no columns")
    cols = {str(k): np.asarray(v) for k, v in columns.items()}
    lengths = {k: v.shape[0] if v.ndim else -1 for k, v in cols.items()}
    if len(set(lengths.values())) != 1 or -1 in lengths.values():
        raise DataError(f"every column needs one entry per client; lengths are {lengths}")
    if next(iter(lengths.values())) == 0:
        raise DataError("the population is empty: at least one client is needed")
    for k, v in cols.items():
        if np.issubdtype(v.dtype, np.floating) and not np.isfinite(v).all():
            raise DataError(f"column {k!r} has a NaN or infinite value")
    return cols


class InMemoryPopulation:
    """Clients whose data is held in memory: one row (or one table) per client.

    Parameters
    ----------
    columns : Mapping[str, array_like]
        Each value has the clients on its first axis, all of the same length ``n_clients >= 1``. A float
        column must be finite.

    Raises
    ------
    DataError
        If a column is empty, lengths differ, or a float column has NaN or inf.

    Examples
    --------
    >>> pop = InMemoryPopulation({"age": [30, 40, 50]})
    >>> pop.n_clients
    3
    """

    def __init__(self, columns: Mapping[str, Any]) -> None:
        self._columns = _check_columns(columns)
        self._n = int(next(iter(self._columns.values())).shape[0])

    @classmethod
    def from_tables(cls, tables: Any) -> InMemoryPopulation:
        """One contingency table per client.

        Parameters
        ----------
        tables : array_like of int, shape (n_clients, m_x, m_y)
            Non-negative counts.

        Raises
        ------
        DataError
            If the tables are not 3-D, not integers, or have a negative count.
        """
        arr = np.asarray(tables)
        if arr.ndim != 3:
            raise DataError(f"tables must have shape (n_clients, m_x, m_y), got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.integer):
            if not np.isfinite(arr).all() or not np.array_equal(arr, np.round(arr)):
                raise DataError("tables must hold whole-number counts")
            arr = arr.astype(np.int64)
        if (arr < 0).any():
            raise DataError("tables must not hold negative counts")
        return cls({"table": arr})

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        return self._n

    @property
    def columns(self) -> Mapping[str, np.ndarray]:
        """The columns (read-only view of the arrays)."""
        return self._columns

    def block(
        self, block_index: int, block_size: int, start: int, stop: int, randomness: RandomSource
    ) -> ClientBatch:
        """Slice of clients ``[start, stop)``."""
        return ClientBatch({k: v[start:stop] for k, v in self._columns.items()}, start, self._n)


GeneratorFn = Callable[[int, int, Mapping[str, Any], RNG], Mapping[str, np.ndarray]]


class GeneratedPopulation:
    """Clients generated on demand, block by block, never materialized.

    Parameters
    ----------
    n_clients : int
        Number of clients, >= 1 (up to 10^9 and beyond: only one block is in memory at a time).
    generate : callable
        Module-level ``generate(start, n, params, rng) -> {column: array (n, ...)}`` producing clients
        ``[start, start + n)``. It must draw only from ``rng``.
    params : Mapping[str, Any], optional
        Parameters passed to ``generate``.

    Notes
    -----
    The generator of block ``b`` is ``randomness.child("population").generator("block", b)``: a block's data
    depends only on the seed and ``b``. When a round covers part of a block, the whole block is generated
    and sliced, so partial reads agree with full ones.
    """

    def __init__(
        self, n_clients: int, generate: GeneratorFn, params: Mapping[str, Any] | None = None
    ) -> None:
        self._n = check_int("n_clients", n_clients, low=1)
        self._generate = generate
        self._params = dict(params or {})

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        return self._n

    def block(
        self, block_index: int, block_size: int, start: int, stop: int, randomness: RandomSource
    ) -> ClientBatch:
        """Generate logical block ``block_index`` and return clients ``[start, stop)`` of it."""
        b0 = block_index * block_size
        b1 = min(b0 + block_size, self._n)
        if not (b0 <= start <= stop <= b1):
            raise ParameterError("block range", (start, stop), f"inside [{b0}, {b1})")
        rng = randomness.child("population").generator("block", block_index)
        cols = self._generate(b0, b1 - b0, self._params, rng)
        return ClientBatch(
            {k: np.asarray(v)[start - b0 : stop - b0] for k, v in cols.items()}, start, self._n
        )


def _resample(start: int, n: int, params: Mapping[str, Any], rng: RNG) -> dict[str, np.ndarray]:
    cols: Mapping[str, np.ndarray] = params["columns"]
    bounds: np.ndarray = params["client_bounds"]  # cumulative clients per stratum, shape (S+1,)
    row_start: np.ndarray = params["row_start"]  # first row of each stratum in the sorted columns
    row_count: np.ndarray = params["row_count"]
    idx = np.arange(start, start + n, dtype=np.int64)
    stratum = np.searchsorted(bounds, idx, side="right") - 1
    u = rng.random(n)
    rows = row_start[stratum] + np.minimum(
        (u * row_count[stratum]).astype(np.int64), row_count[stratum] - 1
    )
    out = {k: v[rows] for k, v in cols.items()}
    out["_stratum"] = stratum
    return out


class ResampledPopulation(GeneratedPopulation):
    """A population of any size resampled with replacement from real rows, generated block by block.

    Parameters
    ----------
    columns : Mapping[str, array_like]
        The real rows (one entry per row).
    n_clients : int
        Number of simulated clients, >= 1.
    strata : str, optional
        Column whose values define strata (e.g. a demographic group). Clients are then laid out stratum by
        stratum (in sorted order of the stratum values) and each resamples only its own stratum's rows.
    stratum_clients : Mapping[value, int], optional
        Number of clients per stratum; default: proportional to the rows (largest remainders), summing to
        ``n_clients``.

    Raises
    ------
    DataError
        If there are no rows, a stratum has no rows, or a requested stratum does not occur.
    ParameterError
        If ``stratum_clients`` does not sum to ``n_clients``.
    """

    def __init__(
        self,
        columns: Mapping[str, Any],
        n_clients: int,
        *,
        strata: str | None = None,
        stratum_clients: Mapping[Any, int] | None = None,
    ) -> None:
        cols = _check_columns(columns)
        n_clients = check_int("n_clients", n_clients, low=1)
        if strata is None:
            order = np.arange(next(iter(cols.values())).shape[0])
            values: np.ndarray = np.array([0])
            counts = np.array([order.size])
        else:
            if strata not in cols:
                raise DataError(f"strata column {strata!r} not found; available: {', '.join(cols)}")
            order = np.argsort(cols[strata], kind="stable")
            values, counts = np.unique(cols[strata], return_counts=True)
        if stratum_clients is None:
            share = counts / counts.sum() * n_clients
            per = np.floor(share).astype(np.int64)
            rem = n_clients - int(per.sum())
            per[np.argsort(-(share - per), kind="stable")[:rem]] += 1
        else:
            missing = [k for k in stratum_clients if k not in set(values.tolist())]
            if missing:
                raise DataError(f"strata {missing} do not occur in column {strata!r}")
            per = np.array(
                [int(stratum_clients.get(v, 0)) for v in values.tolist()], dtype=np.int64
            )
            if int(per.sum()) != n_clients:
                raise ParameterError(
                    "stratum_clients",
                    dict(stratum_clients),
                    f"client counts summing to n_clients={n_clients}",
                )
        sorted_cols = {k: v[order] for k, v in cols.items()}
        params = {
            "columns": sorted_cols,
            "client_bounds": np.concatenate([[0], np.cumsum(per)]).astype(np.int64),
            "row_start": np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64),
            "row_count": counts.astype(np.int64),
        }
        self.strata_values = values
        self.stratum_clients = per
        super().__init__(n_clients, _resample, params)
