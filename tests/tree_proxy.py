"""A malicious server for tree-seeded runs, as real devices see it: a proxy in front of ``fedstats server``.

Devices talk to :class:`TreeProxy` as if it were the server. It forwards every request unchanged (the
devices' signatures verify upstream) and, for the runs it is told to attack, rewrites the tree-seeding data
(:mod:`fedstats.wire.tree_seeding`) wherever an answer carries it: it walks every JSON answer (a check-in's,
a reveal's, ``GET .../seed``'s, a work list, a stage's acknowledgement or the committee answer and the work
list either carries, the
certificates a key advertisement's answer carries before the next stage message) and changes each object
the attack names. It holds no device's key. :data:`ATTACKS`:

* ``own_leaf``: the device's leaf in ``"tree"`` claims one slot more (its proof then fails);
* ``committee_value``: the first two committee values swapped (each still opens some commitment);
* ``stated_seed``: the committee answer states another seed than its values give;
* ``neighbour_leaves``: one byte of the neighbourhood multiproof (``"leaves"``) flipped;
* ``range_proof``: a round over part of the cohort served without its range proof.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections import Counter
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from fedstats.wire.cohort_tree import LeafProof
from fedstats.wire.tree_seeding import proof_text
from proxy_base import ForwardingProxy, fedstats_headers

__all__ = ["ATTACKS", "TreeProxy"]

ATTACKS = ("own_leaf", "committee_value", "stated_seed", "neighbour_leaves", "range_proof")
_RUN = re.compile(r"^/v1/client/runs/([^/]+)/")
_CUT = "fedstats-certificates"


def _longer_leaf(tree: dict[str, Any]) -> None:
    raw = base64.b64decode(tree["leaf"])
    proof = LeafProof.from_bytes(raw, max_leaves=1 << 31)
    leaf = proof.leaf
    bumped = type(leaf)(leaf.client_id, leaf.commitment, leaf.key, leaf.slot_count + 1)
    tree["leaf"] = proof_text(LeafProof(proof.position, bumped, proof.path).to_bytes())


class TreeProxy(ForwardingProxy):
    """Forward to ``upstream``; rewrite the tree-seeding data of the runs in :attr:`attacks`.

    Attributes
    ----------
    attacks : dict
        ``run_id -> attack`` (one of :data:`ATTACKS`), set by the test.
    delivered : Counter
        ``attack -> answers rewritten``.
    """

    def __init__(self, upstream: str, ca: Any) -> None:
        super().__init__(upstream, ca, ("GET", "POST", "PUT"))
        self.attacks: dict[str, str] = {}
        self.delivered: Counter[str] = Counter()

    async def _forward(self, request: Request) -> Response:
        r = await self._upstream(request)
        content, kept = r.content, fedstats_headers(r.headers)
        if r.status_code == 200:
            content = self._rewrite(
                request.url.path, r.headers.get("content-type", ""), content, kept
            )
        return Response(
            content,
            status_code=r.status_code,
            media_type=r.headers.get("content-type"),
            headers=kept,
        )

    def _attack_of(self, path: str, data: Any = None) -> str | None:
        m = _RUN.match(path)
        if m is not None:
            return self.attacks.get(m.group(1))
        return None

    def _rewrite(self, path: str, media: str, body: bytes, headers: dict[str, str]) -> bytes:
        if media.startswith("application/octet-stream"):
            cut = headers.get(_CUT)
            attack = self._attack_of(path)
            if cut is None or attack is None or not cut.isdigit():
                return body
            head = json.loads(body[: int(cut)])
            if self._change(head, attack):
                raw = json.dumps(head).encode()
                headers[_CUT] = str(len(raw))
                return raw + body[int(cut) :]
            return body
        if not media.startswith("application/json"):
            return body
        try:
            data = json.loads(body)
        except ValueError:
            return body
        attack = self._attack_of(path)
        changed = self._change(data, attack) if attack is not None else False
        changed = (
            self._work(data) or changed
        )  # a work list, polled or carried by an acknowledgement
        return json.dumps(data).encode() if changed else body

    def _work(self, data: Any) -> bool:
        work = data.get("work") if isinstance(data, dict) and "work" in data else data
        if not isinstance(work, dict) or not isinstance(work.get("rounds"), list):
            return False
        changed = False
        for rnd in work["rounds"]:
            attack = self.attacks.get(str(rnd.get("run_id")))
            if attack is not None:
                changed = self._change(rnd, attack) or changed
        return changed

    def _change(self, obj: Any, attack: str) -> bool:
        """Rewrite, in place, every part of ``obj`` the attack names; whether any was changed."""
        changed = False
        if isinstance(obj, list):
            for item in obj:
                changed = self._change(item, attack) or changed
            return changed
        if not isinstance(obj, dict):
            return False
        if attack == "own_leaf" and isinstance(obj.get("tree"), dict) and "leaf" in obj["tree"]:
            _longer_leaf(obj["tree"])
            changed = True
        committee = obj.get("committee")
        if isinstance(committee, dict) and isinstance(committee.get("values"), list):
            if attack == "committee_value" and len(committee["values"]) > 1:
                v = committee["values"]
                v[0], v[1] = v[1], v[0]
                changed = True
            if attack == "stated_seed" and isinstance(obj.get("seed"), str):
                obj["seed"] = os.urandom(32).hex()
                changed = True
        if attack == "neighbour_leaves" and isinstance(obj.get("leaves"), str):
            raw = bytearray(base64.b64decode(obj["leaves"]))
            raw[-1] ^= 1
            obj["leaves"] = proof_text(bytes(raw))
            changed = True
        if attack == "range_proof" and "range_proof" in obj:
            del obj["range_proof"]
            changed = True
        for v in obj.values():
            if isinstance(v, (dict, list)):
                changed = self._change(v, attack) or changed
        if changed:
            self.delivered[attack] += 1
        return changed
