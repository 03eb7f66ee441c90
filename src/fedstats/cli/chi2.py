"""``fedstats chi2``: FED-chi^2 and the G-test (Pang et al., ICML 2023), optionally with central DP noise.

It reads a registered dataset (``adult``, ``mushroom``, ...) or a CSV/Parquet file, gives every client its
own contingency table (columns ``--x`` by ``--y``), and runs the protocol through the engine. Clients are
the values of ``--client-column`` or ``--clients N`` (rows spread uniformly at random over ``N`` clients;
default 100, the paper's). ``--secure`` runs every round through real secure aggregation; it is the default
up to :data:`~fedstats.cli._tables.SECURE_DEFAULT_MAX_CLIENTS` clients. The data is at hand, so the JSON
output also holds the exact statistic and the realised error: ``statistic``, ``ci``, ``p_value`` (the
test's: it accounts for the sketch's noise, and with ``--epsilon`` is simulated through both rounds' DP
noise, with ``p_value_mc_error`` and ``null_replicates``), ``p_value_paper``, ``dof``, ``exact_statistic``,
``multiplicative_error``. ``fedstats entropy`` is in :mod:`fedstats.cli.entropy`.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fedstats.analyses.chi2.config import FedChi2Config
from fedstats.cli import _tables as _t
from fedstats.cli._common import (
    CliState,
    DataDirOption,
    JsonOption,
    SeedOption,
    check_applies,
    check_route_options,
    print_rows,
    release,
    release_line,
    state_from,
)
from fedstats.cli._options import (
    ConfidenceOption,
    DataArgument,
    EngineOptions,
    LevelOption,
    SplitOption,
    route_options,
)
from fedstats.cli._tables import (
    BitsOption,
    ClientColumnOption,
    ClientsOption,
    CountColumnOption,
    SecureOption,
)
from fedstats.errors import ParameterError

if TYPE_CHECKING:  # imported where used: ``--help`` loads neither rich nor pandas
    from rich.console import Console

__all__ = ["register"]


@route_options
def chi2(
    ctx: typer.Context,
    data: DataArgument,
    x: Annotated[str, typer.Option("--x", help="Column of the table's rows.")],
    y: Annotated[str, typer.Option("--y", help="Column of the table's columns.")],
    client_column: ClientColumnOption = None,
    clients: ClientsOption = None,
    encoding_size: Annotated[
        int, typer.Option("--encoding-size", help="l, length of the projection (>= 2).")
    ] = 50,
    decoder: Annotated[
        str, typer.Option("--decoder", help="mean-of-squares (default, MLE) or geometric (paper).")
    ] = "mean-of-squares",
    dropout: Annotated[
        float, typer.Option("--dropout", help="Fraction of clients dropping out before round 2.")
    ] = 0.0,
    test: Annotated[
        str, typer.Option("--test", help="chi2 (FED-chi^2) or g (G-test via FED-H).")
    ] = "chi2",
    level: LevelOption = 0.05,
    confidence: ConfidenceOption = 0.95,
    bits: BitsOption = 64,
    drop_empty: Annotated[
        bool, typer.Option("--drop-empty", help="Drop rows/columns empty in the summed table.")
    ] = False,
    count_column: CountColumnOption = None,
    split: SplitOption = None,
    secure: SecureOption = None,
    engine_options: EngineOptions = EngineOptions("auto"),
    epsilon: Annotated[
        float | None,
        typer.Option(
            "--epsilon",
            help="Central DP: discrete Gaussian noise on both secure sums, total epsilon in (0, inf) "
            "(with --delta; --test chi2 only). Default: no DP noise.",
        ),
    ] = None,
    delta: Annotated[
        float | None, typer.Option("--delta", help="Total delta in (0, 1), with --epsilon.")
    ] = None,
    max_records: Annotated[
        int | None,
        typer.Option(
            "--max-records",
            help="With --epsilon: the most records one client may hold (bounds the sensitivity; "
            "default the most any client holds in the data).",
        ),
    ] = None,
    null_replicates: Annotated[
        int,
        typer.Option(
            "--null-replicates",
            help="With --epsilon: simulated null replicates behind the p-value (>= 99; default 999).",
        ),
    ] = 999,
    merge_below: Annotated[
        int,
        typer.Option(
            "--merge-below",
            help="Merge each column's categories with fewer than N people (round 1's released "
            "marginals: noisy with --epsilon, so no extra budget) into one before the test, and report "
            "them (default 0: none; --test chi2 only).",
        ),
    ] = FedChi2Config.merge_below,
    json_flag: JsonOption = False,
    seed: SeedOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Secure federated chi-square (or G) test of independence of two columns (FED-chi^2)."""
    import numpy as np

    state = state_from(ctx, json_flag=json_flag, seed=seed, data_dir=data_dir)
    _check_options(
        ctx, test, encoding_size, epsilon, delta, max_records, null_replicates, merge_below
    )
    df, weights, assign, n = _t.client_frame(
        data, split, {"--x": x, "--y": y}, client_column=client_column, clients=clients,
        count_column=count_column, state=state,
    )  # fmt: skip
    cells = _t.column_codes(df, x)[1] * _t.column_codes(df, y)[1]
    big = n * cells > _t.MAX_TABLE_ENTRIES
    if big and (test != "chi2" or epsilon is not None):
        what = "--test g" if test != "chi2" else "--epsilon"
        raise ParameterError("--clients", n, f"at most {_t.MAX_TABLE_ENTRIES // cells} with {what}")
    _t.check_projection_memory(encoding_size, cells, 1 if big else n)
    # too many clients x cells to hold every client's table: the global table and the fast path
    tables = _t.tables(
        df, (x, y), np.zeros_like(assign) if big else assign, 1 if big else n, weights
    )
    route = _t.route(secure, engine_options.backend, n)
    if big:  # the linearity shortcut computes the sums in closed form: no route runs
        _check_no_route(ctx, n, cells)
    else:
        check_route_options(ctx, route)
    common: dict[str, Any] = {"encoding_size": encoding_size, "level": level, "bits": bits}
    common["confidence"] = confidence
    if big or test == "chi2":
        common |= {"decoder": decoder, "drop_empty": drop_empty}
    if not big and test == "chi2":
        common |= {"epsilon": epsilon, "delta": delta, "max_records": max_records}
        common |= {"null_replicates": null_replicates, "merge_below": merge_below}
        common["labels"] = (_labels(df, x), _labels(df, y))
    elif not big and dropout:
        raise ParameterError("--dropout", dropout, "0 with --test g")
    engine_options = replace(engine_options, backend=route)
    res = _run(state, "simulate" if big else test, tables, n, engine_options, dropout, common)
    if big:
        route = "simulation (linearity shortcut)"
    payload = _payload(res, data, x, y, list(tables.shape[1:]), route, epsilon)
    warnings = list(res.warnings)  # the library's: rare categories, low power, what was merged
    if dropout > 0.5:
        warnings.append(
            f"{100 * dropout:g}% of the clients dropped out: the test's decision rests on the few "
            "survivors and is unreliable"
        )
    render = partial(_render, payload, confidence=confidence, level=level)
    release(state, payload, res, render, warnings)


