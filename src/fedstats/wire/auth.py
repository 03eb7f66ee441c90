r"""Identities and signatures: Ed25519 keys, enrollment certificates, signed requests, operator tokens.

* An **enrollment authority** (not the server) holds an Ed25519 key and signs a *client certificate*
  ``{"role": "device", "client_id", "public_key", "population", "not_after", "authority"}`` (canonical
  JSON, :mod:`.encoding`); the server trusts the authority's public key and keeps only the clients' public
  keys. It also signs *analyst certificates* ``{"role": "analyst", "analyst", "public_key", "populations",
  "not_after", "authority"}``: the key that signs tasks (:mod:`fedstats.wire.tasks`) for those populations;
  devices pin the authority's key at enrollment and accept only tasks signed under such a certificate.
  A certificate of one role is never accepted for the other.
* Every **client request** carries ``X-Fedstats-Client``, ``X-Fedstats-Timestamp`` (Unix seconds),
  ``X-Fedstats-Nonce`` (random, 128 bits hex) and ``X-Fedstats-Signature``: the Ed25519 signature of
  ``"fedstats-v1\\n{METHOD}\\n{path}\\n{timestamp}\\n{nonce}\\n{sha256(body) hex}"``. The server refuses a
  timestamp outside its window and, for state-changing requests (POST), a nonce it has seen inside the
  window (replays); read-only polls (GET) are checked for signature and timestamp only.
* A device may instead authenticate its requests with a **request key** (:func:`open_request_key`): a
  32-byte HMAC-SHA256 key the server derives from its own secret, the key id, the client id and the
  device's enrolled public key, and hands the device once, in the answer to a request signed with its
  Ed25519 key (over TLS). Such a request carries ``X-Fedstats-Key-Id`` and, as ``X-Fedstats-Signature``,
  HMAC-SHA256 of the same payload under that key (:func:`sign_request_with_key`); the timestamp and
  nonce rules are unchanged. The key id ``"{expires}.{random}"`` states its expiry (Unix seconds, at most
  :data:`REQUEST_KEY_SECONDS` ahead), which the derivation binds. A key stops working when it expires,
  when the device's enrolled key changes, and when the server's secret changes (a restart, another
  server process): the device then signs with its Ed25519 key and opens a new one. Checking a MAC is two
  HMAC-SHA256 computations instead of an Ed25519 verification (issue 28).
* **Operators** present ``Authorization: Bearer <token>``; the server stores only SHA-256 of tokens.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from fedstats.errors import SecurityError
from fedstats.wire.encoding import canonical_bytes

__all__ = [
    "HEADER_CLIENT",
    "HEADER_KEY_ID",
    "HEADER_NONCE",
    "HEADER_OPEN_KEY",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "REQUEST_KEY_SECONDS",
    "REQUEST_KEY_SECRET_BYTES",
    "Certificate",
    "check_timestamp",
    "fingerprint",
    "hash_token",
    "issue_analyst_certificate",
    "issue_certificate",
    "new_token",
    "open_request_key",
    "private_key_from_hex",
    "public_key_from_hex",
    "public_key_hex",
    "sign_request",
    "sign_request_with_key",
    "signing_payload",
    "verify_certificate",
    "verify_request_mac",
    "verify_signature",
]

HEADER_CLIENT = "x-fedstats-client"
HEADER_TIMESTAMP = "x-fedstats-timestamp"
HEADER_NONCE = "x-fedstats-nonce"
HEADER_SIGNATURE = "x-fedstats-signature"
HEADER_KEY_ID = "x-fedstats-key-id"
HEADER_OPEN_KEY = "fedstats-request-key"
"""A work poll signed with the device key may ask (``1``) for a request key in its answer: the server
records the poll's nonce (a replayed poll opens no key) and answers the key in this header, the JSON of
:func:`open_request_key`, as ``POST /v1/client/request-key`` would, one request fewer per device."""

REQUEST_KEY_SECONDS = 3600
"""Life of a request key (:func:`open_request_key`), seconds."""

REQUEST_KEY_SECRET_BYTES = 32
"""Shortest server secret request keys are derived under (:func:`open_request_key`), bytes."""


def public_key_hex(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """Raw 32-byte public key as hex."""
    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def private_key_hex(key: Ed25519PrivateKey) -> str:
    """Raw 32-byte private key as hex (store only in a file readable by its owner)."""
    return key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    ).hex()


def _raw32(text: str, what: str) -> bytes:
    """The 32 raw bytes of a hex-encoded Ed25519 key, or a :class:`SecurityError` naming ``what``."""
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise SecurityError(f"a {what} key must be 32 bytes in hex")
    return raw


def public_key_from_hex(text: str) -> Ed25519PublicKey:
    """Parse a raw hex public key.

    Raises
    ------
    SecurityError
        If it is not 32 bytes of hex.
    """
    return Ed25519PublicKey.from_public_bytes(_raw32(text, "public"))


@functools.lru_cache(maxsize=1 << 16)
def _verifier(public_hex: str) -> Ed25519PublicKey:
    """:func:`public_key_from_hex`, kept for the next request of the same key.

    A server checks each enrolled device's key at every request; the parsed key is immutable, so it is
    parsed once. Invalid keys raise and are not kept.
    """
    return public_key_from_hex(public_hex)


def private_key_from_hex(text: str) -> Ed25519PrivateKey:
    """Parse a raw hex private key.

    Raises
    ------
    SecurityError
        If it is not 32 bytes of hex.
    """
    return Ed25519PrivateKey.from_private_bytes(_raw32(text, "private"))


def fingerprint(public_hex: str) -> str:
    """Short identifier of a public key: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(bytes.fromhex(public_hex)).hexdigest()[:16]


