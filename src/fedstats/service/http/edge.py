"""The HTTP edge of the server: strict JSON, limits, one error model, response counting and request logs.

Everything a client can send is checked here before a handler sees it, and everything the server answers
is counted and logged here (``docs/service-errors.md``):

* **Strict JSON** (:func:`strict_loads`): ``NaN``, ``Infinity``, ``-Infinity`` and numbers that overflow a
  double are refused with 422 naming the field; an object naming a key twice with 422 naming the key
  (never "the last wins"); nesting deeper than :data:`MAX_DEPTH` with 422 (never Python's
  ``RecursionError``). Admin bodies are parsed by it through :class:`StrictRoute`; the device
  endpoints call it themselves.
* **Limits** (:class:`EdgeMiddleware`): request bodies above ``max_body`` bytes get 413; headers are
  decoded as Latin-1 (HTTP's own rule), so undecodable bytes never raise.
* **Identifiers** (:func:`control_field`): a control character
  (:data:`fedstats._validation.CONTROL_CATEGORIES`) in a path parameter, a query parameter or the
  ``X-Fedstats-Client`` header, or a path parameter that is not an identifier
  (:data:`fedstats._validation.IDENTIFIER_RULE`, the charset of ``fedstats enroll``), is a 422 naming the
  field, before any handler or store sees it (PostgreSQL cannot store a NUL; SQLite would).
* **Rate limits** (:class:`RateLimits`): a token bucket per *verified* identity, or per peer address before
  verification, never per unverified claim. An unsigned request is charged to its peer address here; a
  request that claims a device (``X-Fedstats-Client``) on a signed route is charged once its signature was
  checked (:func:`charge_verified` by :class:`~.deps.DeviceAuth`) to the device, and to its peer address if
  the signature does not hold (:func:`charge_refused`). So requests that merely name a device never spend
  that device's tokens.
* **Every response is counted and logged**: ``fedstats_http_responses_total{status="..."}`` in ``/metrics``
  and one JSON log line per request (ISO timestamp, method, path template, status, duration; no bodies,
  no headers). An exception no handler turned into an answer becomes a JSON 500 ``{"detail", "error_id"}``,
  logged with its traceback under the same id.
* **Errors** (:func:`install_error_handlers`): a :class:`~fedstats.errors.FedstatsError` maps to 403, 404,
  409, 422 or 503 (with ``Retry-After``: a peer aggregator unreachable) by kind; a request that does not match its schema is a 422 whose ``detail`` is one string
  naming each bad field.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
import traceback
import uuid
from collections.abc import Callable, Coroutine, Iterable, MutableMapping
from typing import Any, cast
from urllib.parse import parse_qsl

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fedstats._validation import CONTROL_RULE, IDENTIFIER_RULE, control_character, is_identifier
from fedstats.errors import BudgetExceededError, FedstatsError, SecurityError, UnavailableError
from fedstats.service.domain import tasks
from fedstats.service.http.logline import JsonLine, JsonLogFormatter, log_line, utc_stamp
from fedstats.wire.encoding import DuplicateKeyError, unique_keys

__all__ = [
    "BODY_PIECE",
    "MAX_DEPTH",
    "BadJSON",
    "EdgeMiddleware",
    "JsonLine",
    "JsonLogFormatter",
    "RateLimits",
    "StrictRoute",
    "charge_refused",
    "charge_verified",
    "control_field",
    "install_error_handlers",
    "metrics_lines",
    "printable",
    "send_in_pieces",
    "status_of",
    "strict_loads",
]


HEADERS = "fedstats.headers"
"""The scope key of the request's headers as :class:`EdgeMiddleware` decoded them (lowercase names)."""


def request_headers(scope: Scope) -> dict[str, str]:
    """The request's headers, lowercase names to Latin-1 values (a repeated header: its first value).

    HTTP header values are Latin-1 (RFC 9110), so decoding never fails whatever bytes came; a repeated
    header counts by its first value, as Starlette's ``Headers.get``. Decoded once per request (first
    by :class:`EdgeMiddleware`) and kept in the scope under :data:`HEADERS`.

    Parameters
    ----------
    scope : dict
        The ASGI scope of an HTTP request (``headers``: a list of ``(bytes, bytes)``).

    Returns
    -------
    dict of str to str
    """
    got = scope.get(HEADERS)
    if got is None:
        got = scope[HEADERS] = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in reversed(scope["headers"])
        }
    return cast(dict[str, str], got)


