"""Run ``secagg.flower_peer`` (in ``benchmarks/.venv-peers``) with its clocks reading CPU time.

``benchmarks/secagg.py``'s stub grid times Flower's client code with ``time.perf_counter`` and counts the
rest as server time; on a loaded machine that wall time overstates CPU. Here ``time.perf_counter`` reads
``time.process_time`` while the workflow runs (one process, one thread: the split is the CPU of Flower's
client and server code), and the round's wall time is that between the first and the last reading of that clock (the
workflow, without Flower's imports). Prints one JSON line.

Usage: ``python benchmarks/_flower_cpu_peer.py CONFIG_JSON`` (the configuration of ``secagg.flower_peer``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import secagg


def main() -> None:
    """Run one Flower SecAgg+ round; print its CPU split and wall time as JSON."""
    cfg = json.loads(sys.argv[1])
    wall = time.perf_counter
    seen: list[float] = []  # wall clock at the first and the latest reading of the patched clock

    def cpu_clock() -> float:
        now = wall()
        if seen:
            seen[1:] = [now]
        else:
            seen.append(now)
        return time.process_time()

    t0 = wall()
    time.perf_counter = cpu_clock  # secagg.flower_peer's clock: now CPU seconds
    try:
        res = secagg.flower_peer(cfg)
    finally:
        time.perf_counter = wall
    # flower_peer reads its clock first just before the workflow and last just after it
    res["wall_seconds"] = seen[-1] - seen[0]
    res["wall_seconds_with_imports"] = wall() - t0
    res["clock"] = "process_time"
    print(json.dumps(res))


if __name__ == "__main__":
    main()
