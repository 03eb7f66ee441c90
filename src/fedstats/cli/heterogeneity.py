"""``fedstats heterogeneity DATA``: private dispersion, Cochran's Q and I^2 of image vectors (paper 000)."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fedstats.analyses.heterogeneity.config import HeterogeneityConfig
from fedstats.cli._common import (
    JsonOption,
    SeedOption,
    check_applies,
    check_route_options,
    emit,
    fmt_value,
    report_warnings,
    state_from,
)
from fedstats.cli._options import EngineOptions, route_options
from fedstats.errors import ParameterError

if TYPE_CHECKING:  # imported where used: ``--help`` loads neither rich, pandas nor the analysis
    from rich.console import Console

_DEFAULT = HeterogeneityConfig  # the options' defaults are the config's (one default per option)


def _route_options(backend: str, *, dropout: float) -> dict[str, Any]:
    """Return the secure route's dropout option (none off it).

    Raises
    ------
    ParameterError
        ``dropout`` > 0 off the secure route.
    """
    if not dropout:
        return {}
    if backend != "secure":
        raise ParameterError("dropout", dropout, "0 unless --backend secure (or --secure)")
    return {"dropout": dropout}


@route_options
def heterogeneity_command(
    ctx: typer.Context,
    data: Annotated[
        str,
        typer.Argument(
            help="'digits' (embedded), an IDX images file, a CIFAR batch/directory, a CSV or a Parquet file."
        ),
    ],
    label_ratio: Annotated[
        str | None,
        typer.Option(
            "--label-ratio",
            help="Sample clients so labels 0..k-1 follow this ratio, e.g. 91:1:1:1:1:1:1:1:1:1.",
        ),
    ] = None,
    sample_fraction: Annotated[
        float | None,
        typer.Option(
            "--sample-fraction",
            help="Sample size as a fraction of the rows (paper: 0.02); default: the largest sample "
            "the ratio allows, or every row without a ratio.",
        ),
    ] = None,
    statistic: Annotated[
        str, typer.Option("--statistic", help="dispersion, q, i2 or all.")
    ] = _DEFAULT.statistic,
    mechanism: Annotated[
        str, typer.Option("--mechanism", help="Gaussian calibration: analytic or classical.")
    ] = _DEFAULT.mechanism,
    accounting: Annotated[
        str | None,
        typer.Option(
            "--accounting",
            help="zcdp (spends the whole budget; default with the analytic calibration) or basic "
            "(split epsilon/delta between rounds, the paper's; default with --mechanism classical).",
        ),
    ] = _DEFAULT.accounting,
    noise: Annotated[
        str, typer.Option("--noise", help="central (after the sum) or distributed (client shares).")
    ] = _DEFAULT.noise,
    epsilon: Annotated[
        float | None, typer.Option("--epsilon", help="Total epsilon of both rounds.")
    ] = None,
    delta: Annotated[float | None, typer.Option("--delta", help="Total delta, in (0, 1).")] = None,
    no_privacy: Annotated[
        bool, typer.Option("--no-privacy", help="Exact sums through the engine, no noise.")
    ] = False,
    secure: Annotated[
        bool,
        typer.Option(
            "--secure",
            help="Secure aggregation route with distributed discrete Gaussian shares (implies "
            "--noise distributed --backend secure).",
        ),
    ] = False,
    min_variance: Annotated[
        float,
        typer.Option(
            "--min-variance", help="Public floor on within-vector variance (weights <= 1/floor)."
        ),
    ] = _DEFAULT.min_variance,
    p: Annotated[float, typer.Option("--p", help="Dispersion exponent, >= 1.")] = _DEFAULT.p,
    round1_fraction: Annotated[
        float, typer.Option("--round1-fraction", help="Budget share of round 1.")
    ] = _DEFAULT.round1_fraction,
    form: Annotated[
        str,
        typer.Option("--weighted-mean", help="standard, or paper (Def. 3.5's extra 1/n)."),
    ] = _DEFAULT.form,
    dropout: Annotated[
        float,
        typer.Option(
            "--dropout",
            help="Secure route only: probability that a client drops out (simulation).",
        ),
    ] = 0.0,
    min_reporting: Annotated[
        float,
        typer.Option(
            "--min-reporting",
            help="Distributed noise: calibrate shares so privacy holds if this fraction reports.",
        ),
    ] = _DEFAULT.min_reporting,
    pixel_max: Annotated[
        float | None,
        typer.Option(
            "--pixel-max", help="Divide pixels by this (default 255 for IDX/CIFAR, 1 CSV/Parquet)."
        ),
    ] = None,
    json_flag: JsonOption = False,
    seed: SeedOption = None,
    engine_options: EngineOptions = EngineOptions("serial"),
) -> None:
    """Measure statistical heterogeneity of clients' image vectors with differential privacy."""
    from fedstats.analyses.heterogeneity.api import (
        heterogeneity_block_size,
        heterogeneity_from_config,
    )
    from fedstats.privacy.ledger import PrivacyLedger

    state = state_from(ctx, json_flag=json_flag, seed=seed)
    _check_privacy_options(ctx, no_privacy, epsilon, delta, secure, noise)
    engine_options, noise, route_options = _route(
        ctx, engine_options, secure=secure, noise=noise, dropout=dropout
    )
    config = HeterogeneityConfig(  # validated here, before any data is read
        statistic=statistic,
        epsilon=epsilon,
        delta=delta,
        mechanism=mechanism,
        noise=noise,
        secure=secure,
        accounting=accounting,
        round1_fraction=round1_fraction,
        p=p,
        min_variance=min_variance,
        form=form,
        min_reporting=min_reporting,
    )
    if sample_fraction is not None and not 0.0 < sample_fraction <= 1.0:
        raise ParameterError("sample_fraction", sample_fraction, "a value in (0, 1]")
    randomness = state.randomness
    x, name = _load_sample(data, pixel_max, label_ratio, sample_fraction, randomness)
    ledger = PrivacyLedger(epsilon_budget=epsilon, delta_budget=delta) if epsilon else None
    with engine_options.session(state, **route_options) as engine:
        # the API's block size: the same seed and options give the Python API's result
        engine.block_size = heterogeneity_block_size(int(x.shape[1]))
        res = heterogeneity_from_config(
            x, config, engine=engine, randomness=randomness, ledger=ledger
        )
    payload: dict[str, Any] = {
        "dataset": name,
        "label_ratio": label_ratio,
        "dim": int(x.shape[1]),
        "backend": engine_options.backend,
        **res.to_dict(),
        "ledger": ledger.as_dict() if ledger is not None else None,
        "seed": state.seed,
    }
    report_warnings(state, payload, res)
    emit(state, payload, functools.partial(_render, res, payload, epsilon, delta))


