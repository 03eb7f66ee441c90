"""Bound session rosters: members fixed by a commitment, each client holding only the keys it checked.

The form O(k log n) seeding needs (``docs/deploy.md``, "Per-device cost at scale", "Next steps", item 1):
a device holds its neighbours' keys and those of the signers it counts, not the session's every key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.errors import DataError, ParameterError, ProtocolAbortError, SecurityError
from fedstats.secagg import (
    ClientConfig,
    ClientIdentity,
    EnrollmentAuthority,
    SecAggClient,
    SecAggServer,
    find_parameters,
)
from fedstats.secagg.crypto import roster_transcript
from fedstats.secagg.graph import public_neighbors
from fedstats.secagg.identity import SessionRoster
from fedstats.secagg.messages import SetupMessage, UnmaskRequest, decode

KEYS = [hashlib.sha256(b"key %d" % i).digest() for i in range(64)]


def _bound(n: int, held: set[int], binding: bytes = b"B" * 32) -> SessionRoster:
    ids = tuple(KEYS[j] if j in held else b"" for j in range(n))
    return SessionRoster(b"task", b"S" * 32, ids, bytes(64), binding)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 64).flatmap(lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1)))))
def test_a_bound_roster_round_trips_and_its_digest_ignores_the_held_keys(case) -> None:
    n, held = case
    roster = _bound(n, held)
    back = SessionRoster.from_bytes(roster.to_bytes(), max_clients=n)
    assert back == roster and back.bound and back.n == n
    assert roster.digest() == _bound(n, set(range(n))).digest() == _bound(n, set()).digest()
    assert roster.digest() != _bound(n, held, b"C" * 32).digest()  # the binding is what it covers
    assert roster_transcript(roster) == roster_transcript(_bound(n, set(range(n))))
    with pytest.raises(DataError):
        SessionRoster.from_bytes(roster.to_bytes(), max_clients=n - 1)


def test_a_listed_roster_keeps_its_format_and_digest() -> None:
    listed = SessionRoster(b"task", b"S" * 32, tuple(KEYS[:5]), bytes(64))
    assert listed.to_bytes()[:4] == b"FSR1" and not listed.bound
    assert listed.digest() == hashlib.sha256(listed.to_bytes()).digest()
    with pytest.raises(SecurityError, match="fixed"):
        listed.holding({0: KEYS[0]})


@pytest.mark.parametrize(
    "cut",
    [
        lambda b: b[:-1],  # truncated
        lambda b: b + b"\x00",  # one byte too many
        lambda b: b[:77] + (100).to_bytes(4, "little") + b[81:],  # held count above n
    ],
)
def test_malformed_bound_rosters_are_refused(cut) -> None:
    data = _bound(6, {1, 4}).to_bytes()
    with pytest.raises(DataError):
        SessionRoster.from_bytes(cut(data))


def test_key_positions_must_increase_within_the_roster() -> None:
    data = bytearray(_bound(6, {1, 4}).to_bytes())
    start = 4 + 1 + 4 + 32 + 4 + 32 + 4  # magic, task length, task, session, n, binding, held
    for first, second in ((4, 1), (1, 1), (1, 6)):
        data[start : start + 4] = first.to_bytes(4, "little")
        data[start + 36 : start + 40] = second.to_bytes(4, "little")
        with pytest.raises(DataError, match="increase"):
            SessionRoster.from_bytes(bytes(data))


def test_holding_adds_keys_and_refuses_a_conflicting_one() -> None:
    roster = _bound(8, {0})
    more = roster.holding({3: KEYS[3], 0: KEYS[0]})
    assert more.identities[3] == KEYS[3] and more.digest() == roster.digest()
    with pytest.raises(SecurityError, match="another key"):
        more.holding({3: KEYS[4]})
    with pytest.raises(SecurityError, match="32 bytes"):
        roster.holding({8: KEYS[8]})


class _Session:
    """An honest server and ``n`` clients, each given a bound roster holding the keys chosen per client."""

    def __init__(self, n: int, held_of) -> None:
        self.params = find_parameters(n)
        self.length = 3
        authority = EnrollmentAuthority()
        ids = [ClientIdentity() for _ in range(n)]
        self.keys = [c.public for c in ids]
        full = authority.roster(self.keys, session=os.urandom(32), binding=os.urandom(32))
        self.server = SecAggServer(self.params, length=self.length, bits=32, roster=full)
        self.nbrs = public_neighbors(n, self.params.k, full.session, range(n))
        self.x = np.arange(n * self.length, dtype=np.int64).reshape(n, self.length)
        self.clients = {
            i: SecAggClient(
                i,
                self.x[i],
                ClientConfig.from_parameters(
                    self.params,
                    bits=32,
                    length=self.length,
                    identity=ids[i],
                    verifier=authority.verifier(),
                ),
            )
            for i in range(n)
        }
        self.full = full
        self.held_of = held_of
        self.errors: dict[int, Exception] = {}

    def setup_for(self, i: int, msg: SetupMessage) -> bytes:
        sparse = dataclasses.replace(
            self.full,
            identities=tuple(
                key if j in self.held_of(i) else b"" for j, key in enumerate(self.full.identities)
            ),
        )
        return dataclasses.replace(msg, roster=sparse.to_bytes()).to_bytes()

    def run(self, before_unmask=None) -> np.ndarray:
        out = {i: m.to_bytes() for i, m in self.server.setup().items()}
        out = {i: self.setup_for(i, decode(m)) for i, m in out.items()}  # type: ignore[arg-type]
        while out:
            for i, data in out.items():
                if before_unmask is not None and isinstance(decode(data), UnmaskRequest):
                    before_unmask(i, self.clients[i])
                try:
                    reply = self.clients[i].handle_bytes(data)
                except (SecurityError, ProtocolAbortError) as exc:
                    self.errors[i] = exc
                    continue
                self.server.receive_bytes(reply)
            out = {i: m.to_bytes() for i, m in self.server.advance().items()}
        return self.server.result()


def _two_hop(s: _Session, i: int) -> set[int]:
    return {i, *s.nbrs[i], *(m for j in s.nbrs[i] for m in s.nbrs[j])}


def test_clients_holding_their_two_hop_keys_give_the_exact_sum() -> None:
    s = _Session(80, lambda i: _two_hop(s, i))
    assert s.params.k < 79  # a sparse graph: the keys held are not the whole roster
    total = s.run()
    assert not s.errors
    assert np.array_equal(total, s.x.sum(axis=0) % (1 << 32))


def test_a_neighbour_key_not_held_refuses_its_advertisement() -> None:
    # client 0 lacks one neighbour's key: it refuses the key broadcast, a dropout for the server
    s = _Session(80, lambda i: _two_hop(s, i) - ({min(s.nbrs[0])} if i == 0 else set()))
    total = s.run()
    assert set(s.errors) == {0} and isinstance(s.errors[0], SecurityError)
    assert "holds no checked identity key" in str(s.errors[0])
    assert np.array_equal(total, s.x[1:].sum(axis=0) % (1 << 32))


def test_signers_whose_keys_are_not_held_do_not_count_until_held() -> None:
    # every client holds its neighbours' keys only: too few of N(j)'s signers are known to reach t
    s = _Session(80, lambda i: {i, *s.nbrs[i]})
    with pytest.raises(ProtocolAbortError):
        s.run()
    assert s.errors and all("signed the survivor set" in str(e) for e in s.errors.values())
    # the same, with the signers' keys given before the unmask request: the exact sum
    s = _Session(80, lambda i: {i, *s.nbrs[i]})
    total = s.run(lambda i, c: c.hold_keys({m: s.keys[m] for m in _two_hop(s, i)}))
    assert not s.errors
    assert np.array_equal(total, s.x.sum(axis=0) % (1 << 32))


def test_hold_keys_checks_what_it_is_given() -> None:
    s = _Session(20, lambda i: set(range(20)) - {3})
    with pytest.raises(SecurityError, match="no roster"):
        s.clients[0].hold_keys({1: s.keys[1]})
    s.clients[0].handle_bytes(s.setup_for(0, s.server.setup()[0]))
    with pytest.raises(SecurityError, match="another key"):
        s.clients[0].hold_keys({1: s.keys[2]})
    with pytest.raises(SecurityError, match="outside"):
        s.clients[0].hold_keys({20: s.keys[2]})
    with pytest.raises(SecurityError, match="two positions"):  # the key held at 2, named for 3
        s.clients[0].hold_keys({3: s.keys[2]})


def test_the_server_needs_every_key_and_the_authority_a_32_byte_binding() -> None:
    authority = EnrollmentAuthority()
    keys = [ClientIdentity().public for _ in range(12)]
    full = authority.roster(keys, binding=b"B" * 32)
    sparse = dataclasses.replace(full, identities=(b"", *full.identities[1:]))
    with pytest.raises(ParameterError, match="every key"):
        SecAggServer(find_parameters(12), length=2, bits=32, roster=sparse)
    with pytest.raises(ParameterError, match="binding"):
        authority.roster(keys, binding=b"B" * 31)
    authority.verifier().verify(sparse)  # the signature covers the binding, not the keys
    with pytest.raises(SecurityError, match="not signed"):
        authority.verifier().verify(dataclasses.replace(full, binding=b"C" * 32))
