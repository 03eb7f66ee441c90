"""The seed transcript's digests, seeds and key derivations, pinned to the bytes the first versions gave.

Devices and the server compute :func:`fedstats.wire.seeding.commitments_digest`, the run seed and the
HKDF keys of secure aggregation independently: a faster implementation on one side must give the very
same bytes. The expected values below were computed by the per-member loops and the two-HMAC HKDF these
functions have (issue 40: any faster version must keep them), on a fixed transcript (non-ASCII client id, slot
counts above 1, an upper-case key, withholders).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest

from fedstats.errors import SecurityError
from fedstats.secagg import crypto
from fedstats.wire import seeding

RUN = "run-pinned"
N = 40
VALUES = [hashlib.sha256(b"v%d" % i).digest() for i in range(N)]
IDS = [f"device-{i:03d}" + ("-\u00e9" if i == 7 else "") for i in range(N)]
KEYS = [hashlib.sha256(b"k%d" % i).hexdigest() for i in range(N)]

ROSTER_DIGEST = "097e0684d32b9d09e7b65fe6bc5849f05e51fd3f650e8f421f1b1eb7ba1381ad"
LIST_DIGEST = "fe579635fd5538c87b2752eea710d9aaa08e7d3837f830bf743b916c0962ebbf"
SEED = "715e0905667573cd87ec0c19674013db2ccc05acbd19ac7606ac6dd6f7bae001"
SEED_WITHHELD = "ee210c35d627ecfc2b8d62d044236e5fd7e7a4e28c0eedb4bd9400bfe91b9081"


def _rows() -> list[list[Any]]:
    rows, start = [], 0
    for i in range(N):
        count = 1 + i % 3
        commitment = seeding.commitment(RUN, IDS[i], VALUES[i])
        key = KEYS[i].upper() if i == 2 else KEYS[i]
        rows.append([IDS[i], commitment, VALUES[i].hex(), start, count, key])
        start += count
    return rows


def test_digests_and_seeds_are_the_pinned_bytes() -> None:
    tr = {"members": _rows()}
    entries, keys = seeding.entries_of(tr, max_members=N), seeding.keys_of(tr)
    assert keys == KEYS  # lower-cased
    assert seeding.commitments_digest(RUN, entries, keys) == ROSTER_DIGEST
    assert seeding.commitments_digest(RUN, entries) == LIST_DIGEST
    assert seeding.run_seed(RUN, entries, VALUES, keys).hex() == SEED
    withheld: list[bytes | None] = list(VALUES)
    withheld[3] = withheld[30] = None
    assert seeding.run_seed(RUN, entries, withheld, keys).hex() == SEED_WITHHELD
    reveals = [v.hex() for v in VALUES]
    got = seeding.verify_reveals(
        RUN, IDS[7], entries, reveals, SEED, digest=ROSTER_DIGEST, own_value=VALUES[7]
    )
    assert got.hex() == SEED
    tr["seed"] = SEED
    got = seeding.verify_transcript(
        RUN, IDS[0], tr, seen_digest=ROSTER_DIGEST, own_value=VALUES[0], roster=True
    )
    assert got.hex() == SEED


def test_a_spaced_commitment_is_hashed_as_its_bytes_as_before() -> None:
    # bytes.fromhex skips whitespace: a 64-character commitment holding spaces was accepted by
    # entries_of and hashed as the 31 bytes it decodes to; the one-call paths keep that
    rows = _rows()
    c = rows[5][1]
    rows[5][1] = c[:2] + " " + c[2:62] + " "
    entries = seeding.entries_of({"members": rows})
    assert seeding.commitments_digest(RUN, entries, KEYS) == (
        "fead0ad0e73829adb6ec7a182f221947656cafc8a4efed81391a19531ffd2e16"
    )
    assert seeding.commitments_digest(RUN, entries) == (
        "6180057533323931fd80c335d6485c54f81bf5e15bbcc8f5eebeb40240f8ae45"
    )
    with pytest.raises(SecurityError, match="does not open its commitment"):
        seeding.run_seed(RUN, entries, VALUES, KEYS)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        (1, "zz" * 32),  # not hex
        (1, "ab" * 31),  # short
        (1, 7),  # not a string
        (3, True),  # a bool slot
        (4, 1.0),  # a float slot
        (5, "ab" * 31),  # short key
        (5, "g" * 64),  # not hex
    ],
)
def test_malformed_rows_are_refused_as_before(column: int, value: Any) -> None:
    rows = _rows()
    rows[11][column] = value
    tr = {"members": rows}
    with pytest.raises(SecurityError):
        seeding.entries_of(tr)
        seeding.keys_of(tr)


def test_a_repeated_key_and_a_wrong_reveal_are_refused() -> None:
    rows = _rows()
    rows[9][5] = rows[4][5]
    with pytest.raises(SecurityError, match="twice"):
        seeding.keys_of({"members": rows})
    entries = seeding.entries_of({"members": _rows()})
    bad = list(VALUES)
    bad[17] = bytes(32)
    with pytest.raises(SecurityError, match="device-017"):
        seeding.run_seed(RUN, entries, bad, KEYS)
    with pytest.raises(SecurityError, match="32 bytes"):
        seeding.commitments_digest(RUN, entries, [*KEYS[:-1], "ab" * 31])


def test_hkdf_outputs_are_the_pinned_bytes() -> None:
    shared, session = bytes(range(32)), bytes(range(32, 64))
    got = crypto.derive_key(shared, session=session, label=crypto.LABEL_MASK, low=3, high=900)
    assert got.hex() == "2d0cbb98f4b3b28d8bd4b3652a18d8fae39bafe416a86148ed5ee9f3f92c7496"
    got = crypto.derive_key(shared, session=b"", label=crypto.LABEL_SHARE_ENCRYPTION, low=0, high=1)
    assert got.hex() == "22bd6c98220e5485433769c5882095eb1a460d8f6f6814ecb49c020af3393194"
    got = crypto.self_mask_seed(shared, 5, bytes(32))
    assert got.hex() == "908be144cebe5319b4cf84039e303bb57b61c458a221c327df21707830ab9747"
    # and RFC 5869 by its definition, for a salt longer than a block
    salt, info = bytes(range(100)), crypto.LABEL_MASK + (1).to_bytes(4, "little") * 2
    prk = hmac.digest(salt, shared, "sha256")
    want = hmac.digest(prk, info + b"\x01", "sha256")
    assert crypto.derive_key(shared, session=salt, label=crypto.LABEL_MASK, low=1, high=1) == want


def test_session_order_is_hmac_of_the_seed() -> None:
    # sessions_of orders the participants by HMAC-SHA256(seed, domain || client id)
    seed = hashlib.sha256(b"seed").digest()
    cohort = [(IDS[i], i, 1) for i in range(N)]
    seeding._ORDER_TAGS.clear()
    sessions = seeding.sessions_of(cohort, seed, 0, (0, N), 16, 2)

    def tag(cid: str) -> bytes:
        raw = cid.encode()
        msg = b"fedstats/service/session-order/v1\x00" + len(raw).to_bytes(2, "little") + raw
        return hmac.digest(seed, msg, "sha256")

    assert [c for s in sessions for c in s] == sorted(IDS, key=tag)
    assert [len(s) for s in sessions] == [13, 14, 13]  # round(i * 40 / 3) edges


def test_a_request_mac_is_hmac_sha256_of_the_signing_payload() -> None:
    from fedstats.wire import auth

    headers = auth.sign_request_with_key("k", bytes(range(32)), "dev", "POST", "/p", b"body")
    payload = auth.signing_payload(
        "POST", "/p", headers[auth.HEADER_TIMESTAMP], headers[auth.HEADER_NONCE], b"body"
    )
    want = hmac.digest(bytes(range(32)), payload, "sha256").hex()
    assert headers[auth.HEADER_SIGNATURE] == want
    assert len(headers[auth.HEADER_NONCE]) == 32