log = logging.getLogger("fedstats.service")

MAX_DEPTH = 32
"""Deepest nesting of arrays and objects a JSON body may have."""

_UNMATCHED = "-"  # the path template of a request no route matched


class BadJSON(ValueError):
    """A body that is not strict JSON; the message names the field (``body.privacy.epsilon``)."""


class _NonFinite:
    """Marks where a non-finite number stood, so that the error can name its field."""

    def __init__(self, text: str) -> None:
        self.text = text


def _where(obj: Any, path: str) -> str | None:
    """The path of the first :class:`_NonFinite` in ``obj`` (iterative: depth was checked before)."""
    stack: list[tuple[Any, str]] = [(obj, path)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, _NonFinite):
            return f"{at}: {node.text}"
        if isinstance(node, dict):
            stack.extend((v, f"{at}.{k}") for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((v, f"{at}[{i}]") for i, v in reversed(list(enumerate(node))))
    return None


def _depth(obj: Any) -> int:
    """Nesting depth of arrays and objects in a parsed JSON value (iterative)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, d + 1)
            stack.extend((v, d + 1) for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            deepest = max(deepest, d + 1)
            stack.extend((v, d + 1) for v in node if isinstance(v, (dict, list)))
    return deepest


def strict_loads(body: bytes | str, *, max_depth: int = MAX_DEPTH, where: str = "body") -> Any:
    """Parse strict JSON: finite numbers only, each key once per object, nesting at most ``max_depth``.

    Parameters
    ----------
    body : bytes or str
        The JSON text (UTF-8 if bytes).
    max_depth : int
        Deepest nesting of arrays and objects accepted.
    where : str
        Name of the whole value in error messages.

    Returns
    -------
    Any
        The parsed value.

    Raises
    ------
    BadJSON
        If the text is not JSON, not UTF-8, nests deeper than ``max_depth``, names a key twice in one
        object, or holds ``NaN``, ``Infinity``, ``-Infinity`` or a number too large for a double (the
        message names the field).
    """
    seen: list[_NonFinite] = []

    def constant(text: str) -> _NonFinite:
        seen.append(_NonFinite(f"{text} is not a JSON number (numbers must be finite)"))
        return seen[-1]

    def number(text: str) -> float | _NonFinite:
        value = float(text)
        if math.isfinite(value):
            return value
        seen.append(_NonFinite(f"{text[:40]} overflows a double (numbers must be finite)"))
        return seen[-1]

    raw = body.encode() if isinstance(body, str) else body
    # a cheap bound first: fewer opening brackets than the limit cannot nest deeper than it
    deep = raw.count(b"[") + raw.count(b"{") > max_depth
    try:
        value = json.loads(
            raw, parse_constant=constant, parse_float=number, object_pairs_hook=unique_keys
        )
    except DuplicateKeyError as exc:
        raise BadJSON(f"{where}: {exc}") from None
    except RecursionError:
        raise BadJSON(f"{where}: JSON nested deeper than {max_depth} levels") from None
    except UnicodeDecodeError:
        raise BadJSON(f"{where}: not UTF-8 text") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of more than 4300 digits
        raise BadJSON(f"{where}: not JSON ({str(exc)[:120]})") from None
    if deep and _depth(value) > max_depth:
        raise BadJSON(f"{where}: JSON nested deeper than {max_depth} levels")
    if seen:
        raise BadJSON(_where(value, where) or f"{where}: numbers must be finite")
    return value


class _StrictRequest(Request):
    """A request whose ``json()`` is :func:`strict_loads` (422 naming the field otherwise)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = strict_loads(await self.body())
            except BadJSON as exc:
                raise HTTPException(422, str(exc)) from None
        return self._json


class StrictRoute(APIRoute):
    """A FastAPI route that parses JSON bodies strictly (set as ``app.router.route_class``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler, given a :class:`_StrictRequest`."""
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(_StrictRequest(request.scope, request.receive))

        return strict


# -- error model ---------------------------------------------------------------------------------------


def status_of(exc: FedstatsError) -> int:
    """The HTTP status of a :class:`~fedstats.errors.FedstatsError`: 404, 409, 403, 503 or 422.

    503 (with ``Retry-After``) for :class:`~fedstats.errors.UnavailableError`: a peer the request
    needs, such as the Prio3 helper, cannot be reached now; the same request may succeed later.
    """
    if isinstance(exc, UnavailableError):
        return 503
    if isinstance(exc, tasks.NotFoundError):
        return 404
    if isinstance(exc, (tasks.ConflictError, BudgetExceededError)):
        return 409
    if isinstance(exc, SecurityError):
        return 403
    return 422


def _field(loc: Any) -> str:
    parts = [str(p) for p in (loc or ())]
    out = parts[0] if parts else "request"
    for p in parts[1:]:
        out += f"[{p}]" if p.isdigit() else f".{p}"
    return out


def _validation_detail(request: Request, exc: RequestValidationError) -> str:
    """One line naming each field that failed validation (never echoing its value)."""
    msgs = []
    for err in exc.errors()[:10]:
        loc = tuple(err.get("loc") or ())
        msg = str(err.get("msg", "invalid"))
        if loc == ("body",) and err.get("type") in (
            "model_attributes_type",
            "dict_type",
            "missing",
        ):
            ctype = request.headers.get("content-type", "")
            if "json" not in ctype.lower():
                msg += f" (send a JSON body with Content-Type: application/json, not {ctype!r})"
        msgs.append(f"{_field(loc)}: {msg}")
    more = len(exc.errors()) - len(msgs)
    return "; ".join(msgs) + (f"; and {more} more" if more > 0 else "")


def install_error_handlers(app: FastAPI) -> None:
    """Map :class:`~fedstats.errors.FedstatsError` and request validation errors to JSON 4xx answers."""

    @app.exception_handler(FedstatsError)
    async def _fedstats_error(_request: Request, exc: FedstatsError) -> JSONResponse:
        headers = None
        if isinstance(exc, UnavailableError):
            headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
        return JSONResponse(
            {"detail": " ".join(str(exc).split())}, status_code=status_of(exc), headers=headers
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_detail(request, exc)}, status_code=422)


