"""Start-up problems are one ``error:`` line and exit 2, before any database exists (issue 42, item 5).

The server's TLS files, its address and its database folder; the enrollment authority's files and the
identifiers it issues; a device's identity, CA and budget file; ``dev-certs`` never replacing a CA
silently; a request held at shutdown answered 503 rather than logged as a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fedstats._validation import check_identifier
from fedstats.cli.app import app
from fedstats.cli.server import StoppingApp
from fedstats.errors import ParameterError
from service_helpers import store_url

runner = CliRunner()

TASK: dict[str, Any] = {
    "analysis": "bitpushing-mean",
    "params": {"column": "value", "low": 0.0, "high": 1.0, "method": "weighted"},
    "privacy": {"epsilon": 0.5, "population": "default"},
    "cohort_size": 50,
    "deadlines": {"checkin": 600.0, "round": 60.0},
}


def refused(args: list[str], *needles: str) -> str:
    """Run the CLI; assert exit 2 with one line, an ``error:`` holding every needle; return it."""
    res = runner.invoke(app, args)
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    lines = [line for line in res.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with dev certificates (tls/), an authority (auth/), a device and an analyst."""
    root = tmp_path_factory.mktemp("pki")
    assert runner.invoke(app, ["server", "dev-certs", "--out", str(root / "tls")]).exit_code == 0
    assert runner.invoke(app, ["enroll", "init", "--authority", str(root / "auth")]).exit_code == 0
    for cid in ("d1", "d2"):
        got = runner.invoke(
            app,
            ["enroll", "client", "--authority", str(root / "auth"), "--client-id", cid,
             "--out", str(root / f"{cid}.json")],
        )  # fmt: skip
        assert got.exit_code == 0, got.output
    got = runner.invoke(
        app,
        ["enroll", "analyst", "alice", "--authority", str(root / "auth"),
         "--out", str(root / "alice.json"), "--population", "default"],
    )  # fmt: skip
    assert got.exit_code == 0, got.output
    (root / "bad.pem").write_text("not a PEM file\n")
    (root / "data.csv").write_text("value\n0.5\n")
    return root


def _serve(root: Path, db: Path, *args: str) -> list[str]:
    return ["server", "--db", f"sqlite:///{db}", "--port", "1", *args]


@pytest.mark.parametrize(
    ("cert", "key", "needle"),
    [
        ("tls/server.pem", "tls/missing.pem", "--tls-key"),  # missing
        ("tls/server-key.pem", "tls/server.pem", "swapped"),  # swapped
        ("tls/server.pem", "tls/ca-key.pem", "private key of the certificate"),  # mismatched
        ("bad.pem", "tls/server-key.pem", "--tls-cert"),  # not PEM
        ("tls/server.pem", "bad.pem", "--tls-key"),
    ],
)
def test_bad_tls_files_are_one_line_and_create_no_database(
    pki: Path, tmp_path: Path, cert: str, key: str, needle: str
) -> None:
    db = tmp_path / "fedstats.db"
    refused(_serve(pki, db, "--tls-cert", str(pki / cert), "--tls-key", str(pki / key)), needle)
    assert not db.exists()


def test_a_busy_port_or_a_bad_host_is_one_line_before_any_database(
    pki: Path, tmp_path: Path
) -> None:
    db = tmp_path / "fedstats.db"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = refused(
            ["server", "--db", f"sqlite:///{db}", "--port", str(port)], "--port", "in use"
        )
    assert str(port) in line
    refused(
        ["server", "--db", f"sqlite:///{db}", "--host", "no-such-host.invalid", "--insecure-http"],
        "--host",
    )
    assert not db.exists()
    refused(["server", "--db", f"sqlite:///{tmp_path / 'none' / 'x.db'}"], "--db")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_busy_port_leaves_either_store_untouched(kind: str, tmp_path: Path) -> None:
    import sqlalchemy as sa

    with store_url(kind, tmp_path / "fedstats.db") as url, socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        refused(["server", "--db", url, "--port", str(busy.getsockname()[1])], "--port")
        if kind == "sqlite":
            assert not (tmp_path / "fedstats.db").exists()
        else:  # the schema holds no table: nothing was migrated
            engine = sa.create_engine(url)
            try:
                assert sa.inspect(engine).get_table_names() == []
            finally:
                engine.dispose()


def test_dev_certs_keeps_an_existing_ca_and_refuses_an_empty_host(
    pki: Path, tmp_path: Path
) -> None:
    ca = (pki / "tls" / "ca.pem").read_bytes()
    refused(["server", "dev-certs", "--out", str(pki / "tls")], "--force")
    assert (pki / "tls" / "ca.pem").read_bytes() == ca
    refused(["server", "dev-certs", "--out", str(tmp_path / "t"), "--host", ""], "--host")
    assert not (tmp_path / "t" / "ca.pem").exists()
    out = tmp_path / "again"
    for _ in range(2):
        got = runner.invoke(app, ["server", "dev-certs", "--out", str(out), "--force"])
        assert got.exit_code == 0, got.output


