"""A tree-seeded secure session end to end at the library level (TREE_SPEC sections 3-5).

The server's :class:`~fedstats.secagg.SecAggServer` holds the bound roster with every member's key; each
client is configured the way the device SDK configures it (:mod:`fedstats.client.secure_tree`): its seat
from its tree position alone, a bound roster holding only its own key, a
:class:`~fedstats.client.secure_tree.TreeRosterVerifier`, and, after its key advertisement, the keys of
its checked and two-hop members from leaves it verified against the head (their certificates checked),
then its input. A session of 100 (a sparse graph, ``k < n - 1``) gives the exact sum.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedstats.client.roster import checked_members, two_hop, with_committed_roster
from fedstats.client.secure_tree import TreeRosterVerifier, bound_roster
from fedstats.errors import ProtocolAbortError, SecurityError
from fedstats.secagg import ClientConfig, ClientIdentity, SecAggClient, SecAggServer
from fedstats.secagg.collusion import session_parameters
from fedstats.secagg.identity import SessionRoster
from fedstats.wire import auth, seeding
from fedstats.wire.cohort_sessions import member_at, session_of, sessions_of_positions
from fedstats.wire.cohort_tree import CohortTree, Leaf
from fedstats.wire.tree_seeding import leaves_answer, session_binding, verify_leaves

RID = "run-tree-lib"
POP = "default"
N = 100
MAX_SESSION = 100
LENGTH = 4


def _session(hold_two_hop: bool = True) -> tuple[np.ndarray, np.ndarray, dict[int, Exception]]:
    """Run one session of ``N``; returns (the server's sum, the inputs' sum, the clients' errors)."""
    rng = np.random.default_rng(11)
    authority = Ed25519PrivateKey.generate()
    ids = [ClientIdentity() for _ in range(N)]
    names = [f"dev-{p:03d}" for p in range(N)]
    tree = CohortTree(
        [
            Leaf(names[p], hashlib.sha256(b"%d" % p).digest(), ids[p].public, int(s))
            for p, s in enumerate(rng.integers(1, 4, N))
        ]
    )
    certs = [
        auth.issue_certificate(
            authority, client_id=names[p], public_key=ids[p].public.hex(), population=POP
        ).as_dict()
        for p in range(N)
    ]
    head, seed, task = (
        tree.head,
        bytes(rng.integers(0, 256, 32, dtype=np.uint8)),
        seeding.task_id_bytes(RID),
    )
    (members,) = sessions_of_positions(seed, 0, N, MAX_SESSION, 10)
    sid = seeding.session_id(seed, 0, 0)
    binding = session_binding(RID, seed, head, 0, 0, 0, N, MAX_SESSION, N)
    params = session_parameters(N)
    assert params.k < N - 1
    full = SessionRoster(task, sid, tuple(tree.leaf(p).key for p in members), bytes(64), binding)
    server = SecAggServer(params, length=LENGTH, bits=seeding.BITS, roster=full)
    x = rng.integers(0, 1 << 20, size=(N, LENGTH))
    clients, verifiers = {}, {}
    for p in range(N):  # each device from its position alone
        seat = session_of(seed, 0, N, MAX_SESSION, 10, p)
        assert (seat.number, seat.size) == (0, N) and members[seat.roster_index] == p
        i = seat.roster_index
        verifiers[i] = TreeRosterVerifier(
            auth.public_key_hex(authority),
            population=POP,
            session=sid,
            task_id=task,
            binding=binding,
            n=N,
            index=i,
            client_id=names[p],
            key=ids[p].public,
            verified=set(),
        )
        config = ClientConfig.from_parameters(
            params,
            bits=seeding.BITS,
            length=LENGTH,
            identity=ids[p],
            verifier=verifiers[i],
            task_id=task,
        )
        clients[i] = SecAggClient(i, None, config)
    errors: dict[int, Exception] = {}
    for i, msg in server.setup().items():
        p = members[i]
        own = bound_roster(task, sid, N, i, ids[p].public, binding)
        setup = with_committed_roster(dataclasses.replace(msg, roster=b""), own)
        server.receive_bytes(clients[i].handle_bytes(setup.to_bytes()))
        # the answer to its advertisement: the leaves of its checked and two-hop members
        checked = checked_members(N, params.k, sid, i, 16, np.random.default_rng(i))
        also = sorted(set(two_hop(N, params.k, sid, i)) - set(checked)) if hold_two_hop else []
        at = {j: member_at(seed, 0, N, MAX_SESSION, 10, 0, j) for j in checked + also}
        answer = leaves_answer(
            tree, [at[j] for j in checked + also], [certs[at[j]] for j in checked]
        )
        leaves = verify_leaves(head, answer, [at[j] for j in checked + also])
        verifiers[i].certify([leaves[at[j]] for j in checked], answer["certificates"])
        clients[i].hold_keys({j: leaves[at[j]].key for j in checked + also})
        clients[i].provide_input(x[members[i]])
    out = {i: m.to_bytes() for i, m in server.advance().items()}
    while out:
        for i, data in out.items():
            try:
                reply = clients[i].handle_bytes(data)
            except (SecurityError, ProtocolAbortError) as exc:
                errors[i] = exc
                continue
            server.receive_bytes(reply)
        out = {i: m.to_bytes() for i, m in server.advance().items()}
    return server.result(), x.sum(axis=0), errors  # far below 2**BITS: no wrap


def test_a_tree_session_of_100_with_device_held_keys_gives_the_exact_sum() -> None:
    total, want, errors = _session()
    assert not errors
    assert np.array_equal(total, want)


def test_without_the_two_hop_keys_the_consistency_check_cannot_count() -> None:
    # the same session with only the checked members' keys held: too few signers are known
    with pytest.raises(ProtocolAbortError):
        _session(hold_two_hop=False)


def test_the_setup_message_is_checked_against_the_bound_roster() -> None:
    """A client given the server's full roster (a listed one) refuses it: its verifier wants bound."""
    authority = Ed25519PrivateKey.generate()
    ident = ClientIdentity()
    v = TreeRosterVerifier(
        auth.public_key_hex(authority),
        population=POP,
        session=b"S" * 32,
        task_id=b"t",
        binding=b"B" * 32,
        n=3,
        index=0,
        client_id="a",
        key=ident.public,
        verified=set(),
    )
    listed = SessionRoster(b"t", b"S" * 32, (ident.public, b"x" * 32, b"y" * 32), bytes(64))
    with pytest.raises(SecurityError, match="bound"):
        v.verify(listed)
