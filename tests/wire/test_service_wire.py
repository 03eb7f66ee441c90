"""Canonical wire encoding, the encoder registry, and the client's policy and local budget."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedstats import wire
from fedstats.client import LocalBudget, Policy, RefusedTask, load_data
from fedstats.errors import BudgetExceededError, DataError, SecurityError
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.wire.registry import ANALYSES, resolve_encoder

finite_or_not = st.floats(allow_nan=True, allow_infinity=True)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**62), 2**62) | finite_or_not | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
np_arrays = arrays(
    st.sampled_from([np.int64, np.float64, np.int8, np.bool_]),
    st.tuples(st.integers(0, 3), st.integers(1, 3)),
)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


@given(values, np_arrays)
def test_round_trip_is_exact_and_canonical(v: object, arr: np.ndarray) -> None:
    doc = {"v": v, "a": arr}
    back = wire.loads(wire.dumps(doc))
    assert _same(back, doc)
    # key order never changes the bytes (nor the digest)
    assert wire.canonical_bytes(dict(reversed(list(doc.items())))) == wire.canonical_bytes(doc)
    json.loads(wire.dumps(doc))  # strict JSON: no NaN/Infinity literals


@pytest.mark.parametrize(
    "bad",
    [
        {"$ndarray": {"dtype": "float64", "shape": [3], "data": [1.0]}},
        {"$ndarray": {"dtype": "complex128", "shape": [1], "data": [1.0]}},
        {"$float": "huge"},
    ],
)
def test_malformed_arrays_are_refused(bad: object) -> None:
    with pytest.raises(DataError):
        wire.decode(bad)


def test_only_registered_encoders_run() -> None:
    ok = next(iter(ANALYSES[("exact-mean", 1)].encoders))
    assert callable(resolve_encoder(ok, "exact-mean", 1))
    for ref in ("os:system", "fedstats.analyses.heterogeneity.protocol:encode_centre"):
        with pytest.raises(SecurityError, match="not registered"):
            resolve_encoder(ref, "exact-mean", 1)


# the options each analysis requires (the rest take their config's defaults)
_REQUIRED: dict[str, dict[str, object]] = {
    "bitpushing-mean": {"low": 0.0, "high": 100.0},
    "exact-mean": {"clip": 100.0},
}


def _task(analysis: str, eps: float | None, **params: object) -> dict[str, object]:
    return {
        "analysis": analysis,
        "version": 1,
        "params": {**_REQUIRED.get(analysis, {}), **params},
        "privacy": {"epsilon": eps, "delta": 0.0},
    }


def test_policy_refuses_weaker_tasks() -> None:
    pol = Policy(allowed_analyses=("bitpushing-mean", "exact-mean"), max_epsilon=2.0, max_bits=1)
    pol.check(_task("bitpushing-mean", 1.0, bits_per_client=1))
    for task, why in [
        (_task("bitpushing-mean", 3.0), "max_epsilon"),
        (_task("bitpushing-mean", 1.0, bits_per_client=2), "bit"),
        (_task("exact-mean", None), "not private"),
        (_task("performance-gap", 1.0), "allowed analyses"),
        (
            _task("nonexistent", 1.0) | {"analysis": "bitpushing-mean", "version": 9},
            "not installed",
        ),
    ]:
        with pytest.raises(RefusedTask, match=why):
            pol.check(task)


def test_local_budget_persists_and_refuses(tmp_path: Path) -> None:
    f = tmp_path / "b.json"
    b = LocalBudget(f, epsilon=1.0, delta=0.0)
    b.charge("r1", PrivacyLoss(0.6, 0.0))
    b.charge("r1", PrivacyLoss(0.6, 0.0))  # the same run is charged once
    again = LocalBudget(f, epsilon=1.0, delta=0.0)
    assert again.spent() == (0.6, 0.0)
    assert again.status("r1") == "spent"
    with pytest.raises(BudgetExceededError, match=r"requested|exceed|remaining"):
        again.charge("r2", PrivacyLoss(0.6, 0.0))
    assert set(again.charges) == {"r1"}  # a refused charge records nothing
    # the file is plain JSON, and the older {run: [epsilon, delta]} form still reads
    data = json.loads(f.read_text())
    assert data["charges"]["r1"] == {"epsilon": 0.6, "delta": 0.0, "rho": None, "status": "spent"}
    f.write_text(json.dumps({"epsilon": 1.0, "delta": 0.0, "charges": {"old": [0.25, 0.0]}}))
    assert LocalBudget(f, epsilon=1.0, delta=0.0).spent() == (0.25, 0.0)


def test_local_budget_reserves_releases_and_composes_as_the_server_ledger(tmp_path: Path) -> None:
    """Reserve at check-in, spend before encoding, release what was never spent; the totals are those of
    :class:`PrivacyLedger` (the server's arithmetic), zCDP composition of Gaussian charges included."""
    from fedstats.privacy.ledger import PrivacyLedger

    b = LocalBudget(tmp_path / "b.json", epsilon=10.0, delta=1e-3)
    gauss = PrivacyLoss(1.5, 1e-6, 0.05)
    b.reserve("a", gauss)
    b.reserve("b", gauss)
    b.reserve("c", PrivacyLoss(0.7, 0.0))
    b.spend("a", gauss)
    assert (b.status("a"), b.status("b"), b.status("c")) == ("spent", "reserved", "reserved")
    assert b.release("b") is True and b.release("a") is False  # a spent charge is never given back
    b.reserve("d", PrivacyLoss(math.inf, 1.0))  # a non-private loss is not a DP charge
    assert "d" not in b.charges
    ref = PrivacyLedger()
    ref.spend_loss(gauss, label="a")
    ref.spend_loss(PrivacyLoss(0.7, 0.0), label="c")
    assert b.total() == ref.total()
    again = LocalBudget(tmp_path / "b.json", epsilon=10.0, delta=1e-3)
    assert again.total() == ref.total() and set(again.charges) == {"a", "c"}
    # with three Gaussian charges zCDP composes below the basic sum of their epsilons
    many = LocalBudget(None, epsilon=100.0, delta=1e-3)
    for k in range(3):
        many.spend(f"g{k}", PrivacyLoss(3.0, 1e-6, 0.01))
    ref = PrivacyLedger()
    for k in range(3):
        ref.spend_loss(PrivacyLoss(3.0, 1e-6, 0.01), label=f"g{k}")
    assert many.total() == ref.total() and many.total().rho == pytest.approx(0.03)


def test_data_file_vector_columns(tmp_path: Path) -> None:
    p = tmp_path / "d.csv"
    p.write_text("v,x[1],x[0]\n1,0.5,0.25\n2,0.75,1\n")
    cols = load_data(p)
    assert cols["x"].shape == (2, 2) and cols["x"][0].tolist() == [0.25, 0.5]
    (tmp_path / "e.csv").write_text("x[1]\n1\n")
    with pytest.raises(DataError, match=r"x\[0\]"):
        load_data(tmp_path / "e.csv")


def test_client_sdk_imports_light() -> None:
    code = (
        "import sys, fedstats.client; "
        "print([m for m in ('sqlalchemy', 'uvicorn', 'fastapi', 'pandas') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


_LEAF = st.one_of(
    st.integers(-(10**30), 10**30),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.none(),
)


@given(
    st.dictionaries(
        st.text(max_size=6),
        st.one_of(_LEAF, st.lists(st.integers(-(10**30), 10**30), max_size=6), st.lists(_LEAF)),
        max_size=5,
    )
)
def test_canonical_bytes_of_reports_and_flat_objects_are_the_encoder_s(doc: dict) -> None:
    """The fast path (flat values and lists of exact ints, as a report's ``{vector, count}``) gives
    the bytes of the generic encoder's walk, for every mix of leaves and lists it may meet."""
    from fedstats.wire.encoding import canonical_bytes, encode

    reference = json.dumps(
        encode(doc), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()
    assert canonical_bytes(doc) == reference
