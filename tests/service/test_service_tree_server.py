"""Tree-seeded secure runs, the server's half (TREE_SPEC, issue 40): the stored head, the signed committee
reveals and the committee seed, withholders, the tree partition and bound rosters, on every store kind.

The server's answers are checked with the devices' functions of :mod:`fedstats.wire.tree_seeding` and
:mod:`fedstats.wire.cohort_sessions` (``session_of``, ``participants``, ``verify_committee``,
``verify_leaves``), so what is proven is that a device deriving alone agrees with the server.
"""

from __future__ import annotations

import hashlib
import json
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from fastapi.testclient import TestClient

from fedstats.cli.server import cohort_tree_option
from fedstats.errors import DataError, ParameterError, SecurityError
from fedstats.service.domain import secure, secure_devices, secure_tree
from fedstats.service.domain.driver import Driver
from fedstats.service.domain.tasks import ConflictError, task_config
from fedstats.service.http import secure_tree as tree_http
from fedstats.service.http.app import ServerSettings, create_app
from fedstats.service.store import Store
from fedstats.service.store.rows import ClientRow, RoundRow, RunRow
from fedstats.service.store.secure import SecureSessionRow
from fedstats.wire import auth, seeding
from fedstats.wire.cohort_sessions import (
    committee_positions,
    committee_seed,
    member_at,
    session_of,
)
from fedstats.wire.tree_seeding import (
    check_own_leaf,
    leaf_answer,
    participants,
    range_answer,
    session_binding,
    signed_reveal,
    verify_committee,
    verify_leaves,
)
from service_helpers import counted_routes, fresh_store

MAX_SESSION, MIN_SESSION = 8, 3


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A fresh, empty store of each kind (PostgreSQL in a schema of its own; skipped only if away)."""
    with fresh_store(request.param, tmp_path) as st:
        yield st


def _key(run_id: str, i: int) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(f"{run_id}/{i}".encode()).digest())


def _raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _value(run_id: str, i: int) -> bytes:
    return hashlib.sha256(f"value/{run_id}/{i}".encode()).digest()


class Run:
    """A secure run of ``n`` enrolled members checked in (slots ``1 + i % 3``), its keys and values."""

    def __init__(self, store: Store, n: int, prefix: str = "") -> None:
        self.store, self.n = store, n
        self.task_id, self.id = uuid.uuid4().hex * 2, str(uuid.uuid4())
        self.ids = [f"{prefix}dev-{i:03d}" for i in range(n)]
        self.keys = [_key(self.id, i) for i in range(n)]
        self.values = [_value(self.id, i) for i in range(n)]
        self.config = {
            "analysis": "x",
            "cohort_size": n,
            "min_clients": 2,
            "max_records_per_client": 3,
            "privacy": {"population": "pop"},
            "secure_aggregation": {"max_session": MAX_SESSION, "min_session_size": MIN_SESSION},
            "deadlines": {"round": 60},
        }
        with store.transaction() as tx:
            tx.add_task(self.task_id, json.dumps(self.config), "alice", 100.0)
            tx.add_run(
                id=self.id,
                task_id=self.task_id,
                analyst="alice",
                status="checkin",
                created_at=time.time(),
                checkin_deadline=time.time() + 3600,
                secret="s" * 64,
            )
            start = 0
            for i, cid in enumerate(self.ids):
                cert = json.dumps({"body": {"client_id": cid, "n": i}, "signature": f"{i:02x}"})
                row = ClientRow(cid, _raw(self.keys[i]).hex(), "pop", "fp", 2e9, False, cert)
                tx.add_client(row, 1.0)
                count = 1 + i % 3
                commitment = seeding.commitment(self.id, cid, self.values[i])
                tx.add_member(self.id, cid, start, count, 1.0, commitment)
                start += count
        self.total = start

    def close_checkin(self, above: int | None) -> RunRow:
        """The driver's close of check-in with ``cohort_tree_above=above``; the run as stored."""
        driver = Driver(self.store, cohort_tree_above=above)
        with self.store.transaction() as tx:
            run = tx.run(self.id, lock=True)
            assert run is not None
            driver._close_checkin(tx, run)
        return self.row()

    def row(self) -> RunRow:
        with self.store.transaction(read_only=True) as tx:
            run = tx.run(self.id)
        assert run is not None
        return run

    def reveal(self, i: int, **over: Any) -> bool:
        """Member ``i`` reveals as a device does (:func:`signed_reveal` over the head it checked)."""
        run = self.row()
        with self.store.transaction(read_only=True) as tx:
            head = secure_tree.tree_of(tx, run).head
        position = self.ids.index(self.ids[i])
        body = signed_reveal(self.id, head, position, self.values[i], self.keys[i].sign) | over
        with self.store.transaction() as tx:
            run = tx.run(self.id, lock=True)
            assert run is not None
            return secure_tree.record_reveal(tx, run, self.ids[i], body)

    def close_seeding(self, deadline: float) -> RunRow | str | None:
        with self.store.transaction() as tx:
            run = tx.run(self.id, lock=True)
            assert run is not None
            return secure.close_seeding(tx, run, deadline, self.config)

    def reveals(self) -> dict[str, tuple[str | None, str | None]]:
        with self.store.transaction(read_only=True) as tx:
            return {
                m.client_id: (m.reveal, m.reveal_signature) for m in tx.members_in_order(self.id)
            }


