"""CLI rules (issue 27, item 9): ambiguous input, options that would be ignored, long runs, tiny epsilon.

Every refusal is one ``error: ...`` line naming the option, exit code 2, no traceback, nothing written.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fedstats._validation import MIN_GRID_EPSILON, MIN_LOCAL_EPSILON, check_local_epsilon
from fedstats.cli.app import app
from fedstats.datasets.examples import example
from fedstats.errors import ParameterError
from fedstats.privacy.mechanisms import LaplaceMechanism, RandomizedResponse

runner = CliRunner()
PREDICTIONS = str(example("predictions.csv"))
TABLES = str(example("client_tables.csv"))
VECTORS = str(example("client_vectors.csv"))


def refused(args: list[str], *needles: str) -> str:
    """Run the CLI; assert exit 2 with one ``error:`` line holding every needle; return that line."""
    res = runner.invoke(app, args)
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, res.output
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def ok(args: list[str]) -> Any:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return res


@pytest.fixture
def dup_csv(tmp_path: Path) -> Path:
    p = tmp_path / "dup.csv"
    p.write_text("group,value,value\na,1,0\nb,0,1\na,1,1\nb,0,0\n")
    return p


# --- duplicate column names ---------------------------------------------------------------------------


def test_duplicate_column_names_are_refused_by_every_table_command(dup_csv: Path) -> None:
    for args in (
        ["gap", str(dup_csv), "--group-column", "group", "--value-column", "value", "-e", "1"],
        ["mean", str(dup_csv), "--column", "value", "--high", "1", "--no-privacy"],
        ["entropy", str(dup_csv), "--column", "group", "--clients", "2"],
        ["chi2", str(dup_csv), "--x", "group", "--y", "value", "--clients", "2"],
    ):
        refused(args, "duplicate column names", "'value'")


def test_a_column_named_like_a_pandas_rename_is_not_a_duplicate(tmp_path: Path) -> None:
    """``value`` and ``value.1`` are two names: only names written twice are refused."""
    p = tmp_path / "t.csv"
    p.write_text("value,value.1\n1,0\n0,1\n1,1\n")
    ok(["--json", "mean", str(p), "--column", "value.1", "--high", "1", "--no-privacy"])


# --- one column in two roles ----------------------------------------------------------------------------


def test_chi2_refuses_x_equal_to_y_and_any_column_in_two_roles() -> None:
    refused(["chi2", TABLES, "--x", "sex", "--y", "sex"], "--y", "'sex'", "two roles")
    refused(
        ["chi2", TABLES, "--x", "sex", "--y", "income", "--client-column", "income"],
        "--client-column",
        "--y",
    )
    refused(
        ["chi2", TABLES, "--x", "sex", "--y", "income", "--client-column", "client",
         "--count-column", "client"],
        "--count-column",
    )  # fmt: skip


def test_gap_refuses_one_column_as_group_and_value() -> None:
    refused(
        ["gap", PREDICTIONS, "--group-column", "correct", "--value-column", "correct", "-e", "1"],
        "--value-column",
        "two roles",
    )


def test_entropy_refuses_the_column_as_client_or_count_column() -> None:
    refused(["entropy", TABLES, "--column", "sex", "--client-column", "sex"], "--client-column")
    refused(["entropy", TABLES, "--column", "count", "--count-column", "count"], "--count-column")


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.sampled_from(["client", "education", "sex", "income", "count"]), min_size=4, max_size=4
    )
)
def test_chi2_role_check_refuses_exactly_the_repeats(cols: list[str]) -> None:
    """Any assignment of columns to --x/--y/--client-column/--count-column with a repeat is refused
    before the data is read (so the check is cheap); distinct ones are not refused by it."""
    from fedstats.cli._common import check_distinct_columns

    roles = dict(zip(["--x", "--y", "--client-column", "--count-column"], cols, strict=True))
    if len(set(cols)) < 4:
        with pytest.raises(ParameterError, match="two roles"):
            check_distinct_columns(roles)
    else:
        check_distinct_columns(roles)


# --- empty --out -----------------------------------------------------------------------------------------


def test_examples_refuses_an_empty_out_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for empty in ("", "  "):
        refused(["examples", "--out", empty], "--out", "non-empty path")
    assert list(tmp_path.iterdir()) == []
    ok(["examples", "--out", "."])  # the current folder, said explicitly, is fine
    assert (tmp_path / "predictions.csv").is_file()


def test_validate_and_reproduce_refuse_an_empty_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    refused(["validate", "--quick", "--out", ""], "--out")
    from fedstats.experiments import framework

    name = framework.REPRODUCTIONS[0].name
    refused(["reproduce", name, "--quick", "--out", ""], "--out")
    assert list(tmp_path.iterdir()) == []


# --- options that would be ignored ----------------------------------------------------------------------

MEAN = ["mean", PREDICTIONS, "--column", "confidence", "--high", "1", "--resolution", "0.001"]


def test_route_options_off_their_route_are_refused() -> None:
    refused([*MEAN, "--no-privacy", "--workers", "2"], "--workers", "process or dask")
    refused([*MEAN, "--no-privacy", "--scheduler", "tcp://127.0.0.1:1"], "--scheduler", "dask")
    refused(
        [*MEAN, "--no-privacy", "--backend", "process", "--scheduler", "tcp://127.0.0.1:1"],
        "--scheduler",
    )
    refused(
        ["gap", PREDICTIONS, "--group-column", "sex", "--value-column", "correct", "-e", "1",
         "--workers", "2"],
        "--workers",
    )  # fmt: skip
    refused(["entropy", TABLES, "--column", "sex", "--workers", "2"], "--workers")
    refused([*MEAN, "--no-privacy", "--backend", "aggregate", "--shard-size", "64"], "--shard-size")
    refused(["entropy", TABLES, "--column", "sex", "--shard-size", "64"], "--shard-size", "secure")
    refused(
        ["heterogeneity", VECTORS, "--no-privacy", "--secure", "--shard-size", "64"], "--shard-size"
    )
    refused(["chi2", TABLES, "--x", "sex", "--y", "income", "--scheduler", "x:1"], "--scheduler")


def test_chi2_options_of_the_chi2_test_or_of_dp_are_refused_elsewhere() -> None:
    base = ["chi2", TABLES, "--x", "sex", "--y", "income", "--clients", "20"]
    refused([*base, "--test", "g", "--decoder", "geometric"], "--decoder", "--test g")
    refused([*base, "--test", "g", "--drop-empty"], "--drop-empty")
    refused([*base, "--null-replicates", "199"], "--null-replicates", "--epsilon")
    refused([*base, "--no-secure", "--backend", "secure"], "--no-secure")


def test_privacy_explain_refuses_options_the_mechanism_does_not_use() -> None:
    refused(["privacy", "explain", "rr", "--epsilon", "1", "--delta", "1e-5"], "--delta", "rr")
    refused(["privacy", "explain", "rr", "--epsilon", "1", "--sensitivity", "2"], "--sensitivity")
    refused(["privacy", "explain", "laplace", "--epsilon", "1", "--k", "3"], "--k")
    refused(["privacy", "explain", "dithering", "--epsilon", "1"], "--epsilon", "dithering")
    refused(
        ["privacy", "explain", "duchi", "--epsilon", "1", "--resolution-bits", "8"],
        "--resolution-bits",
    )
    refused(
        ["privacy", "explain", "grr", "--k", "3", "--epsilon", "1", "--bit-depth", "2"],
        "--bit-depth",
    )
    ok(
        [
            "privacy",
            "explain",
            "gaussian",
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
            "--sensitivity",
            "2",
        ]
    )
    refused(
        ["calibrate", "gaussian", "--epsilon", "2", "--delta", "1e-5", "--allow-large-epsilon"],
        "--allow-large-epsilon",
        "--classical",
    )


def test_heterogeneity_refuses_noise_options_without_noise() -> None:
    base = ["heterogeneity", VECTORS, "--no-privacy"]
    for flag, value in (
        ("--mechanism", "classical"),
        ("--accounting", "zcdp"),
        ("--noise", "distributed"),
        ("--round1-fraction", "0.3"),
        ("--min-reporting", "0.9"),
    ):
        refused([*base, flag, value], flag, "--no-privacy")
    refused(
        ["heterogeneity", VECTORS, "--epsilon", "1", "--delta", "1e-5", "--secure", "--noise",
         "central"],
        "--noise",
        "--secure",
    )  # fmt: skip
    refused(
        ["heterogeneity", VECTORS, "--epsilon", "1", "--delta", "1e-5", "--noise", "aggregators"],
        "--noise",
        "Prio3",
    )


def test_secagg_simulate_refuses_a_dropout_stage_without_dropouts() -> None:
    refused(
        ["secagg", "simulate", "--clients", "10", "--length", "4", "--dropout-stage", "share"],
        "--dropout-stage",
    )


def test_an_option_given_at_its_default_value_is_still_refused_when_it_does_not_apply() -> None:
    """The rule is about what the user asked for, not the value: ``--decoder mean-of-squares`` (the
    default) with ``--test g`` asks for something the G-test does not do."""
    refused(
        ["chi2", TABLES, "--x", "sex", "--y", "income", "--clients", "20", "--test", "g",
         "--decoder", "mean-of-squares"],
        "--decoder",
    )  # fmt: skip


# --- long runs ------------------------------------------------------------------------------------------


def test_a_run_estimated_above_an_hour_does_not_start_without_allow_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """10^12 serial clients (about 38 days) are refused before the engine starts, even with --quiet;
    the message points to --backend aggregate and --allow-long."""
    import fedstats.cli._common as common

    started: list[int] = []
    monkeypatch.setattr(
        common,
        "open_backend",
        lambda *a, **k: started.append(1) or (_ for _ in ()).throw(AssertionError),
    )
    args = [*MEAN, "--epsilon", "1", "--clients", str(10**12)]
    line = refused(["--quiet", *args], "--backend aggregate", "--allow-long", "more than an hour")
    assert "10000000000" in line
    refused(["gap", PREDICTIONS, "--group-column", "sex", "--value-column", "correct", "-e", "1",
             "--clients", str(10**12)], "--allow-long")  # fmt: skip
    assert started == []


def test_allow_long_lets_the_run_start_and_the_threshold_is_an_hour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With --allow-long the run reaches the engine; a run estimated just under an hour is not refused."""
    import fedstats.cli._common as common

    class Started(Exception):
        pass

    def boom(*a: Any, **k: Any) -> Any:
        raise Started

    monkeypatch.setattr(common, "open_backend", boom)
    res = runner.invoke(
        app, ["--quiet", *MEAN, "--epsilon", "1", "--clients", str(10**12), "--allow-long"]
    )
    assert isinstance(res.exception, Started), res.output
    # just under an hour at the measured rate: warned, not refused
    monkeypatch.setitem(common._RATES, "mean basic", common.LONG_SECONDS / 2e8)  # the default
    res = runner.invoke(app, [*MEAN, "--epsilon", "1", "--clients", str(199_000_000)])
    assert isinstance(res.exception, Started), res.output
    assert "will take about" in res.output
    res = runner.invoke(app, [*MEAN, "--epsilon", "1", "--clients", str(201_000_000)])
    assert res.exit_code == 2 and "--allow-long" in res.output


