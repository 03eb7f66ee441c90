"""The reproductions' run framework: output-folder policy, settings-keyed cells, pages, the CLI table."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from fedstats.cli._common import FedstatsGroup
from fedstats.errors import ParameterError
from fedstats.experiments import framework, pages
from fedstats.experiments.framework import Cell, Option, Reproduction, RunContext, output_folder

CALLS: list[tuple[float, int]] = []


def _square(x: float, seed: int) -> dict[str, Any]:
    CALLS.append((x, seed))
    return {"x": x, "y": x * x, "seed": seed}


def _toy_run(ctx: RunContext) -> dict[str, Any]:
    grid = (1.0, 2.0) if ctx.quick else (1.0, 2.0, 3.0)
    values = ctx.cells([Cell(f"x={x}", _square, (x, ctx.seed or 0)) for x in grid])
    doc: dict[str, Any] = {"values": values, "notes": [f"scale={ctx.options['scale']}"]}
    ctx.finish(doc)
    return doc


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Reproduction:
    mod = types.ModuleType("fedstats_toy_repro")
    mod.run = _toy_run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fedstats_toy_repro", mod)
    rep = Reproduction(
        "toy",
        "A toy reproduction.",
        "fedstats_toy_repro",
        7,
        reps=True,
        options=(Option("scale", int, 1, "A toy option.", minimum=1),),
    )
    monkeypatch.setattr(framework, "REPRODUCTIONS", (rep,))

    def render(template: str, **context: Any) -> str:
        assert template == "fedstats_toy_repro.md.j2"
        banner = "QUICK RUN\n" if context["quick"] else ""
        return banner + json.dumps(context["doc"]["values"]) + "\n"

    monkeypatch.setattr(framework, "render", render)
    CALLS.clear()
    return rep


def test_default_folder_is_under_cwd_and_never_the_committed_results(tmp_path: Path) -> None:
    assert output_folder("x", None, quick=True, cwd=tmp_path) == tmp_path / "reproduce-x-quick"
    assert output_folder("x", None, quick=False, cwd=tmp_path) == tmp_path / "reproduce-x"
    committed = tmp_path / "results" / "x"
    committed.mkdir(parents=True)
    (committed / "x.json").write_text(json.dumps({"quick": False}))
    with pytest.raises(ParameterError, match="update_committed"):
        output_folder("x", committed, quick=True, cwd=tmp_path)
    with pytest.raises(ParameterError, match="update_committed"):
        output_folder("x", committed, quick=False, cwd=tmp_path)
    with pytest.raises(ParameterError, match="update_committed"):
        output_folder("x", None, quick=True, update_committed=True, cwd=tmp_path)
    assert output_folder("x", None, quick=False, update_committed=True, cwd=tmp_path) == committed


@pytest.mark.parametrize("target", ["file", "/dev/null", "under-a-file"])
def test_unwritable_folders_are_refused_before_work(tmp_path: Path, target: str) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    path = {"file": f, "/dev/null": Path("/dev/null"), "under-a-file": f / "sub"}[target]
    with pytest.raises(ParameterError, match="out"):
        output_folder("x", path, quick=True)


def test_cells_are_keyed_by_every_setting(toy: Reproduction, tmp_path: Path) -> None:
    out = tmp_path / "o"
    framework.run_reproduction("toy", out=out, quick=True, seed=1)
    assert len(CALLS) == 2
    framework.run_reproduction("toy", out=out, quick=True, seed=1)
    assert len(CALLS) == 2  # resumed: nothing recomputed
    _, doc = framework.run_reproduction("toy", out=out, quick=True, seed=2)
    assert len(CALLS) == 4  # another seed: recomputed, never reused under the new label
    assert all(v["seed"] == 2 for v in doc["values"].values())
    framework.run_reproduction("toy", out=out, quick=True, seed=2, reps=5)
    assert len(CALLS) == 6
    framework.run_reproduction("toy", out=out, quick=True, seed=2, reps=5, scale=3)
    assert len(CALLS) == 8
    saved = json.loads((out / "toy-quick.json").read_text())
    assert saved["quick"] is True and saved["settings"]["scale"] == 3
    assert (out / "toy-quick.md").read_text().startswith("QUICK RUN")


def test_options_a_reproduction_does_not_take_are_refused(
    toy: Reproduction, tmp_path: Path
) -> None:
    with pytest.raises(ParameterError, match="workers"):
        framework.run_reproduction("toy", out=tmp_path, quick=True, workers=2)
    with pytest.raises(ParameterError, match="legacy"):
        framework.run_reproduction("toy", out=tmp_path, quick=True, legacy=True)


def test_table_driven_command(
    toy: Reproduction, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedstats.cli import reproduce

    app = typer.Typer(cls=FedstatsGroup)
    app.command("toy")(reproduce._command(toy))
    app.command("other")(lambda: None)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(app, ["toy", "--quick", "--seed", "3", "--scale", "2", "--json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    assert payload["out"] == str(tmp_path / "reproduce-toy-quick")
    assert payload["settings"] == {"quick": True, "seed": 3, "reps": None, "scale": 2}
    assert "not for release" in payload["release_note"]
    res = runner.invoke(app, ["toy", "--quick", "--workers", "2"])
    assert res.exit_code == 2  # an option the reproduction would ignore does not exist
    res = runner.invoke(app, ["toy", "--quick", "--out", "/dev/null"])
    assert res.exit_code == 2 and "--out" in res.stderr and "Traceback" not in res.output


def test_render_is_strict() -> None:
    import jinja2

    env_text = pages.fmt(float("inf")), pages.fmt(None), pages.sig(0.000123456)
    assert env_text == ("inf", "-", "0.000123")
    with pytest.raises(ParameterError, match="template"):
        framework.render("no-such-template.md.j2", doc={})
    with pytest.raises(jinja2.UndefinedError):
        framework.render(
            "_base.md.j2", doc={"settings": {}, "seconds": 1, "plots": []}, quick=False
        )


def test_resource_guard_refuses_with_the_estimate() -> None:
    from fedstats._resources import check_memory, duration_warning

    with pytest.raises(ParameterError, match=r"encoding_size.*needs about 1\.0 GiB.*512\.0 MiB"):
        check_memory(2**30, parameter="encoding_size", value=7, what="the projection", limit=2**29)
    check_memory(2**20, parameter="encoding_size", value=7, what="the projection", limit=2**29)
    assert duration_warning(10.0, what="x") is None
    assert "about 2.0 h" in (duration_warning(7200.0, what="x") or "")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--json", "datasets"], "cannot write the output"),
        (["datasets"], "cannot write the output"),
    ],
)
def test_closed_stdout_is_one_error_line(args: list[str], message: str) -> None:
    import subprocess

    proc = subprocess.Popen(
        [sys.executable, "-c", "from fedstats.cli.app import main; main()", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 2
    assert message in err and "Traceback" not in err
