"""Verification of signed device requests, as one FastAPI dependency (:class:`DeviceAuth`).

Every device request carries its client id, a timestamp, a nonce and an Ed25519 signature over method,
path, timestamp, nonce and body (:mod:`fedstats.wire.auth`). :class:`DeviceAuth` checks them against the
enrolled device's key (cached per process for a few seconds; an operator's revocation in this process drops
the entry at once) and returns a :class:`SignedRequest`. A state-changing request's nonce is not recorded
here: the handler records it with :func:`use_nonce` in the transaction of the request's effect (one commit,
and a request cut off before its effect committed leaves its nonce unused for the retry).

A device may authenticate with a request key instead of a signature
(:func:`fedstats.wire.auth.open_request_key`): :meth:`DeviceAuth.open_key` derives one under this process's secret for a device whose request was signed
with its Ed25519 key, and :meth:`DeviceAuth.verify` checks the MAC of a request that names it, against
the same enrolled-device row (revocation, expiry and key changes apply as to signatures).
"""

from __future__ import annotations

import math
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Request

from fedstats.errors import ParameterError, SecurityError
from fedstats.service.http.edge import charge_refused, charge_verified, request_headers
from fedstats.service.store import Store
from fedstats.service.store.rows import ClientRow
from fedstats.wire import auth

__all__ = [
    "DeviceAuth",
    "NonceUse",
    "Signed",
    "SignedRequest",
    "release_body",
    "signed_request",
    "use_nonce",
]

T = TypeVar("T")

REREAD = 5.0  # seconds an enrolled device's cached row (key, revocation) is trusted without a check


_URL_SPECIAL = re.compile(r"[?#\\\t\r\n]")


def _url_path(request: Request) -> str:
    r"""``request.url.path`` (the path a device signs) without building the URL when it is plain.

    Starlette escapes ``?``, ``#`` and ``\\`` in the decoded path and ``urlsplit`` drops tabs and
    line breaks; a path with none of them is its own ``url.path``.
    """
    path = str(request.scope["path"])
    if _URL_SPECIAL.search(path):
        return request.url.path
    return path


@dataclass(frozen=True)
class NonceUse:
    """A state-changing request's nonce, to record in the transaction of its effect."""

    client_id: str
    nonce: str
    ts: float


@dataclass(frozen=True)
class SignedRequest:
    """A verified device request.

    Attributes
    ----------
    client_id : str
    body : bytes
        The raw body the signature covers.
    nonce : NonceUse or None
        None for a GET (read-only requests are not single-use).
    population : str
        The enrolled device's population.
    stale : bool
        Verified against a cached row older than :data:`REREAD` seconds: the handler confirms the row
        (not revoked, same key) inside its transaction with :meth:`DeviceAuth.confirm`.
    keyed : bool
        Authenticated with a request key (an HMAC), not with the device's Ed25519 signature.
    """

    client_id: str
    body: bytes
    nonce: NonceUse | None
    population: str
    stale: bool = False
    keyed: bool = False


def release_body(request: Request) -> None:
    """Let ``request`` drop its body, read and used (Starlette's ``Request`` keeps it once read).

    A request held after its body was stored (a secure stage message held for the next stage's message,
    up to its long-poll wait) would otherwise keep the body alive for as long as it is held: at
    n = 1,000, every device's share upload (about 14.5 kB) through the share stage, 14 MB. The body
    cannot be read again afterwards (Starlette: the stream was consumed).

    Parameters
    ----------
    request : Request
        A request whose body was read (``await request.body()``) and is no longer needed.
    """
    vars(request).pop("_body", None)


def use_nonce(tx: Any, nonce: NonceUse | None) -> None:
    """Record ``nonce`` in the open transaction ``tx``, refusing a replay.

    Raises
    ------
    HTTPException
        401 if the nonce was already used (nothing is written; the caller's transaction rolls back).
    """
    if nonce is None:
        return
    if not tx.use_nonce(nonce.client_id, nonce.nonce, nonce.ts):
        raise HTTPException(401, "replayed request (nonce already used)")