def test_the_head_and_the_reveal_signature_round_trip_on_every_store(store: Store) -> None:
    """``runs.cohort_head`` (90 hex digits) and ``run_members.reveal_signature`` (128) are stored and read."""
    run = Run(store, 4)
    head = hashlib.sha256(b"h").hexdigest()[:90].ljust(90, "e")
    sig = [hashlib.sha512(bytes([i])).hexdigest() for i in range(4)]
    with store.transaction() as tx:
        assert cast(RunRow, tx.run(run.id)).cohort_head is None
        tx.update_run(run.id, cohort_head=head)
        tx.set_reveal(run.id, run.ids[0], "0a" * 32, sig[0])
        tx.set_reveal(run.id, run.ids[1], "0b" * 32)  # a list run's reveal: no signature
        tx.set_reveals([(run.id, run.ids[2], "0c" * 32, sig[2]), (run.id, run.ids[3], "0d" * 32)])
    with store.transaction(read_only=True) as tx:
        assert cast(RunRow, tx.run(run.id)).cohort_head == head
        got = {m.client_id: (m.reveal, m.reveal_signature) for m in tx.members_in_order(run.id)}
        assert got == {
            run.ids[0]: ("0a" * 32, sig[0]),
            run.ids[1]: ("0b" * 32, None),
            run.ids[2]: ("0c" * 32, sig[2]),
            run.ids[3]: ("0d" * 32, None),
        }
        assert cast(Any, tx.member_row(run.id, run.ids[2])).reveal_signature == sig[2]
        assert tx.member_rows(run.id, run.ids[:1])[run.ids[0]].reveal_signature == sig[0]


@pytest.mark.parametrize(("above", "tree"), [(5, True), (6, False), (None, False)])
def test_the_driver_stores_the_cohort_head_only_above_the_threshold(
    store: Store, above: int | None, tree: bool
) -> None:
    """More devices than ``cohort_tree_above``: the head of the members' tree, set with ``seeding``."""
    run = Run(store, 6)
    got = run.close_checkin(above)
    assert got.status == "seeding"
    if not tree:
        assert got.cohort_head is None
        return
    with store.transaction(read_only=True) as tx:
        tree_now = secure_tree.build_tree(tx, run.id)
    assert got.cohort_head == tree_now.head.to_bytes().hex()
    # every member checks its own leaf as a device does, at the slots it was given
    with store.transaction(read_only=True) as tx:
        for i, cid in enumerate(run.ids):
            m = cast(Any, tx.member_row(run.id, cid))
            head, position = check_own_leaf(
                secure_tree.leaf_json(tx, got, cid),
                client_id=cid,
                commitment=m.commitment,
                key=_raw(run.keys[i]),
                slot_start=m.slot_start,
                slot_count=m.slot_count,
                max_members=6,
            )
            assert head == tree_now.head and position == i


