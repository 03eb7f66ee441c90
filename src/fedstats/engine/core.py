"""The engine: drive a protocol's rounds and compute each round's exact sum by the chosen route.

A protocol is a server-side generator that yields :class:`~fedstats.engine.rounds.Round` objects and
receives their :class:`~fedstats.engine.rounds.RoundSum`; its return value is the analysis result::

    def protocol(...):
        s1 = yield Round("marginals", encode_marginals, params, dim=m, bound=1)
        s2 = yield Round("projection", encode_projection, {..., "marginals": s1.total}, dim=l, bound=B)
        return finish(s1, s2)

:meth:`Engine.run` reads top to bottom like the paper's algorithm. Client code (``encode``) and server code
(the generator) exchange only the round's public parameters and the sums.
"""

from __future__ import annotations

import math
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TypeVar

from fedstats._validation import check_int
from fedstats.engine.backends import Backend, RoundJob, SerialBackend, check_block_size
from fedstats.engine.populations import Population
from fedstats.engine.progress import NullProgress, Progress
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RandomSource

__all__ = ["Engine", "ProtocolGenerator", "RoundLog"]

T = TypeVar("T")
ProtocolGenerator = Generator[Round, RoundSum, T]
"""Type of a protocol: a generator that yields rounds, receives their sums and returns its result."""


@dataclass(frozen=True)
class RoundLog:
    """What one round cost: clients, report length, wire size and time.

    Attributes
    ----------
    name : str
    n_clients : int
        Clients that sent a report.
    dim : int
        Report length.
    bits_per_entry : int
        Wire bits of one report entry on the route used.
    seconds : float
        Wall-clock time of the round.
    backend : str
    """

    name: str
    n_clients: int
    dim: int
    bits_per_entry: int
    seconds: float
    backend: str

    @property
    def bytes_per_client(self) -> int:
        """Bytes one participating client sends in this round: ``ceil(dim * bits_per_entry / 8)``."""
        return math.ceil(self.dim * self.bits_per_entry / 8)


@dataclass
class Engine:
    """Runs protocols over populations.

    Parameters
    ----------
    backend : Backend, optional
        Route computing each round's sum (default :class:`SerialBackend`).
    randomness : RandomSource, optional
        Source of every client-side draw (default: secure). Block ``b`` of round ``r`` draws from
        ``randomness.generator("round", r, "block", b)``.
    block_size : int, optional
        Clients per logical block (default 65,536). Part of what a seed reproduces: results are identical
        for any backend and shard size, given the same seed and block size.
    progress : Progress, optional
        Receiver of progress events (default: none).

    Attributes
    ----------
    log : list of RoundLog
        One entry per round run so far.
    """

    backend: Backend = field(default_factory=SerialBackend)
    randomness: RandomSource = field(default_factory=RandomSource)
    block_size: int = 65536
    progress: Progress = field(default_factory=NullProgress)
    log: list[RoundLog] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.block_size = check_int("block_size", self.block_size, low=1)

    def sum_round(
        self,
        rnd: Round,
        population: Population,
        round_index: int,
        client_range: tuple[int, int] | None = None,
    ) -> RoundSum:
        """Exact sum of ``rnd``'s reports over ``population`` (or the clients in ``client_range``).

        Raises
        ------
        DataError
            If the population or the client range is empty.
        ParameterError
            If ``client_range`` lies outside the population.
        """
        n = population.n_clients
        if n < 1:
            raise DataError("the population is empty: at least one client is needed")
        lo, hi = client_range if client_range is not None else (0, n)
        if not (0 <= lo < hi <= n):
            raise ParameterError("client_range", (lo, hi), f"a non-empty range inside [0, {n}]")
        check_block_size(self.block_size, rnd.bound)
        job = RoundJob(rnd, population, self.randomness, round_index, self.block_size, (lo, hi))
        t0 = time.perf_counter()
        result = self.backend.sum_round(job, self.progress)
        self.log.append(
            RoundLog(
                rnd.name,
                result.n_clients,
                rnd.dim,
                self.backend.bits_per_entry(job),
                time.perf_counter() - t0,
                self.backend.name,
            )
        )
        return result

    def run(self, protocol: Generator[Round, RoundSum, T], population: Population) -> T:
        """Drive ``protocol`` to its end and return its result.

        Each yielded round is summed over ``population``, or over the clients ``[lo, hi)`` of its
        :attr:`~fedstats.engine.rounds.Round.client_range` (who takes part is the server's choice of
        cohort, not a parameter the clients see).
        """
        index = 0
        try:
            rnd = next(protocol)
            while True:
                total = self.sum_round(rnd, population, index, rnd.client_range)
                index += 1
                rnd = protocol.send(total)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    @property
    def retries(self) -> int:
        """Shards recomputed after a worker died (parallel routes; 0 for the serial route)."""
        return int(getattr(self.backend, "retries", 0))

    @property
    def bytes_per_client(self) -> int:
        """Bytes a client that took part in every logged round has sent."""
        return sum(r.bytes_per_client for r in self.log)
