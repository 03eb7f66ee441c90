"""HPKE (RFC 9180) base mode for DAP: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM.

DAP seals each input share and each aggregate share to its recipient with HPKE in base mode, binding
them to their context with an *info* string (``"dap-09 input share" || sender role || recipient role``)
and *associated data* (the task id, report metadata and public share; DAP-09 §4.4.2, §4.6.4). The
``cryptography`` package's own HPKE API has no associated-data argument, so the RFC's key schedule is
built here from its primitives (X25519, HMAC-SHA256, HKDF-Expand, AES-GCM); the RFC's published test
vectors for this suite check it (``tests/library/test_dap_hpke.py``).

An HPKE configuration (:class:`HpkeConfig`) is what an aggregator or collector publishes: a one-byte id,
the three algorithm ids and the public key; :class:`HpkeConfigList` is the body of ``GET /hpke_config``.

Examples
--------
>>> kp = HpkeKeypair.generate(config_id=7)
>>> ct = seal(kp.config, b"info", b"secret", b"aad")
>>> open_(kp, b"info", ct, b"aad")
b'secret'
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from fedstats.dap.codec import OPAQUE16, OPAQUE32, U8, U16, Struct, u8, u16, vector16
from fedstats.errors import DataError, SecurityError

__all__ = [
    "AEAD_AES_128_GCM",
    "KDF_HKDF_SHA256",
    "KEM_X25519_HKDF_SHA256",
    "HpkeCiphertext",
    "HpkeConfig",
    "HpkeConfigList",
    "HpkeContext",
    "HpkeKeypair",
    "derive_keypair",
    "open_",
    "public_key_of",
    "seal",
    "setup_base_r",
    "setup_base_s",
]

KEM_X25519_HKDF_SHA256 = 0x0020
KDF_HKDF_SHA256 = 0x0001
AEAD_AES_128_GCM = 0x0001
MODE_BASE = 0x00
N_SECRET = N_H = N_PK = N_SK = 32  # RFC 9180 Table 2/3: DHKEM(X25519) and HKDF-SHA256 sizes
N_K, N_N, N_T = 16, 12, 16  # AES-128-GCM key, nonce and tag sizes (Table 5)

_KEM_SUITE = b"KEM" + u16(KEM_X25519_HKDF_SHA256)
_HPKE_SUITE = b"HPKE" + u16(KEM_X25519_HKDF_SHA256) + u16(KDF_HKDF_SHA256) + u16(AEAD_AES_128_GCM)


def _extract(salt: bytes, ikm: bytes) -> bytes:
    h = hmac.HMAC(salt, hashes.SHA256())
    h.update(ikm)
    return h.finalize()


def _expand(prk: bytes, info: bytes, length: int) -> bytes:
    return HKDFExpand(hashes.SHA256(), length, info).derive(prk)


def _labeled_extract(suite: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    """RFC 9180 §4: ``Extract(salt, "HPKE-v1" || suite_id || label || ikm)``."""
    return _extract(salt, b"HPKE-v1" + suite + label + ikm)


def _labeled_expand(suite: bytes, prk: bytes, label: bytes, info: bytes, length: int) -> bytes:
    """RFC 9180 §4: ``Expand(prk, I2OSP(L, 2) || "HPKE-v1" || suite_id || label || info, L)``."""
    return _expand(prk, u16(length) + b"HPKE-v1" + suite + label + info, length)


def _public_bytes(sk: X25519PrivateKey) -> bytes:
    return sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def public_key_of(private_key: bytes) -> bytes:
    """The X25519 public key (32 raw bytes) of a 32-byte private key."""
    return _public_bytes(X25519PrivateKey.from_private_bytes(private_key))


def _dh(sk: X25519PrivateKey, pk_bytes: bytes) -> bytes:
    try:
        dh = sk.exchange(X25519PublicKey.from_public_bytes(pk_bytes))
    except ValueError as exc:  # wrong length or an all-zero shared secret (RFC 9180 §7.1.4)
        raise SecurityError(f"HPKE: invalid X25519 public key ({exc})") from None
    if dh == bytes(32):
        raise SecurityError("HPKE: X25519 shared secret is all zeros (small-order public key)")
    return dh


def _extract_and_expand(dh: bytes, kem_context: bytes) -> bytes:
    eae_prk = _labeled_extract(_KEM_SUITE, b"", b"eae_prk", dh)
    return _labeled_expand(_KEM_SUITE, eae_prk, b"shared_secret", kem_context, N_SECRET)


def derive_keypair(ikm: bytes) -> tuple[bytes, bytes]:
    """DeriveKeyPair for DHKEM(X25519, HKDF-SHA256) (RFC 9180 §7.1.3).

    Parameters
    ----------
    ikm : bytes
        Input keying material, at least 32 bytes.

    Returns
    -------
    (bytes, bytes)
        The 32-byte private key and the 32-byte public key.
    """
    if len(ikm) < N_SK:
        raise DataError(f"ikm must hold at least {N_SK} bytes, got {len(ikm)}")
    dkp_prk = _labeled_extract(_KEM_SUITE, b"", b"dkp_prk", ikm)
    sk = _labeled_expand(_KEM_SUITE, dkp_prk, b"sk", b"", N_SK)
    return sk, _public_bytes(X25519PrivateKey.from_private_bytes(sk))


class HpkeContext:
    """An HPKE encryption context after the key schedule (RFC 9180 §5.1, §5.2).

    DAP uses each context for one message; the sequence number is kept so that the RFC's test vectors,
    which seal several messages in one context, can be checked.
    """

    def __init__(self, shared_secret: bytes, info: bytes) -> None:
        psk_id_hash = _labeled_extract(_HPKE_SUITE, b"", b"psk_id_hash", b"")
        info_hash = _labeled_extract(_HPKE_SUITE, b"", b"info_hash", info)
        ks_context = u8(MODE_BASE) + psk_id_hash + info_hash
        secret = _labeled_extract(_HPKE_SUITE, shared_secret, b"secret", b"")
        self.key = _labeled_expand(_HPKE_SUITE, secret, b"key", ks_context, N_K)
        self.base_nonce = _labeled_expand(_HPKE_SUITE, secret, b"base_nonce", ks_context, N_N)
        self.exporter_secret = _labeled_expand(_HPKE_SUITE, secret, b"exp", ks_context, N_H)
        self.seq = 0
        self._aead = AESGCM(self.key)

    def _nonce(self) -> bytes:
        seq = self.seq.to_bytes(N_N, "big")
        return bytes(a ^ b for a, b in zip(self.base_nonce, seq, strict=True))

    def seal(self, aad: bytes, pt: bytes) -> bytes:
        """Encrypt ``pt`` with associated data ``aad`` (ContextS.Seal)."""
        ct = self._aead.encrypt(self._nonce(), pt, aad)
        self.seq += 1
        return ct

    def open(self, aad: bytes, ct: bytes) -> bytes:
        """Decrypt ``ct`` (ContextR.Open); raise SecurityError if it does not authenticate."""
        try:
            pt = self._aead.decrypt(self._nonce(), ct, aad)
        except InvalidTag:
            raise SecurityError(
                "HPKE: ciphertext does not authenticate (wrong key, info or aad)"
            ) from None
        self.seq += 1
        return pt

    def export(self, exporter_context: bytes, length: int) -> bytes:
        """Secret export (RFC 9180 §5.3)."""
        return _labeled_expand(_HPKE_SUITE, self.exporter_secret, b"sec", exporter_context, length)


def setup_base_s(
    pk_r: bytes, info: bytes, *, random_bytes: Callable[[int], bytes] = os.urandom
) -> tuple[bytes, HpkeContext]:
    """SetupBaseS (RFC 9180 §5.1.1): encapsulate to ``pk_r``; return ``(enc, context)``.

    ``random_bytes(32)`` supplies the ephemeral key's input keying material (OS entropy by default).
    """
    if len(pk_r) != N_PK:
        raise DataError(f"HPKE public key must be {N_PK} bytes, got {len(pk_r)}")
    sk_e_bytes, enc = derive_keypair(random_bytes(N_SK))
    dh = _dh(X25519PrivateKey.from_private_bytes(sk_e_bytes), pk_r)
    return enc, HpkeContext(_extract_and_expand(dh, enc + pk_r), info)


def setup_base_r(enc: bytes, sk_r: bytes, info: bytes) -> HpkeContext:
    """SetupBaseR (RFC 9180 §5.1.1): decapsulate ``enc`` with private key ``sk_r``."""
    if len(enc) != N_PK:
        raise SecurityError(f"HPKE: encapsulated key must be {N_PK} bytes, got {len(enc)}")
    sk = X25519PrivateKey.from_private_bytes(sk_r)
    dh = _dh(sk, enc)
    return HpkeContext(_extract_and_expand(dh, enc + _public_bytes(sk)), info)


@dataclass(frozen=True)
class HpkeConfig(Struct):
    """An HPKE configuration (DAP-09 §4.5.1): ``config_id``, algorithm ids and the public key."""

    id: Annotated[int, U8]
    kem_id: Annotated[int, U16]
    kdf_id: Annotated[int, U16]
    aead_id: Annotated[int, U16]
    public_key: Annotated[bytes, OPAQUE16]

    @property
    def supported(self) -> bool:
        """True for the one suite implemented here."""
        return (self.kem_id, self.kdf_id, self.aead_id) == (
            KEM_X25519_HKDF_SHA256,
            KDF_HKDF_SHA256,
            AEAD_AES_128_GCM,
        ) and len(self.public_key) == N_PK


@dataclass(frozen=True)
class HpkeConfigList(Struct):
    """``HpkeConfigList`` (DAP-09 §4.5.1), media type ``application/dap-hpke-config-list``."""

    MEDIA_TYPE = "application/dap-hpke-config-list"
    configs: Annotated[tuple[HpkeConfig, ...], vector16(HpkeConfig)]


@dataclass(frozen=True)
class HpkeCiphertext(Struct):
    """``HpkeCiphertext`` (DAP-09 §4.1): config id, encapsulated key and AEAD payload."""

    config_id: Annotated[int, U8]
    enc: Annotated[bytes, OPAQUE16]
    payload: Annotated[bytes, OPAQUE32]


@dataclass(frozen=True)
class HpkeKeypair:
    """An HPKE configuration with its X25519 private key (32 raw bytes)."""

    config: HpkeConfig
    private_key: bytes

    @classmethod
    def generate(
        cls, config_id: int, *, random_bytes: Callable[[int], bytes] = os.urandom
    ) -> HpkeKeypair:
        """A fresh keypair for the X25519/HKDF-SHA256/AES-128-GCM suite.

        Parameters
        ----------
        config_id : int
            The configuration id in [0, 255].
        random_bytes : callable, optional
            Source of the 32 bytes of key material (OS entropy by default).
        """
        if not 0 <= config_id <= 255:
            raise DataError(f"config_id={config_id!r} is invalid: expected an integer in [0, 255]")
        sk, pk = derive_keypair(random_bytes(N_SK))
        config = HpkeConfig(
            config_id, KEM_X25519_HKDF_SHA256, KDF_HKDF_SHA256, AEAD_AES_128_GCM, pk
        )
        return cls(config, sk)

    def private_key_pem(self) -> bytes:
        """The private key as unencrypted PKCS#8 PEM (for storage)."""
        return X25519PrivateKey.from_private_bytes(self.private_key).private_bytes(
            Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()
        )


