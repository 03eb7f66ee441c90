"""A device checks its neighbours' certificates (and a few audited members'), not all ``n``: what that stops.

Real :class:`fedstats.secagg.SecAggClient` objects configured as a device configures them
(:class:`fedstats.client.secure.CertificateRosterVerifier` over the positions of
:func:`fedstats.client.secure.checked_members`), a real :class:`fedstats.secagg.SecAggServer`, and a server
that deviates by rewriting the serialized messages it sends (it holds no device key):

* a member with no valid certificate (a key the server made) is refused by every device that has it as a
  neighbour or audits it, before the device sends anything;
* two devices given different rosters (a fake member outside the victim's checks, its neighbours the real
  roster) cannot exchange shares: the roster transcript keys and authenticates their share encryption, so
  the victim and every neighbour that received its shares abort before the masked input.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from fedstats.client.secure import CertificateRosterVerifier, checked_members
from fedstats.errors import ParameterError, SecurityError
from fedstats.randomness import RandomSource
from fedstats.secagg import SecAggClient, SecAggServer, find_parameters
from fedstats.secagg.crypto import roster_transcript
from fedstats.secagg.identity import ClientIdentity, SessionRoster
from fedstats.secagg.messages import (
    AdvertiseKeys,
    EncryptedShares,
    KeyBroadcast,
    MaskedInput,
    decode,
)
from fedstats.secagg.params import ClientConfig
from fedstats.wire import auth, seeding

# in this process, no database or server process: part of make test-fast
pytestmark = pytest.mark.memory_state

N = 20
BITS = 32
LENGTH = 3
TASK = b"run-roster"


@pytest.fixture(scope="module")
def enrolled(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]]]:
    from fedstats.wire.enrollment import init_authority, issue_identity

    root = tmp_path_factory.mktemp("roster")
    pub = init_authority(root / "auth")
    idents = [
        issue_identity(root / "auth", f"d{i}", "default", root / f"d{i}.json") for i in range(N)
    ]
    return pub, idents


def _fresh_key() -> bytes:
    return ClientIdentity().public


def _forged(cert: dict[str, Any], key: bytes) -> dict[str, Any]:
    """The member's certificate naming another key: the authority's signature no longer holds."""
    return {"body": dict(cert["body"], public_key=key.hex()), "signature": cert["signature"]}


def _device(
    i: int,
    pub: str,
    idents: list[dict[str, Any]],
    served: list[dict[str, Any]],
    session: bytes,
    audit: int,
) -> tuple[SecAggClient, list[int]]:
    """Device ``i`` as :mod:`fedstats.client.secure` builds it, given the certificates the server serves."""
    params = find_parameters(N)
    checked = checked_members(
        N, params.k, session, i, audit, RandomSource(seed=i).generator("audit")
    )
    verifier = CertificateRosterVerifier(
        pub,
        [served[j] for j in checked],
        population="default",
        session=session,
        task_id=TASK,
        members=[f"d{j}" for j in range(N)],
        indices=checked,
    )
    config = ClientConfig.from_parameters(
        params,
        bits=BITS,
        length=LENGTH,
        identity=ClientIdentity(auth.private_key_from_hex(idents[i]["private_key"])),
        verifier=verifier,
        task_id=TASK,
    )
    return SecAggClient(i, np.full(LENGTH, i, dtype=np.uint64), config), checked


def _roster(idents: list[dict[str, Any]], session: bytes) -> SessionRoster:
    keys = tuple(bytes.fromhex(d["certificate"]["body"]["public_key"]) for d in idents)
    return SessionRoster(TASK, session, keys, bytes(64))


def test_checked_members_are_the_neighbours_and_a_private_sample() -> None:
    params = find_parameters(200)
    session = seeding.session_id(bytes(32), 0, 0)
    from fedstats.secagg.graph import public_neighbors

    nbrs = public_neighbors(200, params.k, session, [7])[7]
    a = checked_members(200, params.k, session, 7, 16, RandomSource(seed=1).generator("a"))
    b = checked_members(200, params.k, session, 7, 16, RandomSource(seed=2).generator("a"))
    assert nbrs <= set(a) and nbrs <= set(b) and 7 not in a
    assert len(a) == len(b) == params.k + 16 == len(set(a))
    assert set(a) != set(b)  # the audited members follow the device's own randomness
    # a small session is checked whole
    small = find_parameters(10)
    whole = checked_members(10, small.k, session, 3, 16, RandomSource(seed=1).generator("a"))
    assert whole == [j for j in range(10) if j != 3]
    with pytest.raises(ParameterError, match="audit"):
        checked_members(10, small.k, session, 3, -1, RandomSource(seed=1).generator("a"))


@pytest.mark.parametrize("audit", [0, 4])
def test_a_fake_member_is_refused_by_every_device_that_checks_it(
    enrolled: tuple[str, list[dict[str, Any]]], audit: int
) -> None:
    pub, idents = enrolled
    session = seeding.session_id(bytes(range(32)), 0, 0)
    honest = _roster(idents, session)
    certs = [d["certificate"] for d in idents]
    fake = N - 1  # the server runs this member with a key it made
    key = _fresh_key()
    roster = dataclasses.replace(
        honest, identities=(*honest.identities[:fake], key, *honest.identities[fake + 1 :])
    )
    # the server serves the member's real certificate (another key) or one rewritten to its key
    for served_cert in (certs[fake], _forged(certs[fake], key)):
        served = [*certs[:fake], served_cert]
        server = SecAggServer(find_parameters(N), length=LENGTH, bits=BITS, roster=roster)
        setups = server.setup()
        refused, accepted = set(), set()
        for i in range(N - 1):
            client, checked = _device(i, pub, idents, served, session, audit)
            try:
                reply = client.handle(setups[i])
            except SecurityError:
                refused.add(i)
                assert not client.holds_secrets()
            else:
                assert isinstance(reply, AdvertiseKeys)
                accepted.add(i)
            assert (i in refused) == (fake in checked), (i, checked)
        assert refused, "the fake member is some honest device's neighbour"
        if audit == 0:
            assert accepted  # outside a device's checks the fake is not seen: see the next test


def test_two_devices_given_different_rosters_abort_before_their_masked_input(
    enrolled: tuple[str, list[dict[str, Any]]],
) -> None:
    """The server shows the victim a roster with a fake member it does not check; the others the real one.

    The victim accepts its roster (every member it checks is genuine), but its shares are encrypted under
    keys derived with its roster's transcript, and its neighbours' under theirs: each side fails to
    authenticate the other's shares and aborts, so nothing is masked with keys from two rosters and the
    server never gets a consistency signature or a masked input from them.
    """
    pub, idents = enrolled
    params = find_parameters(N)
    certs = [d["certificate"] for d in idents]
    for seed in range(50):  # a session id where some member is outside device 0's neighbourhood
        session = seeding.session_id(bytes([seed]) * 32, 0, 0)
        victim_checks = checked_members(
            N, params.k, session, 0, 0, RandomSource(seed=0).generator("audit")
        )
        outside = [j for j in range(1, N) if j not in victim_checks]
        if outside:
            break
    fake = outside[0]
    honest = _roster(idents, session)
    ids = list(honest.identities)
    ids[fake] = _fresh_key()
    other = dataclasses.replace(honest, identities=tuple(ids))
    server = SecAggServer(params, length=LENGTH, bits=BITS, roster=honest)
    clients = {i: _device(i, pub, idents, certs, session, 0)[0] for i in range(N)}
    setups = dict(server.setup())
    setups[0] = dataclasses.replace(setups[0], roster=other.to_bytes())
    for i, c in clients.items():
        reply = c.handle(setups[i])  # the victim too: the fake member is not one it checks
        server.receive_bytes(reply.to_bytes())
    keys: dict[int, Any] = dict(server.advance())
    assert all(isinstance(m, KeyBroadcast) for m in keys.values())
    # the victim checks the transcript of its own roster: the equivocating server sends it that one
    keys[0] = dataclasses.replace(keys[0], transcript=roster_transcript(other))
    for i, c in clients.items():
        reply = c.handle(keys[i])
        assert isinstance(reply, EncryptedShares)
        server.receive_bytes(reply.to_bytes())
    shares: dict[int, Any] = dict(server.advance())
    neighbours = {j for j, m in shares.items() if 0 in m.ciphertexts}
    assert neighbours and 0 in shares and shares[0].ciphertexts
    aborted, masked = set(), set()
    for i, c in clients.items():
        try:
            reply = c.handle(shares[i])
        except SecurityError as exc:
            assert "failed authentication" in str(exc)
            aborted.add(i)
            assert not c.holds_secrets()
        else:
            assert isinstance(reply, MaskedInput)
            masked.add(i)
    assert aborted == {0} | neighbours  # the victim and every neighbour that received its shares
    assert masked == set(range(N)) - aborted
    # with the real roster everywhere the same session completes (the devices are not the problem)
    server = SecAggServer(params, length=LENGTH, bits=BITS, roster=honest)
    clients = {i: _device(i, pub, idents, certs, session, 0)[0] for i in range(N)}
    out: dict[int, Any] = dict(server.setup())
    while out:
        for i, m in out.items():
            server.receive_bytes(clients[i].handle(m).to_bytes())
        out = dict(server.advance())
    assert [int(x) for x in server.result()] == [sum(range(N))] * LENGTH


# -- the roster committed once per run (issue 28 §4) ------------------------------------------------


def _run_list(idents: list[dict[str, Any]], run: str) -> tuple[list[Any], list[bytes], list[str]]:
    """A secure run's commitment list: entries, each member's secret contribution, the run's roster."""
    values = [bytes([i + 1]) * 32 for i in range(N)]
    entries = [(f"d{i}", seeding.commitment(run, f"d{i}", values[i]), i, 1) for i in range(N)]
    keys = [d["certificate"]["body"]["public_key"] for d in idents]
    return entries, values, keys


