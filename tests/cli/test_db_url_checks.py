"""A ``--db`` that is not a database URL is one ``error:`` line naming ``--db`` (issue 42, item 5).

Found following the README's service commands as printed: ``add-operator --db "$DB"`` with ``DB`` unset
answered that the operator name already exists, and ``--db sqlite://x.db`` (two slashes) printed a
SQLAlchemy traceback. Every command taking ``--db`` checks the URL's form before it opens anything, and
``add-operator``/``rotate-operator`` say "exists"/"unknown" only about the name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedstats.cli.app import app

runner = CliRunner()

BAD_URLS = ["", "sqlite://x.db", "sqlite:///", "fedstats.db", "postgres://u@127.0.0.1/db"]


def _one_error(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    return errors[0]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_db_that_is_not_a_database_url_is_refused_naming_db(url: str, tmp_path: Path) -> None:
    pub = tmp_path / "authority.pub"
    assert runner.invoke(app, ["enroll", "init", "--authority", str(tmp_path)]).exit_code == 0
    for args in (
        ["server", "add-operator", "--name", "alice", "--db", url],
        ["server", "rotate-operator", "--name", "alice", "--db", url],
        ["server", "trust", "--authority", str(pub), "--db", url],
        ["server", "--db", url, "--port", "1"],
    ):
        line = _one_error(args)
        assert "--db=" in line and "sqlite:///FILE" in line, (args, line)
        assert "exists" not in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["authority.key", "authority.pub"]


def test_add_operator_says_exists_only_for_an_existing_name(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'f.db'}"
    first = runner.invoke(app, ["server", "add-operator", "--name", "alice", "--db", db])
    assert first.exit_code == 0 and first.output.strip(), first.output
    assert "this one exists" in _one_error(
        ["server", "add-operator", "--name", "alice", "--db", db]
    )
    assert "--name='bob'" in _one_error(["server", "rotate-operator", "--name", "bob", "--db", db])
