"""The device's shortcuts outside the protocol give what the code they replaced gave.

Each is compared with the expression it replaced, copied here: certificate bodies' canonical bytes
remembered per process (and a body that only looks equal is not taken for a verified one), the
two-hop neighbourhood and the audited members from the ring, a tree run's bound roster, a report
summed in ``int64`` and a session's input read as ``int64`` bits.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.client import roster
from fedstats.client.data import column_sums
from fedstats.client.roster import body_bytes, checked_members, two_hop
from fedstats.client.secure_members import ring_input
from fedstats.client.secure_tree import bound_roster, check_certificate
from fedstats.errors import DataError, SecurityError
from fedstats.randomness import RandomSource
from fedstats.secagg.collusion import session_parameters
from fedstats.secagg.graph import public_neighbors, public_two_hop, valid_degree
from fedstats.secagg.identity import SIGNATURE_BYTES, SessionRoster
from fedstats.wire import auth
from fedstats.wire.cohort_tree import Leaf
from fedstats.wire.encoding import canonical_bytes

# -- certificate bodies ---------------------------------------------------------------------------

_values = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 1, -0.0, 0.0, 1.0, True, False]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=6), _values, max_size=6), min_size=1, max_size=6))
def test_remembered_body_bytes_are_the_canonical_bytes(bodies: list[dict[str, Any]]) -> None:
    # every body (and the same bodies again, remembered, and in reverse key order) is encoded as
    # canonical_bytes encodes it, whatever was remembered before: 1, 1.0 and True stay apart
    for body in bodies + bodies + [dict(reversed(b.items())) for b in bodies]:
        assert body_bytes(body) == canonical_bytes(dict(body))
    assert len(roster._BODIES) <= roster._MAX_BODIES


def test_remembered_bodies_are_bounded_and_non_flat_bodies_are_not_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(roster, "_BODIES", {})
    monkeypatch.setattr(roster, "_MAX_BODIES", 8)
    for i in range(30):
        assert body_bytes({"client_id": f"d{i}", "n": i}) == canonical_bytes(
            {"client_id": f"d{i}", "n": i}
        )
        assert len(roster._BODIES) <= 8
    roster._BODIES.clear()
    for body in ({"a": 1.0}, {"a": True}, {"a": None}, {"a": [1]}, {"a": {"b": 1}}):
        assert body_bytes(body) == canonical_bytes(body)
    assert roster._BODIES == {}
    with pytest.raises(DataError):
        body_bytes({1: "x"})  # type: ignore[dict-item]


def _cert(authority: Ed25519PrivateKey, key: Ed25519PrivateKey, cid: str) -> dict[str, Any]:
    cert = auth.issue_certificate(
        authority, client_id=cid, public_key=auth.public_key_hex(key), population="default"
    )
    return json.loads(json.dumps(cert.as_dict()))  # as a device parses it


def test_a_certificate_equal_but_for_a_value_s_type_is_checked_again_and_refused() -> None:
    # its int not_after verified (and its body remembered), the same body with a float not_after,
    # a bool-typed role or a str not_after is another signed text: its signature is checked, and fails
    authority, key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    a = auth.public_key_hex(authority)
    leaf = Leaf("dev-1", bytes(32), key.public_key().public_bytes_raw(), 1)
    verified: set[tuple[str, str, bytes]] = set()
    cert = _cert(authority, key, "dev-1")
    for _ in range(2):  # first verified, then remembered
        check_certificate(cert, leaf, authority=a, population="default", verified=verified)
    assert len(verified) == 1
    n = cert["body"]["not_after"]
    for change in ({"not_after": float(n)}, {"not_after": str(n)}, {"role": True}):
        other = {"body": {**cert["body"], **change}, "signature": cert["signature"]}
        with pytest.raises(SecurityError):
            check_certificate(other, leaf, authority=a, population="default", verified=verified)
    # the remembered body under another signature, or another population, or expired: refused
    forged = {**cert, "signature": "00" * 64}
    with pytest.raises(SecurityError, match="bad signature"):
        check_certificate(forged, leaf, authority=a, population="default", verified=verified)
    with pytest.raises(SecurityError, match="another population"):
        check_certificate(cert, leaf, authority=a, population="other", verified=verified)
    with pytest.raises(SecurityError, match="expired"):
        check_certificate(
            cert, leaf, authority=a, population="default", verified=verified, now=n + 1.0
        )
    assert len(verified) == 1


# -- the session graph and the audit ------------------------------------------------------------


def _two_hop_reference(n: int, k: int, session: bytes, index: int) -> list[int]:
    near = public_neighbors(n, k, session, [index])[index]
    rows = public_neighbors(n, k, session, sorted(near))
    return sorted(set().union(*rows.values()) - near - {index})


def _checked_reference(
    n: int, k: int, session: bytes, index: int, audit: int, rng: Any
) -> list[int]:
    neighbours = public_neighbors(n, k, session, [index])[index]
    others = np.array(sorted(set(range(n)) - neighbours - {index}), dtype=np.int64)
    count = min(int(audit), others.size)
    extra = rng.choice(others, size=count, replace=False) if count else np.empty(0, np.int64)
    return sorted({*neighbours, *(int(j) for j in extra)})


@st.composite
def _graphs(draw: st.DrawFn) -> tuple[int, int, bytes, int]:
    n = draw(st.integers(min_value=3, max_value=400))
    k = draw(st.sampled_from([k for k in range(2, n) if valid_degree(n, k)]))
    seed = hashlib.sha256(draw(st.binary(max_size=8))).digest()
    return n, k, seed, draw(st.integers(min_value=0, max_value=n - 1))


@settings(max_examples=300, deadline=None)
@given(_graphs())
def test_two_hop_from_the_ring_is_the_union_of_the_neighbours_rows(
    g: tuple[int, int, bytes, int],
) -> None:
    n, k, seed, index = g
    assert two_hop(n, k, seed, index) == _two_hop_reference(n, k, seed, index)
    assert public_two_hop(n, k, seed, index) == frozenset(_two_hop_reference(n, k, seed, index))


def test_two_hop_refuses_a_client_outside_the_session() -> None:
    from fedstats.errors import ParameterError

    with pytest.raises(ParameterError):
        public_two_hop(10, 4, bytes(32), 10)


@settings(max_examples=200, deadline=None)
@given(_graphs(), st.integers(min_value=0, max_value=40), st.integers(0, 2**32))
def test_checked_members_draw_what_they_drew(
    g: tuple[int, int, bytes, int], audit: int, seed: int
) -> None:
    n, k, session, index = g
    for source in (RandomSource(seed), RandomSource(_master=seed.to_bytes(32, "little"))):
        got = checked_members(n, k, session, index, audit, source.generator("a"))
        want = _checked_reference(n, k, session, index, audit, source.generator("a"))
        assert got == want


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 300), st.data())
def test_a_bound_roster_holds_only_the_device_s_key(n: int, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, n - 1))
    key, binding = hashlib.sha256(b"k").digest(), hashlib.sha256(b"b").digest()
    got = bound_roster(bytes(32), bytes(range(32)), n, index, key, binding)
    keys = tuple(key if j == index else b"" for j in range(n))
    assert got == SessionRoster(bytes(32), bytes(range(32)), keys, bytes(SIGNATURE_BYTES), binding)


# -- reports and inputs ---------------------------------------------------------------------------


def _sums_reference(reports: Any) -> list[int]:
    return [int(x) for x in reports.sum(axis=0, dtype=object)]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 12),
    st.integers(0, 6),
    st.sampled_from([np.int64, np.int8, np.uint64, np.int32]),
    st.integers(1, 64),
    st.integers(0, 2**32),
)
def test_column_sums_are_the_exact_sums(
    rows: int, dim: int, dtype: Any, bits: int, seed: int
) -> None:
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -(2 ** (bits - 1))), min(info.max, 2 ** (bits - 1))
    rng = np.random.default_rng(seed)
    reports = rng.integers(lo, hi, size=(rows, dim), dtype=dtype, endpoint=True)
    got = column_sums(reports)
    assert got == _sums_reference(reports) and all(type(x) is int for x in got)


def test_column_sums_of_extreme_and_non_integer_reports() -> None:
    top = np.iinfo(np.int64)
    cases = [
        np.array([[top.max, top.max], [1, top.min]], dtype=np.int64),  # int64 sums would overflow
        np.array([[top.min], [top.min]], dtype=np.int64),
        np.array([[2**64 - 1], [2**64 - 1]], dtype=np.uint64),
        np.array([[True, False], [True, True]]),
        np.array([[0.5, 2.0], [1.25, -3.0]]),
        np.array([[2**80, -1]], dtype=object),
    ]
    for reports in cases:
        assert column_sums(reports) == _sums_reference(reports)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-(2**70), 2**70),
            st.sampled_from([2**63, 2**64 - 1, 2**64, -(2**63) - 1]),
        ),
        max_size=40,
    )
)
def test_ring_input_is_each_entry_mod_two_to_the_64(vector: list[int]) -> None:
    want = np.array([int(x) % (1 << 64) for x in vector], dtype=np.uint64)
    got = ring_input(vector)
    assert got.dtype == np.uint64 and got.tolist() == want.tolist()


def test_ring_input_of_other_integers() -> None:
    for vector in ([np.int64(-3), 5], [True, 2], [np.uint64(2**64 - 1)], []):
        want = np.array([int(x) % (1 << 64) for x in vector], dtype=np.uint64)
        assert ring_input(vector).tolist() == want.tolist()


def test_remembered_tail_probabilities_are_the_computed_ones() -> None:
    from fedstats.secagg import collusion

    for n in (10, 65, 200, 1000):
        p = session_parameters(n)
        need = collusion.neighbours_to_isolate(p.n, p.k, p.t, p.min_survivors)
        for colluders in (0, need, n // 3, n - 1):
            args = (need, n - 1, colluders, p.k)
            assert collusion._sf(*args) == collusion._sf.__wrapped__(*args)
            assert collusion._sf(*args) == collusion._sf.__wrapped__(*args)  # remembered
