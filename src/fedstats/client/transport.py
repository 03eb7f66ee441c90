"""The device's HTTP client: :class:`httpx.Client` with its request URLs built once per process.

A device sends the same few request targets over and over (its work poll, each secure stage of a session,
the same ``?wait=`` value), and the devices simulated in one process send the same targets as each other.
``httpx`` parses the target three times per request (the relative path, its merge with the base URL and
the query parameters): about a third of the cost of building a request, which was a sixth of a
simulated device's CPU in a secure run (benchmarks/service_secagg.py). :class:`DeviceHTTP` keeps the
merged :class:`httpx.URL` of each ``(base URL, path, params)`` it built (an immutable value) and builds
later requests from it; what goes on the wire is unchanged. A long query (a session's key
advertisement names its checked and two-hop members, ``members=...&also=...``, once) is not
remembered: the request is built from the path's remembered URL with the query merged by ``httpx``,
once, instead of a whole request built for its URL and then another, and the URLs the device does
send again stay remembered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from fedstats.errors import SecurityError

__all__ = ["DeviceHTTP", "ResponseCookies", "read_capped"]

_URLS: dict[tuple[str, str, tuple[tuple[str, str], ...]], httpx.URL] = {}
"""``(base URL, path, params) -> merged URL``, shared by the devices of the process (bounded)."""
_MAX_URLS = 4096
_MAX_QUERY = 256
"""Characters of a query's values above which it is not remembered: a one-off (a member list)."""


class ResponseCookies(httpx.Cookies):
    """Cookies that read a response only when it sets one.

    ``httpx`` hands every response to the cookie jar, which builds a ``urllib`` request and response
    for it; a device's server sets no cookies, so that is skipped for an answer without ``Set-Cookie``
    (one with it is read as before).
    """

    def extract_cookies(self, response: httpx.Response) -> None:
        """Read the cookies ``response`` sets (none to read without a ``Set-Cookie`` header)."""
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


class DeviceHTTP(httpx.Client):
    """:class:`httpx.Client` whose requests reuse the URL built for the same target (see the module).

    Takes the arguments of :class:`httpx.Client`.
    """

    def __init__(self, **kwargs: Any) -> None:
        self._device_cookies = ResponseCookies()
        super().__init__(**kwargs)

    @property
    def cookies(self) -> httpx.Cookies:
        """The client's cookies (:class:`ResponseCookies`)."""
        return self._device_cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        self._device_cookies = ResponseCookies(cookies)

    def build_request(self, method: str, url: httpx.URL | str, **kwargs: Any) -> httpx.Request:
        """:meth:`httpx.Client.build_request`, from the remembered URL of a path and its params."""
        params = kwargs.get("params")
        if not isinstance(url, str) or not (
            params is None
            or (
                isinstance(params, Mapping)
                and all(type(k) is str and type(v) is str for k, v in params.items())
            )
        ):
            return super().build_request(method, url, **kwargs)
        query = tuple(params.items()) if params else ()
        merged = _URLS.get((str(self.base_url), url, query))
        if merged is None:
            if params and sum(map(len, params.values())) > _MAX_QUERY:
                # a one-off query (a session's member list): the path's URL is remembered, not the
                # query, which httpx merges in as it does (a remembered URL is httpx's own)
                return super().build_request(method, self._merged(url, ()), **kwargs)
            merged = self._merged(url, query)
        kwargs["params"] = None
        return super().build_request(method, merged, **kwargs)

    def _merged(self, path: str, query: tuple[tuple[str, str], ...]) -> httpx.URL:
        """The URL ``httpx`` builds for ``path`` and ``query`` on this client, remembered."""
        key = (str(self.base_url), path, query)
        merged = _URLS.get(key)
        if merged is None:
            merged = super().build_request("GET", path, params=dict(query) or None).url
            if len(_URLS) >= _MAX_URLS:
                _URLS.clear()
            _URLS[key] = merged
        return merged


def read_capped(
    client: httpx.Client,
    method: str,
    path: str,
    content: bytes,
    headers: Mapping[str, str],
    params: Mapping[str, Any] | None,
    timeout: Any,
    limit: int,
) -> httpx.Response:
    """Send a request and read at most ``limit`` bytes of its answer (a device's bounded read).

    The answer is streamed: one that declares a longer ``Content-Length`` is refused before its body
    is read, one without (chunked) is read up to ``limit`` and refused at the first chunk beyond it,
    the rest unread. One that declares at most ``limit`` bytes without a ``Content-Encoding`` is
    read as it is (HTTP/1.1 framing makes its body exactly the declared bytes; checked again after
    reading) and returned itself, not copied into a new response; a declared encoding is decoded
    while counting, as an undeclared length is.

    Parameters
    ----------
    client : httpx.Client
        The device's client (:class:`DeviceHTTP`).
    method, path : str
        The request's method and path (relative to the client's base URL).
    content : bytes
        The request body.
    headers : mapping
        The request's headers (signed).
    params : mapping or None
        Its query parameters.
    timeout : float or httpx.USE_CLIENT_DEFAULT
        Its timeout, seconds.
    limit : int
        The most bytes of (decoded) answer read, >= 0.

    Returns
    -------
    httpx.Response
        The answer, read (at most ``limit`` bytes of content); one read by chunks carries its
        decoded content, without the ``Content-Encoding``, ``Content-Length`` and
        ``Transfer-Encoding`` headers that described the bytes on the wire.

    Raises
    ------
    SecurityError
        If the answer is longer than ``limit``, declared or not.
    httpx.HTTPError
        As :meth:`httpx.Client.send`.
    """
    with client.stream(
        method, path, content=content, headers=headers, params=params, timeout=timeout
    ) as r:
        declared = r.headers.get("content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > limit:
                raise SecurityError(
                    f"the server's answer to {path} ({declared} bytes) exceeds the "
                    f"{limit} bytes this device reads for it"
                )
            if "content-encoding" not in r.headers:
                if len(r.read()) > limit:  # not on HTTP/1.1: the body is the declared bytes
                    raise _longer(path, limit)
                return r
        parts, got = [], 0
        for chunk in r.iter_bytes():
            got += len(chunk)
            if got > limit:
                raise _longer(path, limit)
            parts.append(chunk)
        # the content is decoded: its framing and encoding headers no longer describe it
        kept = [(k, v) for k, v in r.headers.multi_items() if k.lower() not in _FRAMING]
        return httpx.Response(r.status_code, headers=kept, content=b"".join(parts))


_FRAMING = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def _longer(path: str, limit: int) -> SecurityError:
    return SecurityError(
        f"the server's answer to {path} exceeds the {limit} bytes this device reads for it"
    )
