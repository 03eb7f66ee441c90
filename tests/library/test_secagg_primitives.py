"""Building blocks of secure aggregation: Shamir, graph, parameters, PRG masks, messages, fixed point."""

from __future__ import annotations

import hashlib
import itertools
import math
import os

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedstats.errors import (
    DataError,
    OverflowRiskError,
    ParameterError,
    ProtocolAbortError,
    SecurityError,
)
from fedstats.secagg import (
    ATTACKS,
    ClientIdentity,
    EnrollmentAuthority,
    FixedPoint,
    SessionRoster,
    check_overflow,
    find_parameters,
    validate_parameters,
)
from fedstats.secagg.crypto import (
    add_mask,
    agree,
    check_public_key,
    decrypt_share,
    derive_key,
    encrypt_share,
    expand_mask,
    generate_key_pair,
    public_from_private,
)
from fedstats.secagg.graph import (
    harary_neighbors,
    public_harary_graph,
    public_neighbors,
    random_harary_graph,
)
from fedstats.secagg.messages import (
    CIPHERTEXT_BYTES,
    VERSION,
    AdvertiseKeys,
    ConsistencySignature,
    EncryptedShares,
    KeyBroadcast,
    MaskedInput,
    Message,
    SetupMessage,
    ShareBroadcast,
    SurvivorSet,
    UnmaskRequest,
    UnmaskResponse,
    decode,
    max_message_bytes,
)
from fedstats.secagg.params import _log2_disconnect
from fedstats.secagg.shamir import (
    FIELD_PRIME,
    reconstruct_secret,
    robust_reconstruct,
    split_secret,
)

# -- Shamir ----------------------------------------------------------------------------------------


def test_shamir_any_t_shares_reconstruct_and_t_minus_1_do_not_determine() -> None:
    secret = os.urandom(32)
    xs = [3, 7, 8, 11, 20]
    shares = split_secret(secret, threshold=3, xs=xs)
    for subset in itertools.combinations(range(5), 3):
        got = reconstruct_secret([(xs[i], shares[i]) for i in subset], threshold=3)
        assert got == secret
    # With t-1 = 2 shares, every candidate secret is consistent with exactly one polynomial:
    # interpolating through (0, s') and the two shares must give a valid sharing for any s'.
    other = os.urandom(32)
    pts = [(0, int.from_bytes(other, "little")), (xs[0], shares[0]), (xs[1], shares[1])]
    # Lagrange through the 3 points evaluated at x=xs[2] gives a consistent third share for `other`.
    p = FIELD_PRIME
    x = xs[2]
    y = 0
    for j, (xj, yj) in enumerate(pts):
        num, den = 1, 1
        for m, (xm, _) in enumerate(pts):
            if m != j:
                num = num * (x - xm) % p
                den = den * (xj - xm) % p
        y = (y + yj * num * pow(den, -1, p)) % p
    fake = reconstruct_secret([(xs[0], shares[0]), (xs[1], shares[1]), (x, y)], threshold=3)
    assert fake == other


def test_shamir_needs_t_shares_and_detects_garbage() -> None:
    secret = os.urandom(32)
    shares = split_secret(secret, threshold=4, xs=[1, 2, 3, 4, 5])
    with pytest.raises(ProtocolAbortError):
        reconstruct_secret([(1, shares[0]), (2, shares[1]), (3, shares[2])], threshold=4)
    bad = [
        (1, shares[0]),
        (2, shares[1]),
        (3, shares[2]),
        (4, (shares[3] + int.from_bytes(os.urandom(64), "little")) % FIELD_PRIME),
    ]
    with pytest.raises(SecurityError):  # a random error gives a value >= 2^256 (prob. ~1 - 2^-265)
        reconstruct_secret(bad, threshold=4)
    with pytest.raises(ParameterError):
        split_secret(b"short", threshold=1, xs=[1])
    with pytest.raises(ParameterError):
        split_secret(secret, threshold=3, xs=[1, 1, 2])