def _run(
    state: CliState,
    how: str,
    tables: Any,
    n: int,
    engine_options: EngineOptions,
    dropout: float,
    options: dict[str, Any],
) -> Any:
    """Run the test: ``how`` is ``chi2`` or ``g`` through the engine, or ``simulate``.

    ``simulate`` is FED-chi^2's linearity shortcut on the summed table (``tables`` holds one client's,
    the global table), with the survivors drawn as from ``n`` clients holding i.i.d. rows.
    """
    from fedstats.analyses.chi2 import fed_chi2, simulate_fed_chi2
    from fedstats.analyses.entropy import fed_g_test

    randomness = state.randomness
    if how == "simulate":
        return simulate_fed_chi2(
            tables.sum(axis=0), n, dropout=dropout, randomness=randomness, split="iid", **options
        )
    with engine_options.session(state) as engine:
        if how == "chi2":
            return fed_chi2(
                tables, dropout=dropout, engine=engine, randomness=randomness, **options
            )
        return fed_g_test(tables, engine=engine, randomness=randomness, **options)


def _check_options(
    ctx: typer.Context,
    test: str,
    encoding_size: int,
    epsilon: float | None,
    delta: float | None,
    max_records: int | None,
    null_replicates: int,
    merge_below: int,
) -> None:
    """Refuse values out of range and options that do not apply to ``--test`` or without ``--epsilon``."""
    if test not in ("chi2", "g"):
        raise ParameterError("--test", test, "'chi2' or 'g'")
    if encoding_size < 2:
        raise ParameterError("--encoding-size", encoding_size, "an integer >= 2")
    if (epsilon is None) != (delta is None):
        raise ParameterError("--epsilon/--delta", (epsilon, delta), "both given, or neither")
    if epsilon is not None and test != "chi2":
        raise ParameterError("--epsilon", epsilon, "no value with --test g (DP noise: chi2 only)")
    if max_records is not None and epsilon is None:
        raise ParameterError("--max-records", max_records, "no value without --epsilon")
    if null_replicates < 99:
        raise ParameterError("--null-replicates", null_replicates, "an integer >= 99")
    if merge_below < 0:
        raise ParameterError("--merge-below", merge_below, "an integer >= 0 (people)")
    for name in ("decoder", "drop_empty", "merge_below"):
        check_applies(ctx, name, test == "chi2", "unset with --test g (FED-chi^2 only)")
    check_applies(
        ctx,
        "null_replicates",
        epsilon is not None,
        "unset without --epsilon (only the DP p-value is simulated from null replicates)",
    )


