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

import numpy as np

from fedstats._validation import check_int, check_real
from fedstats.engine.backends import Backend, RoundJob, SerialBackend, check_block_size
from fedstats.engine.populations import Population
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import DataError, ParameterError
from fedstats.progress import NullProgress, Progress
from fedstats.randomness import RandomSource

__all__ = ["Dropout", "Engine", "ProtocolGenerator", "RoundLog"]

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


@dataclass(frozen=True)
class Dropout:
    """Simulated dropout: a fraction of the clients stop answering from a given round on.

    The dropped set is drawn once per :meth:`Engine.run`, uniformly without replacement, from the engine's
    randomness (key ``("engine", "dropout", run)``): ``min(round(fraction * n), n - 1)`` clients, so at least
    one client survives. The backend leaves their reports out of each round's sum and out of
    :attr:`~fedstats.engine.rounds.RoundSum.n_clients` from round ``from_round`` on; the list never travels
    to clients (it is the route's knowledge, as in a deployment where the server only sees who answered).

    Parameters
    ----------
    fraction : float
        Fraction of the population that drops out, in [0, 1).
    from_round : int
        Index of the first round (0-based) without the dropped clients, >= 0; default 1 (the clients answer
        round 0 and drop out before round 1, as in FED-chi^2's experiments, Pang et al. 2023, Sec. 4).

    Raises
    ------
    ParameterError
        If ``fraction`` is outside [0, 1) or ``from_round`` is negative.
    """

    fraction: float
    from_round: int = 1

    def __post_init__(self) -> None:
        """Validate ``fraction`` and ``from_round``."""
        object.__setattr__(
            self,
            "fraction",
            check_real("fraction", self.fraction, low=0.0, high=1.0, high_open=True),
        )
        object.__setattr__(self, "from_round", check_int("from_round", self.from_round, low=0))

    def draw(self, n_clients: int, randomness: RandomSource, run: int) -> np.ndarray:
        """Draw the dropped clients of run ``run`` over a population of ``n_clients``.

        Returns
        -------
        numpy.ndarray
            Sorted distinct global indices, int64, shape ``(min(round(fraction n), n - 1),)``.
        """
        k = min(round(self.fraction * n_clients), n_clients - 1)
        if k <= 0:
            return np.zeros(0, dtype=np.int64)
        rng = randomness.generator("engine", "dropout", run)
        return np.sort(np.asarray(rng.choice(n_clients, size=k, replace=False), dtype=np.int64))


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
    dropout : Dropout, optional
        Simulated dropout applied by the route (default: every client answers every round). On the
        secure-aggregation route the dropped clients never join the round's session (they drop before its
        first stage); that route's own ``dropout`` models failures during a session.

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
    dropout: Dropout | None = None
    _runs: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        """Validate the block size and the dropout model."""
        self.block_size = check_int("block_size", self.block_size, low=1)
        if self.dropout is not None and not isinstance(self.dropout, Dropout):
            raise ParameterError("dropout", self.dropout, "a Dropout or None")

    def sum_round(
        self,
        rnd: Round,
        population: Population,
        round_index: int,
        client_range: tuple[int, int] | None = None,
        dropped: np.ndarray | None = None,
    ) -> RoundSum:
        """Exact sum of ``rnd``'s reports over ``population`` (or the clients in ``client_range``).

        Parameters
        ----------
        rnd : Round
        population : Population
        round_index : int
            Index of the round in its protocol (keys the clients' randomness).
        client_range : tuple of int, optional
            Cohort ``[lo, hi)`` (default: every client).
        dropped : numpy.ndarray, optional
            Sorted global indices of clients whose reports are left out (see :class:`Dropout`).

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
        gone = np.zeros(0, dtype=np.int64) if dropped is None else np.asarray(dropped, np.int64)
        job = RoundJob(
            rnd, population, self.randomness, round_index, self.block_size, (lo, hi), gone
        )
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
        cohort, not a parameter the clients see). With :attr:`dropout`, the dropped set is drawn once for
        this run and left out of the rounds from ``dropout.from_round`` on.
        """
        index = 0
        dropped = None
        from_round = 0
        if self.dropout is not None:
            dropped = self.dropout.draw(population.n_clients, self.randomness, self._runs)
            from_round = self.dropout.from_round
        self._runs += 1
        try:
            rnd = next(protocol)
            while True:
                late = index >= from_round
                total = self.sum_round(
                    rnd, population, index, rnd.client_range, dropped if late else None
                )
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
