"""FED-chi^2, client side (Pang et al., ICML 2023, Algorithm 2): what a device runs.

Round 1 (:func:`encode_marginals`) sends the row and column sums of the client's table; round 2
(:func:`encode_projection`) sends the fixed-point projection ``P u_i`` of its scaled table modulo
``2**bits``. Every input besides the client's own table is a public round parameter (the summed marginals,
the kept rows and columns, the projection seed, the fixed-point scale); who drops out is the route's
business and never a parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedstats.analyses.chi2.rare import merge_tables
from fedstats.engine.fixedpoint import FixedPoint
from fedstats.engine.rounds import ClientBatch
from fedstats.errors import DataError
from fedstats.randomness import RNG
from fedstats.sketches.stable import MAX_DENSE_ENTRIES, StableProjection

__all__ = ["encode_marginals", "encode_projection", "expected_counts", "record_tables"]


def expected_counts(vx: np.ndarray, vy: np.ndarray) -> np.ndarray:
    """Compute the expected counts ``vbar_xy = v_x v_y / v`` under independence, flattened (Eq. 4).

    Parameters
    ----------
    vx, vy : numpy.ndarray
        Row and column sums of the summed table, shapes ``(m_x,)`` and ``(m_y,)``, positive.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(m_x * m_y,)`` (row-major).
    """
    v = float(vx.sum())
    return (np.outer(vx.astype(np.float64), vy.astype(np.float64)) / v).ravel()


def record_tables(
    x: np.ndarray, y: np.ndarray, shape: tuple[int, int], names: tuple[str, str] = ("x", "y")
) -> np.ndarray:
    """One-record tables from two category columns: ``out[r, x[r], y[r]] = 1``.

    Parameters
    ----------
    x, y : numpy.ndarray
        Integer codes, shape ``(n,)``, in ``[0, m_x)`` and ``[0, m_y)``.
    shape : tuple of int
        ``(m_x, m_y)``.
    names : tuple of str
        The columns' names in the user's data, named in the error (default ``("x", "y")``).

    Returns
    -------
    numpy.ndarray
        int64, shape ``(n, m_x, m_y)``.

    Raises
    ------
    DataError
        If a code is not an integer in range.
    """
    m_x, m_y = (int(v) for v in shape)
    xs, ys = np.asarray(x), np.asarray(y)
    for name, v, m in ((names[0], xs, m_x), (names[1], ys, m_y)):
        if v.ndim != 1 or (
            v.size and (v.dtype.kind not in "iu" or int(v.min()) < 0 or int(v.max()) >= m)
        ):
            kind = v.dtype.kind
            found = "" if kind in "iu" else " (it holds text)" if kind in "OSU" else f" ({v.dtype})"
            raise DataError(f"category column {name} must hold integer codes in [0, {m}){found}")
    out = np.zeros((xs.shape[0], m_x, m_y), dtype=np.int64)
    out[np.arange(xs.shape[0]), xs, ys] = 1
    return out


def _client_tables(batch: ClientBatch, params: Mapping[str, Any]) -> np.ndarray:
    m_x, m_y = params["shape"]
    pair = params.get("categorical")
    if pair is not None:  # one record per row: its table has a single 1
        return record_tables(
            batch.column(pair[0]), batch.column(pair[1]), (m_x, m_y), (str(pair[0]), str(pair[1]))
        )
    t = np.asarray(batch.column(params.get("column", "table")))
    if t.ndim != 3 or t.shape[1:] != (m_x, m_y):
        raise DataError(f"client tables must have shape (n, {m_x}, {m_y}), got {t.shape}")
    if (t < 0).any():
        raise DataError("a client's table has a negative count")
    cap = params.get("max_records")
    if cap is not None and t.size and int(t.reshape(t.shape[0], -1).sum(axis=1).max()) > int(cap):
        # the privacy guarantee bounds each client's records: refuse rather than be clipped
        raise DataError(f"a client's table holds more than the declared max_records={cap} records")
    return t


def encode_marginals(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Client side of round 1: the row and column sums of the client's table.

    Pang et al. 2023, Algorithm 2 lines 3-4.

    Parameters
    ----------
    batch : ClientBatch
        Column ``params["column"]`` (default ``"table"``) holds the ``(n, m_x, m_y)`` tables; or, with
        ``params["categorical"] = [x, y]``, two columns of category codes, one record per row.
    params : Mapping
        ``shape`` = ``(m_x, m_y)``, optional ``column`` or ``categorical``, and ``max_records`` (with
        central DP).
    rng : RNG
        Unused: the marginals are sent exactly (the encoder signature is shared by every round).

    Returns
    -------
    numpy.ndarray
        int64, shape ``(n, m_x + m_y)``: the ``m_x`` row sums, then the ``m_y`` column sums.

    Raises
    ------
    DataError
        If the tables have the wrong shape, a negative count, or more than ``max_records`` records.
    """
    del rng  # exact round: no randomness
    t = _client_tables(batch, params).astype(np.int64)
    return np.concatenate([t.sum(axis=2), t.sum(axis=1)], axis=1)


