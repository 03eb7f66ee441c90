r"""``fedstats gap`` and ``fedstats gap-plan``: private performance-gap measurement (Juarez & Korolova 2023).

``gap`` measures the gap between two groups' mean performance from a table with one row per client (group
and value columns), under local DP with the mechanism :math:`\mathcal M_R` or :math:`\mathcal M_L`; with
``--clients K`` it simulates K clients resampled from the rows within each group, shard by shard.
``gap-plan`` finds the smallest budget that bounds the error by ``alpha`` with a given probability.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fedstats._validation import check_real
from fedstats.analyses.performance_gap.config import PerformanceGapConfig
from fedstats.cli._common import (
    AllowLongOption,
    JsonOption,
    SeedOption,
    check_distinct_columns,
    check_route_options,
    emit,
    fmt_value,
    release,
    state_from,
    warn_duration,
)
from fedstats.cli._options import ConfidenceOption, EngineOptions, FractionsOption, route_options
from fedstats.errors import DataError, ParameterError

if TYPE_CHECKING:  # imported where used: ``--help`` loads neither rich, scipy nor the analysis
    from rich.console import Console

_DEFAULT = PerformanceGapConfig  # the options a task shares take the config's defaults

MechanismOption = Annotated[
    str,
    typer.Option(
        "--mechanism",
        "-m",
        help="R: Harmony + randomized response on the value; L: Laplace noise on the value.",
    ),
]
AccountingOption = Annotated[
    str,
    typer.Option(
        "--accounting",
        help="exact: budget split optimal under the TRUE privacy loss; paper: the paper's split "
        "(its true loss is reported and exceeds epsilon).",
    ),
]


@route_options
def gap(
    ctx: typer.Context,
    data: Annotated[Path, typer.Argument(help="Table (CSV/Parquet), one row per client.")],
    group_column: Annotated[str, typer.Option("--group-column", help="Column of the group.")],
    value_column: Annotated[
        str, typer.Option("--value-column", help="Column of the performance value.")
    ],
    mechanism: MechanismOption = _DEFAULT.mechanism,
    epsilon: Annotated[
        float | None,
        typer.Option("--epsilon", "-e", help="Local privacy budget per client (> 0), required."),
    ] = None,
    clients: Annotated[
        int | None,
        typer.Option(
            "--clients", help="Simulate K clients resampled from the rows within each group."
        ),
    ] = None,
    accounting: AccountingOption = _DEFAULT.accounting,
    scale: Annotated[
        str,
        typer.Option(
            "--scale", help="rate: values are rates in [0, 1]; signed: values in [-1, 1]."
        ),
    ] = "rate",
    pair: Annotated[
        str | None,
        typer.Option("--pair", help="Two groups 'A,B' to compare (gap = m_A - m_B)."),
    ] = None,
    estimate_sizes: Annotated[
        bool,
        typer.Option(
            "--estimate-sizes",
            help="Estimate the group sizes privately from the perturbed groups (the default).",
        ),
    ] = False,
    known_sizes: Annotated[
        bool,
        typer.Option(
            "--known-sizes",
            help="Use the known exact group sizes: RELEASES them (not private); not with "
            "--estimate-sizes.",
        ),
    ] = False,
    confidence: ConfidenceOption = 0.95,
    engine_options: EngineOptions = EngineOptions("serial"),
    allow_long: AllowLongOption = False,
    json_flag: JsonOption = False,
    seed: SeedOption = None,
) -> None:
    """Measure the performance gap between two groups under local differential privacy."""
    state = state_from(ctx, json_flag=json_flag, seed=seed)
    # two flags, not a --x/--no-x pair: a pair lets the last one win silently
    if estimate_sizes and known_sizes:
        raise ParameterError(
            "--known-sizes", True, "unset with --estimate-sizes (one or the other)"
        )
    estimate_sizes = not known_sizes
    check_distinct_columns({"--group-column": group_column, "--value-column": value_column})
    check_route_options(ctx, engine_options.backend)
    # checked before the duration estimate and the data scan of a long run
    check_real("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    groups, values = _read_groups(data, group_column, value_column)
    pair_labels = None
    if pair is not None:
        parts = [p.strip() for p in pair.split(",")]
        if len(parts) != 2:
            raise ParameterError("--pair", pair, "two group labels separated by a comma")
        pair_labels = parts
    if epsilon is None:
        raise ParameterError(
            "--epsilon",
            None,
            "a local privacy budget in (0, inf) (the gap has no non-private mode)",
        )
    # the calibration probe and the run are the same computation with other clients and engine
    run = functools.partial(
        measure_payload,
        groups,
        values,
        mechanism=mechanism,
        epsilon=epsilon,
        accounting=accounting,
        scale=scale,
        pair=pair_labels,
        estimate_sizes=estimate_sizes,
        confidence=confidence,
    )
    if clients is not None and clients > 0:
        warn_duration(
            state,
            clients,
            backend=engine_options.backend,
            workers=engine_options.workers,
            probe=functools.partial(_probe, run),
            key=f"gap {mechanism}",
            allow_long=allow_long,
        )
    with engine_options.session(state) as engine:
        result = run(n_clients=clients, engine=engine)
    payload = result.to_dict()
    payload = {
        "gap": payload["gap"],
        "ci": payload["ci"],
        "true_loss": payload["true_loss"],
        **({"true_gap": payload["true_gap"]} if clients is not None else {}),
        **{k: v for k, v in payload.items() if k not in ("gap", "ci", "true_loss", "true_gap")},
    }
    if clients is None:
        payload["true_gap"] = result.true_gap
    render = functools.partial(_render, result, bool(clients), estimate_sizes)
    # the library's warnings: a small group's uncertain estimated size
    release(state, payload, result, render, result.warnings)


def _read_groups(data: Path, group_column: str, value_column: str) -> tuple[Any, Any]:
    """The group labels and the numeric values of ``DATA``; the columns must exist, no label missing."""
    from fedstats.cli._tables import numeric_values, read_table

    df = read_table(data)
    for name, col in (("--group-column", group_column), ("--value-column", value_column)):
        if col not in df.columns:
            raise ParameterError(name, col, "a column of DATA: " + ", ".join(map(str, df.columns)))
    values = numeric_values(df, "--value-column", value_column)
    if df[group_column].isna().any():
        raise DataError(f"column {group_column!r} has missing group labels")
    return df[group_column].to_numpy(), values


def _probe(run: Any, n: int) -> object:
    """The duration probe: the run with ``n`` clients on a serial engine (seeded: not a release)."""
    from fedstats.engine import Engine
    from fedstats.randomness import RandomSource

    return run(n_clients=n, engine=Engine(randomness=RandomSource(0)))


def _render(result: Any, simulated: bool, estimate_sizes: bool, console: Console) -> None:
    """The text output: one table of the gap, its interval, the budget split and the group means."""
    from rich.table import Table

    t = Table(title=f"performance gap {result.pair[0]} - {result.pair[1]}" if result.pair else "")
    t.add_column("quantity")
    t.add_column("value")
    lo, hi = result.ci if result.ci else (None, None)
    t.add_row("gap (estimate)", fmt_value(result.gap))
    t.add_row(f"{int(result.confidence * 100)}% CI", f"[{fmt_value(lo)}, {fmt_value(hi)}]")
    t.add_row(
        "true gap" + (" (simulated clients)" if simulated else " (data)"),
        fmt_value(result.true_gap),
    )
    t.add_row("mechanism", result.mechanism)
    alloc = result.allocation
    split = f"eps1={fmt_value(alloc['epsilon1'])}, eps2={fmt_value(alloc['epsilon2'])}"
    if "k" in alloc:
        split += f", k={fmt_value(alloc['k'])}"
    t.add_row("budget split", split)
    t.add_row("true privacy loss", fmt_value(result.true_loss))
    t.add_row("clients", fmt_value(result.n_clients))
    for lab, m, s in zip(
        result.groups, result.group_means, result.group_standard_errors, strict=True
    ):
        t.add_row(f"mean of {lab}", f"{fmt_value(m)} +/- {fmt_value(s)}")
    t.add_row("bytes per client", fmt_value(result.bytes_per_client))
    t.add_row(
        "group sizes",
        "estimated (private)" if estimate_sizes else "exact, RELEASED (not private)",
    )
    console.print(t)
    if result.release_note:
        console.print(f"[dim]{result.release_note}[/dim]")


_CLI_NAMES = {
    "clients": "--clients",
    "n_clients": "--clients",
    "epsilon": "--epsilon",
    "mechanism": "--mechanism",
    "accounting": "--accounting",
    "scale": "--scale",
    "pair": "--pair",
    "confidence": "--confidence",
    "alpha": "--alpha",
    "probability": "--probability",
    "bound": "--bound",
}


def _as_cli_error(exc: ParameterError) -> ParameterError:
    """Return the same error, naming the command-line option the user typed."""
    name = _CLI_NAMES.get(exc.name)
    return exc if name is None else ParameterError(name, exc.value, exc.accepted)


def measure_payload(groups: Any, values: Any, **kwargs: Any) -> Any:
    """:func:`measure_performance_gap`, with parameter errors naming the CLI options."""
    from fedstats.analyses.performance_gap import measure_performance_gap

    try:
        return measure_performance_gap(groups, values, **kwargs)
    except ParameterError as exc:
        raise _as_cli_error(exc) from None


def gap_plan(
    ctx: typer.Context,
    clients: Annotated[int, typer.Option("--clients", help="Number of clients K (>= 2).")],
    alpha: Annotated[float, typer.Option("--alpha", help="Error target (> 0).")],
    probability: Annotated[
        float, typer.Option("--probability", help="Probability the error stays below alpha.")
    ] = 0.99,
    mechanism: MechanismOption = _DEFAULT.mechanism,
    accounting: AccountingOption = _DEFAULT.accounting,
    bound: Annotated[
        str,
        typer.Option(
            "--bound",
            help="chebyshev (the paper), bernstein (M_R only) or normal (CLT approximation).",
        ),
    ] = "chebyshev",
    scale: Annotated[
        str,
        typer.Option(
            "--scale",
            help="signed: alpha in [-1, 1] value units (paper's Table 1); rate: rate units.",
        ),
    ] = "signed",
    fractions: FractionsOption = None,
    json_flag: JsonOption = False,
) -> None:
    """Deprecated: use 'fedstats plan gap --alpha'. Smallest epsilon that bounds the gap's error by alpha.

    The same code runs under both names (``fedstats plan gap --clients K --alpha A`` calls this function);
    ``gap-plan`` prints a deprecation line on stderr first (unless --quiet).
    """
    from fedstats.analyses.performance_gap import plan_epsilon
    from fedstats.analyses.performance_gap.allocation import GroupLayout

    state = state_from(ctx, json_flag=json_flag)
    layout = None
    if fractions is not None:
        try:
            fr = [float(x) for x in fractions.split(",")]
        except ValueError:
            raise ParameterError("--fractions", fractions, "comma-separated numbers") from None
        if len(fr) < 2 or min(fr) <= 0 or abs(sum(fr) - 1.0) > 1e-6:
            raise ParameterError(
                "--fractions", fractions, "at least two positive fractions summing to 1"
            )
        if clients < 2:
            raise ParameterError("--clients", clients, "an integer in [2, inf]")
        layout = GroupLayout(tuple(f * clients for f in fr))
    try:
        plan = plan_epsilon(
            clients,
            alpha,
            probability,
            mechanism,
            accounting=accounting,
            bound=bound,
            layout=layout,
            scale=scale,
        )
    except ParameterError as exc:
        raise _as_cli_error(exc) from None
    payload = plan.to_dict()
    alloc = payload["allocation"] or {}
    payload = {
        "epsilon": payload["epsilon"],
        "epsilon1": alloc.get("epsilon1"),
        "epsilon2": alloc.get("epsilon2"),
        **({"k": alloc.get("k")} if plan.mechanism == "L" else {}),
        **payload,
    }

    def render(console: Console) -> None:
        from rich.table import Table

        t = Table(title="gap-plan", show_header=False)
        if plan.epsilon is None:
            t.add_row(
                "epsilon",
                f"none: no budget reaches alpha={fmt_value(plan.alpha)} "
                f"(best possible error {fmt_value(plan.floor)})",
            )
        else:
            t.add_row("epsilon", fmt_value(plan.epsilon))
            t.add_row("epsilon1 (group)", fmt_value(alloc.get("epsilon1")))
            t.add_row("epsilon2 (value)", fmt_value(alloc.get("epsilon2")))
            if plan.mechanism == "L":
                t.add_row("k", fmt_value(alloc.get("k")))
            t.add_row("true privacy loss", fmt_value(alloc.get("true_loss")))
            t.add_row("paper's claimed loss", fmt_value(alloc.get("paper_loss")))
        t.add_row("bound / accounting", f"{plan.bound} / {plan.accounting}")
        console.print(t)

    if ctx.info_name == "gap-plan" and not state.quiet:  # after the plan: errors stay one line
        typer.echo(
            "warning: 'fedstats gap-plan' is deprecated: use 'fedstats plan gap --alpha'", err=True
        )
    emit(state, payload, render)


def register(app: typer.Typer) -> None:
    """Add ``gap`` and ``gap-plan`` to the app."""
    app.command("gap")(gap)
    app.command("gap-plan")(gap_plan)
