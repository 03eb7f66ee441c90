"""Operators: create, rotate the bearer token of, and remove the people who run the server; no HTTP.

An operator authenticates to the admin API (``/v1/admin/...``) and the dashboard with a bearer token. The
token is shown once, when it is issued, and stored only as its SHA-256 (:func:`fedstats.wire.auth.hash_token`).
The first operator is created on the server's machine (``fedstats server add-operator --db ...``); the
others by an operator over the API (``POST /v1/admin/operators``, ``fedstats admin operators add``).
Every change is in the audit log. An operator cannot remove itself, and the last operator cannot be
removed: the server would be left without anyone able to run it.

:func:`add_operator`, :func:`rotate_operator` and :func:`trust_authority` are the same acts on the server's
machine, each in a transaction of its own (``fedstats server add-operator``, ``rotate-operator``,
``trust``): they need the store only, not the web application.
"""

from __future__ import annotations

import time

from fedstats._validation import check_identifier
from fedstats.errors import ParameterError
from fedstats.service.domain import ledger
from fedstats.service.domain.tasks import ConflictError, NotFoundError
from fedstats.service.store import State, Store
from fedstats.wire import auth

__all__ = ["add", "add_operator", "remove", "rotate", "rotate_operator", "trust_authority"]


def add(tx: State, name: str, *, actor: str | None = None, now: float | None = None) -> str:
    """Create operator ``name`` in the caller's transaction; return its bearer token (shown once).

    Parameters
    ----------
    tx : State
        An open transaction.
    name : str
        An identifier (:data:`fedstats._validation.IDENTIFIER_RULE`), not an existing operator's name.
    actor : str, optional
        The operator who creates it (audited); None: created on the server's machine.
    now : float, optional
        Creation time (unix seconds; default the clock).

    Returns
    -------
    str
        The new operator's bearer token.

    Raises
    ------
    ParameterError
        If ``name`` is malformed, or an operator of that name exists (its token is replaced only by
        :func:`rotate`, never silently).
    """
    check_identifier("name", name)
    if tx.operator_exists(name):
        raise ParameterError(
            "name", name, "a new operator name (this one exists: rotate its token instead)"
        )
    token = auth.new_token()
    tx.add_operator(name, auth.hash_token(token), time.time() if now is None else now)
    if actor is not None:
        ledger.audit(tx, actor, "add-operator", None, name=name)
    return token


def rotate(tx: State, name: str, *, actor: str | None = None) -> str:
    """Give operator ``name`` a new bearer token and return it; the old one stops working at commit.

    Raises
    ------
    NotFoundError
        If there is no such operator.
    """
    token = auth.new_token()
    if not tx.set_operator_token(name, auth.hash_token(token)):
        raise NotFoundError(f"no operator {name!r}")
    if actor is not None:
        ledger.audit(tx, actor, "rotate-operator", None, name=name)
    return token


def remove(tx: State, name: str, *, actor: str) -> None:
    """Remove operator ``name`` (its token stops working at commit), audited as done by ``actor``.

    Raises
    ------
    NotFoundError
        If there is no such operator.
    ConflictError
        If ``name`` is ``actor`` itself, or the last operator.
    """
    if name == actor:
        raise ConflictError("an operator cannot remove itself (another operator can)")
    if not tx.operator_exists(name):
        raise NotFoundError(f"no operator {name!r}")
    if tx.page_operators(1, 0)[1] <= 1:  # pragma: no cover - the actor is another operator
        raise ConflictError("the last operator cannot be removed")
    tx.remove_operator(name)
    ledger.audit(tx, actor, "remove-operator", None, name=name)


def add_operator(store: Store, name: str) -> str:
    """:func:`add` in a transaction of its own on ``store`` (the server's opened store), not audited.

    Parameters, returns and raises as :func:`add`: ``name`` is the new operator's, the answer its bearer
    token (URL-safe text; stored only hashed, shown once).
    """
    with store.transaction() as tx:
        return add(tx, name)


def rotate_operator(store: Store, name: str) -> str:
    """:func:`rotate` in a transaction of its own on ``store`` (the server's opened store), not audited.

    Parameters, returns and raises as :func:`rotate`: ``name`` is an existing operator, the answer its
    new bearer token (shown once); the old one stops working.
    """
    with store.transaction() as tx:
        return rotate(tx, name)


def trust_authority(store: Store, public_key_hex: str) -> str:
    """Trust an enrollment authority: devices and analysts it certifies may enroll and sign tasks.

    Parameters
    ----------
    store : Store
        The server's opened store.
    public_key_hex : str
        The authority's Ed25519 public key, 64 hex digits (its ``authority.pub``).

    Returns
    -------
    str
        The key's fingerprint (:func:`fedstats.wire.auth.fingerprint`).

    Raises
    ------
    SecurityError
        If ``public_key_hex`` is not an Ed25519 public key (:func:`fedstats.wire.auth.public_key_from_hex`).
    """
    auth.public_key_from_hex(public_key_hex)
    fp = auth.fingerprint(public_key_hex)
    with store.transaction() as tx:
        tx.add_authority(fp, public_key_hex)
    return fp
