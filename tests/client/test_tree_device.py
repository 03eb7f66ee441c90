"""A device in a tree-seeded secure run (TREE_SPEC sections 1-5), against an in-process fake server.

The fake answers the device's requests (``Device._send`` replaced) from a locally built
:class:`~fedstats.wire.cohort_tree.CohortTree` over 150 enrolled members, with the messages of
:mod:`fedstats.wire.tree_seeding` and a real :class:`~fedstats.secagg.SecAggServer` holding the bound
roster with every key. An honest run: the device checks its leaf, reveals (a committee member) or
waits for the committee, verifies the seed, derives exactly the session the server's partition gives
(:func:`~fedstats.wire.cohort_sessions.sessions_of_positions`), names its checked and two-hop members,
holds their verified keys and only then reads its data. Each deviation is refused with SecurityError,
before anything of the device's data is read.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedstats.client import Device
from fedstats.client.roster import checked_members, two_hop
from fedstats.client.secure_members import SecureState
from fedstats.client.secure_tree import (
    TreeRosterVerifier,
    bound_roster,
    check_certificate,
    named_members,
)
from fedstats.errors import SecurityError
from fedstats.randomness import RandomSource
from fedstats.secagg import SecAggServer
from fedstats.secagg.collusion import session_parameters
from fedstats.secagg.identity import SessionRoster
from fedstats.secagg.messages import AdvertiseKeys, decode
from fedstats.wire import auth, seeding
from fedstats.wire.cohort_sessions import (
    committee_positions,
    committee_seed,
    member_at,
    reveal_statement,
    sessions_of_positions,
)
from fedstats.wire.cohort_tree import CohortTree, Leaf
from fedstats.wire.tree_seeding import (
    CARRIED_WORK_BYTES,
    committee_answer,
    committee_answer_bytes,
    leaf_answer,
    leaves_answer,
    range_answer,
    session_binding,
)

RID = "run-tree-1"
POP = "default"
MEMBERS = 150
MAX_SESSION = 100
DIM = 3
TASK: dict[str, Any] = {
    "cohort_size": 200,
    "privacy": {"population": POP},
    "secure_aggregation": {"max_session": MAX_SESSION, "min_session_size": 10},
}
P_LO, P_HI = 20, 110  # the round's participants: 90, one sparse session (k < n - 1)


@dataclasses.dataclass
class World:
    """The cohort: each member's key, id, seed value, slots and certificate; the tree; the device."""

    authority: Ed25519PrivateKey
    keys: list[Ed25519PrivateKey]
    ids: list[str]
    values: list[bytes]
    slots: list[int]
    certs: list[dict[str, Any]]
    tree: CohortTree
    position: int

    @property
    def head(self):  # type: ignore[no-untyped-def]
        return self.tree.head

    def leaf(self, p: int, *, commitment: bytes | None = None) -> Leaf:
        own = bytes.fromhex(seeding.commitment(RID, self.ids[p], self.values[p]))
        key = self.keys[p].public_key().public_bytes_raw()
        return Leaf(self.ids[p], commitment or own, key, self.slots[p])

    def seed(self) -> bytes:
        return committee_seed(
            RID, self.head, [self.values[p] for p in committee_positions(self.head)]
        )

    def committee(self) -> dict[str, Any]:
        reveals = {
            p: (
                self.values[p],
                self.keys[p].sign(reveal_statement(RID, self.head, p, self.values[p])),
            )
            for p in committee_positions(self.head)
        }
        answer = committee_answer(self.tree, reveals, dict(enumerate(self.certs)))
        return {"status": "running", "seed": self.seed().hex(), "committee": answer}

    def identity(self) -> dict[str, Any]:
        p = self.position
        return {
            "client_id": self.ids[p],
            "private_key": auth.private_key_hex(self.keys[p]),
            "certificate": self.certs[p],
            "authority_public_key": auth.public_key_hex(self.authority),
        }

    def range(self) -> tuple[int, int]:
        return self.tree.slot_start(P_LO), self.tree.slot_start(P_HI)


