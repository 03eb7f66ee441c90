"""The device's shortcuts outside the protocol give what the code they replaced gave.

Each is compared with the expression it replaced, copied here: certificate bodies' canonical bytes
remembered per process (and a body that only looks equal is not taken for a verified one).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.client import roster
from fedstats.client.roster import body_bytes
from fedstats.client.secure_tree import check_certificate
from fedstats.errors import DataError, SecurityError
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
