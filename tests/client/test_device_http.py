"""The device's HTTP client: the same requests as ``httpx`` (its URL cache changes nothing sent, stays
bounded and holds no one-off query), and its capped reads read and refuse what they did."""

from __future__ import annotations

import gzip
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.client import transport
from fedstats.client.transport import DeviceHTTP, read_capped
from fedstats.errors import SecurityError


def test_requests_are_httpx_requests() -> None:
    base = "https://device.test:8443/api"
    ours, plain = DeviceHTTP(base_url=base), httpx.Client(base_url=base)
    try:
        members = ",".join(str(j) for j in range(0, 400, 3))  # a session's member list
        cases = [
            ("GET", "/v1/client/work", None),
            ("POST", "/v1/client/runs/r1/rounds/0/secure/0/1", {"wait": "25.000"}),
            ("POST", "/v1/client/runs/r1/rounds/0/secure/0/0", {"members": members}),
            (
                "POST",
                "/v1/client/runs/r1/rounds/0/secure/0/0",
                {"wait": "25.000", "members": members},
            ),
        ]
        for _ in range(2):  # built, then from the remembered URL
            for method, path, params in cases:
                got = ours.build_request(method, path, params=params, content=b"x")
                want = plain.build_request(method, path, params=params, content=b"x")
                assert str(got.url) == str(want.url)
                assert got.headers.raw == want.headers.raw
    finally:
        ours.close()
        plain.close()


_BASES = ["https://device.test:8443/api", "https://127.0.0.1:8443", "http://[::1]:9000/a/b/"]
_PATHS = ["/v1/client/runs/r1/rounds/0/secure/0/0", "/v1/client/work", "v1/client/runs/x%20y/seed"]


_CLIENTS: dict[str, tuple[DeviceHTTP, httpx.Client]] = {}


def _clients(base: str) -> tuple[DeviceHTTP, httpx.Client]:
    """A device client and a plain one on ``base``, made once (each makes an SSL context: ~40 ms)."""
    got = _CLIENTS.get(base)
    if got is None:
        got = _CLIENTS[base] = (DeviceHTTP(base_url=base), httpx.Client(base_url=base))
    return got


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(_BASES),
    st.sampled_from(_PATHS),
    st.lists(st.integers(0, 10**6), max_size=300),
    st.lists(st.integers(0, 10**6), max_size=120),
    st.one_of(st.none(), st.sampled_from(["0.000", "25.000"])),
    st.text(max_size=8),
)
def test_a_one_off_query_builds_httpx_s_own_request(
    base: str,
    path: str,
    members: list[int],
    also: list[int],
    wait: str | None,
    other: str,
) -> None:
    # the advertisement's members=...&also=... (long, sent once) and short queries alike: the URL,
    # the target on the wire and the headers are httpx's own, built from the path alone
    params: dict[str, str] = {} if wait is None else {"wait": wait}
    params["members"] = ",".join(map(str, members))
    if also:
        params["also"] = ",".join(map(str, also))
    if other:
        params["x"] = other
    ours, plain = _clients(base)
    for _ in range(2):
        got = ours.build_request("POST", path, params=params, content=b"m", headers={"a": "b"})
        want = plain.build_request("POST", path, params=params, content=b"m", headers={"a": "b"})
        assert str(got.url) == str(want.url) and got.url.raw_path == want.url.raw_path
        assert got.headers.raw == want.headers.raw and got.read() == want.read()


def test_one_off_queries_are_not_remembered_and_the_urls_stay_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transport, "_URLS", {})
    monkeypatch.setattr(transport, "_MAX_URLS", 16)
    client = DeviceHTTP(base_url="https://device.test:8443")
    try:
        path = "/v1/client/runs/r1/rounds/0/secure/0/0"
        for i in range(50):  # fifty advertisements: their path once, none of their queries
            members = ",".join(str(j) for j in range(i, i + 200))
            client.build_request("POST", path, params={"wait": "1.000", "members": members})
        assert list(transport._URLS) == [("https://device.test:8443", path, ())]
        for i in range(50):  # short queries are remembered, at most _MAX_URLS of them
            client.build_request("GET", f"/v1/client/runs/r{i}/seed", params={"part": "committee"})
            assert len(transport._URLS) <= 16
        remembered = ("https://device.test:8443", "/v1/client/work", (("wait", "25.000"),))
        client.build_request("GET", "/v1/client/work", params={"wait": "25.000"})
        assert remembered in transport._URLS
    finally:
        client.close()