# -- identifiers ---------------------------------------------------------------------------------------

_SUSPECT = re.compile(r"[^\x21-\x5b\x5d-\x7e]|\.\.")
"""A path that may hold a non-identifier (a space, a backslash, ``..``, a control or any non-ASCII
character): only such a path is matched against the routes to name the parameter."""

_PRINTABLE = bytes(range(0x20, 0x7F))
_UNSAFE_ESCAPE = re.compile(rb"%(?![2-6][0-9A-Fa-f]|7[0-9A-Ea-e])")  # not %20-%7E


def _query_may_control(query: bytes) -> bool:
    """Whether a query string may decode to a control character (else it need not be parsed).

    Only if it has a byte outside printable ASCII or a ``%`` that is not the escape of a printable ASCII
    byte (``%20``-``%7E``): otherwise its decoded names and values are printable ASCII (``+`` decodes to
    a space). A device's ``members=3%2C17%2C...`` (900 commas, each ``%`` that of a ``%2C``) is checked
    by three scans in C.
    """
    if query.translate(None, _PRINTABLE):
        return True
    if query.count(b"%") == query.count(b"%2C"):
        return False
    return _UNSAFE_ESCAPE.search(query) is not None


CLIENT_HEADER = "x-fedstats-client"
"""The header a device names itself in (:data:`fedstats.wire.auth.HEADER_CLIENT`): a claim until verified."""

CONTROL_DETAIL = f"{CONTROL_RULE[0].upper()}{CONTROL_RULE[1:]} in identifiers or names"
"""Why a request whose :func:`control_field` is not None is refused (after the field's name)."""


def printable(text: str) -> str:
    """``text`` with each control character (:data:`~fedstats._validation.CONTROL_CATEGORIES`) as ``?``.

    What the server logs or echoes of a client's claim (a device id, a query parameter's name), so a
    refused character never reaches a log line or an answer.

    Parameters
    ----------
    text : str
        Any text.

    Returns
    -------
    str
        ``text`` itself when it holds no control character; the same length otherwise.
    """
    if control_character(text) is None:
        return text
    return "".join("?" if control_character(c) else c for c in text)