ROLES = ("device", "analyst")
_FIELDS = {
    "device": ("client_id", "public_key", "population", "not_after", "authority"),
    "analyst": ("analyst", "public_key", "populations", "not_after", "authority"),
}


@dataclass(frozen=True)
class Certificate:
    """A certificate issued by an enrollment authority: a device's or an analyst's.

    Attributes
    ----------
    body : dict
        A device's: ``role`` = ``"device"`` (absent in certificates issued before roles existed),
        ``client_id``, ``public_key`` (hex), ``population``, ``not_after`` (Unix seconds), ``authority``
        (fingerprint of the authority key). An analyst's: ``role`` = ``"analyst"``, ``analyst`` (name),
        ``public_key``, ``populations`` (list of the populations its tasks may address), ``not_after``,
        ``authority``.
    signature : str
        Hex Ed25519 signature of ``canonical_bytes(body)`` by the authority.
    """

    body: Mapping[str, Any]
    signature: str

    def as_dict(self) -> dict[str, Any]:
        """JSON form ``{"body": ..., "signature": ...}``."""
        return {"body": dict(self.body), "signature": self.signature}

    @property
    def role(self) -> str:
        """``"device"`` or ``"analyst"``."""
        return str(self.body.get("role", "device"))

    @classmethod
    def from_dict(cls, data: Any, role: str = "device") -> Certificate:
        """Parse the JSON form of a certificate of ``role`` (``"device"`` or ``"analyst"``).

        Raises
        ------
        SecurityError
            If fields are missing or of the wrong type, or the certificate is of another role.
        """
        try:
            body = dict(data["body"])
            sig = str(data["signature"])
            for k in _FIELDS[role]:
                body[k]
            if role == "analyst" and not (
                isinstance(body["populations"], list)
                and all(isinstance(p, str) for p in body["populations"])
            ):
                raise ValueError("populations")
        except (KeyError, TypeError, ValueError):
            raise SecurityError(f"malformed {role} certificate") from None
        if str(body.get("role", "device")) != role:
            raise SecurityError(f"a {body.get('role')} certificate is not a {role} certificate")
        return cls(body, sig)


def _signed(authority: Ed25519PrivateKey, valid_days: float, fields: dict[str, Any]) -> Certificate:
    """The certificate of ``fields``, valid for ``valid_days`` from now, signed by ``authority``."""
    body = {
        **fields,
        "not_after": int(time.time() + valid_days * 86400.0),
        "authority": fingerprint(public_key_hex(authority)),
    }
    return Certificate(body, authority.sign(canonical_bytes(body)).hex())


def issue_certificate(
    authority: Ed25519PrivateKey,
    *,
    client_id: str,
    public_key: str,
    population: str,
    valid_days: float = 365.0,
) -> Certificate:
    """Sign a client certificate (the enrollment authority's job, never the server's).

    Parameters
    ----------
    authority : Ed25519PrivateKey
    client_id : str
        Unique device name, 1-128 characters.
    public_key : str
        The device's Ed25519 public key, hex.
    population : str
        The data population the device belongs to (privacy budgets are per population).
    valid_days : float
        Validity, > 0.
    """
    public_key_from_hex(public_key)
    return _signed(
        authority,
        valid_days,
        {
            "role": "device",
            "client_id": client_id,
            "public_key": public_key,
            "population": population,
        },
    )


