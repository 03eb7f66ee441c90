"""Client sets of privacy accounting: runs of client ids, and the segments of clients charged alike.

A client set is ``None`` (every client), a ``range`` of client ids, or an array of ids; it is stored as
sorted runs of consecutive ids ``[start, stop)`` (:func:`client_runs`), so a range of 10^9 clients costs two
integers. The elementary segments between run boundaries are charged alike (:func:`segment_sums`,
:func:`membership`). Used by :mod:`fedstats.privacy.ledger`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from fedstats.errors import ParameterError

__all__ = [
    "ClientSet",
    "all_or_nothing",
    "client_runs",
    "describe_clients",
    "membership",
    "segment_sums",
    "unique_rows",
]

ClientSet = range | Iterable[int] | np.ndarray | None


def client_runs(clients: Any) -> np.ndarray | None:
    """A client set as sorted, disjoint half-open runs of ids ``[start, stop)``.

    Parameters
    ----------
    clients : None, range, int or iterable of int
        None for every client; else non-negative client ids (a range of step 1 costs two integers).

    Returns
    -------
    numpy.ndarray of int64, shape (m, 2), or None
        The runs; None for every client.

    Raises
    ------
    ParameterError
        If the set is empty or holds something other than non-negative integer ids.
    """
    if clients is None:
        return None
    if isinstance(clients, range):
        if clients.step == 1:
            if clients.start < 0:
                raise ParameterError("clients", clients, "a range of non-negative client ids")
            if len(clients) == 0:
                raise ParameterError("clients", clients, "a non-empty set of client ids")
            return np.array([[clients.start, clients.stop]], dtype=np.int64)
        clients = np.arange(clients.start, clients.stop, clients.step)
    if isinstance(clients, (int, np.integer)) and not isinstance(clients, bool):
        clients = [int(clients)]
    ids = np.asarray(clients if isinstance(clients, np.ndarray) else list(clients))
    if ids.size == 0:
        raise ParameterError("clients", "<empty>", "a non-empty set of client ids")
    if not np.issubdtype(ids.dtype, np.integer) or ids.ndim != 1 or int(ids.min()) < 0:
        raise ParameterError(
            "clients",
            f"<array {ids.dtype} {ids.shape}>",
            "None, a range or 1-D non-negative integer ids",
        )
    ids = np.unique(ids.astype(np.int64))
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    starts = ids[np.concatenate(([0], breaks))]
    stops = ids[np.concatenate((breaks - 1, [ids.size - 1]))] + 1
    return np.stack([starts, stops], axis=1)


def segment_sums(runs: list[np.ndarray | None], values: np.ndarray) -> np.ndarray:
    """Per elementary client segment, the column sums of ``values`` over the entries covering it.

    Parameters
    ----------
    runs : list of (numpy.ndarray of shape (m, 2)) or None
        Each entry's runs (:func:`client_runs`); None covers every client.
    values : numpy.ndarray of float, shape (n_entries, n_columns)
        One row per entry.

    Returns
    -------
    numpy.ndarray of float, shape (n_segments, n_columns)
        Row 0: the clients covered only by the entries for every client.
    """
    ncol = values.shape[1]
    glob = np.zeros(ncol)
    points: list[np.ndarray] = []
    deltas: list[np.ndarray] = []
    for r, v in zip(runs, values, strict=True):
        if r is None:
            glob += v
            continue
        points.append(r[:, 0])
        deltas.append(np.broadcast_to(v, (r.shape[0], ncol)))
        points.append(r[:, 1])
        deltas.append(np.broadcast_to(-v, (r.shape[0], ncol)))
    if not points:
        return glob[None, :]
    p = np.concatenate(points)
    d = np.concatenate(deltas)
    order = np.argsort(p, kind="stable")
    p, d = p[order], d[order]
    # aggregate events at the same point, then prefix-sum: value on [p_i, p_{i+1})
    _, first = np.unique(p, return_index=True)
    agg = np.add.reduceat(d, first, axis=0)
    seg = np.cumsum(agg, axis=0)
    seg = np.maximum(seg, 0.0)  # rounding in cumsum must not create negative charges
    return np.vstack([glob[None, :], seg + glob[None, :]])


@contextmanager
def all_or_nothing(records: list[Any]) -> Iterator[None]:
    """Remove what the block appended to ``records`` if it raises (the ``atomic`` of both ledgers).

    Parameters
    ----------
    records : list
        Appended to inside the block.

    Yields
    ------
    None
    """
    mark = len(records)
    try:
        yield
    except BaseException:
        del records[mark:]
        raise


def describe_clients(clients: Any, runs: np.ndarray | None) -> str:
    """A client set in words: "all", the range, or "N ids in M run(s)".

    Parameters
    ----------
    clients : None, range or iterable of int
        The set as given.
    runs : numpy.ndarray of shape (m, 2) or None
        Its :func:`client_runs`.

    Returns
    -------
    str
    """
    if runs is None:
        return "all"
    if isinstance(clients, range):
        return repr(clients)
    count = int((runs[:, 1] - runs[:, 0]).sum())
    return f"{count} ids in {runs.shape[0]} run(s)"


def membership(runs: list[np.ndarray | None]) -> np.ndarray:
    """Which entries cover each elementary client segment.

    Parameters
    ----------
    runs : list of (numpy.ndarray of shape (m, 2)) or None
        Each entry's runs; None covers every client.

    Returns
    -------
    numpy.ndarray of bool, shape (n_segments, n_entries)
        Row 0 is the clients in none of the listed runs (covered by the entries for every client only);
        the others are the segments between consecutive run boundaries.
    """
    listed = [r for r in runs if r is not None]
    points = np.unique(np.concatenate([r.ravel() for r in listed])) if listed else np.empty(0)
    out = np.zeros((points.size + 1, len(runs)), dtype=bool)
    out[:, [j for j, r in enumerate(runs) if r is None]] = True
    for j, r in enumerate(runs):
        if r is None:
            continue
        # runs are sorted and disjoint: the run starting last at or before each point
        k = np.searchsorted(r[:, 0], points, side="right") - 1
        out[1:, j] = (k >= 0) & (points < r[np.maximum(k, 0), 1])
    return out


def unique_rows(member: np.ndarray) -> list[np.ndarray]:
    """The distinct rows of a boolean matrix, in order of first appearance.

    (``np.unique(axis=0)`` would build a dtype of one field per column.)

    Parameters
    ----------
    member : numpy.ndarray of bool, shape (n, m)

    Returns
    -------
    list of numpy.ndarray of bool, shape (m,)
    """
    seen: dict[bytes, np.ndarray] = {}
    for row in member:
        seen.setdefault(np.packbits(row).tobytes(), row)
    return list(seen.values())