def _world(in_committee: bool) -> World:
    """A cohort whose device (at a position in [P_LO, P_HI)) is, or is not, on the seed committee."""
    rng = np.random.default_rng(7)
    authority = Ed25519PrivateKey.generate()
    keys = [Ed25519PrivateKey.generate() for _ in range(MEMBERS)]
    ids = [f"dev-{p:03d}" for p in range(MEMBERS)]
    values = [bytes(rng.integers(0, 256, 32, dtype=np.uint8)) for _ in range(MEMBERS)]
    slots = [int(x) for x in rng.integers(1, 3, MEMBERS)]
    certs = [
        auth.issue_certificate(
            authority, client_id=i, public_key=auth.public_key_hex(k), population=POP
        ).as_dict()
        for i, k in zip(ids, keys, strict=True)
    ]
    for position in range(P_LO, P_HI):  # the device's own leaf is among them all along
        world = World(authority, keys, ids, values, slots, certs, None, position)  # type: ignore[arg-type]
        world.tree = CohortTree([world.leaf(p) for p in range(MEMBERS)])
        if (position in committee_positions(world.head)) == in_committee:
            return world
    raise AssertionError("no position fits")


class Fake:
    """The server's side over the device's ``_send``: every request recorded, every answer capped."""

    def __init__(self, world: World) -> None:
        self.w = world
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.tree_answer = leaf_answer(world.tree, world.position)  # what check-in and /seed carry
        self.committee = world.committee()
        self.leaves: Callable[[list[int], list[int]], dict[str, Any]] = self._leaves
        self.seat: tuple[int, int, int] | None = None
        self.server: SecAggServer | None = None
        self.slot_shift = 0  # added to the slot start the check-in gives
        self.fixed = False  # whether GET .../seed answers with the seed fixed (and the committee)
        self.work: dict[str, Any] | None = None  # a work list the held committee answer carries
        self.checkin_carries = False  # the held check-in carries the committee and the work list

    def round(self) -> dict[str, Any]:
        """Round 0 over the participants' slots, as the server lists it (its partition)."""
        w, seed = self.w, self.w.seed()
        lo, hi = w.range()
        sessions = sessions_of_positions(seed, P_LO, P_HI, MAX_SESSION, 10)
        number = next(s for s, ps in enumerate(sessions) if w.position in ps)
        members = sessions[number]
        index, n = members.index(w.position), len(members)
        self.seat = (number, n, index)
        sid = seeding.session_id(seed, 0, number)
        binding = session_binding(RID, seed, w.head, 0, number, P_LO, P_HI, MAX_SESSION, n)
        keys = tuple(w.tree.leaf(p).key for p in members)
        roster = SessionRoster(seeding.task_id_bytes(RID), sid, keys, bytes(64), binding)
        self.server = SecAggServer(
            session_parameters(n), length=DIM, bits=seeding.BITS, roster=roster
        )
        self.setup = dataclasses.replace(self.server.setup()[index], roster=b"").to_bytes()
        start = w.tree.slot_start(w.position)
        return {
            "run_id": RID,
            "round": 0,
            "client_range": [lo, hi],
            "records": [start, start + w.slots[w.position]],
            "slot_start": start,
            "n_clients": w.head.total_slots,
            "dim": DIM,
            "secure": {
                "session": number,
                "n": n,
                "index": index,
                "stage": 0,
                "range_proof": range_answer(w.tree, lo, hi),
            },
        }

    def _leaves(self, checked: list[int], also: list[int]) -> dict[str, Any]:
        assert self.seat is not None
        seed, number = self.w.seed(), self.seat[0]
        at = {j: member_at(seed, P_LO, P_HI, MAX_SESSION, 10, number, j) for j in checked + also}
        certs = [self.w.certs[at[j]] for j in checked]
        return leaves_answer(self.w.tree, [at[j] for j in checked + also], certs)

    def send(self, method: str, path: str, body: bytes, **kw: Any) -> httpx.Response:
        params = {k: str(v) for k, v in (kw.get("params") or {}).items()}
        self.requests.append((method, path, params, body))
        kind, content, extra = "application/json", b"", {}
        if path.endswith("/checkin"):
            w = self.w
            start = w.tree.slot_start(w.position) + self.slot_shift
            slots: dict[str, Any] = {"slot_start": start, "slot_count": w.slots[w.position]}
            asked = (kw.get("headers") or {}).get("Fedstats-Next-Work") == "1"
            if self.checkin_carries and asked:  # off the committee: it and the first round too
                slots |= {"revealed": self.committee, "work": self.work}
                extra = {"etag": '"w1"'}
            content = json.dumps({**slots, "tree": self.tree_answer}).encode()
        elif path.endswith("/seed") and params.get("part") == "committee":
            answer = dict(self.committee)
            asked = (kw.get("headers") or {}).get("Fedstats-Next-Work") == "1"
            if self.work is not None and asked:
                answer["work"], extra = self.work, {"etag": '"w1"'}
            content = json.dumps(answer).encode()
        elif path.endswith("/seed") and self.fixed:
            content = json.dumps({**self.committee, "tree": self.tree_answer}).encode()
        elif path.endswith("/seed"):
            content = json.dumps(
                {"status": "seeding", "seed": None, "tree": self.tree_answer}
            ).encode()
        elif path.endswith("/reveal"):
            answer = {"accepted": True, "duplicate": False, "revealed": self.committee}
            if self.work is not None and (kw.get("headers") or {}).get("Fedstats-Next-Work") == "1":
                answer["work"], extra = self.work, {"etag": '"w1"'}
            content = json.dumps(answer).encode()
        elif re.search(r"/secure/\d+/0$", path) and method == "GET":
            kind, content = "application/octet-stream", self.setup
        elif re.search(r"/secure/\d+/(0|certificates)$", path):
            checked = [int(j) for j in params["members"].split(",")]
            also = [int(j) for j in params["also"].split(",")] if "also" in params else []
            leaves = self.leaves(checked, also)
            answer = leaves if path.endswith("certificates") else {"certificates": leaves}
            content = json.dumps(answer).encode()
        else:
            raise AssertionError(f"unexpected request {method} {path}")
        limit = kw.get("limit")
        if limit is not None and len(content) > limit:
            raise SecurityError(f"the answer to {path} is oversized")
        return httpx.Response(200, content=content, headers={"content-type": kind, **extra})

    def paths(self) -> list[tuple[str, str, dict[str, str]]]:
        return [(m, p.removeprefix(f"/v1/client/runs/{RID}"), q) for m, p, q, _ in self.requests]


