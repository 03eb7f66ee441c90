"""The secure-aggregation protocol end to end (semi-honest and semi-malicious models): exact sums under
dropouts, aborts, and attacks. The malicious model has its own file, ``test_secagg_malicious.py``."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from fedstats.errors import DataError, ProtocolAbortError, SecurityError
from fedstats.randomness import RandomSource
from fedstats.secagg import (
    DROPOUT_STAGES,
    ClientConfig,
    SecAggClient,
    SecAggParameters,
    SecAggServer,
    find_parameters,
    random_harary_graph,
    run_secure_aggregation,
    validate_parameters,
)
from fedstats.secagg.crypto import generate_key_pair
from fedstats.secagg.graph import valid_degree
from fedstats.secagg.messages import (
    AdvertiseKeys,
    KeyBroadcast,
    MaskedInput,
    ShareBroadcast,
    UnmaskRequest,
    UnmaskResponse,
    decode,
)

ROUND = b"test-round"


def _expected_outcome(
    params: SecAggParameters, seed: int, drops: dict[str, set[int]]
) -> tuple[bool, set[int]]:
    """Reference model of Alg. 2: (aborts?, included clients) for a dropout pattern."""
    n, t, m = params.n, params.t, params.min_survivors
    nb = random_harary_graph(n, params.k, RandomSource(seed).public("secagg", "graph", ROUND.hex()))
    nbs = [set(int(v) for v in row) for row in nb]
    gone: set[int] = set()
    alive = {}
    for s in DROPOUT_STAGES:  # no consistency stage: those clients drop before unmasking
        gone |= drops.get(s, set())
        alive[s] = set(range(n)) - gone
    a0 = alive["advertise"]
    if len(a0) < m:
        return True, set()
    a1 = {i for i in alive["share"] & a0 if len(nbs[i] & a0) >= t}
    if len(a1) < m:
        return True, set()
    a2 = {i for i in alive["masked_input"] & a1 if len(nbs[i] & a1) >= t}
    if len(a2) < m:
        return True, set()
    a3 = alive["unmask"] & a2
    if len(a3) < m:
        return True, set()
    for i in a2:
        if len(nbs[i] & a3) < t:
            return True, set()
    for i in a1 - a2:
        if nbs[i] & a2 and len(nbs[i] & a3) < t:
            return True, set()
    return False, a2


@st.composite
def _scenarios(draw: st.DrawFn) -> tuple[SecAggParameters, dict[str, set[int]], int, int]:
    n = draw(st.integers(2, 12))
    k = draw(st.sampled_from([k for k in range(1, n) if valid_degree(n, k)]))
    t = draw(st.integers(1, k))
    model = draw(st.sampled_from(["semi-honest", "semi-malicious"]))
    params = validate_parameters(n, k, t, dropout_rate=0.0, threat_model=model)
    params = dataclasses.replace(params, min_survivors=draw(st.integers(1, n)))
    drops: dict[str, set[int]] = {}
    for stage in DROPOUT_STAGES:
        drops[stage] = set(draw(st.lists(st.integers(0, n - 1), max_size=max(1, n // 3))))
    length = draw(st.integers(1, 20))
    bits = draw(st.sampled_from([16, 32, 64]))
    return params, drops, length, bits


# 100 scenarios a run, not 300 (each is a whole protocol run, up to 14 s a run of this test); every run
# draws new ones
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scenarios(), st.integers(0, 2**32 - 1))
def test_exact_sum_under_random_dropouts(
    scenario: tuple[SecAggParameters, dict[str, set[int]], int, int], seed: int
) -> None:
    params, drops, length, bits = scenario
    rng = np.random.default_rng(seed)
    x = rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), size=(params.n, length), dtype=np.int64)
    aborts, included = _expected_outcome(params, seed, drops)
    run = lambda: run_secure_aggregation(  # noqa: E731
        x, bits=bits, params=params, dropouts=drops, randomness=RandomSource(seed), round_id=ROUND
    )
    if aborts:
        with pytest.raises(ProtocolAbortError):
            run()
        return
    res = run()
    assert set(res.included) == included
    want = x[sorted(included)].astype(f"uint{bits}").sum(axis=0, dtype=f"uint{bits}")
    assert res.total.dtype == np.dtype(f"uint{bits}")
    assert np.array_equal(res.total, want)


def test_every_stage_with_default_parameters() -> None:
    n, length = 60, 50
    params = find_parameters(n, dropout_rate=0.2, threat_model="semi-malicious")
    rng = np.random.default_rng(1)
    x = rng.integers(-1000, 1000, size=(n, length))
    for stage in DROPOUT_STAGES:
        drops = {stage: set(rng.choice(n, size=n // 5, replace=False).tolist())}
        res = run_secure_aggregation(
            x, bits=32, params=params, dropouts=drops, randomness=RandomSource(2)
        )
        assert np.array_equal(res.signed_total(), x[list(res.included)].sum(axis=0))
        expect_in = set(range(n)) - (
            drops[stage] if stage not in ("consistency", "unmask") else set()
        )
        assert set(res.included) == expect_in
    # one more drop than tolerated, at each stage: abort
    for stage in DROPOUT_STAGES:
        drops = {stage: set(range(n // 5 + 1))}
        with pytest.raises(ProtocolAbortError, match="aborts without a result"):
            run_secure_aggregation(x, bits=32, params=params, dropouts=drops)


def test_two_clients() -> None:
    x = np.array([[5, -7, 2**40], [1, 1, 1]])
    res = run_secure_aggregation(x, bits=64)
    assert res.params.k == 1 and res.params.t == 1
    assert res.params.threat_model == "malicious"  # the default
    assert res.signed_total().tolist() == [6, -6, 2**40 + 1]


@pytest.mark.slow  # 5-12 s; every stage's protocol is tested at 60 clients above (make test runs this)
def test_thousand_clients() -> None:
    n = 1000
    params = find_parameters(n, corrupt_fraction=0.0, dropout_rate=0.05, threat_model="semi-honest")
    rng = np.random.default_rng(7)
    x = rng.integers(0, 2**20, size=(n, 8))
    drops = {"masked_input": set(range(0, 40, 2)), "unmask": set(range(1, 40, 2))}
    res = run_secure_aggregation(x, bits=32, params=params, dropouts=drops)
    assert len(res.included) == n - 20
    assert np.array_equal(res.total, x[list(res.included)].sum(axis=0).astype(np.uint32))
    assert res.params.k < 60


def test_long_vectors() -> None:
    n, length = 4, 1_000_000
    rng = np.random.default_rng(8)
    x = rng.integers(-(2**62), 2**62, size=(n, length))
    res = run_secure_aggregation(
        x,
        bits=64,
        params=validate_parameters(n, 3, 2, dropout_rate=0.25, threat_model="semi-honest"),
        dropouts={"masked_input": {3}},
    )
    assert np.array_equal(res.total, x[:3].astype(np.uint64).sum(axis=0, dtype=np.uint64))
    assert res.bytes_sent[0] > 8 * length


def test_inputs_as_function_and_lengths() -> None:
    rng = np.random.default_rng(4)
    rows = rng.integers(-5, 5, size=(6, 1))
    res = run_secure_aggregation(lambda i: rows[i], n=6, bits=16)  # malicious model by default
    assert res.signed_total().tolist() == rows.sum(axis=0).tolist()
    with pytest.raises(DataError):
        run_secure_aggregation(np.ones((3, 2)), bits=32)


def test_abort_keeps_no_partial_result() -> None:
    # Abort at the last step, after the masked inputs were accumulated: no result is available.
    server, clients, reqs, _ = _session_until_unmask(n=6, k=4, t=3)
    server.params = dataclasses.replace(server.params, min_survivors=6)
    for j, req in list(reqs.items())[:-1]:
        server.receive(clients[j].handle(req))  # type: ignore[arg-type]
    with pytest.raises(ProtocolAbortError, match="unmasking"):
        server.advance()
    with pytest.raises(ProtocolAbortError):
        server.result()
    assert not server._acc.any()
    j, req = list(reqs.items())[-1]
    with pytest.raises(ProtocolAbortError, match="aborted"):  # nothing is accepted after an abort
        server.receive(clients[j].handle(req))  # type: ignore[arg-type]
    with pytest.raises(ProtocolAbortError):
        server.advance()


# -- a hand-driven session, for attacks --------------------------------------------------------------


def _session_until_unmask(
    n: int = 6, k: int = 4, t: int = 3, drop_masked: tuple[int, ...] = ()
) -> tuple[SecAggServer, dict[int, SecAggClient], dict[int, UnmaskRequest], np.ndarray]:
    params = validate_parameters(n, k, t, dropout_rate=0.5, threat_model="semi-malicious")
    rng = np.random.default_rng(3)
    x = rng.integers(0, 100, size=(n, 4))
    server = SecAggServer(params, length=4, bits=32, round_id=ROUND, rng=rng)
    config = ClientConfig.from_parameters(params, bits=32, length=4)
    clients = {i: SecAggClient(i, x[i], config) for i in range(n)}
    out = server.setup()
    for i, m in out.items():
        server.receive_bytes(clients[i].handle_bytes(m.to_bytes()))
    for stage in ("share", "masked"):
        nxt = server.advance()
        for i, m in nxt.items():
            if stage == "masked" and i in drop_masked:
                continue
            server.receive(clients[i].handle(m))  # type: ignore[arg-type]
    reqs = server.advance()
    return server, clients, reqs, x  # type: ignore[return-value]


def test_hand_driven_session_and_message_order() -> None:
    server, clients, reqs, x = _session_until_unmask(drop_masked=(2,))
    for j, req in reqs.items():
        server.receive(clients[j].handle(req))  # type: ignore[arg-type]
    assert server.advance() == {}
    keep = [i for i in range(6) if i != 2]
    assert np.array_equal(server.result(), x[keep].sum(axis=0).astype(np.uint32))
    with pytest.raises(SecurityError):  # a second request in the same session is refused
        clients[0].handle(reqs[0])
    with pytest.raises(SecurityError):  # a message out of order
        SecAggClient(0, x[0], clients[0].config).handle(reqs[0])
    # every client that answered has forgotten its input, keys, seed and the shares it held
    assert not any(c.holds_secrets() for i, c in clients.items() if i != 2)
    assert clients[2].holds_secrets()  # the dropout never got that far


def test_double_reveal_refused() -> None:
    _, clients, reqs, _ = _session_until_unmask()
    j, req = next(iter(reqs.items()))
    peer = req.survivors[0]
    evil = UnmaskRequest(req.session, j, req.survivors, (peer,))
    with pytest.raises(SecurityError, match="refuses to reveal both"):
        clients[j].handle(evil)
    assert not clients[j].holds_secrets()  # a refusal aborts the client: it forgets everything
    with pytest.raises(SecurityError):
        clients[j].handle(req)  # and answers nothing afterwards
    # asking for shares of a non-neighbour (or itself) is refused too
    others = [(i, r) for i, r in reqs.items() if i != j]
    (a, ra), (b, rb) = others[0], others[1]
    non_nb = next(i for i in range(6) if i not in ra.survivors and i != a)
    with pytest.raises(SecurityError):
        clients[a].handle(UnmaskRequest(ra.session, a, (non_nb,), ()))
    with pytest.raises(SecurityError):
        clients[b].handle(UnmaskRequest(rb.session, b, (b,), ()))


def test_server_rejects_unrequested_shares() -> None:
    server, clients, reqs, _ = _session_until_unmask(drop_masked=(1,))
    j, req = next((j, r) for j, r in reqs.items() if r.dropped)
    honest = clients[j].handle(req)
    assert isinstance(honest, UnmaskResponse)
    forged = UnmaskResponse(req.session, j, honest.seed_shares, {**honest.key_shares, 99: 1})
    with pytest.raises(SecurityError):
        server.receive(forged)


def _tamper(
    kind: type, mutate: Callable[[object], object], direction: str
) -> Callable[[str, int, bytes], bytes]:
    done: list[bool] = []

    def channel(d: str, client: int, data: bytes) -> bytes:
        msg = decode(data)
        if d == direction and isinstance(msg, kind) and not done:
            new = mutate(msg)
            if new is not None:
                done.append(True)
                return new.to_bytes()  # type: ignore[attr-defined]
        return data

    return channel


def _flip(ct: bytes, pos: int) -> bytes:
    return ct[:pos] + bytes([ct[pos] ^ 0x01]) + ct[pos + 1 :]


@pytest.mark.parametrize("pos", [0, 20, -1])
def test_tampered_ciphertext_rejected(pos: int) -> None:
    def mutate(m: object) -> object:
        assert isinstance(m, ShareBroadcast)
        if not m.ciphertexts:
            return None
        sender = next(iter(m.ciphertexts))
        cts = dict(m.ciphertexts)
        cts[sender] = _flip(cts[sender], pos % len(cts[sender]))
        return ShareBroadcast(m.session, m.receiver, cts)

    x = np.ones((8, 3), dtype=np.int64)
    for model in ("semi-malicious", "malicious"):
        with pytest.raises(SecurityError, match="failed authentication"):
            run_secure_aggregation(
                x,
                bits=32,
                params=find_parameters(8, threat_model=model),
                channel=_tamper(ShareBroadcast, mutate, "to_client"),
            )


def test_swapped_ciphertexts_rejected() -> None:
    def mutate(m: object) -> object:
        assert isinstance(m, ShareBroadcast)
        if len(m.ciphertexts) < 2:
            return None
        a, b = list(m.ciphertexts)[:2]
        cts = dict(m.ciphertexts)
        cts[a], cts[b] = cts[b], cts[a]
        return ShareBroadcast(m.session, m.receiver, cts)

    with pytest.raises(SecurityError):
        run_secure_aggregation(
            np.ones((8, 3), dtype=np.int64),
            bits=32,
            channel=_tamper(ShareBroadcast, mutate, "to_client"),
        )


def test_reconstructed_key_must_match_advertised_key() -> None:
    # Semi-malicious: the server's copy of client 0's mask key is replaced in transit (nothing is
    # signed); client 0 then drops before its masked input, so the server must reconstruct its key,
    # which regenerates the *true* public key: unmasking fails and the session aborts (fail closed).
    fake = generate_key_pair().public

    def mutate(m: object) -> object:
        assert isinstance(m, AdvertiseKeys)
        if m.client != 0:
            return None
        return AdvertiseKeys(m.session, m.client, fake, m.encryption_public)

    with pytest.raises(ProtocolAbortError, match="unmasking failed"):
        run_secure_aggregation(
            np.ones((8, 3), dtype=np.int64),
            bits=32,
            params=validate_parameters(8, 4, 3, dropout_rate=0.25, threat_model="semi-malicious"),
            dropouts={"masked_input": {0}},
            channel=_tamper(AdvertiseKeys, mutate, "to_server"),
        )


def test_tampered_seed_share_identifies_the_sender() -> None:
    # One wrong share no longer kills the session: Berlekamp-Welch finds it, the sum stays exact.
    def mutate(m: object) -> object:
        assert isinstance(m, UnmaskResponse)
        if not m.seed_shares:
            return None
        i = next(iter(m.seed_shares))
        seeds = dict(m.seed_shares)
        seeds[i] = (seeds[i] + 12345) % ((1 << 521) - 1)
        return UnmaskResponse(m.session, m.sender, seeds, m.key_shares)

    x = np.arange(24).reshape(8, 3)
    res = run_secure_aggregation(
        x,
        bits=32,
        params=validate_parameters(8, 6, 4, dropout_rate=0.0, threat_model="semi-malicious"),
        channel=_tamper(UnmaskResponse, mutate, "to_server"),
    )
    assert res.signed_total().tolist() == x.sum(axis=0).tolist()
    assert len(res.cheaters) == 1


def test_server_rejects_malformed_client_messages() -> None:
    params = validate_parameters(4, 2, 2, dropout_rate=0.0, threat_model="semi-honest")
    server = SecAggServer(params, length=2, bits=32, round_id=ROUND, rng=np.random.default_rng(1))
    server.setup()
    sess = server.session
    with pytest.raises(SecurityError):
        server.receive(MaskedInput(sess, 0, 32, np.zeros(2, dtype=np.uint32)))  # wrong stage
    keys = [generate_key_pair().public for _ in range(8)]
    server.receive(AdvertiseKeys(sess, 0, keys[0], keys[1]))
    with pytest.raises(SecurityError):
        server.receive(AdvertiseKeys(sess, 0, keys[2], keys[3]))  # duplicate
    with pytest.raises(SecurityError):
        server.receive(AdvertiseKeys(sess, 7, keys[2], keys[3]))  # not invited
    with pytest.raises(SecurityError, match="another session"):
        server.receive(AdvertiseKeys(os.urandom(32), 1, keys[2], keys[3]))
    with pytest.raises(SecurityError, match="already in use"):
        server.receive(AdvertiseKeys(sess, 1, keys[0], keys[3]))  # someone else's key
    with pytest.raises(SecurityError, match="low-order"):
        server.receive(AdvertiseKeys(sess, 1, bytes(32), keys[3]))
    with pytest.raises(DataError):  # oversized: refused before parsing
        server.receive_bytes(AdvertiseKeys(sess, 1, keys[2], keys[3]).to_bytes() + bytes(1 << 20))
    with pytest.raises(ProtocolAbortError):
        server.advance()  # only client 0 advertised, quorum is 4


def test_masked_inputs_look_uniform() -> None:
    # All clients hold zeros; each masked input (and the sum of any proper subset) must be uniform.
    n, length, bits = 12, 20_000, 16
    seen: list[np.ndarray] = []

    def channel(d: str, client: int, data: bytes) -> bytes:
        m = decode(data)
        if isinstance(m, MaskedInput):
            seen.append(np.asarray(m.values).copy())
        return data

    res = run_secure_aggregation(
        np.zeros((n, length), dtype=np.int64),
        bits=bits,
        params=find_parameters(n, threat_model="semi-honest"),
        channel=channel,
    )
    assert not res.total.any()
    assert len(seen) == n
    partial = np.sum(seen[: n // 2], axis=0, dtype=np.uint16)
    for v in [*seen[:3], partial]:
        for part in ((v >> 8).astype(np.int64), (v & 255).astype(np.int64)):
            counts = np.bincount(part, minlength=256)
            assert stats.chisquare(counts).pvalue > 1e-6


def test_repeated_public_keys_refused() -> None:
    def mutate(m: object) -> object:
        assert isinstance(m, KeyBroadcast)
        if len(m.keys) < 2:
            return None
        a, b = list(m.keys)[:2]
        keys = dict(m.keys)
        keys[b] = keys[a]  # the server hands out one client's keys under two names
        return KeyBroadcast(m.session, m.receiver, m.transcript, keys)

    with pytest.raises(SecurityError, match="repeated public keys"):
        run_secure_aggregation(
            np.ones((8, 3), dtype=np.int64),
            bits=32,
            params=find_parameters(8, threat_model="semi-malicious"),
            channel=_tamper(KeyBroadcast, mutate, "to_client"),
        )


def test_the_driver_reports_progress_per_stage_and_message() -> None:
    """One progress task per stage, advanced once per message handed to a client, then closed."""
    from fedstats.progress import RecordingProgress

    bar = RecordingProgress()
    x = np.arange(60, dtype=np.int64).reshape(12, 5)
    res = run_secure_aggregation(x, bits=32, randomness=RandomSource(3), progress=bar)
    assert np.array_equal(res.total, x.sum(axis=0).astype(np.uint32))
    starts = [(t, n) for kind, t, n in bar.events if kind == "start"]
    assert [t for t, _ in starts] == [f"secure aggregation: {s}" for s in DROPOUT_STAGES]
    for task, total in starts:
        advanced = sum(n for kind, t, n in bar.events if kind == "advance" and t == task)
        assert advanced == total == 12
        assert ("finish", task, 0) in bar.events
