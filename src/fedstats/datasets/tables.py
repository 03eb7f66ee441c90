"""Contingency tables of two categorical columns, globally or per client, and their split across clients.

* :func:`contingency_table` and :func:`contingency_tables_by_client`: counts of two categorical columns.
* :func:`split_contingency_table`: a global contingency table split across clients by drawing, per cell,
  ``n_clients - 1`` uniform cut points in ``[0, count]`` (the method of the authors of paper 004).

Randomness comes from a :data:`~fedstats.randomness.RNG` or a :class:`~fedstats.randomness.RandomSource`
(never a global generator).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from fedstats._validation import check_int
from fedstats.datasets.partition import Randomness, generator_for
from fedstats.errors import DataError, ParameterError

__all__ = [
    "ContingencyTable",
    "contingency_table",
    "contingency_tables_by_client",
    "split_contingency_table",
]

_MAX_BLOCK = 1 << 22  # elements of scratch per vectorized block (32 MiB of float64)


def _as_count_table(table: Any, name: str = "table") -> np.ndarray:
    arr = np.asarray(table)
    if arr.size == 0:
        raise DataError(f"{name} is empty")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise DataError(f"{name} has NaN or infinite counts")
        if not np.all(arr == np.floor(arr)):
            raise DataError(f"{name} must hold integer counts")
    elif arr.dtype.kind not in "iub":
        raise DataError(f"{name} must hold integer counts, got dtype {arr.dtype}")
    if np.any(arr < 0):
        raise DataError(
            f"{name} has negative counts (first at flat index {int(np.argmax(arr.ravel() < 0))})"
        )
    if arr.max() >= 2**53:
        raise DataError(f"{name} has counts of 2**53 or more, beyond exact uniform cut points")
    return arr.astype(np.int64)


def split_contingency_table(table: Any, n_clients: int, *, rng: Randomness) -> np.ndarray:
    """Split a global contingency table across clients so that the clients' tables sum to it exactly.

    The method of the authors of paper 004 (FED-chi^2 experiments): for each cell with count ``c``, draw
    ``n_clients - 1`` cut points uniformly on ``{0, ..., c}``, sort them, and give client ``j`` the gap
    between cut ``j`` and cut ``j + 1`` (with cuts 0 and ``c`` at the ends). Vectorized over cells, in
    blocks of bounded memory. A cut is ``floor(u (c + 1))`` with ``u`` uniform on [0, 1) at 53-bit
    resolution (exactly uniform up to a relative error below ``c 2^-53``).

    Parameters
    ----------
    table : array_like of int, shape (m_x, m_y) (any shape is accepted)
        Non-negative integer counts below 2**53.
    n_clients : int
        Number of clients, at least 1.
    rng : numpy.random.Generator, SecureGenerator or RandomSource
        Randomness (stream ``("datasets", "split_table")`` of a RandomSource).

    Returns
    -------
    numpy.ndarray
        ``(n_clients, *table.shape)`` int64, non-negative, with ``out.sum(axis=0) == table`` exactly.

    Raises
    ------
    ParameterError
        If ``n_clients`` is not a positive integer.
    DataError
        If the table is empty, not integer, negative, NaN/inf, or too large.
    """
    counts = _as_count_table(table)
    k = check_int("n_clients", n_clients, low=1)
    flat = counts.ravel()
    n_cells = flat.size
    out = np.empty((k, n_cells), dtype=np.int64)
    if k == 1:
        out[0] = flat
        return out.reshape((k, *counts.shape))
    gen = generator_for(rng, "split_table")
    block = max(1, _MAX_BLOCK // (k - 1))
    for lo in range(0, n_cells, block):
        c = flat[lo : lo + block]
        u = np.asarray(gen.random((c.size, k - 1)), dtype=np.float64)
        cuts = np.minimum(
            np.floor(u * (c[:, None] + 1).astype(np.float64)).astype(np.int64), c[:, None]
        )
        cuts.sort(axis=1)
        edges = np.concatenate((np.zeros((c.size, 1), np.int64), cuts, c[:, None]), axis=1)
        out[:, lo : lo + c.size] = np.diff(edges, axis=1).T
    return out.reshape((k, *counts.shape))


class ContingencyTable(NamedTuple):
    """Counts of two categorical variables.

    Attributes
    ----------
    counts : numpy.ndarray
        ``(m_x, m_y)`` int64 counts; ``counts[i, j]`` rows have ``x == x_labels[i]`` and ``y == y_labels[j]``.
    x_labels : tuple
        Categories of ``x`` (rows), sorted unless given.
    y_labels : tuple
        Categories of ``y`` (columns), sorted unless given.
    """

    counts: np.ndarray
    x_labels: tuple[Any, ...]
    y_labels: tuple[Any, ...]


def _column_codes(
    df: pd.DataFrame, col: str, categories: Sequence[Any] | None
) -> tuple[np.ndarray, tuple[Any, ...]]:
    if col not in df.columns:
        raise DataError(f"missing column {col!r}; available: " + ", ".join(map(str, df.columns)))
    s = df[col]
    if s.isna().any():
        raise DataError(
            f"column {col!r} has {int(s.isna().sum())} missing value(s) (NaN/None); recode them as a category"
        )
    if categories is None:
        codes, uniques = pd.factorize(s, sort=True)
        labels = tuple(np.asarray(uniques).tolist())
    else:
        cats = list(categories)
        if len(set(cats)) != len(cats):
            raise ParameterError(f"{col} categories", cats, "distinct categories")
        codes = pd.Index(cats).get_indexer(s).astype(np.int64)
        if np.any(codes < 0):
            bad = s[codes < 0].iloc[0]
            raise DataError(
                f"column {col!r} has value {bad!r} that is not among the given categories"
            )
        labels = tuple(cats)
    return np.asarray(codes, dtype=np.int64), labels


def contingency_table(
    df: pd.DataFrame,
    x: str,
    y: str,
    *,
    x_categories: Sequence[Any] | None = None,
    y_categories: Sequence[Any] | None = None,
) -> ContingencyTable:
    """The contingency table of columns ``x`` and ``y`` of ``df``.

    Parameters
    ----------
    df : pandas.DataFrame
        The data, one row per record.
    x, y : str
        Column names (rows and columns of the table).
    x_categories, y_categories : sequence, optional
        Fix the categories and their order (e.g. so that every client uses the same table layout);
        default: the sorted distinct values. Categories absent from the data give zero rows/columns.

    Returns
    -------
    ContingencyTable
        ``(counts, x_labels, y_labels)`` with ``counts`` of shape ``(m_x, m_y)``, int64, summing to
        ``len(df)``.

    Raises
    ------
    DataError
        If ``df`` is empty, a column is missing (the message lists the available ones), has missing values,
        or holds a value outside the given categories.
    """
    if not isinstance(df, pd.DataFrame) or df.shape[0] == 0:
        raise DataError("contingency_table needs a non-empty pandas DataFrame")
    cx, xl = _column_codes(df, x, x_categories)
    cy, yl = _column_codes(df, y, y_categories)
    m_x, m_y = len(xl), len(yl)
    counts = np.bincount(cx * m_y + cy, minlength=m_x * m_y).astype(np.int64).reshape(m_x, m_y)
    return ContingencyTable(counts, xl, yl)


def contingency_tables_by_client(
    df: pd.DataFrame,
    x: str,
    y: str,
    assignment: Any,
    n_clients: int | None = None,
    *,
    x_categories: Sequence[Any] | None = None,
    y_categories: Sequence[Any] | None = None,
) -> tuple[np.ndarray, tuple[Any, ...], tuple[Any, ...]]:
    """Each client's contingency table of ``x`` and ``y``, from a row assignment (one pass, no loop).

    Parameters
    ----------
    df : pandas.DataFrame
        The data.
    x, y : str
        Column names.
    assignment : array_like of int, shape (len(df),)
        Client of each row (e.g. from :func:`iid_partition` or :func:`dirichlet_partition`).
    n_clients : int, optional
        Number of clients (default ``max(assignment) + 1``).
    x_categories, y_categories : sequence, optional
        Fixed categories, as in :func:`contingency_table`.

    Returns
    -------
    tables : numpy.ndarray
        ``(n_clients, m_x, m_y)`` int64; ``tables.sum(axis=0)`` is the global table.
    x_labels, y_labels : tuple
        Categories of ``x`` and ``y``.

    Raises
    ------
    DataError
        As :func:`contingency_table`, or if ``assignment`` has the wrong length or range.
    """
    if not isinstance(df, pd.DataFrame) or df.shape[0] == 0:
        raise DataError("contingency_tables_by_client needs a non-empty pandas DataFrame")
    a = np.asarray(assignment)
    if a.shape != (df.shape[0],) or not np.issubdtype(a.dtype, np.integer):
        raise DataError(
            f"assignment must be {df.shape[0]} integers (one per row), got shape {a.shape}"
        )
    k = int(a.max()) + 1 if n_clients is None else check_int("n_clients", n_clients, low=1)
    if a.min() < 0 or a.max() >= k:
        raise DataError(f"assignment has entries outside [0, {k})")
    cx, xl = _column_codes(df, x, x_categories)
    cy, yl = _column_codes(df, y, y_categories)
    m_x, m_y = len(xl), len(yl)
    flat = (a.astype(np.int64) * m_x + cx) * m_y + cy
    tables = np.bincount(flat, minlength=k * m_x * m_y).astype(np.int64).reshape(k, m_x, m_y)
    return tables, xl, yl