def _route(
    ctx: typer.Context, engine_options: EngineOptions, *, secure: bool, noise: str, dropout: float
) -> tuple[EngineOptions, str, dict[str, Any]]:
    """The route, the noise and the secure route's options; ``--secure`` implies distributed noise."""
    backend = engine_options.backend
    if secure:
        noise = "distributed"
        if backend == "serial":
            backend = "secure"
    route_options = _route_options(backend, dropout=dropout)
    check_route_options(ctx, backend)
    return replace(engine_options, backend=backend), noise, route_options


def _check_privacy_options(
    ctx: typer.Context,
    no_privacy: bool,
    epsilon: float | None,
    delta: float | None,
    secure: bool,
    noise: str,
) -> None:
    """Refuse a missing or doubled privacy choice and noise options that do not apply."""
    if no_privacy and (epsilon is not None or delta is not None):
        raise ParameterError("no_privacy", True, "not together with --epsilon/--delta")
    if not no_privacy and (epsilon is None or delta is None):
        raise ParameterError(
            "--epsilon/--delta", (epsilon, delta), "both given, or --no-privacy for exact sums"
        )
    for name in ("mechanism", "accounting", "noise", "round1_fraction", "min_reporting"):
        check_applies(ctx, name, not no_privacy, "unset with --no-privacy (exact sums, no noise)")
    check_applies(ctx, "noise", not secure, "unset with --secure (it implies --noise distributed)")
    if noise not in (
        "central",
        "distributed",
    ):  # "aggregators" needs the Prio3 route (library only)
        raise ParameterError(
            "--noise",
            noise,
            "central or distributed (the aggregators' noise needs the Prio3 route)",
        )


def _load_sample(
    data: str,
    pixel_max: float | None,
    label_ratio: str | None,
    sample_fraction: float | None,
    randomness: Any,
) -> tuple[Any, str]:
    """The image vectors of ``data`` (rows sampled by label ratio or fraction) and the data's name."""
    from fedstats.experiments.heterogeneity_data import load_image_vectors, sample_by_label_ratio

    x, labels, name = load_image_vectors(data, pixel_max=pixel_max)
    if label_ratio is not None:
        if labels is None:
            raise ParameterError("label_ratio", label_ratio, "data with labels")
        rows = sample_by_label_ratio(
            labels,
            label_ratio,
            fraction=sample_fraction,
            rng=randomness.generator("server", "heterogeneity", "sample"),
        )
        x = x[rows]
    elif sample_fraction is not None:
        rng = randomness.generator("server", "heterogeneity", "sample")
        k = max(2, round(sample_fraction * x.shape[0]))
        x = x[sorted(rng.choice(x.shape[0], size=k, replace=False).tolist())]
    return x, name


def _render(
    res: Any,
    payload: dict[str, Any],
    epsilon: float | None,
    delta: float | None,
    console: Console,
) -> None:
    """The text output: one row a statistic, then the privacy spent, warnings and release note."""
    from rich.table import Table

    label_ratio = payload["label_ratio"]
    title = (
        f"heterogeneity of {payload['dataset']} ({res.n_clients} clients, d={payload['dim']}"
        + (f", labels {label_ratio}" if label_ratio else "")
        + ")"
    )
    table = Table(title=title)
    for col in ("statistic", "estimate", f"{res.confidence:.0%} interval", "exact", "error"):
        table.add_column(col)
    for st in (res.dispersion, res.q, res.i2):
        if st is not None:
            table.add_row(
                st.name,
                fmt_value(st.estimate),
                fmt_value(st.interval),
                fmt_value(st.truth),
                fmt_value(st.error),
            )
    console.print(table)
    if epsilon is not None:
        console.print(
            f"privacy: epsilon={epsilon:g}, delta={delta:g} over 2 rounds "
            f"({res.mechanism}, {res.noise} noise, route {payload['backend']}); achieved epsilon "
            f"{res.details.get('epsilon_achieved', float('nan')):.4g} with "
            f"{', '.join(str(r['clients_summed']) for r in res.rounds)} clients summed"
        )
    else:
        console.print("not private (--no-privacy): exact sums")
    if "warning" in res.details:
        console.print(f"[yellow]warning: {res.details['warning']}[/yellow]")
    if res.release_note:
        console.print(f"[dim]{res.release_note}[/dim]")


def register(app: typer.Typer) -> None:
    """Add ``heterogeneity`` to the app."""
    app.command("heterogeneity")(heterogeneity_command)