def test_shamir_threshold_one_and_full() -> None:
    secret = os.urandom(32)
    (s,) = split_secret(secret, threshold=1, xs=[9])
    assert s == int.from_bytes(secret, "little")
    xs = list(range(1, 41))
    shares = split_secret(secret, threshold=40, xs=xs)
    assert reconstruct_secret(list(zip(xs, shares, strict=True))[::-1], threshold=40) == secret


# -- graph -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "k"), [(2, 1), (3, 2), (7, 4), (8, 7), (50, 10), (101, 100)])
def test_harary_graph_is_k_regular_symmetric(n: int, k: int) -> None:
    rng = np.random.default_rng(5)
    for nb in (harary_neighbors(n, k), random_harary_graph(n, k, rng)):
        assert nb.shape == (n, k)
        adj = np.zeros((n, n), dtype=bool)
        adj[np.repeat(np.arange(n), k), nb.ravel()] = True
        assert not adj.diagonal().any()
        assert (adj == adj.T).all()
        assert (adj.sum(axis=1) == k).all()


def test_random_harary_graph_neighbours_are_uniform() -> None:
    # Under the random permutation, P(j is a neighbour of 0) = k / (n - 1) for every j != 0.
    n, k, reps = 12, 4, 3000
    rng = np.random.default_rng(11)
    counts = np.zeros(n)
    for _ in range(reps):
        counts[random_harary_graph(n, k, rng)[0]] += 1
    assert counts[0] == 0
    expected = reps * k / (n - 1)
    chi2 = float(((counts[1:] - expected) ** 2 / expected).sum())
    # the k neighbours are drawn without replacement: the chi-square is conservative here
    assert stats.chi2.sf(chi2, n - 2) > 1e-6


def test_invalid_degree_rejected() -> None:
    with pytest.raises(ParameterError):
        harary_neighbors(10, 3)
    with pytest.raises(ParameterError):
        harary_neighbors(10, 10)


# -- parameters ------------------------------------------------------------------------------------


def _disconnect_bruteforce(n: int, k: int, removed: int) -> float:
    """Exact P[survivors of renamed HARARY(n, k) disconnected] by enumerating removal sets."""
    nb = harary_neighbors(n, k)
    bad = 0
    total = 0
    for rem in itertools.combinations(range(n), removed):
        total += 1
        alive = sorted(set(range(n)) - set(rem))
        seen = {alive[0]}
        stack = [alive[0]]
        while stack:
            v = stack.pop()
            for w in nb[v]:
                if int(w) not in seen and int(w) not in rem:
                    seen.add(int(w))
                    stack.append(int(w))
        bad += len(seen) != len(alive)
    return bad / total


@pytest.mark.parametrize(("n", "k", "removed"), [(10, 2, 3), (12, 4, 5), (11, 4, 6)])
def test_disconnection_bound_is_an_upper_bound(n: int, k: int, removed: int) -> None:
    exact = _disconnect_bruteforce(n, k, removed)
    assert exact > 0
    assert exact <= 2.0 ** _log2_disconnect(n, k, removed) + 1e-12


def test_find_parameters_meets_its_conditions() -> None:
    for n in (2, 3, 10, 100, 1000, 10_000):
        p = find_parameters(n, corrupt_fraction=0.05, dropout_rate=0.1)
        assert 1 <= p.t <= p.k <= n - 1
        assert p.security_bound <= -40 and p.correctness_bound <= -30
        assert p.min_survivors == n - math.floor(0.1 * n)
        # malicious server: refusing double reveals protects iff 2t > k + corrupt neighbours
        assert 2 * p.t > p.k
    big = find_parameters(10_000, corrupt_fraction=0.05, dropout_rate=0.1)
    assert big.k < 200  # O(log n), not n
    semi = find_parameters(
        10_000, corrupt_fraction=0.05, dropout_rate=0.1, threat_model="semi-honest"
    )
    assert semi.k <= big.k and semi.t < big.t


