"""Request keys (issue 28): a device authenticates its requests with an HMAC under a key the server derives.

A device opens a key with one request signed with its Ed25519 key; its later requests carry the key id
and the HMAC-SHA256 of the payload it would sign. The server checks them without an Ed25519 verification,
against the same enrolled-device row (revocation, re-keying), under the same timestamp and nonce rules;
a key of another device, another secret (a restart, another process), a past expiry or a wrong MAC is
refused, and the SDK then signs with its device key and opens a new one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.client import Device
from fedstats.errors import SecurityError
from fedstats.wire import auth
from fedstats.wire.enrollment import issue_identity
from service_helpers import pg_reachable, store_url
from test_service_hot_path import _finish, _round


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store of each kind, or of the production kind only for a test marked :data:`PRODUCTION`."""
    kind = request.param
    if kind == "production":
        kind = "postgresql" if pg_reachable() is None else "sqlite"
    with store_url(kind, tmp_path / "keys.db") as u:
        yield u


PRODUCTION = pytest.mark.parametrize("db_url", ["production"], indirect=True)
"""On the production store only (PostgreSQL when reachable, else SQLite): a test of how devices and server
processes authenticate, which no store query decides (what the store keeps, the secret across a restart
and the device row a re-keying changes, is tested on both stores; the store's own semantics are the
parity class's, tests/service/test_service_state.py)."""


SECRET = bytes(range(32))
PAYLOAD = auth.signing_payload("GET", "/v1/client/work", "1700000000", "ab" * 16, b"")


def test_a_request_key_verifies_only_its_own_payload_device_key_and_secret() -> None:
    now = 1_800_000_000.0
    got = auth.open_request_key(SECRET, "dev-1", "aa" * 32, now=now)
    assert got["expires"] == int(now) + auth.REQUEST_KEY_SECONDS
    key = bytes.fromhex(got["key"])
    mac = auth.hmac.digest(key, PAYLOAD, "sha256").hex()
    auth.verify_request_mac(SECRET, got["key_id"], "dev-1", "aa" * 32, PAYLOAD, mac, now=now)
    wrong = {
        "another device": (SECRET, got["key_id"], "dev-2", "aa" * 32, PAYLOAD, mac, now),
        "a re-keyed device": (SECRET, got["key_id"], "dev-1", "bb" * 32, PAYLOAD, mac, now),
        "another secret": (bytes(32), got["key_id"], "dev-1", "aa" * 32, PAYLOAD, mac, now),
        "another payload": (SECRET, got["key_id"], "dev-1", "aa" * 32, PAYLOAD + b"x", mac, now),
        "another expiry": (
            SECRET,
            f"{got['expires'] - 1}.{got['key_id'].split('.')[1]}",
            "dev-1",
            "aa" * 32,
            PAYLOAD,
            mac,
            now,
        ),
        "expired": (SECRET, got["key_id"], "dev-1", "aa" * 32, PAYLOAD, mac, now + 3601),
        "not hex": (SECRET, got["key_id"], "dev-1", "aa" * 32, PAYLOAD, "é" * 64, now),
    }
    for secret, kid, cid, pub, msg, m, t in wrong.values():  # keys: what differs from the key's
        with pytest.raises(SecurityError, match=r"^request key"):
            auth.verify_request_mac(secret, kid, cid, pub, msg, m, now=t)


def test_a_key_id_further_ahead_than_a_key_lives_is_refused() -> None:
    now = 1_800_000_000.0
    kid = f"{int(now) + auth.REQUEST_KEY_SECONDS + 3600}.{'0' * 32}"
    key = auth._request_key(SECRET, kid, "dev-1", "aa" * 32)
    mac = auth.hmac.digest(key, PAYLOAD, "sha256").hex()
    with pytest.raises(SecurityError, match="expired"):
        auth.verify_request_mac(SECRET, kid, "dev-1", "aa" * 32, PAYLOAD, mac, now=now)


@settings(max_examples=200, deadline=None)
@given(key_id=st.text(max_size=80), mac=st.text(max_size=80))
def test_any_malformed_key_id_or_mac_is_a_security_error(key_id: str, mac: str) -> None:
    with pytest.raises(SecurityError, match=r"^request key"):
        auth.verify_request_mac(SECRET, key_id, "dev-1", "aa" * 32, PAYLOAD, mac)


