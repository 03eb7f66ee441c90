"""Every ``fedstats ...`` command in the README's shell blocks runs as printed and exits with code 0.

The same holds for the commands of the getting-started page and the tutorials (``docs/``), whose shown
output was pasted from real runs; a tutorial that reads an example file assumes ``fedstats examples --out
.`` was run, so that is done first.

Each command runs through the installed ``fedstats`` script in a fresh temporary working directory (so
nothing is written into the repository). A command that reads one of the example files first gets them
the way the README says: by running the README's own ``fedstats examples --out .`` line in that directory.

Skipped, each with its reason in the test report (nothing is dropped silently):

* ``reproduce`` lines: full reproductions of the papers take minutes to hours and the README line is a
  synopsis (``fed-chi2 | bit-pushing | ...``, ``[--out DIR]``); ``tests/library/test_reproduce_*.py`` run each one
  with ``--quick``;
* the service walkthrough (``server``, ``enroll``, ``client``, ``admin``): its steps share files, shell
  variables and a running server; each is a command of ``docs/deploy.md``'s walkthrough
  (:func:`test_the_readme_service_commands_are_the_walkthroughs` checks it), which
  ``tests/e2e/test_deploy_walkthrough.py`` runs end to end;
* commands simulating 10^8 clients or more (``--clients 1000000000``): they run for many minutes;
  ``tests/library/test_scale*.py`` cover the route at smaller sizes.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedstats.datasets import EXAMPLES

README = Path(__file__).resolve().parents[2] / "README.md"
TIMEOUT_S = 600  # per command; the longest (the demo) takes about 10 s
LONG_RUN_CLIENTS = 10**8
_BLOCK = re.compile(r"^```(?:sh|bash|shell|console)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def readme_commands(text: str) -> list[str]:
    """The ``fedstats`` command lines of the shell blocks of ``text``, as printed (``$ `` removed)."""
    lines = []
    for block in _BLOCK.findall(text):
        # a command continued with a trailing backslash is one line
        for raw in block.replace("\\\n", " ").splitlines():
            line = raw.strip().removeprefix("$ ")
            if line.startswith("fedstats ") or line == "fedstats":
                lines.append(line)
    return lines


def skip_reason(argv: list[str]) -> str | None:
    """Why a README command is not run here, or ``None`` when it is run."""
    if argv[1:2] in (["server"], ["client"], ["enroll"], ["admin"]):
        return (
            "deployment walkthrough (an authority, a server and devices run by hand, some in the "
            "background): docs/deploy.md's, run end to end by tests/e2e/test_deploy_walkthrough.py"
        )
    if "reproduce" in argv:
        return (
            "reproduce: a paper reproduction (minutes to hours; this line is a synopsis), "
            "run with --quick by tests/library/test_reproduce_*.py"
        )
    aggregate = any(f == "--backend" and v == "aggregate" for f, v in itertools.pairwise(argv))
    for flag, value in itertools.pairwise(argv):
        if (
            flag == "--clients"
            and value.isdigit()
            and int(value) >= LONG_RUN_CLIENTS
            and not aggregate
        ):
            return f"--clients {value}: simulating 10^9 clients takes many minutes"
    return None


def _fedstats() -> str:
    beside = Path(sys.executable).with_name("fedstats")
    found = str(beside) if beside.is_file() else shutil.which("fedstats")
    if found is None:
        pytest.fail("the fedstats script is not installed (run make install)")
    return found


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))
ARGVS = [shlex.split(line, comments=True) for line in COMMANDS]
SKIPPED = {
    line: reason
    for line, argv in zip(COMMANDS, ARGVS, strict=True)
    if (reason := skip_reason(argv))
}
EXAMPLE_STEPS = [argv for argv in ARGVS if argv[1:2] == ["examples"]]
DOC_PAGES = [
    README.parent / "docs" / "getting-started.md",
    *sorted((README.parent / "docs" / "tutorials").glob("*.md")),
]
DOC_COMMANDS = [
    (page.relative_to(README.parent).as_posix(), line)
    for page in DOC_PAGES
    for line in readme_commands(page.read_text(encoding="utf-8"))
]


def _id(line: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.,:=-]+", " ", line.split("#")[0]).strip()[:90]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "160"}
    return subprocess.run(
        [_fedstats(), *argv[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def test_the_readme_has_commands_and_skips_only_the_long_runs() -> None:
    assert len(COMMANDS) >= 15, COMMANDS
    assert all(argv[0] == "fedstats" for argv in ARGVS)
    ran = [line for line in COMMANDS if line not in SKIPPED]
    assert len(ran) >= 12, ran
    # what is skipped is listed (the 10^9-client and reproduce lines), nothing else
    assert SKIPPED, "expected the 10^9-client and reproduce lines to be listed as skipped"
    for line in SKIPPED:
        deployment = line.split()[1] in ("server", "client", "enroll", "admin")
        assert deployment or "reproduce" in line or "--clients 1000000000" in line, line
    # the examples step that makes the README's example files available is itself in the README
    assert EXAMPLE_STEPS and all("--out" in argv for argv in EXAMPLE_STEPS)


@pytest.mark.slow
@pytest.mark.parametrize(
    "line",
    [
        pytest.param(line, marks=pytest.mark.skip(reason=f"{SKIPPED[line]}: {line}"))
        if line in SKIPPED
        else line
        for line in COMMANDS
    ],
    ids=[_id(line) for line in COMMANDS],
)
def test_readme_command_runs_as_printed(line: str, tmp_path: Path) -> None:
    argv = shlex.split(line, comments=True)
    if any(arg in EXAMPLES for arg in argv):  # the README's own step puts them where it says
        for step in EXAMPLE_STEPS:
            done = _run(step, tmp_path)
            assert done.returncode == 0, done.stderr
    res = _run(argv, tmp_path)
    assert res.returncode == 0, f"{line}\nexit {res.returncode}\n{res.stderr[-3000:]}"
    assert "Traceback" not in res.stderr
    if "--json" in argv:  # one JSON object on stdout
        assert isinstance(json.loads(res.stdout), dict)


def test_the_docs_pages_have_commands() -> None:
    pages = {page for page, _ in DOC_COMMANDS}
    assert len(pages) == len(DOC_PAGES) >= 6, pages  # every tutorial shows at least one command


@pytest.mark.slow
@pytest.mark.parametrize(
    ("page", "line"), DOC_COMMANDS, ids=[f"{page}: {_id(line)}" for page, line in DOC_COMMANDS]
)
def test_docs_command_runs_as_printed(page: str, line: str, tmp_path: Path) -> None:
    argv = shlex.split(line, comments=True)
    assert skip_reason(argv) is None, f"{page}: keep the docs' commands short ({line})"
    if any(arg in EXAMPLES for arg in argv):  # the pages say: after fedstats examples --out .
        done = _run(["fedstats", "examples", "--out", "."], tmp_path)
        assert done.returncode == 0, done.stderr
    res = _run(argv, tmp_path)
    assert res.returncode == 0, f"{page}: {line}\nexit {res.returncode}\n{res.stderr[-3000:]}"
    assert "Traceback" not in res.stderr


def _shell_commands(text: str) -> set[tuple[str, ...]]:
    """The ``fedstats`` commands of the shell blocks of ``text``, each as its words (comments dropped)."""
    return {tuple(shlex.split(line, comments=True)) for line in readme_commands(text)}


def test_the_readme_service_commands_are_the_walkthroughs() -> None:
    """Every deployment command of the README is one that docs/deploy.md's walkthrough runs as printed."""
    walkthrough = README.parent / "docs" / "deploy.md"
    section = walkthrough.read_text(encoding="utf-8").split(
        "## Walkthrough: from nothing to a released result", 1
    )[1]
    section = re.split(r"^## ", section, flags=re.M)[0]
    run = _shell_commands(section)
    service = [
        argv for argv in ARGVS if argv[1:2] in (["server"], ["client"], ["enroll"], ["admin"])
    ]
    assert len(service) >= 10, service  # the README shows the whole path, from authority to result
    for step in ("enroll", "server", "admin", "client"):
        assert any(argv[1] == step for argv in service), step
    missing = [" ".join(argv) for argv in service if tuple(argv) not in run]
    assert not missing, f"README service commands not in the walkthrough: {missing}"
    # and the README's curl says what it sends
    text = README.read_text(encoding="utf-8")
    for call in re.findall(r"curl[^\n]*(?:\\\n[^\n]*)*", text):
        if " -d " in call or "--data" in call:
            assert "Content-Type: application/json" in call, call