class DeviceAuth:
    """Checks signed device requests; an instance is the FastAPI dependency of the device routes.

    Parameters
    ----------
    store : Store
    replay_window : float
        Seconds a request's timestamp may differ from the server clock.
    offload : callable
        ``await offload(fn, *args)`` runs blocking store work off the event loop
        (:class:`~fedstats.service.http.fastpath.Offload`).
    on_write : callable, optional
        Called with the client id of every verified state-changing request, before its effect (the
        device's cached work list is dropped).
    key_secret : bytes, optional
        The secret request keys are derived under, at least 32 bytes (default: 32 random bytes, so keys
        are valid only in this process and until it stops; server processes given the same secret accept
        each other's keys).

    Raises
    ------
    ParameterError
        If ``key_secret`` is not bytes or is shorter than :data:`fedstats.wire.auth.REQUEST_KEY_SECRET_BYTES`.
    """

    def __init__(
        self,
        store: Store,
        replay_window: float,
        offload: Any,
        on_write: Callable[[str], None] | None = None,
        key_secret: bytes | None = None,
    ) -> None:
        least = auth.REQUEST_KEY_SECRET_BYTES
        if key_secret is None:
            key_secret = secrets.token_bytes(least)
        elif not isinstance(key_secret, bytes) or len(key_secret) < least:
            # the length or type only: never a part of the secret in a message
            got = f"{len(key_secret)} bytes" if isinstance(key_secret, bytes) else type(key_secret)
            raise ParameterError("key_secret", got, f"at least {least} bytes")
        self.store = store
        self.key_secret = key_secret
        self.replay_window = replay_window
        self.offload = offload
        self.on_write = on_write
        # id -> (row, read at, devices version when the read began): trusted REREAD seconds after its
        # read, or as long as the devices' counter is still that version, checked < REREAD seconds ago
        self.known: dict[str, tuple[ClientRow, float, int | None]] = {}
        self.version: int | None = None  # the devices' counter (CoreQueries.devices_version)
        self.checked_at = -math.inf  # monotonic time when the last read of it began

    def observe(self, version: int, began: float) -> None:
        """The devices' counter read ``version`` in a read that began at ``began`` (monotonic seconds).

        Called every few seconds by the server (one query per process): while the counter is unchanged,
        no device row was revoked, re-keyed or re-certified anywhere, so the cached rows stay trusted
        without one re-read per device; when it moved, every cached row is re-read at its next use.
        """
        self.version = version  # rows tagged with another version are no longer trusted by it
        self.checked_at = began

    def forget(self, client_id: str) -> None:
        """Drop a device's cached row (revoked or re-keyed in this process)."""
        self.known.pop(client_id, None)

    def remember(self, row: ClientRow, version: int | None = None) -> None:
        """Cache a device's row, read from the database after the devices' counter was ``version``."""
        if len(self.known) > 100_000:
            self.known.clear()
        self.known[row.id] = (row, time.monotonic(), version)

    def client(self, client_id: str) -> ClientRow | None:
        """The enrolled device (cached while trusted, see :meth:`_fresh`), or None. Blocking."""
        got = self._fresh(client_id)
        if got is None:
            version = self.version
            with self.store.transaction(read_only=True) as tx:
                row = tx.client(client_id)
            if row is None:
                return None
            self.remember(row, version)
            return row
        return got

    async def population_of(self, client_id: str) -> str:
        """The population of an enrolled device (its cached row if trusted, else read off the loop).

        Raises
        ------
        HTTPException
            401 if no device is enrolled under ``client_id``.
        """
        row = self._fresh(client_id) or await self.offload(self.client, client_id)
        if row is None:  # pragma: no cover - rows are never deleted
            raise HTTPException(401, "unknown client")
        return str(row.population)

    def _fresh(self, client_id: str) -> ClientRow | None:
        """The cached row if trusted: read < :data:`REREAD` s ago, or since unchanged (:meth:`observe`)."""
        got = self.known.get(client_id)
        if got is None:
            return None
        now = time.monotonic()
        if now - got[1] <= REREAD or (
            got[2] is not None and got[2] == self.version and now - self.checked_at <= REREAD
        ):
            return got[0]
        return None

    def confirm(self, tx: Any, req: SignedRequest) -> None:
        """Re-read a stale device row inside the request's transaction ``tx`` (one key lookup).

        Raises
        ------
        HTTPException
            401 if the device's key changed or its certificate expired, 403 if it was revoked since.
        """
        if not req.stale:
            return
        old = self.known.get(req.client_id)
        version = self.version
        row = tx.client(req.client_id)
        if row is None or old is None or row.public_key != old[0].public_key:
            self.forget(req.client_id)
            raise HTTPException(401, "unknown client or key changed: sign again")
        self.remember(row, version)
        if row.not_after < time.time():
            raise HTTPException(401, "client certificate expired")
        if row.revoked:
            raise HTTPException(403, "device revoked by an operator")

    def verify(
        self,
        method: str,
        path: str,
        headers: Any,
        body: bytes,
        public_key: str | None,
        stale_ok: bool = False,
    ) -> tuple[str, NonceUse | None, str]:
        """Check a signed request; return the client id, the nonce to record and the population.

        With ``public_key`` given (registration: the key of the certificate presented) the device need
        not be enrolled yet, and a request key is not accepted: only the Ed25519 signature. A request
        naming a request key (``X-Fedstats-Key-Id``) is checked by its MAC against the enrolled key.
        Blocking when the device's row is not cached (or is stale and ``stale_ok`` is False; with it
        True a stale row is used, and the caller confirms it).

        Raises
        ------
        HTTPException
            401 for missing headers, a timestamp outside the window, an unknown device, an expired
            certificate, a bad signature or a request key that does not hold (the detail then starts
            with ``"request key"``); 403 for a revoked device (told only to the device itself).
        """
        keyed_ok = public_key is None
        cid = headers.get(auth.HEADER_CLIENT)
        ts = headers.get(auth.HEADER_TIMESTAMP)
        nonce = headers.get(auth.HEADER_NONCE)
        sig = headers.get(auth.HEADER_SIGNATURE)
        revoked = False
        population = ""
        if not (cid and ts and nonce and sig) or len(nonce) > 64 or len(cid) > 128:
            raise HTTPException(401, "signed request headers required")
        try:  # a finite number of seconds inside the replay window (NaN never is)
            t = auth.check_timestamp(ts, self.replay_window)
        except SecurityError as exc:
            raise HTTPException(401, str(exc)) from None
        if public_key is None:
            cached = self.known.get(cid) if stale_ok else None
            c = cached[0] if cached is not None else self.client(cid)
            if c is None:
                raise HTTPException(401, "unknown client")
            if c.not_after < time.time():
                raise HTTPException(401, "client certificate expired")
            public_key, revoked, population = c.public_key, c.revoked, c.population
        payload = auth.signing_payload(method, path, ts, nonce, body)
        key_id = headers.get(auth.HEADER_KEY_ID)
        try:
            if key_id is None:
                auth.verify_signature(public_key, payload, sig)
            elif keyed_ok:
                auth.verify_request_mac(self.key_secret, key_id, cid, public_key, payload, sig)
            else:
                raise SecurityError(
                    "request key: this request must be signed with the device's Ed25519 key"
                )
        except SecurityError as exc:
            detail = str(exc) if key_id is not None else "bad signature"
            raise HTTPException(401, detail) from None
        if revoked:
            raise HTTPException(403, "device revoked by an operator")
        # GETs are read-only (a replay learns nothing TLS did not already protect): polls cost no write
        use = None if method == "GET" else NonceUse(str(cid), str(nonce), t)
        return str(cid), use, population

    async def check(
        self, request: Request, public_key: str | None = None, *, stale_ok: bool = False
    ) -> SignedRequest:
        """Verify ``request`` (on the event loop when the device's row is cached, else off it).

        The request is then charged to the rate limit of the verified device, or to that of its peer
        address if it does not verify (:func:`~fedstats.service.http.edge.charge_verified`).

        With ``stale_ok``, a cached row older than :data:`REREAD` is used too, and the result says
        ``stale`` (the handler calls :meth:`confirm` in its transaction).
        """
        body = await request.body()
        scope = request.scope
        headers = request_headers(scope)
        cid_header = headers.get(auth.HEADER_CLIENT) or ""
        args = (scope["method"], _url_path(request), headers, body, public_key)
        fresh = self._fresh(cid_header)
        stale = public_key is None and fresh is None and stale_ok and cid_header in self.known
        try:
            if public_key is None and (fresh is not None or stale):
                # an enrolled device seen before: no database access, one signature check (~0.1 ms)
                cid, nonce, population = self.verify(*args, stale_ok=stale)
            else:
                cid, nonce, population = await self.offload(self.verify, *args)
        except HTTPException:
            charge_refused(scope)  # a claim that did not verify: its peer address pays (or 429)
            raise
        charge_verified(scope, cid)  # the rate limit of the verified device (429 beyond it)
        if nonce is not None and self.on_write is not None:
            self.on_write(cid)
        keyed = auth.HEADER_KEY_ID in headers
        return SignedRequest(cid, body, nonce, population, stale, keyed)

    def open_key(self, client_id: str) -> dict[str, Any]:
        """A new request key of an enrolled device whose row is cached (:func:`auth.open_request_key`).

        Raises
        ------
        HTTPException
            401 if the device's row is not cached (it is, right after its request was verified).
        """
        got = self.known.get(client_id)
        if got is None:  # pragma: no cover - verify() cached it
            raise HTTPException(401, "unknown client")
        return auth.open_request_key(self.key_secret, client_id, got[0].public_key)

    async def __call__(self, request: Request) -> SignedRequest:
        """The dependency: the verified request (see :meth:`check`; a stale row is allowed)."""
        return await self.check(request, stale_ok=True)

    async def signed(self, request: Request) -> tuple[str, bytes, Any]:
        """``(client_id, body, nonce)`` of a verified request (the secure routes' interface)."""
        got = await self.check(request)
        return got.client_id, got.body, got.nonce


async def signed_request(request: Request) -> SignedRequest:
    """The FastAPI dependency: the request verified by the app's :class:`DeviceAuth`.

    The app keeps its :class:`DeviceAuth` in ``app.state.device_auth``
    (:func:`fedstats.service.http.device.add_client_routes`).
    """
    device: DeviceAuth = request.app.state.device_auth
    return await device(request)


Signed = Annotated[SignedRequest, Depends(signed_request)]
"""A route parameter of this type is the verified signed request."""
