"""A server that equivocates on the cohort tree: one victim device is shown another valid tree head.

Devices talk to :class:`ForkProxy` as if it were the server; it forwards every request unchanged
except, in each run it is told to fork, what concerns one *victim*: it holds no device's key, but it
sees every leaf and every committee reveal pass through, and with them builds a forked view
(:data:`FORKS`) whose every part checks on its own:

* ``reordered``: a tree of the run's real leaves with the members on one side of the victim in
  reverse order. The victim's leaf keeps its position and first slot, so its own-leaf check
  (:func:`fedstats.wire.tree_seeding.check_own_leaf`) passes against the forked head. The victim is
  the device whose leaf answer completes the proxy's set of leaves (all others were shown the real
  head);
* ``stated_n``: the real root and slot total under another leaf count ``n'`` (at most the task's
  cohort size) for which the victim's unchanged leaf proof still verifies (RFC 9162's path shape
  agrees for ``n`` and ``n'`` at its position). The victim is the first device with such a position;
* ``off_committee`` (``n > 40``): the victim is the member off the real head's seed committee; its
  leaf answer is held until the proxy has every leaf, and it is shown the real leaves with those on
  either side of it shuffled (its position and first slot kept) until it is off the forked head's
  committee too. It reveals nothing, and the forked committee's members are the real one's.

The victim's reveal (signed over the head it was shown; none off the forked committee) is not
forwarded: the proxy answers it, and the victim's ``GET .../seed?part=committee``, itself, as a
server keeping the forked view would, with the committee of the tree it built (the fork, or for
``stated_n`` the real tree): the multiproof of its committee's leaves from that tree, their enrolled
certificates (given to the proxy: a server holds them), the values and signatures the members
revealed (the victim's own where it sits) and the seed those values give. Everything in it is
genuine except that no member but the victim signed the head the victim was shown.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from fedstats.errors import FedstatsError
from fedstats.wire.cohort_sessions import committee_positions, committee_seed
from fedstats.wire.cohort_tree import CohortTree, Leaf, LeafProof, TreeHead, verify_leaf
from fedstats.wire.tree_seeding import leaf_answer, parse_head, proof_text
from proxy_base import ForwardingProxy, fedstats_headers

__all__ = ["FORKS", "ForkProxy", "ForkedRun"]

FORKS = ("reordered", "stated_n", "off_committee")
_RUN = re.compile(r"^/v1/client/runs/([^/]+)/(reveal|seed|checkin)$")
_CLIENT = "x-fedstats-client"


@dataclass
class ForkedRun:
    """What the proxy saw and did in one forked run.

    ``kind``: one of :data:`FORKS`; ``cap``: the task's cohort size (``stated_n``'s largest ``n'``).
    ``real``: the run's head; ``leaves``: position -> leaf, from the answers that passed; ``shown``:
    the devices given the real head; ``victim``, its ``position``, ``head`` (the head shown to it)
    and ``tree`` (whose committee it is answered). ``reveals``: client id -> ``(value, seen, signature)`` as revealed
    (the victim's intercepted). ``served``: answers the victim got from the proxy (``"tree"`` with
    the forked head, ``"committee"``).
    """

    kind: str
    cap: int
    real: TreeHead | None = None
    leaves: dict[int, Leaf] = field(default_factory=dict)
    shown: set[str] = field(default_factory=set)
    victim: str | None = None
    position: int | None = None
    head: TreeHead | None = None
    tree: CohortTree | None = None
    reveals: dict[str, tuple[bytes, bytes, bytes]] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=lambda: {"tree": 0, "committee": 0})


def _reveal(body: bytes) -> tuple[bytes, bytes, bytes]:
    """A reveal's ``(value, seen, signature)`` from its JSON body."""
    data = json.loads(body)
    value, seen, signature = (bytes.fromhex(data[k]) for k in ("value", "seen", "signature"))
    return value, seen, signature


