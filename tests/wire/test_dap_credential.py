"""A DAP collector credential (Divvi Up's JSON layout) round-trips and refuses what cannot be right."""

from __future__ import annotations

import json

import pytest

from fedstats.dap.collector import CollectorCredential
from fedstats.dap.task import b64encode, vdaf_from_interop
from fedstats.errors import ParameterError
from fedstats.vdaf import Prio3Count, Prio3Histogram, Prio3Sum


def test_round_trip_and_refusals() -> None:
    cred = CollectorCredential.generate(9, "tok", random_bytes=lambda n: bytes(range(n)))
    text = json.dumps(cred.to_json())
    assert CollectorCredential.from_text(text) == cred
    obj = cred.to_json()
    other = CollectorCredential.generate(9, None).to_json()
    for key, value, field in (
        ("public_key", other["public_key"], "credential.public_key"),  # not this private key's
        ("private_key", "AAAA", "credential.private_key"),
        ("kem", "P256HkdfSha256", "credential.kem"),
        ("id", 256, "credential.id"),
        ("token", "", "credential.token"),
    ):
        with pytest.raises(ParameterError, match=f"^{field}="):
            CollectorCredential.from_json({**obj, key: value})
    with pytest.raises(ParameterError, match=r"^credential="):
        CollectorCredential.from_text("[1]")
    # the secrets never appear in an error message
    with pytest.raises(ParameterError) as err:
        CollectorCredential.from_json({**obj, "public_key": other["public_key"]})
    assert obj["private_key"] not in str(err.value) and other["public_key"] not in str(err.value)
    assert b64encode(cred.keypair.config.public_key) == obj["public_key"]


# Janus's sample credential (divviup/janus, collector/src/credential.rs, test serde_collector_credential;
# MPL-2.0), in the layout `divviup collector-credential generate` writes: its public key is its private key's.
JANUS_SAMPLE = """{
  "aead": "AesGcm128",
  "id": 66,
  "kdf": "Sha256",
  "kem": "X25519HkdfSha256",
  "private_key": "uKkTvzKLfYNUPZcoKI7hV64zS06OWgBkbivBL4Sw4mo",
  "public_key": "CcDghts2boltt9GQtBUxdUsVR83SCVYHikcGh33aVlU",
  "token": "Krx-CLfdWo1ULAfsxhr0rA"
}"""


def test_reads_janus_sample_credential() -> None:
    cred = CollectorCredential.from_text(JANUS_SAMPLE)
    assert cred.token == "Krx-CLfdWo1ULAfsxhr0rA"
    assert cred.keypair.config.encode().hex() == (
        "420020000100010020" + "09c0e086db366e896db7d190b41531754b1547cdd20956078a4706877dda5655"
    )
    assert json.loads(JANUS_SAMPLE) == cred.to_json()


def test_vdaf_from_interop() -> None:
    assert isinstance(vdaf_from_interop({"type": "Prio3Count"}), Prio3Count)
    s = vdaf_from_interop({"type": "Prio3Sum", "bits": "8"})
    assert (
        isinstance(s, Prio3Sum) and getattr(s.flp.valid, "max_measurement", None) == 255
    )  # VDAF-08 bits -> VDAF-20 bound
    h = vdaf_from_interop({"type": "Prio3Histogram", "length": 100, "chunk_length": 10})
    assert isinstance(h, Prio3Histogram) and h.flp.OUTPUT_LEN == 100
    for bad in ({"type": "Poplar1"}, {"type": "Prio3Sum", "bits": "x"}, ["Prio3Count"]):
        with pytest.raises(ParameterError, match=r"^vdaf"):
            vdaf_from_interop(bad)  # type: ignore[arg-type]
