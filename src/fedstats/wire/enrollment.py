"""The enrollment authority: its key, and the client identities it issues (``fedstats enroll``).

The authority is a folder holding ``authority.key`` (Ed25519 private key, hex, mode 0600) and
``authority.pub``; it runs apart from the server, which only trusts ``authority.pub``. For each device it
writes an *identity file*: the device's private key, its client id and the certificate the authority signed
over its public key and population (:func:`fedstats.wire.auth.issue_certificate`). A device may also
generate its own key and have only the public key certified (``public_key``), so no private key ever leaves
it; the identity file is then completed on the device.

The authority also issues **analyst identities** (:func:`issue_analyst`, ``fedstats enroll analyst``): an
analyst's (or a population policy's) signing key and its certificate naming the populations its tasks may
address. Tasks are signed with it (:func:`fedstats.wire.tasks.sign_task`); devices accept a task only under
such a certificate chained to the authority key they pinned, so the server, which never holds an analyst's
key, can relay tasks but not create or alter one.

**Revocation is by expiry.** Analyst certificates are short-lived (:data:`ANALYST_VALID_DAYS` by
default) and renewed by the authority (:func:`renew_analyst`, ``fedstats enroll renew-analyst``) over the
same key; a task never outlives the certificate it is signed under (:func:`fedstats.wire.tasks.sign_task`).
Revoking an analyst (:func:`revoke_analyst`, ``fedstats enroll revoke-analyst``) records it in the
authority's ``revoked-analysts.json`` so that it is never renewed: within at most the certificate's
remaining life every server and device refuses its tasks, with no revocation list the server could
withhold from devices (docs/deploy.md, threat model).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedstats._io import atomic_write_text
from fedstats._validation import check_identifier
from fedstats.errors import FedstatsError, ParameterError
from fedstats.wire import auth

__all__ = [
    "ANALYST_VALID_DAYS",
    "init_authority",
    "issue_analyst",
    "issue_identity",
    "load_analyst",
    "load_authority",
    "load_identity",
    "renew_analyst",
    "revoke_analyst",
]

ANALYST_VALID_DAYS = 7.0
"""Default life of an analyst certificate, days: the longest a revoked analyst's tasks stay acceptable."""

REVOKED_ANALYSTS = "revoked-analysts.json"
"""The authority folder's register of revoked analysts (names), never renewed."""


def _write_private(path: Path | str, content: dict[str, Any]) -> None:
    """Write a file holding a private key: JSON, atomically, mode 0600 from its creation."""
    atomic_write_text(path, json.dumps(content, indent=1) + "\n", mode=0o600)


def _check_valid_days(valid_days: float) -> None:
    if not 0 < valid_days < 1e6:
        raise ParameterError("valid_days", valid_days, "a number of days in (0, 1e6)")


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
    _write_private(
        d / "authority.key",
        {"kind": "fedstats-authority-key", "private_key": auth.private_key_hex(key)},
    )
    pub = auth.public_key_hex(key)
    atomic_write_text(d / "authority.pub", pub + "\n")
    return pub


def load_authority(folder: Path | str) -> Ed25519PrivateKey:
    """The authority's private key from ``folder``.

    Raises
    ------
    ParameterError
        If there is no ``authority.key``, or it cannot be read or parsed (truncated, damaged).
    """
    p = Path(folder) / "authority.key"
    if not p.exists():
        raise ParameterError("authority", str(folder), "a folder made by 'fedstats enroll init'")
    try:
        text = p.read_text().strip()
        if text.startswith("{"):  # the labelled form; a bare hex key is an authority made before it
            text = str(json.loads(text)["private_key"])
        return auth.private_key_from_hex(text)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, FedstatsError) as exc:
        raise ParameterError(
            "authority",
            str(p),
            f"an authority.key made by 'fedstats enroll init' (this one is damaged or truncated: {exc})",
        ) from None


