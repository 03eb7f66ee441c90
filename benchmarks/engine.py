"""Engine throughput: a one-bit report summed over 10^8 generated clients, against numpy's raw RNG.

Each client holds a private bit drawn from Bernoulli(0.3) (generated block by block, never materialized)
and reports it through randomized response with keep probability 0.75; the engine sums the reports
exactly. The peer is numpy's raw random-number throughput on this machine in the same run (the limit for
any simulation that draws the same randomness): ``Generator.random`` over the same number of clients,
twice per client (data and coin), in the same block size.

Usage: ``python benchmarks/engine.py [--clients N] [--quick]``; writes ``benchmarks/results/engine.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import numpy_raw_bernoulli_seconds, peak_rss_mb, write_results
from fedstats.engine import ClientBatch, Engine, GeneratedPopulation, Round, SerialBackend
from fedstats.randomness import RNG, RandomSource

BLOCK = 1 << 16


def generate_bits(start: int, n: int, params: Mapping[str, Any], rng: RNG) -> dict[str, np.ndarray]:
    """Clients' private bits: Bernoulli(p)."""
    return {"bit": rng.random(n) < params["p"]}


def encode_rr(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Randomized response on the bit: keep with probability ``keep``, else flip."""
    bit = batch.column("bit")
    flip = rng.random(batch.n) >= params["keep"]
    return (bit ^ flip).astype(np.int64).reshape(-1, 1)


def run_engine(n: int, seed: int | None) -> tuple[float, int]:
    pop = GeneratedPopulation(n, generate_bits, {"p": 0.3})
    eng = Engine(SerialBackend(), RandomSource(seed), block_size=BLOCK)
    t0 = time.perf_counter()
    total = eng.sum_round(Round("rr", encode_rr, {"keep": 0.75}, dim=1, bound=1), pop, 0).total
    return time.perf_counter() - t0, int(total[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--clients", type=int, default=10**8)
    ap.add_argument("--quick", action="store_true", help="10^7 clients")
    args = ap.parse_args()
    n = 10**7 if args.quick else args.clients
    raw = numpy_raw_bernoulli_seconds(n, (0.3, 0.75), BLOCK)
    seeded, total = run_engine(n, seed=1)
    secure, total_s = run_engine(n, seed=None)
    # expected reported ones: n * (0.3 * 0.75 + 0.7 * 0.25) = 0.4 n
    expected = 0.4 * n
    sd = (n * 0.4 * 0.6) ** 0.5
    res = {
        "clients": n,
        "block_size": BLOCK,
        "numpy_raw_seconds": raw,
        "numpy_raw_clients_per_second": n / raw,
        "engine_seeded_seconds": seeded,
        "engine_seeded_clients_per_second": n / seeded,
        "engine_secure_seconds": secure,
        "engine_secure_clients_per_second": n / secure,
        "ratio_seeded_to_numpy_raw": seeded / raw,
        "ratio_secure_to_numpy_raw": secure / raw,
        "peak_rss_mib": peak_rss_mb(),
        "sum_within_6_sd": bool(
            abs(total - expected) < 6 * sd and abs(total_s - expected) < 6 * sd
        ),
    }
    path = write_results("engine", res)
    for k, v in res.items():
        print(f"{k:36s} {v:.4g}" if isinstance(v, float) else f"{k:36s} {v}")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