def test_the_committee_reveals_fix_the_committee_seed(store: Store) -> None:
    """The run waits for its committee only; then seed = committee_seed(values in committee order)."""
    run = Run(store, 45)  # a committee of 40 of the 45 members
    row = run.close_checkin(10)
    with store.transaction(read_only=True) as tx:
        head = secure_tree.tree_of(tx, row).head
    committee = committee_positions(head)
    assert len(committee) == 40
    for p in committee[:-1]:
        assert run.reveal(p) is True
    assert run.close_seeding(time.time() + 60) is None  # one committee member still to reveal
    assert run.reveal(committee[-1]) is True
    assert run.reveal(committee[-1]) is False  # an identical repeat: a duplicate
    seeded = run.close_seeding(time.time() + 60)
    assert isinstance(seeded, RunRow) and seeded.status == "running"
    want = committee_seed(run.id, head, [run.values[p] for p in committee])
    assert seeded.public_seed == want.hex() and run.row().public_seed == want.hex()
    assert run.row().status == "running"
    # the committee answer checks with the device's function and gives the same seed
    now = run.row()
    with store.transaction(read_only=True) as tx:
        answer = secure_tree.seed_json(tx, now, run.ids[0], secure_tree.COMMITTEE)
    certified: list[str] = []

    def check_certificate(leaf: Any, cert: Any) -> None:
        assert cert["body"]["client_id"] == leaf.client_id
        certified.append(leaf.client_id)

    assert answer["seed"] == want.hex()
    assert verify_committee(run.id, head, answer["committee"], check_certificate) == want
    assert certified == [run.ids[p] for p in committee]
    # a non-committee member did not reveal, and the seed did not wait for it
    outside = sorted(set(range(45)) - set(committee))
    assert all(run.reveals()[run.ids[p]] == (None, None) for p in outside)


def test_a_committee_member_that_withholds_aborts_the_run_and_is_named(store: Store) -> None:
    """Past the deadline a committee member without a reveal is a withholder; the run aborts."""
    run = Run(store, 12)
    row = run.close_checkin(10)
    with store.transaction(read_only=True) as tx:
        committee = committee_positions(secure_tree.tree_of(tx, row).head)
    silent = committee[3]
    for p in committee:
        if p != silent:
            run.reveal(p)
    assert run.close_seeding(time.time() + 60) is None
    why = run.close_seeding(time.time() - 1)
    assert isinstance(why, str) and run.ids[silent] in why
    with store.transaction(read_only=True) as tx:
        assert tx.withholders(run.id) == [run.ids[silent]]
        assert tx.is_withholder(run.task_id, run.ids[silent])
    assert run.row().public_seed is None


def test_only_committee_members_reveal_and_a_bad_reveal_stores_nothing(store: Store) -> None:
    """Non-committee: 409 (ConflictError); bad signature, wrong seen, wrong value: 403; nothing stored."""
    run = Run(store, 45)
    row = run.close_checkin(10)
    with store.transaction(read_only=True) as tx:
        head = secure_tree.tree_of(tx, row).head
    committee = committee_positions(head)
    outside = min(set(range(45)) - set(committee))
    with pytest.raises(ConflictError, match="not a committee member"):
        run.reveal(outside)
    p = committee[0]
    other = _key(run.id, 999)
    bad = signed_reveal(run.id, head, p, run.values[p], other.sign)["signature"]
    with pytest.raises(SecurityError, match="not signed"):
        run.reveal(p, signature=bad)
    with pytest.raises(SecurityError, match="head this client saw"):
        run.reveal(p, seen=hashlib.sha256(b"another head").hexdigest())
    # a value that does not open the commitment (signed by the member itself)
    wrong = signed_reveal(run.id, head, p, bytes(32), run.keys[p].sign)
    with pytest.raises(SecurityError, match="does not open"):
        run.reveal(p, **wrong)
    with pytest.raises(DataError):
        run.reveal(p, signature="zz")
    assert all(v == (None, None) for v in run.reveals().values())
    assert run.reveal(p) is True  # the right one is then accepted, with its signature
    stored = run.reveals()[run.ids[p]]
    assert stored[0] == run.values[p].hex()
    assert stored[1] == signed_reveal(run.id, head, p, run.values[p], run.keys[p].sign)["signature"]
    with pytest.raises(ConflictError, match="different value"):
        run.reveal(p, **signed_reveal(run.id, head, p, bytes(32), run.keys[p].sign))


def _seeded(store: Store, n: int) -> tuple[Run, RunRow, Any]:
    run = Run(store, n)
    row = run.close_checkin(10)
    with store.transaction(read_only=True) as tx:
        tree = secure_tree.tree_of(tx, row)
    for p in committee_positions(tree.head):
        run.reveal(p)
    seeded = run.close_seeding(time.time() + 60)
    assert isinstance(seeded, RunRow)
    return run, seeded, tree


