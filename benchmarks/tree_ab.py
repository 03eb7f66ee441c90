"""The cohort tree's device and server steps, a baseline checkout against this one in one process.

On a shared machine whose load changes from minute to minute, two runs of ``benchmarks/device_tree.py``
differ by more than a change; here both versions run in one process, each step's calls alternated
(baseline, this checkout, then the other way round), so a busy spell slows both alike. The baseline's
``fedstats`` package (``--baseline``, e.g. ``/work/main/src``) is copied to a temporary directory as
``fedstats_baseline``, its imports of ``fedstats`` renamed; this checkout's is the importable
``fedstats``. Steps (CPU ms, the least of ``--repeat`` calls each; those marked cold clear the
permutation's and the session graph's module caches first): a device's committee multiproof (parse
and ``verify_multi``), a round's member positions (``members_at``, or ``member_at`` per index where the
checkout lacks it) and a round's tree work (``session_of``, the positions, ``verify_leaves`` of the
neighbourhood answer: ``2k + 16``-odd leaves, as ``benchmarks/device_tree.py`` draws them); the
server's ``CohortTree`` build from new ``Leaf`` objects, ``multiproof_bytes`` of ``2k + 16`` positions
and ``sessions_of_positions`` (cold).

Run: ``flock /tmp/bench.lock python benchmarks/tree_ab.py --baseline /work/main/src [--members 1000
5000] [--repeat 31] [--output tree_ab]`` (writes ``benchmarks/results/<output>.json``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from _util import write_results
from device_tree import clear_caches, positions

_MODULES = {
    "ct": "wire.cohort_tree",
    "cs": "wire.cohort_sessions",
    "ts": "wire.tree_seeding",
    "roster": "client.roster",
    "graph": "secagg.graph",
    "seeding": "wire.seeding",
    "collusion": "secagg.collusion",
}


def baseline_package(src: Path, into: Path) -> str:
    """Copy ``src/fedstats`` to ``into/fedstats_baseline`` with its imports renamed; its name."""
    shutil.copytree(
        src / "fedstats", into / "fedstats_baseline", ignore=shutil.ignore_patterns("__pycache__")
    )
    pattern = re.compile(r"\b(from|import) fedstats\b|\"fedstats\.")
    for path in (into / "fedstats_baseline").rglob("*.py"):
        text = path.read_text()
        text = pattern.sub(lambda m: m.group(0).replace("fedstats", "fedstats_baseline"), text)
        path.write_text(text)
    sys.path.insert(0, str(into))
    return "fedstats_baseline"


def _load(package: str) -> dict[str, Any]:
    return {k: importlib.import_module(f"{package}.{v}") for k, v in _MODULES.items()}


def _cold(v: dict[str, Any]) -> None:
    clear_caches(v["cs"], v["graph"])


def _positions(v: dict[str, Any], seed: bytes, n: int, me: int, indices: list[int]) -> list[int]:
    seat = v["cs"].session_of(seed, 0, n, n, 2, me)
    return positions(v["cs"], seed, n, seat.number, indices)


def _row(n: int, repeat: int, versions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rng = random.Random(n)
    fields = [
        (
            str(uuid.UUID(int=rng.getrandbits(128))),
            rng.randbytes(32),
            rng.randbytes(32),
            rng.randint(1, 3),
        )
        for _ in range(n)
    ]
    trees = {
        name: v["ct"].CohortTree([v["ct"].Leaf(*f) for f in fields]) for name, v in versions.items()
    }
    ours = versions["this"]
    head = trees["this"].head
    assert all(t.head.to_bytes() == head.to_bytes() for t in trees.values())
    me = rng.randrange(n)
    committee = ours["cs"].committee_positions(head)
    committee_raw = trees["this"].multiproof_bytes(committee)
    k = ours["collusion"].session_parameters(n).k
    audit = np.random.default_rng(n)
    rounds = []
    for _ in range(repeat):
        seed = os.urandom(32)
        seat = ours["cs"].session_of(seed, 0, n, n, 2, me)
        session = ours["seeding"].session_id(seed, 0, seat.number)
        checked = ours["roster"].checked_members(
            seat.size, k, session, seat.roster_index, 16, audit
        )
        two = ours["roster"].two_hop(seat.size, k, session, seat.roster_index)
        named = checked + sorted(set(two) - set(checked))
        answer = ours["ts"].leaves_answer(trees["this"], _positions(ours, seed, n, me, named), [])
        rounds.append((seed, named, answer))
    cover = random.Random(1).sample(range(n), min(n, 2 * k + 16))

    def committee_multiproof(name: str, v: dict[str, Any], r: Any) -> None:
        proof = v["ct"].MultiProof.from_bytes(committee_raw, max_leaves=n)
        v["ct"].verify_multi(trees[name].head, proof, committee)

    def positions_cold(name: str, v: dict[str, Any], r: Any) -> None:
        _cold(v)
        _positions(v, r[0], n, me, r[1])

    def round_cold(name: str, v: dict[str, Any], r: Any) -> None:
        _cold(v)
        v["ts"].verify_leaves(trees[name].head, r[2], _positions(v, r[0], n, me, r[1]))

    def build(name: str, v: dict[str, Any], r: Any) -> None:
        v["ct"].CohortTree([v["ct"].Leaf(*f) for f in fields])

    def multiproof_bytes(name: str, v: dict[str, Any], r: Any) -> None:
        trees[name].multiproof_bytes(cover)

    def sessions_cold(name: str, v: dict[str, Any], r: Any) -> None:
        _cold(v)
        v["cs"].sessions_of_positions(r[0], 0, n, min(n, 1000), 2)

    steps: dict[str, Callable[[str, dict[str, Any], Any], None]] = {
        "device_committee_multiproof": committee_multiproof,
        "device_round_positions_cold": positions_cold,
        "device_round_tree_work_cold": round_cold,
        "server_build_new_leaves": build,
        "server_multiproof_bytes": multiproof_bytes,
        "server_sessions_of_positions_cold": sessions_cold,
    }
    out: dict[str, Any] = {}
    order = list(versions.items())
    for step_name, step in steps.items():
        best = dict.fromkeys(versions, float("inf"))
        for i in range(repeat):
            for name, v in order if i % 2 == 0 else order[::-1]:
                began = time.process_time()
                step(name, v, rounds[i])
                best[name] = min(best[name], time.process_time() - began)
        out[step_name] = {
            "baseline_ms": round(1000 * best["baseline"], 3),
            "this_ms": round(1000 * best["this"], 3),
            "speedup": round(best["baseline"] / best["this"], 2),
        }
    return {"members": n, "k": k, "named_per_round": len(rounds[0][1]), "cpu": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout's src directory")
    ap.add_argument("--members", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--repeat", type=int, default=31)
    ap.add_argument("--output", default="tree_ab")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        versions = {
            "baseline": _load(baseline_package(args.baseline, Path(tmp))),
            "this": _load("fedstats"),
        }
        rows = []
        for n in args.members:
            rows.append(_row(n, args.repeat, versions))
            for step, got in rows[-1]["cpu"].items():
                print(f"n={n} {step}: {got}")
    path = write_results(
        args.output,
        {
            "command": f"python benchmarks/tree_ab.py --baseline {args.baseline} --members "
            + " ".join(map(str, args.members))
            + f" --repeat {args.repeat} --output {args.output}",
            "baseline_sources": str(args.baseline),
            "this_sources": os.path.dirname(versions["this"]["ct"].__file__),
            "load_average": os.getloadavg(),
            "what": "cohort-tree steps, baseline against this checkout in one process (CPU ms)",
            "rows": rows,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
