"""CLI start-up: `fedstats --version`, `--help`, `mean --help` and the 10^12-client aggregate mean.

Issue 28 asks for ``fedstats --version`` at most 2x ``import numpy`` and the 10^12-client ``--backend
aggregate`` mean under 1 s wall. Each row is a fresh interpreter, timed as wall (``perf_counter`` around
the child) and CPU (user + system of the child, from ``RUSAGE_CHILDREN``); the rows are interleaved round
by round (numpy, version, help, ... then again), so that a burst of load on the shared machine hits all of
them, and each reports its median (and its fastest run: what the machine gives when nothing else runs).
Ratios to ``import numpy`` are given twice: on the whole process, and above an interpreter that runs
``pass`` (what the import itself costs).

The commands run as the ``fedstats`` console script does (``from fedstats.cli.app import main``), with
this interpreter and the ``fedstats`` it imports (``PYTHONPATH=src`` for a work tree).

Run: ``python benchmarks/cli_startup.py [--repeat 7] [--baseline-src OLD/src]`` (writes
``benchmarks/results/cli_startup.json``; with ``--baseline-src`` the fedstats rows are timed for an older
source tree too, in the same run).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

from _util import write_results

SCRIPT = "import sys; from fedstats.cli.app import main; sys.argv[0] = 'fedstats'; main()"
"""What the ``fedstats`` console script runs (pyproject's ``fedstats = fedstats.cli.app:main``)."""

AGGREGATE_MEAN = (
    "--quiet mean adult --column age --high 127 --clients 1000000000000 --epsilon 1 "
    "--backend aggregate --json"
).split()
"""The 10^12-client mean of Adult's ages on the aggregate route (README, docs/scale.md)."""

ROWS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "import numpy": ["-c", "import numpy"],
    "fedstats --version": ["-c", SCRIPT, "--version"],
    "fedstats --help": ["-c", SCRIPT, "--help"],
    "fedstats mean --help": ["-c", SCRIPT, "mean", "--help"],
    "fedstats mean (10^12 clients, aggregate)": ["-c", SCRIPT, *AGGREGATE_MEAN],
}

GOALS: dict[str, dict[str, float]] = {
    "fedstats --version": {"cpu_ratio_to_numpy": 2.0, "wall_ratio_to_numpy": 2.0},
    "fedstats mean (10^12 clients, aggregate)": {"wall_s": 1.0},
}
"""Issue 28's 'done when'."""


def run_once(args: list[str], src: str | None = None) -> tuple[float, float]:
    """Wall and CPU seconds of ``python ARGS`` in a fresh interpreter (its output discarded).

    ``src``: a source folder put first on ``PYTHONPATH`` (the baseline rows), else this environment's.
    """
    env = None
    if src is not None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    """Measure every row, interleaved, and write the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7, help="runs of each row (median)")
    parser.add_argument("--name", default="cli_startup", help="results file name")
    parser.add_argument(
        "--baseline-src",
        help="also time the fedstats rows with this source folder first on PYTHONPATH (e.g. an "
        "older checkout's src), interleaved with the others",
    )
    opts = parser.parse_args()
    plan: dict[str, tuple[list[str], str | None]] = {k: (v, None) for k, v in ROWS.items()}
    if opts.baseline_src:
        for k, v in ROWS.items():
            if k.startswith("fedstats"):
                plan[f"baseline: {k}"] = (v, os.path.abspath(opts.baseline_src))
    for args, src in plan.values():  # warm the file cache and the byte-code caches
        run_once(args, src)
    walls: dict[str, list[float]] = {k: [] for k in plan}
    cpus: dict[str, list[float]] = {k: [] for k in plan}
    load_before = os.getloadavg()
    for _ in range(opts.repeat):
        for name, (args, src) in plan.items():
            wall, cpu = run_once(args, src)
            walls[name].append(wall)
            cpus[name].append(cpu)
    load_after = os.getloadavg()
    med = {k: (statistics.median(walls[k]), statistics.median(cpus[k])) for k in plan}
    empty_wall, empty_cpu = med["python -c pass"]
    numpy_wall, numpy_cpu = med["import numpy"]
    rows = {}
    for name, (wall, cpu) in med.items():
        row = {
            "wall_s": wall,
            "cpu_s": cpu,
            "wall_s_min": min(walls[name]),
            "cpu_s_min": min(cpus[name]),
            "wall_s_runs": walls[name],
            "cpu_s_runs": cpus[name],
            "wall_ratio_to_numpy": wall / numpy_wall,
            "cpu_ratio_to_numpy": cpu / numpy_cpu,
            "above_empty_wall_ratio_to_numpy": max(wall - empty_wall, 0.0)
            / max(numpy_wall - empty_wall, 1e-6),
            "above_empty_cpu_ratio_to_numpy": max(cpu - empty_cpu, 0.0)
            / max(numpy_cpu - empty_cpu, 1e-6),
        }
        goal = GOALS.get(name.removeprefix("baseline: "))
        if goal is not None:
            row["goal"] = goal
            row["meets_goal"] = all(row[k] <= v for k, v in goal.items())
        rows[name] = row
    print(
        f"{'':52s} {'wall ms':>8s} {'min':>7s} {'cpu ms':>8s} {'wall/np':>8s} {'cpu/np':>7s}  goal"
    )
    for name, row in rows.items():
        mark = "" if "meets_goal" not in row else ("ok" if row["meets_goal"] else "MISSED")
        print(
            f"{name:52s} {row['wall_s'] * 1e3:8.1f} {row['wall_s_min'] * 1e3:7.1f} "
            f"{row['cpu_s'] * 1e3:8.1f} "
            f"{row['wall_ratio_to_numpy']:8.2f} {row['cpu_ratio_to_numpy']:7.2f}  {mark}"
        )
    write_results(
        opts.name,
        {
            "repeat": opts.repeat,
            "command": "fedstats " + " ".join(AGGREGATE_MEAN),
            "how": "fresh interpreter per run, rows interleaved, medians; wall = perf_counter "
            "around the child, cpu = its user + system time",
            "load_average_before": load_before,
            "load_average_after": load_after,
            "cpu_count": os.cpu_count(),
            "baseline_src": opts.baseline_src,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