def test_the_aggregate_route_is_never_refused_for_its_size() -> None:
    data = ok(
        ["--json", *MEAN, "--epsilon", "1", "--clients", str(10**12), "--backend", "aggregate"]
    )
    assert '"n_clients": 1000000000000' in data.stdout


# --- tiny epsilon --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [*MEAN],
        [*MEAN, "-p", "basic"],
        [*MEAN, "-p", "duchi"],
        [*MEAN, "-p", "laplace"],
        [*MEAN, "-p", "piecewise"],
        ["variance", PREDICTIONS, "--column", "confidence", "--high", "1", "--resolution", "0.001"],
        ["gap", PREDICTIONS, "--group-column", "sex", "--value-column", "correct"],
        ["gap", PREDICTIONS, "--group-column", "sex", "--value-column", "correct", "-m", "L"],
        ["privacy", "explain", "rr"],
        ["privacy", "explain", "laplace"],
        ["privacy", "explain", "harmony"],
    ],
)
def test_a_subnormal_epsilon_is_one_error_naming_epsilon_and_its_range(args: list[str]) -> None:
    line = refused([*args, "--epsilon", "1e-320"], "--epsilon", "expected a real number in [1e-")
    assert "700]" in line or "inf)" in line


def test_at_the_floor_the_result_is_correct_and_wide() -> None:
    """At epsilon = MIN_LOCAL_EPSILON the mean runs: its standard error is about 1/epsilon/sqrt(n)
    (wide: the interval covers the whole declared range) and its privacy loss is the one asked for."""
    import json

    res = ok(["--json", "--seed", "1", *MEAN, "-p", "basic", "--epsilon", repr(MIN_LOCAL_EPSILON)])
    out = json.loads(res.stdout)
    assert out["details"]["clipped_ci"] == [0.0, 1.0]  # the released normal interval is wider still
    assert out["ci"][0] < 0.0 < 1.0 < out["ci"][1]
    assert out["standard_error"] > 1e6
    assert out["epsilon"] == pytest.approx(MIN_LOCAL_EPSILON, rel=1e-3)


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=5e-324, max_value=1e3, allow_subnormal=True))
def test_pure_epsilon_mechanisms_take_exactly_the_epsilons_above_the_floor(eps: float) -> None:
    """Above the floor, randomized response and Laplace are built and their variance is finite; below it
    they are refused with the range (never a ZeroDivisionError or OverflowError)."""
    for build in (
        lambda: RandomizedResponse(epsilon=eps),
        lambda: LaplaceMechanism(epsilon=eps, sensitivity=1.0),
    ):
        if eps < MIN_LOCAL_EPSILON:
            with pytest.raises(ParameterError, match=r"\[1e-12"):
                build()
        else:
            mech = build()
            assert math.isfinite(mech.explain()["variance_worst_case"])


