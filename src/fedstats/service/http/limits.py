"""Limits of open connections: in all, per peer address, and how long a request's headers may take.

uvicorn accepts every connection and waits for a request's headers as long as the client likes, so one
client holding many half-sent requests could use up the process's open files (each connection is one)
and lock every device out. :func:`guarded_protocol` wraps uvicorn's HTTP protocol class (h11 or
httptools, what ``fedstats server`` picks) with a :class:`ConnectionGuard`:

* **open connections**: at most ``max_connections`` at once in the process, and at most
  ``per_peer`` from one peer address; a connection beyond either is answered ``503`` with
  ``Retry-After: 1`` and closed at once (its file is freed);
* **header-read timeout**: a request's headers must have arrived ``header_timeout`` seconds after the
  connection opened, or after the first byte of the next request on a kept-alive connection; else the
  connection is answered ``408`` and closed. An idle kept-alive connection is left to uvicorn's
  ``timeout_keep_alive``; a request whose headers arrived (a long poll, a slow body) is not limited.

With TLS the count starts once the handshake is done (the event loop bounds a handshake to 60 s).
:func:`open_file_limit` checks ``max_connections`` against the process's open-file limit
(``RLIMIT_NOFILE``), raising the soft limit up to the hard one when needed (``docs/deploy.md``,
*Open connections*).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import resource
import time
from typing import Any

from fedstats.errors import ParameterError

__all__ = [
    "FILE_RESERVE",
    "WRITE_HIGH_WATER",
    "ConnectionGuard",
    "guarded_protocol",
    "open_file_limit",
    "protocol_class",
]

log = logging.getLogger("fedstats.service")

WRITE_HIGH_WATER = 64 * 1024
"""A connection's write buffer (bytes) above which the server stops writing to it until it drains.

The event loop's default for TLS connections is 512 KiB: a device slow to read a 250 kB answer let the
whole answer pile up in the connection's TLS buffer, which keeps its largest size until the connection
closes (on each of 1,000 kept-alive connections). With 64 KiB the answer waits, in the pieces
:func:`fedstats.service.http.edge.send_in_pieces` cuts it into, for the connection to drain."""

FILE_RESERVE = 128
"""Open files kept for what is not a client connection: the database, logs, the helper's connections."""


def _answer(status: str, detail: str, extra: str = "") -> bytes:
    """A whole HTTP/1.1 response that closes the connection (JSON body ``{"detail": ...}``)."""
    body = json.dumps({"detail": detail}).encode()
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}"
        f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode("ascii") + body


_REFUSED = _answer(
    "503 Service Unavailable", "too many open connections (from this address)", "retry-after: 1\r\n"
)
_TIMED_OUT = _answer("408 Request Timeout", "request headers not sent in time")


class ConnectionGuard:
    """Counts a server's open connections, in all and per peer address.

    Parameters
    ----------
    max_connections : int
        Most connections open at once, >= 1.
    per_peer : int
        Most connections open at once from one peer address, in [1, ``max_connections``].
    header_timeout : float
        Seconds a request's headers may take to arrive, > 0.

    Attributes
    ----------
    open : int
        Connections open now.
    refused, timed_out : int
        Connections refused at a cap, and closed for headers not sent in time, since the start.

    Raises
    ------
    ParameterError
        If a limit is outside its range.
    """

    def __init__(self, max_connections: int, per_peer: int, header_timeout: float) -> None:
        if isinstance(max_connections, bool) or not (
            isinstance(max_connections, int) and max_connections >= 1
        ):
            raise ParameterError("max_connections", max_connections, "an integer >= 1")
        if isinstance(per_peer, bool) or not (
            isinstance(per_peer, int) and 1 <= per_peer <= max_connections
        ):
            raise ParameterError(
                "max_connections_per_peer", per_peer, f"an integer in [1, {max_connections}]"
            )
        if not (isinstance(header_timeout, (int, float)) and 0 < header_timeout <= 3600):
            raise ParameterError("header_timeout", header_timeout, "seconds in (0, 3600]")
        self.max_connections = max_connections
        self.per_peer = per_peer
        self.header_timeout = float(header_timeout)
        self.open = 0
        self.by_peer: dict[str, int] = {}
        self.refused = 0
        self.timed_out = 0
        self._logged = -math.inf

    def admit(self, peer: str) -> bool:
        """Count a new connection from ``peer``; False (not counted) if a cap is reached.

        A refusal is logged (``connections_refused``, with the totals) at most once a minute.
        """
        held = self.by_peer.get(peer, 0)
        if self.open >= self.max_connections or held >= self.per_peer:
            self.refused += 1
            now = time.monotonic()
            if now - self._logged >= 60.0:
                self._logged = now
                log.warning(
                    json.dumps(
                        {
                            "event": "connections_refused",
                            "peer": peer,
                            "from_peer": held,
                            "open": self.open,
                            "refused_total": self.refused,
                            "timed_out_total": self.timed_out,
                        }
                    )
                )
            return False
        self.open += 1
        self.by_peer[peer] = held + 1
        return True

    def release(self, peer: str) -> None:
        """A connection from ``peer`` that :meth:`admit` counted has closed."""
        self.open -= 1
        left = self.by_peer.get(peer, 1) - 1
        if left > 0:
            self.by_peer[peer] = left
        else:
            self.by_peer.pop(peer, None)


