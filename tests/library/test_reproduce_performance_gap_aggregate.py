"""Table 2's cell on the aggregate route (``reproduce performance-gap --aggregate``)."""

from __future__ import annotations

import numpy as np
import pytest

from fedstats.errors import ParameterError
from fedstats.experiments.performance_gap import table2_cell
from fedstats.randomness import RandomSource


def _clients() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    codes = (rng.random(60) < 0.4).astype(np.int64)
    return codes, rng.uniform(-1.0, 1.0, 60)


def test_aggregate_cell_is_calibrated_at_a_billion_clients() -> None:
    """(gap - true gap) / standard error is standard normal over runs (mean and variance)."""
    codes, v = _clients()
    runs = 300
    z = np.array(
        [
            (c["gap"] - c["true_gap"]) / c["standard_error"]
            for i in range(runs)
            for c in [
                table2_cell(codes, v, 10**9, "R", 0.1, "exact", RandomSource(i), route="aggregate")
            ]
        ]
    )
    assert abs(z.mean()) < 4.5 / np.sqrt(runs)
    # variance of a sample variance of normals: 2 / (runs - 1)
    assert abs(z.var(ddof=1) - 1.0) < 4.5 * np.sqrt(2.0 / (runs - 1))


def test_unknown_route_is_refused() -> None:
    codes, v = _clients()
    with pytest.raises(ParameterError, match="route"):
        table2_cell(codes, v, 1000, "R", 1.0, "exact", RandomSource(0), route="fast")
