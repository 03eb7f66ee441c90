"""Bit pushing throughput: adaptive two-round bit pushing with randomized response, against numpy's raw RNG.

Each client holds an integer in [0, 127] drawn uniformly (generated block by block by a
:class:`~fedstats.engine.GeneratedPopulation`, never materialized); adaptive bit pushing (Algorithm 2 of
Cormode & Markov 2021) with 7-bit codes, exact allocation and randomized response at epsilon = 1 estimates
the mean through the engine (two rounds, one bit per client). The peer is numpy's raw random-number
throughput in the same run: ``Generator.random`` twice per client (the value and the RR coin) in the same
block size, i.e. the least randomness any simulation of this protocol must draw. Goal: within 5x.

Usage: ``python benchmarks/bitpushing.py [--clients N] [--quick]``; writes ``benchmarks/results/bitpushing.json``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import numpy_raw_bernoulli_seconds, peak_rss_mb, write_results
from fedstats.analyses.bitpushing import BitEncoding, estimate_mean
from fedstats.engine import Engine, GeneratedPopulation, SerialBackend
from fedstats.randomness import RNG, RandomSource

BLOCK = 1 << 16
EPSILON = 1.0


def generate_values(
    start: int, n: int, params: Mapping[str, Any], rng: RNG
) -> dict[str, np.ndarray]:
    """Clients' values: uniform integers in [0, 127]."""
    return {"value": np.floor(np.asarray(rng.random(n)) * 128.0)}


def run_bitpushing(n: int, seed: int | None) -> tuple[float, float, float]:
    pop = GeneratedPopulation(n, generate_values)
    eng = Engine(SerialBackend(), RandomSource(seed), block_size=BLOCK)
    t0 = time.perf_counter()
    res = estimate_mean(pop, BitEncoding(0, 127), epsilon=EPSILON, engine=eng, truth=False)
    return time.perf_counter() - t0, res.estimate, float(res.standard_error or 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--clients", type=int, default=10**7)
    ap.add_argument("--quick", action="store_true", help="10^6 clients")
    args = ap.parse_args()
    n = 10**6 if args.quick else args.clients
    raw = numpy_raw_bernoulli_seconds(n, (0.5, 0.75), BLOCK)
    seeded, est, se = run_bitpushing(n, seed=1)
    secure, est_s, se_s = run_bitpushing(n, seed=None)
    truth = 63.5  # mean of the uniform distribution on {0, ..., 127}
    res = {
        "clients": n,
        "block_size": BLOCK,
        "epsilon": EPSILON,
        "numpy_raw_seconds": raw,
        "numpy_raw_clients_per_second": n / raw,
        "bitpushing_seeded_seconds": seeded,
        "bitpushing_seeded_clients_per_second": n / seeded,
        "bitpushing_secure_seconds": secure,
        "bitpushing_secure_clients_per_second": n / secure,
        "ratio_seeded_to_numpy_raw": seeded / raw,
        "ratio_secure_to_numpy_raw": secure / raw,
        "goal_within_5x": bool(seeded / raw <= 5.0),
        "estimate_seeded": est,
        "standard_error": se,
        "estimate_within_6_se": bool(abs(est - truth) < 6 * se and abs(est_s - truth) < 6 * se_s),
        "peak_rss_mib": peak_rss_mb(),
    }
    path = write_results("bitpushing", res)
    for k, v in res.items():
        print(f"{k:40s} {v:.4g}" if isinstance(v, float) and not math.isnan(v) else f"{k:40s} {v}")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