def _leaf_of(body: bytes) -> tuple[TreeHead, LeafProof] | None:
    """The real head and the device's leaf proof in an answer carrying ``"tree"``, or None."""
    data = json.loads(body)
    tree = data.get("tree") if isinstance(data, dict) else None
    if not isinstance(tree, dict):
        return None
    real = parse_head(bytes.fromhex(tree["head"]))
    return real, LeafProof.from_bytes(base64.b64decode(tree["leaf"]), max_leaves=real.n)


def _off_committee(leaves: list[Leaf], p: int) -> CohortTree:
    """The real leaves, each side of ``p`` shuffled until ``p`` is off the tree's committee."""
    rng = random.Random(p)
    before, after = leaves[:p], leaves[p + 1 :]
    for _ in range(10_000):  # each try succeeds with odds about 1 / 41 at n = 41
        rng.shuffle(before)
        rng.shuffle(after)
        tree = CohortTree([*before, leaves[p], *after])
        if p not in committee_positions(tree.head):
            return tree
    raise AssertionError("no reordering puts the victim off the committee")


def _reordered(leaves: list[Leaf], p: int) -> CohortTree:
    """The real leaves with those on the longer side of position ``p`` reversed (``p`` keeps its slots)."""
    before, after = leaves[:p], leaves[p + 1 :]
    if len(after) >= 2:
        after = after[::-1]
    else:
        before = before[::-1]
    return CohortTree([*before, leaves[p], *after])


def _other_n(real: TreeHead, proof: LeafProof, cap: int) -> TreeHead | None:
    """A head over ``real``'s root and slots naming another ``n' <= cap`` that ``proof`` verifies under."""
    for n in range(proof.position + 1, cap + 1):
        if n == real.n or n > real.total_slots:
            continue
        head = TreeHead(n, real.total_slots, real.root)
        try:
            LeafProof.from_bytes(proof.to_bytes(), max_leaves=n)  # the path fits a tree of n
            verify_leaf(head, proof.position, proof.leaf, proof.path)
        except FedstatsError:
            continue
        return head
    return None


