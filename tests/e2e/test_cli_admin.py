"""``fedstats admin`` against a real server, and the identity/operator commands' refusals."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from service_helpers import FEDSTATS, Deployment, store_deployment

TASK: dict[str, Any] = {
    "analysis": "bitpushing-mean",
    "params": {"column": "value", "low": 0.0, "high": 1.0, "method": "weighted"},
    "privacy": {"epsilon": 0.5, "population": "default"},
    "cohort_size": 50,
    "deadlines": {"checkin": 600.0, "round": 60.0},
}


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from store_deployment("sqlite", tmp_path_factory.mktemp("cli-admin"))


def _fed(
    *args: str, env: dict[str, str] | None = None, real: bool = False
) -> subprocess.CompletedProcess[str]:
    """``fedstats *args``: in this process (click's runner: the same application, exit code, stdout
    and stderr, without a Python start-up per command), or as a real ``fedstats`` process (``real``:
    a few calls, so that the installed entry point is tested against the server too)."""
    if real:
        return subprocess.run(
            [*FEDSTATS, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, **(env or {})),
        )
    from fedstats.cli.app import app

    got = CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    return subprocess.CompletedProcess(list(args), got.exit_code, got.stdout, got.stderr)


def _admin(
    dep: Deployment, *args: str, token: str | None = None, real: bool = False
) -> subprocess.CompletedProcess[str]:
    """``fedstats admin`` with the token (default the deployment's) from the environment."""
    return _fed(
        "admin",
        "--server",
        dep.url,
        "--ca",
        str(dep.certs["ca"]),
        *args,
        env={"FEDSTATS_TOKEN": token or dep.token, "COLUMNS": "200"},  # tables uncut
        real=real,
    )


def _json(got: subprocess.CompletedProcess[str]) -> Any:
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def _one_error_line(got: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert got.returncode == code, (got.returncode, got.stdout, got.stderr)
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), got.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_an_operator_runs_a_task_from_the_cli(dep: Deployment, tmp_path: Path) -> None:
    assert _json(
        _admin(
            dep, "budgets", "set", "population", "default", "--epsilon", "5", "--json", real=True
        )
    )["epsilon_budget"] == pytest.approx(5.0)
    _json(_admin(dep, "budgets", "set", "analyst", "alice", "--epsilon", "5", "--json"))
    task = tmp_path / "task.json"
    task.write_text(json.dumps(TASK))
    dep.analyst("default")
    analyst = dep.root / "analysts" / "default.json"
    created = _json(_admin(dep, "tasks", "create", str(task), "--analyst", str(analyst), "--json"))
    tid = created["task_id"]
    # a signed envelope file is posted as is
    env = tmp_path / "env.json"
    env.write_text(json.dumps(dep.sign(TASK)))
    assert _json(_admin(dep, "tasks", "create", str(env), "--json"))["task_id"] == tid
    # the analyst signs offline (no server, no token) and the operator posts the envelope
    offline = tmp_path / "offline.json"
    signed = _fed(
        "admin",
        "tasks",
        "sign",
        str(task),
        "--analyst",
        str(analyst),
        "--out",
        str(offline),
        real=True,
    )
    assert signed.returncode == 0 and signed.stdout == "", signed.stderr
    envelope = json.loads(offline.read_text())
    assert set(envelope) == {"task", "certificate", "signature"}
    printed = _fed("admin", "tasks", "sign", str(task), "--analyst", str(analyst))
    assert set(json.loads(printed.stdout)) == {"task", "certificate", "signature"}
    assert _json(_admin(dep, "tasks", "create", str(offline), "--json"))["task_id"] == tid
    assert tid in {t["task_id"] for t in _json(_admin(dep, "tasks", "list", "--json"))["items"]}
    assert _json(_admin(dep, "tasks", "show", tid, "--json"))["task_id"] == tid
    # one key, two invocations (a lost answer retried by hand): one run, one reservation
    r1 = _json(_admin(dep, "runs", "create", tid, "--idempotency-key", "cli-1", "--json"))
    r2 = _json(_admin(dep, "runs", "create", tid, "--idempotency-key", "cli-1", "--json"))
    assert r1["run_id"] == r2["run_id"]
    shown = _json(_admin(dep, "budgets", "show", "population", "default", "--json"))
    assert shown["spent_epsilon"] == pytest.approx(0.5)
    runs = _json(_admin(dep, "runs", "list", "--status", "checkin", "--json"))
    assert [r["run_id"] for r in runs["items"]] == [r1["run_id"]]
    table = _admin(dep, "runs", "list")
    assert table.returncode == 0 and r1["run_id"][:8] in table.stdout
    cancelled = _json(_admin(dep, "runs", "cancel", r1["run_id"], "--json"))
    assert cancelled["status"] == "aborted" and cancelled["error"] == "cancelled by alice"
    waited = _admin(dep, "runs", "wait", r1["run_id"], "--json")
    assert waited.returncode == 1 and json.loads(waited.stdout)["status"] == "aborted"
    assert "cancelled by alice" in waited.stderr
    # without --json: a progress line on stderr, the run as a table (issue 42, item 6)
    shown = _admin(dep, "runs", "wait", r1["run_id"])
    assert shown.returncode == 1 and f"run {r1['run_id']}: aborted" in shown.stderr
    assert r1["run_id"] in shown.stdout and "{" not in shown.stdout
    # the server's refusal is one line with its message, exit 1
    _one_error_line(_admin(dep, "runs", "cancel", r1["run_id"]), 1, "409", "already aborted")
    _one_error_line(_admin(dep, "runs", "show", "no-such-run"), 1, "404", "no-such-run")
    ops = _json(_admin(dep, "operators", "list", "--json"))
    assert [o["name"] for o in ops["items"]] == ["alice"]


def test_devices_are_listed_revoked_and_reinstated(dep: Deployment) -> None:
    import numpy as np

    from fedstats.client import Device

    ident = dep.identity("cli-dev")
    dev = Device(dep.url, ident, {"value": np.zeros(1)}, ca=dep.certs["ca"])
    try:
        dev.register()
    finally:
        dev.close()
    for name in ("cli-dev-10", "cli-dev-2"):
        other = Device(dep.url, dep.identity(name), {"value": np.zeros(1)}, ca=dep.certs["ca"])
        try:
            other.register()
        finally:
            other.close()
    listed = _json(_admin(dep, "devices", "list", "--json"))
    assert "cli-dev" in {d["client_id"] for d in listed["items"]}
    # the table: ISO dates (not 1.82744e+09), device-2 before device-10 (issue 42, item 6)
    table = _admin(dep, "devices", "list")
    assert table.returncode == 0, table.stderr
    assert table.stdout.index("cli-dev-2 ") < table.stdout.index("cli-dev-10")
    assert "e+09" not in table.stdout
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", table.stdout), table.stdout
    assert _json(_admin(dep, "devices", "revoke", "cli-dev", "--json"))["status"] == "revoked"
    revoked = _json(_admin(dep, "devices", "list", "--status", "revoked", "--json"))
    assert [d["client_id"] for d in revoked["items"]] == ["cli-dev"]
    back = _json(
        _admin(dep, "devices", "reinstate", "cli-dev", "--certificate", str(ident), "--json")
    )
    assert back["status"] == "active"


def test_an_operator_adds_and_removes_another(dep: Deployment) -> None:
    name = f"dana-{dep.port}"
    token = _admin(dep, "operators", "add", name)
    assert token.returncode == 0, token.stderr
    dana = token.stdout.strip()

    def as_dana(*args: str) -> subprocess.CompletedProcess[str]:
        return _admin(dep, *args, token=dana)

    assert name in {o["name"] for o in _json(as_dana("operators", "list", "--json"))["items"]}
    _one_error_line(_admin(dep, "operators", "add", name), 1, "422", "exists")
    _one_error_line(as_dana("operators", "remove", name), 1, "409", "itself")
    _one_error_line(_admin(dep, "operators", "remove", "nobody-at-all"), 1, "404")
    assert _json(_admin(dep, "operators", "remove", name, "--json")) == {
        "name": name,
        "removed": True,
    }
    _one_error_line(
        as_dana("runs", "list"), 1, "401"
    )  # the removed operator's token stopped working
    audit = [a["action"] for a in json.loads(_admin_get(dep, "/v1/admin/audit"))]
    assert "add-operator" in audit and "remove-operator" in audit


def _admin_get(dep: Deployment, path: str) -> str:
    import ssl
    import urllib.request

    req = urllib.request.Request(dep.url + path, headers={"Authorization": f"Bearer {dep.token}"})
    ctx = ssl.create_default_context(cafile=str(dep.certs["ca"]))
    with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
        return r.read().decode()


def test_bad_input_and_a_missing_token_are_one_line_exit_2(dep: Deployment, tmp_path: Path) -> None:
    _one_error_line(_admin(dep, "budgets", "set", "team", "x", "--epsilon", "1"), 2, "scope")
    _one_error_line(_admin(dep, "budgets", "set", "analyst", "x", "--epsilon", "0"), 2, "--epsilon")
    _one_error_line(_admin(dep, "runs", "list", "--status", "nope"), 2, "--status")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    _one_error_line(_admin(dep, "tasks", "create", str(bad)), 2, "file")
    unsigned = tmp_path / "unsigned.json"
    unsigned.write_text(json.dumps(TASK))
    _one_error_line(_admin(dep, "tasks", "create", str(unsigned)), 2, "--analyst")
    envelope = tmp_path / "envelope.json"
    envelope.write_text(json.dumps(dep.sign(TASK)))
    dep.analyst("default")
    analyst = str(dep.root / "analysts" / "default.json")
    out = tmp_path / "never.json"
    twice = _fed("admin", "tasks", "sign", str(envelope), "--analyst", analyst, "--out", str(out))
    _one_error_line(twice, 2, "already signed")
    _one_error_line(_fed("admin", "tasks", "sign", str(bad), "--analyst", analyst), 2, "file")
    assert not out.exists()  # nothing half-written
    no_token = _fed("admin", "--server", dep.url, "--ca", str(dep.certs["ca"]), "runs", "list")
    _one_error_line(no_token, 2, "--token")
    wrong = _fed(
        "admin",
        *("--server", dep.url, "--ca", str(dep.certs["ca"]), "--token", "x", "runs", "list"),
        real=True,
    )
    _one_error_line(wrong, 1, "401")


def test_add_operator_refuses_an_existing_name_and_rotation_replaces_the_token(
    dep: Deployment,
) -> None:
    db = dep.db
    first = _fed("server", "add-operator", "--db", db, "--name", "dora", real=True)
    assert first.returncode == 0
    token = first.stdout.strip()
    again = _fed("server", "add-operator", "--db", db, "--name", "dora")
    _one_error_line(again, 2, "--name", "rotate-operator")
    rotated = _fed("server", "rotate-operator", "--db", db, "--name", "dora")
    assert rotated.returncode == 0 and "no longer works" in rotated.stderr
    fresh = rotated.stdout.strip()
    assert fresh and fresh != token
    old = _fed(
        "admin", "--server", dep.url, "--ca", str(dep.certs["ca"]), "--token", token, "runs", "list"
    )
    _one_error_line(old, 1, "401")
    new = _fed(
        "admin", "--server", dep.url, "--ca", str(dep.certs["ca"]), "--token", fresh, "runs", "list"
    )
    assert new.returncode == 0, new.stderr
    _one_error_line(_fed("server", "rotate-operator", "--db", db, "--name", "nobody"), 2, "--name")


def test_enroll_client_refuses_to_overwrite_without_force(dep: Deployment, tmp_path: Path) -> None:
    out = tmp_path / "dev.json"
    auth = str(dep.root / "authority")
    args = ("enroll", "client", "--authority", auth, "--client-id", "d1", "--out", str(out))
    assert _fed(*args, real=True).returncode == 0
    before = out.read_text()
    _one_error_line(_fed(*args), 2, "--out", "--force")
    assert out.read_text() == before  # untouched
    assert _fed(*args, "--force").returncode == 0
    assert json.loads(out.read_text())["private_key"] != json.loads(before)["private_key"]