def seal(
    config: HpkeConfig,
    info: bytes,
    plaintext: bytes,
    aad: bytes,
    *,
    random_bytes: Callable[[int], bytes] = os.urandom,
) -> HpkeCiphertext:
    """Single-shot base-mode seal to ``config`` (RFC 9180 §6.1), as DAP uses it.

    Raises
    ------
    DataError
        If ``config`` names a suite other than X25519/HKDF-SHA256/AES-128-GCM.
    """
    if not config.supported:
        raise DataError(
            f"HPKE config {config.id}: suite (kem {config.kem_id:#06x}, kdf {config.kdf_id:#06x}, "
            f"aead {config.aead_id:#06x}) is not supported: expected (0x0020, 0x0001, 0x0001)"
        )
    enc, ctx = setup_base_s(config.public_key, info, random_bytes=random_bytes)
    return HpkeCiphertext(config.id, enc, ctx.seal(aad, plaintext))


def open_(keypair: HpkeKeypair, info: bytes, ciphertext: HpkeCiphertext, aad: bytes) -> bytes:
    """Single-shot base-mode open (RFC 9180 §6.1).

    Raises
    ------
    SecurityError
        If the config id differs, the encapsulated key is invalid or the payload does not authenticate.
    """
    if ciphertext.config_id != keypair.config.id:
        raise SecurityError(
            f"HPKE: unknown config id {ciphertext.config_id} (have {keypair.config.id})"
        )
    return setup_base_r(ciphertext.enc, keypair.private_key, info).open(aad, ciphertext.payload)