def test_a_setup_message_with_another_roster_is_refused_before_anything_is_sent(
    enrolled: tuple[str, list[dict[str, Any]]],
) -> None:
    """The setup message travels without the roster (the device derives it from the run's committed
    one); a server that sends a roster changing a neighbour's key, leaving a member out, reordering the
    members or naming another session is refused before the device's client sees the message."""
    from fedstats.client.secure import committed_roster, with_committed_roster
    from fedstats.secagg.graph import public_neighbors

    pub, idents = enrolled
    session = seeding.session_id(bytes(range(32)), 0, 0)
    members = [f"d{j}" for j in range(N)]
    keys = {
        f"d{j}": bytes.fromhex(d["certificate"]["body"]["public_key"]) for j, d in enumerate(idents)
    }
    roster = committed_roster(keys, members, session, TASK)
    assert roster == _roster(idents, session)  # what the (honest) server's protocol object holds
    params = find_parameters(N)
    server = SecAggServer(params, length=LENGTH, bits=BITS, roster=roster)
    setups = {i: dataclasses.replace(m, roster=b"") for i, m in server.setup().items()}  # as sent
    i = 0
    neighbour = min(public_neighbors(N, params.k, session, [i])[i])
    ids = list(roster.identities)
    changed = list(ids)
    changed[neighbour] = _fresh_key()
    deviations = {
        "a neighbour's key changed": dataclasses.replace(roster, identities=tuple(changed)),
        "a member left out": dataclasses.replace(
            roster, identities=tuple(ids[:neighbour] + ids[neighbour + 1 :])
        ),
        "two members swapped": dataclasses.replace(
            roster, identities=tuple([ids[1], ids[0], *ids[2:]])
        ),
        "another session": dataclasses.replace(roster, session=bytes(32)),
    }
    for other in deviations.values():
        # the device checks this before it builds its client or reads its data (_join_session)
        served = dataclasses.replace(setups[i], roster=other.to_bytes())
        with pytest.raises(SecurityError, match="not the one committed"):
            with_committed_roster(served, roster)
    # the roster-less setup (and one with exactly the committed roster) is completed and accepted
    for served in (setups[i], dataclasses.replace(setups[i], roster=roster.to_bytes())):
        client, _ = _device(i, pub, idents, [d["certificate"] for d in idents], session, 0)
        reply = client.handle_bytes(with_committed_roster(served, roster).to_bytes())
        assert decode(reply, expect=AdvertiseKeys).client == i
    with pytest.raises(SecurityError, match="not in the run's roster"):
        committed_roster({k: v for k, v in keys.items() if k != "d3"}, members, session, TASK)


