"""The server's side of the trust boundary (issue 25, items 6 and 7): TLS unless on loopback, and never a
private key of the enrollment authority or of a device or analyst."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedstats.cli.app import app
from fedstats.cli.server import is_loopback
from fedstats.wire.enrollment import init_authority, issue_identity, load_authority

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout + res.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.5.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.7", False),
        ("example.org", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.7", "::"])
def test_plain_http_beyond_loopback_is_refused_before_anything_listens(
    tmp_path: Path, host: str
) -> None:
    db = tmp_path / "s.db"
    code, out = _run("server", "--db", f"sqlite:///{db}", "--host", host, "--port", "1")
    assert code == 2, out
    assert "--host" in out and "--insecure-http" in out
    assert "Traceback" not in out
    assert not db.exists()  # refused before the store was opened


@pytest.fixture
def authority(tmp_path: Path) -> Path:
    init_authority(tmp_path / "authority")
    return tmp_path / "authority"


def test_the_authority_key_file_is_labelled_and_still_loads(authority: Path) -> None:
    text = (authority / "authority.key").read_text()
    assert "private_key" in json.loads(text)
    key = load_authority(authority)
    from fedstats.wire import auth

    assert auth.public_key_hex(key) == (authority / "authority.pub").read_text().strip()


def test_an_authority_made_before_the_label_still_loads(authority: Path) -> None:
    from fedstats.wire import auth

    key = load_authority(authority)
    (authority / "authority.key").write_text(auth.private_key_hex(key) + "\n")
    assert auth.public_key_hex(load_authority(authority)) == auth.public_key_hex(key)


def _private_files(authority: Path, tmp_path: Path) -> dict[str, Path]:
    ident = tmp_path / "device.json"
    issue_identity(authority, "device-1", "default", ident)
    pem = tmp_path / "key.pem"
    pem.write_text(
        "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"
    )
    return {"authority.key": authority / "authority.key", "identity": ident, "pem": pem}


@pytest.mark.parametrize("kind", ["authority.key", "identity", "pem"])
@pytest.mark.parametrize("command", [("server",), ("server", "trust")])
def test_the_server_refuses_private_key_material(
    authority: Path, tmp_path: Path, kind: str, command: tuple[str, ...]
) -> None:
    path = _private_files(authority, tmp_path)[kind]
    db = tmp_path / "s.db"
    args = [*command, "--db", f"sqlite:///{db}", "--authority", str(path)]
    if command == ("server",):
        args += ["--port", "1"]
    code, out = _run(*args)
    assert code == 2, out
    assert "private key" in out and "Traceback" not in out
    assert not db.exists()  # nothing stored, nothing started


def test_trusting_the_public_key_works(authority: Path, tmp_path: Path) -> None:
    code, out = _run(
        "server",
        "trust",
        "--db",
        f"sqlite:///{tmp_path / 's.db'}",
        "--authority",
        str(authority / "authority.pub"),
    )
    assert code == 0, out


def test_a_file_that_is_no_key_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "pub"
    bad.write_text("not a key\n")
    code, out = _run(
        "server", "trust", "--db", f"sqlite:///{tmp_path / 's.db'}", "--authority", str(bad)
    )
    assert code == 2 and "--authority" in out and "Traceback" not in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_plain_http_on_loopback_serves_with_a_warning(tmp_path: Path) -> None:
    port = _free_port()
    exe = Path(sys.executable).parent / "fedstats"
    proc = subprocess.Popen(
        [str(exe), "server", "--db", f"sqlite:///{tmp_path / 's.db'}", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
        text=True,
    )
    try:
        import httpx

        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert "WARNING: serving plain HTTP on 127.0.0.1" in err
