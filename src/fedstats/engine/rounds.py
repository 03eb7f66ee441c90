"""A summation round: the client-side ``encode`` and the public parameters it runs with.

Every protocol in fedstats is a short sequence of rounds in which the server learns only the exact sum of
the clients' integer reports (``DESIGN.md``). A :class:`Round` names a client-side function

    ``encode(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> ndarray (n_batch, dim) int64``

that must be a module-level function (so it can be pickled to workers and, in a deployment, shipped as
code), together with the *public* parameters it needs. Nothing else crosses from the server to the clients,
and only the sum of the reports crosses back (:class:`RoundSum`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fedstats._validation import check_int
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RNG

__all__ = [
    "Aggregator",
    "ClientBatch",
    "Encoder",
    "InputHistogram",
    "Round",
    "RoundSum",
    "SummedEncoder",
]


def _column(columns: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    """``columns[name]``, or a :class:`DataError` naming the column and those available."""
    try:
        return columns[name]
    except KeyError:
        raise DataError(
            f"column {name!r} not found; available: {', '.join(sorted(columns))}"
        ) from None


@dataclass(frozen=True)
class ClientBatch:
    """The data of a contiguous range of clients, handed to ``encode``.

    Attributes
    ----------
    columns : Mapping[str, numpy.ndarray]
        Each array has the clients on its first axis (``shape[0] == n``): a value per client for row
        populations, a table per client (``(n, m_x, m_y)``) for table populations.
    start : int
        Global index of the first client in the batch, in ``[0, total)``.
    total : int
        Number of clients in the whole population.
    """

    columns: Mapping[str, np.ndarray]
    start: int
    total: int

    @property
    def n(self) -> int:
        """Number of clients in the batch."""
        for arr in self.columns.values():
            return int(arr.shape[0])
        return 0

    @property
    def indices(self) -> np.ndarray:
        """Global client indices of the batch, int64 of shape ``(n,)``."""
        return np.arange(self.start, self.start + self.n, dtype=np.int64)

    def column(self, name: str) -> np.ndarray:
        """Return one column, raising a :class:`DataError` naming it when absent."""
        return _column(self.columns, name)


@dataclass(frozen=True)
class InputHistogram:
    """The distinct inputs of a cohort and how many clients hold each: the aggregate route's batch.

    Clients with the same input are i.i.d. under any local randomizer, so the sum of their reports depends
    only on this histogram; an encoder's ``aggregate`` form draws that sum directly.

    Attributes
    ----------
    columns : Mapping[str, numpy.ndarray]
        One entry per distinct input on the first axis (``k`` rows), same layout as a
        :class:`ClientBatch`'s columns.
    counts : numpy.ndarray
        int64 ``(k,)``: clients holding each input, each >= 1.
    total : int
        Number of clients in the whole population.
    source : (Mapping[str, numpy.ndarray], numpy.ndarray) or None
        For populations whose clients are i.i.d. draws (resampled populations): the distinct inputs and
        their probabilities. A random sub-cohort of ``m`` such clients is then itself ``m`` i.i.d. draws,
        which is how the aggregate route splits a cohort exactly at any size. None for fixed populations.
    """

    columns: Mapping[str, np.ndarray]
    counts: np.ndarray
    total: int
    source: tuple[Mapping[str, np.ndarray], np.ndarray] | None = None

    @property
    def n(self) -> int:
        """Number of clients the histogram describes (``counts.sum()``)."""
        return int(np.sum(self.counts, dtype=np.int64))

    @property
    def k(self) -> int:
        """Number of distinct inputs."""
        return int(self.counts.shape[0])

    def column(self, name: str) -> np.ndarray:
        """Return one column of distinct inputs, raising a :class:`DataError` naming it when absent."""
        return _column(self.columns, name)


class Encoder(Protocol):
    """Client-side encoding of one round (see module docstring)."""

    def __call__(self, batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
        """Return the reports of the batch's clients, int array ``(batch.n, dim)``."""
        ...


