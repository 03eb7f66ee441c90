"""``fedstats chi2`` and ``fedstats entropy``: FED-chi^2, the G-test and FED-H (Pang et al., ICML 2023).

Both read a registered dataset (``adult``, ``mushroom``, ...) or a CSV/Parquet file, give every client its
own contingency table (``chi2``: columns ``--x`` by ``--y``) or histogram (``entropy``: ``--column``), and
run the protocol through the engine. Clients are the values of ``--client-column`` or ``--clients N``
(rows spread uniformly at random over ``N`` clients; default 100, the paper's). ``--secure`` runs every
round through real secure aggregation; it is the default up to :data:`SECURE_DEFAULT_MAX_CLIENTS`
clients. The data is at hand, so the JSON output also holds the exact statistic and the realised error:
``statistic``, ``ci``, ``p_value``, ``dof``, ``exact_statistic``, ``multiplicative_error`` (``chi2``);
``entropy``, ``ci``, ``exact_entropy``, ``additive_error`` (``entropy``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from fedstats._resources import check_memory
from fedstats.cli._common import (
    BackendOption,
    CliState,
    DataDirOption,
    JsonOption,
    SchedulerOption,
    SeedOption,
    ShardSizeOption,
    WorkersOption,
    add_warning,
    check_interval,
    emit,
    engine_for,
    progress_for,
    state_from,
)
from fedstats.errors import DataError, ParameterError

__all__ = ["SECURE_DEFAULT_MAX_CLIENTS", "load_frame", "register"]

SECURE_DEFAULT_MAX_CLIENTS = 3000
"""Up to this many clients the commands use the secure route unless told otherwise."""

NO_DP_NOTE = (
    "no DP noise is added: secure aggregation hides each client's counts, but the released "
    "statistic is not differentially private"
)
"""What ``chi2`` and ``entropy`` say about privacy, in the text output and the JSON (``privacy``)."""

MIN_FD_STEP = 1e-6
"""Smallest ``--fd-step``: at 1e-8 the FED-H difference quotient is already dominated by rounding."""

_MAX_TABLE_ENTRIES = 50_000_000  # clients x cells held in memory before switching to the fast path

ClientColumnOption = Annotated[
    str | None,
    typer.Option(
        "--client-column", help="Column whose values are the clients (one table per value)."
    ),
]
ClientsOption = Annotated[
    int | None,
    typer.Option(
        "--clients", help="Spread the rows uniformly at random over N clients (default 100)."
    ),
]
SecureOption = Annotated[
    bool | None,
    typer.Option(
        "--secure/--no-secure",
        help=f"Real secure aggregation (default: on up to {SECURE_DEFAULT_MAX_CLIENTS} clients).",
    ),
]
BitsOption = Annotated[int, typer.Option("--bits", help="Field 2^bits of the sums: 16, 32 or 64.")]
SplitOption = Annotated[
    str | None, typer.Option("--split", help="Split of a registered dataset (e.g. train, test).")
]
CountColumnOption = Annotated[
    str | None,
    typer.Option(
        "--count-column",
        help="Column of non-negative integer counts: each row stands for that many records.",
    ),
]
ConfidenceOption = Annotated[
    float, typer.Option("--confidence", help="Level of the confidence interval.")
]


def load_frame(data: str, data_dir: Path | None, split: str | None) -> pd.DataFrame:
    """Load a registered dataset or a CSV/Parquet file as a DataFrame.

    Raises
    ------
    ParameterError
        If ``--split`` is given for a file, or the dataset is not a table.
    DatasetNotFoundError
        If ``data`` is neither a dataset name nor an existing file.
    """
    from fedstats.datasets import dataset_names, load_dataset
    from fedstats.datasets.readers import load_table

    if data in dataset_names():
        df = load_dataset(data, data_dir, **({"split": split} if split else {}))
    else:
        if split:
            raise ParameterError("--split", split, "only with a registered dataset name")
        df = load_table(data)
    if not isinstance(df, pd.DataFrame):
        raise ParameterError("DATA", data, "a tabular dataset (a DataFrame)")
    if df.shape[0] == 0:
        raise DataError(f"{data} has no rows")
    return df


def _check_column(df: pd.DataFrame, option: str, col: str, data: str) -> None:
    if col not in df.columns:
        cols = ", ".join(map(str, df.columns))
        raise ParameterError(option, col, f"a column of {data}: {cols}")


def _assignment(
    df: pd.DataFrame, data: str, client_column: str | None, clients: int | None, state: CliState
) -> tuple[np.ndarray, int]:
    from fedstats.datasets import iid_partition

    if client_column is not None and clients is not None:
        raise ParameterError("--clients", clients, "not together with --client-column")
    if client_column is not None:
        _check_column(df, "--client-column", client_column, data)
        return _codes(df, client_column)
    n = 100 if clients is None else clients
    if not 1 <= n <= df.shape[0]:
        raise ParameterError("--clients", n, f"an integer in [1, {df.shape[0]}] (rows of {data})")
    return iid_partition(df.shape[0], n, rng=state.randomness.child("cli", "clients")), n


def _codes(df: pd.DataFrame, col: str) -> tuple[np.ndarray, int]:
    codes, uniques = pd.factorize(df[col], sort=True)
    if (codes < 0).any():
        raise DataError(f"column {col!r} has missing values; recode them as a category")
    return np.asarray(codes, dtype=np.int64), len(uniques)


def _weights(df: pd.DataFrame, data: str, count_column: str | None) -> np.ndarray | None:
    """Per-row counts from ``--count-column`` (non-negative integers), or None (one record per row)."""
    if count_column is None:
        return None
    _check_column(df, "--count-column", count_column, data)
    try:
        w = np.asarray(df[count_column].to_numpy(), dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError("--count-column", count_column, "a numeric column") from None
    if not np.isfinite(w).all() or not np.array_equal(w, np.round(w)):
        raise DataError(f"column {count_column!r} must hold whole-number counts")
    if (w < 0).any():
        raise DataError(
            f"column {count_column!r} has a negative count (row {int(np.argmax(w < 0))})"
        )
    return w


def _tables(
    df: pd.DataFrame,
    cols: tuple[str, ...],
    assign: np.ndarray,
    n: int,
    weights: np.ndarray | None,
) -> np.ndarray:
    """Per-client count arrays ``(n, m_1, ..., m_k)`` of the columns ``cols`` (one bincount)."""
    flat = assign.astype(np.int64)
    shape = [n]
    for c in cols:
        codes, m = _codes(df, c)
        flat = flat * m + codes
        shape.append(m)
    size = int(np.prod(shape))
    counts = np.bincount(flat, weights=weights, minlength=size)
    return np.rint(counts).astype(np.int64).reshape(shape)


def _check_projection_memory(
    encoding_size: int, cells: int, n_clients: int, projections: int = 1
) -> None:
    """Refuse an ``--encoding-size`` whose projection and encodings cannot fit in memory.

    The server draws the ``l x cells`` projection (float64) and the clients' encodings are ``n x l``
    integers, held with their sum: about ``8 l (cells + 2 n)`` bytes, estimated before anything is
    allocated.
    """
    needed = 8.0 * projections * encoding_size * (cells + 2 * n_clients)
    check_memory(
        needed,
        parameter="--encoding-size",
        value=encoding_size,
        what=f"{projections} {encoding_size} x {cells} projection(s) and {n_clients} clients' "
        "encodings",
    )


def _clip_entropy(state: CliState, payload: dict[str, Any], m: int) -> None:
    """Clip the entropy and its interval to [0, log m] (post-processing) and say so when it moved."""
    top = math.log(m)
    raw = payload["entropy"]
    if raw is None or 0.0 <= raw <= top:
        clipped = False
    else:
        payload["entropy"] = min(max(raw, 0.0), top)
        if "estimate" in payload:
            payload["estimate"] = payload["entropy"]
        payload["details"]["unclipped_entropy"] = raw
        clipped = True
    ci = payload.get("ci")
    if ci and ci[0] is not None and ci[1] is not None:
        payload["ci"] = [min(max(c, 0.0), top) for c in ci]
    if clipped:
        if payload.get("exact_entropy") is not None:
            payload["additive_error"] = payload["entropy"] - payload["exact_entropy"]
            if "error" in payload:
                payload["error"] = payload["additive_error"]
        add_warning(
            state,
            payload,
            f"the entropy estimate {raw:.6g} was outside [0, log {m}] = [0, {top:.4g}] and is reported "
            "clipped (post-processing)",
        )


def _route(secure: bool | None, backend: str, n_clients: int) -> str:
    """Choose the route: ``--backend``, else secure aggregation up to the default size.

    Simulated ``--dropout`` (clients leaving before round 2) works on every route: on the secure route the
    dropped clients never join round 2's sessions.
    """
    if secure and backend not in ("auto", "secure"):
        raise ParameterError("--backend", backend, "'auto' or 'secure' together with --secure")
    if backend != "auto":
        return backend
    if secure is None:
        small = n_clients <= SECURE_DEFAULT_MAX_CLIENTS
        return "secure" if small else "serial"
    return "secure" if secure else "serial"


def _lean(details: dict[str, Any]) -> dict[str, Any]:
    drop = ("encoding", "encoding_plus", "encoding_minus", "joint_entropy")
    return {k: v for k, v in details.items() if k not in drop}


def chi2(
    ctx: typer.Context,
    data: Annotated[str, typer.Argument(help="Dataset name (e.g. adult) or a CSV/Parquet file.")],
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
    level: Annotated[float, typer.Option("--level", help="Significance level.")] = 0.05,
    confidence: ConfidenceOption = 0.95,
    bits: BitsOption = 64,
    drop_empty: Annotated[
        bool, typer.Option("--drop-empty", help="Drop rows/columns empty in the summed table.")
    ] = False,
    count_column: CountColumnOption = None,
    split: SplitOption = None,
    secure: SecureOption = None,
    backend: BackendOption = "auto",
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    shard_size: ShardSizeOption = 1 << 20,
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
    json_flag: JsonOption = False,
    seed: SeedOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Secure federated chi-square (or G) test of independence of two columns (FED-chi^2)."""
    from fedstats.analyses.chi2 import fed_chi2, simulate_fed_chi2
    from fedstats.analyses.entropy import fed_g_test

    state = state_from(ctx, json_flag=json_flag, seed=seed, data_dir=data_dir)
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
    df = load_frame(data, state.data_dir, split)
    _check_column(df, "--x", x, data)
    _check_column(df, "--y", y, data)
    weights = _weights(df, data, count_column)
    assign, n = _assignment(df, data, client_column, clients, state)
    cells = _codes(df, x)[1] * _codes(df, y)[1]
    big = n * cells > _MAX_TABLE_ENTRIES
    if big and (test != "chi2" or epsilon is not None):
        what = "--test g" if test != "chi2" else "--epsilon"
        raise ParameterError("--clients", n, f"at most {_MAX_TABLE_ENTRIES // cells} with {what}")
    _check_projection_memory(encoding_size, cells, 1 if big else n)
    # too many clients x cells to hold every client's table: the global table and the fast path
    tables = _tables(df, (x, y), np.zeros_like(assign) if big else assign, 1 if big else n, weights)
    route = _route(secure, backend, n)
    randomness = state.randomness
    common: dict[str, Any] = {"encoding_size": encoding_size, "level": level}
    common["confidence"] = confidence
    if big:
        res: Any = simulate_fed_chi2(
            tables.sum(axis=0),
            n,
            decoder=decoder,
            dropout=dropout,
            bits=bits,
            randomness=randomness,
            split="iid",
            drop_empty=drop_empty,
            **common,
        )
        route = "simulation (linearity shortcut)"
    else:
        with (
            progress_for(state) as progress,
            engine_for(
                state,
                progress,
                backend=route,
                workers=workers,
                scheduler=scheduler,
                shard_size=shard_size,
            ) as engine,
        ):
            if test == "chi2":
                res = fed_chi2(
                    tables,
                    decoder=decoder,
                    dropout=dropout,
                    bits=bits,
                    engine=engine,
                    randomness=randomness,
                    drop_empty=drop_empty,
                    epsilon=epsilon,
                    delta=delta,
                    max_records=max_records,
                    **common,
                )
            else:
                if dropout:
                    raise ParameterError("--dropout", dropout, "0 with --test g")
                res = fed_g_test(tables, bits=bits, engine=engine, randomness=randomness, **common)
    out = res.to_dict()
    payload: dict[str, Any] = {
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
        "shape": list(tables.shape[1:]),
        "route": route,
        "privacy": NO_DP_NOTE if epsilon is None else _dp_note(res),
        **{k: v for k, v in out.items() if k not in ("details", "test")},
        "details": _lean(out.get("details", {})),
    }
    if dropout > 0.5:
        add_warning(
            state,
            payload,
            f"{100 * dropout:g}% of the clients dropped out: the test's decision rests on the few "
            "survivors and is unreliable",
        )
    check_interval(state, payload, n_clients=payload.get("n_clients"))

    def render(console: Console) -> None:
        name = "FED-chi^2" if res.test == "chi2" else "G-test via FED-H"
        t = Table(title=f"{name}: {x} x {y} ({data})", show_header=False)
        ci = payload["ci"]
        verdict = "dependent" if payload["rejected"] else "no evidence of dependence"
        rows = [
            ("statistic", f"{payload['statistic']:.6g}"),
            (f"{100 * confidence:g}% interval", f"[{ci[0]:.6g}, {ci[1]:.6g}]"),
            ("p-value", f"{payload['p_value']:.4g} (dof {payload['dof']})"),
            (
                f"decision at level {level:g}",
                verdict + ("" if payload["decision_stable"] else " (not stable over the interval)"),
            ),
            ("exact statistic (simulation)", f"{payload['exact_statistic']:.6g}"),
            ("multiplicative error", f"{payload['multiplicative_error']:.4g}"),
            ("clients", f"{payload['n_clients']} ({route})"),
            (
                "bytes per client",
                f"{payload['bytes_per_client']} (whole table: {payload['bytes_full_table']})",
            ),
        ]
        if epsilon is not None:
            rows.insert(3, ("p-value with sketch and DP noise", f"{payload['p_value_sketch']:.4g}"))
        for k, v in rows:
            t.add_row(k, v)
        console.print(t)
        console.print(f"privacy: {payload['privacy']}")
        if payload.get("release_note"):
            console.print(f"[dim]{payload['release_note']}[/dim]")

    emit(state, payload, render)


