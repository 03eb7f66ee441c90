"""``fedstats mean`` and ``fedstats variance``: bit pushing (Cormode & Markov 2021) and its baselines.

Both read one numeric column of a dataset (a registered name such as ``adult``, or a CSV/Parquet file),
declare its range (``--low``/``--high``, or ``--bit-depth`` for b-bit integers), and estimate the mean (or the
variance) over the rows as clients, or over ``--clients N`` clients resampled from the rows, with any
protocol: ``basic`` (the default of :class:`~fedstats.analyses.bitpushing.config.BitPushingMeanConfig`),
``adaptive``, ``weighted`` bit pushing, or the baselines ``dithering``, ``piecewise``, ``duchi``,
``laplace``. The JSON output holds ``estimate``, ``ci``, ``standard_error``,
``bits_per_client``, ``epsilon``, and, since the data is at hand (simulation), ``truth`` and ``error``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fedstats.cli._common import (
    AllowLongOption,
    CliState,
    DataDirOption,
    JsonOption,
    SeedOption,
    add_warning,
    check_applies,
    check_route_options,
    flag_for,
    print_rows,
    release,
    release_line,
    state_from,
    warn_duration,
)
from fedstats.cli._options import (
    ConfidenceOption,
    DataArgument,
    EngineOptions,
    LowOption,
    MeanFractionOption,
    ResolutionOption,
    SplitOption,
    drop_option,
    route_options,
)
from fedstats.errors import DataError, ParameterError

if (
    TYPE_CHECKING
):  # imported where used: ``fedstats mean --help`` loads neither numpy nor the analysis
    import numpy as np
    from rich.console import Console

    from fedstats.analyses.bitpushing.encoding import BitEncoding

__all__ = ["MAX_ABS_VALUE", "load_column", "register"]

MAX_ABS_VALUE = 1e150
"""Largest magnitude of a value read by ``mean``/``variance`` (its square must stay finite)."""


def load_column(data: str, column: str, data_dir: Path | None, split: str | None) -> np.ndarray:
    """One numeric column of a registered dataset or a CSV/Parquet file, as float64 (finite).

    Raises
    ------
    ParameterError
        If the column does not exist or is not numbers (booleans, dates, times and text are refused).
    DataError
        If it is empty or has missing values.
    DatasetNotFoundError
        If ``data`` is neither a dataset name nor an existing file.
    """
    import numpy as np

    from fedstats.datasets._catalog import dataset_names

    if data == "adult" and data in dataset_names():
        from fedstats.datasets.loaders import ADULT_NUMERIC_COLUMNS, load_adult_column

        if column in ADULT_NUMERIC_COLUMNS:  # Adult's integer columns, without importing pandas
            return load_adult_column(column, split or "train", data_dir).astype(np.float64)

    from fedstats.cli._tables import check_column, load_frame, numeric_values

    df = load_frame(data, data_dir, split)
    check_column(df, "--column", column, data)
    values = numeric_values(df, "--column", column)
    if not np.isfinite(values).all():
        raise DataError(f"column {column!r} has missing or infinite values")
    worst = float(np.max(np.abs(values)))
    if worst > MAX_ABS_VALUE:
        raise ParameterError(
            "--column",
            column,
            f"values of magnitude at most {MAX_ABS_VALUE:g} (found {worst:g}: its square, needed for "
            "the exact mean and variance of the simulation, overflows)",
        )
    return values


def _encoding(
    low: float, high: float | None, bit_depth: int | None, resolution: float, out_of_range: str
) -> BitEncoding:
    from fedstats.analyses.bitpushing.encoding import BitEncoding

    if high is None:
        if bit_depth is None:
            raise ParameterError("--high", None, "a declared upper bound (or give --bit-depth)")
        if not 1 <= bit_depth <= 52:
            raise ParameterError("--bit-depth", bit_depth, "an integer in [1, 52]")
        high = low + (2**bit_depth - 1) * resolution
    return BitEncoding(
        low, high, resolution=resolution, bit_depth=bit_depth, out_of_range=out_of_range
    )


def check_protocol_options(
    ctx: typer.Context, method: str, takes: tuple[str, ...], options: dict[str, Any]
) -> None:
    """Refuse an option given on the command line that ``--protocol method`` does not take.

    Parameters
    ----------
    ctx : typer.Context
        The running command's context (which options the user gave, and their flags).
    method : str
        The protocol, one of :data:`~fedstats.analyses.bitpushing.methods.METHODS`.
    takes : tuple of str
        The options it takes (:func:`~fedstats.analyses.bitpushing.methods.options_of`).
    options : dict
        The protocol options of the command by their library names (``alpha`` is
        ``--weight-exponent``); ``mean_fraction`` (variance) applies to every protocol.

    Raises
    ------
    ParameterError
        Naming the option's flag and the protocol, with the flags the protocol takes.
    """
    flags = [flag_for(ctx.command, name) or name for name in options if name in takes]
    for name in options:
        if name == "mean_fraction":
            continue
        check_applies(
            ctx,
            name,
            name in takes,
            f"unset with --protocol {method} (it takes "
            + (", ".join(flags) if flags else "none of the protocol options")
            + ")",
        )


def _run(
    kind: str,
    ctx: typer.Context,
    *,
    data: str,
    column: str,
    method: str | None,
    epsilon: float | None,
    no_privacy: bool,
    bit_depth: int | None,
    low: float,
    high: float | None,
    resolution: float,
    out_of_range: str,
    clients: int | None,
    split: str | None,
    options: dict[str, Any],
    confidence: float,
    route: EngineOptions,
    allow_long: bool,
    json_flag: bool,
    seed: int | None,
    data_dir: Path | None,
) -> None:
    from fedstats.analyses.bitpushing.api import mean as bitpushing_mean
    from fedstats.analyses.bitpushing.api import variance as bitpushing_variance
    from fedstats.engine import Population, ResampledPopulation

    state: CliState = state_from(ctx, json_flag=json_flag, seed=seed, data_dir=data_dir)
    method = _check_options(ctx, method, options, route, confidence, epsilon, no_privacy)
    if bit_depth is not None and bit_depth < 1:
        raise ParameterError("--bit-depth", bit_depth, "an integer >= 1")
    enc = _encoding(low, high, bit_depth, resolution, out_of_range)
    values = load_column(data, column, state.data_dir, split)
    pop: Any = values
    if clients is not None:
        if clients < 1:
            raise ParameterError("--clients", clients, "an integer >= 1")
        pop = ResampledPopulation({column: values}, clients)
    # only the options the user gave: the library refuses options a method does not use
    given = {k: v for k, v in options.items() if v is not None}
    run: Callable[..., Any] = functools.partial(
        bitpushing_mean if kind == "mean" else bitpushing_variance,
        method=method,
        column=column,
        epsilon=epsilon,
        no_privacy=no_privacy,
        **given,
    )
    if clients is not None:
        warn_duration(
            state,
            clients,
            backend=route.backend,
            workers=route.workers,
            probe=functools.partial(
                _probe, run, functools.partial(ResampledPopulation, {column: values}), enc
            ),
            key=f"{kind} {method}",
            allow_long=allow_long,
        )
    with route.session(state) as engine:
        shuffle = not isinstance(pop, Population)
        try:
            result: Any = run(pop, enc, engine=engine, confidence=confidence, shuffle=shuffle)
        except DataError as exc:  # the library names its parameter; say the flag
            raise DataError(
                str(exc).replace("out_of_range='clip'", "--out-of-range clip")
            ) from None
    out = result.to_dict()
    details = out.pop("details")
    payload = {
        **out,
        "protocol": method,
        "dataset": data,
        "column": column,
        "low": enc.low,
        "high": enc.high,
        "resolution": enc.resolution,
        "details": {k: v for k, v in details.items() if k not in ("mean_stage", "variance_stage")},
    }
    clipped = payload["details"].get("clipped_estimate")
    if clipped is not None and clipped != payload["estimate"]:  # outside the parameter space
        add_warning(
            state,
            payload,
            f"the {kind} estimate {payload['estimate']:.6g} is outside the parameter space "
            f"[{payload['details']['parameter_space'][0]:.6g}, "
            f"{payload['details']['parameter_space'][1]:.6g}]: it is released unclipped because "
            f"it is unbiased; clipped (post-processing, lower error, biased) it is {clipped:.6g} "
            "(details.clipped_estimate)",
        )
    release(state, payload, result, functools.partial(_render, payload, kind, epsilon))


def _check_options(
    ctx: typer.Context,
    method: str | None,
    options: dict[str, Any],
    route: EngineOptions,
    confidence: float,
    epsilon: float | None,
    no_privacy: bool,
) -> str:
    """The protocol (the library's default when None), after refusing options out of range or unused.

    Checked before the duration estimate and the data scan of a long run.
    """
    from fedstats._validation import check_real
    from fedstats.analyses.bitpushing.api import check_privacy_choice
    from fedstats.analyses.bitpushing.config import BitPushingMeanConfig
    from fedstats.analyses.bitpushing.methods import METHODS, options_of

    if method is None:  # the library's one default
        method = BitPushingMeanConfig.method
    if method not in METHODS:
        raise ParameterError("--protocol", method, "one of " + ", ".join(METHODS))
    check_protocol_options(ctx, method, options_of(method), options)
    check_route_options(ctx, route.backend)
    check_real("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    if epsilon is not None and not epsilon > 0:
        raise ParameterError("--epsilon", epsilon, "a real number > 0")
    check_privacy_choice(epsilon, no_privacy, cli=True)
    if options.get("alpha") is not None and not 0.0 <= options["alpha"] <= 8.0:
        raise ParameterError(
            "--weight-exponent",
            options["alpha"],
            "a real number in [0, 8] (weights p_j ~ 2^(alpha j))",
        )
    return method


def _probe(run: Any, population: Any, enc: Any, n: int) -> object:
    """The duration probe: the run on ``n`` resampled clients and a serial engine (seeded)."""
    from fedstats.engine import Engine
    from fedstats.randomness import RandomSource

    return run(population(n), enc, engine=Engine(randomness=RandomSource(0)))


def _render(payload: dict[str, Any], kind: str, epsilon: float | None, console: Console) -> None:
    """The text output: one table of the estimate, its interval, the truth and what was disclosed."""
    title = f"{kind} of {payload['column']} ({payload['dataset']}) by {payload['protocol']}"
    rows = [
        ("estimate", f"{payload['estimate']:.6g}"),
        ("confidence interval", f"[{payload['ci'][0]:.6g}, {payload['ci'][1]:.6g}]"),
        ("true value (simulation)", f"{payload['truth']:.6g}"),
        ("error", f"{payload['error']:+.4g}"),
        ("clients", str(payload["n_clients"])),
        ("clipped to the declared range", str(payload.get("n_clipped"))),
        ("bits disclosed per client", str(payload["bits_per_client"])),
        (
            "privacy",
            "NOT PRIVATE (--no-privacy: no DP noise)"
            if epsilon is None
            else f"epsilon={epsilon:g} (local DP)",
        ),
        ("bit depth", str(payload["bit_depth"])),
    ]
    print_rows(console, title, rows, release_line(payload))


ColumnOpt = Annotated[
    str, typer.Option("--column", "-c", help="Numeric column (one value per client).")
]
ProtocolOpt = Annotated[
    str | None,
    typer.Option(
        "--protocol",
        "-p",
        help="basic, adaptive, weighted, dithering, piecewise, duchi or laplace (default: the "
        "library's, one-round basic; docs/bitpushing.md says why).",
    ),
]
EpsilonOpt = Annotated[
    float | None,
    typer.Option(
        "--epsilon",
        "-e",
        help="Local DP epsilon per client (> 0). A privacy choice is required: this or --no-privacy.",
    ),
]
NoPrivacyOpt = Annotated[
    bool,
    typer.Option(
        "--no-privacy",
        help="Release a NON-private estimate (no DP noise); required when --epsilon is not given.",
    ),
]
BitsOpt = Annotated[
    int | None,
    typer.Option("--bit-depth", "-b", help="Bit depth b (default: fewest bits for the range)."),
]
BitsPerClientOpt = Annotated[
    int | None,
    typer.Option(
        "--bits-per-client", "-s", help="Bits each client sends (Corollary 2; default 1)."
    ),
]
HighOpt = Annotated[
    float | None,
    typer.Option(
        "--high",
        help="Declared upper bound (default with --bit-depth: low + (2^b - 1) resolution).",
    ),
]
OutOfRangeOpt = Annotated[
    str, typer.Option("--out-of-range", help="clip (and count) or refuse values outside the range.")
]
ClientsOpt = Annotated[
    int | None, typer.Option("--clients", "-n", help="Simulate N clients resampled from the rows.")
]
AllocationOpt = Annotated[
    str | None,
    typer.Option("--allocation", help="exact (quasi-Monte-Carlo, default) or random bit choice."),
]
Round1Opt = Annotated[
    float | None,
    typer.Option("--round1-fraction", help="Share of clients in round 1 (adaptive; default 1/3)."),
]
EstimatorOpt = Annotated[
    str | None,
    typer.Option(
        "--estimator",
        help="Adaptive estimator: split (default; unbiased under local DP) or pooled (the paper's "
        "Algorithm 2, biased low under local DP on skewed data; for reproductions).",
    ),
]
AlphaOpt = Annotated[
    float | None,
    typer.Option(
        "--weight-exponent",
        help="Weight exponent alpha of Algorithm 1 (weighted: p ~ 2^(alpha j); adaptive round 2).",
    ),
]
SquashOpt = Annotated[
    float | None,
    typer.Option(
        "--squash-threshold", help="Bit squashing threshold in units of the DP noise (e.g. 0.15)."
    ),
]


def _command(kind: str, summary: str) -> Callable[..., None]:
    """The ``mean`` or ``variance`` command (the same options; only ``variance`` has ``--mean-fraction``)."""

    @route_options
    def command(
        ctx: typer.Context,
        data: DataArgument,
        column: ColumnOpt,
        method: ProtocolOpt = None,
        epsilon: EpsilonOpt = None,
        no_privacy: NoPrivacyOpt = False,
        bit_depth: BitsOpt = None,
        bits_per_client: BitsPerClientOpt = None,
        low: LowOption = 0.0,
        high: HighOpt = None,
        resolution: ResolutionOption = 1.0,
        out_of_range: OutOfRangeOpt = "clip",
        clients: ClientsOpt = None,
        split: SplitOption = None,
        allocation: AllocationOpt = None,
        round1_fraction: Round1Opt = None,
        estimator: EstimatorOpt = None,
        alpha: AlphaOpt = None,
        squash_threshold: SquashOpt = None,
        mean_fraction: MeanFractionOption = 0.2,
        confidence: ConfidenceOption = 0.95,
        engine_options: EngineOptions = EngineOptions("serial"),
        allow_long: AllowLongOption = False,
        json_flag: JsonOption = False,
        seed: SeedOption = None,
        data_dir: DataDirOption = None,
    ) -> None:
        options = {
            "bits_per_client": bits_per_client,
            "allocation": allocation,
            "round1_fraction": round1_fraction,
            "estimator": estimator,
            "alpha": alpha,
            "squash_threshold": squash_threshold,
        }
        if kind == "variance":
            options["mean_fraction"] = mean_fraction
        _run(
            kind, ctx, data=data, column=column, method=method, epsilon=epsilon,
            no_privacy=no_privacy, bit_depth=bit_depth, low=low, high=high, resolution=resolution,
            out_of_range=out_of_range, clients=clients, split=split, options=options,
            confidence=confidence, route=engine_options, allow_long=allow_long,
            json_flag=json_flag, seed=seed, data_dir=data_dir,
        )  # fmt: skip

    command.__doc__ = summary
    return command if kind == "variance" else drop_option(command, "mean_fraction")


mean = _command(
    "mean",
    "Estimate the mean of a column by bit pushing (or a baseline), with CI and bits disclosed.",
)
variance = _command(
    "variance", "Estimate the variance of a column: a mean stage, then bit pushing of (x - mean)^2."
)


def register(app: typer.Typer) -> None:
    """Add ``mean`` and ``variance`` to the app."""
    app.command("mean")(mean)
    app.command("variance")(variance)
