"""``fedstats admin tasks sign`` refuses a task that can never run, and ``fedstats enroll`` renews and
revokes analysts (issue 42, items 1 and 3): one ``error:`` line naming the field, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fedstats.cli.app import app
from fedstats.wire.enrollment import load_analyst

runner = CliRunner()

TASK: dict[str, Any] = {
    "analysis": "bitpushing-mean",
    "cohort_size": 20,
    "params": {"column": "value", "low": 0.0, "high": 1.0, "method": "weighted"},
    "privacy": {"epsilon": 1.0, "population": "clinic"},
}
TWO_EPSILONS = json.dumps(TASK).replace('"epsilon": 1.0', '"epsilon": 1.0, "epsilon": 9.0')


@pytest.fixture()
def analyst(tmp_path: Path) -> Path:
    for args in (
        ["enroll", "init", "--authority", str(tmp_path / "authority")],
        [
            "enroll", "analyst", "ana", "--authority", str(tmp_path / "authority"),
            "--out", str(tmp_path / "ana.json"), "--population", "clinic",
        ],
    ):  # fmt: skip
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
    return tmp_path / "ana.json"


def _refused(args: list[str], *needles: str) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert "Traceback" not in res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, res.output
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (TWO_EPSILONS, "duplicate key 'epsilon'"),
        (json.dumps({**TASK, "cohort_size": 4.5}), "cohort_size=4.5"),
        (
            json.dumps(
                {**TASK, "prio3": {"leader": "https://a.example", "helper": "https://b.example",
                                   "min_batch_size": 1000}}
            ),
            "prio3.min_batch_size=1000",
        ),
        (
            json.dumps({**TASK, "prio3": {"leader": "http://a.example", "helper": "https://b.example"}}),
            "prio3.leader=",
        ),
        (json.dumps({**TASK, "label": "a\x00b"}), "label="),
        (json.dumps({**TASK, "epslion": 1.0}), "epslion="),
    ],
)  # fmt: skip
def test_tasks_sign_refuses_what_can_never_run(
    analyst: Path, tmp_path: Path, text: str, field: str
) -> None:
    assert text.count('"epsilon"') == (2 if "duplicate" in field else 1)
    task = tmp_path / "task.json"
    task.write_text(text)
    out = tmp_path / "signed.json"
    _refused(
        ["admin", "tasks", "sign", str(task), "--analyst", str(analyst), "--out", str(out)], field
    )
    assert not out.exists()


def test_tasks_sign_to_an_unwritable_path_is_one_line(analyst: Path, tmp_path: Path) -> None:
    task = tmp_path / "task.json"
    task.write_text(json.dumps(TASK))
    _refused(
        ["admin", "tasks", "sign", str(task), "--analyst", str(analyst), "--out", "/proc/x/y"],
        "--out",
    )


def test_enroll_renews_and_revokes_an_analyst(analyst: Path, tmp_path: Path) -> None:
    authority = str(tmp_path / "authority")
    before: dict[str, Any] = load_analyst(analyst)["certificate"]["body"]
    res = runner.invoke(
        app,
        ["enroll", "renew-analyst", "--authority", authority, "--identity", str(analyst),
         "--valid-days", "30"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    after = load_analyst(analyst)["certificate"]["body"]
    assert int(res.output.strip()) == after["not_after"] > before["not_after"]
    assert after["public_key"] == before["public_key"]
    res = runner.invoke(app, ["enroll", "revoke-analyst", "ana", "--authority", authority])
    assert res.exit_code == 0 and "revoked" in res.output, res.output
    _refused(
        ["enroll", "renew-analyst", "--authority", authority, "--identity", str(analyst)],
        "revoked",
    )
    assert json.loads((tmp_path / "authority" / "revoked-analysts.json").read_text())["revoked"]
