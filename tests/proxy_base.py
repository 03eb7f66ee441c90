"""The common part of the test proxies that stand between devices and ``fedstats server``.

:class:`ForwardingProxy` listens on 127.0.0.1 (plain HTTP on loopback, which a device allows) in a thread
of the test process and hands every request to its subclass's ``_forward``, which forwards it to the real
server through one upstream client kept for the proxy's life (one SSL context, connections kept alive).
Subclasses: :class:`deviating_server.DeviatingProxy` (rewrites work lists) and
:class:`malicious_proxy.MaliciousProxy` (rewrites secure-run answers).
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Self

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service_helpers import free_port

__all__ = ["ForwardingProxy", "fedstats_headers"]


def fedstats_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The server's own headers of an answer (``Fedstats-*``, lower case), which a proxy passes on:
    a device reads some of them (``Fedstats-Certificates`` splits the answer to its key advertisement)."""
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("fedstats-")}


class ForwardingProxy:
    """A proxy to ``upstream`` (the real server; ``ca``: its CA certificate) serving ``methods``.

    Use as a context manager: entering starts it (waits up to 30 s for it to listen), leaving stops it.
    """

    def __init__(self, upstream: str, ca: Path, methods: Sequence[str]) -> None:
        self.upstream = upstream
        self.ca = ca
        self.port = free_port()
        self._client: httpx.AsyncClient | None = None
        app = Starlette(
            routes=[Route("/{path:path}", self._forward, methods=list(methods))],
            lifespan=self._lifespan,
        )
        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """One upstream client for the proxy's life: one SSL context, and connections kept alive
        (a client per request loaded the CA file and made a TLS handshake with the server each time)."""
        ctx = ssl.create_default_context(cafile=str(self.ca))
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=50)
        async with httpx.AsyncClient(base_url=self.upstream, verify=ctx, limits=limits) as client:
            self._client = client
            try:
                yield
            finally:
                self._client = None

    async def _upstream(self, request: Request, drop: Sequence[str] = ()) -> httpx.Response:
        """``request`` forwarded upstream as it came (its signed headers, body and query), answered.

        ``drop``: more request headers (lower case) not to forward.
        """
        body = await request.body()
        skip = {"host", "content-length", *drop}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in skip}
        assert self._client is not None  # set by the app's lifespan
        return await self._client.request(
            request.method,
            request.url.path,
            params=request.query_params,
            content=body,
            headers=headers,
            timeout=60,
        )

    async def _forward(self, request: Request) -> Response:
        """Forward ``request`` upstream (:meth:`_upstream`) and answer what the subclass decides."""
        raise NotImplementedError
