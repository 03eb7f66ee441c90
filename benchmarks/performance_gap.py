"""Performance-gap simulation throughput: K clients end to end, against numpy's raw generator.

End to end = the full ``measure_performance_gap`` path on a ``ResampledPopulation`` (clients resampled from
real rows within each group, block by block, never materialized): resampling, the mechanism on every
client (GRR on the group, Harmony + randomized response or discrete Laplace on the value), the one-hot
report, the engine's exact sum, plus the simulation-only truth round, and the estimators. The peer is
numpy's raw random-number throughput in the same run: ``Generator.random`` drawing the same number of
uniforms per client as the mechanism needs (resample 1, group 1 + 1, value 2), in the same block size.

Usage: ``python benchmarks/performance_gap.py [--clients N] [--huge N] [--quick]``; writes
``benchmarks/results/performance_gap.json``. ``--huge 1000000000`` runs one 10^9-client simulation and
records its peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import peak_rss_mb, write_results
from fedstats.analyses.performance_gap import measure_performance_gap
from fedstats.randomness import RandomSource

BLOCK = 1 << 16


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    g = rng.choice(["F", "M"], 74, p=[49 / 74, 25 / 74])
    r = np.where(g == "M", rng.uniform(0.7, 1.0, 74), rng.uniform(0.5, 0.9, 74))
    return g, r


def run_gap(k: int, mechanism: str, seed: int | None) -> tuple[float, float, float, float]:
    """Wall seconds, CPU seconds, estimate and true gap of one end-to-end simulation."""
    g, r = _data()
    t0, c0 = time.perf_counter(), time.process_time()
    res = measure_performance_gap(
        g, r, mechanism=mechanism, epsilon=1.0, n_clients=k, randomness=RandomSource(seed)
    )
    assert res.true_gap is not None
    return time.perf_counter() - t0, time.process_time() - c0, res.gap, res.true_gap


def run_numpy_raw(k: int, draws: int = 5) -> tuple[float, float]:
    """Wall and CPU seconds for ``draws`` uniforms per client from numpy's generator, block by block."""
    rng = np.random.default_rng(0)
    t0, c0 = time.perf_counter(), time.process_time()
    acc = 0.0
    for start in range(0, k, BLOCK):
        m = min(BLOCK, k - start)
        for _ in range(draws):
            acc += float(rng.random(m)[0])
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10**7)
    ap.add_argument(
        "--huge", type=int, default=0, help="also run one simulation of this many clients"
    )
    ap.add_argument("--quick", action="store_true", help="10^6 clients")
    args = ap.parse_args()
    k = 10**6 if args.quick else args.clients
    rows = []
    raw, raw_cpu = min(run_numpy_raw(k) for _ in range(2))
    for mech in ("R", "L"):
        for label, seed in (("seeded numpy (PCG64DXSM)", 1), ("secure (AES-CTR)", None)):
            secs, cpu, gap, truth = min(
                (run_gap(k, mech, seed) for _ in range(2)), key=lambda x: x[0]
            )
            rows.append(
                {
                    "mechanism": mech,
                    "randomness": label,
                    "clients": k,
                    "seconds": secs,
                    "cpu_seconds": cpu,
                    "clients_per_second": k / secs,
                    "numpy_raw_seconds_same_draws": raw,
                    "ratio_to_numpy_raw": secs / raw,
                    "numpy_raw_cpu_seconds": raw_cpu,
                    "cpu_ratio_to_numpy_raw": cpu / raw_cpu,
                    "error": gap - truth,
                }
            )
            print(
                f"M_{mech} {label:26s} {k:.0e} clients: {secs:6.2f} s, {k / secs:,.0f} clients/s, "
                f"{secs / raw:.1f}x numpy raw ({raw:.2f} s); CPU {cpu:.2f} s = "
                f"{cpu / raw_cpu:.1f}x numpy raw CPU"
            )
    out = {
        "rows": rows,
        "peak_rss_mb": peak_rss_mb(),
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    if args.huge:
        secs, cpu, gap, truth = run_gap(args.huge, "R", 1)
        out["huge"] = {
            "clients": args.huge,
            "seconds": secs,
            "cpu_seconds": cpu,
            "clients_per_second": args.huge / secs,
            "peak_rss_mb": peak_rss_mb(),
            "error": gap - truth,
        }
        print(f"huge: {args.huge:.0e} clients in {secs:.1f} s, peak RSS {peak_rss_mb():.0f} MiB")
    else:  # keep the last 10^9-client record (it takes minutes)
        from _util import RESULTS

        old = RESULTS / "performance_gap.json"
        if old.exists():
            prev = json.loads(old.read_text())
            if "huge" in prev:
                out["huge"] = prev["huge"]
    path = write_results("performance_gap", out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
