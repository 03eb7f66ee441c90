"""A table of bad inputs across every command: each is one ``error:`` line naming the user's parameter.

Each case runs in-process through typer's ``CliRunner`` with a fresh, empty working directory and checks:
exit code 2, exactly one line on stderr, starting ``error:`` and containing the parameter the user got
wrong (its ``--flag``, or the argument's value), no traceback, nothing on stdout, and no file left behind.
The kinds: out-of-range numbers, wrong types, unknown choices, missing or conflicting options, missing
columns and files, text where numbers are expected, values that overflow, requests larger than the
machine (refused from an estimate before anything is allocated), output paths that are files or devices.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from fedstats.cli.app import app

runner = CliRunner()
FILES: dict[str, Path] = {}


@pytest.fixture(scope="module", autouse=True)
def data_files(tmp_path_factory: pytest.TempPathFactory) -> None:
    d = tmp_path_factory.mktemp("bad_inputs_data")
    rng = np.random.default_rng(0)
    n = 400
    g = rng.choice(["a", "b"], size=n)
    pd.DataFrame(
        {
            "g": g,
            "v": rng.random(n).round(3),
            "x": rng.integers(0, 50, n),
            "c": rng.choice(["u", "w", "z"], size=n),
            "site": rng.integers(0, 5, n),
            "cnt": rng.integers(0, 4, n),
        }
    ).to_csv(d / "t.csv", index=False)
    pd.DataFrame({"g": g, "v": ["abc"] + ["0.5"] * (n - 1)}).to_csv(d / "text.csv", index=False)
    pd.DataFrame({"x": [1.0, 1e308, 3.0]}).to_csv(d / "huge.csv", index=False)
    pd.DataFrame({"x": [1.0, np.nan, 3.0]}).to_csv(d / "nan.csv", index=False)
    pd.DataFrame({"x": [1, 2, 3], "cnt": [1, -2, 3], "c": ["u", "w", "u"]}).to_csv(
        d / "neg.csv", index=False
    )
    (d / "empty.csv").write_text("x\n")
    (d / "afile").write_text("not a folder\n")
    FILES.update({p.stem: p for p in d.iterdir()})


def f(name: str) -> str:
    return str(FILES[name])


MEAN = ["mean", "adult", "-c", "age", "--high", "127", "--epsilon", "1"]
VAR = ["variance", "adult", "-c", "age", "--high", "127", "--epsilon", "1"]
GAP = ["gap", "@t", "--group-column", "g", "--value-column", "v", "--epsilon", "1"]
PLAN = ["gap-plan", "--clients", "10000", "--alpha", "0.05"]
CHI = ["chi2", "adult", "--x", "sex", "--y", "income"]
ENT = ["entropy", "adult", "--column", "sex"]
HET = ["heterogeneity", "digits", "--epsilon", "4", "--delta", "1e-5"]
SIM = ["secagg", "simulate", "--clients", "10", "--length", "5"]
PAR = ["secagg", "params", "--clients", "100"]
CAL = ["calibrate", "gaussian", "--epsilon", "1", "--delta", "1e-6"]
EXP = ["privacy", "explain"]

CASES: list[tuple[list[str], str]] = [
    # mean / variance
    ([*MEAN[:-2]], "--no-privacy"),
    ([*MEAN, "--no-privacy"], "--no-privacy"),
    ([*MEAN[:-1], "0"], "--epsilon"),
    ([*MEAN[:-1], "-2"], "--epsilon"),
    ([*MEAN[:-1], "nan"], "--epsilon"),
    ([*MEAN[:-1], "abc"], "--epsilon"),
    ([*MEAN, "--bit-depth", "0"], "--bit-depth"),
    (["mean", "adult", "-c", "age", "--bit-depth", "60", "--epsilon", "1"], "--bit-depth"),
    ([*MEAN, "-p", "median"], "--protocol"),
    ([*MEAN, "--clients", "0"], "--clients"),
    ([*MEAN, "--clients", "many"], "--clients"),
    ([*MEAN, "--out-of-range", "wrap"], "--out-of-range"),
    ([*MEAN, "-p", "weighted", "--weight-exponent", "-5"], "--weight-exponent"),
    ([*MEAN, "-p", "weighted", "--weight-exponent", "100"], "--weight-exponent"),
    ([*MEAN, "--round1-fraction", "2"], "--round1-fraction"),
    ([*MEAN, "--round1-fraction", "0"], "--round1-fraction"),
    ([*MEAN, "-p", "weighted", "--round1-fraction", "0.5"], "--round1-fraction"),
    ([*MEAN, "-p", "duchi", "--allocation", "random"], "--allocation"),
    ([*MEAN, "--allocation", "sometimes"], "--allocation"),
    ([*MEAN, "--confidence", "1.5"], "--confidence"),
    ([*MEAN, "--confidence", "0"], "--confidence"),
    ([*MEAN, "--split", "validation"], "--split"),
    ([*MEAN, "--backend", "gpu"], "--backend"),
    ([*MEAN, "--workers", "0"], "--workers"),
    ([*MEAN, "--shard-size", "0"], "--shard-size"),
    (["mean", "adult", "-c", "nope", "--high", "127", "--epsilon", "1"], "--column"),
    (["mean", "adult", "-c", "workclass", "--high", "127", "--epsilon", "1"], "--column"),
    (["mean", "adult", "-c", "age", "--epsilon", "1"], "--high"),
    (["mean", "@huge", "-c", "x", "--high", "10", "--epsilon", "1"], "--column"),
    (["variance", "@huge", "-c", "x", "--high", "10", "--no-privacy"], "--column"),
    (["mean", "@t", "-c", "x", "--high", "10", "--epsilon", "1", "--split", "train"], "--split"),
    (
        ["mean", "@t", "-c", "x", "--high", "10", "--epsilon", "1", "--out-of-range", "refuse"],
        "--out-of-range",
    ),
    (["mean", "missing.csv", "-c", "x", "--high", "1", "--epsilon", "1"], "missing.csv"),
    ([*VAR[:-2]], "--epsilon"),
    ([*VAR, "--mean-fraction", "0"], "--mean-fraction"),
    ([*VAR, "--mean-fraction", "1.5"], "--mean-fraction"),
    ([*VAR, "-p", "x"], "--protocol"),
    ([*VAR[:-1], "-1"], "--epsilon"),
    # gap / gap-plan
    ([*GAP, "--epsilon", "0"], "--epsilon"),
    ([*GAP, "--epsilon", "-1"], "--epsilon"),
    ([*GAP, "--mechanism", "Q"], "--mechanism"),
    ([*GAP, "--accounting", "loose"], "--accounting"),
    ([*GAP, "--scale", "percent"], "--scale"),
    ([*GAP, "--pair", "a"], "--pair"),
    ([*GAP, "--confidence", "2"], "--confidence"),
    ([*GAP, "--clients", "1"], "--clients"),
    ([*GAP, "--backend", "gpu"], "--backend"),
    (["gap", "@t", "--group-column", "nope", "--value-column", "v"], "--group-column"),
    (["gap", "@t", "--group-column", "g", "--value-column", "nope"], "--value-column"),
    (["gap", "@text", "--group-column", "g", "--value-column", "v"], "--value-column"),
    ([*GAP[:5], "x", "--epsilon", "1"], "value"),
    (["gap", "@t", "--group-column", "g", "--value-column", "v"], "--epsilon"),
    (["gap", "missing.csv", "--group-column", "g", "--value-column", "v"], "missing.csv"),
    ([*PLAN[:-1], "-5"], "--alpha"),
    ([*PLAN[:-1], "0"], "--alpha"),
    (["gap-plan", "--clients", "1", "--alpha", "0.1"], "--clients"),
    ([*PLAN, "--probability", "1.5"], "--probability"),
    ([*PLAN, "--mechanism", "Z"], "--mechanism"),
    ([*PLAN, "--bound", "hoeffding"], "--bound"),
    ([*PLAN, "--scale", "x"], "--scale"),
    ([*PLAN, "--fractions", "0.5,abc"], "--fractions"),
    ([*PLAN, "--fractions", "0.2,0.2"], "--fractions"),
    ([*PLAN, "--accounting", "x"], "--accounting"),
    # chi2 / entropy
    ([*CHI, "--encoding-size", "1"], "--encoding-size"),
    ([*CHI, "--encoding-size", str(10**10)], "--encoding-size"),
    ([*CHI, "--decoder", "median"], "--decoder"),
    ([*CHI, "--dropout", "1.5"], "--dropout"),
    ([*CHI, "--dropout", "-0.1"], "--dropout"),
    ([*CHI, "--secure", "--dropout", "1.0"], "--dropout"),
    ([*CHI, "--test", "t"], "--test"),
    ([*CHI, "--level", "2"], "--level"),
    ([*CHI, "--confidence", "-1"], "--confidence"),
    ([*CHI, "--bits", "8"], "--bits"),
    ([*CHI, "--clients", "0"], "--clients"),
    ([*CHI, "--clients", "10000000"], "--clients"),
    ([*CHI, "--client-column", "nope"], "--client-column"),
    ([*CHI, "--client-column", "age", "--clients", "5"], "--clients"),
    ([*CHI, "--count-column", "nope"], "--count-column"),
    ([*CHI, "--secure", "--backend", "serial"], "--backend"),
    ([*CHI, "--split", "x"], "--split"),
    (["chi2", "adult", "--x", "nope", "--y", "income"], "--x"),
    (["chi2", "adult", "--x", "sex", "--y", "nope"], "--y"),
    (["chi2", "@neg", "--x", "x", "--y", "c", "--count-column", "cnt", "--clients", "2"], "cnt"),
    (["chi2", "missing.csv", "--x", "a", "--y", "b"], "missing.csv"),
    ([*ENT, "--encoding-size", "1"], "--encoding-size"),
    ([*ENT, "--encoding-size", str(10**10)], "--encoding-size"),
    ([*ENT, "--fd-step", "1e-300"], "--fd-step"),
    ([*ENT, "--fd-step", "0.9"], "--fd-step"),
    ([*ENT, "--fd-step", "0"], "--fd-step"),
    ([*ENT, "--coupling", "loose"], "--coupling"),
    ([*ENT, "--clients", "-3"], "--clients"),
    (["entropy", "adult", "--column", "nope"], "--column"),
    # heterogeneity
    (["heterogeneity", "digits"], "--epsilon"),
    (["heterogeneity", "digits", "--epsilon", "-1", "--delta", "1e-5"], "--epsilon"),
    ([*HET, "--label-ratio", "1:x"], "--label-ratio"),
    ([*HET, "--statistic", "x"], "--statistic"),
    ([*HET, "--sample-fraction", "2"], "--sample-fraction"),
    ([*HET, "--mechanism", "x"], "--mechanism"),
    ([*HET, "--accounting", "x"], "--accounting"),
    # secagg
    ([*SIM, "--bits", "7"], "--bits"),
    ([*SIM, "--dropout", "2"], "--dropout"),
    ([*SIM, "--dropout-stage", "never"], "--dropout-stage"),
    ([*SIM, "--k", "3"], "--k"),
    (["secagg", "simulate", "--clients", "10", "--length", str(10**10)], "--length"),
    (["secagg", "simulate", "--clients", "1", "--length", "5"], "--clients"),
    (["secagg", "simulate", "--clients", "10", "--length", "0"], "--length"),
    (["secagg", "params", "--clients", str(10**12)], "--clients"),
    ([*PAR, "--threat-model", "evil"], "--threat-model"),
    ([*PAR, "--corrupt-fraction", "1.5"], "--corrupt-fraction"),
    (["secagg", "params", "--clients", "abc"], "--clients"),
    # calibrate / privacy explain
    ([*CAL[:3], "0", *CAL[4:]], "--epsilon"),
    ([*CAL[:5], "1.5"], "--delta"),
    ([*CAL[:5], "0"], "--delta"),
    ([*CAL, "--sensitivity", "1e308"], "--sensitivity"),
    ([*CAL, "--sensitivity", "-1"], "--sensitivity"),
    ([*CAL[:3], "2", *CAL[4:], "--classical"], "--epsilon"),
    ([*EXP, "nope"], "MECHANISM"),
    ([*EXP, "gaussian", "--epsilon", "1"], "--delta"),
    ([*EXP, "grr", "--epsilon", "1", "--k", "1"], "--k"),
    ([*EXP, "rr", "--epsilon", "-1"], "--epsilon"),
    # examples / reproduce / datasets / global
    (["examples", "--out", "@afile"], "--out"),
    (["examples", "--out", "/dev/null"], "--out"),
    (["reproduce", "fed-chi2", "--quick", "--out", "/dev/null"], "--out"),
    (["reproduce", "fed-chi2", "--quick", "--out", "@afile"], "--out"),
    (["reproduce", "nope"], "nope"),
    (["--seed", "-1", "datasets"], "--seed"),
    (["no-such-command"], "no-such-command"),
    (["mean", "adult", "-c", "age", "--high", "127", "--no-such-flag"], "--no-such-flag"),
]


def _expand(args: list[str]) -> list[str]:
    return [f(a[1:]) if a.startswith("@") else a for a in args]


def test_the_table_covers_every_command_with_at_least_100_cases() -> None:
    assert len(CASES) >= 100
    commands = {args[0] for args, _ in CASES if not args[0].startswith("-")}
    for cmd in ("mean", "variance", "gap", "gap-plan", "chi2", "entropy", "heterogeneity",
                "secagg", "calibrate", "privacy", "examples", "reproduce"):  # fmt: skip
        assert cmd in commands, cmd


@pytest.mark.parametrize(("args", "needle"), CASES, ids=[" ".join(a)[:80] for a, _ in CASES])
def test_bad_input_is_one_error_line_naming_the_parameter(
    args: list[str], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    res = runner.invoke(app, _expand(args))
    assert res.exit_code == 2, (res.exit_code, res.stderr, res.exception)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:"), lines
    assert needle in lines[0], lines[0]
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert list(work.iterdir()) == []