def test_find_parameters_minimal() -> None:
    p = find_parameters(1000, corrupt_fraction=0.05, dropout_rate=0.1)
    if p.k > 2:  # the next smaller degree fails for every threshold
        for t in range(1, p.k - 1):
            q = validate_parameters(
                1000,
                p.k - 2,
                t,
                corrupt_fraction=0.05,
                dropout_rate=0.1,
                threat_model="semi-malicious",
            )
            assert q.security_bound > -40 or q.correctness_bound > -30
    same = find_parameters(
        1000, corrupt_fraction=0.05, dropout_rate=0.1, threat_model="semi-malicious"
    )
    assert (same.k, same.t) == (p.k, p.t)  # same bound, different protocol


def test_malicious_refuses_parameters_without_security() -> None:
    for k, t in [(2, 1), (4, 1), (4, 2), (10, 5)]:
        with pytest.raises(ParameterError, match="malicious"):
            validate_parameters(20, k, t)
        validate_parameters(20, k, t, threat_model="semi-honest")  # allowed, and reported
    assert validate_parameters(2, 1, 1).t == 1  # two clients: the sum reveals the other anyway
    for n in (3, 10, 50):
        p = find_parameters(n)
        assert p.t >= 2 and 2 * p.t > p.k
    # which attacks each threat model stops: malicious stops a strict superset
    semi = set(find_parameters(100, threat_model="semi-malicious").stops)
    mal = set(find_parameters(100).stops)
    assert semi < mal and mal <= set(ATTACKS)
    assert "inconsistent_dropout_claims" not in semi and "inconsistent_dropout_claims" in mal


def test_find_parameters_impossible() -> None:
    with pytest.raises(ParameterError, match="dropout_rate"):
        find_parameters(6, dropout_rate=0.6)
    with pytest.raises(ParameterError):
        validate_parameters(10, 4, 5)
    with pytest.raises(ParameterError):
        validate_parameters(10, 4, 2, threat_model="honest")


# -- crypto ----------------------------------------------------------------------------------------


def test_mask_is_the_aes_ctr_keystream() -> None:
    seed = os.urandom(32)
    raw = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor().update(bytes(8 * 100))
    assert np.array_equal(expand_mask(seed, 100, 64), np.frombuffer(raw, dtype="<u8"))
    assert np.array_equal(expand_mask(seed, 200, 32), np.frombuffer(raw[:800], dtype="<u4"))
    assert expand_mask(seed, 0, 16).size == 0


@pytest.mark.parametrize("bits", [16, 32, 64])
def test_add_mask_equals_expanded_mask_across_chunks(bits: int) -> None:
    seed = os.urandom(32)
    n = 3 * (1 << 18) // (bits // 8) + 7  # three full 256 KiB steps and a partial one
    dtype = np.dtype(f"uint{bits}")
    base = np.arange(n, dtype=dtype)
    mask = expand_mask(seed, n, bits)
    acc = base.copy()
    add_mask(acc, seed, sign=+1)
    assert np.array_equal(acc, base + mask)
    add_mask(acc, seed, sign=-1)
    assert np.array_equal(acc, base)
    out = np.empty(n, dtype=dtype)
    assert expand_mask(seed, n, bits, out=out) is out and np.array_equal(out, mask)
    tiny = expand_mask(seed, 3, bits)  # shorter than the 15-byte tail
    assert np.array_equal(tiny, mask[:3])
    with pytest.raises(ParameterError):
        expand_mask(seed, n, bits, out=np.empty(n, dtype=np.int64))