def _device(world: World, *, slot_shift: int = 0) -> tuple[Device, Fake, SecureState, list[Any]]:
    dev = Device(
        "http://127.0.0.1:9",
        world.identity(),
        {"value": np.zeros(1)},
        randomness=RandomSource(seed=5),
    )
    fake = Fake(world)
    read: list[Any] = []  # the device's data read (encoded) for a round: only after every check
    dev._send = fake.send  # type: ignore[method-assign]
    dev._encode = lambda rnd: read.append(rnd) or [1, 2, 3]  # type: ignore[method-assign]
    told: list[str] = []
    dev.tell_refusal = lambda rid, code, message: told.append(code)  # type: ignore[method-assign]
    dev.told = told  # type: ignore[attr-defined]
    state = SecureState(world.values[world.position], task=TASK)
    dev.secure[RID] = state
    p = world.position
    dev.joined[RID] = {
        "slot_start": world.tree.slot_start(p) + slot_shift,
        "slot_count": world.slots[p],
    }
    return dev, fake, state, read


# -- the honest run -----------------------------------------------------------------------------


@pytest.mark.parametrize("in_committee", [True, False])
def test_an_honest_tree_run_is_joined_and_the_session_is_the_servers(in_committee: bool) -> None:
    world = _world(in_committee)
    dev, fake, state, read = _device(world)
    body = {"records": 1, "commitment": state.commitment(RID, dev.client_id)}
    dev._secure_checkin(RID, body, state, wait=1.0)
    assert RID not in dev.refused
    assert (state.head, state.position) == (world.head, world.position)
    assert state.seen == world.head.digest().hex() and state.verified
    assert state.seed == world.seed() and state.withheld == frozenset()
    calls = fake.paths()
    assert calls[0][:2] == ("POST", "/checkin")
    if in_committee:  # its signed reveal, held; the answer carries the committee
        assert calls[1] == ("POST", "/reveal", {"wait": "1.000"})
        sent = json.loads(fake.requests[1][3])
        assert sent["seen"] == world.head.digest().hex()
        assert sent["value"] == world.values[world.position].hex()
    else:  # never reveals: asks for the committee, held
        assert calls[1] == ("GET", "/seed", {"part": "committee", "wait": "1.000"})
    assert len(calls) == 2

    rnd = fake.round()
    answered, _, sent_now = dev._answer_stage(rnd, 0, None)
    assert answered and sent_now and not state.refused
    number, n, index = fake.seat  # type: ignore[misc]
    assert state.rounds == {0: number} and state.sessions[(0, number)].index == index
    assert session_parameters(n).k < n - 1  # a sparse session: two-hop members are named too
    sid = seeding.session_id(world.seed(), 0, number)
    k = session_parameters(n).k
    checked = checked_members(
        n, k, sid, index, 16, dev.randomness.generator("roster-audit", RID, 0)
    )
    also = sorted(set(two_hop(n, k, sid, index)) - set(checked))
    assert also
    method, path, params = fake.paths()[-1]
    assert (method, path) == ("POST", f"/rounds/0/secure/{number}/0")
    assert params == {"members": ",".join(map(str, checked)), "also": ",".join(map(str, also))}
    advert = decode(fake.requests[-1][3], expect=AdvertiseKeys)
    assert advert.client == index
    assert fake.server is not None
    fake.server.receive_bytes(fake.requests[-1][3])  # the real server accepts its signed keys
    assert read == [rnd] and state.encoded[0] == [1, 2, 3]  # the data, after the leaves checked
    client = state.sessions[(0, number)]
    held = {j for j in range(n) if client._identities.holds(j)}  # type: ignore[union-attr]
    assert held == {index, *checked, *also}


