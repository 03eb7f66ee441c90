"""Populations of clients: who holds which data, read (or generated) one block at a time.

A population is indexed by a global client index in ``[0, n_clients)`` and read in *logical blocks* of
``block_size`` consecutive clients (block ``b`` holds clients ``[b * block_size, (b + 1) * block_size)``).
Randomness used to generate a block is keyed by the block index, so a generated population is the same
whatever the physical shard size, backend or worker that asks for it, and is never materialized.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fedstats._numeric import largest_remainder
from fedstats._validation import check_int
from fedstats.engine.rounds import ClientBatch, InputHistogram
from fedstats.engine.samplers import simulation_generator
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RNG, RandomSource

__all__ = [
    "GeneratedPopulation",
    "HistogramPopulation",
    "InMemoryPopulation",
    "Population",
    "ResampledPopulation",
    "block_count",
    "distinct_rows",
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


@runtime_checkable
class HistogramSource(Protocol):
    """A population that can describe a range of its clients by their distinct inputs (aggregate route)."""

    def histogram(self, start: int, stop: int, randomness: RandomSource) -> InputHistogram:
        """Return the distinct inputs of clients ``[start, stop)`` and their counts."""
        ...


def distinct_rows(columns: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Group clients by their whole input (every column jointly) and count them.

    Parameters
    ----------
    columns : Mapping[str, numpy.ndarray]
        Each array has the ``n >= 1`` clients on its first axis (any trailing shape).

    Returns
    -------
    (dict, numpy.ndarray)
        The distinct inputs (``k`` rows per column, in sorted order of their codes) and the int64 counts
        ``(k,)`` summing to ``n``.
    """
    arrays = [np.asarray(v) for v in columns.values()]
    n = arrays[0].shape[0]
    codes = []
    for v in arrays:
        flat = np.ascontiguousarray(v.reshape(n, -1))
        _, inv = np.unique(flat, axis=0, return_inverse=True)
        codes.append(np.asarray(inv).ravel())
    key = (
        codes[0]
        if len(codes) == 1
        else np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)[1].ravel()
    )
    _, first, counts = np.unique(key, return_index=True, return_counts=True)
    return {k: np.asarray(v)[first] for k, v in columns.items()}, counts.astype(np.int64)


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


class _FixedPopulation(ABC):
    """A population whose clients are fixed: its blocks and histograms draw no randomness.

    A subclass gives the rows of clients ``[start, stop)`` (:meth:`_rows`) and their distinct inputs
    with counts (:meth:`_distinct`).
    """

    _n: int

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        return self._n

    def block(
        self,
        block_index: int,  # noqa: ARG002 - the Population protocol's signature
        block_size: int,  # noqa: ARG002 - the Population protocol's signature
        start: int,
        stop: int,
        randomness: RandomSource,  # noqa: ARG002 - the Population protocol's signature
    ) -> ClientBatch:
        """Data of clients ``[start, stop)``."""
        return ClientBatch(self._rows(start, stop), start, self._n)

    def histogram(
        self,
        start: int,
        stop: int,
        randomness: RandomSource,  # noqa: ARG002 - the Population protocol's signature
    ) -> InputHistogram:
        """Distinct inputs of clients ``[start, stop)`` and their counts (exact)."""
        cols, counts = self._distinct(start, stop)
        return InputHistogram(cols, counts, self._n)

    @abstractmethod
    def _rows(self, start: int, stop: int) -> dict[str, np.ndarray]: ...

    @abstractmethod
    def _distinct(self, start: int, stop: int) -> tuple[dict[str, np.ndarray], np.ndarray]: ...


