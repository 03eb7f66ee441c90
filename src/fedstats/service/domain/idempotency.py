"""Exactly-once admin writes: the ``Idempotency-Key`` header of ``POST /v1/admin/tasks`` and ``/runs``.

An operator (or a script) that lost the answer to a write retries it with the same ``Idempotency-Key``;
the server then answers with the first answer (same status, same body: the same run id) instead of
writing again. The key, the hash of the request (method, path and canonical JSON body) and the first
answer are stored in ``idempotency_keys`` **in the transaction of the write itself**: either both the
write and its key commit, or neither does. The table's primary key ``(actor, key)`` makes two concurrent
requests with one key write once: the second one's insert waits for the first transaction and fails; it
then reads the stored answer (:func:`run_once`).

A key is scoped to the operator that sent it. The same key with another body (or on another endpoint)
is refused with 422 naming the header. Only successful writes are stored: a refused request (409 budget
exceeded, 403, ...) wrote nothing, so a retry is evaluated again.

Keys are kept for a retention period (``ServerSettings.idempotency_retention``, default 7 days, as
payment APIs do) and then purged by the server's background loop (:func:`purge`): a retry later than
that is a new request.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedstats.errors import ParameterError
from fedstats.service.store import State, Store

__all__ = ["HEADER", "Answer", "check_key", "purge", "request_hash", "run_once"]

HEADER = "Idempotency-Key"
_MAX_KEY = 256


@dataclass(frozen=True)
class Answer:
    """A write's answer: HTTP status, JSON body, and whether it is the stored first answer (a replay)."""

    status: int
    body: dict[str, Any]
    replayed: bool = False


def check_key(key: str | None) -> str | None:
    """Validate an ``Idempotency-Key`` header value (None: no key).

    Raises
    ------
    ParameterError
        If the key is empty, longer than 256 characters or not printable ASCII (HTTP 422).
    """
    if key is None:
        return None
    if not 1 <= len(key) <= _MAX_KEY or not all(33 <= ord(c) <= 126 for c in key):
        raise ParameterError(HEADER, key, "1 to 256 printable ASCII characters without spaces")
    return key


def request_hash(method: str, path: str, body: Any) -> str:
    """SHA-256 (hex) of the method, the path and the canonical JSON of the body."""
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(f"{method.upper()}\n{path}\n{canon}".encode()).hexdigest()


def _stored(tx: State, actor: str, key: str, rhash: str) -> Answer | None:
    row = tx.idempotent_answer(actor, key)
    if row is None:
        return None
    if row.request_hash != rhash:
        raise ParameterError(
            HEADER,
            key,
            f"a new key: this one was used for another request ({row.method} {row.path} with "
            "another body); a retry must repeat the first request exactly",
        )
    return Answer(int(row.status_code), json.loads(row.response), replayed=True)


def run_once(
    store: Store,
    actor: str,
    key: str | None,
    method: str,
    path: str,
    body: Any,
    write: Callable[[State], Answer],
) -> Answer:
    """Run ``write`` in one transaction, exactly once per ``(actor, key)``.

    Parameters
    ----------
    store : Store
    actor : str
        The operator sending the request (keys are per operator).
    key : str or None
        The ``Idempotency-Key`` (validated by :func:`check_key`); None runs ``write`` as is.
    method, path : str
        The request's method and path (part of the request hash).
    body : Any
        The request's parsed JSON body (part of the request hash).
    write : callable
        Does the write in the open transaction (a :class:`~fedstats.service.store.Tx`) and returns the
        answer to store.

    Returns
    -------
    Answer
        The answer of this write, or the stored first answer (``replayed=True``).

    Raises
    ------
    ParameterError
        If the key was used before with another request (HTTP 422).
    """
    with store.transaction() as tx:
        if key is None:
            return write(tx)
        rhash = request_hash(method, path, body)
        # claim the key first: a concurrent request with the same key waits on this insert until our
        # transaction ends, and then finds the key taken (and reads the answer stored with it)
        if not tx.claim_key(actor, key, method.upper(), path[:256], rhash, time.time()):
            got = _stored(tx, actor, key, rhash)
            assert got is not None
            return got
        answer = write(tx)
        tx.store_answer(actor, key, answer.status, json.dumps(answer.body, sort_keys=True))
        return answer


def purge(store: Store, retention: float, *, now: float | None = None) -> int:
    """Delete the idempotency keys older than ``retention`` seconds; return how many were deleted.

    Parameters
    ----------
    store : Store
    retention : float
        Seconds a key is kept, > 0.
    now : float, optional
        The current time (unix seconds; default the clock).

    Raises
    ------
    ParameterError
        If ``retention`` is not > 0.
    """
    if not retention > 0:
        raise ParameterError("retention", retention, "seconds, a number > 0")
    with store.transaction() as tx:
        return tx.purge_idempotency_keys((time.time() if now is None else now) - retention)