def _routes(routes: Iterable[Any]) -> Iterable[Any]:
    """``routes`` and those of the routers included among them."""
    for r in routes:
        inner = getattr(r, "original_router", None)
        yield from _routes(inner.routes) if inner is not None else (r,)


def _path_field(scope: Scope, path: str, control: bool) -> str | None:
    """The path parameter of the route matching ``path`` that is not an identifier, with why.

    Each parameter's value must be an identifier (:data:`~fedstats._validation.IDENTIFIER_RULE`; a
    round index or stage number is one too); ``control`` says the path holds a control character, refused
    (naming ``path``) even where no route matches.
    """
    for route in _routes(getattr(scope.get("app"), "routes", ())):
        regex = getattr(route, "path_regex", None)
        m = regex.match(path) if regex is not None else None
        if m is None:
            continue
        for name, value in m.groupdict().items():
            if control_character(value) is not None:
                return f"path.{name}: {CONTROL_DETAIL}"
            if not is_identifier(value):
                return f"path.{name}: an identifier is {IDENTIFIER_RULE}"
    return f"path: {CONTROL_DETAIL}" if control else None


def control_field(scope: Scope) -> str | None:
    """Why the request's path, query or claimed device id is refused (naming the field), or None.

    A control character (:func:`~fedstats._validation.control_character`)
    anywhere is refused: in a path parameter named by the route that matches (``path.run_id``;
    ``path`` if none does), in a query parameter by its name (``query.population``), in the device's
    claimed id as ``header.x-fedstats-client``. Every path parameter must be an
    identifier (:data:`~fedstats._validation.IDENTIFIER_RULE`: no backslash, no ``..``, no leading or
    trailing whitespace). Cheap when there is none: one regular-expression scan of the path and one of
    the query string, parsed only if it has a byte outside printable ASCII or a ``%`` escape of one.

    Parameters
    ----------
    scope : dict
        The ASGI scope of an HTTP request (``path`` is percent-decoded already).

    Returns
    -------
    str or None
        ``"<field>: <why>"``, the detail of the 422 answer.
    """
    path = str(scope.get("path", ""))
    if _SUSPECT.search(path):
        why = _path_field(scope, path, control_character(path) is not None)
        if why is not None:
            return why
    query = scope.get("query_string") or b""
    if query and _query_may_control(query):
        for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            if control_character(name) or control_character(value):
                return f"query.{printable(name)[:64]}: {CONTROL_DETAIL}"
    if control_character(request_headers(scope).get(CLIENT_HEADER, "")):
        return f"header.{CLIENT_HEADER}: {CONTROL_DETAIL}"
    return None


# -- rate limits ---------------------------------------------------------------------------------------

RATE = "fedstats.rate"
"""The scope key of a request whose rate-limit charge waits for its signature check (:func:`charge_verified`)."""


class RateLimits:
    """Token buckets: ``rate`` requests per second and a burst of ``burst``, per key.

    Keys are verified identities (``device:ID``) or peer addresses (``peer:ADDRESS``), never an
    unverified claim. Idle buckets are forgotten beyond 100,000 keys rather than grow without bound.

    Parameters
    ----------
    rate, burst : float
        Sustained requests per second (> 0) and burst size (>= 1).
    """

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.buckets: dict[str, tuple[float, float]] = {}

    def allow(self, key: str) -> bool:
        """Take one token from ``key``'s bucket; False if it holds less than one."""
        now = time.monotonic()
        tokens, last = self.buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self.buckets[key] = (tokens, now)
            return False
        if len(self.buckets) > 100_000:
            self.buckets.clear()
        self.buckets[key] = (tokens - 1.0, now)
        return True


def _peer(scope: Scope) -> str:
    return str((scope.get("client") or ("?", 0))[0])


def _pending(scope: Scope) -> RateLimits | None:
    """The request's limits if its charge is still due (taken from the scope: charged once)."""
    limits = scope.get(RATE)
    scope[RATE] = None
    return cast(RateLimits | None, limits)