# -- refusals before revealing ------------------------------------------------------------------


def _refused_at_checkin(world: World, fake_change: Callable[[Fake], None], **kw: Any) -> Device:
    dev, fake, state, read = _device(world, **kw)
    fake_change(fake)
    with pytest.raises(SecurityError):
        dev._reveal(RID)
    assert not [r for r in fake.paths() if r[1] == "/reveal"]  # revealed nothing
    assert not read and not state.verified
    return dev


def test_a_leaf_not_its_own_is_refused_before_revealing() -> None:
    world = _world(True)
    other = dataclasses.replace(world, position=(world.position + 1))

    def change(fake: Fake) -> None:
        fake.tree_answer = leaf_answer(world.tree, other.position)

    _refused_at_checkin(world, change)
    # its own id and slots, but another commitment
    altered = world.leaf(world.position, commitment=bytes(32))
    leaves = [altered if p == world.position else world.tree.leaf(p) for p in range(MEMBERS)]
    forged = CohortTree(leaves)
    _refused_at_checkin(
        world, lambda f: setattr(f, "tree_answer", leaf_answer(forged, world.position))
    )


def test_a_wrong_slot_start_is_refused_before_revealing() -> None:
    _refused_at_checkin(_world(True), lambda f: None, slot_shift=1)


def test_a_refused_leaf_at_checkin_refuses_the_run() -> None:
    world = _world(False)
    dev, fake, state, _read = _device(world)
    fake.slot_shift = 1
    dev._secure_checkin(RID, {"records": 1}, state, wait=1.0)
    assert "slots" in dev.refused[RID] and [c[1] for c in fake.paths()] == ["/checkin"]
    assert dev.told == ["round_mismatch"] and state.seen is None  # type: ignore[attr-defined]


# -- refusals of the committee ------------------------------------------------------------------


def _forge_signature(fake: Fake) -> None:
    sig = bytearray(bytes.fromhex(fake.committee["committee"]["signatures"][3]))
    sig[0] ^= 1
    fake.committee["committee"]["signatures"][3] = sig.hex()


def _value_not_opening(fake: Fake) -> None:
    w, head = fake.w, fake.w.head
    p = committee_positions(head)[2]
    value = bytes(32)  # signed by the member's own key: only the commitment fails
    fake.committee["committee"]["values"][2] = value.hex()
    sig = w.keys[p].sign(reveal_statement(RID, head, p, value))
    fake.committee["committee"]["signatures"][2] = sig.hex()


def _other_seed(fake: Fake) -> None:
    fake.committee["seed"] = bytes(32).hex()


def _other_population(fake: Fake) -> None:
    w, p = fake.w, committee_positions(fake.w.head)[0]
    cert = auth.issue_certificate(
        w.authority,
        client_id=w.ids[p],
        public_key=auth.public_key_hex(w.keys[p]),
        population="elsewhere",
    )
    fake.committee["committee"]["certificates"][0] = cert.as_dict()


