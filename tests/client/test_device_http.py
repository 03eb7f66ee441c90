"""The device's HTTP client builds the same requests as ``httpx`` (its URL cache changes nothing sent, stays bounded and holds no one-off query)."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.client import transport
from fedstats.client.transport import DeviceHTTP


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
    ours, plain = DeviceHTTP(base_url=base), httpx.Client(base_url=base)
    try:
        for _ in range(2):
            got = ours.build_request("POST", path, params=params, content=b"m", headers={"a": "b"})
            want = plain.build_request(
                "POST", path, params=params, content=b"m", headers={"a": "b"}
            )
            assert str(got.url) == str(want.url) and got.url.raw_path == want.url.raw_path
            assert got.headers.raw == want.headers.raw and got.read() == want.read()
    finally:
        ours.close()
        plain.close()


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
