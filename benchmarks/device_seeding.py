"""A device's O(n) seeding work per secure run, step by step, at n = 1,000 and 5,000 members.

Issue 40 asks that check-in and seeding not grow with n per device. Today each device receives the run's
whole commitment list (with every member's identity key) and every reveal, and checks them: this
measures that work alone, in one process, the steps in the order ``fedstats.client.secure`` takes them
(``SecureRuns._reveal``: parse, ``entries_of``, ``keys_of``, its own entry and key,
``commitments_digest``, ``PackedMembers``; ``SecureRuns._verified_seed``: the reveals parsed, the
packed list's entries, ``verify_reveals``, ``withheld_of``; then ``sessions_of`` for a round, which the
simulated devices of one harness process share, cold and warm). Times are CPU seconds
(``time.process_time``), the best of ``--repeat`` runs on a synthetic list (random ids, keys and
reveals, one slot per member). The JSON is what O(k log n) seeding (``docs/deploy.md``, "Per-device cost
at scale", step 1) would remove.

Run: ``python benchmarks/device_seeding.py [--members 1000 5000] [--repeat 5]`` (writes
``benchmarks/results/device_seeding.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from _util import write_results
from fedstats.client.secure_members import PackedMembers
from fedstats.wire import seeding


def _fixture(n: int) -> dict[str, Any]:
    """A run of ``n`` members: the check-in answer's list and the reveal answer, as JSON bytes."""
    run = "run-" + uuid.uuid4().hex
    values = [os.urandom(32) for _ in range(n)]
    ids = [str(uuid.uuid4()) for _ in range(n)]
    keys = [os.urandom(32).hex() for _ in range(n)]
    entries = [(ids[i], seeding.commitment(run, ids[i], values[i]), i, 1) for i in range(n)]
    rows = [[c, com, "", start, count, keys[i]] for i, (c, com, start, count) in enumerate(entries)]
    seed = seeding.run_seed(run, entries, values, keys)
    me = n // 2
    return {
        "run": run,
        "me": me,
        "id": ids[me],
        "value": values[me],
        "key": keys[me],
        "listed": json.dumps({"members": rows}).encode(),
        "revealed": json.dumps({"seed": seed.hex(), "reveals": [v.hex() for v in values]}).encode(),
    }


def _steps(f: dict[str, Any]) -> dict[str, float]:
    """One device's seeding, each step's CPU seconds."""
    took: dict[str, float] = {}
    clock = time.process_time()

    def step(name: str) -> None:
        nonlocal clock
        now = time.process_time()
        took[name] = now - clock
        clock = now

    run, cid, me = f["run"], f["id"], f["me"]
    tr = json.loads(f["listed"])
    step("parse_list")
    entries = seeding.entries_of(tr)
    step("entries_of")
    keys = seeding.keys_of(tr)
    step("keys_of")
    seeding.check_own_entry(entries, cid, commitment=entries[me][1], slot_start=me, slot_count=1)
    if [k for (c, _, _, _), k in zip(entries, keys, strict=True) if c == cid] != [f["key"]]:
        raise AssertionError("own key")
    step("own_entry")
    seen = seeding.commitments_digest(run, entries, keys)
    step("commitments_digest")
    members = PackedMembers(entries, keys)
    del tr, entries, keys
    step("packed_members")
    got = json.loads(f["revealed"])
    reveals = [str(v) for v in got["reveals"]]
    step("parse_reveals")
    entries = members.entries()
    step("packed_entries")
    seed = seeding.verify_reveals(
        run, cid, entries, reveals, got["seed"], digest=seen, own_value=f["value"]
    )
    seeding.withheld_of(entries, reveals)
    step("verify_reveals")
    cohort = members.cohort()
    seeding._ORDER_TAGS.clear()  # the harness's processes share these; a real device computes them once
    seeding.sessions_of(cohort, seed, 0, (0, len(cohort)), len(cohort), 2)
    step("sessions_of_cold")
    seeding.sessions_of(cohort, seed, 1, (0, len(cohort)), len(cohort), 2)
    step("sessions_of_warm")
    return took


def _best(fn: Callable[[], dict[str, float]], repeat: int) -> dict[str, float]:
    """Each step's least time over ``repeat`` runs."""
    runs = [fn() for _ in range(repeat)]
    return {k: min(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for n in args.members:
        f = _fixture(n)
        best = _best(lambda f=f: _steps(f), args.repeat)  # type: ignore[misc]
        total = sum(v for k, v in best.items() if k != "sessions_of_warm")
        rows.append(
            {
                "members": n,
                "bytes_received": len(f["listed"]) + len(f["revealed"]),
                "cpu_ms_by_step": {k: round(1000 * v, 3) for k, v in best.items()},
                "cpu_ms_per_device": round(1000 * total, 3),
            }
        )
        print(f"n={n}: {1000 * total:.1f} ms of CPU per device, {rows[-1]['bytes_received']} bytes")
    path = write_results(
        "device_seeding",
        {
            "command": "python benchmarks/device_seeding.py --members "
            + " ".join(map(str, args.members))
            + f" --repeat {args.repeat}",
            "what": "a device's O(n) seeding work per run (CPU ms, best of --repeat), by step",
            "rows": rows,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
