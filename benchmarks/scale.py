"""Scale: clients per second of M_R and adaptive bit pushing on the serial, process and dask routes.

For each size (default 10^7, 10^8, 10^9 clients), each analysis and each route, one end-to-end run:

* ``gap``: the performance gap with mechanism M_R (Juarez & Korolova 2023, Harmony + randomized response
  on the value, GRR on the group), epsilon = 1, ``measure_performance_gap(..., n_clients=N)``: clients
  resampled within each group from 74 rows (a :class:`~fedstats.engine.ResampledPopulation`, generated block
  by block, never materialized); two engine rounds (the private report and the simulation-only truth).
* ``bitpushing``: adaptive bit pushing (Cormode & Markov 2021, Algorithm 2) with randomized response,
  epsilon = 1, 7-bit codes, one bit per client, on values uniform in {0, ..., 127} (a
  ``ResampledPopulation`` of ``arange(128)``); two engine rounds, no truth pass.

Routes: ``serial`` (this process), ``process`` (a pool of 2 worker processes) and ``dask`` (a
``LocalCluster`` of 2 single-threaded worker processes), all with the default shard size (2^20 clients)
and block size (2^16). The same seed is used everywhere, so every route must give the *same* estimate
(checked: ``identical_to_serial``).

Measured per run: wall seconds and clients per second (cluster start-up excluded, reported apart), CPU
seconds of the driver and of the workers, peak resident memory of the driver and of each worker (Linux
``VmHWM``; the driver's high-water mark is reset before each run through ``/proc/self/clear_refs``), and
the load average (the machine may be shared). The extra route ``dask-notrim`` is ``dask`` with
distributed's default worker environment ``MALLOC_TRIM_THRESHOLD_=65536`` unset (that setting disables
glibc's dynamic mmap threshold, so each block-sized array is mmap'ed and zero-filled afresh).

Scaling efficiency of a 2-worker route = ``throughput(route) / (2 * throughput(serial))`` for the same
analysis and size, on wall time; the same ratio on CPU time (``cpu_efficiency``) shows the parallel
overhead independently of other load.

Usage::

    python benchmarks/scale.py [--quick] [--sizes 1e7,1e8,1e9]
        [--backends serial,process,dask[,dask-notrim]] [--analyses gap,bitpushing] [--workers 2]

``--quick`` runs 10^6 and 10^7 clients. Results go to ``benchmarks/results/scale.json`` (written atomically
after every run, so an interrupted benchmark keeps the runs it finished).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import write_results
from fedstats.analyses.bitpushing import BitEncoding, estimate_mean
from fedstats.analyses.performance_gap import measure_performance_gap
from fedstats.engine import Engine, ResampledPopulation
from fedstats.engine.dask import DaskBackend
from fedstats.engine.routes import open_backend
from fedstats.randomness import RandomSource

EPSILON = 1.0
SEED = 1
PAGE_KIB = 1024
NOTRIM = "dask-notrim"
TRIM_VAR = "MALLOC_TRIM_THRESHOLD_"


def _status_kib(pid: int, field: str) -> float | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (e.g. ``VmHWM``, the peak resident set), or None."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (``/proc/<pid>/stat``), or None."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _reset_driver_peak() -> bool:
    """Reset this process's peak-RSS high-water mark (Linux >= 4.0); False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _worker_pids(backend: Any) -> list[int]:
    """Process ids of the route's workers (empty for the serial route)."""
    if backend.name == "dask":
        return sorted(int(p) for p in backend.client.run(os.getpid).values())
    if backend.name == "process":
        pool = getattr(backend, "_pool", None)
        procs = getattr(pool, "_processes", None) or {}
        return sorted(int(p) for p in procs)
    return []


# ---------------------------------------------------------------- the two analyses


def _gap_rows() -> tuple[np.ndarray, np.ndarray]:
    """74 clients in two groups (as in benchmarks/performance_gap.py)."""
    rng = np.random.default_rng(0)
    g = rng.choice(["F", "M"], 74, p=[49 / 74, 25 / 74])
    r = np.where(g == "M", rng.uniform(0.7, 1.0, 74), rng.uniform(0.5, 0.9, 74))
    return g, r


