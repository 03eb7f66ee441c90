"""``fedstats plan``: the clients, epsilon or encoding size a useful run needs, before collecting anything.

One subcommand per analysis, each a thin face of the library's planner (``fedstats.plan_*``), which
predicts the run's interval width (or its test's power) from the variance or power formulas the estimator
reports:

* ``plan mean`` / ``plan variance``: bit pushing (:mod:`fedstats.analyses.bitpushing.planning`);
* ``plan gap``: the performance gap's interval width (:func:`~fedstats.analyses.performance_gap.planning.plan_gap`),
  or, with ``--alpha``, the smallest epsilon bounding its error by alpha with a probability (what
  ``fedstats gap-plan`` did; that command stays as a deprecated alias);
* ``plan chi2``: the power of FED-chi^2 at Cohen's w (:mod:`fedstats.analyses.chi2.planning`);
* ``plan entropy``: FED-H's encoding size (:mod:`fedstats.analyses.entropy.planning`);
* ``plan heterogeneity``: the dispersion interval (:mod:`fedstats.analyses.heterogeneity.planning`).

Give ``--clients`` or ``--epsilon`` and the planner solves for the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fedstats.cli._common import (
    TYPER_SETTINGS,
    FedstatsGroup,
    JsonOption,
    emit,
    fmt_value,
    state_from,
)
from fedstats.cli._options import (
    ConfidenceOption,
    FdStepOption,
    FractionsOption,
    LevelOption,
    LowOption,
    MeanFractionOption,
    ResolutionOption,
    drop_option,
)
from fedstats.errors import ParameterError

if TYPE_CHECKING:
    from rich.console import Console

    from fedstats.analyses._planning import Plan

__all__ = ["plan_app", "register"]

plan_app = typer.Typer(
    name="plan",
    cls=FedstatsGroup,
    help="The clients, epsilon or encoding size a useful run needs (interval width, or power).",
    no_args_is_help=True,
    **TYPER_SETTINGS,
)

WidthOption = Annotated[
    float,
    typer.Option("--width", help="Target width of the interval (> 0), in the statistic's units."),
]
ClientsOption = Annotated[
    int | None, typer.Option("--clients", help="Clients (records); omit to solve for it.")
]
EpsilonOption = Annotated[
    float | None, typer.Option("--epsilon", "-e", help="Privacy budget; omit to solve for it.")
]


def _one_unknown(clients: int | None, epsilon: float | None) -> None:
    if (clients is None) == (epsilon is None):
        raise ParameterError(
            "--clients/--epsilon",
            (clients, epsilon),
            "exactly one of them (the planner solves for the other)",
        )


def _emit(ctx: typer.Context, plan: Plan, json_flag: bool) -> None:
    state = state_from(ctx, json_flag=json_flag)
    payload = plan.to_dict()

    def render(console: Console) -> None:
        from rich.table import Table

        t = Table(title=f"plan {plan.analysis}", show_header=False)
        if plan.value is None:
            t.add_row(plan.solved_for, f"none: {plan.note}")
        else:
            t.add_row(plan.solved_for, fmt_value(plan.value))
            t.add_row("predicted", fmt_value(plan.achieved))
        t.add_row("target", plan.target)
        for key, value in plan.inputs.items():
            t.add_row(key, fmt_value(value))
        if plan.value is not None and plan.note:
            t.add_row("note", plan.note)
        console.print(t)

    emit(state, payload, render)


MethodOption = Annotated[
    str | None,
    typer.Option(
        "--method", help="basic, adaptive or weighted bit pushing (default: the library's, basic)."
    ),
]
HighOption = Annotated[float, typer.Option("--high", help="Declared upper bound of the values.")]
BitDepthOption = Annotated[
    int | None,
    typer.Option("--bit-depth", help="Bits of the codes (default: what the range needs)."),
]
DeltaOption = Annotated[float, typer.Option("--delta", help="Total delta, in (0, 1).")]
BitsPerClientOption = Annotated[
    int, typer.Option("--bits-per-client", help="Bits each client reports (>= 1).")
]


def _bit_pushing_command(statistic: str, summary: str) -> Callable[..., None]:
    """The ``plan mean`` or ``plan variance`` command: it plans bit pushing's ``statistic``, prints it.

    Both have the same options, but only ``variance`` has ``--mean-fraction``. Exactly one of
    ``--clients``/``--epsilon`` is given; the planner
    (:func:`~fedstats.analyses.bitpushing.planning.plan_mean` or ``plan_variance``) solves for the other
    (a :class:`~fedstats.errors.ParameterError` otherwise, or as the planner); ``--method`` unset is the
    library's default method.
    """

    def command(
        ctx: typer.Context,
        width: WidthOption,
        low: LowOption,
        high: HighOption,
        clients: ClientsOption = None,
        epsilon: EpsilonOption = None,
        confidence: ConfidenceOption = 0.95,
        resolution: ResolutionOption = 1.0,
        bit_depth: BitDepthOption = None,
        method: MethodOption = None,
        bits_per_client: BitsPerClientOption = 1,
        mean_fraction: MeanFractionOption = 0.2,
        json_flag: JsonOption = False,
    ) -> None:
        from fedstats.analyses.bitpushing import planning

        _one_unknown(clients, epsilon)
        options: dict[str, Any] = {"low": low, "high": high, "confidence": confidence}
        options |= {"resolution": resolution, "bit_depth": bit_depth}
        options["bits_per_client"] = bits_per_client
        if statistic == "variance":
            options["mean_fraction"] = mean_fraction
        planner = planning.plan_mean if statistic == "mean" else planning.plan_variance
        method = method or planning.DEFAULT_METHOD
        plan = planner(width, n_clients=clients, epsilon=epsilon, method=method, **options)
        _emit(ctx, plan, json_flag)

    command.__doc__ = summary
    return command if statistic == "variance" else drop_option(command, "mean_fraction")


mean = plan_app.command("mean")(
    _bit_pushing_command(
        "mean",
        "Clients or epsilon for a bit-pushing mean's interval of the given width (bit means at 1/2).",
    )
)
variance = plan_app.command("variance")(
    _bit_pushing_command(
        "variance",
        "Clients or epsilon for a bit-pushing variance's interval of the given width (squared units).",
    )
)


@plan_app.command("gap")
def gap(
    ctx: typer.Context,
    width: Annotated[
        float | None, typer.Option("--width", help="Target width of the gap's interval (> 0).")
    ] = None,
    clients: ClientsOption = None,
    epsilon: EpsilonOption = None,
    mechanism: Annotated[str, typer.Option("--mechanism", "-m", help="R or L.")] = "R",
    confidence: ConfidenceOption = 0.95,
    accounting: Annotated[str, typer.Option("--accounting", help="exact or paper.")] = "exact",
    fractions: FractionsOption = None,
    scale: Annotated[
        str, typer.Option("--scale", help="signed ([-1, 1] values) or rate ([0, 1] rates).")
    ] = "signed",
    alpha: Annotated[
        float | None,
        typer.Option("--alpha", help="Instead of --width: error target (gap-plan's question)."),
    ] = None,
    probability: Annotated[
        float, typer.Option("--probability", help="With --alpha: P(error < alpha).")
    ] = 0.99,
    bound: Annotated[
        str, typer.Option("--bound", help="With --alpha: chebyshev, bernstein or normal.")
    ] = "chebyshev",
    json_flag: JsonOption = False,
) -> None:
    """Clients or epsilon for the gap's interval width; with --alpha, gap-plan's smallest epsilon."""
    if alpha is not None:
        if width is not None or epsilon is not None or clients is None:
            raise ParameterError(
                "--alpha", alpha, "with --clients, and without --width or --epsilon"
            )
        from fedstats.cli.gap import gap_plan

        gap_plan(
            ctx,
            clients,
            alpha,
            probability,
            mechanism,
            accounting,
            bound,
            scale,
            fractions,
            json_flag,
        )
        return
    if width is None:
        raise ParameterError("--width", None, "a target width > 0 (or --alpha)")
    from fedstats.analyses.performance_gap.planning import plan_gap

    _one_unknown(clients, epsilon)
    fr = _floats(fractions, "--fractions")
    plan = plan_gap(
        width,
        n_clients=clients,
        epsilon=epsilon,
        mechanism=mechanism,
        confidence=confidence,
        accounting=accounting,
        fractions=None if fr is None else tuple(fr),
        scale=scale,
    )
    _emit(ctx, plan, json_flag)


def _floats(text: str | None, flag: str) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise ParameterError(flag, text, "comma-separated numbers") from None


@plan_app.command("chi2")
def chi2(
    ctx: typer.Context,
    rows: Annotated[int, typer.Option("--rows", help="Categories of the first column (>= 2).")] = 2,
    cols: Annotated[
        int, typer.Option("--cols", help="Categories of the second column (>= 2).")
    ] = 2,
    effect: Annotated[
        float,
        typer.Option("--effect", help="Cohen's w to detect (0.1 small, 0.3 medium, 0.5 large)."),
    ] = 0.3,
    power_target: Annotated[float, typer.Option("--power", help="Target power, in (0, 1).")] = 0.8,
    clients: ClientsOption = None,
    epsilon: EpsilonOption = None,
    delta: DeltaOption = 1e-6,
    records_per_client: Annotated[
        int,
        typer.Option("--records-per-client", help="Declared most records one client holds (T)."),
    ] = 1,
    encoding_size: Annotated[
        int, typer.Option("--encoding-size", help="Projection length l (>= 2).")
    ] = 50,
    level: LevelOption = 0.05,
    row_margins: Annotated[
        str | None, typer.Option("--row-margins", help="Expected row proportions 'p1,p2,...'.")
    ] = None,
    col_margins: Annotated[
        str | None, typer.Option("--col-margins", help="Expected column proportions.")
    ] = None,
    no_privacy: Annotated[
        bool, typer.Option("--no-privacy", help="Without DP noise (solve for the clients).")
    ] = False,
    json_flag: JsonOption = False,
) -> None:
    """Clients or epsilon for FED-chi^2 to reach a power at Cohen's w (default medium, 0.3)."""
    from fedstats.analyses.chi2.planning import plan_chi2

    if not no_privacy:
        _one_unknown(clients, epsilon)
    elif clients is not None or epsilon is not None:
        raise ParameterError("--no-privacy", True, "without --clients or --epsilon")
    plan = plan_chi2(
        effect=effect,
        power_target=power_target,
        shape=(rows, cols),
        n_clients=clients,
        epsilon=epsilon,
        delta=delta,
        records_per_client=records_per_client,
        row_margins=_floats(row_margins, "--row-margins"),
        col_margins=_floats(col_margins, "--col-margins"),
        encoding_size=encoding_size,
        level=level,
        private=not no_privacy,
    )
    _emit(ctx, plan, json_flag)