def _first_session(store: Store, run: Run, row: RunRow) -> list[str]:
    """Open round 0's first session over the whole cohort (as the driver stores it); its members."""
    rec = cast(RoundRow, types.SimpleNamespace(index=0, lo=0, hi=run.total))
    with store.transaction() as tx:
        members = secure.partition(tx, row, rec, task_config(tx, run.task_id))[0]
        tx.add_secure_session(
            SecureSessionRow(
                run_id=run.id,
                round_index=0,
                number=0,
                members=json.dumps(members),
                params="{}",
                session=seeding.session_id(bytes.fromhex(str(row.public_seed)), 0, 0).hex(),
                stage=0,
                deadline=time.time() + 60,
                status="open",
            )
        )
    return members


@pytest.mark.parametrize("part", ["whole", "part"])
def test_the_tree_partition_is_what_each_device_derives_from_its_position(
    store: Store, part: str
) -> None:
    """Every participant's session, roster index and size are ``session_of`` of its position; each
    roster is bound by ``session_binding`` and lists the leaves' keys; the range proof proves it."""
    run, row, tree = _seeded(store, 45)
    lo, hi = (0, run.total) if part == "whole" else (7, run.total - 5)
    rec = cast(RoundRow, types.SimpleNamespace(index=2, lo=lo, hi=hi))
    with store.transaction(read_only=True) as tx:
        sessions = secure.partition(tx, row, rec, task_config(tx, run.task_id))
        rosters = [secure._roster(tx, row, 2, k, members) for k, members in enumerate(sessions)]
        proof = secure_tree.range_proof(tx, run.id, rec)
    assert proof == range_answer(tree, lo, hi) and (proof is None) == (part == "whole")
    p_lo, p_hi = participants(tree.head, lo, hi, proof)  # the device's check of the range
    assert (p_lo, p_hi) == tree.positions_of(lo, hi)
    seed = bytes.fromhex(str(row.public_seed))
    where = {cid: (k, j) for k, members in enumerate(sessions) for j, cid in enumerate(members)}
    assert sorted(where) == sorted(tree.leaf(p).client_id for p in range(p_lo, p_hi))
    for position in range(p_lo, p_hi):
        seat = session_of(seed, p_lo, p_hi, MAX_SESSION, MIN_SESSION, position)
        number, index = where[tree.leaf(position).client_id]
        assert (seat.number, seat.roster_index, seat.size) == (number, index, len(sessions[number]))
        assert member_at(seed, p_lo, p_hi, MAX_SESSION, MIN_SESSION, number, index) == position
    for k, (members, roster) in enumerate(zip(sessions, rosters, strict=True)):
        binding = session_binding(
            run.id, seed, tree.head, 2, k, p_lo, p_hi, MAX_SESSION, len(members)
        )
        assert roster.bound and roster.binding == binding
        assert roster.session == seeding.session_id(seed, 2, k)
        assert roster.task_id == seeding.task_id_bytes(run.id)
        assert list(roster.identities) == [_raw(run.keys[run.ids.index(c)]) for c in members]


def test_a_device_s_neighbourhood_answer_proves_the_leaves_it_named(store: Store) -> None:
    """``members``/``also`` roster indices: one multiproof of their leaves, the checked ones' certificates."""
    run, row, tree = _seeded(store, 20)
    members = _first_session(store, run, row)
    checked, also = [2, 0], [1, 4]
    certs = [{"c": j} for j in checked]
    with store.transaction(read_only=True) as tx:
        answer = secure_tree.neighbourhood(tx, row, 0, 0, checked, also, certs)
        with pytest.raises(Exception, match="roster indices"):
            secure_tree.neighbourhood(tx, row, 0, 0, [len(members)], [], [])
    positions = [run.ids.index(members[j]) for j in checked + also]
    leaves = verify_leaves(tree.head, answer, sorted(positions))
    assert answer["certificates"] == certs
    for j in checked + also:
        p = run.ids.index(members[j])
        assert leaves[p].key == _raw(run.keys[p]) and leaves[p].client_id == members[j]
    with pytest.raises(SecurityError):  # the same answer does not prove another set of positions
        verify_leaves(tree.head, answer, sorted({*positions, min(set(range(20)) - set(positions))}))


