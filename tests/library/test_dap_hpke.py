"""HPKE (RFC 9180) base mode for DAP against the RFC's test vectors (tests/dap_vectors/README.md).

RFC 9180 Appendix A.1.1, the suite DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 / AES-128-GCM, mode 0: the key derivation from the
seeds, the key schedule (key, base nonce, exporter secret), the sealed messages at sequence numbers 0, 1, 2, 4, 255 and 256 (each
with its own associated data), their opening, and the three secret exports must all match byte for byte.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedstats.dap import hpke
from fedstats.errors import DataError, SecurityError

VECTOR_FILE = (
    Path(__file__).resolve().parents[1]
    / "dap_vectors"
    / "rfc9180_a_1_1_base_x25519_sha256_aes128gcm.txt"
)


def _parse(text: str) -> tuple[dict[str, str], list[dict[str, str]], list[dict[str, str]]]:
    """Read the RFC's appendix text: ``key: hex`` lines, values wrapped onto following lines."""
    blocks = text.split("~~~")[1::2]  # the fenced blocks: setup, encryptions, exports
    parsed = []
    for block in blocks:
        records: list[dict[str, str]] = []
        for chunk in block.strip().split("\n\n"):
            rec: dict[str, str] = {}
            key = ""
            for line in chunk.splitlines():
                m = re.match(r"^([A-Za-z_ ]+):\s*(.*)$", line)
                if m:
                    key = m.group(1)
                    rec[key] = m.group(2).strip()
                else:
                    rec[key] += line.strip()
            records.append(rec)
        parsed.append(records)
    return parsed[0][0], parsed[1], parsed[2]


SETUP, ENCRYPTIONS, EXPORTS = _parse(VECTOR_FILE.read_text())


def _h(key: str) -> bytes:
    return bytes.fromhex(SETUP[key])


def test_vector_is_the_dap_suite() -> None:
    assert (SETUP["mode"], SETUP["kem_id"], SETUP["kdf_id"], SETUP["aead_id"]) == (
        "0",
        "32",
        "1",
        "1",
    )
    assert [int(e["sequence number"]) for e in ENCRYPTIONS] == [0, 1, 2, 4, 255, 256]
    assert len(EXPORTS) == 3


def test_derive_keypair_matches_rfc() -> None:
    assert hpke.derive_keypair(_h("ikmR")) == (_h("skRm"), _h("pkRm"))
    assert hpke.derive_keypair(_h("ikmE")) == (_h("skEm"), _h("pkEm"))


def test_sender_context_seals_the_rfc_ciphertexts() -> None:
    enc, ctx = hpke.setup_base_s(_h("pkRm"), _h("info"), random_bytes=lambda n: _h("ikmE")[:n])
    assert enc == _h("enc")
    assert (ctx.key, ctx.base_nonce, ctx.exporter_secret) == (
        _h("key"),
        _h("base_nonce"),
        _h("exporter_secret"),
    )
    for e in ENCRYPTIONS:
        ctx.seq = int(e["sequence number"])
        assert ctx._nonce() == bytes.fromhex(e["nonce"])
        assert ctx.seal(bytes.fromhex(e["aad"]), bytes.fromhex(e["pt"])) == bytes.fromhex(e["ct"])
    for x in EXPORTS:
        got = ctx.export(bytes.fromhex(x["exporter_context"]), int(x["L"]))
        assert got == bytes.fromhex(x["exported_value"])


def test_receiver_context_opens_the_rfc_ciphertexts() -> None:
    ctx = hpke.setup_base_r(_h("enc"), _h("skRm"), _h("info"))
    for e in ENCRYPTIONS:
        ctx.seq = int(e["sequence number"])
        assert ctx.open(bytes.fromhex(e["aad"]), bytes.fromhex(e["ct"])) == bytes.fromhex(e["pt"])


def test_wrong_aad_info_or_key_is_refused() -> None:
    kp = hpke.HpkeKeypair.generate(3)
    ct = hpke.seal(kp.config, b"dap-09 input share\x01\x02", b"share", b"aad")
    assert hpke.open_(kp, b"dap-09 input share\x01\x02", ct, b"aad") == b"share"
    with pytest.raises(SecurityError):
        hpke.open_(kp, b"dap-09 input share\x01\x02", ct, b"aaD")
    with pytest.raises(SecurityError):
        hpke.open_(kp, b"dap-09 input share\x01\x03", ct, b"aad")
    with pytest.raises(SecurityError):
        hpke.open_(hpke.HpkeKeypair.generate(3), b"dap-09 input share\x01\x02", ct, b"aad")
    with pytest.raises(SecurityError, match="unknown config id"):
        hpke.open_(hpke.HpkeKeypair.generate(4), b"dap-09 input share\x01\x02", ct, b"aad")
    with pytest.raises(SecurityError):  # an all-zero (small-order) encapsulated key
        hpke.open_(kp, b"i", hpke.HpkeCiphertext(3, bytes(32), ct.payload), b"aad")


def test_unsupported_suite_is_refused_by_name() -> None:
    cfg = hpke.HpkeConfig(1, 0x0010, 1, 1, bytes(65))
    with pytest.raises(DataError, match="not supported"):
        hpke.seal(cfg, b"i", b"p", b"a")


def test_config_list_round_trip() -> None:
    configs = hpke.HpkeConfigList(
        (hpke.HpkeKeypair.generate(1).config, hpke.HpkeKeypair.generate(2).config)
    )
    assert hpke.HpkeConfigList.decode(configs.encode()) == configs
    with pytest.raises(DataError):
        hpke.HpkeConfigList.decode(configs.encode()[:-1])
