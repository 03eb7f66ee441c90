"""The device's HTTP client builds the same requests as ``httpx`` (its URL cache changes nothing sent)."""

from __future__ import annotations

import httpx

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