# -- over HTTP: the routes' shapes, with requests signed by the members' keys -----------------------


class Http:
    """The app (no driver) over ``store``; ``get``/``post`` sign as member ``i`` of ``run``."""

    def __init__(self, store: Store, run: Run) -> None:
        self.run = run
        self.http = TestClient(
            create_app(store, ServerSettings(), run_driver=False), raise_server_exceptions=False
        )

    def request(
        self, method: str, i: int, path: str, body: Any = None, raw: bytes | None = None
    ) -> Any:
        data = raw if raw is not None else b"" if body is None else json.dumps(body).encode()
        path = f"/v1/client/runs/{self.run.id}{path}"
        headers = auth.sign_request(
            self.run.keys[i], self.run.ids[i], method, path.split("?")[0], data
        )
        headers["content-type"] = "application/json"
        return self.http.request(method, path, content=data, headers=headers)


def test_the_seed_reveal_and_certificate_routes_answer_a_tree_run_s_shapes(store: Store) -> None:
    """GET /seed (tree; part=committee held), POST /reveal (signed; 409 off the committee; 403 bad),
    GET /certificates?members=&also= (leaves answer), part=committee on a list run: 422."""
    run = Run(store, 45)
    row = run.close_checkin(10)
    with store.transaction(read_only=True) as tx:
        tree = secure_tree.tree_of(tx, row)
    head, committee = tree.head, committee_positions(tree.head)
    outside = min(set(range(45)) - set(committee))
    api = Http(store, run)
    got = api.request("GET", 0, "/seed")
    assert got.status_code == 200, got.text
    body = got.json()
    assert (body["status"], body["seed"]) == ("seeding", None) and set(body) == {
        "status",
        "seed",
        "tree",
    }
    with store.transaction(read_only=True) as tx:
        m = cast(Any, tx.member_row(run.id, run.ids[0]))
    assert check_own_leaf(
        body["tree"],
        client_id=run.ids[0],
        commitment=m.commitment,
        key=_raw(run.keys[0]),
        slot_start=m.slot_start,
        slot_count=m.slot_count,
        max_members=45,
    ) == (head, 0)
    # a (retried) held check-in of a member while the tree run is seeding carries its leaf
    got = api.request(
        "POST", 0, "/checkin?wait=1", {"records": m.slot_count, "commitment": m.commitment}
    )
    assert got.status_code == 200, got.text
    assert "transcript" not in got.json() and got.json()["tree"] == body["tree"]
    assert api.request("GET", outside, "/seed?part=committee").json() == {
        "status": "seeding",
        "seed": None,
    }
    reveal = signed_reveal(run.id, head, outside, run.values[outside], run.keys[outside].sign)
    got = api.request("POST", outside, "/reveal", reveal)
    assert got.status_code == 409, got.text
    p = committee[0]
    forged = signed_reveal(run.id, head, p, run.values[p], _key(run.id, 999).sign)
    assert api.request("POST", p, "/reveal", forged).status_code == 403
    assert api.request("POST", p, "/reveal", {**forged, "seen": "00" * 32}).status_code == 403
    assert run.reveals()[run.ids[p]] == (None, None)
    for q in committee:
        good = signed_reveal(run.id, head, q, run.values[q], run.keys[q].sign)
        got = api.request("POST", q, "/reveal", good)
        assert got.status_code == 200 and got.json() == {"accepted": True, "duplicate": False}
    seeded = run.close_seeding(time.time() + 60)
    assert isinstance(seeded, RunRow)
    want = committee_seed(run.id, head, [run.values[q] for q in committee]).hex()
    a = api.request("GET", outside, "/seed?part=committee&wait=1")
    b = api.request("GET", p, "/seed?part=committee")
    assert a.status_code == 200 and a.content == b.content  # the same bytes for every member
    answer = a.json()
    assert (answer["status"], answer["seed"]) == ("running", want)
    assert (
        verify_committee(run.id, head, answer["committee"], lambda leaf, cert: None).hex() == want
    )
    # a repeated reveal with wait: acknowledged as a duplicate, with the committee answer
    again = signed_reveal(run.id, head, p, run.values[p], run.keys[p].sign)
    got = api.request("POST", p, "/reveal?wait=1", again)
    assert got.status_code == 200, got.text
    assert got.json()["duplicate"] is True and got.json()["revealed"] == answer
    # the stage-0 neighbourhood: GET certificates?members=&also= answers the leaves answer
    members = _first_session(store, run, seeded)
    me = run.ids.index(members[0])
    got = api.request("GET", me, "/rounds/0/secure/0/certificates?members=1,2&also=3")
    assert got.status_code == 200, got.text
    leaves = verify_leaves(head, got.json(), sorted(run.ids.index(members[j]) for j in (1, 2, 3)))
    assert [c["body"]["client_id"] for c in got.json()["certificates"]] == members[1:3]
    assert {leaf.client_id for leaf in leaves.values()} == set(members[1:4])
    # asked again (and by another member), the answer comes from memory, byte for byte the store's
    other = run.ids.index(members[1])
    again = api.request("GET", other, "/rounds/0/secure/0/certificates?members=1,2&also=3")
    assert again.status_code == 200 and again.content == got.content
    certs = secure_devices.cached_certificates_json(run.id, 0, 0, members[1], [1, 2])
    assert certs is not None
    fast = secure_tree.cached_neighbourhood(run.id, 0, 0, [1, 2], [3], certs)
    assert fast == got.content
    with store.transaction(read_only=True) as tx:
        slow = secure_tree.neighbourhood(tx, seeded, 0, 0, [1, 2], [3], json.loads(certs))
    assert fast == json.dumps(slow).encode()
    # a device outside the session is refused, from memory or not
    outsider = next(i for i, c in enumerate(run.ids) if c not in members)
    got = api.request("GET", outsider, "/rounds/0/secure/0/certificates?members=1,2&also=3")
    assert got.status_code == 403, got.text
    # part=committee on a list run: 422
    plain = Run(store, 4, "list-")
    plain.close_checkin(None)
    got = Http(store, plain).request("GET", 0, "/seed?part=committee")
    assert got.status_code == 422, got.text


