"""``fedstats datasets``: the listing, one dataset's details, --json, and bad input (exit code 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from fedstats.cli.app import app
from fedstats.datasets import dataset_names

runner = CliRunner()


def test_json_lists_every_dataset_present_and_verified(shared_data: Path) -> None:
    res = runner.invoke(app, ["datasets", "--json", "--data-dir", str(shared_data)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    entries = {e["name"]: e for e in data["datasets"]}
    assert list(entries) == list(dataset_names())
    for e in entries.values():
        assert e["present"] and e["verified"], e
        assert e["license"] and e["source"] and e["files"]
    assert entries["digits"]["location"] == "embedded (package)"
    assert entries["adult"]["location"] == str(shared_data / "adult")
    assert "BSD-3-Clause" in entries["digits"]["license"]
    assert "CC BY 4.0" in entries["adult"]["license"]


def test_table_and_details() -> None:
    res = runner.invoke(app, ["datasets"])
    assert res.exit_code == 0, res.output
    assert "fedstats datasets" in res.stdout and "digits" in res.stdout
    res = runner.invoke(app, ["datasets", "adult", "--no-verify"])
    assert res.exit_code == 0, res.output
    assert "adult.data.gz" in res.stdout and "c7a2b4716a97" in res.stdout


def test_missing_and_corrupt_data(shared_data: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["--json", "--data-dir", str(tmp_path), "datasets", "mushroom"])
    assert res.exit_code == 0
    (entry,) = json.loads(res.stdout)["datasets"]
    assert entry["present"] is False and "missing" in entry["problem"]
    res = runner.invoke(app, ["datasets", "mushroom", "--data-dir", str(tmp_path), "--strict"])
    assert res.exit_code == 2
    assert "mushroom" in res.stderr and str(tmp_path) in res.stderr
    d = tmp_path / "mushroom"
    d.mkdir()
    shutil.copy(shared_data / "mushroom" / "agaricus-lepiota.data", d)
    with open(d / "agaricus-lepiota.data", "ab") as fh:
        fh.write(b"p,x,s,n,t,p,f,c,n,k,e,e,s,s,w,w,p,w,o,p,k,s,u\n")
    res = runner.invoke(app, ["datasets", "mushroom", "--data-dir", str(tmp_path), "--strict"])
    assert res.exit_code == 2 and "SHA-256" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_unknown_dataset_gives_one_line_listing_the_known_names() -> None:
    res = runner.invoke(app, ["datasets", "adults"])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:")
    for name in dataset_names():
        assert name in lines[0]
    assert res.stdout == ""