def run_gap(n: int, engine: Engine) -> dict[str, Any]:
    """Performance gap with M_R over ``n`` resampled clients."""
    g, r = _gap_rows()
    res = measure_performance_gap(g, r, mechanism="R", epsilon=EPSILON, n_clients=n, engine=engine)
    return {"estimate": res.gap, "truth": res.true_gap, "standard_error": res.standard_error}


def run_bitpushing(n: int, engine: Engine) -> dict[str, Any]:
    """Adaptive bit pushing with randomized response over ``n`` clients uniform in {0..127}."""
    pop = ResampledPopulation({"value": np.arange(128, dtype=np.float64)}, n)
    res = estimate_mean(
        pop, BitEncoding(0, 127), method="adaptive", epsilon=EPSILON, engine=engine, truth=False
    )
    return {"estimate": res.estimate, "truth": 63.5, "standard_error": res.standard_error}


ANALYSES: dict[str, Callable[[int, Engine], dict[str, Any]]] = {
    "gap": run_gap,
    "bitpushing": run_bitpushing,
}


# ---------------------------------------------------------------- one run


def run_cell(analysis: str, n: int, route: str, workers: int) -> dict[str, Any]:
    """One end-to-end run of ``analysis`` over ``n`` clients on ``route``; timings and memory."""
    reset = _reset_driver_peak()
    load_before = os.getloadavg()
    t_open = time.perf_counter()
    config: dict[str, Any] = {}
    saved_env = os.environ.get(TRIM_VAR)
    if route == NOTRIM:
        # distributed's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in its workers, which turns off glibc's
        # dynamic mmap threshold: every block-sized numpy array is then mmap'ed and zero-filled afresh.
        # The nanny also leaves the variable in this process's environment, which new workers inherit.
        config = {f"distributed.nanny.pre-spawn-environ.{TRIM_VAR}": None}
        os.environ.pop(TRIM_VAR, None)
    with (
        dask.config.set(config),
        open_backend(
            "dask" if route == NOTRIM else route, workers=None if route == "serial" else workers
        ) as backend,
    ):
        startup = time.perf_counter() - t_open
        engine = Engine(backend, RandomSource(SEED))
        pids0 = _worker_pids(backend)
        cpu_w0 = {p: _cpu_seconds(p) or 0.0 for p in pids0}
        c0, t0 = time.process_time(), time.perf_counter()
        out = ANALYSES[analysis](n, engine)
        seconds = time.perf_counter() - t0
        driver_cpu = time.process_time() - c0
        pids = _worker_pids(backend)
        trim: dict[str, Any] = {}
        if isinstance(backend, DaskBackend):
            trim = backend.client.run(os.environ.get, TRIM_VAR)
        worker_peak = {str(p): (_status_kib(p, "VmHWM") or 0.0) / PAGE_KIB for p in pids}
        worker_cpu = sum((_cpu_seconds(p) or 0.0) - cpu_w0.get(p, 0.0) for p in pids)
        retries = engine.retries
    if saved_env is not None:
        os.environ[TRIM_VAR] = saved_env
    driver_peak = (_status_kib(os.getpid(), "VmHWM") or 0.0) / PAGE_KIB
    cpu = driver_cpu + worker_cpu
    row: dict[str, Any] = {
        "analysis": analysis,
        "clients": n,
        "backend": route,
        "workers": 1 if route == "serial" else workers,
        "seconds": seconds,
        "clients_per_second": n / seconds,
        "startup_seconds": startup,
        "driver_cpu_seconds": driver_cpu,
        "worker_cpu_seconds": worker_cpu,
        "clients_per_cpu_second": n / cpu if cpu > 0 else None,
        "driver_peak_rss_mib": driver_peak,
        "driver_peak_reset": reset,
        "worker_peak_rss_mib": worker_peak,
        "max_worker_peak_rss_mib": max(worker_peak.values()) if worker_peak else driver_peak,
        "retries": retries,
        "worker_malloc_trim_threshold": sorted({str(v) for v in trim.values()}),
        "rounds": [
            {"name": r.name, "clients": r.n_clients, "seconds": r.seconds} for r in engine.log
        ],
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        **out,
    }
    return row


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scaling efficiency and equality with serial, per (analysis, size, parallel route)."""
    serial = {(r["analysis"], r["clients"]): r for r in rows if r["backend"] == "serial"}
    out = []
    for r in rows:
        s = serial.get((r["analysis"], r["clients"]))
        if r["backend"] == "serial" or s is None:
            continue
        eff = r["clients_per_second"] / (r["workers"] * s["clients_per_second"])
        cpu_eff = None
        if r["clients_per_cpu_second"] and s["clients_per_cpu_second"]:
            cpu_eff = r["clients_per_cpu_second"] / s["clients_per_cpu_second"]
        out.append(
            {
                "analysis": r["analysis"],
                "clients": r["clients"],
                "backend": r["backend"],
                "workers": r["workers"],
                "speedup_vs_serial": r["clients_per_second"] / s["clients_per_second"],
                "scaling_efficiency": eff,
                "cpu_efficiency": cpu_eff,
                "identical_to_serial": r["estimate"] == s["estimate"],
            }
        )
    return out


def _sizes(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10^6 and 10^7 clients")
    ap.add_argument("--sizes", type=_sizes, default=None, help="comma list, e.g. 1e7,1e8,1e9")
    ap.add_argument("--backends", default="serial,process,dask", help="comma list of routes")
    ap.add_argument("--analyses", default="gap,bitpushing", help="comma list: gap, bitpushing")
    ap.add_argument("--workers", type=int, default=2, help="workers of the parallel routes")
    ap.add_argument(
        "--name", default="scale", help="results file name (benchmarks/results/NAME.json)"
    )
    args = ap.parse_args()
    sizes = args.sizes or ([10**6, 10**7] if args.quick else [10**7, 10**8, 10**9])
    routes = [b.strip() for b in args.backends.split(",") if b.strip()]
    analyses = [a.strip() for a in args.analyses.split(",") if a.strip()]
    for a in analyses:
        if a not in ANALYSES:
            ap.error(f"unknown analysis {a!r}; choose from {', '.join(ANALYSES)}")
    command = "python benchmarks/scale.py " + " ".join(sys.argv[1:])
    rows: list[dict[str, Any]] = []
    started = time.time()
    for n in sizes:
        for analysis in analyses:
            for route in routes:
                row = run_cell(analysis, n, route, args.workers)
                rows.append(row)
                print(
                    f"{analysis:10s} {n:.0e} {route:8s}: {row['seconds']:8.1f} s "
                    f"{row['clients_per_second']:12,.0f} clients/s  driver peak "
                    f"{row['driver_peak_rss_mib']:6.0f} MiB  worker peak "
                    f"{row['max_worker_peak_rss_mib']:6.0f} MiB  est {row['estimate']:.6g}  "
                    f"load {row['load_average_after'][0]:.1f}",
                    flush=True,
                )
                write_results(
                    args.name,
                    {
                        "command": command,
                        "complete": False,
                        "cpu_count": os.cpu_count(),
                        "epsilon": EPSILON,
                        "seed": SEED,
                        "block_size": 1 << 16,
                        "shard_size": 1 << 20,
                        "rows": rows,
                        "efficiency": summarize(rows),
                        "elapsed_seconds": time.time() - started,
                    },
                )
    path = write_results(
        args.name,
        {
            "command": command,
            "complete": True,
            "cpu_count": os.cpu_count(),
            "epsilon": EPSILON,
            "seed": SEED,
            "block_size": 1 << 16,
            "shard_size": 1 << 20,
            "rows": rows,
            "efficiency": summarize(rows),
            "elapsed_seconds": time.time() - started,
        },
    )
    for e in summarize(rows):
        print(
            f"{e['analysis']:10s} {e['clients']:.0e} {e['backend']:8s}: speedup "
            f"{e['speedup_vs_serial']:.2f}x, efficiency {e['scaling_efficiency']:.2f} (cpu "
            f"{e['cpu_efficiency'] or 0:.2f}), identical {e['identical_to_serial']}"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