def issue_analyst_certificate(
    authority: Ed25519PrivateKey,
    *,
    analyst: str,
    public_key: str,
    populations: list[str] | tuple[str, ...],
    valid_days: float = 365.0,
) -> Certificate:
    """Sign an analyst certificate: ``public_key`` may sign tasks addressed to ``populations``.

    Parameters
    ----------
    authority : Ed25519PrivateKey
    analyst : str
        The analyst's (or population policy's) name, 1-128 characters.
    public_key : str
        The analyst's Ed25519 public key, hex.
    populations : list of str
        The data populations its tasks may address (at least one).
    valid_days : float
        Validity, > 0.

    Raises
    ------
    ParameterError
        If ``populations`` is empty or a name is empty or longer than 128 characters.
    """
    from fedstats.errors import ParameterError

    public_key_from_hex(public_key)
    pops = sorted({str(p) for p in populations})
    if not pops or any(not 1 <= len(p) <= 128 for p in pops) or not 1 <= len(analyst) <= 128:
        raise ParameterError(
            "populations", list(populations), "one or more names of 1 to 128 characters"
        )
    return _signed(
        authority,
        valid_days,
        {"role": "analyst", "analyst": analyst, "public_key": public_key, "populations": pops},
    )


def verify_certificate(
    cert: Certificate, authorities: Mapping[str, str], *, now: float | None = None
) -> None:
    """Check a certificate against the trusted authorities (fingerprint -> public key hex).

    Raises
    ------
    SecurityError
        If the authority is unknown, the signature is wrong or the certificate expired.
    """
    pub = authorities.get(str(cert.body.get("authority")))
    if pub is None:
        raise SecurityError("certificate issued by an untrusted authority")
    verify_signature(pub, canonical_bytes(dict(cert.body)), cert.signature)
    if float(cert.body["not_after"]) < (time.time() if now is None else now):
        raise SecurityError("certificate expired")


def verify_signature(public_hex: str, message: bytes, signature_hex: str) -> None:
    """Verify an Ed25519 signature.

    Raises
    ------
    SecurityError
        If the signature does not verify (or is not hex).
    """
    try:
        _verifier(public_hex).verify(bytes.fromhex(signature_hex), message)
    except (InvalidSignature, ValueError):
        raise SecurityError("bad signature") from None


def signing_payload(method: str, path: str, timestamp: str, nonce: str, body: bytes) -> bytes:
    """The bytes a client signs for one request (see the module docstring)."""
    h = hashlib.sha256(body).hexdigest()
    return f"fedstats-v1\n{method.upper()}\n{path}\n{timestamp}\n{nonce}\n{h}".encode()


def sign_request(
    key: Ed25519PrivateKey, client_id: str, method: str, path: str, body: bytes
) -> dict[str, str]:
    """Headers of a signed request: client id, timestamp, fresh nonce and signature."""
    ts = str(int(time.time()))
    nonce = secrets.token_hex(16)
    sig = key.sign(signing_payload(method, path, ts, nonce, body)).hex()
    return {
        HEADER_CLIENT: client_id,
        HEADER_TIMESTAMP: ts,
        HEADER_NONCE: nonce,
        HEADER_SIGNATURE: sig,
    }


def _request_key(secret: bytes, key_id: str, client_id: str, public_key: str) -> bytes:
    label = f"fedstats-request-key-v1\n{key_id}\n{client_id}\n{public_key}".encode()
    return hmac.digest(secret, label, "sha256")


def open_request_key(
    secret: bytes, client_id: str, public_key: str, *, now: float | None = None
) -> dict[str, Any]:
    """A new request key of device ``client_id`` (the server's side; see the module docstring).

    Parameters
    ----------
    secret : bytes
        The server's key-derivation secret (at least :data:`REQUEST_KEY_SECRET_BYTES`, never sent).
    client_id, public_key : str
        The device and its enrolled Ed25519 public key (hex), as verified on the request asking for it.
    now : float, optional
        The server clock, Unix seconds (default ``time.time()``).

    Returns
    -------
    dict
        ``{"key_id": str, "key": hex str (32 bytes), "expires": int}`` (Unix seconds).
    """
    expires = int(time.time() if now is None else now) + REQUEST_KEY_SECONDS
    key_id = f"{expires}.{secrets.token_hex(16)}"
    key = _request_key(secret, key_id, client_id, public_key)
    return {"key_id": key_id, "key": key.hex(), "expires": expires}