def _keyed(d: Any, method: str, path: str, body: bytes = b"") -> dict[str, str]:
    kid, key, _expires = d._request_key
    return auth.sign_request_with_key(kid, key, d.client_id, method, path, body)


@PRODUCTION
def test_devices_report_with_request_keys_and_the_server_verifies_no_signature(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _round(tmp_path, db_url) as (http, _app, devices, works, run_id, admin):
        assert all(d._request_key is not None for d in devices)  # opened after enrollment
        calls: list[str] = []
        real = auth.verify_signature

        def counted(*args: Any) -> None:
            calls.append("ed25519")
            real(*args)

        monkeypatch.setattr(auth, "verify_signature", counted)
        for d, work in zip(devices, works, strict=True):
            d._handle(work)  # the upload, authenticated by its request key
        assert _finish(http, run_id, admin)["status"] == "done"
        assert calls == []  # not one Ed25519 verification for N uploads

        d, other = devices[0], devices[1]
        path = "/v1/client/work"
        assert http.get(path, headers=_keyed(d, "GET", path)).status_code == 200
        # a wrong MAC, another device's key, a key under another secret: 401 "request key"
        bad = _keyed(d, "GET", path) | {auth.HEADER_SIGNATURE: "00" * 32}
        theirs = _keyed(other, "GET", path) | {auth.HEADER_CLIENT: d.client_id}
        for headers in (bad, theirs):
            r = http.get(path, headers=headers)
            assert r.status_code == 401 and r.json()["detail"].startswith("request key"), r.text
        # a key does not open another: opening one takes the device's signature
        r = http.post("/v1/client/request-key", headers=_keyed(d, "POST", "/v1/client/request-key"))
        assert r.status_code == 401 and "signed with the device key" in r.text
        # a signed request for a key is single-use too (its nonce is group-committed)
        signed = auth.sign_request(d._key, d.client_id, "POST", "/v1/client/request-key", b"")
        assert http.post("/v1/client/request-key", headers=signed).status_code == 200
        r = http.post("/v1/client/request-key", headers=signed)
        assert r.status_code == 401 and "replayed" in r.text, r.text
        # registration takes the signature too (the key of the certificate presented)
        body = json.dumps({"certificate": d._cert}).encode()
        keyed = _keyed(d, "POST", "/v1/client/register", body)
        r = http.post("/v1/client/register", content=body, headers=keyed)
        assert r.status_code == 401 and r.json()["detail"].startswith("request key"), r.text
        # a keyed write is single-use, as a signed one
        cin = f"/v1/client/runs/{run_id}/checkin"
        once = _keyed(d, "POST", cin, b'{"records": 1}')
        first = http.post(cin, content=b'{"records": 1}', headers=once)
        again = http.post(cin, content=b'{"records": 1}', headers=once)
        assert first.status_code != 401, first.text
        assert again.status_code == 401 and "replayed" in again.text
        # a revoked device's key is refused as its signature is
        r = http.post(f"/v1/admin/devices/{other.client_id}/revoke", headers=admin)
        assert r.status_code == 200, r.text
        r = http.get(path, headers=_keyed(other, "GET", path))
        assert r.status_code == 403, r.text


class _Recorded:
    """The test client as a device's transport: each request's method and path recorded; with
    ``strip``, answers lose the request key header (a server that does not open one in a poll)."""

    def __init__(self, http: Any, strip: bool = False) -> None:
        self.http, self.strip, self.sent = http, strip, []

    def request(self, method: str, url: str, **kw: Any) -> Any:
        self.sent.append((method, url))
        r = self.http.request(method, url, **kw)
        if self.strip:
            r.headers.pop(auth.HEADER_OPEN_KEY, None)
        return r

    def __getattr__(self, name: str) -> Any:
        return getattr(self.http, name)


@PRODUCTION
def test_a_work_poll_opens_the_request_key_in_its_answer(tmp_path: Path, db_url: str) -> None:
    """A device's first work poll asks for its request key in the answer (``Fedstats-Request-Key: 1``)
    instead of a request of its own; the poll's nonce is recorded (replayed, it is refused and opens no
    key); a keyed poll, or one that does not ask, opens none; from a server that answers no key the
    device opens it by ``POST /v1/client/request-key`` at once, as before."""
    with _round(tmp_path, db_url) as (http, _app, _devices, _works, _run_id, _admin):
        for strip in (False, True):
            ident = issue_identity(
                tmp_path / "authority", f"new-{strip}", "default", tmp_path / f"new-{strip}.json"
            )
            d = Device("https://127.0.0.1", ident, {"value": np.zeros(1)})
            d._http = transport = _Recorded(http, strip)  # type: ignore[assignment]
            d.register()
            d.step()
            assert d._request_key is not None
            opened = [] if not strip else [("POST", "/v1/client/request-key")]
            assert transport.sent == [
                ("POST", "/v1/client/register"),
                ("GET", "/v1/client/work"),
                *opened,
            ]
            assert auth.HEADER_KEY_ID in d._send("GET", "/v1/client/work", b"").request.headers
        path = "/v1/client/work"
        signed = auth.sign_request(d._key, d.client_id, "GET", path, b"")
        asking = signed | {auth.HEADER_OPEN_KEY: "1"}
        r = http.get(path, headers=asking)
        assert r.status_code == 200 and r.headers["cache-control"] == "no-store", r.text
        got = json.loads(r.headers[auth.HEADER_OPEN_KEY])
        mine = auth.sign_request_with_key(
            got["key_id"], bytes.fromhex(got["key"]), d.client_id, "GET", path, b""
        )
        assert http.get(path, headers=mine).status_code == 200  # the key authenticates
        r = http.get(path, headers=asking)  # replayed: refused, no key
        assert (
            r.status_code == 401 and "replayed" in r.text and auth.HEADER_OPEN_KEY not in r.headers
        )
        for headers in (mine | {auth.HEADER_OPEN_KEY: "1"}, signed):  # keyed; not asking
            r = http.get(path, headers=headers)
            assert r.status_code == 200 and auth.HEADER_OPEN_KEY not in r.headers


@PRODUCTION
def test_a_device_whose_key_the_server_no_longer_knows_signs_and_opens_a_new_one(
    tmp_path: Path, db_url: str
) -> None:
    with _round(tmp_path, db_url) as (_http, app, devices, _works, _run_id, _admin):
        d = devices[0]
        old = d._request_key
        assert old is not None
        logged: list[str] = []
        d.log = logged.append
        # a key refused a moment after its opening (requests spread over server processes): the
        # request is signed again at once, and no new key is opened within that minute
        app.state.device_auth.key_secret = bytes(32)  # every key opened so far is unknown
        assert d._send("GET", "/v1/client/work", b"").status_code == 200  # re-signed at once
        assert any("request key refused" in line for line in logged), logged
        assert d._request_key is None
        d._send("GET", "/v1/client/work", b"")
        assert d._request_key is None  # signed, no thrash of keys
        # a key refused long after its opening (a server restart): the next request opens a new one
        d._key_opened_at -= 3600
        d._next_key_try = d._key_opened_at + 60.0
        d._send("GET", "/v1/client/work", b"")
        assert d._request_key is not None and d._request_key[0] != old[0]
        app.state.device_auth.key_secret = bytes(range(32))
        d._key_opened_at -= 3600
        assert d._send("GET", "/v1/client/work", b"").status_code == 200
        d._send("GET", "/v1/client/work", b"")
        assert d._request_key is not None
        # an expired key is not used: the device opens a new one first
        kid, key, _ = d._request_key
        d._request_key = (kid, key, time.time() + 60)
        d._send("GET", "/v1/client/work", b"")
        assert d._request_key is not None and d._request_key[0] != kid


def test_a_re_keyed_device_cannot_use_a_key_opened_under_its_old_key(
    tmp_path: Path, db_url: str
) -> None:
    with _round(tmp_path, db_url) as (http, _app, devices, _works, _run_id, admin):
        d = devices[2]
        stale = _keyed(d, "GET", "/v1/client/work")
        assert (
            http.post(f"/v1/admin/devices/{d.client_id}/revoke", headers=admin).status_code == 200
        )
        ident = issue_identity(
            tmp_path / "authority",
            d.client_id,
            "default",
            tmp_path / "ids" / f"{d.client_id}-new.json",
        )
        r = http.post(
            f"/v1/admin/devices/{d.client_id}/reinstate",
            json={"certificate": ident["certificate"]},
            headers=admin,
        )
        assert r.status_code == 200 and r.json()["public_key"] != d._cert["body"]["public_key"], (
            r.text
        )
        r = http.get("/v1/client/work", headers=stale)
        assert r.status_code == 401 and r.json()["detail"].startswith("request key"), r.text


@PRODUCTION
def test_server_processes_sharing_a_secret_accept_each_others_keys(
    tmp_path: Path, db_url: str
) -> None:
    """``request_key_secret`` (``fedstats server --request-key-secret``): a key opened on one process
    authenticates the device on another process given the same secret (several servers behind one
    balancer, or a restart); a process with its own random secret refuses it ("request key")."""
    from fastapi.testclient import TestClient

    from fedstats.service.http.app import ServerSettings, create_app
    from fedstats.service.store import open_store

    shared = bytes(range(100, 132))
    with _round(tmp_path, db_url, request_key_secret=shared) as (http, _a, devices, _w, run_id, _):
        d = devices[0]
        assert d._request_key is not None  # opened on the first process, under the shared secret
        path = "/v1/client/work"
        assert http.get(path, headers=_keyed(d, "GET", path)).status_code == 200
        store = open_store(db_url)
        try:
            same = create_app(store, ServerSettings(request_key_secret=shared), run_driver=False)
            other = create_app(store, ServerSettings(), run_driver=False)
            with TestClient(same) as second, TestClient(other) as third:
                r = second.get(path, headers=_keyed(d, "GET", path))
                assert r.status_code == 200, r.text
                assert [x["run_id"] for x in r.json()["rounds"]] == [run_id]
                r = third.get(path, headers=_keyed(d, "GET", path))
                assert r.status_code == 401 and r.json()["detail"].startswith("request key"), r.text
        finally:
            store.close()


def test_request_keys_survive_a_restart_by_default(tmp_path: Path, db_url: str) -> None:
    """Without ``--request-key-secret`` the secret is drawn once and kept in the state
    (``server_secrets``): a key opened by a server process verifies on the same database after a
    restart (a new app on a reopened store; SQLite and PostgreSQL); another database has its own."""
    from fedstats.service.http.app import ServerSettings, create_app
    from fedstats.service.store import open_store

    def secret(url: str) -> bytes:
        store = open_store(url)
        try:
            app = create_app(store, ServerSettings(), run_driver=False)
            return bytes(app.state.device_auth.key_secret)
        finally:
            store.close()

    before = secret(db_url)
    got = auth.open_request_key(before, "dev-1", "aa" * 32)
    mac = auth.hmac.digest(bytes.fromhex(got["key"]), PAYLOAD, "sha256").hex()
    after = secret(db_url)  # the restart
    auth.verify_request_mac(after, got["key_id"], "dev-1", "aa" * 32, PAYLOAD, mac)
    assert secret("memory://") != before


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "a readable file of hex digits"),
        ("not hex at all", "a readable file of hex digits"),
        ("ab" * 31, "at least 32 bytes"),
    ],
)
def test_the_server_refuses_a_bad_request_key_secret_in_one_line(
    tmp_path: Path, content: str | None, why: str
) -> None:
    from typer.testing import CliRunner

    from fedstats.cli.app import app

    secret = tmp_path / "secret.hex"
    if content is not None:
        secret.write_text(content + "\n")
    db = f"sqlite:///{tmp_path / 'never.db'}"
    res = CliRunner().invoke(app, ["server", "--db", db, "--request-key-secret", str(secret)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--request-key-secret" in lines[0] and why in lines[0], lines
    assert not (tmp_path / "never.db").exists()


def test_a_secret_file_of_64_hex_digits_is_read_whitespace_ignored(tmp_path: Path) -> None:
    from fedstats.cli.server import read_key_secret
    from fedstats.service.http.deps import DeviceAuth

    f = tmp_path / "secret.hex"
    f.write_text("  " + "0f" * 16 + "\n" + "a0" * 16 + "\n")
    assert read_key_secret(f) == bytes.fromhex("0f" * 16 + "a0" * 16)
    with pytest.raises(ValueError, match="key_secret"):
        DeviceAuth(None, 300.0, None, key_secret=b"short")  # type: ignore[arg-type]