class SummedEncoder(Protocol):
    """Summed form of an encoder: the sum of a batch's reports, drawn exactly as ``encode`` draws them.

    ``encode_sum(batch, params, rng) -> int64 array (dim,)`` must equal ``encode(batch, params,
    rng).sum(axis=0)`` bit for bit for the same generator state (the same draws in the same order), so
    a seeded run gives the same sums on every route. It is module-level, beside ``encode``.
    """

    def __call__(self, batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
        """Return the sum of the reports of the batch's clients, int64 ``(dim,)``."""
        ...


class Aggregator(Protocol):
    """Aggregate form of an encoder: the sum of the reports of every client in a histogram.

    ``aggregate(hist, params, rng) -> int64 array (dim,)`` must have exactly the distribution of
    ``encode(clients, params, rng).sum(axis=0)`` for clients with those inputs (equal in distribution, not
    bit-identical). It is module-level, beside ``encode`` in the analysis's ``client.py``.
    """

    def __call__(self, hist: InputHistogram, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
        """Return the sum of the reports of the histogram's clients, int64 ``(dim,)``."""
        ...


@dataclass(frozen=True)
class Round:
    """One summation round.

    Parameters
    ----------
    name : str
        Short name shown in progress output (``"marginals"``, ``"projection"``).
    encode : callable
        Module-level client function ``encode(batch, params, rng) -> int64 array (batch.n, dim)``.
    params : Mapping[str, Any]
        Public parameters, plain serializable values (numbers, strings, lists, small arrays, seeds).
    dim : int
        Length of each client's report, >= 1.
    bound : int
        Upper bound on ``|report entry|`` for any single client, >= 1. It lets every route check that the
        sum cannot overflow (int64 for the plain sum, 2^b for secure aggregation) before running.
    client_range : tuple of int, optional
        The cohort: global client indices ``[lo, hi)`` that take part in this round (default: every
        client). It is the server's scheduling decision and never travels to clients in ``params``.
    aggregate : callable, optional
        The encoder's aggregate form (:class:`Aggregator`), for the aggregate route; None when the round
        has none (that route then refuses it).
    encode_sum : callable, optional
        The encoder's summed form (:class:`SummedEncoder`): ``encode_sum(batch, params, rng)`` returns
        ``encode(batch, params, rng).sum(axis=0)`` exactly, from the same draws of ``rng``, without the
        ``(n, dim)`` reports. The per-client routes that need only a block's sum (serial, process, Dask)
        call it when no client of the block dropped out; ``encode`` stays the reference (devices, secure
        aggregation, dropout). None: those routes sum ``encode``'s reports.
    """

    name: str
    encode: Callable[[ClientBatch, Mapping[str, Any], RNG], np.ndarray]
    params: Mapping[str, Any] = field(default_factory=dict)
    dim: int = 1
    bound: int = 1
    client_range: tuple[int, int] | None = None
    aggregate: Callable[[InputHistogram, Mapping[str, Any], RNG], np.ndarray] | None = None
    encode_sum: Callable[[ClientBatch, Mapping[str, Any], RNG], np.ndarray] | None = None

    def __post_init__(self) -> None:
        check_int("dim", self.dim, low=1)
        check_int("bound", self.bound, low=1)
        if self.client_range is not None:
            lo, hi = (int(v) for v in self.client_range)
            if not 0 <= lo < hi:
                raise ParameterError(
                    "client_range", self.client_range, "a pair lo < hi with lo >= 0"
                )
            object.__setattr__(self, "client_range", (lo, hi))

    def sum_bits(self, n_clients: int) -> int:
        """Bits needed to hold any signed sum of ``n_clients`` reports: ``ceil(log2(n * bound + 1)) + 1``."""
        return math.ceil(math.log2(max(n_clients, 1) * self.bound + 1)) + 1

    def encode_checked(self, batch: ClientBatch, rng: RNG, *, widen: bool = True) -> np.ndarray:
        """Run ``encode`` and check the report's shape, dtype and bound.

        Parameters
        ----------
        batch : ClientBatch
        rng : RNG
            The clients' private randomness for this block.
        widen : bool
            Return int64 (default); ``False`` keeps the encoder's integer dtype (e.g. int8), for callers
            that sum with ``dtype=np.int64`` anyway.

        Raises
        ------
        ParameterError
            If the reports are not integers of shape ``(batch.n, dim)`` within ``bound``.
        """
        rep = np.asarray(self.encode(batch, self.params, rng))
        if rep.shape != (batch.n, self.dim):
            raise ParameterError(
                f"round {self.name!r} reports", rep.shape, f"shape ({batch.n}, {self.dim})"
            )
        if not np.issubdtype(rep.dtype, np.integer):
            raise ParameterError(f"round {self.name!r} reports", rep.dtype, "an integer dtype")
        if rep.size:
            # max and min, not abs: no temporary, and no overflow at the dtype's minimum
            worst = max(int(rep.max()), -int(rep.min()))
            if worst > self.bound:
                raise ParameterError(
                    f"round {self.name!r} report entry",
                    worst,
                    f"an absolute value <= bound={self.bound}",
                )
        return rep.astype(np.int64, copy=False) if widen else rep

    def encode_sum_checked(self, batch: ClientBatch, rng: RNG) -> np.ndarray:
        """Run ``encode_sum`` (the round must have one) and check the sum's shape, dtype and bound.

        The check is on the sum only (``dim`` entries): its shape, an integer dtype and
        ``|entry| <= batch.n * bound``. The per-report checks of :meth:`encode_checked` stay with
        ``encode``; a summed form is the library's own code, tested equal to ``encode``'s sum.

        Parameters
        ----------
        batch : ClientBatch
        rng : RNG
            The clients' private randomness for this block.

        Returns
        -------
        numpy.ndarray
            int64 ``(dim,)``.

        Raises
        ------
        ParameterError
            If the round has no ``encode_sum``, or the sum is not integers of shape ``(dim,)`` within
            ``batch.n * bound``.
        """
        if self.encode_sum is None:
            raise ParameterError(f"round {self.name!r} encode_sum", None, "a summed encoder")
        tot = np.asarray(self.encode_sum(batch, self.params, rng))
        if tot.shape != (self.dim,):
            raise ParameterError(
                f"round {self.name!r} summed report", tot.shape, f"shape ({self.dim},)"
            )
        if not np.issubdtype(tot.dtype, np.integer):
            raise ParameterError(
                f"round {self.name!r} summed report", tot.dtype, "an integer dtype"
            )
        worst = max(int(tot.max()), -int(tot.min()))
        if worst > batch.n * self.bound:
            raise ParameterError(
                f"round {self.name!r} summed report entry",
                worst,
                f"an absolute value <= n * bound = {batch.n * self.bound}",
            )
        return tot.astype(np.int64, copy=False)


@dataclass(frozen=True)
class RoundSum:
    """What the server learns from a round: the exact sum of the reports, and how many clients sent one.

    Attributes
    ----------
    total : numpy.ndarray
        int64 array of shape ``(dim,)`` (object dtype of Python ints if the sum needed more than 63 bits).
    n_clients : int
        Number of clients whose reports are in the sum.
    """

    total: np.ndarray
    n_clients: int