def charge_verified(scope: Scope, identity: str) -> None:
    """Charge a request whose signature was verified to ``identity`` (a device's id).

    Raises
    ------
    HTTPException
        429 if the identity's bucket is empty.
    """
    limits = _pending(scope)
    if limits is not None and not limits.allow(f"device:{identity}"):
        raise HTTPException(429, "rate limit exceeded", {"Retry-After": "1"})


def charge_refused(scope: Scope) -> None:
    """Charge a request whose claimed identity did not verify to its peer address.

    Raises
    ------
    HTTPException
        429 if the peer address's bucket is empty (instead of the verification's 401).
    """
    limits = _pending(scope)
    if limits is not None and not limits.allow(f"peer:{_peer(scope)}"):
        raise HTTPException(429, "rate limit exceeded", {"Retry-After": "1"})


def _signed_route(path: str) -> bool:
    """Whether ``path`` is a device route, every one of which checks a signature (:mod:`.deps`)."""
    return path.startswith("/v1/client/") or (
        path.startswith("/v1/vdaf/tasks/") and path.endswith(("/join", "/reports"))
    )


# -- middleware ----------------------------------------------------------------------------------------


class _TooLarge(HTTPException):
    """A body that grew past the limit while it was read: 413, like a declared size.

    An HTTPException, so FastAPI's body parsing passes it on instead of answering 400.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes")


BODY_PIECE = 16 * 1024
"""Largest piece of a response body handed to the server's transport at once, bytes (one TLS record)."""


async def send_in_pieces(send: Send, message: Message, piece: int = BODY_PIECE) -> None:
    """Send an ``http.response.body`` message as pieces of at most ``piece`` bytes (the same bytes).

    Why: a TLS connection's outgoing memory BIO (OpenSSL's, under uvicorn's event loop) grows to the
    largest write it was handed and keeps that capacity until the connection closes. A 250 kB answer (a
    seed transcript at n = 1,000) written at once left about 330 kB allocated on each of 1,000 kept-alive
    connections; written in pieces, each connection keeps at most a few pieces' worth, and the server's
    write flow control (uvicorn waits for the transport to drain between body messages) applies between
    pieces. An answer of at most ``piece`` bytes is sent unchanged.

    Parameters
    ----------
    send : ASGI send callable
    message : dict
        An ASGI ``http.response.body`` message (``body``, ``more_body``).
    piece : int
        Largest piece in bytes, >= 1.
    """
    body = message.get("body", b"")
    if len(body) <= piece:
        await send(message)
        return
    more = bool(message.get("more_body", False))
    view = memoryview(body)
    last = len(body) - piece
    for start in range(0, len(body), piece):
        await send(
            {
                "type": "http.response.body",
                "body": bytes(view[start : start + piece]),
                "more_body": more or start < last,
            }
        )


