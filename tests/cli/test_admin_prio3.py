"""``fedstats admin prio3 ...`` and ``admin collect`` refuse bad input in one ``error:`` line (exit 2),
before anything is sent; an aggregator that cannot be reached is one line and exit 1."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fedstats.cli.app import app

runner = CliRunner()
LEADER = "https://127.0.0.1:9"  # nothing listens there
TID = "ab" * 32


def _one_error(args: list[str], code: int, *needles: str) -> None:
    res = runner.invoke(app, args, env={"FEDSTATS_HELPER_TOKEN": "", "FEDSTATS_TOKEN": "tok"})
    assert res.exit_code == code, (res.exit_code, res.output)
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])


def test_bad_input_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    plain = tmp_path / "plain.signed"  # a task without a prio3 route
    plain.write_text(json.dumps({"task": {"analysis": "x"}, "certificate": {}, "signature": ""}))
    _one_error(
        ["admin", "--server", LEADER, "prio3", "provision", str(plain), "--helper-token", "h"],
        2,
        "ENVELOPE_FILE",
        "prio3",
    )
    routed = tmp_path / "routed.signed"
    task = {"prio3": {"leader": "https://127.0.0.1:8443", "helper": "https://127.0.0.1:8444"}}
    routed.write_text(json.dumps({"task": task, "certificate": {}, "signature": ""}))
    _one_error(
        ["admin", "--server", LEADER, "prio3", "provision", str(routed), "--helper-token", "h"],
        2,
        "--server",
        "the task's leader https://127.0.0.1:8443",
    )
    _one_error(["admin", "--server", LEADER, "collect", "not-an-id"], 2, "TASK_ID", "64")
    _one_error(["admin", "--server", LEADER, "collect", TID], 2, "--helper-token")
    _one_error(["admin", "--server", LEADER, "prio3", "close", TID], 2, "--helper-token")


def test_an_unreachable_leader_is_one_line_and_exit_1() -> None:
    _one_error(
        ["admin", "--server", LEADER, "collect", TID, "--helper-token", "h"], 1, "127.0.0.1:9"
    )
    _one_error(["admin", "--server", LEADER, "prio3", "list"], 1, "127.0.0.1:9")


def test_collect_dap_refuses_bad_input_before_sending(tmp_path: Path) -> None:
    cred = tmp_path / "collector.json"
    res = runner.invoke(app, ["admin", "prio3", "collector-credential", str(cred), "--json"])
    assert res.exit_code == 0, res.output
    dap_tid = "A" * 43  # 32 zero bytes in unpadded base64url
    base = ["admin", "--server", LEADER, "collect", "--dap", dap_tid]
    good = ["--collector-credential", str(cred), "--vdaf", "Prio3Count", "--current-batch"]
    _one_error(["admin", "--server", LEADER, "collect", TID, "--vdaf", "Prio3Count"], 2, "--vdaf")
    _one_error([*base[:-1], TID, *good], 2, "TASK_ID", "base64url")  # a signed task's id
    _one_error([*base, *good[:2], "--vdaf", "Poplar1", "--current-batch"], 2, "--vdaf")
    _one_error([*base, *good[:4]], 2, "one batch")
    _one_error([*base, *good, "--batch-id", "xyz"], 2, "one batch")
    _one_error([*base, *good[2:]], 2, "--collector-credential")
    tampered = json.loads(cred.read_text())
    tampered["public_key"] = "B" * 43  # not the private key's
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(tampered))
    _one_error([*base, "--collector-credential", str(bad), *good[2:]], 2, "public_key")
    assert tampered["private_key"] not in res.output  # the secret is in the file only
    # well-formed: the leader that does not answer is one line and exit 1
    _one_error([*base, *good], 1, "127.0.0.1:9")