def test_the_grid_floor_is_above_the_local_floor() -> None:
    assert MIN_GRID_EPSILON > MIN_LOCAL_EPSILON
    with pytest.raises(ParameterError, match="release grid"):
        check_local_epsilon(
            "epsilon", MIN_GRID_EPSILON / 2, low=MIN_GRID_EPSILON, why="its release grid"
        )


def test_gaussian_calibration_takes_every_normal_epsilon_and_names_epsilon_below() -> None:
    """(epsilon -> 0, delta) has a finite sigma: a tiny normal epsilon is calibrated (a correct, wide
    result); a subnormal one is refused naming --epsilon, not --delta."""
    import json
    import sys

    out = json.loads(
        ok(["--json", "calibrate", "gaussian", "--epsilon", "1e-300", "--delta", "1e-5"]).stdout
    )
    # (0, delta)-DP Gaussian: delta = 2 Phi(1 / (2 sigma)) - 1, so sigma -> 1 / (delta sqrt(2 pi))
    assert out["sigma"] == pytest.approx(1 / (1e-5 * math.sqrt(2 * math.pi)), rel=1e-6)
    assert out["private"] is True
    for args in (["calibrate", "gaussian"], ["privacy", "explain", "gaussian"]):
        refused(
            [*args, "--epsilon", "1e-320", "--delta", "1e-5"],
            "--epsilon",
            f"{sys.float_info.min:g}",
        )


