"""The G-test via FED-H: its size under independence, with the p-value read two ways, and its power.

Usage: ``python benchmarks/g_test_size.py [--runs 200]``; writes ``benchmarks/results/g_test_size.json``.

Each run draws 400 clients with one record each, ``x`` uniform on 3 categories and ``y`` on 2, independent,
and runs :func:`fedstats.fed_g_test` with the defaults (seeded per run). Two p-values of the same release:

* ``p_value``: the released one, averaged over FED-H's error
  (:func:`fedstats.analyses.chi2.calibration.normal_averaged_p_value`);
* ``p_value_paper``: ``chi2_sf`` of the estimated G as if it were exact (what fedstats released before).

The rejection rate at level 0.05 is the test's size (0.05 for a valid test), with its Monte Carlo standard
error. The power is measured on 4,000 clients where ``y`` follows ``x > 0`` for 90% of them.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import write_results
from fedstats import fed_g_test
from fedstats.randomness import RandomSource

LEVEL = 0.05


def _one_hot(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    t = np.zeros((x.size, 3, 2), dtype=np.int64)
    t[np.arange(x.size), x, y] = 1
    return t


def _rate(rejected: int, runs: int) -> dict[str, float]:
    p = rejected / runs
    return {"rate": p, "se": math.sqrt(max(p * (1 - p), 1e-12) / runs), "rejected": rejected}


def measure(runs: int) -> dict[str, Any]:
    """Rejection rates at level 0.05 of both p-values under independence, and the power."""
    rng = np.random.default_rng(20261129)
    released = paper = 0
    for r in range(runs):
        x, y = rng.integers(0, 3, 400), rng.integers(0, 2, 400)
        res = fed_g_test(_one_hot(x, y), randomness=RandomSource(seed=r))
        released += res.p_value <= LEVEL
        paper += res.p_value_paper <= LEVEL
    power = 0
    power_runs = max(runs // 10, 10)
    for r in range(power_runs):
        x = rng.integers(0, 3, 4000)
        y = np.where(rng.random(4000) < 0.9, (x > 0).astype(np.int64), rng.integers(0, 2, 4000))
        power += fed_g_test(_one_hot(x, y), randomness=RandomSource(seed=10_000 + r)).rejected
    return {
        "level": LEVEL,
        "runs": runs,
        "size_released_p_value": _rate(released, runs),
        "size_chi2_sf_of_the_estimate": _rate(paper, runs),
        "power_runs": power_runs,
        "power_released_p_value": _rate(power, power_runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    t0 = time.perf_counter()
    out = measure(args.runs)
    out["seconds"] = time.perf_counter() - t0
    path = write_results("g_test_size", {"command": " ".join(sys.argv), **out})
    print(
        f"size at {LEVEL}: released p-value {out['size_released_p_value']['rate']:.3f}, "
        f"chi2_sf of the estimate {out['size_chi2_sf_of_the_estimate']['rate']:.3f} "
        f"({args.runs} runs); power {out['power_released_p_value']['rate']:.2f} -> {path}"
    )


if __name__ == "__main__":
    main()
