"""What ``fedstats chi2`` and ``fedstats entropy`` share (Pang et al., ICML 2023).

Reading the data, building the clients' tables or histograms, choosing the route, and their common options.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fedstats._resources import check_memory
from fedstats.cli._common import CliState, check_distinct_columns
from fedstats.errors import DataError, ParameterError

if TYPE_CHECKING:  # imported where a table is read: ``fedstats chi2 --help`` loads neither
    import numpy as np
    import pandas as pd

__all__ = [
    "MAX_TABLE_ENTRIES",
    "NO_DP_NOTE",
    "SECURE_DEFAULT_MAX_CLIENTS",
    "assignment",
    "check_column",
    "check_projection_memory",
    "check_unique_columns",
    "client_frame",
    "column_codes",
    "lean",
    "load_frame",
    "read_table",
    "route",
    "tables",
    "weights",
]

SECURE_DEFAULT_MAX_CLIENTS = 3000
"""Up to this many clients the commands use the secure route unless told otherwise."""

NO_DP_NOTE = (
    "no DP noise is added: secure aggregation hides each client's counts, but the released "
    "statistic is not differentially private"
)
"""What ``chi2`` and ``entropy`` say about privacy, in the text output and the JSON (``privacy``)."""

MAX_TABLE_ENTRIES = 50_000_000  # clients x cells held in memory before switching to the fast path

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
CountColumnOption = Annotated[
    str | None,
    typer.Option(
        "--count-column",
        help="Column of non-negative integer counts: each row stands for that many records.",
    ),
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
    import pandas as pd

    from fedstats.datasets import dataset_names, load_dataset

    if data in dataset_names():
        df = load_dataset(data, data_dir, **({"split": split} if split else {}))
    else:
        if split:
            raise ParameterError("--split", split, "only with a registered dataset name")
        df = read_table(data)
    if not isinstance(df, pd.DataFrame):
        raise ParameterError("DATA", data, "a tabular dataset (a DataFrame)")
    if df.shape[0] == 0:
        raise DataError(f"{data} has no rows: at least one client is needed")
    return df


_TEXT_SUFFIXES = (".csv", ".tsv", ".txt")


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a user's CSV/TSV/Parquet table, refusing duplicate column names.

    pandas renames a repeated CSV header (``a``, ``a.1``) without a word, so ``--column a`` would then
    read one of two columns of that name; the header is read as written and checked first.

    Raises
    ------
    DataError
        If two columns have the same name.
    DatasetNotFoundError
        If the file does not exist.
    """
    from fedstats.datasets.readers import load_table

    name = Path(path).name.lower()
    if any(suffix in name for suffix in _TEXT_SUFFIXES) and Path(path).is_file():
        header = load_table(path, header=None, nrows=1, dtype=str, keep_default_na=False)
        check_unique_columns([str(c) for c in header.iloc[0].tolist()], str(path))
    df = load_table(path)
    check_unique_columns([str(c) for c in df.columns], str(path))
    return df


def check_unique_columns(names: list[str], data: str) -> None:
    """Refuse a table in which two columns have the same name (which one would an option mean?).

    Raises
    ------
    DataError
        Naming the repeated column(s).
    """
    repeated = [str(n) for n, c in Counter(names).items() if c > 1]
    if repeated:
        raise DataError(
            f"{data} has duplicate column names ({', '.join(map(repr, sorted(repeated)))}): an option "
            "naming one of them would be ambiguous; rename them"
        )


def check_column(df: pd.DataFrame, option: str, col: str, data: str) -> None:
    """Refuse a column ``col`` (given as ``option``) that ``df`` does not have.

    Raises
    ------
    ParameterError
        Naming ``option`` and listing the columns of ``data``.
    """
    if col not in df.columns:
        cols = ", ".join(map(str, df.columns))
        raise ParameterError(option, col, f"a column of {data}: {cols}")


def numeric_values(df: pd.DataFrame, option: str, col: str) -> np.ndarray:
    """The numbers of column ``col`` (given as ``option``) as float64; NaN where missing.

    Raises
    ------
    ParameterError
        Naming ``option``, the column and its type, if it holds booleans, dates, times or text
        (:func:`fedstats.datasets.readers.numeric_column`).
    """
    from fedstats.datasets.readers import numeric_column

    return numeric_column(df, col, option=option)


def assignment(
    df: pd.DataFrame, data: str, client_column: str | None, clients: int | None, state: CliState
) -> tuple[np.ndarray, int]:
    """Assign the rows to clients: by ``--client-column``, or uniformly at random over ``--clients``.

    Returns
    -------
    (numpy.ndarray, int)
        int64 client index of each row (shape ``(n_rows,)``) and the number of clients (default 100).

    Raises
    ------
    ParameterError
        Both options given, an unknown column, or ``--clients`` outside ``[1, n_rows]``.
    DataError
        Missing values in the client column.
    """
    from fedstats.datasets import iid_partition

    if client_column is not None and clients is not None:
        raise ParameterError("--clients", clients, "not together with --client-column")
    if client_column is not None:
        check_column(df, "--client-column", client_column, data)
        return column_codes(df, client_column)
    n = 100 if clients is None else clients
    if not 1 <= n <= df.shape[0]:
        raise ParameterError("--clients", n, f"an integer in [1, {df.shape[0]}] (rows of {data})")
    return iid_partition(df.shape[0], n, rng=state.randomness.child("cli", "clients")), n


