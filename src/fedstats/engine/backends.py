"""Backends: the routes that compute a round's exact sum over a population.

A backend receives a :class:`RoundJob` (everything needed to compute one round, picklable) and returns the
:class:`~fedstats.engine.rounds.RoundSum`. The unit of work is a *shard*: a run of consecutive logical
blocks, summed by :func:`sum_shard`. Because block ``b`` of round ``r`` always draws from the stream
``("round", r, "block", b)`` and sums are exact integers, every backend and every shard size gives the
same result for the same seed. The serial backend lives here; the secure-aggregation route is
:mod:`fedstats.engine.secure` and the Dask route :mod:`fedstats.engine.dask`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fedstats._validation import check_int
from fedstats.engine.populations import Population, block_count
from fedstats.engine.rounds import ClientBatch, Round, RoundSum
from fedstats.errors import DataError, ParameterError
from fedstats.progress import NullProgress, Progress
from fedstats.randomness import RNG, RandomSource

__all__ = ["Backend", "RoundJob", "SerialBackend", "add_exact", "sum_shard"]

_INT64_SAFE = 2**62
_HEAP_WARM_BYTES = 16 << 20
_heap_warm_pid: int | None = None


def warm_heap() -> None:
    """Let this process's allocator keep block-sized arrays on its heap (once per process; glibc).

    glibc serves requests above its mmap threshold (128 KiB at start) with fresh ``mmap`` pages and gives
    the top of its heap back to the kernel once more than twice that threshold is free; both make the next
    block's arrays page-fault and zero-fill their memory again (about 180,000 page faults, half the CPU
    time of the performance gap's serial route at 10^7 clients). Freeing one mmap'ed chunk raises both
    thresholds to its size (glibc's dynamic threshold, at most 32 MiB): one untouched 16 MiB array,
    allocated and freed, lets every array below 16 MiB reuse the heap. No effect on other allocators, or
    when ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` fix the thresholds.
    """
    global _heap_warm_pid
    pid = os.getpid()
    if _heap_warm_pid != pid:
        _heap_warm_pid = pid
        del_me = np.empty(_HEAP_WARM_BYTES, dtype=np.uint8)  # never touched: no page is faulted in
        del del_me


@dataclass(frozen=True)
class RoundJob:
    """One round to sum: the round, who takes part, and the randomness it is keyed by.

    Attributes
    ----------
    round : Round
        The round (encode function, public parameters, dim, bound).
    population : Population
        The clients.
    randomness : RandomSource
        The run's source; block ``b`` draws from ``randomness.generator("round", round_index, "block", b)``.
    round_index : int
        Index of the round in the protocol (0, 1, ...).
    block_size : int
        Logical block size (part of what defines the result for a seed).
    client_range : tuple of int
        Global client indices ``[lo, hi)`` taking part in this round.
    dropped : numpy.ndarray, optional
        Sorted, distinct global indices (int64) of clients that dropped out of this round (simulated
        dropout, :class:`~fedstats.engine.core.Dropout`): their reports are left out of the sum and of
        :attr:`n_clients`. Known only to the route, never sent to clients. Default: none.
    """

    round: Round
    population: Population
    randomness: RandomSource
    round_index: int
    block_size: int
    client_range: tuple[int, int]
    dropped: np.ndarray = field(
        default_factory=lambda: np.zeros(0, dtype=np.int64), compare=False, repr=False
    )

    def _dropped_in(self, lo: int, hi: int) -> np.ndarray:
        """Return the dropped clients with index in ``[lo, hi)`` (sorted)."""
        d = self.dropped
        out: np.ndarray = d[np.searchsorted(d, lo) : np.searchsorted(d, hi)]
        return out

    @property
    def n_clients(self) -> int:
        """Number of clients whose reports are in the sum (the range minus the dropped clients)."""
        lo, hi = self.client_range
        return hi - lo - int(self._dropped_in(lo, hi).size)

    @property
    def exact_int64(self) -> bool:
        """True when the sum provably fits in int64 (``n * bound < 2**62``)."""
        return self.n_clients * self.round.bound < _INT64_SAFE

    def zero_total(self) -> np.ndarray:
        """Return an empty accumulator: int64 zeros of shape ``(dim,)``, or Python-int zeros when not int64-safe."""
        return np.zeros(self.round.dim, dtype=np.int64 if self.exact_int64 else object)

    def blocks(self) -> range:
        """Return the indices of the logical blocks this round touches."""
        lo, hi = self.client_range
        return range(lo // self.block_size, block_count(hi, self.block_size))

    def shards(self, shard_blocks: int) -> list[tuple[int, int]]:
        """Split :meth:`blocks` into ``[first, stop)`` runs of at most ``shard_blocks`` blocks."""
        bl = self.blocks()
        return [(b, min(b + shard_blocks, bl.stop)) for b in range(bl.start, bl.stop, shard_blocks)]

    def _block_range(self, b: int) -> tuple[int, int]:
        """Global range ``[start, stop)`` of the clients of block ``b`` in the round's range."""
        lo, hi = self.client_range
        return max(lo, b * self.block_size), min(hi, (b + 1) * self.block_size)

    def _block_batch(self, b: int) -> tuple[ClientBatch, int, int]:
        """The participating clients of block ``b`` (a batch) and their global range ``[start, stop)``."""
        start, stop = self._block_range(b)
        batch = self.population.block(b, self.block_size, start, stop, self.randomness)
        if batch.n != stop - start:
            raise DataError(
                f"population returned {batch.n} clients for block {b}, expected {stop - start}"
            )
        return batch, start, stop

    def _block_rng(self, b: int) -> RNG:
        """The clients' private generator of block ``b`` in this round."""
        return self.randomness.generator("round", self.round_index, "block", b)

    def sum_block(self, b: int) -> np.ndarray:
        """Exact sum of the reports of the participating clients of block ``b``: int64 ``(dim,)``.

        With the round's summed encoder (:attr:`Round.encode_sum`) and no dropped client in the block, the
        sum comes from it directly (the same draws as ``encode``, no ``(n, dim)`` reports); otherwise it is
        the sum of :meth:`encode_block`'s reports.
        """
        if self.round.encode_sum is not None and not self._dropped_in(*self._block_range(b)).size:
            batch, _, _ = self._block_batch(b)
            return self.round.encode_sum_checked(batch, self._block_rng(b))
        out: np.ndarray = self.encode_block(b, widen=False).sum(axis=0, dtype=np.int64)
        return out

    def encode_block(self, b: int, *, widen: bool = True) -> np.ndarray:
        """Encode the reports of the participating clients of block ``b``: int64 array ``(n_b, dim)``.

        Every client of the block in the range encodes (so a survivor's report does not depend on who
        dropped out); the rows of the dropped clients are then removed. With ``widen=False`` the encoder's
        own integer dtype is kept (see :meth:`Round.encode_checked`).
        """
        batch, start, stop = self._block_batch(b)
        rep = self.round.encode_checked(batch, self._block_rng(b), widen=widen)
        gone = self._dropped_in(start, stop)
        if gone.size:
            keep = np.ones(stop - start, dtype=bool)
            keep[gone - start] = False
            rep = rep[keep]
        return rep


def add_exact(total: np.ndarray, part: np.ndarray) -> np.ndarray:
    """Add two partial sums exactly (int64 when both are int64 and safe, Python ints otherwise)."""
    if total.dtype == object or part.dtype == object:
        out: np.ndarray = np.asarray(total, dtype=object) + np.asarray(part, dtype=object)
        return out
    summed: np.ndarray = total + part
    return summed


def sum_shard(job: RoundJob, first: int, stop: int) -> np.ndarray:
    """Exact sum of the reports of blocks ``[first, stop)`` of ``job``.

    Returns
    -------
    numpy.ndarray
        Shape ``(dim,)``; int64 when :attr:`RoundJob.exact_int64`, else object (Python ints).
    """
    warm_heap()
    wide = not job.exact_int64
    total = job.zero_total()
    for b in range(first, stop):
        part = job.sum_block(b)
        if wide:
            # each block's sum is int64-safe (block_size * bound is checked by the engine); widen after
            total = total + part.astype(object)
        else:
            total += part
    return total


class Backend(Protocol):
    """A route that computes the exact sum of a round's reports."""

    name: str

    def sum_round(self, job: RoundJob, progress: Progress) -> RoundSum:
        """Sum the reports of every participating client of ``job``."""
        ...

    def bits_per_entry(self, job: RoundJob) -> int:
        """Bits one report entry takes on the wire with this route."""
        ...


class SerialBackend:
    """Compute a round's sum in this process, shard by shard.

    Parameters
    ----------
    shard_size : int, optional
        Clients per shard (rounded up to whole logical blocks), >= 1; default 1,048,576. Only progress
        granularity depends on it, never the result.

    Raises
    ------
    ParameterError
        If ``shard_size`` is not a positive integer.
    """

    name = "serial"

    def __init__(self, shard_size: int = 1 << 20) -> None:
        self.shard_size = check_int("shard_size", shard_size, low=1)

    def sum_round(self, job: RoundJob, progress: Progress | None = None) -> RoundSum:
        """Sum the round over all shards, reporting one progress unit per block."""
        progress = progress or NullProgress()
        shard_blocks = max(1, math.ceil(self.shard_size / job.block_size))
        task = f"round {job.round_index} ({job.round.name})"
        progress.start(task, len(job.blocks()))
        total = job.zero_total()
        for first, stop in job.shards(shard_blocks):
            total = add_exact(total, sum_shard(job, first, stop))
            progress.advance(task, stop - first)
        progress.finish(task)
        return RoundSum(total, job.n_clients)

    def bits_per_entry(self, job: RoundJob) -> int:
        """Bits for a signed entry of magnitude <= bound: ``ceil(log2(2 bound + 1))``."""
        return math.ceil(math.log2(2 * job.round.bound + 1))


def check_block_size(block_size: int, bound: int) -> int:
    """Validate a logical block size against a round's bound (block sums must fit in int64).

    Raises
    ------
    ParameterError
        If ``block_size`` is not a positive integer or ``block_size * bound >= 2**62``.
    """
    block_size = check_int("block_size", block_size, low=1)
    if block_size * bound >= _INT64_SAFE:
        raise ParameterError(
            "block_size", block_size, f"at most {_INT64_SAFE // bound} for bound={bound}"
        )
    return block_size
