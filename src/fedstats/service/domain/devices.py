"""Enrolled devices: a device's own enrollment, and the operator's revocation and reinstatement (with re-keying).

Each function works in the caller's transaction and writes its audit record there. The client API caches
enrollment rows; the HTTP layer drops the changed device's entry after the commit.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from typing import Any

from fedstats.errors import SecurityError
from fedstats.service.domain import ledger, tasks
from fedstats.service.store import State
from fedstats.service.store.rows import ClientRow
from fedstats.wire import auth

__all__ = ["enroll_device", "reinstate_device", "revoke_device"]


def enroll_device(tx: State, row: ClientRow, now: float) -> ClientRow:
    """Enroll a device under its verified certificate (``row``); again is a no-op.

    A device enrolled before certificates were kept gets its certificate stored.

    Returns
    -------
    ClientRow
        The device's row as the transaction leaves it (``row`` for a new device, else the enrolled one).

    Raises
    ------
    SecurityError
        If the client id is revoked, or enrolled under a different key.
    """
    c = tx.client(row.id)
    if c is not None and c.revoked:
        raise SecurityError("device revoked by an operator")
    if c is not None and c.public_key != row.public_key:
        raise SecurityError("a different key is enrolled under this client id")
    if c is None:
        tx.add_client(row, now)
        return row
    if c.certificate is None:  # enrolled before certificates were kept
        assert row.certificate is not None
        tx.set_client_certificate(row.id, row.certificate)
        return dataclasses.replace(c, certificate=row.certificate)
    return c


def _load(tx: State, client_id: str) -> dict[str, Any]:
    c = tx.device_for_update(client_id)
    if c is None:
        raise tasks.NotFoundError(f"no device {client_id!r}")
    return c


def revoke_device(tx: State, client_id: str, actor: str) -> dict[str, Any]:
    """Revoke device ``client_id``: every later signed request of it is refused, so it joins no run.

    Idempotent: a revoked device stays revoked since its first revocation (audited once).

    Returns
    -------
    dict
        The device's row as the operator API shows it (``status`` ``"revoked"``).

    Raises
    ------
    NotFoundError
        If no device ``client_id`` is enrolled.
    """
    out = _load(tx, client_id)
    if out["revoked_at"] is None:
        now = time.time()
        tx.update_client(client_id, revoked_at=now)
        out = {**out, "revoked_at": now, "status": "revoked"}
        ledger.audit(tx, actor, "revoke-device", None, client_id=client_id)
    return out


def _new_key(tx: State, client_id: str, certificate: Mapping[str, Any]) -> dict[str, Any]:
    """The enrollment columns of a new device certificate for ``client_id`` (checked)."""
    try:
        cert = auth.Certificate.from_dict(dict(certificate))
        auth.verify_certificate(cert, tasks.trusted_authorities(tx))
    except (ValueError, KeyError, TypeError) as exc:
        raise SecurityError(f"not a device certificate: {exc}") from None
    if cert.body.get("role", "device") != "device":
        raise SecurityError("not a device certificate")
    if cert.body.get("client_id") != client_id:
        raise SecurityError(
            f"the certificate is for {cert.body.get('client_id')!r}, not {client_id!r}"
        )
    return {
        "certificate": json.dumps(cert.as_dict()),
        "public_key": str(cert.body["public_key"]),
        "population": str(cert.body["population"]),
        "authority": str(cert.body["authority"]),
        "not_after": float(cert.body["not_after"]),
        "enrolled_at": time.time(),
    }


def reinstate_device(
    tx: State, client_id: str, actor: str, certificate: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Reinstate revoked device ``client_id``; with a new ``certificate``, under its new key (re-keying).

    The certificate must be a device certificate for ``client_id`` from a trusted authority; its key,
    population, authority and expiry replace the enrolled ones, so the old key is refused from then on.

    Returns
    -------
    dict
        The device's row as the operator API shows it (``status`` ``"active"``); re-keyed, with the
        new key, population, authority, expiry and enrollment time.

    Raises
    ------
    NotFoundError
        If no device ``client_id`` is enrolled.
    ConflictError
        If the device is not revoked (revoke it first to re-key it).
    SecurityError
        If ``certificate`` is not a device certificate for ``client_id`` from a trusted authority.
    """
    c = _load(tx, client_id)
    if c["revoked_at"] is None:
        raise tasks.ConflictError(
            f"device {client_id!r} is not revoked (revoke it first to re-key it)"
        )
    detail: dict[str, Any] = {"client_id": client_id, "rekeyed": False}
    if certificate is not None:
        new = _new_key(tx, client_id, certificate)
        tx.update_client(client_id, **new)
        c = {**c, **{k: v for k, v in new.items() if k != "certificate"}}
        detail["rekeyed"] = True
        detail["public_key"] = c["public_key"]
    tx.update_client(client_id, revoked_at=None)
    ledger.audit(tx, actor, "reinstate-device", None, **detail)
    return {**c, "revoked_at": None, "status": "active"}
