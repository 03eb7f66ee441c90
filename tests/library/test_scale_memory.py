"""Bounded memory: a round over tens of millions of generated clients never materializes them.

numpy reports its array allocations to :mod:`tracemalloc`, so the traced peak of a round bounds what the
engine held at once. Materializing one int64 column of N = 2e7 clients alone needs 160 MB; the rounds
below must stay under a few blocks' worth (a block is 2^16 clients).
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedstats.analyses.bitpushing import BitEncoding, mean
from fedstats.engine import (
    ClientBatch,
    Engine,
    GeneratedPopulation,
    ResampledPopulation,
    Round,
    SerialBackend,
)
from fedstats.randomness import RNG, RandomSource

N = 20_000_000
MATERIALIZED_BYTES = N * 8  # one int64 column of every client
LIMIT_BYTES = 16 * 2**20  # a few blocks of 2^16 clients, far below 160 MB


def generate(start: int, n: int, params: Mapping[str, Any], rng: RNG) -> dict[str, np.ndarray]:
    """One small integer per client (drawn from the block's generator)."""
    return {"x": rng.integers(0, 4, size=n)}


def encode(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Report (1, global index mod 3, x): counts clients, checks each is visited once, sums data."""
    return np.stack(
        [np.ones(batch.n, dtype=np.int64), batch.indices % 3, batch.column("x").astype(np.int64)],
        axis=1,
    )


def _traced_peak(fn: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak


def test_round_over_20_million_generated_clients_has_bounded_peak() -> None:
    pop = GeneratedPopulation(N, generate)
    engine = Engine(SerialBackend(), RandomSource(3), block_size=1 << 16)
    rnd = Round("tiny", encode, {}, dim=3, bound=3)
    result, peak = _traced_peak(lambda: engine.sum_round(rnd, pop, 0))
    total = result.total
    # every client visited exactly once: count, and the exact sum of (i mod 3) over i < N
    assert result.n_clients == N
    assert int(total[0]) == N
    q, r = divmod(N, 3)
    assert int(total[1]) == 3 * q + (1 if r == 2 else 0)
    # x uniform on {0..3}: mean 1.5, sd sqrt(1.25); 6 standard errors
    assert abs(int(total[2]) - 1.5 * N) < 6 * np.sqrt(1.25 * N)
    assert peak < LIMIT_BYTES < MATERIALIZED_BYTES / 6


def test_bit_pushing_over_resampled_population_has_bounded_peak() -> None:
    n = 4_000_000
    pop = ResampledPopulation({"value": np.arange(128, dtype=np.float64)}, n)
    engine = Engine(SerialBackend(), RandomSource(5))
    est, peak = _traced_peak(
        lambda: mean(pop, BitEncoding(0, 127), epsilon=1.0, engine=engine, truth=False)
    )
    assert est.n_clients == n
    assert est.standard_error is not None
    assert abs(est.estimate - 63.5) < 6 * est.standard_error
    # materializing the clients' values alone would take n * 8 = 32 MB
    assert peak < LIMIT_BYTES < n * 8