def _check_no_route(ctx: typer.Context, n: int, cells: int) -> None:
    """Refuse route options (and merging) when the sums are simulated by linearity: no route runs."""
    check_applies(
        ctx,
        "merge_below",
        False,
        f"unset with {n} clients x {cells} cells (the linearity shortcut does not merge)",
    )
    for name in ("secure", "backend", "workers", "scheduler", "shard_size"):
        check_applies(
            ctx,
            name,
            False,
            f"unset with {n} clients x {cells} cells (over {_t.MAX_TABLE_ENTRIES}: the sums are "
            "simulated by linearity, no route runs)",
        )


def _payload(
    res: Any, data: str, x: str, y: str, shape: list[int], route: str, epsilon: float | None
) -> dict[str, Any]:
    """The JSON output: the test, the exact statistic and realised error, then the library's fields."""
    out = res.to_dict()
    return {
        "test": res.test,
        "statistic": res.statistic,
        "ci": out.pop("ci"),
        "p_value": out.pop("p_value"),
        "dof": out.pop("dof"),
        "exact_statistic": res.exact_statistic,
        "multiplicative_error": out.pop("multiplicative_error"),
        "decision_stable": out.pop("decision_stable"),
        "rejected": out.pop("rejected"),
        "dataset": data,
        "x": x,
        "y": y,
        "shape": shape,
        "route": route,
        "privacy": _t.NO_DP_NOTE if epsilon is None else _dp_note(res),
        **{k: v for k, v in out.items() if k not in ("details", "test")},
        "details": _t.lean(out.get("details", {})),
    }


def _render(payload: dict[str, Any], console: Console, *, confidence: float, level: float) -> None:
    """The text output: one table of the test, then the privacy line."""
    name = "FED-chi^2" if payload["test"] == "chi2" else "G-test via FED-H"
    ci = payload["ci"]
    verdict = "dependent" if payload["rejected"] else "no evidence of dependence"
    rows = [
        ("statistic", f"{payload['statistic']:.6g}"),
        (f"{100 * confidence:g}% interval", f"[{ci[0]:.6g}, {ci[1]:.6g}]"),
        ("p-value", _p_text(payload)),
        ("paper's p-value (statistic read as exact)", f"{payload['p_value_paper']:.4g}"),
        (
            f"decision at level {level:g}",
            verdict + ("" if payload["decision_stable"] else " (not stable over the interval)"),
        ),
        ("exact statistic (simulation)", f"{payload['exact_statistic']:.6g}"),
        ("multiplicative error", f"{payload['multiplicative_error']:.4g}"),
        ("clients", f"{payload['n_clients']} ({payload['route']})"),
        (
            "bytes per client",
            f"{payload['bytes_per_client']} (whole table: {payload['bytes_full_table']})",
        ),
    ]
    title = f"{name}: {payload['x']} x {payload['y']} ({payload['dataset']})"
    print_rows(console, title, rows, f"privacy: {payload['privacy']}", release_line(payload))


def _labels(df: Any, column: str) -> list[str]:
    """The categories of ``column`` in code order (sorted, as :func:`fedstats.cli._tables.column_codes`)."""
    import pandas as pd

    return [str(v) for v in pd.factorize(df[column], sort=True)[1]]


def _dp_note(res: Any) -> str:
    """What a run with ``--epsilon`` released, in one sentence (text output and JSON ``privacy``)."""
    p = res.details["privacy"]
    return (
        f"({res.epsilon:.4g}, {res.delta:.3g})-DP: central discrete Gaussian noise on the marginals "
        f"(sigma {p['sigma_marginals']:.3g} counts) and on the projection (sigma "
        f"{p['sigma_projection']:.3g}), one client's table of at most {p['max_records']} records "
        "replaced. The estimate subtracts the noise's simulated mean effect and its interval is "
        "conservative (widened for the noisy marginals); the p-value and "
        "the decision come from the null distribution of the released statistic, simulated through "
        "both rounds' noise, the sketch and the decoder (parametric bootstrap under independence with "
        f"the noisy marginals, {res.null_replicates} replicates, Monte Carlo error shown)"
    )


def _p_text(payload: dict[str, Any]) -> str:
    """The p-value line: the value, its Monte Carlo error when simulated, and what it accounts for."""
    p, dof = payload["p_value"], payload["dof"]
    if payload.get("p_value_method") == "parametric-bootstrap":
        return (
            f"{p:.4g} +/- {payload['p_value_mc_error']:.2g} (Monte Carlo, "
            f"{payload['null_replicates']} null replicates; sketch and DP noise; dof {dof})"
        )
    if payload.get("p_value_method") == "sketch":
        return f"{p:.4g} (accounts for the sketch's noise; dof {dof})"
    return f"{p:.4g} (dof {dof})"


def register(app: typer.Typer) -> None:
    """Add ``chi2`` to the app."""
    app.command("chi2")(chi2)
