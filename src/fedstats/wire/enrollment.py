"""The enrollment authority: its key, and the client identities it issues (``fedstats enroll``).

The authority is a folder holding ``authority.key`` (Ed25519 private key, hex, mode 0600) and
``authority.pub``; it runs apart from the server, which only trusts ``authority.pub``. For each device it
writes an *identity file*: the device's private key, its client id and the certificate the authority signed
over its public key and population (:func:`fedstats.wire.auth.issue_certificate`). A device may also
generate its own key and have only the public key certified (``public_key``), so no private key ever leaves
it; the identity file is then completed on the device.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedstats._io import atomic_write_text
from fedstats.errors import ParameterError
from fedstats.wire import auth

__all__ = ["init_authority", "issue_identity", "load_authority", "load_identity"]


def init_authority(folder: Path | str) -> str:
    """Create an authority in ``folder``; return its public key (hex).

    Raises
    ------
    ParameterError
        If ``folder`` already holds an authority.
    """
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    if (d / "authority.key").exists():
        raise ParameterError("authority", str(d), "a folder without an authority.key")
    key = Ed25519PrivateKey.generate()
    # labelled, so that a server handed this file by mistake recognizes a private key and refuses it
    atomic_write_text(
        d / "authority.key",
        json.dumps({"kind": "fedstats-authority-key", "private_key": auth.private_key_hex(key)})
        + "\n",
    )
    (d / "authority.key").chmod(0o600)
    pub = auth.public_key_hex(key)
    atomic_write_text(d / "authority.pub", pub + "\n")
    return pub


def load_authority(folder: Path | str) -> Ed25519PrivateKey:
    """The authority's private key from ``folder``.

    Raises
    ------
    ParameterError
        If there is no ``authority.key``.
    """
    p = Path(folder) / "authority.key"
    if not p.exists():
        raise ParameterError("authority", str(folder), "a folder made by 'fedstats enroll init'")
    text = p.read_text().strip()
    if text.startswith("{"):  # the labelled form; a bare hex key is an authority made before it
        text = str(json.loads(text)["private_key"])
    return auth.private_key_from_hex(text)


def issue_identity(
    authority_folder: Path | str,
    client_id: str,
    population: str,
    out: Path | str,
    *,
    valid_days: float = 365.0,
) -> dict[str, Any]:
    """Generate a device key, certify it, and write the identity file ``out`` (mode 0600).

    Raises
    ------
    ParameterError
        If ``client_id`` or ``population`` is empty or longer than 128 characters.
    """
    for name, v in (("client_id", client_id), ("population", population)):
        if not 1 <= len(v) <= 128:
            raise ParameterError(name, v, "1 to 128 characters")
    authority = load_authority(authority_folder)
    key = Ed25519PrivateKey.generate()
    cert = auth.issue_certificate(
        authority,
        client_id=client_id,
        public_key=auth.public_key_hex(key),
        population=population,
        valid_days=valid_days,
    )
    ident = {
        "client_id": client_id,
        "private_key": auth.private_key_hex(key),
        "certificate": cert.as_dict(),
        # pinned on the device: it checks secure sessions' rosters against it (fedstats.client.secure)
        "authority_public_key": auth.public_key_hex(authority),
    }
    atomic_write_text(out, json.dumps(ident, indent=1) + "\n")
    Path(out).chmod(0o600)
    return ident


def load_identity(path: Path | str) -> dict[str, Any]:
    """Read an identity file.

    Raises
    ------
    ParameterError
        If the file is missing or malformed.
    """
    try:
        data = json.loads(Path(path).read_text())
        auth.private_key_from_hex(data["private_key"])
        auth.Certificate.from_dict(data["certificate"])
        str(data["client_id"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ParameterError("identity", str(path), f"an identity file ({exc})") from None
    return dict(data)