@pytest.mark.parametrize("bits", [16, 32, 64])
def test_mask_uniform_chi_square(bits: int) -> None:
    m = expand_mask(os.urandom(32), 200_000, bits)
    top = (m >> np.asarray(bits - 8, dtype=m.dtype)).astype(np.int64)
    low = (m & np.asarray(255, dtype=m.dtype)).astype(np.int64)
    for x in (top, low):
        counts = np.bincount(x, minlength=256)
        assert stats.chisquare(counts).pvalue > 1e-6


def test_key_agreement_and_aead() -> None:
    a, b = generate_key_pair(), generate_key_pair()
    assert agree(a.private, b.public) == agree(b.private, a.public)
    assert public_from_private(a.private_bytes()) == a.public
    session = os.urandom(32)
    key = derive_key(agree(a.private, b.public), session=session, label=b"x", low=1, high=2)
    assert key != derive_key(
        agree(a.private, b.public), session=os.urandom(32), label=b"x", low=1, high=2
    )
    assert key != derive_key(agree(a.private, b.public), session=session, label=b"y", low=1, high=2)
    ct = encrypt_share(key, b"hello", session=session, sender=1, receiver=2)
    assert decrypt_share(key, ct, session=session, sender=1, receiver=2) == b"hello"
    flipped = bytes([ct[0] ^ 1]) + ct[1:]
    for kwargs, data in [
        ({"session": session, "sender": 1, "receiver": 2}, flipped),
        ({"session": session, "sender": 2, "receiver": 1}, ct),
        ({"session": os.urandom(32), "sender": 1, "receiver": 2}, ct),
    ]:
        with pytest.raises(SecurityError):
            decrypt_share(key, data, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(SecurityError):
        agree(a.private, bytes(32))  # low-order point


# -- messages --------------------------------------------------------------------------------------


def test_messages_round_trip() -> None:
    sess = os.urandom(32)
    sig = os.urandom(64)
    msgs = [
        SetupMessage(sess, 3, 10, 4, 3, 32, 5, 9, "semi-honest", (1, 2, 8, 9)),
        SetupMessage(sess, 3, 10, 4, 3, 32, 5, 9, "malicious", (), b"roster"),
        AdvertiseKeys(sess, 3, os.urandom(32), os.urandom(32), sig),
        AdvertiseKeys(sess, 3, os.urandom(32), os.urandom(32)),
        KeyBroadcast(
            sess,
            3,
            os.urandom(32),
            {1: (os.urandom(32), os.urandom(32), sig), 9: (b"a" * 32, b"b" * 32, b"")},
        ),
        EncryptedShares(sess, 3, os.urandom(32), {1: os.urandom(CIPHERTEXT_BYTES)}, sig),
        ShareBroadcast(sess, 3, {2: os.urandom(CIPHERTEXT_BYTES)}),
        SurvivorSet(sess, 3, 10, (0, 3, 9)),
        ConsistencySignature(sess, 3, sig),
        UnmaskRequest(sess, 3, (1, 2), (9,)),
        UnmaskRequest(sess, 3, signatures={4: sig, 7: sig}),
        UnmaskResponse(sess, 3, {1: FIELD_PRIME - 1, 2: 0}, {9: 12345}, sig),
    ]
    for m in msgs:
        data = m.to_bytes()
        assert decode(data) == m
        assert data[4] == VERSION and data[6:38] == sess  # version and session in every header
        limit = max_message_bytes(type(m), n=10, k=4, length=5, bits=32)
        assert len(data) <= limit or isinstance(m, SetupMessage)
        with pytest.raises(DataError):
            decode(data[:-1])
        with pytest.raises(DataError):
            decode(data + b"\x00")
        with pytest.raises(DataError):
            decode(data, max_bytes=len(data) - 1)
        with pytest.raises(DataError):
            decode(data[:4] + bytes([VERSION + 1]) + data[5:])  # another protocol version
    mi = MaskedInput(sess, 4, 16, np.array([0, 1, 65535], dtype=np.uint16), sig)
    back = decode(mi.to_bytes(), expect=MaskedInput)
    assert isinstance(back, MaskedInput) and back.bits == 16 and back.signature == sig
    assert np.array_equal(back.values, mi.values)
    with pytest.raises(DataError):
        decode(mi.to_bytes(), expect=UnmaskResponse)
    with pytest.raises(DataError):
        decode(b"nope")
    with pytest.raises(DataError):  # a ciphertext of the wrong size is refused
        EncryptedShares(sess, 3, os.urandom(32), {1: os.urandom(CIPHERTEXT_BYTES + 1)}).to_bytes()


def _fixed_bytes(tag: str, size: int) -> bytes:
    return hashlib.shake_256(tag.encode()).digest(size)


def test_message_bytes_are_pinned() -> None:
    """The wire format, byte for byte: SHA-256 (first 16 hex digits) of each message's serialization
    and of what its signature covers, pinned from the encoder written message by message (a refactor of
    messages.py must not change a bit)."""
    b, sess, sig = _fixed_bytes, _fixed_bytes("session", 32), _fixed_bytes("sig", 64)
    cts = {7: b("x", CIPHERTEXT_BYTES), 1: b("y", CIPHERTEXT_BYTES)}
    keys = {9: (b"a" * 32, b"b" * 32, b""), 1: (b("c", 32), b("s", 32), sig)}
    pinned: list[tuple[Message, str, str | None]] = [
        (
            SetupMessage(sess, 3, 10, 4, 3, 32, 5, 9, "semi-honest", (1, 2, 8, 9)),
            "756203917a7daacd",
            None,
        ),
        (
            SetupMessage(sess, 3, 10, 4, 3, 32, 5, 9, "malicious", (), b"roster"),
            "d76b1bb7548d9de5",
            None,
        ),
        (
            AdvertiseKeys(sess, 3, b("c", 32), b("s", 32), sig),
            "15d30f5e300528b3",
            "1c5635c4f95b1fae",
        ),
        (AdvertiseKeys(sess, 3, b("c", 32), b("s", 32)), "292e2617048ebc7c", "1c5635c4f95b1fae"),
        (KeyBroadcast(sess, 3, b("t", 32), keys), "5a65cb2618154f58", None),
        (EncryptedShares(sess, 3, b("m", 32), cts, sig), "7a4ff4af6ab7b0a2", "986182161596a4c7"),
        (ShareBroadcast(sess, 3, {2: b("z", CIPHERTEXT_BYTES)}), "af7dd57d9fe7a934", None),
        (
            MaskedInput(sess, 4, 16, np.array([0, 1, 65535], dtype=np.uint16), sig),
            "107d094816da9504",
            "dbdb9491f209c7bb",
        ),
        (
            MaskedInput(sess, 4, 64, np.array([2**64 - 1, 5], dtype=np.uint64)),
            "ed9cdcfaf54c13b5",
            "c90535cfef2b59e7",
        ),
        (SurvivorSet(sess, 3, 10, (0, 3, 9)), "4bc5672514861dc0", None),
        (ConsistencySignature(sess, 3, sig), "f2df90a0c4c63940", None),
        (UnmaskRequest(sess, 3, (1, 2), (9,)), "b902f466ed5181e5", None),
        (UnmaskRequest(sess, 3, signatures={7: sig, 4: sig}), "fb5357788d59f505", None),
        (
            UnmaskResponse(sess, 3, {2: FIELD_PRIME - 1, 1: 0}, {9: 12345}, sig),
            "9371276bc53a1bb3",
            "2ad9f45f02795a53",
        ),
    ]
    for msg, digest, signed in pinned:
        data = msg.to_bytes()
        assert hashlib.sha256(data).hexdigest()[:16] == digest, type(msg).__name__
        covered = msg.signed_bytes() if hasattr(msg, "signed_bytes") else None
        assert (covered and hashlib.sha256(covered).hexdigest()[:16]) == signed, type(msg).__name__
        assert decode(data).to_bytes() == data


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.integers(1, 10))
def test_decoders_refuse_garbage(data: bytes, tag: int) -> None:
    blob = b"FSA2" + bytes([VERSION, tag]) + data
    try:
        msg = decode(blob)
    except DataError:
        return
    assert msg.to_bytes() == blob  # what parses is exactly a canonical message


