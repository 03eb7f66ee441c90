"""Properties of fedstats.vdaf: exact field arithmetic, completeness (valid reports verify and aggregate
exactly) and soundness against the cheats the circuits exist for (invalid encodings, tampered shares)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedstats.errors import DataError, ParameterError, SecurityError
from fedstats.vdaf import (
    Field64,
    Field128,
    Prio3,
    Prio3Count,
    Prio3Histogram,
    Prio3MultihotCountVec,
    Prio3Sum,
    Prio3SumVec,
    Prio3SumVecWithMultiproof,
)
from fedstats.vdaf.field import Field
from fedstats.vdaf.flp import inv_ntt, lagrange_weights, ntt

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CTX = b"fedstats tests"

# --- fields ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", [Field64, Field128])
@SETTINGS
@given(data=st.data())
def test_field_ops_match_python_ints(field: type[Field], data: Any) -> None:
    p = field.MODULUS
    elems = st.one_of(
        st.integers(0, p - 1), st.sampled_from([0, 1, p - 1, p - 2, 2**32, 2**63 % p])
    )
    xs = data.draw(st.lists(elems, min_size=1, max_size=40))
    ys = data.draw(st.lists(elems, min_size=len(xs), max_size=len(xs)))
    a, b = field.array(xs), field.array(ys)
    assert field.to_ints(field.add(a, b)) == [(x + y) % p for x, y in zip(xs, ys, strict=False)]
    assert field.to_ints(field.sub(a, b)) == [(x - y) % p for x, y in zip(xs, ys, strict=False)]
    assert field.to_ints(field.mul(a, b)) == [x * y % p for x, y in zip(xs, ys, strict=False)]
    assert field.to_ints(field.sum(a)) == sum(xs) % p
    assert field.to_ints(field.inv(a)) == [pow(x, p - 2, p) for x in xs]
    assert field.to_ints(field.decode(field.encode(a))) == xs


@pytest.mark.parametrize("field", [Field64, Field128])
def test_decode_rejects_the_modulus_and_bad_lengths(field: type[Field]) -> None:
    with pytest.raises(DataError, match="modulus"):
        field.decode(field.MODULUS.to_bytes(field.ENCODED_SIZE, "little"))
    with pytest.raises(DataError, match="multiple"):
        field.decode(bytes(field.ENCODED_SIZE + 1))


@pytest.mark.parametrize("field", [Field64, Field128])
def test_ntt_lagrange_and_roots_agree_with_naive_evaluation(field: type[Field]) -> None:
    p = field.MODULUS
    rng = np.random.default_rng(5)
    n = 8
    coeffs = [int(c) for c in rng.integers(0, 2**62, n)]
    w = field.root(n)
    assert pow(w, n, p) == 1 and pow(w, n // 2, p) != 1
    vals = field.to_ints(ntt(field, field.array([coeffs]), n))[0]
    naive = [sum(c * pow(w, i * k, p) for k, c in enumerate(coeffs)) % p for i in range(n)]
    assert vals == naive
    assert field.to_ints(inv_ntt(field, field.array([vals])))[0] == coeffs
    t = 123456789
    weights = field.to_ints(lagrange_weights(field, field.array([t]), n))[0]
    assert (
        sum(wi * v for wi, v in zip(weights, vals, strict=False)) % p
        == sum(c * pow(t, k, p) for k, c in enumerate(coeffs)) % p
    )


# --- Prio3: completeness --------------------------------------------------------------------------


def _run(
    vdaf: Prio3, meas_enc: Any, *, encoded: bool = False, tamper: Any = None
) -> tuple[np.ndarray, Any]:
    n = len(meas_enc)
    key = os.urandom(32)
    nonces = [os.urandom(16) for _ in range(n)]
    if encoded:
        batch = vdaf.shard_encoded(CTX, meas_enc, nonces)
    else:
        batch = vdaf.shard_batch(CTX, meas_enc, nonces)
    if tamper is not None:
        tamper(batch)
    inits = [
        vdaf.verify_init_batch(key, CTX, j, nonces, batch.public_shares, batch.input_shares[j])
        for j in range(vdaf.SHARES)
    ]
    msgs, ok = vdaf.verifier_shares_to_message_batch(CTX, [vs for _, vs in inits])
    aggs = []
    for st_, _ in inits:
        out, ok_j = vdaf.verify_next_batch(st_, msgs)
        assert (ok_j == ok).all()
        aggs.append(vdaf.aggregate(out, ok))
    return ok, vdaf.unshard(aggs, max(int(ok.sum()), 1))


@SETTINGS
@given(st.lists(st.integers(0, 1), min_size=1, max_size=6))
def test_count_verifies_and_sums_exactly(xs: list[int]) -> None:
    ok, result = _run(Prio3Count(), xs)
    assert ok.all() and result == sum(xs)


@SETTINGS
@given(st.integers(1, 2**20), st.data())
def test_sum_verifies_and_sums_exactly(max_measurement: int, data: Any) -> None:
    xs = data.draw(st.lists(st.integers(0, max_measurement), min_size=1, max_size=5))
    ok, result = _run(Prio3Sum(max_measurement=max_measurement), xs)
    assert ok.all() and result == sum(xs)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 300), st.integers(1, 5), st.data())
def test_sumvec_verifies_and_sums_exactly(length: int, max_m: int, chunk: int, data: Any) -> None:
    rows = data.draw(
        st.lists(
            st.lists(st.integers(0, max_m), min_size=length, max_size=length),
            min_size=1,
            max_size=4,
        )
    )
    ok, result = _run(Prio3SumVec(length=length, max_measurement=max_m, chunk_length=chunk), rows)
    assert ok.all() and result == [sum(c) for c in zip(*rows, strict=False)]


@SETTINGS
@given(st.integers(1, 12), st.integers(1, 5), st.data())
def test_histogram_verifies_and_counts_exactly(length: int, chunk: int, data: Any) -> None:
    xs = data.draw(st.lists(st.integers(0, length - 1), min_size=1, max_size=6))
    ok, result = _run(Prio3Histogram(length=length, chunk_length=chunk), xs)
    assert ok.all() and result == [xs.count(b) for b in range(length)]


@SETTINGS
@given(st.integers(1, 8), st.integers(1, 4), st.data())
def test_multihot_verifies_and_counts_exactly(length: int, chunk: int, data: Any) -> None:
    max_weight = data.draw(st.integers(1, length))
    rows = data.draw(
        st.lists(
            st.lists(st.integers(0, 1), min_size=length, max_size=length).filter(
                lambda r: sum(r) <= max_weight
            ),
            min_size=1,
            max_size=4,
        )
    )
    vdaf = Prio3MultihotCountVec(length=length, max_weight=max_weight, chunk_length=chunk)
    ok, result = _run(vdaf, rows)
    assert ok.all() and result == [sum(c) for c in zip(*rows, strict=False)]


def test_three_aggregators_work_too() -> None:
    ok, result = _run(Prio3Histogram(length=5, chunk_length=2, shares=3), [0, 4, 4])
    assert ok.all() and result == [1, 0, 0, 0, 2]


# --- Prio3: soundness (a malicious client shards an invalid encoding with an honest proof) ---------


def _enc(vdaf: Prio3, rows: list[list[int]]) -> Any:
    return vdaf.field.array(np.array(rows, dtype=object))


@SETTINGS
@given(st.integers(2, 2**40))
def test_count_of_more_than_one_is_rejected(x: int) -> None:
    vdaf = Prio3Count()
    ok, result = _run(vdaf, _enc(vdaf, [[1], [x], [0]]), encoded=True)
    assert ok.tolist() == [True, False, True] and result == 1


@SETTINGS
@given(st.integers(1, 2**16), st.data())
def test_sum_with_a_non_bit_is_rejected(max_m: int, data: Any) -> None:
    vdaf = Prio3Sum(max_measurement=max_m)
    bits = vdaf.flp.MEAS_LEN
    row = [0] * bits
    row[data.draw(st.integers(0, bits - 1))] = data.draw(st.integers(2, 2**20))
    ok, _ = _run(vdaf, _enc(vdaf, [row]), encoded=True)
    assert not ok.any()


def test_sum_above_max_cannot_be_encoded_and_its_cheat_is_rejected() -> None:
    vdaf = Prio3Sum(max_measurement=255)
    with pytest.raises(ParameterError, match="measurement"):
        vdaf.shard_batch(CTX, [256], [os.urandom(16)])
    # 256 written as "bit 8 = 2" (weight 128 * 2) is not a bit vector
    ok, _ = _run(vdaf, _enc(vdaf, [[0, 0, 0, 0, 0, 0, 0, 2]]), encoded=True)
    assert not ok.any()


@SETTINGS
@given(st.integers(2, 10), st.integers(1, 4), st.data())
def test_histogram_with_two_ones_or_none_is_rejected(length: int, chunk: int, data: Any) -> None:
    vdaf = Prio3Histogram(length=length, chunk_length=chunk)
    i, j = data.draw(st.lists(st.integers(0, length - 1), min_size=2, max_size=2, unique=True))
    two = [0] * length
    two[i] = two[j] = 1
    ok, result = _run(
        vdaf, _enc(vdaf, [two, [0] * length, [int(b == i) for b in range(length)]]), encoded=True
    )
    assert ok.tolist() == [False, False, True]
    assert result == [int(b == i) for b in range(length)]


def test_histogram_with_a_large_bucket_value_is_rejected() -> None:
    vdaf = Prio3Histogram(length=4, chunk_length=2)
    ok, _ = _run(vdaf, _enc(vdaf, [[1000, 0, 0, (1 - 1000) % Field128.MODULUS]]), encoded=True)
    assert not ok.any()  # sums to 1, but no entry is a bit


def test_sumvec_and_multihot_cheats_are_rejected() -> None:
    sv = Prio3SumVec(length=3, max_measurement=7, chunk_length=2)
    good = sv.flp.valid.encode(np.array([[7, 0, 3]]))
    bad = good.copy()
    bad[0, 0] = 2
    ok, _ = _run(sv, np.concatenate([good, bad]), encoded=True)
    assert ok.tolist() == [True, False]
    mh = Prio3MultihotCountVec(length=4, max_weight=2, chunk_length=2)
    # three ones with a claimed weight of 2 (the weight check fails)
    row = [1, 1, 1, 0, *sv.field.to_ints(mh.flp.valid.encode(np.array([[1, 1, 0, 0]]))[0, 4:])]
    ok, _ = _run(mh, _enc(mh, [row]), encoded=True)
    assert not ok.any()


@pytest.mark.parametrize(
    "vdaf, meas",
    [
        (Prio3Count(), [1, 0]),
        (Prio3Sum(max_measurement=100), [99, 3]),
        (Prio3Histogram(length=6, chunk_length=3), [5, 2]),
        (Prio3SumVec(length=4, max_measurement=3, chunk_length=2), [[3, 2, 1, 0], [0, 0, 0, 1]]),
        (
            Prio3MultihotCountVec(length=4, max_weight=2, chunk_length=2),
            [[1, 0, 1, 0], [0, 0, 0, 0]],
        ),
    ],
    ids=["count", "sum", "histogram", "sumvec", "multihot"],
)
def test_a_tampered_leader_share_or_proof_is_rejected(vdaf: Prio3, meas: Any) -> None:
    def bump_meas(batch: Any) -> None:
        m = batch.input_shares[0].meas
        m[0, 0] = vdaf.field.add(m[0, 0:1], vdaf.field.array([1]))[0]

    def bump_proof(batch: Any) -> None:
        pr = batch.input_shares[0].proofs
        pr[0, -1] = vdaf.field.add(pr[0, -1:], vdaf.field.array([1]))[0]

    for tamper in (bump_meas, bump_proof):
        ok, _ = _run(vdaf, meas, tamper=tamper)
        assert ok.tolist() == [False, True], tamper.__name__


def test_per_report_api_raises_security_error_and_data_error() -> None:
    vdaf = Prio3Count()
    key, nonce = os.urandom(32), os.urandom(16)
    batch = vdaf.shard_encoded(CTX, _enc(vdaf, [[2]]), [nonce])
    public = vdaf.encode_public_share(None)
    inputs = [vdaf.encode_input_share(s, 0) for s in batch.input_shares]
    shares = [vdaf.verify_init(key, CTX, j, nonce, public, inputs[j])[1] for j in range(2)]
    with pytest.raises(SecurityError):
        vdaf.verifier_shares_to_message(CTX, shares)
    with pytest.raises(DataError):
        vdaf.verify_init(key, CTX, 0, nonce, public, inputs[0][:-1])
    with pytest.raises(DataError):
        vdaf.verify_init(key, CTX, 1, nonce, b"\x00" * 32, inputs[1])
    with pytest.raises(ParameterError, match="verify_key"):
        vdaf.verify_init(b"short", CTX, 0, nonce, public, inputs[0])
    with pytest.raises(ParameterError, match="measurement"):
        vdaf.shard(CTX, 2, nonce)


def test_bad_parameters_raise_parameter_error() -> None:
    with pytest.raises(ParameterError, match="shares"):
        Prio3Count(shares=1)
    with pytest.raises(ParameterError, match="max_weight"):
        Prio3MultihotCountVec(length=3, max_weight=4, chunk_length=1)
    with pytest.raises(ParameterError, match="chunk_length"):
        Prio3Histogram(length=3, chunk_length=0)
    with pytest.raises(ParameterError, match="max_measurement"):
        Prio3Sum(max_measurement=0)


def test_the_docs_example_runs_and_prints_the_histogram(capsys: Any) -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "vdaf.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/vdaf.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "[1, 0, 2, 0]"


@pytest.mark.parametrize(
    ("vdaf", "draw"),
    [
        (Prio3Count(), lambda r: int(r.integers(0, 2))),
        (Prio3Count(shares=3), lambda r: int(r.integers(0, 2))),
        (Prio3Sum(max_measurement=200), lambda r: int(r.integers(0, 201))),
        (Prio3Histogram(length=7, chunk_length=3), lambda r: int(r.integers(0, 7))),
        (Prio3Histogram(length=100, chunk_length=10, shares=3), lambda r: int(r.integers(0, 100))),
        (Prio3SumVec(length=5, max_measurement=3, chunk_length=2), lambda r: r.integers(0, 4, 5)),
        (
            Prio3MultihotCountVec(length=6, max_weight=2, chunk_length=2),
            lambda r: [1, 0, 0, 0, 1, 0],
        ),
        (
            Prio3SumVecWithMultiproof(
                field=Field64, num_proofs=3, length=4, max_measurement=1, chunk_length=2
            ),
            lambda r: r.integers(0, 2, 4),
        ),
    ],
)
def test_single_report_shard_is_the_batch_apis_bytes(vdaf: Prio3, draw: Any) -> None:
    """shard() (plain ints, fedstats.vdaf.single) gives the batch API's encodings for the same rand."""
    rng = np.random.default_rng(7)
    for _ in range(4):
        m, nonce, rand = draw(rng), os.urandom(16), os.urandom(vdaf.RAND_SIZE)
        public, shares = vdaf.shard(CTX, m, nonce, rand)
        batch = vdaf.shard_batch(CTX, [m], [nonce], [rand])
        want = vdaf.encode_public_share(
            None if batch.public_shares is None else batch.public_shares[0]
        )
        assert public == want
        assert shares == [vdaf.encode_input_share(s, 0) for s in batch.input_shares]
    with pytest.raises(ParameterError, match="measurement"):
        vdaf.shard(CTX, 10**6, os.urandom(16))
