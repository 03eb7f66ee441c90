"""Parallel routes: a Dask cluster (``dask``) and a process pool on one machine (``process``).

Both split a round into shards of whole logical blocks, compute each shard's exact sum with
:func:`~fedstats.engine.backends.sum_shard` in a worker, and add the partial sums exactly. Because block
``b`` of round ``r`` always draws from the stream ``("round", r, "block", b)`` and sums are integers,
the result is bit-identical to the serial route for the same seed, for any number of workers and any
shard size.

Fault tolerance: a shard whose worker dies is computed again; since its randomness is keyed by its blocks
the retry reproduces it exactly. Dask reschedules tasks lost with a worker by itself (up to
``distributed.scheduler.allowed-failures`` times; the scheduler's count of such losses is read back as
the retries); the process pool is rebuilt and the unfinished shards
resubmitted (up to ``max_retries`` times). Each backend counts retries in :attr:`retries`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from types import TracebackType
from typing import Any

import numpy as np

from fedstats._validation import check_int
from fedstats.engine.backends import RoundJob, add_exact, sum_shard
from fedstats.engine.rounds import RoundSum
from fedstats.engine.routes import register_backend
from fedstats.errors import FedstatsError, ParameterError, ProtocolAbortError
from fedstats.progress import NullProgress, Progress

__all__ = ["DaskBackend", "ProcessPoolBackend"]


def _plain_bits(job: RoundJob) -> int:
    return math.ceil(math.log2(2 * job.round.bound + 1))


def _shard_blocks(job: RoundJob, shard_size: int) -> int:
    return max(1, math.ceil(shard_size / job.block_size))


def _lost_attempts(keys: list[Any], dask_scheduler: Any = None) -> int:
    """On the scheduler: how many times the given tasks were lost with a dying worker (re-run since)."""
    tasks = dask_scheduler.tasks
    return int(sum(tasks[k].suspicious for k in keys if k in tasks))


@contextlib.contextmanager
def _deferred_interrupt() -> Iterator[Callable[[], None]]:
    """Hold Ctrl-C until the caller's next check, then raise ``KeyboardInterrupt`` there.

    A ``KeyboardInterrupt`` raised inside ``concurrent.futures.wait`` can leave a future's lock held, and
    the executor's shutdown then waits on it for ever; polling with a timeout and raising between waits
    keeps the interrupt outside the executor's locks. Outside the main thread nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    hits: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _: hits.append(signum))

    def check() -> None:
        if hits:
            raise KeyboardInterrupt

    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, previous)
        check()


_TRIM_VAR = "MALLOC_TRIM_THRESHOLD_"


def _start_local_cluster(local_cluster: Any, workers: int, memory_limit: str) -> Any:
    """Start a quiet LocalCluster whose workers keep glibc's default malloc trimming.

    distributed sets ``MALLOC_TRIM_THRESHOLD_=65536`` in its workers by default. That turns off glibc's
    dynamic mmap threshold, so every block-sized numpy array is mapped and zero-filled afresh: measured
    here, the same shard costs 0.12 CPU-s in such a worker against 0.063 CPU-s without the setting
    (``benchmarks/scale.py``). The nanny also leaves the variable in this process's environment, so the
    user's own value (if any) is restored afterwards. The dashboard takes a free port (no clash with
    another cluster). distributed's logs below CRITICAL are silenced, in this process and in the
    workers: a task's failure reaches the caller as its exception, while a worker's ERROR lines came
    from shutdown races (a heartbeat to a scheduler already closed after Ctrl-C) and broke the command
    line's one-line message.
    """
    import dask

    saved = os.environ.get(_TRIM_VAR)
    try:
        with dask.config.set({f"distributed.nanny.pre-spawn-environ.{_TRIM_VAR}": None}):
            os.environ.pop(_TRIM_VAR, None)
            return local_cluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                memory_limit=memory_limit,
                dashboard_address=":0",
                silence_logs=logging.CRITICAL,
            )
    finally:
        if saved is None:
            os.environ.pop(_TRIM_VAR, None)
        else:
            os.environ[_TRIM_VAR] = saved