def test_counts_are_checked_before_allocation() -> None:
    sess = os.urandom(32)
    good = ShareBroadcast(sess, 1, {2: os.urandom(CIPHERTEXT_BYTES)}).to_bytes()
    huge_count = good[:42] + (2**31).to_bytes(4, "little") + good[46:]
    with pytest.raises(DataError, match="more entries"):
        decode(huge_count)


def test_low_order_keys_refused() -> None:
    p = 2**255 - 19
    lows = [0, 1, p - 1, p, p + 1]
    lows += [
        325606250916557431795983626356110631294008115727848805560023387167927233504,
        39382357235489614581723060781553021112529911719440698176882885853963445705823,
    ]
    for u in lows:
        for top in (0, 1 << 255):
            key = (u | top).to_bytes(32, "little")
            with pytest.raises(SecurityError, match="low-order"):
                check_public_key(key)
            with pytest.raises(SecurityError):  # cryptography agrees: all-zero shared secret
                agree(generate_key_pair().private, key)
    check_public_key(generate_key_pair().public)
    with pytest.raises(SecurityError, match="32 bytes"):
        check_public_key(bytes(31))


def test_robust_reconstruct_identifies_wrong_shares() -> None:
    secret = os.urandom(32)
    xs = list(range(1, 21))
    shares = list(zip(xs, split_secret(secret, threshold=8, xs=xs), strict=True))
    ok = lambda s: s == secret  # noqa: E731
    assert robust_reconstruct(shares, threshold=8, check=ok) == (secret, set())
    bad = [(x, (y + 1) % FIELD_PRIME) if x in (1, 5) else (x, y) for x, y in shares]
    bad[10] = (bad[10][0], FIELD_PRIME + 3)  # not a field element
    assert robust_reconstruct(bad, threshold=8, check=ok) == (secret, {1, 5, 11})
    too_many = [(x, y + 1) if x <= 7 else (x, y) for x, y in shares]  # 7 > (20 - 8) // 2
    with pytest.raises(ProtocolAbortError):
        robust_reconstruct(too_many, threshold=8, check=ok)
    with pytest.raises(ProtocolAbortError):
        robust_reconstruct(shares[:7], threshold=8, check=ok)