def test_the_cli_option_reads_a_count_none_or_the_default() -> None:
    """``--cohort-tree-above``: absent -> 64 (the settings' default), ``none`` -> never, N >= 1, else refused."""
    assert cohort_tree_option(None) == ServerSettings().cohort_tree_above == 64
    assert cohort_tree_option("none") is None and cohort_tree_option("NONE") is None
    assert cohort_tree_option("500") == 500
    for bad in ("0", "-3", "many", ""):
        with pytest.raises(ParameterError):
            cohort_tree_option(bad)


def test_a_tree_run_s_sessions_open_with_bound_rosters_and_replay(store: Store) -> None:
    """open_sessions on a tree run: the partition's sessions, setup messages sent without roster, and a
    replay of each session from its journal (rebuilt with the same bound roster) agrees."""
    run, row, tree = _seeded(store, 30)
    rec = cast(RoundRow, types.SimpleNamespace(index=1, lo=3, hi=run.total - 2, dim=3, bound=10))
    cache = secure.SessionCache()
    with store.transaction() as tx:
        cfg = task_config(tx, run.task_id)
        want = secure.partition(tx, row, rec, cfg)
        secure.open_sessions(tx, row, rec, cfg, cache)
    with store.transaction(read_only=True) as tx:
        rows = tx.secure_sessions(run.id, 1)
        assert [json.loads(r.members) for r in rows] == want
        for r in rows:
            assert (
                r.session
                == seeding.session_id(bytes.fromhex(str(row.public_seed)), 1, r.number).hex()
            )
            live = secure._rebuild(tx, row, r, 3)  # raises if the journal's setup diverged
            assert live.stage == 0
            downs = tx.down_digests(run.id, 1, r.number, 0)
            assert sorted(downs) == list(range(len(json.loads(r.members))))
        # each member's stage-0 work item carries the round's range proof (a part of the cohort)
        for r in rows:
            for j, cid in enumerate(json.loads(r.members)):
                work = cast(dict[str, Any], secure_devices.secure_work(tx, run.id, rec, cid))
                assert (work["session"], work["index"], work["stage"]) == (r.number, j, 0)
                assert work["range_proof"] == range_answer(tree, rec.lo, rec.hi)
                assert participants(tree.head, rec.lo, rec.hi, work["range_proof"]) == (
                    tree.positions_of(rec.lo, rec.hi)
                )