def _read_capped_before(
    client: httpx.Client, path: str, limit: int
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The device's capped read as it was before it returned a declared answer itself."""
    with client.stream("POST", path, content=b"m", headers={}, params=None, timeout=5.0) as r:
        declared = r.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise SecurityError(
                f"the server's answer to {path} ({declared} bytes) exceeds the "
                f"{limit} bytes this device reads for it"
            )
        parts, got = [], 0
        for chunk in r.iter_bytes():
            got += len(chunk)
            if got > limit:
                raise SecurityError(
                    f"the server's answer to {path} exceeds the {limit} bytes this "
                    "device reads for it"
                )
            parts.append(chunk)
        a = httpx.Response(r.status_code, headers=r.headers, content=b"".join(parts))
        return a.status_code, a.headers.raw, a.content


class _Chunks(httpx.SyncByteStream):
    """A body in chunks that counts what was read of it."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks, self.read = chunks, 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        for chunk in self.chunks:
            self.read += 1
            yield chunk


def _outcome(fn: Any) -> Any:
    try:
        return ("ok", fn())
    except SecurityError as exc:
        return ("refused", str(exc))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=40), max_size=8),
    st.integers(-3, 3),
    st.sampled_from(["declared", "chunked", "understated", "overstated"]),
    st.sampled_from([200, 404, 503]),
)
def test_a_capped_read_reads_what_it_read_and_refuses_what_it_refused(
    chunks: list[bytes], slack: int, framing: str, status: int
) -> None:
    body = b"".join(chunks)
    limit = max(0, len(body) + slack)  # around the body's length, where the outcome turns
    streams: list[_Chunks] = []

    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "application/json"}
        if framing != "chunked":  # a transport other than HTTP/1.1's may misstate it
            stated = {"declared": 0, "understated": -1, "overstated": 1}[framing]
            headers["content-length"] = str(max(0, len(body) + stated))
        streams.append(_Chunks(chunks))
        return httpx.Response(status, headers=headers, stream=streams[-1])

    client = DeviceHTTP(base_url="https://device.test", transport=httpx.MockTransport(answer))
    try:
        path = "/v1/client/runs/r/rounds/0/secure/0/1"
        before = _outcome(lambda: _read_capped_before(client, path, limit))
        got = _outcome(lambda: read_capped(client, "POST", path, b"m", {}, None, 5.0, limit))
        if before[0] == "refused" or got[0] == "refused":
            assert got == before  # the same refusal, with the same message
            if framing == "declared" and len(body) > limit:
                assert streams[-1].read == 0  # refused before its body is read
        else:
            r = got[1]
            assert (r.status_code, r.headers.raw, r.content) == before[1]
            assert r.content == body
    finally:
        client.close()


def test_a_compressed_answer_is_counted_decoded() -> None:
    # declared small, decoded large (a compression bomb): refused while decoding, as before
    packed = gzip.compress(bytes(100_000))

    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-encoding": "gzip", "content-length": str(len(packed))}
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(packed))

    client = DeviceHTTP(base_url="https://device.test", transport=httpx.MockTransport(answer))
    try:
        assert len(packed) < 1000
        with pytest.raises(SecurityError, match="exceeds the 1000 bytes"):
            read_capped(client, "GET", "/v1/client/work", b"", {}, None, 5.0, 1000)
    finally:
        client.close()


@pytest.mark.parametrize("declared", [True, False])
def test_a_compressed_answer_within_the_cap_is_returned_decoded(declared: bool) -> None:
    # a proxy that compresses: the answer the device gets is the decoded body, no longer marked as
    # encoded (an httpx.Response built from decoded bytes under Content-Encoding fails to read them)
    body = b'{"work": []}' + b" " * 500
    packed = gzip.compress(body)

    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-encoding": "gzip", "content-type": "application/json"}
        if declared:
            headers["content-length"] = str(len(packed))
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(packed))

    client = DeviceHTTP(base_url="https://device.test", transport=httpx.MockTransport(answer))
    try:
        got = read_capped(client, "GET", "/v1/client/work", b"", {}, None, 5.0, 1000)
        assert got.content == body
        assert got.json() == {"work": []}
        assert "content-encoding" not in got.headers
        assert got.headers["content-type"] == "application/json"
        with pytest.raises(SecurityError, match="exceeds the 100 bytes"):
            read_capped(client, "GET", "/v1/client/work", b"", {}, None, 5.0, 100)
    finally:
        client.close()