def test_public_graph_is_a_renamed_harary_graph() -> None:
    seed = os.urandom(32)
    g = public_harary_graph(40, 6, seed)
    assert np.array_equal(g, public_harary_graph(40, 6, seed))  # deterministic in the seed
    assert not np.array_equal(g, public_harary_graph(40, 6, os.urandom(32)))
    rows = public_neighbors(40, 6, seed, range(40))
    assert all(set(g[i].tolist()) == rows[i] for i in range(40))
    assert all(i in rows[j] and i not in rows[i] for i in range(40) for j in rows[i])
    # neighbours of a client look like a uniform 6-subset: each other client equally often
    counts = np.zeros(20)
    for _ in range(600):
        counts[sorted(public_neighbors(20, 6, os.urandom(32), [0])[0])] += 1
    assert counts[0] == 0
    assert stats.chisquare(counts[1:]).pvalue > 1e-4


def test_roster_signature_and_parsing() -> None:
    auth = EnrollmentAuthority()
    ids = [ClientIdentity() for _ in range(5)]
    roster = auth.roster([c.public for c in ids], task_id=b"task")
    assert SessionRoster.from_bytes(roster.to_bytes()) == roster
    auth.verifier().verify(roster)
    with pytest.raises(SecurityError):
        EnrollmentAuthority().verifier().verify(roster)  # another authority
    forged = SessionRoster(
        roster.task_id,
        roster.session,
        (*roster.identities[:4], ClientIdentity().public),
        roster.signature,
    )
    with pytest.raises(SecurityError):
        auth.verifier().verify(forged)  # the server cannot add or swap identities
    with pytest.raises(DataError):
        SessionRoster.from_bytes(roster.to_bytes(), max_clients=4)
    with pytest.raises(DataError):
        SessionRoster.from_bytes(roster.to_bytes()[:-1])
    with pytest.raises(ParameterError):
        auth.roster([ids[0].public, ids[0].public])