@pytest.mark.parametrize(
    "change", [_forge_signature, _value_not_opening, _other_seed, _other_population]
)
@pytest.mark.parametrize("in_committee", [True, False])
def test_a_deviating_committee_answer_is_refused(
    change: Callable[[Fake], None], in_committee: bool
) -> None:
    world = _world(in_committee)
    dev, fake, state, read = _device(world)
    change(fake)
    with pytest.raises(SecurityError):
        dev._reveal(RID, wait=1.0)
    assert not state.verified and state.seed is None and not read
    # after its held check-in the device refuses the run (and says why)
    dev2, fake2, state2, read2 = _device(world)
    change(fake2)
    dev2._secure_checkin(RID, {"records": 1}, state2, wait=1.0)
    assert RID in dev2.refused and dev2.told == ["round_mismatch"]  # type: ignore[attr-defined]
    assert not state2.verified and not read2


# -- refusals of the neighbourhood --------------------------------------------------------------


def _joined(world: World) -> tuple[Device, Fake, SecureState, list[Any], dict[str, Any]]:
    dev, fake, state, read = _device(world)
    dev._reveal(RID)
    rnd = fake.round()
    client, setup = dev._join_session(rnd, state, None)
    client.handle_bytes(setup)  # its key advertisement, as _answer_stage sends it
    return dev, fake, state, read, rnd


def _answer(fake: Fake, state: SecureState) -> tuple[Any, list[int], list[int]]:
    number = fake.seat[0]  # type: ignore[index]
    pending = state.uncertified[(0, number)]
    return pending, list(pending.checked), list(pending.also)


def test_a_deviating_leaves_answer_is_refused_and_no_data_is_read() -> None:
    world = _world(False)
    another = CohortTree(
        [
            world.leaf(p, commitment=bytes(32)) if p == 0 else world.tree.leaf(p)
            for p in range(MEMBERS)
        ]
    )
    for name in ("missing", "other head", "other key", "other id", "not certified", "ok"):
        dev, fake, state, read, rnd = _joined(world)
        _pending, checked, also = _answer(fake, state)
        obj = fake._leaves(checked, also)
        seed, number = world.seed(), fake.seat[0]  # type: ignore[index]
        at = {j: member_at(seed, P_LO, P_HI, MAX_SESSION, 10, number, j) for j in checked + also}
        if name == "missing":
            obj = leaves_answer(
                world.tree, [at[j] for j in checked + also[1:]], obj["certificates"]
            )
        elif name == "other head":
            obj = leaves_answer(another, [at[j] for j in checked + also], obj["certificates"])
        elif name == "other key":  # a certificate of the member's id for another key
            key = Ed25519PrivateKey.generate()
            cert = auth.issue_certificate(
                world.authority,
                client_id=world.ids[at[checked[0]]],
                public_key=auth.public_key_hex(key),
                population=POP,
            )
            obj["certificates"][0] = cert.as_dict()
        elif name == "other id":  # another member's (valid) certificate
            obj["certificates"][0] = world.certs[at[checked[1]]]
        elif name == "not certified":  # signed by another authority
            rogue = Ed25519PrivateKey.generate()
            leaf = world.tree.leaf(at[checked[0]])
            cert = auth.issue_certificate(
                rogue, client_id=leaf.client_id, public_key=leaf.key.hex(), population=POP
            )
            obj["certificates"][0] = cert.as_dict()
        if name == "ok":
            dev._certify(RID, 0, number, state, obj)
            assert read == [rnd]
            continue
        with pytest.raises(SecurityError):
            dev._certify(RID, 0, number, state, obj)
        assert not read and 0 not in state.encoded, name
        assert not state.sessions[(0, number)]._has_input, name
        assert (0, number) in state.uncertified, name


def test_a_leaves_answer_carried_by_the_advertisement_is_checked_there() -> None:
    """The ack carries a leaves object missing a position: the device leaves the session unread."""
    world = _world(False)
    dev, fake, state, read = _device(world)
    dev._reveal(RID)
    rnd = fake.round()
    honest = fake._leaves

    def fewer(checked: list[int], also: list[int]) -> dict[str, Any]:
        obj = honest(checked, also[:-1])
        return obj

    fake.leaves = fewer
    answered, _, _ = dev._answer_stage(rnd, 0, None)
    assert not answered
    number = fake.seat[0]  # type: ignore[index]
    assert (0, number) in state.refused and "multiproof" in state.refused[(0, number)]
    assert not read


