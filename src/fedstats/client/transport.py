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

__all__ = ["DeviceHTTP", "ResponseCookies"]

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