def test_a_stage_0_message_with_members_and_also_is_answered_with_the_leaves(store: Store) -> None:
    """POST stage 0 ``?members=&also=`` on a tree run: the acknowledgement's ``"certificates"`` is the
    leaves answer (one multiproof of the named leaves, the certificates of ``members``)."""
    run, row, tree = _seeded(store, 30)
    with store.transaction() as tx:
        rec = tx.add_round(
            run_id=run.id,
            index=0,
            status="open",
            opened_at=time.time(),
            deadline=time.time() + 60,
            name="r",
            encode="identity",
            params="{}",
            params_digest="0" * 64,
            dim=3,
            bound=10,
            lo=0,
            hi=run.total,
        )
        secure.open_sessions(tx, row, rec, task_config(tx, run.task_id), secure.SessionCache())
        members = json.loads(tx.secure_sessions(run.id, 0)[0].members)
    api = Http(store, run)
    me = run.ids.index(members[0])
    got = api.request("POST", me, "/rounds/0/secure/0/0?members=2,1&also=3", raw=b"\x01" * 40)
    assert got.status_code == 200, got.text
    ack = got.json()
    assert ack["accepted"] is True and ack["duplicate"] is False
    answer = ack["certificates"]
    named = [run.ids.index(members[j]) for j in (2, 1, 3)]
    leaves = verify_leaves(tree.head, answer, sorted(named))
    assert [c["body"]["client_id"] for c in answer["certificates"]] == [members[2], members[1]]
    assert all(leaves[p].key == _raw(run.keys[p]) for p in named)
    # also= at a later stage: 422 before anything is stored
    got = api.request("POST", me, "/rounds/0/secure/0/1?also=3", raw=b"\x01" * 40)
    assert got.status_code == 422, got.text


def test_a_session_s_devices_asking_together_share_one_store_read(store: Store) -> None:
    """A session's held advertisements wake together as stage 1 opens, and the held check-ins as
    check-in closes: one hand-off to a store thread fills the caches for all of them (as the list
    form's certificates, ``member_certificates``), each answered its own bytes; a device outside the
    session still gets its own error."""
    import asyncio

    from fedstats.service.http import secure_tree as tree_http

    run, row, tree = _seeded(store, 20)
    members = _first_session(store, run, row)
    secure_tree.forget(run.id)  # a process that has seen nothing of the run yet
    secure_devices.forget_run(run.id)
    routes, handoffs = counted_routes(store)
    outsider = next(c for c in run.ids if c not in members)

    async def leaves() -> list[Any]:
        asks = [tree_http.checkin_leaf(routes, run.id, c) for c in run.ids]
        return await asyncio.gather(*asks)

    got = asyncio.run(leaves())
    assert [json.loads(g) for g in got] == [leaf_answer(tree, p) for p in range(len(run.ids))]
    assert len(handoffs) == 1, handoffs  # one read of the tree for every held check-in
    handoffs.clear()

    async def neighbourhoods() -> list[Any]:
        asks = [
            tree_http.checked(routes, run.id, 0, 0, c, [(i + 1) % len(members)], [(i + 2) % 5])
            for i, c in enumerate(members)
        ]
        asks.append(tree_http.checked(routes, run.id, 0, 0, outsider, [0], [1]))
        return await asyncio.gather(*asks, return_exceptions=True)

    got = asyncio.run(neighbourhoods())
    for i, answer in enumerate(got[:-1]):
        named = sorted(
            {run.ids.index(members[(i + 1) % len(members)]), run.ids.index(members[(i + 2) % 5])}
        )
        assert sorted(verify_leaves(tree.head, json.loads(answer), named)) == named
    assert isinstance(got[-1], SecurityError), got[-1]
    # one shared read for the members, and the outsider's own (its error is its own)
    assert len(handoffs) == 2, handoffs
    # asked again (a device's next round, or a late one): from memory, no hand-off at all
    again = asyncio.run(tree_http.checked(routes, run.id, 0, 0, members[0], [1], [2]))
    assert json.loads(again)["certificates"] and len(handoffs) == 2, handoffs