def test_two_devices_shown_different_run_rosters_are_caught_before_sharing(
    enrolled: tuple[str, list[dict[str, Any]]],
) -> None:
    """A server that shows the victim a commitment list whose roster replaces a neighbour's key (with a
    key it made) and everyone else the real one: the lists' digests differ, so the seeds (which hash the
    digest) and the session ids differ, and every advertisement signed under one session fails at a
    device of the other. The victim and each of its neighbours refuse at the share stage: none of them
    sends a share, so nothing of theirs is ever masked or revealed."""
    from fedstats.client.secure import committed_roster
    from fedstats.secagg.graph import public_neighbors

    pub, idents = enrolled
    run = "run-roster"
    entries, values, keys = _run_list(idents, run)
    params = find_parameters(N)
    honest_session = seeding.session_id(seeding.run_seed(run, entries, values, keys), 0, 0)
    nbrs = public_neighbors(N, params.k, honest_session, [0])[0]
    # the victim's view: a neighbour's key replaced by one the server made, for a member the victim
    # does not check in the graph its own (forged) seed gives (else it refuses at once, see above)
    for j in sorted(nbrs) * 8:
        forged = list(keys)
        forged[j] = _fresh_key().hex()
        victim_session = seeding.session_id(seeding.run_seed(run, entries, values, forged), 0, 0)
        if j not in public_neighbors(N, params.k, victim_session, [0])[0]:
            break
    else:
        pytest.fail("no forgery outside the victim's checks")
    # each side reveals with the digest of the list it saw; the victim's differs
    seen_h = seeding.commitments_digest(run, entries, keys)
    seen_v = seeding.commitments_digest(run, entries, forged)
    assert seen_h != seen_v
    # the server publishes to each side a transcript that verifies against what that side saw
    for view, seen in ((keys, seen_h), (forged, seen_v)):
        tr = {
            "members": [
                [c, m, v.hex(), a, n, k]
                for (c, m, a, n), v, k in zip(entries, values, view, strict=True)
            ],
            "seed": seeding.run_seed(run, entries, values, view).hex(),
        }
        seeding.verify_transcript(
            run, "d0", tr, seen_digest=seen, own_value=values[0], max_members=N, roster=True
        )
        with pytest.raises(SecurityError, match="changed after"):  # and not against the other's
            other = seen_v if seen == seen_h else seen_h
            seeding.verify_transcript(
                run, "d0", tr, seen_digest=other, own_value=values[0], max_members=N, roster=True
            )
    assert victim_session != honest_session
    members = [c for c, _, _, _ in entries]
    certs = [d["certificate"] for d in idents]
    rosters = {
        s: committed_roster(
            {c: bytes.fromhex(k) for c, k in zip(members, view, strict=True)}, members, s, TASK
        )
        for s, view in ((honest_session, keys), (victim_session, forged))
    }
    server = SecAggServer(params, length=LENGTH, bits=BITS, roster=rosters[honest_session])
    setups = dict(server.setup())
    clients, ads = {}, {}
    for i in range(N):
        s = victim_session if i == 0 else honest_session
        client, _ = _device(i, pub, idents, certs, s, 0)
        setup = dataclasses.replace(setups[i], session=s, roster=rosters[s].to_bytes())
        ads[i] = client.handle(setup)  # every member each device checks is genuine
        clients[i] = client
        if i:
            server.receive_bytes(ads[i].to_bytes())
    keys_out: dict[int, Any] = dict(server.advance())
    # the deviating server forwards the victim's advertisement to the victim's (honest-graph)
    # neighbours, and the neighbours' advertisements to the victim
    victim_nbrs = public_neighbors(N, params.k, victim_session, [0])[0]
    for j in nbrs:
        m = keys_out[j]
        keys_out[j] = dataclasses.replace(
            m, keys={**m.keys, 0: (ads[0].mask_public, ads[0].encryption_public, ads[0].signature)}
        )
    keys_out[0] = KeyBroadcast(
        victim_session,
        0,
        roster_transcript(rosters[victim_session]),
        {j: (ads[j].mask_public, ads[j].encryption_public, ads[j].signature) for j in victim_nbrs},
    )
    refused, shared = set(), set()
    for i, c in clients.items():
        try:
            reply = c.handle(keys_out[i])
        except SecurityError as exc:
            assert "not signed by its certified identity" in str(exc), exc
            refused.add(i)
            assert not c.holds_secrets()
        else:
            assert isinstance(reply, EncryptedShares)
            shared.add(i)
    assert refused == {0} | set(nbrs)  # the victim and every neighbour shown its advertisement
    assert shared == set(range(N)) - refused