class InMemoryPopulation(_FixedPopulation):
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
    def columns(self) -> Mapping[str, np.ndarray]:
        """The columns (read-only view of the arrays)."""
        return self._columns

    def _rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
        return {k: v[start:stop] for k, v in self._columns.items()}

    def _distinct(self, start: int, stop: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        return distinct_rows(self._rows(start, stop))


class HistogramPopulation(_FixedPopulation):
    """A population given by its distinct inputs and how many clients hold each (10^12 clients, no memory).

    Client ``i`` holds input ``j`` for ``cum[j] <= i < cum[j + 1]``, ``cum`` the cumulative counts: a fixed
    layout, so per-client routes read it block by block and the aggregate route reads its histogram
    exactly.

    Parameters
    ----------
    columns : Mapping[str, array_like]
        The distinct inputs, ``k`` rows each.
    counts : array_like of int, shape (k,)
        Clients per input, each >= 0, summing to at least 1 (and below 2^62).

    Raises
    ------
    DataError
        If the columns are inconsistent or the counts are not non-negative integers with a positive sum.

    Examples
    --------
    >>> pop = HistogramPopulation({"age": [20, 30]}, [10**12, 3 * 10**12])
    >>> pop.n_clients
    4000000000000
    """

    def __init__(self, columns: Mapping[str, Any], counts: Any) -> None:
        self._columns = _check_columns(columns)
        c = np.asarray(counts)
        k = next(iter(self._columns.values())).shape[0]
        if c.shape != (k,) or not np.issubdtype(c.dtype, np.integer) or (c < 0).any():
            raise DataError(f"counts must be {k} non-negative integers, one per distinct input")
        if int(c.sum()) < 1 or int(c.astype(object).sum()) >= 2**62:
            raise DataError("counts must sum to between 1 and 2^62 clients")
        self._counts = c.astype(np.int64)
        self._cum = np.concatenate([[0], np.cumsum(self._counts)]).astype(np.int64)
        self._n = int(self._cum[-1])

    def _rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
        # the inputs at the clients' positions in the fixed layout
        idx = np.searchsorted(self._cum, np.arange(start, stop, dtype=np.int64), side="right") - 1
        return {k: v[idx] for k, v in self._columns.items()}

    def _distinct(self, start: int, stop: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        lo = np.clip(self._cum[:-1], start, stop)
        hi = np.clip(self._cum[1:], start, stop)
        counts = hi - lo
        keep = counts > 0
        return {k: v[keep] for k, v in self._columns.items()}, counts[keep]


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
    """Clients ``[start, start + n)`` of a resampled population: one uniform each picks a row of its stratum.

    Clients are laid out stratum by stratum, so a block spans a few contiguous strata: each segment is
    computed with its stratum's scalars (no per-client search). Client ``i`` of stratum ``s`` takes row
    ``row_start[s] + min(floor(u_i * row_count[s]), row_count[s] - 1)``, ``u`` = ``rng.random(n)``.
    """
    cols: Mapping[str, np.ndarray] = params["columns"]
    bounds: np.ndarray = params["client_bounds"]  # cumulative clients per stratum, shape (S+1,)
    row_start: np.ndarray = params["row_start"]  # first row of each stratum in the sorted columns
    row_count: np.ndarray = params["row_count"]
    stop = start + n
    u = rng.random(n)
    rows = np.empty(n, dtype=np.int64)
    stratum = np.empty(n, dtype=np.int64)
    first = int(np.searchsorted(bounds, start, side="right")) - 1
    for s in range(first, bounds.size - 1):
        a = max(int(bounds[s]), start) - start
        b = min(int(bounds[s + 1]), stop) - start
        if a >= stop - start:
            break
        if b <= a:
            continue
        count = int(row_count[s])
        seg = rows[a:b]
        # the same float product and truncation as a per-client (u * count).astype(int64)
        seg[...] = np.multiply(u[a:b], count, out=u[a:b])
        np.minimum(seg, count - 1, out=seg)
        seg += int(row_start[s])
        stratum[a:b] = s
    out = {k: v.take(rows) for k, v in cols.items()}
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
            per = largest_remainder(n_clients, counts)
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

    def histogram(self, start: int, stop: int, randomness: RandomSource) -> InputHistogram:
        """Distinct inputs of clients ``[start, stop)`` and their counts, equal in distribution.

        The last few histograms are kept (keyed by range and source), since a run asks for the same range
        in several rounds and again for its truth.

        Each client resamples a row of its stratum uniformly, so the counts of a stratum's distinct rows
        are Multinomial(clients of the stratum in the range, row frequencies), drawn by conditional
        binomials from ``randomness.child("population").generator("histogram", start, stop)``: the same
        range gives the same histogram in every round of a run (clients keep their data), and disjoint
        ranges are independent, as their clients are.
        """
        # the source's own derived seed, not id(): ids are reused once a source is collected
        key = (start, stop, randomness.public_seed("population", "histogram-cache"))
        cache = self.__dict__.setdefault("_histograms", {})
        if key not in cache:
            if len(cache) >= 4:
                cache.pop(next(iter(cache)))
            cache[key] = self._draw_histogram(start, stop, randomness)
        hist: InputHistogram = cache[key]
        return hist

    def _distinct(self, s: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Distinct rows of stratum ``s`` and their frequencies (computed once: the data are fixed)."""
        cache = self.__dict__.setdefault("_distinct_rows", {})
        if s not in cache:
            p = self._params
            r0 = int(p["row_start"][s])
            rows = {k: v[r0 : r0 + int(p["row_count"][s])] for k, v in p["columns"].items()}
            cache[s] = distinct_rows(rows)
        got: tuple[dict[str, np.ndarray], np.ndarray] = cache[s]
        return got

    def _draw_histogram(self, start: int, stop: int, randomness: RandomSource) -> InputHistogram:
        p = self._params
        bounds: np.ndarray = p["client_bounds"]
        # numpy's binomial sampler (a secure source keys it from its stream): exact inversion of the
        # CDF costs 0.2-0.4 ms a draw at 10^11-10^12 clients (see fedstats.engine.samplers)
        rng = simulation_generator(
            randomness.child("population").generator("histogram", start, stop)
        )
        parts: list[dict[str, np.ndarray]] = []
        counts: list[np.ndarray] = []
        for s in range(bounds.size - 1):
            m = min(stop, int(bounds[s + 1])) - max(start, int(bounds[s]))
            if m <= 0:
                continue
            values, freq = self._distinct(s)
            drawn = _multinomial(rng, m, freq / freq.sum())
            keep = drawn > 0
            part = {k: v[keep] for k, v in values.items()}
            part["_stratum"] = np.full(int(keep.sum()), s, dtype=np.int64)
            parts.append(part)
            counts.append(drawn[keep])
        cols = {k: np.concatenate([q[k] for q in parts]) for k in parts[0]}
        source = None
        if bounds.size == 2:  # one stratum: every client an i.i.d. draw of the same rows
            values, freq = self._distinct(0)
            values = {**values, "_stratum": np.zeros(freq.size, dtype=np.int64)}
            source = (values, freq / freq.sum())
        return InputHistogram(cols, np.concatenate(counts), self._n, source)


def _multinomial(rng: RNG, n: int, p: np.ndarray) -> np.ndarray:
    """One Multinomial(n, p) draw by conditional binomials (works for any generator, any n < 2^62)."""
    out = np.zeros(p.size, dtype=np.int64)
    left = int(n)
    rest = 1.0
    for j in range(p.size - 1):
        if left == 0:
            break
        q = min(1.0, max(0.0, float(p[j]) / rest)) if rest > 0 else 1.0
        x = int(rng.binomial(left, q)) if 0.0 < q < 1.0 else (left if q >= 1.0 else 0)
        out[j] = x
        left -= x
        rest -= float(p[j])
    out[-1] += left
    return out