def client_frame(
    data: str,
    split: str | None,
    columns: dict[str, str],
    *,
    client_column: str | None,
    clients: int | None,
    count_column: str | None,
    state: CliState,
) -> tuple[pd.DataFrame, np.ndarray | None, np.ndarray, int]:
    """Read ``data`` and spread its rows over the clients: what ``chi2`` and ``entropy`` start with.

    The columns' roles are checked distinct first, then the data is read, then every column of
    ``columns`` must be one of it, then the counts and the clients are read.

    Parameters
    ----------
    data : str
        ``DATA``: a registered dataset name or a CSV/Parquet file.
    split : str, optional
        ``--split`` (registered datasets only).
    columns : dict
        Flag -> column analysed (``{"--x": ..., "--y": ...}``), in command-line order.
    client_column, clients, count_column : optional
        ``--client-column``, ``--clients`` and ``--count-column``.
    state : CliState
        The command's state (data folder, randomness of the random assignment).

    Returns
    -------
    (pandas.DataFrame, numpy.ndarray or None, numpy.ndarray, int)
        The table, the per-row counts (:func:`weights`), each row's int64 client index (shape
        ``(n_rows,)``) and the number of clients (:func:`assignment`).

    Raises
    ------
    ParameterError, DataError, DatasetNotFoundError
        As :func:`~fedstats.cli._common.check_distinct_columns`, :func:`load_frame`,
        :func:`check_column`, :func:`weights` and :func:`assignment`.
    """
    check_distinct_columns(
        {**columns, "--client-column": client_column, "--count-column": count_column}
    )
    df = load_frame(data, state.data_dir, split)
    for option, col in columns.items():
        check_column(df, option, col, data)
    w = weights(df, data, count_column)
    assign, n = assignment(df, data, client_column, clients, state)
    return df, w, assign, n


def column_codes(df: pd.DataFrame, col: str) -> tuple[np.ndarray, int]:
    """Integer codes of a categorical column (sorted categories) and the number of categories.

    Raises
    ------
    DataError
        If the column has missing values.
    """
    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(df[col], sort=True)
    if (codes < 0).any():
        raise DataError(f"column {col!r} has missing values; recode them as a category")
    return np.asarray(codes, dtype=np.int64), len(uniques)


def weights(df: pd.DataFrame, data: str, count_column: str | None) -> np.ndarray | None:
    """Per-row counts from ``--count-column`` (non-negative integers), or None (one record per row)."""
    if count_column is None:
        return None
    import numpy as np

    check_column(df, "--count-column", count_column, data)
    w = numeric_values(df, "--count-column", count_column)
    if not np.isfinite(w).all() or not np.array_equal(w, np.round(w)):
        raise DataError(f"column {count_column!r} must hold whole-number counts")
    if (w < 0).any():
        raise DataError(
            f"column {count_column!r} has a negative count (row {int(np.argmax(w < 0))})"
        )
    return w


def tables(
    df: pd.DataFrame,
    cols: tuple[str, ...],
    assign: np.ndarray,
    n: int,
    weights: np.ndarray | None,
) -> np.ndarray:
    """Per-client count arrays ``(n, m_1, ..., m_k)`` of the columns ``cols`` (one bincount)."""
    import numpy as np

    flat = assign.astype(np.int64)
    shape = [n]
    for c in cols:
        codes, m = column_codes(df, c)
        flat = flat * m + codes
        shape.append(m)
    size = int(np.prod(shape))
    counts = np.bincount(flat, weights=weights, minlength=size)
    return np.rint(counts).astype(np.int64).reshape(shape)


def check_projection_memory(
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


def route(secure: bool | None, backend: str, n_clients: int) -> str:
    """Choose the route: ``--backend``, else secure aggregation up to the default size.

    Simulated ``--dropout`` (clients leaving before round 2) works on every route: on the secure route the
    dropped clients never join round 2's sessions.
    """
    if secure and backend not in ("auto", "secure"):
        raise ParameterError("--backend", backend, "'auto' or 'secure' together with --secure")
    if secure is False and backend == "secure":
        raise ParameterError("--no-secure", True, "not together with --backend secure")
    if backend != "auto":
        return backend
    if secure is None:
        small = n_clients <= SECURE_DEFAULT_MAX_CLIENTS
        return "secure" if small else "serial"
    return "secure" if secure else "serial"


def lean(details: dict[str, Any]) -> dict[str, Any]:
    """``details`` without the raw encodings (long vectors kept out of the CLI's JSON)."""
    drop = ("encoding", "encoding_plus", "encoding_minus", "joint_entropy")
    return {k: v for k, v in details.items() if k not in drop}
