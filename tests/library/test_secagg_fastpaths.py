"""The fast paths of the simulated protocol give the answers of the slow ones.

The verification cache shared by the parties of one simulated malicious-model session must give every
party exactly the answer its own Ed25519 verification would give (valid or not, for any key, signature
and message, however often asked), verify each distinct signature of an honest run once, refuse
tampered signatures as before, and keep roster checks apart per pinned verifier. The HMAC-based key
derivation is RFC 5869 HKDF, the bulk table codecs write and read the generic wire format, and
adding masks block by block gives the sum of the masks added one by one. The driver fetches each
client's input only when its masked input is due (one vector in memory at a time).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.errors import DataError, ParameterError, SecurityError
from fedstats.secagg import (
    ClientIdentity,
    EnrollmentAuthority,
    SecAggClient,
    run_secure_aggregation,
    validate_parameters,
)
from fedstats.secagg._wire import SIG, Codec, fixed, row, table
from fedstats.secagg.crypto import (
    VerificationCache,
    add_mask,
    add_masks,
    derive_key,
    expand_mask,
    roster_transcript,
)
from fedstats.secagg.graph import public_harary_graph, public_neighbors
from fedstats.secagg.identity import verify_signature
from fedstats.secagg.messages import (
    CIPHERTEXT_BYTES,
    KeyBroadcast,
    ShareBroadcast,
    UnmaskRequest,
    UnmaskResponse,
    decode,
    decode_signed,
)
from fedstats.secagg.shamir import SHARE_BYTES
from secagg_harness import Deployment, call_together

_IDENTITY = ClientIdentity()


def _flip(data: bytes, at: int) -> bytes:
    if not data:
        return b"\x01"
    raw = bytearray(data)
    raw[at % len(raw)] ^= 1 << (at % 8)
    return bytes(raw)


@settings(max_examples=60, deadline=None)
@given(
    message=st.binary(max_size=200),
    part=st.sampled_from(["none", "public", "signature", "data", "short_key", "short_sig"]),
    at=st.integers(0, 10_000),
    repeats=st.integers(1, 3),
)
def test_cache_answers_as_direct_verification(
    message: bytes, part: str, at: int, repeats: int
) -> None:
    public, signature = _IDENTITY.public, _IDENTITY.sign(message)
    data = message
    if part == "public":
        public = _flip(public, at)
    elif part == "signature":
        signature = _flip(signature, at)
    elif part == "data":
        data = _flip(data, at)
    elif part == "short_key":
        public = public[: at % 32]
    elif part == "short_sig":
        signature = signature[: at % 64]
    want = verify_signature(public, signature, data)
    assert want == (part == "none")
    cache = VerificationCache()
    # the genuine triple first, so a tampered one can only be answered right by verifying it afresh
    assert cache.verify(_IDENTITY.public, _IDENTITY.sign(message), message)
    for _ in range(repeats):
        assert cache.verify(public, signature, data) == want
    well_formed = len(public) == 32 and len(signature) == 64
    fresh = part != "none" and well_formed and cache.public_key(public) is not None
    assert cache.verified == 1 + int(fresh)
    assert cache.hits == repeats - 1 + int(part == "none")


def test_honest_run_verifies_each_signature_once() -> None:
    n = 30
    params = validate_parameters(n, 12, 9, dropout_rate=0.1)
    x = np.random.default_rng(3).integers(-1000, 1000, size=(n, 5))
    res = run_secure_aggregation(x, bits=32, params=params)
    assert np.array_equal(res.signed_total(), x.sum(axis=0))
    # the server verifies each client's message at each of the five signed stages; everything the
    # clients check (key advertisements, consistency signatures, the roster) is one of those or a hit
    assert res.signatures_verified == 5 * n
    assert res.signature_cache_hits >= n * params.k + (n - 1)
    alone = run_secure_aggregation(x, bits=32, params=params, share_verifications=False)
    assert np.array_equal(alone.signed_total(), x.sum(axis=0))
    assert alone.signatures_verified == alone.signature_cache_hits == 0


def _tamper(kind: str, victim: int):  # type: ignore[no-untyped-def]
    def channel(direction: str, client: int, data: bytes) -> bytes:
        if direction != "to_client" or client != victim:
            return data
        m = decode(data)
        if kind == "advertisement" and isinstance(m, KeyBroadcast):
            j = min(m.keys)
            c_pk, s_pk, sig = m.keys[j]
            keys = {**m.keys, j: (c_pk, s_pk, _flip(sig, 7))}
            return KeyBroadcast(m.session, m.receiver, m.transcript, keys).to_bytes()
        if kind == "consistency" and isinstance(m, UnmaskRequest):
            sigs = {s: _flip(v, s) for s, v in m.signatures.items()}
            return UnmaskRequest(m.session, m.receiver, signatures=sigs).to_bytes()
        return data

    return channel


def test_tampered_advertisement_refused_through_the_cache() -> None:
    # the server verified (and cached) the genuine advertisement; the altered copy is new bytes
    params = validate_parameters(20, 8, 6, dropout_rate=0.1)
    x = np.arange(40).reshape(20, 2)
    with pytest.raises(SecurityError, match="not signed by its certified identity"):
        run_secure_aggregation(x, bits=32, params=params, channel=_tamper("advertisement", 4))


def test_tampered_consistency_signatures_do_not_count() -> None:
    params = validate_parameters(20, 8, 6, dropout_rate=0.2)
    x = np.arange(40).reshape(20, 2)
    res = run_secure_aggregation(x, bits=32, params=params, channel=_tamper("consistency", 4))
    assert 4 in res.client_aborts  # no valid signature reached it: it reveals nothing
    assert np.array_equal(res.signed_total(), x[list(res.included)].sum(axis=0))


def test_roster_checked_once_per_verifier() -> None:
    authority, other = EnrollmentAuthority(), EnrollmentAuthority()
    roster = authority.roster([ClientIdentity().public for _ in range(5)])
    data = roster.to_bytes()
    cache = VerificationCache()
    got, transcript = cache.roster(data, authority.verifier(), max_clients=5)
    assert got == roster and transcript == roster_transcript(roster)
    same = authority.verifier()
    again = cache.roster(data, same, max_clients=5)
    assert again == (roster, transcript)
    hits = cache.hits
    assert cache.roster(data, same, max_clients=5) == (roster, transcript)
    assert cache.hits == hits + 1
    # a client pinning another authority checks for itself, and refuses, however often asked
    for _ in range(2):
        with pytest.raises(SecurityError, match="not signed by the enrollment authority"):
            cache.roster(data, other.verifier(), max_clients=5)
    with pytest.raises(DataError):
        cache.roster(data, same, max_clients=4)
    raw = bytearray(data)
    raw[-70] ^= 1  # a bit of the last identity key
    with pytest.raises(SecurityError):
        cache.roster(bytes(raw), same, max_clients=5)


def test_a_cache_without_rosters_checks_every_roster_and_stays_bounded() -> None:
    """``VerificationCache(rosters=False)`` (the device SDK's process-wide cache) lets each verifier
    check every roster itself, and forgets its results past ``max_entries``, answering alike after."""
    authority = EnrollmentAuthority()
    roster = authority.roster([ClientIdentity().public for _ in range(5)])
    data = roster.to_bytes()
    calls = []

    class Counting:
        def verify(self, r: Any) -> None:
            calls.append(r)
            authority.verifier().verify(r)

    cache = VerificationCache(rosters=False, max_entries=3)
    verifier = Counting()
    for _ in range(3):
        assert cache.roster(data, verifier, max_clients=5) == (roster, roster_transcript(roster))
    assert len(calls) == 3
    ident = ClientIdentity()
    messages = [bytes([i]) * 10 for i in range(5)]
    sigs = [ident.sign(m) for m in messages]
    for _ in range(2):
        for m, sig in zip(messages, sigs, strict=True):
            assert cache.verify(ident.public, sig, m)
            assert not cache.verify(ident.public, sig, m + b"!")
    assert len(cache._results) <= 3
    with pytest.raises(ParameterError, match="max_entries"):
        VerificationCache(max_entries=0)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=3000))
def test_hmac_sha256_is_hmac(key: bytes, msg: bytes) -> None:
    import hmac

    from fedstats.secagg.crypto import hmac_sha256

    assert hmac_sha256(key, msg) == hmac.digest(key, msg, "sha256")


def test_shamir_coefficients_from_one_entropy_read_are_field_elements(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One ``os.urandom`` read for all coefficients; a value outside the field is drawn again."""
    import os

    from fedstats.secagg import shamir

    real = os.urandom
    calls: list[int] = []

    def fake(n: int) -> bytes:
        calls.append(n)
        return b"\xff" * n if len(calls) == 1 else real(n)  # the first read: 2^521 - 1 = p each

    monkeypatch.setattr(shamir.os, "urandom", fake)
    got = shamir._random_field_elements(5)
    assert calls[0] == 5 * shamir.SHARE_BYTES and len(calls) == 6  # each rejected: drawn again
    assert len(got) == 5 and all(0 <= v < shamir.FIELD_PRIME for v in got)
    monkeypatch.setattr(shamir.os, "urandom", real)
    secret = bytes(range(32))
    xs = list(range(1, 11))
    shares = shamir.split_secret(secret, threshold=4, xs=xs)
    got_back = shamir.reconstruct_secret(list(zip(xs[3:7], shares[3:7], strict=True)), threshold=4)
    assert got_back == secret


@given(
    st.sets(st.integers(1, 2**40), min_size=1, max_size=70)
    | st.sets(st.integers(1, 1000), min_size=50, max_size=91)
    | st.sets(st.integers(2**61, 2**64), min_size=1, max_size=5)
)
@settings(max_examples=60, deadline=None)
def test_lagrange_coefficients_at_zero_match_the_field_fractions(xs: set[int]) -> None:
    """The grouped int64 products and Mersenne folds give ``prod_{m != j} x_m / (x_m - x_j)`` mod p."""
    from fractions import Fraction

    from fedstats.secagg import shamir

    p = shamir.FIELD_PRIME
    ordered = tuple(sorted(xs))
    got = shamir._lagrange_at_zero(ordered)
    for j, xj in enumerate(ordered):
        exact = Fraction(1)
        for m, xm in enumerate(ordered):
            if m != j:
                exact *= Fraction(xm, xm - xj)
        want = exact.numerator % p * pow(exact.denominator % p, -1, p) % p
        assert got[j] == want
    assert shamir._fold((p - 1) * (p - 1)) == (p - 1) * (p - 1) % p


@given(
    st.lists(
        st.lists(st.integers(-3, 1200), min_size=0, max_size=60).map(tuple), min_size=0, max_size=8
    )
)
@settings(max_examples=60, deadline=None)
def test_lagrange_bases_of_many_secrets_are_each_ones(xss: list[tuple[int, ...]]) -> None:
    # one inversion for all the tuples gives each tuple's own basis; tuples that are not distinct
    # positive abscissae are left out (their reconstruction raises or computes on its own)
    from fedstats.secagg import shamir

    got = shamir.lagrange_bases(xss)
    valid = {xs for xs in xss if xs and len(set(xs)) == len(xs) and min(xs) > 0}
    assert set(got) == valid
    for xs in valid:
        assert got[xs] == shamir._lagrange_at_zero(xs)


def test_threads_asking_for_the_same_parameters_together_search_once() -> None:
    """``find_parameters`` is remembered, and threads that ask at once wait for the one search (a wave of
    simulated devices joining a session used to run it each)."""

    from fedstats.secagg import find_parameters
    from fedstats.secagg.params import _find_parameters

    n = 997  # not asked for elsewhere in the tests
    _find_parameters.cache_clear()
    got = call_together(find_parameters, n)
    assert len(got) == 8 and len(set(got)) == 1
    assert _find_parameters.cache_info().misses == 1


def test_cached_permutation_is_read_only_and_consistent() -> None:
    session = bytes(range(32))
    graph = public_harary_graph(50, 10, session)
    rows = public_neighbors(50, 10, session, range(50))
    assert all(rows[i] == frozenset(graph[i].tolist()) for i in range(50))
    from fedstats.secagg.graph import _public_permutation

    perm = _public_permutation(50, session)
    with pytest.raises(ValueError):
        perm[0] = perm[1]
    assert sorted(perm.tolist()) == list(range(50))


@settings(max_examples=50, deadline=None)
@given(
    shared=st.binary(min_size=32, max_size=32),
    session=st.binary(max_size=100),
    label=st.binary(max_size=40),
    low=st.integers(0, 2**32 - 1),
    high=st.integers(0, 2**32 - 1),
)
def test_derive_key_is_rfc5869_hkdf(
    shared: bytes, session: bytes, label: bytes, low: int, high: int
) -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    info = label + low.to_bytes(4, "little") + high.to_bytes(4, "little")
    want = HKDF(algorithm=hashes.SHA256(), length=32, salt=session, info=info).derive(shared)
    assert derive_key(shared, session=session, label=label, low=low, high=high) == want


_ENTRY = st.binary(min_size=32, max_size=32)


@settings(max_examples=40, deadline=None)
@given(
    keys=st.dictionaries(
        st.integers(0, 2**32 - 1), st.tuples(_ENTRY, _ENTRY, st.sampled_from([b"", bytes(64)]))
    ),
    cts=st.dictionaries(
        st.integers(0, 2**32 - 1), st.binary(min_size=CIPHERTEXT_BYTES, max_size=CIPHERTEXT_BYTES)
    ),
    shares=st.dictionaries(st.integers(0, 2**32 - 1), st.integers(0, 2 ** (8 * SHARE_BYTES) - 1)),
)
def test_bulk_tables_are_the_generic_wire_format(
    keys: dict[int, tuple[bytes, bytes, bytes]], cts: dict[int, bytes], shares: dict[int, int]
) -> None:
    # the bulk codecs write the bytes of the generic table codec and read them back, mixed signature
    # lengths included; a repeated index is refused
    session = bytes(32)
    generic = {
        "keys": table(row(fixed(32), fixed(32), SIG), "x {}"),
        "cts": table(fixed(CIPHERTEXT_BYTES), "x {}"),
        "shares": table(
            Codec(
                SHARE_BYTES,
                lambda p, v, _: p.append(v.to_bytes(SHARE_BYTES, "little")),
                lambda r, _: int.from_bytes(r.fixed(SHARE_BYTES), "little"),
            ),
            "x {}",
        ),
    }
    for msg, name, value in [
        (KeyBroadcast(session, 1, bytes(32), keys), "keys", keys),
        (ShareBroadcast(session, 1, cts), "cts", cts),
        (UnmaskResponse(session, 1, shares, {}), "shares", shares),
    ]:
        data = msg.to_bytes()
        parts: list[bytes] = []
        generic[name].write(parts, value, msg)
        assert b"".join(parts) in data
        assert decode(data) == msg
    if len(cts) >= 1:
        i, v = next(iter(cts.items()))
        raw = bytearray(ShareBroadcast(session, 1, {i: v}).to_bytes())
        raw[-CIPHERTEXT_BYTES - 8 : -CIPHERTEXT_BYTES - 4] = (2).to_bytes(4, "little")
        dup = bytes(raw) + i.to_bytes(4, "little") + v
        with pytest.raises(DataError, match=f"two ciphertexts for client {i}"):
            decode(dup)


@settings(max_examples=25, deadline=None)
@given(
    bits=st.sampled_from([16, 32, 64]),
    length=st.sampled_from([0, 1, 7, 65_536, 131_072 + 3, 300_001]),
    signs=st.lists(st.sampled_from([1, -1]), max_size=9),
    seed=st.integers(0, 2**32 - 1),
)
def test_add_masks_equals_one_add_mask_per_mask(
    bits: int, length: int, signs: list[int], seed: int
) -> None:
    # block by block over all masks gives the sum of the masks added one by one (chunk edges included)
    rng = np.random.default_rng(seed)
    dtype = np.dtype(f"uint{bits}")
    acc = rng.integers(0, 2**bits, size=length, dtype=dtype)
    masks = [(rng.bytes(32), s) for s in signs]
    want = acc.copy()
    for key, s in masks:
        add_mask(want, key, sign=s)
        mask = expand_mask(key, length, bits)
        acc_one = acc.copy()
        add_masks(acc_one, [(key, s)])
        assert np.array_equal(acc_one, acc + mask if s > 0 else acc - mask)
    direct = acc.copy()  # and the masks' expansions added and subtracted one by one
    for key, s in masks:
        direct = (
            direct + expand_mask(key, length, bits)
            if s > 0
            else direct - expand_mask(key, length, bits)
        )
    add_masks(acc, masks)
    assert np.array_equal(acc, want)
    assert np.array_equal(acc, direct)


@pytest.mark.parametrize(
    ("bits", "length", "count"), [(64, 1000, 181), (16, 70_000, 40), (32, 1, 3)]
)
def test_many_masks_summed_in_groups_equal_their_expansions(
    bits: int, length: int, count: int
) -> None:
    # a device's masks of a short vector are summed a group at a time (more masks than one group, too)
    rng = np.random.default_rng(length)
    acc = rng.integers(0, 2**bits, size=length, dtype=np.dtype(f"uint{bits}"))
    masks = [(rng.bytes(32), 1 if rng.random() < 0.5 else -1) for _ in range(count)]
    want = acc.copy()
    for key, s in masks:
        want = (
            want + expand_mask(key, length, bits)
            if s > 0
            else want - expand_mask(key, length, bits)
        )
    add_masks(acc, masks, scratch=bytearray(100))  # too small: replaced
    assert np.array_equal(acc, want)


def test_driver_fetches_each_input_when_its_masked_input_is_due() -> None:
    # one vector at a time: a client's input is fetched once, only if it reaches the masked input
    n = 20
    x = np.random.default_rng(4).integers(-100, 100, size=(n, 3))
    calls: list[int] = []

    def inputs(i: int) -> np.ndarray:
        calls.append(i)
        return x[i]

    params = validate_parameters(n, 8, 6, dropout_rate=0.2)
    gone = {"advertise": [1], "share": [2], "masked_input": [3]}
    # a fixed session id: the neighbour graph follows from it, and with three dropouts some random
    # graphs (3 of 8 tried) leave a dropped client's secret with fewer surviving holders than t
    res = run_secure_aggregation(
        inputs, n=n, bits=32, params=params, dropouts=gone, session=bytes([2]) * 32
    )
    assert calls[0] == 0  # the length probe
    fetched = calls[1:]
    assert len(fetched) == len(set(fetched))
    assert set(fetched) == set(range(n)) - {1, 2, 3} - set(res.client_aborts)
    assert np.array_equal(res.signed_total(), x[list(res.included)].sum(axis=0))


def test_client_input_given_late_once_and_in_time() -> None:
    dep = Deployment(8, 4, 3)
    fresh = {i: SecAggClient(i, None, dep.configs[i]) for i in range(8)}
    with pytest.raises(DataError, match="holds 5 values"):
        fresh[0].provide_input(np.zeros(5, dtype=np.int64))
    fresh[0].provide_input(dep.x[0])
    with pytest.raises(SecurityError, match="already has its input"):
        fresh[0].provide_input(dep.x[0])
    # client 1 never gets its input: it cannot send a masked input and stops, holding nothing
    dep.clients = fresh
    for i in range(2, 8):
        dep.clients[i].provide_input(dep.x[i])
    out = dep.honest_until("masked_input")
    assert dep.send(1, out[1]) is None
    assert isinstance(dep.errors[1], ParameterError)
    assert not dep.clients[1].holds_secrets()
    with pytest.raises(SecurityError, match="takes no input"):
        dep.clients[1].provide_input(dep.x[1])
    reply = dep.send(0, out[0])
    assert reply is not None and reply.__class__.__name__ == "MaskedInput"


def _signed_wire(tag: int, head: bytes, tables: list[list[tuple[int, bytes]]], sig: bytes) -> bytes:
    """A client message's bytes written by hand: header, fields, tables in the order given, signature."""
    out = [b"FSA2", bytes([2, tag]), bytes(32), head]
    for entries in tables:
        out.append(len(entries).to_bytes(4, "little"))
        out += [i.to_bytes(4, "little") + v for i, v in entries]
    return b"".join([*out, bytes([len(sig)]), sig])


@settings(max_examples=60, deadline=None)
@given(
    cts=st.dictionaries(
        st.integers(0, 2**32 - 1),
        st.binary(min_size=CIPHERTEXT_BYTES, max_size=CIPHERTEXT_BYTES),
        max_size=6,
    ),
    shares=st.lists(
        st.dictionaries(
            st.integers(0, 2**32 - 1),
            st.binary(min_size=SHARE_BYTES, max_size=SHARE_BYTES),
            max_size=6,
        ),
        min_size=2,
        max_size=2,
    ),
    sig=st.sampled_from([b"", bytes(range(64))]),
    order=st.randoms(use_true_random=False),
)
def test_signed_bytes_cut_from_the_wire_are_the_serialized_ones(
    cts: dict[int, bytes], shares: list[dict[int, bytes]], sig: bytes, order: Any
) -> None:
    # decode_signed's second answer, when it gives one, is signed_bytes() of the parsed message: it
    # gives one exactly when every table is in index order (else a re-serialization would differ)
    def shuffled(entries: dict[int, bytes]) -> list[tuple[int, bytes]]:
        items = list(entries.items())
        order.shuffle(items)
        return items

    head = (7).to_bytes(4, "little")
    cases = [
        (4, head + bytes(range(32)), [shuffled(cts)]),
        (10, head, [shuffled(s) for s in shares]),
        (2, head + bytes(range(32)) + bytes(range(1, 33)), []),  # AdvertiseKeys: no table
    ]
    for tag, fields, tables in cases:
        data = _signed_wire(tag, fields, tables, sig)
        msg, signed = decode_signed(data)
        in_order = all([i for i, _ in t] == sorted(i for i, _ in t) for t in tables)
        assert (signed is not None) == in_order
        if signed is not None:
            assert signed == msg.signed_bytes()  # type: ignore[union-attr]
            assert msg.to_bytes() == data
        else:
            assert msg.to_bytes() != data
        assert decode(data) == msg


def test_unmask_requests_name_the_signers_two_hops_away() -> None:
    # the server's neighbour arrays give the sets of the public graph (computed apart here): each
    # request carries the consistency signatures of the signers within two hops of its receiver
    dep = Deployment(30, 16, 10, min_survivors=25)
    out = dep.honest_until("masked_input")
    gone, unsigned = {3, 11}, 5
    for stage_drop in (gone, {unsigned}):
        for i, m in out.items():
            reply = None if i in stage_drop else dep.send(i, m)
            if reply is not None:
                dep.server.receive_bytes(reply.to_bytes())  # type: ignore[attr-defined]
        out = dep.server.advance()
    signed = set(range(30)) - gone - {unsigned}
    assert set(out) == signed
    for j, req in out.items():
        assert isinstance(req, UnmaskRequest)
        two_hop = set().union(*(dep.nbrs[m] for m in dep.nbrs[j])) & signed - {j}
        assert set(req.signatures) == two_hop
    total = dep.finish_honestly(out)
    want = dep.x[sorted(set(range(30)) - gone)].sum(axis=0) % 2**32
    np.testing.assert_array_equal(total, want.astype(np.uint32))