# --- issue 42, item 8: options of another protocol, conflicting flags, typed columns, wide CSVs, admin ---


@pytest.mark.parametrize(
    ("protocol", "flag", "value"),
    [
        ("dithering", "--weight-exponent", "2"),
        ("weighted", "--round1-fraction", "0.5"),
        ("basic", "--estimator", "pooled"),
        ("duchi", "--bits-per-client", "2"),
        ("laplace", "--allocation", "random"),
    ],
)
def test_an_option_of_another_protocol_is_refused_naming_both(
    protocol: str, flag: str, value: str
) -> None:
    for command in ("mean", "variance"):
        args = [command, *MEAN[1:], "-e", "1", "--protocol", protocol, flag, value]
        refused(args, flag, f"--protocol {protocol}")


def test_the_options_a_protocol_takes_are_not_refused() -> None:
    """``--weight-exponent`` is adaptive's round-2 exponent and weighted's 2^(alpha j): both take it."""
    for protocol in ("adaptive", "weighted"):
        ok(["--json", *MEAN, "-e", "1", "--protocol", protocol, "--weight-exponent", "2"])


def test_gap_refuses_known_and_estimated_sizes_together() -> None:
    base = ["gap", PREDICTIONS, "--group-column", "sex", "--value-column", "correct", "-e", "1"]
    for pair in (["--known-sizes", "--estimate-sizes"], ["--estimate-sizes", "--known-sizes"]):
        refused([*base, *pair], "--known-sizes", "--estimate-sizes")


