"""A deviating aggregation server, as unmodified devices see it: a proxy in front of ``fedstats server``.

Devices talk to :class:`DeviatingProxy` over plain HTTP on 127.0.0.1 (loopback, which a device allows) as
if it were the server. It forwards every request unchanged (the devices' signatures verify upstream),
records every request, and passes each work list through :attr:`rewrite` (a poll's answer, ``GET
/v1/client/work``, and the one a held last secure stage's acknowledgement carries, ``"work"``), which
changes what the server proposes: an offered task, or a round's encoder, parameters, privacy, index, run or
task. That is what a server that deviates controls; it holds no device's and no analyst's key.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy_base import ForwardingProxy, fedstats_headers

__all__ = ["DeviatingProxy"]


class DeviatingProxy(ForwardingProxy):
    """Forward devices' requests to ``upstream``; rewrite the work lists with :attr:`rewrite`.

    Attributes
    ----------
    rewrite : callable or None
        ``work dict -> work dict``, applied to every work list the server answers (polled, or carried
        by a held last stage's acknowledgement).
    requests : list of (method, path)
        Every request forwarded, in order.
    """

    def __init__(self, upstream: str, ca: Path) -> None:
        super().__init__(upstream, ca, ("GET", "POST"))
        self.rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def posted(self, prefix: str) -> list[str]:
        """Paths of the POST requests that start with ``prefix``."""
        with self._lock:
            return [p for m, p in self.requests if m == "POST" and p.startswith(prefix)]

    async def _forward(self, request: Request) -> Response:
        path = request.url.path
        with self._lock:
            self.requests.append((request.method, path))
        r = await self._upstream(request, drop=("if-none-match",))  # every work list in full
        content = r.content
        media = r.headers.get("content-type", "")
        if r.status_code == 200 and self.rewrite is not None and "json" in media:
            if path == "/v1/client/work":
                content = json.dumps(self.rewrite(json.loads(content))).encode()
            elif "/secure/" in path and request.method == "POST":
                ack = json.loads(content)
                if isinstance(ack, dict) and isinstance(ack.get("work"), dict):
                    ack["work"] = self.rewrite(ack["work"])
                    content = json.dumps(ack).encode()
        return Response(
            content,
            status_code=r.status_code,
            media_type=r.headers.get("content-type"),
            headers=fedstats_headers(r.headers),
        )
