"""A device's cohort-tree work per secure run, in process: CPU ms per device at n = 1,000 and 5,000.

What ``fedstats.client.secure_tree`` does with the tree form of a run (``docs/deploy.md``, *In a large
cohort, the cohort tree*), step by step, on a synthetic cohort (random ids, real Ed25519 keys and
signatures, one to three slots per member; one session of ``n`` per round, as
``benchmarks/service_secagg.py`` runs it): the own leaf at check-in (``check_own_leaf``); the seed
committee's multiproof alone and the whole committee check with its 40 commitments and Ed25519
signatures (``verify_committee``, certificates not checked); and per round the device's seat
(``session_of``), its checked members and two-hop neighbours (``checked_members``, ``two_hop``: the
session graph, not tree work, shown for scale), their tree positions (``member_at`` per roster index,
or ``members_at`` at once where the checkout has it, as its device does) and the neighbourhood's
multiproof (``verify_leaves`` of the server's ``leaves_answer``, base64 decoding and parsing
included). ``per_run`` adds the own leaf, the committee and two rounds' session, positions and
neighbourhood (the graph left out). Each figure is the least CPU time (``time.process_time``) of
``--repeat`` runs; every run of a per-round step takes another seed and starts with the module caches
of ``fedstats.wire.cohort_sessions`` and ``fedstats.secagg.graph`` cleared (a real device's permutation
and graph are cold; the simulated devices of one benchmark process share them).

Run: ``flock /tmp/bench.lock python benchmarks/device_tree.py [--members 1000 5000] [--repeat 7]
[--output device_tree]`` (writes ``benchmarks/results/<output>.json``).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from _util import best_of, random_cohort, write_results
from fedstats.client.roster import checked_members, two_hop
from fedstats.client.secure_members import AUDIT_MEMBERS
from fedstats.secagg import graph as secagg_graph
from fedstats.secagg.collusion import session_parameters
from fedstats.wire import cohort_sessions as cs
from fedstats.wire import cohort_tree as ct
from fedstats.wire import seeding
from fedstats.wire import tree_seeding as ts

ROUNDS = 2
"""Secure rounds per run (the service benchmark's task has two)."""


def _cpu_ms(fn: Callable[[], Any], repeat: int) -> float:
    return round(1000 * best_of(fn, repeat, time.process_time), 3)


def clear_caches(*modules: Any) -> None:
    """Clear every ``functools`` cache at the top level of ``modules`` (a cold device's first round)."""
    for module in modules:
        for v in list(vars(module).values()):
            if callable(getattr(v, "cache_clear", None)):
                v.cache_clear()


def positions(sessions: Any, seed: bytes, n: int, number: int, indices: list[int]) -> list[int]:
    """The tree positions of session ``number``'s roster ``indices`` (one round over ``[0, n)``).

    ``sessions`` is a checkout's ``fedstats.wire.cohort_sessions``: ``members_at`` where it has it,
    else ``member_at`` per index (a checkout from before it), so two checkouts compare.
    """
    many = getattr(sessions, "members_at", None)
    if many is not None:
        return list(many(seed, 0, n, n, 2, number, indices))
    return [sessions.member_at(seed, 0, n, n, 2, number, j) for j in indices]


def _cold() -> None:
    clear_caches(cs, secagg_graph)


def _positions(seed: bytes, n: int, seat: cs.Seat, indices: list[int]) -> list[int]:
    return positions(cs, seed, n, seat.number, indices)


def _row(n: int, repeat: int) -> dict[str, Any]:
    rng, run, ids, values, leaves = random_cohort(n)
    tree = ct.CohortTree(leaves)
    head, me = tree.head, rng.randrange(n)
    committee = cs.committee_positions(head)
    reveals = {
        p: (values[p], ids[p].sign(cs.reveal_statement(run, head, p, values[p]))) for p in committee
    }
    answer = ts.committee_answer(tree, reveals, {p: {} for p in committee})
    committee_raw = ts._proof(answer, "proof")
    own_answer = ts.leaf_answer(tree, me)
    starts = tree.slot_start(me)
    k = session_parameters(n).k
    audit_rng = np.random.default_rng(n)

    def own_leaf() -> None:
        ts.check_own_leaf(
            own_answer,
            client_id=leaves[me].client_id,
            commitment=leaves[me].commitment.hex(),
            key=leaves[me].key,
            slot_start=starts,
            slot_count=leaves[me].slot_count,
            max_members=n,
        )

    def committee_proof() -> None:
        got = ct.MultiProof.from_bytes(committee_raw, max_leaves=n)
        ct.verify_multi(head, got, committee)

    def committee_full() -> None:
        ts.verify_committee(run, head, answer, lambda leaf, cert: None)

    def named(seed: bytes) -> tuple[cs.Seat, list[int], list[int]]:
        seat = cs.session_of(seed, 0, n, n, 2, me)
        session = seeding.session_id(seed, 0, seat.number)
        checked = checked_members(
            seat.size, k, session, seat.roster_index, AUDIT_MEMBERS, audit_rng
        )
        also = sorted(set(two_hop(seat.size, k, session, seat.roster_index)) - set(checked))
        return seat, checked, also

    # per round, each run on a new seed; the answers the server would send, made beforehand
    seeds = [os.urandom(32) for _ in range(repeat)]
    rounds = []
    for seed in seeds:
        seat, checked, also = named(seed)
        positions = _positions(seed, n, seat, checked + also)
        rounds.append((seed, seat, checked + also, ts.leaves_answer(tree, positions, [])))
    it: dict[str, Any] = {}

    def timed(step: Callable[[tuple[Any, ...]], Any]) -> float:
        it["i"] = 0

        def one() -> None:
            _cold()
            step(rounds[it["i"] % len(rounds)])
            it["i"] += 1

        return _cpu_ms(one, repeat)

    def session(r: tuple[Any, ...]) -> None:
        cs.session_of(r[0], 0, n, n, 2, me)

    def graph(r: tuple[Any, ...]) -> None:
        named(r[0])

    def member_positions(r: tuple[Any, ...]) -> None:
        _positions(r[0], n, r[1], r[2])

    def neighbourhood(r: tuple[Any, ...]) -> None:
        ts.verify_leaves(head, r[3], _positions(r[0], n, r[1], r[2]))

    def tree_round(r: tuple[Any, ...]) -> None:  # a round's tree work on a new seed
        seed, seat = r[0], cs.session_of(r[0], 0, n, n, 2, me)
        ts.verify_leaves(head, r[3], _positions(seed, n, seat, r[2]))

    cpu = {
        "own_leaf": _cpu_ms(own_leaf, repeat),
        "committee_multiproof": _cpu_ms(committee_proof, repeat),
        "committee_with_signatures": _cpu_ms(committee_full, repeat),
        "round_session_of": timed(session),
        "round_positions_cold": timed(member_positions),
        "round_neighbourhood_verify_leaves": timed(neighbourhood),
        "round_tree_work": timed(tree_round),
        "round_session_graph_not_tree": timed(graph),
    }
    cpu["per_run"] = round(
        cpu["own_leaf"] + cpu["committee_with_signatures"] + ROUNDS * cpu["round_tree_work"], 3
    )
    return {
        "members": n,
        "k": k,
        "named_per_round": len(rounds[0][2]),
        "neighbourhood_proof_bytes": len(ts._proof(rounds[0][3], "leaves")),
        "members_at": hasattr(cs, "members_at"),
        "device_cpu_ms": cpu,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--output", default="device_tree")
    args = ap.parse_args()
    rows = []
    for n in args.members:
        rows.append(_row(n, args.repeat))
        print(f"n={n}: {rows[-1]['device_cpu_ms']}")
    path = write_results(
        args.output,
        {
            "command": "python benchmarks/device_tree.py --members "
            + " ".join(map(str, args.members))
            + f" --repeat {args.repeat} --output {args.output}",
            "fedstats_sources": os.path.dirname(ct.__file__),
            "load_average": os.getloadavg(),
            "what": "a device's cohort-tree work per secure run (CPU ms, least of --repeat)",
            "rows": rows,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