@pytest.fixture
def typed_parquet(tmp_path: Path) -> Path:
    import pandas as pd

    p = tmp_path / "typed.parquet"
    pd.DataFrame(
        {
            "group": ["a", "b", "a", "b"],
            "flag": [True, False, True, True],
            "when": pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]),
            "text": ["1.5", "0.5", "1.0", "0.0"],
            "value": [0.5, 0.25, 1.0, 0.0],
        }
    ).to_parquet(p)
    return p


@pytest.mark.parametrize(
    ("column", "held"), [("flag", "booleans"), ("when", "dates or times"), ("text", "text")]
)
def test_parquet_booleans_times_and_text_are_not_read_as_numbers(
    typed_parquet: Path, column: str, held: str
) -> None:
    refused(
        ["mean", str(typed_parquet), "--column", column, "--high", "2", "--no-privacy"],
        "--column",
        f"'{column}' holds {held}",
    )
    refused(
        ["gap", str(typed_parquet), "--group-column", "group", "--value-column", column, "-e", "1"],
        "--value-column",
        f"'{column}' holds {held}",
    )
    ok(["--json", "mean", str(typed_parquet), "--column", "value", "--high", "1", "--no-privacy"])


def test_csv_booleans_are_refused_and_the_library_names_the_column_and_type(
    tmp_path: Path,
) -> None:
    import pandas as pd

    from fedstats.datasets.readers import numeric_column
    from fedstats.errors import DataError

    p = tmp_path / "b.csv"
    p.write_text("flag,value\nTrue,1\nFalse,0\nTrue,1\n")
    refused(["mean", str(p), "--column", "flag", "--high", "1", "--no-privacy"], "booleans", "bool")
    df = pd.DataFrame({"when": pd.to_datetime(["2024-01-01"]), "n": pd.array([1], dtype="Int64")})
    with pytest.raises(DataError, match=r"'when' holds dates or times \(type datetime64"):
        numeric_column(df, "when")
    assert numeric_column(df, "n").tolist() == [1.0]


def test_a_csv_wider_than_the_limit_is_refused_from_its_header_line(tmp_path: Path) -> None:
    """The issue's table: 3 rows of 10^6 columns (96 s and 3.7 GB in pandas) is refused after reading
    its first line only; the limit itself is counted exactly, compressed files too."""
    import gzip

    from fedstats.datasets.readers import MAX_CSV_COLUMNS, csv_header_columns

    wide = tmp_path / "wide.csv"
    row = ",".join(["0"] * 10**6)
    wide.write_text(",".join(f"c{i}" for i in range(10**6)) + "\n" + "\n".join([row] * 3) + "\n")
    refused(["mean", str(wide), "--column", "c0", "--high", "1", "--no-privacy"], "20,000 columns")
    edge = tmp_path / "edge.csv.gz"
    header = ",".join(
        f'"c,{i}"' for i in range(MAX_CSV_COLUMNS)
    )  # quoted separators are not fields
    edge.write_bytes(gzip.compress((header + "\n1\n").encode()))
    assert csv_header_columns(edge) == MAX_CSV_COLUMNS
    plain = tmp_path / "edge.tsv"
    plain.write_text("\t".join(["x"] * (MAX_CSV_COLUMNS + 1)) + "\n")
    assert csv_header_columns(plain, "\t") == MAX_CSV_COLUMNS + 1


def test_admin_checks_its_options_before_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port out of range and a token with a control character are refused before any client is
    built (and the token is never echoed)."""
    import httpx

    def no_network(*a: Any, **k: Any) -> Any:
        raise AssertionError("reached the network")

    monkeypatch.setattr(httpx, "Client", no_network)
    admin = ["admin", "--server", "https://127.0.0.1:8443", "--token", "t0ken"]
    refused(
        ["admin", "--server", "https://127.0.0.1:99999", "--token", "t", "budgets", "list"],
        "--server",
        "[1, 65535]",
    )
    refused([*admin[:2], "https://127.0.0.1:0", *admin[3:], "budgets", "list"], "--server")
    refused([*admin[:2], "ftp://127.0.0.1", *admin[3:], "budgets", "list"], "--server", "https://")
    line = refused([*admin[:4], "sec\nret", "budgets", "list"], "--token", "U+000A")
    assert "sec" not in line  # the token is a secret: never echoed
    refused([*admin[:4], "sec ret", "budgets", "list"], "--token", "U+0020")