def encode_projection(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Client side of round 2: fixed-point ``P u_i`` modulo ``2**bits``.

    ``u_i = (v^(i) - vbar / n) / sqrt(vbar)`` over the kept cells, from the broadcast marginals (Algorithm
    2 lines 9-10, 13-15). ``P u_i = P (v^(i) / sqrt(vbar)) - P sqrt(vbar) / n``: the first term touches only
    the client's non-zero cells, the second (``params["offset"]``) is public and the same for every client.

    Parameters
    ----------
    batch : ClientBatch
        The clients' ``(n, m_x, m_y)`` tables.
    params : Mapping
        ``shape``, ``rows``, ``cols`` (kept indices), ``row_marginals``, ``col_marginals``, ``max_cell``,
        ``offset`` (length ``l``), ``seed``, ``encoding_size``, ``frac_bits``, ``clip``, ``bits``; and
        ``groups`` (the merged index of each row and each column) when rare categories were merged: the
        client then sums its table's cells into the merged categories first, and ``rows``, ``cols`` and
        the marginals are the merged table's.
    rng : RNG
        The clients' private randomness (randomized rounding to the fixed-point grid).

    Returns
    -------
    numpy.ndarray
        Shape ``(n, l)``, the signed representatives modulo ``2**bits`` (int64; narrower ints for b < 64).

    Raises
    ------
    DataError
        If a table has the wrong shape, a negative count, or a count above the declared ``max_cell``
        (the client refuses rather than be clipped).
    """
    t = _client_tables(batch, params)
    if t.size and int(t.max()) > int(params["max_cell"]):
        raise DataError(
            f"a client's cell count {int(t.max())} exceeds the declared max_cell={params['max_cell']}"
        )
    m_x, m_y = params["shape"]
    groups = params.get("groups")
    if groups is not None:  # rare categories merged after round 1 (fedstats.analyses.chi2.rare)
        t = merge_tables(t, groups)
        m_x, m_y = t.shape[1:]
    rows = np.asarray(params["rows"], dtype=np.int64)
    cols = np.asarray(params["cols"], dtype=np.int64)
    vx = np.asarray(params["row_marginals"], dtype=np.float64)
    vy = np.asarray(params["col_marginals"], dtype=np.float64)
    sq = np.sqrt(expected_counts(vx[rows], vy[cols]))
    if rows.size == m_x and cols.size == m_y:
        counts = t.reshape(batch.n, -1)
    else:
        counts = t[:, rows][:, :, cols].reshape(batch.n, -1)
    ell = int(params["encoding_size"])
    proj = StableProjection(int(params["seed"]), ell, 2.0)
    offset = np.asarray(params["offset"], dtype=np.float64)
    if sq.size * ell <= MAX_DENSE_ENTRIES and batch.n >= 8:
        # a block of clients: fold 1/sqrt(vbar) into the cached projection once, one BLAS product
        scaled = proj.matrix(sq.size).T / sq[:, None]  # (m, l)
        e = np.dot(counts.astype(np.float64), scaled) - offset
    else:
        # few clients (a real device): only the columns of the client's non-zero cells
        e = proj.project(counts.astype(np.float64) / sq) - offset
    fp = FixedPoint(int(params["frac_bits"]), float(params["clip"]))
    q, _ = fp.encode(e, rng, bits=int(params["bits"]))
    return q