def test_a_round_with_another_n_clients_or_session_is_refused() -> None:
    world = _world(False)
    for field in ("n_clients", "index", "session"):
        dev, fake, state, read = _device(world)
        dev._reveal(RID)
        rnd = fake.round()
        if field == "n_clients":
            rnd["n_clients"] = world.head.total_slots + 1
        elif field == "index":
            rnd["secure"]["index"] = (rnd["secure"]["index"] + 1) % rnd["secure"]["n"]
        else:
            rnd["secure"]["session"] = rnd["secure"]["session"] + 1
        with pytest.raises(SecurityError):
            dev._join_session(rnd, state, None)
        assert not read and not state.rounds


def test_a_partial_round_needs_its_range_proof() -> None:
    world = _world(False)
    dev, fake, state, read = _device(world)
    dev._reveal(RID)
    rnd = fake.round()
    rnd["secure"]["range_proof"] = None
    with pytest.raises(SecurityError, match="range proof"):
        dev._join_session(rnd, state, None)
    lo, hi = world.range()
    rnd["secure"]["range_proof"] = range_answer(world.tree, lo, hi + 1)
    with pytest.raises(SecurityError):
        dev._join_session(rnd, state, None)
    assert not read


# -- the pure pieces ----------------------------------------------------------------------------


def test_the_roster_verifier_accepts_only_the_derived_bound_roster() -> None:
    own = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    other = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    args = {"session": b"S" * 32, "task_id": b"task", "binding": b"B" * 32}
    v = TreeRosterVerifier(
        "00" * 32, population=POP, n=8, index=3, client_id="me", key=own, verified=set(), **args
    )
    roster = bound_roster(b"task", b"S" * 32, 8, 3, own, b"B" * 32)
    v.verify(roster)
    assert roster.identities.count(b"") == 7
    bad = [
        bound_roster(b"task", b"S" * 32, 8, 3, own, b"C" * 32),  # another binding
        bound_roster(b"task", b"T" * 32, 8, 3, own, b"B" * 32),  # another session
        bound_roster(b"other", b"S" * 32, 8, 3, own, b"B" * 32),  # another run
        bound_roster(b"task", b"S" * 32, 9, 3, own, b"B" * 32),  # another size
        bound_roster(b"task", b"S" * 32, 8, 2, own, b"B" * 32),  # its key elsewhere
        dataclasses.replace(roster, identities=(other,) * 3 + (own,) + (b"",) * 4),  # a key twice
        SessionRoster(b"task", b"S" * 32, (other,) * 3 + (own,) + (other,) * 4, bytes(64)),
    ]
    for r in bad:
        with pytest.raises(SecurityError):
            v.verify(r)


def test_check_certificate_names_the_leaf() -> None:
    authority = Ed25519PrivateKey.generate()
    key = Ed25519PrivateKey.generate()
    leaf = Leaf("dev-1", bytes(32), key.public_key().public_bytes_raw(), 1)
    pub = auth.public_key_hex(authority)
    cert = auth.issue_certificate(
        authority, client_id="dev-1", public_key=auth.public_key_hex(key), population=POP
    ).as_dict()
    seen: set[tuple[str, str, bytes]] = set()
    check_certificate(cert, leaf, authority=pub, population=POP, verified=seen)
    assert len(seen) == 1
    check_certificate(cert, leaf, authority=pub, population=POP, verified=seen)  # cached
    for changed, kw in (
        (dataclasses.replace(leaf, client_id="dev-2"), {}),
        (dataclasses.replace(leaf, key=bytes(32)), {}),
        (leaf, {"population": "other"}),
        (leaf, {"authority": auth.public_key_hex(Ed25519PrivateKey.generate())}),
        (leaf, {"now": 1e12}),  # expired
    ):
        args = {"authority": pub, "population": POP, "verified": seen, **kw}
        with pytest.raises(SecurityError):
            check_certificate(cert, changed, **args)
    with pytest.raises(SecurityError):
        check_certificate({"body": 3}, leaf, authority=pub, population=POP, verified=set())


def test_named_members_bounds_the_answer_by_what_it_names() -> None:
    world = _world(False)
    _dev, fake, state, _read, _rnd = _joined(world)
    pending, checked, also = _answer(fake, state)
    params, limit = named_members(pending)
    assert params["members"].split(",") == [str(j) for j in checked]
    assert params["also"].split(",") == [str(j) for j in also]
    honest = json.dumps({"certificates": fake._leaves(checked, also)}).encode()
    assert len(honest) <= limit
    listed = named_members((None, None, [1, 2, 3], None))
    assert listed == ({"members": "1,2,3"}, 3 * 4096)