def test_the_held_committee_answer_carries_the_next_work_list_when_asked(store: Store) -> None:
    """``GET .../seed?part=committee&wait=`` with ``Fedstats-Next-Work: 1``, once the seed is fixed and
    the device has something to do (here another run's offer; in a run, its first round): the committee
    answer, byte for byte, with ``"work"`` (the device's work list) and its ``ETag``. Without the header,
    or when the list is longer than ``CARRIED_WORK_BYTES``, the committee alone. A committee member's
    held reveal likewise."""
    run, _, tree = _seeded(store, 45)
    other = Run(store, 2, "other-")  # checking in: an offer to run's members
    api = Http(store, run)
    outside = min(set(range(45)) - set(committee_positions(tree.head)))
    plain = api.request("GET", outside, "/seed?part=committee&wait=1")
    assert plain.status_code == 200 and "work" not in plain.json() and "etag" not in plain.headers

    def asked() -> Any:
        path = f"/v1/client/runs/{run.id}/seed"
        headers = auth.sign_request(run.keys[outside], run.ids[outside], "GET", path, b"")
        headers["Fedstats-Next-Work"] = "1"
        return api.http.get(path + "?part=committee&wait=1", headers=headers)

    got = asked()
    assert got.status_code == 200, got.text
    body = got.json()
    work = body.pop("work")
    assert json.dumps(body).encode() == plain.content  # the committee answer, unchanged
    assert [o["run_id"] for o in work["offers"]] == [other.id] and got.headers["etag"]
    with pytest.MonkeyPatch.context() as mp:  # a list longer than the bound: not carried
        mp.setattr(tree_http, "CARRIED_WORK_BYTES", 10)
        got = asked()
    assert got.status_code == 200 and got.content == plain.content
    # a committee member's held reveal (here repeated) carries it too, when asked
    p = committee_positions(tree.head)[0]
    body = json.dumps(signed_reveal(run.id, tree.head, p, run.values[p], run.keys[p].sign)).encode()
    for header in (True, False):
        path = f"/v1/client/runs/{run.id}/reveal"
        headers = auth.sign_request(run.keys[p], run.ids[p], "POST", path, body)
        headers |= {"content-type": "application/json"}
        if header:
            headers["Fedstats-Next-Work"] = "1"
        got = api.http.post(path + "?wait=1", content=body, headers=headers)
        assert got.status_code == 200, got.text
        ack = got.json()
        assert json.dumps(ack["revealed"]).encode() == plain.content
        assert ("work" in ack) == header == ("etag" in got.headers)
        if header:
            assert [o["run_id"] for o in ack["work"]["offers"]] == [other.id]


def test_a_held_check_in_asking_for_more_holds_only_members_off_the_committee(
    store: Store,
) -> None:
    """While the run is seeding, a held check-in with ``Fedstats-Next-Work: 1`` is answered its leaf at
    once for a committee member (it must reveal: holding it for the seed would stall the run), and
    for a member off the committee held up to ``wait`` for the committee, then its leaf alone when the
    seed is not fixed by then (the device asks for the committee as before). That the committee and
    the first round come with it once fixed is tested end to end
    (``test_service_tree_seeding.test_a_sparse_tree_session_with_a_committee_of_40``)."""
    run = Run(store, 45)
    row = run.close_checkin(10)
    with store.transaction(read_only=True) as tx:
        committee = committee_positions(secure_tree.tree_of(tx, row).head)
    api = Http(store, run)
    outside = min(set(range(45)) - set(committee))

    def checkin(i: int) -> tuple[dict[str, Any], float]:
        with store.transaction(read_only=True) as tx:
            m = cast(Any, tx.member_row(run.id, run.ids[i]))
        body = json.dumps({"records": m.slot_count, "commitment": m.commitment}).encode()
        path = f"/v1/client/runs/{run.id}/checkin"
        headers = auth.sign_request(run.keys[i], run.ids[i], "POST", path, body)
        headers |= {"content-type": "application/json", "Fedstats-Next-Work": "1"}
        began = time.monotonic()
        r = api.http.post(path + "?wait=2", content=body, headers=headers)
        assert r.status_code == 200, r.text
        return r.json(), time.monotonic() - began

    member, member_s = checkin(committee[0])
    off, off_s = checkin(outside)
    assert "tree" in member and "tree" in off
    assert not {"revealed", "work"} & (set(member) | set(off))
    assert member_s < 1.5 <= off_s, (member_s, off_s)
