"""O(k log n) seeding's building blocks (``fedstats.wire.cohort_tree``): server build time, device bytes and CPU.

Issue 40 asks that a device download ``O(k log n)`` bytes per secure run, not the whole seed list. This
measures what the design of ``docs/deploy.md`` ("Per-device cost at scale", "Next steps", item 1) would
cost, on synthetic cohorts (random ids, commitments and keys, one to three slots per member): the
server's tree build at n = 1,000, 5,000 and 20,000 (best of ``--repeat``); and per device the bytes of
its own leaf proof, of ``k + 16`` leaves (``k`` neighbours and 16 audited, random positions) as separate
proofs and as one multiproof, of the committee (40 leaves in one multiproof, their 32-byte values and
64-byte signatures; certificates not counted), against today's list (the commitment list with keys and
the reveals as JSON, as ``benchmarks/device_seeding.py`` builds them); and the device's CPU to verify
each (``time.process_time``, best of ``--repeat``), the committee's 40 Ed25519 signatures included, and
``session_of`` plus ``k`` ``member_at`` calls; and the server's ``sessions_of_positions`` (both cold: a
new seed each time) and its neighbourhood answer per device and round (``2k + 16`` leaves in one
multiproof, encoded: ``multiproof().to_bytes()`` against ``multiproof_bytes``). Every device figure includes parsing the bytes.

Run: ``python benchmarks/cohort_tree.py [--members 1000 5000 20000] [--repeat 5] [--output cohort_tree]``
(writes ``benchmarks/results/<output>.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from _util import best_of, random_cohort, write_results
from fedstats.secagg.identity import verify_signature
from fedstats.wire import cohort_sessions as cs
from fedstats.wire import cohort_tree as ct
from fedstats.wire import seeding

K = {1000: 90, 5000: 108}
"""Neighbours per device at each n (``docs/deploy.md``'s scale table); 120 above."""
AUDITED = 16


def _cpu(fn: Callable[[], Any], repeat: int) -> float:
    """Least CPU seconds of ``repeat`` calls."""
    return best_of(fn, repeat, time.process_time)


def _today_bytes(n: int) -> int:
    """Today's O(n) download: the check-in answer's list and the reveal answer, as JSON."""
    run = "run-" + uuid.uuid4().hex
    rows, reveals = [], []
    for i in range(n):
        cid, value = str(uuid.uuid4()), os.urandom(32)
        rows.append([cid, seeding.commitment(run, cid, value), "", i, 1, os.urandom(32).hex()])
        reveals.append(value.hex())
    listed = json.dumps({"members": rows}).encode()
    revealed = json.dumps({"seed": os.urandom(32).hex(), "reveals": reveals}).encode()
    return len(listed) + len(revealed)


def _row(n: int, repeat: int) -> dict[str, Any]:
    rng, run, ids, values, leaves = random_cohort(n)
    build = _cpu(lambda: ct.CohortTree(leaves), repeat)
    tree = ct.CohortTree(leaves)
    head = tree.head
    committee = cs.committee_positions(head)
    sigs = [ids[p].sign(cs.reveal_statement(run, head, p, values[p])) for p in committee]
    me = rng.randrange(n)
    k = K.get(n, 120)
    others = rng.sample([p for p in range(n) if p != me], min(n - 1, k + AUDITED))
    own = tree.leaf_proof(me).to_bytes()
    separate = [tree.leaf_proof(p).to_bytes() for p in others]
    multi = tree.multiproof(others)
    multi_bytes = multi.to_bytes()
    cmulti = tree.multiproof(committee)
    committee_bytes = len(cmulti.to_bytes()) + 32 * len(committee) + 64 * len(committee)

    def verify_own() -> int:
        got = ct.LeafProof.from_bytes(own, max_leaves=n)
        return ct.verify_leaf(head, got.position, got.leaf, got.path)

    def verify_separate() -> list[int]:
        out = []
        for raw in separate:
            got = ct.LeafProof.from_bytes(raw, max_leaves=n)
            out.append(ct.verify_leaf(head, got.position, got.leaf, got.path))
        return out

    rp = tree.range_proof(0, head.total_slots)

    def verify_committee() -> bytes:
        got = ct.MultiProof.from_bytes(cmulti.to_bytes(), max_leaves=n)
        ct.verify_multi(head, got, cs.committee_positions(head))
        vals = []
        for p, leaf, sig in zip(got.positions, got.leaves, sigs, strict=True):
            if seeding.commitment(run, leaf.client_id, values[p]) != leaf.commitment.hex():
                raise AssertionError("commitment")
            if not verify_signature(leaf.key, sig, cs.reveal_statement(run, head, p, values[p])):
                raise AssertionError("signature")
            vals.append(values[p])
        return cs.committee_seed(run, head, vals)

    verify_committee()
    max_session = min(n, 1000)

    def derive_session() -> None:
        s = os.urandom(32)  # cold: a new permutation
        seat = cs.session_of(s, 0, n, max_session, 2, me)
        for i in range(min(k, seat.size)):
            cs.member_at(s, 0, n, max_session, 2, seat.number, i)

    cpu = {
        "own_leaf": _cpu(verify_own, repeat),
        "k16_separate": _cpu(verify_separate, repeat),
        "k16_multiproof": _cpu(
            lambda: ct.verify_multi(head, ct.MultiProof.from_bytes(multi_bytes, max_leaves=n)),
            repeat,
        ),
        "committee_with_signatures": _cpu(verify_committee, repeat),
        "range": _cpu(lambda: ct.verify_range(head, 0, head.total_slots, rp), repeat),
        "session_of_and_k_member_at": _cpu(derive_session, repeat),
        "server_sessions_of_positions_cold": _cpu(
            lambda: cs.sessions_of_positions(os.urandom(32), 0, n, max_session, 2), repeat
        ),
    }
    # the server's neighbourhood answer per device and round: 2k + 16 leaves (neighbours, audited,
    # two-hop) in one multiproof, encoded; as built first and from the leaves' kept encodings
    cover = rng.sample(range(n), min(n, 2 * k + AUDITED))
    server = {
        "neighbourhood_multiproof_then_encoded": _cpu(
            lambda: tree.multiproof(cover).to_bytes(), repeat
        ),
        "neighbourhood_multiproof_bytes": _cpu(lambda: tree.multiproof_bytes(cover), repeat),
    }
    today = _today_bytes(n)
    new_total = len(own) + len(multi_bytes) + committee_bytes + len(rp.to_bytes())
    return {
        "members": n,
        "k": k,
        "build_ms": round(1000 * build, 3),
        "bytes": {
            "own_leaf_proof": len(own),
            "k16_separate_proofs": sum(map(len, separate)),
            "k16_multiproof": len(multi_bytes),
            "committee_leaves_values_signatures": committee_bytes,
            "range_proof": len(rp.to_bytes()),
            "new_total_with_multiproofs": new_total,
            "today_list_and_reveals": today,
        },
        "multiproof_saving": round(1 - len(multi_bytes) / sum(map(len, separate)), 3),
        "device_cpu_ms": {k_: round(1000 * v, 3) for k_, v in cpu.items()},
        "server_cpu_ms": {k_: round(1000 * v, 3) for k_, v in server.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, nargs="+", default=[1000, 5000, 20000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--output", default="cohort_tree", help="results file name (no .json)")
    args = ap.parse_args()
    rows = []
    for n in args.members:
        rows.append(_row(n, args.repeat))
        r = rows[-1]
        print(
            f"n={n}: build {r['build_ms']} ms, device bytes {r['bytes']['new_total_with_multiproofs']}"
            f" (today {r['bytes']['today_list_and_reveals']}), cpu {r['device_cpu_ms']}"
        )
    path = write_results(
        args.output,
        {
            "command": "python benchmarks/cohort_tree.py --members "
            + " ".join(map(str, args.members))
            + f" --repeat {args.repeat}"
            + ("" if args.output == "cohort_tree" else f" --output {args.output}"),
            "fedstats_sources": os.path.dirname(ct.__file__),
            "load_average": os.getloadavg(),
            "what": "O(k log n) seeding's blocks: server build (CPU ms), per-device bytes and CPU ms",
            "rows": rows,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