@plan_app.command("entropy")
def entropy(
    ctx: typer.Context,
    width: Annotated[float, typer.Option("--width", help="Target interval width in nats (> 0).")],
    m: Annotated[int, typer.Option("--categories", help="Categories m, in [2, 10000].")],
    probabilities: Annotated[
        str | None,
        typer.Option("--probabilities", help="Expected proportions 'p1,...,pm' (default uniform)."),
    ] = None,
    confidence: ConfidenceOption = 0.95,
    fd_step: FdStepOption = 0.05,
    json_flag: JsonOption = False,
) -> None:
    """Encoding size for FED-H's entropy interval of the given width (no DP: clients do not matter)."""
    from fedstats.analyses.entropy.planning import plan_entropy

    plan = plan_entropy(
        width,
        m=m,
        probabilities=_floats(probabilities, "--probabilities"),
        confidence=confidence,
        fd_step=fd_step,
    )
    _emit(ctx, plan, json_flag)


@plan_app.command("heterogeneity")
def heterogeneity(
    ctx: typer.Context,
    width: Annotated[
        float, typer.Option("--width", help="Target width of the dispersion's interval (> 0).")
    ],
    dim: Annotated[int, typer.Option("--dim", help="Vector length d (>= 1).")],
    clients: ClientsOption = None,
    epsilon: EpsilonOption = None,
    delta: DeltaOption = 1e-6,
    noise: Annotated[
        str, typer.Option("--noise", help="central, distributed or aggregators.")
    ] = "central",
    accounting: Annotated[str, typer.Option("--accounting", help="basic or zcdp.")] = "basic",
    confidence: ConfidenceOption = 0.95,
    json_flag: JsonOption = False,
) -> None:
    """Clients or epsilon for the heterogeneity dispersion's interval of the given width."""
    from fedstats.analyses.heterogeneity.config import HeterogeneityConfig
    from fedstats.analyses.heterogeneity.planning import plan_heterogeneity

    _one_unknown(clients, epsilon)
    options: dict[str, Any] = {"noise": noise, "confidence": confidence}
    if accounting != HeterogeneityConfig.accounting:
        options["accounting"] = accounting
    plan = plan_heterogeneity(
        width, dim=dim, n_clients=clients, epsilon=epsilon, delta=delta, **options
    )
    _emit(ctx, plan, json_flag)


def register(app: typer.Typer) -> None:
    """Add ``plan`` (a group of subcommands) to the app."""
    app.add_typer(plan_app, name="plan")