class ForkProxy(ForwardingProxy):
    """Forward to ``upstream``; show one victim per run in :attr:`forks` a forked tree head.

    Parameters
    ----------
    upstream, ca
        As :class:`proxy_base.ForwardingProxy`.
    certificates : dict
        Client id -> its enrollment certificate (``{"body", "signature"}``), as the server stores it.

    Attributes
    ----------
    forks : dict
        ``run_id -> ForkedRun``, set by the test (:meth:`fork`).
    """

    def __init__(self, upstream: str, ca: Any, certificates: dict[str, Any]) -> None:
        super().__init__(upstream, ca, ("GET", "POST", "PUT"))
        self.certificates = certificates
        self.forks: dict[str, ForkedRun] = {}

    def fork(self, run_id: str, kind: str, cap: int) -> None:
        """Fork run ``run_id`` (``kind`` of :data:`FORKS`, ``cap`` its task's cohort size)."""
        assert kind in FORKS, kind
        self.forks[run_id] = ForkedRun(kind, cap)

    async def _forward(self, request: Request) -> Response:
        path, client = request.url.path, request.headers.get(_CLIENT, "")
        m = _RUN.match(path)
        run = self.forks.get(m.group(1)) if m is not None else None
        if run is not None and m is not None and run.victim is not None and client == run.victim:
            if request.method == "POST" and m.group(2) == "reveal":  # kept in the forked view
                run.reveals[client] = _reveal(await request.body())
                ack: dict[str, Any] = {"accepted": True, "duplicate": False}
                committee = self._committee(m.group(1), run)
                if committee is not None:
                    ack["revealed"] = committee
                return Response(json.dumps(ack), media_type="application/json")
            if request.query_params.get("part") == "committee":
                answer = self._committee(m.group(1), run) or {"status": "seeding", "seed": None}
                return Response(json.dumps(answer), media_type="application/json")
        r = await self._upstream(request)
        content, kept = r.content, fedstats_headers(r.headers)
        if run is not None and m is not None and r.status_code == 200:
            if request.method == "POST" and m.group(2) == "reveal":  # an honest member's reveal
                run.reveals[client] = _reveal(await request.body())
            elif r.headers.get("content-type", "").startswith("application/json"):
                if run.kind == "off_committee":
                    await self._every_leaf(run, content)
                content = self._tree(run, client, content)
        return Response(
            content,
            status_code=r.status_code,
            media_type=r.headers.get("content-type"),
            headers=kept,
        )

    async def _every_leaf(self, run: ForkedRun, body: bytes) -> None:
        """Hold the answer of the member off the real committee until every leaf passed (30 s)."""
        got = _leaf_of(body)
        if got is None or got[1].position in committee_positions(got[0]):
            return
        run.leaves[got[1].position] = got[1].leaf
        end = time.monotonic() + 30
        while len(run.leaves) < got[0].n and time.monotonic() < end:
            await asyncio.sleep(0.05)

    def _tree(self, run: ForkedRun, client: str, body: bytes) -> bytes:
        """Note the leaf in an answer carrying ``"tree"``; give the victim its forked head instead."""
        got = _leaf_of(body)
        if got is None:
            return body
        real, proof = got
        data = json.loads(body)
        tree = data["tree"]
        run.real = real
        run.leaves[proof.position] = proof.leaf
        if run.victim is None and client not in run.shown:
            self._choose(run, client, proof)
        if client != run.victim:
            run.shown.add(client)
            return body
        assert run.head is not None
        if run.kind != "stated_n":
            assert run.tree is not None and run.position is not None
            data["tree"] = leaf_answer(run.tree, run.position)
        else:
            data["tree"] = {"head": run.head.to_bytes().hex(), "leaf": tree["leaf"]}
        for carried in ("committee", "revealed"):  # the real committee is not the forked view's
            data.pop(carried, None)
        run.served["tree"] += 1
        return json.dumps(data).encode()

    def _choose(self, run: ForkedRun, client: str, proof: LeafProof) -> None:
        """Make ``client`` the victim if the fork can be built for it now (see the module)."""
        real = run.real
        assert real is not None
        if run.kind != "stated_n":
            if len(run.leaves) < real.n:  # the victim completes the set of leaves
                return
            p = proof.position
            if run.kind == "off_committee" and p in committee_positions(real):
                return
            leaves = [run.leaves[q] for q in range(real.n)]
            assert CohortTree(leaves).head == real, "the leaves seen are not the run's tree"
            fork = _reordered if run.kind == "reordered" else _off_committee
            run.tree = fork(leaves, p)
            run.head = run.tree.head
            assert run.head != real
            assert run.tree.slot_start(p) == CohortTree(leaves).slot_start(p)  # its slots kept
        else:
            head = _other_n(real, proof, run.cap)
            if head is None:
                return
            run.head = head
        run.victim, run.position = client, proof.position

    def _committee(self, run_id: str, run: ForkedRun) -> dict[str, Any] | None:
        """The committee answer of the tree the proxy holds, once it has every reveal it needs."""
        real = run.real
        if run.kind == "stated_n" and run.tree is None and real is not None:
            if len(run.leaves) == real.n:
                run.tree = CohortTree([run.leaves[p] for p in range(real.n)])
        tree = run.tree
        if tree is None:
            return None
        positions = committee_positions(tree.head)
        ids = [tree.leaf(p).client_id for p in positions]
        if any(c not in run.reveals for c in ids):
            return None
        values = [run.reveals[c][0] for c in ids]
        run.served["committee"] += 1
        return {
            "status": "running",
            "seed": committee_seed(run_id, tree.head, values).hex(),
            "committee": {
                "proof": proof_text(tree.multiproof_bytes(positions)),
                "certificates": [self.certificates[c] for c in ids],
                "values": [v.hex() for v in values],
                "signatures": [run.reveals[c][2].hex() for c in ids],
            },
        }
