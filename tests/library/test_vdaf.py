"""Prio3 against the official draft-irtf-cfrg-vdaf-20 test vectors (tests/vdaf_vectors/README.md).

Every positive vector must be reproduced byte for byte (public share, input shares, verifier shares,
verifier messages, output shares, aggregate shares, aggregate result), both through the batch API and
through the per-report byte API; every negative vector must be rejected at the step it targets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedstats.errors import SecurityError
from fedstats.vdaf import (
    Field64,
    Prio3,
    Prio3Count,
    Prio3Histogram,
    Prio3MultihotCountVec,
    Prio3Sum,
    Prio3SumVec,
    Prio3SumVecWithMultiproof,
)
from fedstats.vdaf.xof import XofTurboShake128

VECTORS = Path(__file__).resolve().parents[1] / "vdaf_vectors"
FILES = sorted(p.name for p in VECTORS.glob("Prio3*.json"))
VARIANTS = ("Prio3Count", "Prio3Sum", "Prio3SumVec", "Prio3Histogram", "Prio3MultihotCountVec")


def _load(name: str) -> dict[str, Any]:
    return json.loads((VECTORS / name).read_text())


def _variant(name: str, tv: dict[str, Any]) -> Prio3:
    kind = name.split("_")[0]
    shares = tv["shares"]
    if kind == "Prio3Count":
        return Prio3Count(shares=shares)
    if kind == "Prio3Sum":
        return Prio3Sum(max_measurement=tv["max_measurement"], shares=shares)
    if kind == "Prio3SumVec":
        return Prio3SumVec(
            length=tv["length"],
            max_measurement=tv["max_measurement"],
            chunk_length=tv["chunk_length"],
            shares=shares,
        )
    if kind == "Prio3SumVecWithMultiproof":
        return Prio3SumVecWithMultiproof(
            field=Field64,
            num_proofs=3,
            length=tv["length"],
            max_measurement=tv["max_measurement"],
            chunk_length=tv["chunk_length"],
            shares=shares,
        )
    if kind == "Prio3Histogram":
        return Prio3Histogram(length=tv["length"], chunk_length=tv["chunk_length"], shares=shares)
    if kind == "Prio3MultihotCountVec":
        return Prio3MultihotCountVec(
            length=tv["length"],
            max_weight=tv["max_weight"],
            chunk_length=tv["chunk_length"],
            shares=shares,
        )
    raise AssertionError(f"unknown variant in {name}")


def test_every_variant_has_positive_and_the_draft_negative_vectors() -> None:
    for v in VARIANTS:
        assert any(f.startswith(v + "_") and f.split("_")[-1][0].isdigit() for f in FILES), v
    negatives = [f for f in FILES if "_bad_" in f]
    assert len(negatives) == 8, negatives


def test_xof_turboshake128_vector() -> None:
    from fedstats.vdaf.field import Field128

    tv = _load("XofTurboShake128.json")
    seed, dst, binder = (bytes.fromhex(tv[k]) for k in ("seed", "dst", "binder"))
    assert XofTurboShake128.derive_seed(seed, dst, binder).hex() == tv["derived_seed"]
    vec = XofTurboShake128.expand_into_vec(Field128, seed, dst, binder, tv["length"])
    assert Field128.encode(vec).hex() == tv["expanded_vec_field128"]


POSITIVE = [f for f in FILES if "_bad_" not in f]
NEGATIVE = [f for f in FILES if "_bad_" in f]


@pytest.mark.parametrize("name", POSITIVE)
def test_positive_vector_batch_api(name: str) -> None:
    tv = _load(name)
    vdaf = _variant(name, tv)
    key, ctx = bytes.fromhex(tv["verify_key"]), bytes.fromhex(tv["ctx"])
    reports = tv["reports"]
    nonces = [bytes.fromhex(r["nonce"]) for r in reports]
    rands = [bytes.fromhex(r["rand"]) for r in reports]
    batch = vdaf.shard_batch(ctx, [r["measurement"] for r in reports], nonces, rands)
    for i, r in enumerate(reports):
        ps = None if batch.public_shares is None else batch.public_shares[i]
        assert vdaf.encode_public_share(ps).hex() == r["public_share"]
        for j in range(vdaf.SHARES):
            assert vdaf.encode_input_share(batch.input_shares[j], i).hex() == r["input_shares"][j]

    # verification from the vector's own encodings (decoding is part of what is tested)
    publics = [vdaf.decode_public_share(bytes.fromhex(r["public_share"])) for r in reports]
    pub_arg = None if publics[0] is None else [p for p in publics if p is not None]
    states, vshares = [], []
    for j in range(vdaf.SHARES):
        shares = vdaf.decode_input_shares(j, [bytes.fromhex(r["input_shares"][j]) for r in reports])
        st, vs = vdaf.verify_init_batch(key, ctx, j, nonces, pub_arg, shares)
        for i, r in enumerate(reports):
            assert vdaf.encode_verifier_share(vs, i).hex() == r["verifier_shares"][0][j]
        states.append(st)
        vshares.append(vs)
    messages, ok = vdaf.verifier_shares_to_message_batch(ctx, vshares)
    assert ok.all()
    assert [m.hex() if m is not None else None for m in messages] == [
        r["verifier_messages"][0] for r in reports
    ]
    agg_shares = []
    for j in range(vdaf.SHARES):
        out, ok_j = vdaf.verify_next_batch(states[j], messages)
        assert ok_j.all()
        for i, r in enumerate(reports):
            assert vdaf.field.encode(out[i]).hex() == r["out_shares"][j]
        agg = vdaf.aggregate(out, ok_j)
        assert vdaf.encode_agg_share(agg).hex() == tv["agg_shares"][j]
        agg_shares.append(vdaf.decode_agg_share(bytes.fromhex(tv["agg_shares"][j])))
    assert vdaf.unshard(agg_shares, len(reports)) == tv["agg_result"]


@pytest.mark.parametrize("name", [f for f in POSITIVE if f.endswith("_0.json")])
def test_positive_vector_per_report_api(name: str) -> None:
    tv = _load(name)
    vdaf = _variant(name, tv)
    key, ctx = bytes.fromhex(tv["verify_key"]), bytes.fromhex(tv["ctx"])
    r = tv["reports"][0]
    nonce = bytes.fromhex(r["nonce"])
    public, inputs = vdaf.shard(ctx, r["measurement"], nonce, bytes.fromhex(r["rand"]))
    assert public.hex() == r["public_share"]
    assert [s.hex() for s in inputs] == r["input_shares"]
    inits = [vdaf.verify_init(key, ctx, j, nonce, public, inputs[j]) for j in range(vdaf.SHARES)]
    assert [v.hex() for _, v in inits] == r["verifier_shares"][0]
    msg = vdaf.verifier_shares_to_message(ctx, [v for _, v in inits])
    assert msg.hex() == r["verifier_messages"][0]
    outs = [vdaf.verify_next(st, msg) for st, _ in inits]
    assert [vdaf.field.encode(o).hex() for o in outs] == r["out_shares"]


@pytest.mark.parametrize("name", NEGATIVE)
def test_negative_vector_is_rejected_at_its_step(name: str) -> None:
    tv = _load(name)
    vdaf = _variant(name, tv)
    key, ctx = bytes.fromhex(tv["verify_key"]), bytes.fromhex(tv["ctx"])
    (r,) = tv["reports"]
    nonce = bytes.fromhex(r["nonce"])
    public = bytes.fromhex(r["public_share"])
    states: dict[int, Any] = {}
    vshares: dict[int, bytes] = {}
    failed_at = None
    for op in tv["operations"]:
        kind = op["operation"]
        if kind == "verify_init":
            j = op["aggregator_id"]
            st, vs = vdaf.verify_init(
                key, ctx, j, nonce, public, bytes.fromhex(r["input_shares"][j])
            )
            assert op["success"]
            assert vs.hex() == r["verifier_shares"][0][j]
            states[j], vshares[j] = st, vs
        elif kind == "verifier_shares_to_message":
            if op["success"]:
                vdaf.verifier_shares_to_message(ctx, [vshares[j] for j in range(vdaf.SHARES)])
            else:
                with pytest.raises(SecurityError, match="proof verifier check failed"):
                    vdaf.verifier_shares_to_message(ctx, [vshares[j] for j in range(vdaf.SHARES)])
                failed_at = kind
        elif kind == "verify_next":
            j = op["aggregator_id"]
            msg = bytes.fromhex(r["verifier_messages"][0])
            assert not op["success"]
            with pytest.raises(SecurityError, match="joint randomness check failed"):
                vdaf.verify_next(states[j], msg)
            failed_at = kind
        else:
            raise AssertionError(f"unexpected operation {kind}")
    assert failed_at is not None
    assert [op["success"] for op in tv["operations"]].count(False) == 1


@pytest.mark.parametrize("name", NEGATIVE)
def test_negative_vector_is_rejected_by_the_batch_api(name: str) -> None:
    tv = _load(name)
    vdaf = _variant(name, tv)
    key, ctx = bytes.fromhex(tv["verify_key"]), bytes.fromhex(tv["ctx"])
    (r,) = tv["reports"]
    nonces = [bytes.fromhex(r["nonce"])]
    public = vdaf.decode_public_share(bytes.fromhex(r["public_share"]))
    inits = [
        vdaf.verify_init_batch(
            key,
            ctx,
            j,
            nonces,
            None if public is None else [public],
            vdaf.decode_input_shares(j, [bytes.fromhex(r["input_shares"][j])]),
        )
        for j in range(vdaf.SHARES)
    ]
    if name.endswith("bad_verifier_message.json"):
        _, ok = vdaf.verify_next_batch(inits[0][0], [bytes.fromhex(r["verifier_messages"][0])])
    else:
        _, ok = vdaf.verifier_shares_to_message_batch(ctx, [vs for _, vs in inits])
    assert not ok.any()
    assert np.asarray(ok).shape == (1,)


def test_turboshake_backends_agree_and_the_vectors_pass_on_the_public_one(monkeypatch: Any) -> None:
    import os

    from fedstats.vdaf import xof

    msgs = [os.urandom(k) for k in (0, 1, 77, 168, 169, 500)]
    for nbytes in (1, 32, 168, 1000):
        assert xof._turboshake_raw(msgs, nbytes) == xof._turboshake_public(msgs, nbytes)
    monkeypatch.setattr(xof, "_BACKEND", xof._turboshake_public)
    test_positive_vector_batch_api("Prio3Histogram_1.json")
    test_positive_vector_batch_api("Prio3Sum_2.json")


def test_rejection_sampling_continues_the_stream_in_order() -> None:
    """A field that rejects half of all draws exercises the redraw path of expand_into_vecs."""
    import os

    import numpy.typing as npt
    from Crypto.Hash import TurboSHAKE128

    from fedstats.vdaf.xof import expand_into_vecs

    class HalfRejecting(Field64):
        @classmethod
        def _from_bytes(cls, data: bytes) -> tuple[Any, npt.NDArray[np.bool_]]:
            arr = np.frombuffer(data, dtype="<u8").astype(np.uint64)
            return arr, arr < np.uint64(2**63)

    def naive(seed: bytes, dst: bytes, binder: bytes, length: int) -> list[int]:
        h = TurboSHAKE128.new(
            domain=1, data=len(dst).to_bytes(2, "little") + dst + bytes([32]) + seed + binder
        )
        out: list[int] = []
        while len(out) < length:
            x = int.from_bytes(h.read(8), "little")
            if x < 2**63:
                out.append(x)
        return out

    seeds = [os.urandom(32) for _ in range(5)]
    binders = [bytes([i]) for i in range(5)]
    got = expand_into_vecs(HalfRejecting, seeds, b"dst", binders, 40)
    assert got.tolist() == [naive(s, b"dst", b, 40) for s, b in zip(seeds, binders, strict=True)]
    one = XofTurboShake128.expand_into_vec(HalfRejecting, seeds[0], b"dst", binders[0], 40)
    assert one.tolist() == naive(seeds[0], b"dst", binders[0], 40)


@pytest.mark.parametrize("name", POSITIVE)
def test_selected_reports_verify_as_in_the_vector(name: str) -> None:
    """``select`` keeps the chosen reports' states and verifier shares, in the order asked."""
    tv = _load(name)
    vdaf = _variant(name, tv)
    key, ctx = bytes.fromhex(tv["verify_key"]), bytes.fromhex(tv["ctx"])
    reports = tv["reports"]
    rows = list(range(len(reports)))[::-2]  # every other report, last first
    nonces = [bytes.fromhex(r["nonce"]) for r in reports]
    publics = [vdaf.decode_public_share(bytes.fromhex(r["public_share"])) for r in reports]
    pub_arg = None if publics[0] is None else [p for p in publics if p is not None]
    states, vshares = [], []
    for j in range(vdaf.SHARES):
        shares = vdaf.decode_input_shares(j, [bytes.fromhex(r["input_shares"][j]) for r in reports])
        st, vs = vdaf.verify_init_batch(key, ctx, j, nonces, pub_arg, shares)
        picked = vs.select(rows)
        for k, i in enumerate(rows):
            assert (
                vdaf.encode_verifier_share(picked, k).hex() == reports[i]["verifier_shares"][0][j]
            )
        states.append(st.select(rows))
        vshares.append(picked)
    messages, ok = vdaf.verifier_shares_to_message_batch(ctx, vshares)
    assert ok.all() and len(messages) == len(rows)
    for j in range(vdaf.SHARES):
        out, ok_j = vdaf.verify_next_batch(states[j], messages)
        assert ok_j.all()
        assert [vdaf.field.encode(out[k]).hex() for k in range(len(rows))] == [
            reports[i]["out_shares"][j] for i in rows
        ]