# -- fixed point -----------------------------------------------------------------------------------


def test_overflow_check() -> None:
    check_overflow(value_bits=20, n_clients=1024, bits=32, headroom=2)
    with pytest.raises(OverflowRiskError):
        check_overflow(value_bits=21, n_clients=1024, bits=32, headroom=2)
    with pytest.raises(OverflowRiskError):
        FixedPoint.for_clients(clip=1.0, n_clients=2**15, bits=16)


def test_fixed_point_sum_exact_within_quantum_and_clipping_counted() -> None:
    rng = np.random.default_rng(3)
    n = 500
    x = rng.uniform(-1.5, 1.5, size=(n, 40))
    for bits in (32, 64):
        fp = FixedPoint.for_clients(clip=1.0, n_clients=n, bits=bits)
        enc, clipped = fp.encode(x, bits)
        assert clipped == int((np.abs(x) > 1.0).sum())
        total = enc.sum(axis=0, dtype=enc.dtype)  # wraps mod 2^bits
        est = fp.dequantize(total, bits)
        truth = np.clip(x, -1, 1).sum(axis=0)
        assert np.max(np.abs(est - truth)) <= n * 0.5 / fp.scale + 1e-9
        # the worst case (all at the clip bound) does not wrap
        worst = np.full((n, 1), 1.0)
        wenc, _ = fp.encode(worst, bits)
        assert fp.dequantize(wenc.sum(axis=0, dtype=wenc.dtype), bits)[0] == pytest.approx(
            n, rel=1e-6
        )
        wenc, _ = fp.encode(-worst, bits)
        assert fp.dequantize(wenc.sum(axis=0, dtype=wenc.dtype), bits)[0] == pytest.approx(
            -n, rel=1e-6
        )


def test_stochastic_rounding_unbiased() -> None:
    fp = FixedPoint(clip=1.0, scale=4.0)
    rng = np.random.default_rng(9)
    q = fp.quantize(np.full(200_000, 0.1), rng).values
    # E[q] = 0.4, Var = 0.4 * 0.6
    se = math.sqrt(0.24 / q.size)
    assert abs(q.mean() - 0.4) < 6 * se


@settings(max_examples=300, deadline=None)
@given(
    n_others=st.integers(2, 3000),
    k=st.integers(1, 200),
    bad=st.integers(0, 3000),
    at_least=st.integers(0, 200),
)
def test_exact_hypergeometric_tail_matches_scipy(
    n_others: int, k: int, bad: int, at_least: int
) -> None:
    """The parameter finder's exact tail (no scipy.stats on devices) equals scipy's log survival."""
    from fedstats.secagg.params import _log2_sf

    k, bad = min(k, n_others), min(bad, n_others)
    ours = _log2_sf(k, bad, n_others, at_least)
    ref = float(stats.hypergeom.logsf(at_least - 1, n_others, bad, k)) / math.log(2)
    if math.isinf(ours):  # an impossible tail: scipy gives -inf or a value below 2^-1000
        assert ref < -1000
    elif math.isinf(ref):  # scipy underflowed where the exact tail is finite
        assert ours < -1000
    else:
        assert ours == pytest.approx(ref, rel=1e-9, abs=1e-9)