def sign_request_with_key(
    key_id: str, key: bytes, client_id: str, method: str, path: str, body: bytes
) -> dict[str, str]:
    """Headers of a request authenticated with a request key (the device's side).

    Parameters
    ----------
    key_id : str
        The ``key_id`` :func:`open_request_key` gave.
    key : bytes
        The 32-byte key (its ``key``, decoded from hex).
    client_id, method, path : str
        The device, the HTTP method and the request path, as for :func:`sign_request`.
    body : bytes
        The exact request body.

    Returns
    -------
    dict of str to str
        As :func:`sign_request`, with ``X-Fedstats-Key-Id`` and, as ``X-Fedstats-Signature``, the
        HMAC-SHA256 (64 hex digits) of :func:`signing_payload` under ``key``.
    """
    ts = str(int(time.time()))
    nonce = secrets.token_hex(16)
    mac = hmac.digest(key, signing_payload(method, path, ts, nonce, body), "sha256").hex()
    return {
        HEADER_CLIENT: client_id,
        HEADER_TIMESTAMP: ts,
        HEADER_NONCE: nonce,
        HEADER_KEY_ID: key_id,
        HEADER_SIGNATURE: mac,
    }


def verify_request_mac(
    secret: bytes,
    key_id: str,
    client_id: str,
    public_key: str,
    message: bytes,
    mac_hex: str,
    *,
    now: float | None = None,
) -> None:
    """Check a request authenticated with a request key (the server's side).

    Parameters
    ----------
    secret : bytes
        The server's key-derivation secret.
    key_id : str
        The ``X-Fedstats-Key-Id`` header: ``"{expires}.{32 hex digits}"``.
    client_id, public_key : str
        The requesting device and its enrolled public key (hex).
    message : bytes
        :func:`signing_payload` of the request.
    mac_hex : str
        The ``X-Fedstats-Signature`` header.
    now : float, optional
        The server clock, Unix seconds (default ``time.time()``).

    Raises
    ------
    SecurityError
        If the key id is malformed, expired or further ahead than :data:`REQUEST_KEY_SECONDS`, or the MAC
        does not verify (a wrong key, another device's key, a key derived under another secret or for
        another public key). The message starts with ``"request key"``.
    """
    expires, dot, tag = key_id.partition(".")
    if not (
        dot and expires.isascii() and expires.isdigit() and len(expires) <= 12 and len(tag) == 32
    ):
        raise SecurityError("request key: malformed key id")
    t = time.time() if now is None else now
    if int(expires) <= t or int(expires) > t + REQUEST_KEY_SECONDS + 60:
        raise SecurityError("request key: expired (open a new one)")
    key = _request_key(secret, key_id, client_id, public_key)
    want = hmac.digest(key, message, "sha256").hex()
    if not hmac.compare_digest(want, mac_hex.lower() if mac_hex.isascii() else ""):
        raise SecurityError("request key: bad signature (open a new one)")


def check_timestamp(text: str, window: float, *, now: float | None = None) -> float:
    """A signed request's timestamp: a finite number of Unix seconds within ``window`` of ``now``.

    Parameters
    ----------
    text : str
        The ``X-Fedstats-Timestamp`` header (decimal seconds, at most 32 characters).
    window : float
        The replay window, seconds.
    now : float, optional
        The server clock (default ``time.time()``).

    Returns
    -------
    float
        The timestamp.

    Raises
    ------
    SecurityError
        If it is not a decimal number (``nan``, ``inf`` and ``1e999`` are not), or is more than ``window``
        seconds from ``now``.
    """
    import math

    try:
        t = float(text) if len(text) <= 32 and text.isascii() else math.nan
    except ValueError:
        t = math.nan
    if not math.isfinite(t):
        raise SecurityError("bad timestamp: a finite number of Unix seconds is required")
    # written so that the comparison is False only for a finite difference within the window
    server = time.time() if now is None else now
    if not abs(server - t) <= window:
        # the request's clock, named: a device whose clock is off is told so, not about its keys
        side = "ahead of" if t > server else "behind"
        raise SecurityError(
            f"timestamp outside the replay window: the device's clock is {abs(t - server):.0f} s "
            f"{side} the server's (at most {window:g} s apart; set the device's clock, e.g. by NTP)"
        )
    return t


def new_token() -> str:
    """A fresh operator bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """SHA-256 (hex) of a bearer token: what the server stores."""
    return hashlib.sha256(token.encode()).hexdigest()