def test_add_operator_on_an_unwritable_database_is_one_line(pki: Path, tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    refused(["server", "add-operator", "--name", "op", "--db", f"sqlite:///{afile}/x.db"], "--db")
    refused(["server", "add-operator", "--name", "a/b", "--db", f"sqlite:///{tmp_path}/x.db"])
    assert not (tmp_path / "x.db").exists()


def test_unwritable_outputs_are_one_line(pki: Path, tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    auth = str(pki / "auth")
    refused(["enroll", "init", "--authority", str(afile / "auth")], "--authority")
    refused(
        ["enroll", "client", "--authority", auth, "--client-id", "z", "--out", f"{afile}/z.json"],
        "--out",
    )
    refused(
        ["enroll", "analyst", "bob", "--authority", auth, "--population", "p",
         "--out", f"{afile}/b.json"],
        "--out",
    )  # fmt: skip
    refused(["server", "dev-certs", "--out", str(afile / "tls")], "--out")
    pub = str(pki / "auth" / "authority.pub")
    refused(["server", "trust", "--authority", pub, "--db", f"sqlite:///{afile}/x.db"], "--db")
    refused(["server", "rotate-operator", "--name", "op", "--db", f"sqlite:///{afile}/x.db"])
    refused(["server", "--vdaf-peer-ca", str(pki / "bad.pem"), "--port", "1"], "--vdaf-peer-ca")


def test_a_truncated_authority_key_is_one_line(pki: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "auth"
    damaged.mkdir()
    text = (pki / "auth" / "authority.key").read_text()
    (damaged / "authority.key").write_text(text[: len(text) // 2])
    refused(
        ["enroll", "client", "--authority", str(damaged), "--client-id", "d9",
         "--out", str(tmp_path / "d9.json")],
        "authority.key",
    )  # fmt: skip
    assert not (tmp_path / "d9.json").exists()


@pytest.mark.parametrize("cid", ["a/../b", "..", "a\\b", "a\x00b", "tab\there", " lead", "x" * 129])
def test_client_ids_with_separators_dots_or_control_characters_are_refused(
    pki: Path, tmp_path: Path, cid: str
) -> None:
    out = tmp_path / "x.json"
    refused(
        ["enroll", "client", "--authority", str(pki / "auth"), "--client-id", cid,
         "--out", str(out)],
        "--client-id",
    )  # fmt: skip
    assert not out.exists()
    with pytest.raises(ParameterError, match="no control characters"):
        check_identifier("client_id", cid)


@pytest.mark.parametrize("cid", ["device-10", "hospital.eu:7", "a.b", "café", "A_b+c@d"])
def test_ordinary_identifiers_are_accepted(cid: str) -> None:
    assert check_identifier("client_id", cid) == cid


def test_tasks_sign_to_an_unwritable_path_is_one_line(pki: Path, tmp_path: Path) -> None:
    task = tmp_path / "task.json"
    task.write_text(json.dumps(TASK))
    afile = tmp_path / "afile"
    afile.write_text("")
    refused(
        ["admin", "tasks", "sign", str(task), "--analyst", str(pki / "alice.json"),
         "--out", str(afile / "env.json")],
        "--out",
    )  # fmt: skip


def _device(pki: Path, identity: Path, *args: str) -> list[str]:
    return [
        "client", "run", "--server", "http://127.0.0.1:9", "--identity", str(identity),
        "--data", str(pki / "data.csv"), "--connect-timeout", "0.1", *args,
    ]  # fmt: skip


def test_a_device_checks_its_files_before_connecting(pki: Path, tmp_path: Path) -> None:
    mixed = tmp_path / "mixed.json"
    ident = json.loads((pki / "d1.json").read_text())
    ident["private_key"] = json.loads((pki / "d2.json").read_text())["private_key"]
    mixed.write_text(json.dumps(ident))
    os.chmod(mixed, 0o600)
    refused(_device(pki, mixed), "matches its certificate")
    shared = tmp_path / "shared.json"
    shared.write_text((pki / "d1.json").read_text())
    os.chmod(shared, 0o644)
    refused(_device(pki, shared), "--identity", "0644", "chmod 600")
    refused(_device(pki, pki / "d1.json", "--ca", str(pki / "bad.pem")), "--ca")
    admin = [
        "admin",
        "--server",
        "https://127.0.0.1:9",
        "--token",
        "t",
        "--ca",
        str(pki / "bad.pem"),
    ]
    refused([*admin, "runs", "list"], "--ca")
    negative = tmp_path / "budget.json"
    charge = {"epsilon": -5.0, "delta": 0.0, "rho": None, "status": "spent"}
    negative.write_text(json.dumps({"charges": {"r1": charge}}))
    refused(_device(pki, pki / "d1.json", "--budget-file", str(negative)), "negative")
    # the device's own files as enrolled pass every check: it gets as far as the (closed) port
    got = runner.invoke(app, _device(pki, pki / "d1.json"))
    assert got.exit_code == 1 and "error:" in got.output, got.output


def test_a_request_held_at_shutdown_is_answered_503_not_a_traceback() -> None:
    async def held(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(60)

    async def main(stopping: bool) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        wrapped = StoppingApp(held)
        task = asyncio.create_task(wrapped({"type": "http"}, None, send))
        await asyncio.sleep(0.01)
        wrapped.stopping = stopping
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            sent.append({"cancelled": True})
        return sent

    answered = asyncio.run(main(True))
    assert answered[0]["status"] == 503
    assert (b"retry-after", b"1") in answered[0]["headers"]
    assert answered[-1]["type"] == "http.response.body"
    # outside a shutdown a cancellation is not swallowed
    assert asyncio.run(main(False)) == [{"cancelled": True}]