def _dp_note(res: Any) -> str:
    """What a run with ``--epsilon`` released, in one sentence (text output and JSON ``privacy``)."""
    p = res.details["privacy"]
    return (
        f"({res.epsilon:.4g}, {res.delta:.3g})-DP: central discrete Gaussian noise on the marginals "
        f"(sigma {p['sigma_marginals']:.3g} counts) and on the projection (sigma "
        f"{p['sigma_projection']:.3g}), one client's table of at most {p['max_records']} records "
        "replaced; statistic, interval and p-values account for the noise"
    )


def entropy(
    ctx: typer.Context,
    data: Annotated[str, typer.Argument(help="Dataset name (e.g. adult) or a CSV/Parquet file.")],
    column: Annotated[str, typer.Option("--column", help="Categorical column.")],
    client_column: ClientColumnOption = None,
    clients: ClientsOption = None,
    encoding_size: Annotated[
        int, typer.Option("--encoding-size", help="l of each of the two projections (>= 2).")
    ] = 1000,
    fd_step: Annotated[
        float, typer.Option("--fd-step", help="Finite-difference step D in (0, 0.5].")
    ] = 0.05,
    coupling: Annotated[
        str, typer.Option("--coupling", help="coupled (default, one seed) or independent.")
    ] = "coupled",
    confidence: ConfidenceOption = 0.95,
    bits: BitsOption = 64,
    count_column: CountColumnOption = None,
    split: SplitOption = None,
    secure: SecureOption = None,
    backend: BackendOption = "auto",
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    shard_size: ShardSizeOption = 1 << 20,
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
    df = load_frame(data, state.data_dir, split)
    _check_column(df, "--column", column, data)
    weights = _weights(df, data, count_column)
    assign, n = _assignment(df, data, client_column, clients, state)
    hist = _tables(df, (column,), assign, n, weights)
    m = hist.shape[1]
    if m < 2:
        raise DataError(f"column {column!r} has a single category: its entropy is 0")
    _check_projection_memory(encoding_size, m, n, projections=2)  # f_+ and f_-
    route = _route(secure, backend, n)
    with (
        progress_for(state) as progress,
        engine_for(
            state,
            progress,
            backend=route,
            workers=workers,
            scheduler=scheduler,
            shard_size=shard_size,
        ) as engine,
    ):
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
        "privacy": NO_DP_NOTE,
        **{k: v for k, v in out.items() if k != "details"},
        "details": _lean(out.get("details", {})),
    }
    _clip_entropy(state, payload, m)
    check_interval(state, payload, n_clients=payload.get("n_clients"))

    def render(console: Console) -> None:
        t = Table(title=f"FED-H: entropy of {column} ({data}), nats", show_header=False)
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
        for k, v in rows:
            t.add_row(k, v)
        console.print(t)
        console.print(f"privacy: {NO_DP_NOTE}")
        if payload.get("release_note"):
            console.print(f"[dim]{payload['release_note']}[/dim]")

    emit(state, payload, render)


def register(app: typer.Typer) -> None:
    """Add ``chi2`` and ``entropy`` to the app."""
    app.command("chi2")(chi2)
    app.command("entropy")(entropy)