def test_a_late_device_takes_the_committee_from_the_seed_answer_and_fetches_its_leaves() -> None:
    """The seed was fixed before the device asked: ``GET .../seed`` carries the tree and the committee
    (one request, no reveal); without a carried leaves object it asks ``GET .../certificates``."""
    world = _world(True)
    dev, fake, state, read = _device(world)
    fake.fixed = True
    dev._reveal(RID)
    assert state.verified and state.seed == world.seed()
    assert fake.paths() == [("GET", "/seed", {})]
    rnd = fake.round()
    client, setup = dev._join_session(rnd, state, None)
    client.handle_bytes(setup)
    assert not read
    number = fake.seat[0]  # type: ignore[index]
    dev._certify(RID, 0, number, state, None)
    method, path, params = fake.paths()[-1]
    assert (method, path) == ("GET", f"/rounds/0/secure/{number}/certificates")
    assert set(params) == {"members", "also"} and read == [rnd]


def test_a_held_check_in_that_carries_the_committee_and_the_first_round() -> None:
    """Off the committee, a device's held check-in (``Fedstats-Next-Work: 1``) may be answered with
    its leaf, the committee answer (``"revealed"``) and its next work list: it checks its leaf, then
    the committee, as if fetched, and keeps the list as its next poll's answer; no other request."""
    world = _world(False)
    dev, fake, state, _ = _device(world)
    work = {"offers": [], "rounds": [fake.round()], "reveals": [], "finished": []}
    fake.work, fake.checkin_carries = work, True
    body = {"records": 1, "commitment": state.commitment(RID, dev.client_id)}
    dev._secure_checkin(RID, body, state, wait=1.0)
    assert state.verified and state.seed == world.seed() and RID not in dev.refused
    assert [(m, p) for m, p, _ in fake.paths()] == [("POST", "/checkin")]
    assert dev._carried == (work, '"w1"')
    # a committee answer that does not verify, carried so, is refused as a fetched one is
    world = _world(False)
    dev, fake, state, _ = _device(world)
    fake.work, fake.checkin_carries = work, True
    fake.committee["seed"] = "00" * 32
    dev._secure_checkin(
        RID, body | {"commitment": state.commitment(RID, dev.client_id)}, state, 1.0
    )
    assert not state.verified and RID in dev.refused


@pytest.mark.parametrize("in_committee", [True, False])
def test_the_held_committee_answer_carries_the_next_work_list(in_committee: bool) -> None:
    """A device asks for the committee held (off the committee) or reveals held (on it), with
    ``Fedstats-Next-Work: 1``; the work list the answer carries (the first round, which opens as the
    seed is fixed) and its ETag are kept as the next poll's answer (:meth:`Device.step` then sends no
    work poll). Without it in the answer nothing is kept."""
    for carried in (True, False):
        world = _world(in_committee)
        dev, fake, state, _ = _device(world)
        work = {"offers": [], "rounds": [fake.round()], "reveals": [], "finished": []}
        fake.work = work if carried else None
        body = {"records": 1, "commitment": state.commitment(RID, dev.client_id)}
        dev._secure_checkin(RID, body, state, wait=1.0)
        assert state.verified and RID not in dev.refused
        method, path, params, _ = fake.requests[1]
        want = ("POST", "reveal", None) if in_committee else ("GET", "seed", "committee")
        assert (method, path.rsplit("/", 1)[-1], params.get("part")) == want
        assert dev._carried == ((work, '"w1"') if carried else None)


@pytest.mark.parametrize("in_committee", [True, False])
def test_an_oversized_committee_answer_is_not_read(in_committee: bool) -> None:
    """The committee answer is read up to its bound from the task's cohort size, then refused (held,
    the bound also allows the work list it may carry, ``CARRIED_WORK_BYTES``)."""
    world = _world(in_committee)
    dev, fake, state, read = _device(world)
    bound = committee_answer_bytes(int(TASK["cohort_size"])) + CARRIED_WORK_BYTES
    fake.committee["padding"] = "0" * bound
    with pytest.raises(SecurityError, match="oversized"):
        dev._reveal(RID, wait=1.0)
    assert not state.verified and not read