def _issue_identity(
    authority_folder: Path | str,
    out: Path | str,
    fields: dict[str, Any],
    certify: Callable[[Ed25519PrivateKey, str], auth.Certificate],
) -> dict[str, Any]:
    """Generate a key, certify it and write the identity file ``out`` (mode 0600).

    ``certify(authority, public_key_hex)`` signs the certificate; the file holds ``fields``, the private
    key, the certificate and the authority's public key, pinned on the device: it checks secure sessions'
    rosters against it (:mod:`fedstats.client.secure`).
    """
    authority = load_authority(authority_folder)
    key = Ed25519PrivateKey.generate()
    cert = certify(authority, auth.public_key_hex(key))
    ident = {
        **fields,
        "private_key": auth.private_key_hex(key),
        "certificate": cert.as_dict(),
        "authority_public_key": auth.public_key_hex(authority),
    }
    _write_private(out, ident)
    return ident


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
        If ``client_id`` or ``population`` is not an identifier
        (:data:`fedstats._validation.IDENTIFIER_RULE`).
    """
    check_identifier("client_id", client_id)
    check_identifier("population", population)
    _check_valid_days(valid_days)
    return _issue_identity(
        authority_folder,
        out,
        {"client_id": client_id},
        lambda authority, public_key: auth.issue_certificate(
            authority,
            client_id=client_id,
            public_key=public_key,
            population=population,
            valid_days=valid_days,
        ),
    )


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


def issue_analyst(
    authority_folder: Path | str,
    name: str,
    populations: list[str] | tuple[str, ...],
    out: Path | str,
    *,
    valid_days: float = ANALYST_VALID_DAYS,
) -> dict[str, Any]:
    """Generate an analyst's task-signing key, certify it for ``populations``, write ``out`` (mode 0600).

    The analyst identity file holds ``{"role": "analyst", "analyst", "private_key", "certificate",
    "authority_public_key"}``; keep it with the analyst, never on the server (the server refuses to start
    with a private key it should not hold).

    Parameters
    ----------
    authority_folder : path
        Folder of the authority (``fedstats enroll init``).
    name : str
        The analyst's name, 1-128 characters.
    populations : list of str
        The populations its tasks may address (at least one).
    out : path
        Analyst identity file to write.
    valid_days : float
        Validity of the certificate, days in (0, 1e6); short by default (:data:`ANALYST_VALID_DAYS`),
        renewed with :func:`renew_analyst`.

    Raises
    ------
    ParameterError
        If ``name`` or a population is not an identifier (:data:`fedstats._validation.IDENTIFIER_RULE`),
        no population is given, or ``name`` was revoked (:func:`revoke_analyst`).
    """
    check_identifier("analyst", name)
    for population in populations:
        check_identifier("population", population)
    _check_valid_days(valid_days)
    _check_not_revoked(authority_folder, name)
    return _issue_identity(
        authority_folder,
        out,
        {"role": "analyst", "analyst": name},
        lambda authority, public_key: auth.issue_analyst_certificate(
            authority,
            analyst=name,
            public_key=public_key,
            populations=list(populations),
            valid_days=valid_days,
        ),
    )


def load_analyst(path: Path | str) -> dict[str, Any]:
    """Read an analyst identity file (:func:`issue_analyst`).

    Raises
    ------
    ParameterError
        If the file is missing or is not an analyst identity.
    """
    try:
        data = json.loads(Path(path).read_text())
        auth.private_key_from_hex(data["private_key"])
        auth.Certificate.from_dict(data["certificate"], role="analyst")
    except (OSError, ValueError, KeyError, TypeError, FedstatsError) as exc:
        raise ParameterError(
            "analyst identity", str(path), f"an analyst identity file ({exc})"
        ) from None
    return dict(data)


def _revoked(authority_folder: Path | str) -> dict[str, float]:
    """The authority's revoked analysts: name -> Unix time of the revocation."""
    p = Path(authority_folder) / REVOKED_ANALYSTS
    if not p.exists():
        return {}
    try:
        data = json.loads(p.read_text())
        return {str(k): float(v) for k, v in dict(data["revoked"]).items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ParameterError(
            "authority", str(p), f"a readable register of revoked analysts ({exc})"
        ) from None


def _check_not_revoked(authority_folder: Path | str, name: str) -> None:
    if name in _revoked(authority_folder):
        raise ParameterError(
            "analyst", name, "an analyst that was not revoked (fedstats enroll revoke-analyst)"
        )


def revoke_analyst(authority_folder: Path | str, name: str) -> bool:
    """Revoke analyst ``name``: the authority never renews nor re-issues its certificate.

    Its current certificate stays valid until its ``not_after`` (at most ``valid_days`` of its last
    issue, :data:`ANALYST_VALID_DAYS` by default); from then on servers refuse its task envelopes and
    runs of its tasks, and devices refuse its tasks.

    Parameters
    ----------
    authority_folder : path
        Folder of the authority (``fedstats enroll init``).
    name : str
        The analyst's name, as in its certificate.

    Returns
    -------
    bool
        False if it was revoked already.

    Raises
    ------
    ParameterError
        If the folder holds no authority, or ``name`` is empty or longer than 128 characters.
    """
    if not 1 <= len(name) <= 128:
        raise ParameterError("analyst", name, "1 to 128 characters")
    load_authority(authority_folder)
    revoked = _revoked(authority_folder)
    if name in revoked:
        return False
    revoked[name] = time.time()
    atomic_write_text(
        Path(authority_folder) / REVOKED_ANALYSTS,
        json.dumps({"revoked": revoked}, indent=1, sort_keys=True) + "\n",
    )
    return True


def renew_analyst(
    authority_folder: Path | str,
    identity: Path | str,
    *,
    valid_days: float = ANALYST_VALID_DAYS,
) -> dict[str, Any]:
    """Certify an analyst's key again for ``valid_days`` from now; rewrite its identity file (0600).

    The new certificate names the same analyst, key and populations. Tasks signed under the old
    certificate keep its ``not_after`` (they are signed again under the new one to outlive it).

    Parameters
    ----------
    authority_folder : path
        Folder of the authority that issued the identity.
    identity : path
        The analyst identity file (:func:`issue_analyst`).
    valid_days : float
        Validity of the new certificate, days in (0, 1e6).

    Returns
    -------
    dict
        The analyst identity, with its new certificate.

    Raises
    ------
    ParameterError
        If the file is not an analyst identity of this authority, or the analyst was revoked.
    """
    _check_valid_days(valid_days)
    ident = load_analyst(identity)
    body = ident["certificate"]["body"]
    authority = load_authority(authority_folder)
    if str(body["authority"]) != auth.fingerprint(auth.public_key_hex(authority)):
        raise ParameterError(
            "identity", str(identity), "an analyst identity issued by this authority"
        )
    _check_not_revoked(authority_folder, str(body["analyst"]))
    cert = auth.issue_analyst_certificate(
        authority,
        analyst=str(body["analyst"]),
        public_key=str(body["public_key"]),
        populations=list(body["populations"]),
        valid_days=valid_days,
    )
    ident["certificate"] = cert.as_dict()
    _write_private(identity, ident)
    return ident