class _WorkerBackend(ABC):
    """What the backends that hold workers share: ``with`` closes them, and they send what serial sends.

    Leaving the ``with`` block calls :meth:`close`, with ``abandon=True`` when the block ended in an error
    or Ctrl-C (running work is then discarded, not waited for).
    """

    @abstractmethod
    def close(self, *, abandon: bool = False) -> None:
        """Release the workers (``abandon``: the run failed, its work will not be used)."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(abandon=exc_type is not None)

    def bits_per_entry(self, job: RoundJob) -> int:
        """Same wire size as the serial route (the route changes where sums are computed, not what)."""
        return _plain_bits(job)


class DaskBackend(_WorkerBackend):
    """Compute rounds on a Dask cluster (``dask.distributed``).

    Parameters
    ----------
    workers : int, optional
        Start a ``LocalCluster`` with this many single-threaded worker processes (default 2) when no
        ``scheduler`` is given; it is shut down on exit, also on errors and Ctrl-C.
    scheduler : str, optional
        Address of a running scheduler (``tcp://host:8786``); the cluster is left running on exit.
    shard_size : int, optional
        Clients per task (rounded up to whole blocks), default 1,048,576.
    memory_limit : str, optional
        Per-worker memory limit of the local cluster (default ``"2GiB"``).

    Raises
    ------
    ParameterError
        If ``workers`` or ``shard_size`` is not a positive integer, or both ``workers`` and ``scheduler``
        are given.
    FedstatsError
        If ``dask[distributed]`` is not installed (``pip install 'fedstats[distributed]'``).

    Notes
    -----
    Use as a context manager (``with DaskBackend(workers=2) as backend: ...``); the routes module's
    :func:`~fedstats.engine.routes.open_backend` does this for you.
    """

    name = "dask"

    def __init__(
        self,
        *,
        workers: int | None = None,
        scheduler: str | None = None,
        shard_size: int = 1 << 20,
        memory_limit: str = "2GiB",
    ) -> None:
        if workers is not None and scheduler is not None:
            raise ParameterError("workers", workers, "no value when a scheduler is given")
        self.workers = check_int("workers", workers if workers is not None else 2, low=1)
        self.scheduler = scheduler
        self.shard_size = check_int("shard_size", shard_size, low=1)
        self.memory_limit = memory_limit
        self.retries = 0
        self._client: Any = None
        self._cluster: Any = None

    def __enter__(self) -> DaskBackend:
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:  # pragma: no cover - the extra is installed by make install
            raise FedstatsError(
                "the dask backend needs dask.distributed: pip install 'fedstats[distributed]'"
            ) from exc
        if self.scheduler is not None:
            try:
                self._client = Client(self.scheduler, timeout="10s")
            except OSError as exc:
                raise ParameterError(
                    "scheduler", self.scheduler, "the address of a reachable Dask scheduler"
                ) from exc
        else:
            try:
                # Ctrl-C while the cluster starts is held until it is up, then closes it cleanly (an
                # interrupt inside distributed's start-up can leave its event loop waiting for ever)
                with _deferred_interrupt():
                    self._cluster = _start_local_cluster(
                        LocalCluster, self.workers, self.memory_limit
                    )
                    self._client = Client(self._cluster)
            except KeyboardInterrupt:
                logging.getLogger("distributed").setLevel(logging.CRITICAL + 1)
                self.close()
                raise
        return self

    def close(self, *, abandon: bool = False) -> None:
        """Close the client and shut down a cluster this backend started.

        With ``abandon`` (the ``with`` block ended in an error or Ctrl-C, which the caller reports) the
        scheduler's complaints about the comms closing under it (CRITICAL tracebacks) are silenced: they
        would only bury the error.
        """
        if abandon and self._cluster is not None:
            logging.getLogger("distributed").setLevel(logging.CRITICAL + 1)
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    @property
    def client(self) -> Any:
        """The ``distributed.Client`` (only inside the ``with`` block)."""
        if self._client is None:
            raise FedstatsError("the dask backend is not open: use it as a context manager")
        return self._client

    def sum_round(self, job: RoundJob, progress: Progress | None = None) -> RoundSum:
        """Sum the round with one task per shard; progress advances as shards finish."""
        from distributed import as_completed

        progress = progress or NullProgress()
        client = self.client
        shards = job.shards(_shard_blocks(job, self.shard_size))
        task = f"round {job.round_index} ({job.round.name})"
        progress.start(task, len(job.blocks()))
        futures: dict[Any, tuple[int, int]] = {}
        total = job.zero_total()
        # Ctrl-C is held to the poll below (every 50 ms): raised inside the client's calls it can hang
        # the shutdown or make the scheduler print tracebacks
        with _deferred_interrupt() as interrupted:
            try:
                [job_future] = client.scatter([job], broadcast=True)
                futures = {
                    client.submit(sum_shard, job_future, a, b, pure=False): (a, b)
                    for a, b in shards
                }
                finished = as_completed(futures)  # O(1) per finished shard, unlike wait()
                while not finished.is_empty():
                    interrupted()
                    done = finished.next_batch(block=False)
                    if not done:
                        time.sleep(0.05)
                        continue
                    for fut in done:
                        total = add_exact(total, fut.result())
                        a, b = futures[fut]
                        progress.advance(task, b - a)
                self.retries += client.run_on_scheduler(
                    _lost_attempts, keys=[f.key for f in futures]
                )
            except Exception as exc:
                if type(exc).__name__ == "KilledWorker":
                    raise ProtocolAbortError(
                        f"a shard of round {job.round_index} failed on every retry (workers kept "
                        f"dying): {exc}"
                    ) from exc
                raise
            finally:
                # one request for all: Future.cancel is a synchronous round trip to the scheduler per
                # future, and a 10^10-client round has about 10^4 of them (minutes after a Ctrl-C)
                if futures:
                    client.cancel(list(futures))
        progress.finish(task)
        return RoundSum(total, job.n_clients)


class ProcessPoolBackend(_WorkerBackend):
    """Compute rounds in a pool of worker processes on this machine.

    Parameters
    ----------
    workers : int, optional
        Worker processes (default: the number of CPUs).
    shard_size : int, optional
        Clients per task (rounded up to whole blocks), default 1,048,576.
    max_retries : int, optional
        How many times the pool may be rebuilt after a worker dies in one round (default 3).

    Raises
    ------
    ParameterError
        If a parameter is not a positive integer.
    ProtocolAbortError
        From :meth:`sum_round`, when workers keep dying beyond ``max_retries``.
    """

    name = "process"

    def __init__(
        self, *, workers: int | None = None, shard_size: int = 1 << 20, max_retries: int = 3
    ) -> None:
        self.workers = check_int(
            "--workers", workers if workers is not None else (os.cpu_count() or 1), low=1
        )
        self.shard_size = check_int("shard_size", shard_size, low=1)
        self.max_retries = check_int("max_retries", max_retries, low=0)
        self.retries = 0
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> ProcessPoolBackend:
        self._pool = ProcessPoolExecutor(max_workers=self.workers)
        return self

    def close(self, *, abandon: bool = False) -> None:
        """Shut the pool down, cancelling queued shards.

        With ``abandon`` (the ``with`` block ended in an error or Ctrl-C) the workers are terminated rather
        than waited for: a shard already running can take many seconds, and its sum would be discarded.
        """
        if self._pool is not None:
            if abandon:
                # the executor has no public way to stop running tasks (Python 3.14 adds terminate_workers)
                for proc in list((getattr(self._pool, "_processes", None) or {}).values()):
                    proc.terminate()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers)
        return self._pool

    def sum_round(self, job: RoundJob, progress: Progress | None = None) -> RoundSum:
        """Sum the round with one task per shard, rebuilding the pool if a worker dies."""
        progress = progress or NullProgress()
        pending = list(job.shards(_shard_blocks(job, self.shard_size)))
        task = f"round {job.round_index} ({job.round.name})"
        progress.start(task, len(job.blocks()))
        total = job.zero_total()
        failures = 0
        with _deferred_interrupt() as interrupted:
            while pending:
                total, failures = self._attempt(
                    job, pending, total, failures, progress, interrupted
                )
        progress.finish(task)
        return RoundSum(total, job.n_clients)

    def _attempt(
        self,
        job: RoundJob,
        pending: list[tuple[int, int]],
        total: np.ndarray,
        failures: int,
        progress: Progress,
        interrupted: Callable[[], None],
    ) -> tuple[np.ndarray, int]:
        """Submit the pending shards to one pool and collect them; rebuild the pool if it broke."""
        task = f"round {job.round_index} ({job.round.name})"
        pool = self._executor()
        futures: dict[Future[np.ndarray], tuple[int, int]] = {
            pool.submit(sum_shard, job, a, b): (a, b) for a, b in pending
        }
        broken = False
        not_done = set(futures)
        while not_done:
            interrupted()
            done, not_done = wait(not_done, timeout=0.25, return_when=FIRST_COMPLETED)
            for fut in done:
                try:
                    part = fut.result()
                except BrokenProcessPool:
                    broken = True
                    continue
                total = add_exact(total, part)
                a, b = futures[fut]
                pending.remove((a, b))
                progress.advance(task, b - a)
        if broken:
            failures += 1
            self.retries += len(pending)
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            if failures > self.max_retries:
                raise ProtocolAbortError(
                    f"workers died {failures} times in round {job.round_index}; "
                    f"{len(pending)} shard(s) unfinished (max_retries={self.max_retries})"
                )
        return total, failures


def _dask_factory(
    *, shard_size: int = 1 << 20, workers: int | None = None, scheduler: str | None = None, **_: Any
) -> DaskBackend:
    return DaskBackend(workers=workers, scheduler=scheduler, shard_size=shard_size)


def _process_factory(
    *, shard_size: int = 1 << 20, workers: int | None = None, scheduler: str | None = None, **_: Any
) -> ProcessPoolBackend:
    if scheduler is not None:
        raise ParameterError(
            "scheduler", scheduler, "no value with the process backend (dask only)"
        )
    return ProcessPoolBackend(workers=workers, shard_size=shard_size)


register_backend("dask", _dask_factory)
register_backend("process", _process_factory)
