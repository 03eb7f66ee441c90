"""Import cost: `import fedstats` and each analysis's client module against `import numpy`.

A device runs only ``fedstats.analyses.<name>.client``; a CLI call starts with ``import fedstats``. Each is
measured as the CPU time (user + system) of a fresh interpreter that imports it, minus that of an
interpreter that imports nothing, median of 5 runs, in one run beside ``import numpy`` (ratios, since the
machine is noisy). Goals (issue 12): ``import fedstats`` <= 2x numpy, a client module <= 1.5x.

Run: ``python benchmarks/imports.py`` (writes ``benchmarks/results/imports.json``).
"""

from __future__ import annotations

import pkgutil
import resource
import statistics
import subprocess
import sys

import fedstats.analyses
from _util import write_results

REPEAT = 5


def cpu_seconds(statement: str) -> float:
    """CPU seconds (user + sys) of ``python -c statement`` in a fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", statement], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_cost(statement: str) -> float:
    """Median over :data:`REPEAT` runs of the CPU cost of ``statement`` above an empty interpreter."""
    runs = []
    for _ in range(REPEAT):
        runs.append(cpu_seconds(statement) - cpu_seconds("pass"))
    return max(statistics.median(runs), 1e-6)


def client_modules() -> list[str]:
    """Every ``fedstats.analyses.<package>.client`` module."""
    return [
        f"fedstats.analyses.{m.name}.client"
        for m in pkgutil.iter_modules(fedstats.analyses.__path__)
        if m.ispkg
    ]


def main() -> None:
    """Measure and write the results."""
    numpy_s = median_cost("import numpy")
    rows = {"fedstats": median_cost("import fedstats")}
    for mod in client_modules():
        rows[mod] = median_cost(f"import {mod}")
    out = {
        "numpy_cpu_s": numpy_s,
        "imports": {
            k: {"cpu_s": v, "ratio_to_numpy": v / numpy_s, "goal": 2.0 if k == "fedstats" else 1.5}
            for k, v in rows.items()
        },
    }
    for k, v in out["imports"].items():
        ok = "ok" if v["ratio_to_numpy"] <= v["goal"] else "OVER GOAL"
        print(f"{k:45s} {v['cpu_s'] * 1e3:7.1f} ms  {v['ratio_to_numpy']:5.2f}x numpy  {ok}")
    write_results("imports", out)


if __name__ == "__main__":
    main()