class EdgeMiddleware:
    """Identifiers, body size limit, rate limits, response counting and one log line per request.

    Pure ASGI (no buffering of responses, so long polls and streaming are unaffected).

    Parameters
    ----------
    app : ASGI app
    max_body : int
        Largest request body in bytes (413 above).
    rate, burst : float
        Token bucket per verified device, else per peer address (:class:`RateLimits`): requests per
        second, burst.
    counters : dict
        The server's metrics counters; ``http_responses_total{status="..."}`` is incremented per response.
    exempt : tuple of str
        Paths without a rate limit (health and metrics probes).
    access_log : bool
        One JSON log line per request (default True); False logs only server errors (5xx).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body: int,
        rate: float,
        burst: float,
        counters: MutableMapping[str, float],
        exempt: tuple[str, ...] = ("/livez", "/healthz", "/readyz", "/metrics"),
        access_log: bool = True,
    ) -> None:
        self.app = app
        self.access_log = access_log
        self.max_body = max_body
        self.limits = RateLimits(rate, burst)
        self.counters = counters
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Limit, answer through the app, count and log one HTTP request."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        # decoded once here (Latin-1, first value of a repeated header) and kept in the scope for the
        # inner layers (:func:`request_headers`)
        headers = request_headers(scope)
        claim = headers.get(CLIENT_HEADER, "")
        # the log names the claim (as claimed: a signature that does not hold is answered 401)
        client = printable(claim[:128]) or _peer(scope)
        state = {"status": 0}
        error_id: str | None = None

        async def counted_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = int(message["status"])
            elif (
                message["type"] == "http.response.body"
                and len(message.get("body", b"")) > BODY_PIECE
            ):
                await send_in_pieces(send, message)
                return
            await send(message)

        async def answer(
            code: int, payload: dict[str, Any], extra: list[tuple[bytes, bytes]] | None = None
        ) -> None:
            await counted_send(
                {
                    "type": "http.response.start",
                    "status": code,
                    "headers": [(b"content-type", b"application/json"), *(extra or [])],
                }
            )
            await counted_send({"type": "http.response.body", "body": json.dumps(payload).encode()})

        path = str(scope.get("path", ""))
        limit = self.max_body
        try:
            declared = int(headers.get("content-length", "0"))
        except ValueError:
            declared = -1
        # a control character is refused as cheaply as a 429 would be, so it is not charged
        bad = control_field(scope)
        limited = False
        if bad is not None or path in self.exempt:
            pass
        elif claim and _signed_route(path):
            # charged by the signature check: to the device, or to the peer if it does not hold
            scope[RATE] = self.limits
        else:
            limited = not self.limits.allow(f"peer:{_peer(scope)}")
        if bad is not None:
            await answer(422, {"detail": bad})
        elif limited:
            await answer(429, {"detail": "rate limit exceeded"}, [(b"retry-after", b"1")])
        elif declared < 0 or declared > limit:
            await answer(
                413 if declared > limit else 400,
                {
                    "detail": f"request body larger than {limit} bytes"
                    if declared > limit
                    else "Content-Length must be a non-negative integer"
                },
            )
        else:
            seen = 0

            async def limited_receive() -> Message:
                nonlocal seen
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > limit:
                        raise _TooLarge(limit)
                return message

            try:
                await self.app(scope, limited_receive, counted_send)
            except _TooLarge:
                if not state["status"]:
                    await answer(413, {"detail": f"request body larger than {limit} bytes"})
            except ClientDisconnect:  # the client went away mid-request: not a server error
                state["status"] = state["status"] or 499
            except Exception:
                error_id = uuid.uuid4().hex[:16]
                log.error(
                    json.dumps(
                        {
                            "event": "unhandled_error",
                            "error_id": error_id,
                            "method": scope.get("method"),
                            "path": _template(scope),
                            "traceback": traceback.format_exc(),
                        }
                    )
                )
                if not state["status"]:
                    await answer(500, {"detail": "internal server error", "error_id": error_id})
                else:  # the answer had started: the client sees a cut-off response
                    state["status"] = 500
        unchecked = _pending(scope)
        if unchecked is not None:  # a claim on a route that never checked it: the peer pays
            unchecked.allow(f"peer:{_peer(scope)}")
        status = state["status"] or 500  # no answer started: counted as the error it is
        self.counters[f'http_responses_total{{status="{status}"}}'] += 1
        level = logging.WARNING if status >= 500 else logging.INFO
        if (level == logging.INFO and not self.access_log) or not log.isEnabledFor(level):
            return
        record = {
            "event": "request",
            "method": scope.get("method"),
            "path": _template(scope),
            "status": status,
            "client": client,
            "ms": round(1000 * (time.perf_counter() - t0), 2),
        }
        if error_id is not None:
            record["error_id"] = error_id
        log_line(log, level, JsonLine(record))  # log.log(level, ...), without its stack walk


def _template(scope: Scope) -> str:
    """The route's path template (``/v1/admin/runs/{run_id}``), not the path with its ids."""
    route = scope.get("route")
    template = getattr(route, "path", None)
    return str(template) if template else _UNMATCHED


def metrics_lines(counters: MutableMapping[str, float]) -> list[str]:
    """Prometheus lines of the HTTP response counters (``fedstats_http_responses_total``)."""
    lines = [
        "# HELP fedstats_http_responses_total HTTP responses sent, by status (5xx included).",
        "# TYPE fedstats_http_responses_total counter",
    ]
    for key, v in sorted(counters.items()):
        if key.startswith("http_responses_total"):
            lines.append(f"fedstats_{key} {v:g}")
    return lines


def iso_now() -> str:
    """The current time, ISO 8601 in UTC with milliseconds (``2026-11-26T14:00:00.000Z``; :func:`utc_stamp`)."""
    return utc_stamp(time.time())
