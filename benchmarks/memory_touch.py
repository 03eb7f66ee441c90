"""How long a process takes to touch new memory, and how soon freed memory is slow to touch again.

This project's machines are virtual machines: the host backs guest memory only when the guest first
touches it and, as measured here, takes back within seconds what the guest frees. Every page a process
then takes from the kernel costs it CPU time (the host's fault handling counts as the guest process's
time), so page faults weigh in the server's CPU (``server_page_faults`` of
``benchmarks/service_secagg.py``) and whole-run measurements vary with the host.

This allocates and writes ``--gib`` GiB (numpy), frees it, and does so again at once and after each of
``--waits`` seconds; it writes ``benchmarks/results/memory_touch.json`` with the seconds and GiB/s of
each touch. On a machine whose freed memory stays backed, every touch after the first is fast.

Run: ``python benchmarks/memory_touch.py [--gib 2] [--waits 0 5 20]``.
"""

from __future__ import annotations

import argparse
import os
import time

from _util import memory_touch_rate, write_results


def main() -> None:
    """Touch, free and touch again after each wait; print one line each; write the results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=2.0, help="memory per touch, GiB (default 2)")
    ap.add_argument(
        "--waits",
        type=float,
        nargs="+",
        default=[0.0, 5.0, 20.0],
        help="seconds to wait before each touch after the first (default 0 5 20)",
    )
    args = ap.parse_args()
    rows = [{"wait_seconds": None, **memory_touch_rate(args.gib)}]
    print(f"first touch: {rows[0]['seconds']:.2f} s", flush=True)
    for wait in args.waits:
        time.sleep(wait)
        rows.append({"wait_seconds": wait, **memory_touch_rate(args.gib)})
        print(f"after {wait:g} s: {rows[-1]['seconds']:.2f} s", flush=True)
    write_results(
        "memory_touch",
        {
            "command": "python benchmarks/memory_touch.py "
            + f"--gib {args.gib:g} --waits {' '.join(f'{w:g}' for w in args.waits)}",
            "load_average_before": list(os.getloadavg()),
            "touches": rows,
        },
    )


if __name__ == "__main__":
    main()