def _peer_of(transport: Any) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, (tuple, list)) and peer:
        return str(peer[0])
    return str(peer or "?")


def guarded_protocol(base: type[asyncio.Protocol], guard: ConnectionGuard) -> type[Any]:
    """Wrap uvicorn's HTTP protocol class ``base`` under ``guard``'s limits (``uvicorn.Config(http=...)``).

    Parameters
    ----------
    base : type
        ``uvicorn.protocols.http.h11_impl.H11Protocol`` or ``...httptools_impl.HttpToolsProtocol``
        (both keep the request being served in ``cycle`` and their event loop in ``loop``).
    guard : ConnectionGuard
        The counts and limits, shared by every connection of the server.

    Returns
    -------
    type
        A subclass of ``base``.
    """
    proto: Any = base

    class Guarded(proto):  # type: ignore[misc]
        _peer: str | None = None
        _timer: asyncio.TimerHandle | None = None
        _waiting_for: Any = None  # the request cycle being served when the timer was armed

        def connection_made(self, transport: Any) -> None:
            peer = _peer_of(transport)
            if not guard.admit(peer):
                transport.write(_REFUSED)
                transport.close()
                return
            self._peer = peer
            try:  # the transport's own limit is 512 KiB for TLS (WRITE_HIGH_WATER)
                transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
            except (AttributeError, NotImplementedError, ValueError):
                pass
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._peer is None:  # refused: uvicorn never saw it
                return
            guard.release(self._peer)
            self._peer = None
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._peer is None:  # refused (closing): what it sent is not read
                return
            cycle = self.cycle
            if self._timer is None and (cycle is None or cycle.response_complete):
                self._arm()  # the first bytes of the next request on a kept-alive connection
            super().data_received(data)

        def _arm(self) -> None:
            self._disarm()
            self._waiting_for = self.cycle
            self._timer = self.loop.call_later(guard.header_timeout, self._expired)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _expired(self) -> None:
            self._timer = None
            # a new cycle: the headers of the request arrived in time (uvicorn makes one per request)
            if self.cycle is not self._waiting_for or self.transport.is_closing():
                return
            guard.timed_out += 1
            self.transport.write(_TIMED_OUT)
            self.transport.close()

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{base.__name__}"
    return Guarded


def open_file_limit(max_connections: int | None, reserve: int = FILE_RESERVE) -> int:
    """The connections this process may hold open: ``max_connections``, checked against its file limit.

    Each connection holds one open file; ``reserve`` more are kept for the database, the logs and the
    process's own needs. The soft ``RLIMIT_NOFILE`` (``ulimit -n``) is raised towards the hard one when
    ``max_connections + reserve`` needs it (as a server commonly does at start-up).

    Parameters
    ----------
    max_connections : int or None
        The connections wanted, >= 1; None: as many as the hard limit allows, minus ``reserve``
        (at most 65,536).
    reserve : int
        Open files kept for other uses, >= 0.

    Returns
    -------
    int
        The limit of open connections to serve with (``max_connections`` when given).

    Raises
    ------
    ParameterError
        If ``max_connections`` is not an integer >= 1, or exceeds what the hard limit allows (naming
        ``--max-connections`` and the most it may be).
    """
    if max_connections is not None and (
        isinstance(max_connections, bool)
        or not isinstance(max_connections, int)
        or max_connections < 1
    ):
        raise ParameterError("--max-connections", max_connections, "an integer >= 1")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = hard if hard != resource.RLIM_INFINITY else 1 << 20
    want = (max_connections or min(65_536, ceiling - reserve)) + reserve
    if want > ceiling or want <= reserve:
        most = max(0, ceiling - reserve)
        raise ParameterError(
            "--max-connections",
            max_connections,
            f"at most {most} (this process may open {ceiling} files (ulimit -Hn), {reserve} of them "
            "kept for the database and logs; raise the limit to serve more)",
        )
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want - reserve


def protocol_class(http: str) -> type[asyncio.Protocol]:
    """The HTTP/1.1 protocol class of uvicorn by its name in ``uvicorn.Config(http=...)``.

    Parameters
    ----------
    http : {"h11", "httptools"}

    Returns
    -------
    type
    """
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    if http == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol
    raise ParameterError("http", http, "'h11' or 'httptools'")
