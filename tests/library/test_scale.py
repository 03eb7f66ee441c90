"""Parallel routes: bit-identical to serial for the same seed, and a worker killed mid-round is retried."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedstats.engine import ClientBatch, Engine, GeneratedPopulation, Round, SerialBackend
from fedstats.engine.dask import DaskBackend, ProcessPoolBackend
from fedstats.engine.routes import open_backend
from fedstats.errors import ParameterError
from fedstats.randomness import RNG, RandomSource

N_CLIENTS = 200_000
BLOCK = 8192


def generate(start: int, n: int, params: Mapping[str, Any], rng: RNG) -> dict[str, np.ndarray]:
    """Clients' values; kills the worker process the first time block ``params['kill_block']`` is made."""
    marker = params.get("kill_marker")
    if marker and start // BLOCK == params["kill_block"] and not os.path.exists(marker):
        Path(marker).write_text("killed once")
        os._exit(1)
    return {"x": rng.integers(0, 1000, size=n)}


def encode(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Value, a private random bit and a Gaussian-noised value in fixed point."""
    x = batch.column("x")
    noisy = np.rint((x + rng.standard_normal(batch.n)) * 16).astype(np.int64)
    return np.stack([x, rng.integers(0, 2, size=batch.n), noisy], axis=1)


ROUND = Round("r", encode, {}, dim=3, bound=20_000)


def _run(backend: Any, params: Mapping[str, Any] | None = None, seed: int = 4) -> np.ndarray:
    pop = GeneratedPopulation(N_CLIENTS, generate, dict(params or {}))
    return Engine(backend, RandomSource(seed), block_size=BLOCK).sum_round(ROUND, pop, 0).total


@pytest.fixture(scope="module")
def serial_total() -> np.ndarray:
    return _run(SerialBackend())


# slow: a LocalCluster starts and loses a worker (5-12 s); make test runs it. The dask route's results run
# in make test-fast through the CLI (tests/cli/test_scale_cli.py), the killed worker on the process pool
@pytest.mark.slow
def test_dask_local_cluster_equals_serial_and_survives_a_killed_worker(
    serial_total: np.ndarray, tmp_path: Path
) -> None:
    with DaskBackend(workers=2, shard_size=3 * BLOCK) as backend:
        # workers keep glibc's malloc trimming (distributed's default setting doubles CPU per shard)
        env = backend.client.run(os.environ.get, "MALLOC_TRIM_THRESHOLD_")
        assert len(env) == 2 and set(env.values()) == {None}
        np.testing.assert_array_equal(_run(backend), serial_total)
        assert backend.retries == 0
        marker = tmp_path / "killed"
        total = _run(backend, {"kill_marker": str(marker), "kill_block": 5})
        assert marker.exists()  # a worker really died during the round
        np.testing.assert_array_equal(total, serial_total)
        assert backend.retries >= 1


def test_process_pool_equals_serial_and_survives_a_killed_worker(
    serial_total: np.ndarray, tmp_path: Path
) -> None:
    with ProcessPoolBackend(workers=2, shard_size=5 * BLOCK) as backend:
        np.testing.assert_array_equal(_run(backend), serial_total)
        marker = tmp_path / "killed"
        total = _run(backend, {"kill_marker": str(marker), "kill_block": 7})
        assert marker.exists()
        np.testing.assert_array_equal(total, serial_total)
        assert backend.retries >= 1


def test_other_seed_differs_on_parallel_routes(serial_total: np.ndarray) -> None:
    with ProcessPoolBackend(workers=2) as backend:
        assert not np.array_equal(_run(backend, seed=5), serial_total)


def test_route_options_are_validated() -> None:
    with pytest.raises(ParameterError, match="backend="), open_backend("gpu"):
        pass
    with (
        pytest.raises(ParameterError, match="scheduler="),
        open_backend("process", scheduler="tcp://x:1"),
    ):
        pass
    with pytest.raises(ParameterError, match="workers="), open_backend("dask", workers=0):
        pass
    with pytest.raises(ParameterError, match="workers="):
        DaskBackend(workers=2, scheduler="tcp://127.0.0.1:1")
