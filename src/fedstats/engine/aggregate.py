"""The aggregate route: each round's sum drawn from its closed form, at a cost that does not grow with n.

Clients with the same input are i.i.d. under a local randomizer, so the sum of their reports depends only
on the histogram of distinct inputs: randomized response over ``k`` ones among ``n`` is
``Binomial(k, p) + Binomial(n - k, 1 - p)``; generalized randomized response, Harmony, Duchi, one-hot and
bit-choice encodings are multinomial per distinct input; a sum of ``m`` Laplace(b) noises is
``b (Gamma(m) - Gamma(m))``, of ``m`` discrete Laplace(t) noises a difference of two negative binomials,
of Gaussian noises a Gaussian. A round offers this through ``Round.aggregate`` (a module-level
``aggregate(hist, params, rng)`` beside ``encode`` in the analysis's ``client.py``); a population offers
its :class:`~fedstats.engine.rounds.InputHistogram` through ``histogram(start, stop, randomness)``.

The route's results are **equal in distribution** to the per-client routes', **not bit-identical** (they
draw other variates); it is a simulation route: it never runs on real clients and refuses secure
aggregation. Where a round has no aggregate form (Piecewise sums, discrete Gaussian noise shares,
per-client clipping with data-dependent bounds) it refuses and names the per-client routes.

The samplers live in :mod:`fedstats.engine.samplers` (re-exported here); they are for simulation, not
for releases.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedstats.engine import samplers
from fedstats.engine.backends import RoundJob
from fedstats.engine.populations import HistogramSource
from fedstats.engine.rounds import InputHistogram, RoundSum
from fedstats.engine.routes import register_backend
from fedstats.engine.samplers import *  # noqa: F403  (re-exported: see the module notes)
from fedstats.engine.samplers import PER_CLIENT
from fedstats.errors import DataError, ParameterError
from fedstats.progress import NullProgress, Progress

__all__ = ["ROUTE_NOTE", "AggregateBackend"]
__all__ += samplers.__all__

ROUTE_NOTE = (
    "aggregate route: each round's sum is drawn from its closed form per distinct input; results are "
    "equal in distribution to the per-client routes, not bit-identical (simulation only)"
)


class AggregateBackend:
    """Draw each round's sum from its aggregate form over the population's histogram of inputs.

    Cost per round: a few variates per distinct input, whatever the number of clients (10^12 clients of
    Adult ages take milliseconds). See the module docstring for what "equal in distribution" means here.

    Notes
    -----
    A client keeps its data across rounds: the same client range gives the same histogram in every round
    of a run (the population draws it from keys of the range). Rounds over ranges that overlap only in part
    would need the joint law of two histograms, which this route does not draw, so it refuses them.
    """

    name = "aggregate"
    note = ROUTE_NOTE

    def __init__(self, **_: Any) -> None:
        self._ranges: dict[int, set[tuple[int, int]]] = {}

    def _check_range(self, job: RoundJob) -> None:
        seen = self._ranges.setdefault(id(job.population), set())
        lo, hi = job.client_range
        for a, b in seen:
            if (a, b) != (lo, hi) and a < hi and lo < b:
                raise ParameterError(
                    "backend",
                    "aggregate",
                    f"a per-client route ({PER_CLIENT}): this protocol's rounds use client ranges "
                    f"[{a}, {b}) and [{lo}, {hi}) that overlap in part",
                )
        seen.add((lo, hi))

    def sum_round(self, job: RoundJob, progress: Progress | None = None) -> RoundSum:
        """Draw the round's sum from ``job.round.aggregate`` over the histogram of its clients.

        Raises
        ------
        ParameterError
            If the round has no aggregate form, the population no histogram, or the protocol's client
            ranges overlap in part; the message names the per-client routes.
        DataError
            If the aggregate form returns a malformed sum.
        """
        progress = progress or NullProgress()
        rnd = job.round
        if rnd.aggregate is None:
            raise ParameterError(
                "backend",
                "aggregate",
                f"a per-client route ({PER_CLIENT}): round {rnd.name!r} has no aggregate form "
                "(its sum is not a function of a few variates per distinct input)",
            )
        if not isinstance(job.population, HistogramSource):
            raise ParameterError(
                "backend",
                "aggregate",
                f"a per-client route ({PER_CLIENT}): this population "
                f"({type(job.population).__name__}) cannot describe its clients by distinct inputs",
            )
        self._check_range(job)
        task = f"round {job.round_index} ({rnd.name}, aggregate)"
        progress.start(task, 1)
        lo, hi = job.client_range
        hist: InputHistogram = job.population.histogram(lo, hi, job.randomness)
        rng = job.randomness.generator("aggregate", "round", job.round_index)
        total = np.asarray(rnd.aggregate(hist, rnd.params, rng))
        wide = total.dtype == object and all(isinstance(v, int) for v in total.tolist())
        if total.shape != (rnd.dim,) or not (wide or np.issubdtype(total.dtype, np.integer)):
            raise DataError(
                f"round {rnd.name!r}: its aggregate form returned {total.dtype} {total.shape}, "
                f"expected integers of shape ({rnd.dim},)"
            )
        n = hist.n
        if n != job.n_clients:
            raise DataError(f"population histogram covers {n} clients, expected {job.n_clients}")
        if total.size and int(np.max(np.abs(total.astype(object)))) > n * rnd.bound:
            raise DataError(f"round {rnd.name!r}: aggregate sum exceeds n * bound")
        progress.advance(task)
        progress.finish(task)
        if not job.exact_int64 or wide:
            return RoundSum(np.asarray([int(v) for v in total.tolist()], dtype=object), n)
        return RoundSum(total.astype(np.int64), n)

    def bits_per_entry(self, job: RoundJob) -> int:
        """Bits a per-client report entry would take (what a real client would send)."""
        return math.ceil(math.log2(2 * job.round.bound + 1))


def _factory(**options: Any) -> AggregateBackend:
    return AggregateBackend(**options)


register_backend("aggregate", _factory)
