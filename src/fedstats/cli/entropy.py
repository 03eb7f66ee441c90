"""``fedstats entropy``: FED-H, the Shannon entropy of a categorical column (Pang et al., ICML 2023).

Every client holds the histogram of its rows of ``--column``; the clients are chosen as for ``chi2``
(:mod:`fedstats.cli._tables`). The JSON output holds ``entropy``, ``ci``, ``exact_entropy`` and
``additive_error``; the entropy and its interval are the library's, clipped to ``[0, log m]`` there
(``details["unclipped_estimate"]`` keeps the decoder's value).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fedstats.cli import _tables as _t
from fedstats.cli._common import (
    DataDirOption,
    JsonOption,
    SeedOption,
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
    FdStepOption,
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
from fedstats.errors import DataError, ParameterError

if TYPE_CHECKING:  # imported where used: ``--help`` loads neither rich nor pandas
    from rich.console import Console

__all__ = ["MIN_FD_STEP", "register"]

MIN_FD_STEP = 1e-6
"""Smallest ``--fd-step``: at 1e-8 the FED-H difference quotient is already dominated by rounding."""


@route_options
def entropy(
    ctx: typer.Context,
    data: DataArgument,
    column: Annotated[str, typer.Option("--column", help="Categorical column.")],
    client_column: ClientColumnOption = None,
    clients: ClientsOption = None,
    encoding_size: Annotated[
        int, typer.Option("--encoding-size", help="l of each of the two projections (>= 2).")
    ] = 1000,
    fd_step: FdStepOption = 0.05,
    coupling: Annotated[
        str, typer.Option("--coupling", help="coupled (default, one seed) or independent.")
    ] = "coupled",
    confidence: ConfidenceOption = 0.95,
    bits: BitsOption = 64,
    count_column: CountColumnOption = None,
    split: SplitOption = None,
    secure: SecureOption = None,
    engine_options: EngineOptions = EngineOptions("auto"),
    json_flag: JsonOption = False,
    seed: SeedOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Secure federated Shannon entropy (nats) of a categorical column (FED-H)."""
    from fedstats.analyses.entropy import fed_entropy

    state = state_from(ctx, json_flag=json_flag, seed=seed, data_dir=data_dir)
    if encoding_size < 2:
        raise ParameterError("--encoding-size", encoding_size, "an integer >= 2")
    if not MIN_FD_STEP <= fd_step <= 0.5:
        raise ParameterError(
            "--fd-step",
            fd_step,
            f"a step in [{MIN_FD_STEP:g}, 0.5] (below {MIN_FD_STEP:g} the finite difference loses its "
            "digits to rounding)",
        )
    df, weights, assign, n = _t.client_frame(
        data, split, {"--column": column}, client_column=client_column, clients=clients,
        count_column=count_column, state=state,
    )  # fmt: skip
    hist = _t.tables(df, (column,), assign, n, weights)
    m = hist.shape[1]
    if m < 2:
        raise DataError(f"column {column!r} has a single category: its entropy is 0")
    _t.check_projection_memory(encoding_size, m, n, projections=2)  # f_+ and f_-
    route = _t.route(secure, engine_options.backend, n)
    check_route_options(ctx, route)
    with replace(engine_options, backend=route).session(state) as engine:
        res = fed_entropy(
            hist,
            encoding_size=encoding_size,
            fd_step=fd_step,
            coupling=coupling,
            bits=bits,
            engine=engine,
            randomness=state.randomness,
            confidence=confidence,
        )
    out = res.to_dict()
    payload: dict[str, Any] = {
        "entropy": res.entropy,
        "ci": out.pop("ci"),
        "exact_entropy": res.exact_entropy,
        "additive_error": out.pop("additive_error"),
        "bias_bound": out.pop("bias_bound"),
        "dataset": data,
        "column": column,
        "n_categories": m,
        "route": route,
        "privacy": _t.NO_DP_NOTE,
        **{k: v for k, v in out.items() if k != "details"},
        "details": _t.lean(out.get("details", {})),
    }

    def render(console: Console) -> None:
        ci = payload["ci"]
        rows = [
            ("entropy", f"{payload['entropy']:.6g}"),
            (f"{100 * confidence:g}% interval", f"[{ci[0]:.6g}, {ci[1]:.6g}]"),
            ("exact entropy (simulation)", f"{payload['exact_entropy']:.6g}"),
            ("additive error", f"{payload['additive_error']:.4g}"),
            ("finite-difference bias bound", f"{payload['bias_bound']:.4g}"),
            ("categories / clients", f"{m} / {payload['n_clients']} ({route})"),
            ("bytes per client", str(payload["bytes_per_client"])),
            ("log of the number of categories (max entropy)", f"{math.log(m):.4g} nats"),
        ]
        title = f"FED-H: entropy of {column} ({data}), nats"
        print_rows(console, title, rows, f"privacy: {_t.NO_DP_NOTE}", release_line(payload))

    # the library's warnings: it clipped to [0, log m] (post-processing), once, for all
    release(state, payload, res, render, res.warnings)


def register(app: typer.Typer) -> None:
    """Add ``entropy`` to the app."""
    app.command("entropy")(entropy)
