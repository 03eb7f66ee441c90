"""FED-H and the G-test, client side (Pang et al., ICML 2023, Sec. 3.5): what a device runs.

FED-H round 1 (:func:`encode_histogram_size`) sends the client's total count; the G-test's round 1 sends the
marginals of its table (:func:`encode_marginals`, the same encoder as FED-chi^2's round 1). Round 2
(:func:`encode_entropy_projection`) sends the two fixed-point stable projections ``[P+ w_i, P- w_i]`` of the
client's normalised histogram (or flattened table) ``w_i = v^(i) / |v|`` modulo ``2**bits``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedstats.analyses.chi2.client import encode_marginals, record_tables
from fedstats.engine.fixedpoint import FixedPoint
from fedstats.engine.rounds import ClientBatch
from fedstats.errors import DataError
from fedstats.randomness import RNG
from fedstats.sketches.stable import StableProjection

__all__ = ["encode_entropy_projection", "encode_histogram_size", "encode_marginals"]


def _client_hist(batch: ClientBatch, params: Mapping[str, Any]) -> np.ndarray:
    """Read the clients' histograms as ``(n, m)`` (a ``(n, m_x, m_y)`` table column is flattened row-major).

    With ``params["categorical"]`` (one column of codes in ``[0, m)``, or two with ``params["shape"]``),
    each row is one record and its histogram has a single 1 (row-major joint cell for two columns).
    """
    cat = params.get("categorical")
    if cat is not None:
        if len(cat) == 2:
            t = record_tables(
                batch.column(cat[0]),
                batch.column(cat[1]),
                tuple(params["shape"]),
                (str(cat[0]), str(cat[1])),
            )
            return t.reshape(t.shape[0], -1)
        m = int(params["m"])
        codes = np.asarray(batch.column(cat[0]))
        if codes.ndim != 1 or (
            codes.size and (codes.dtype.kind not in "iu" or codes.min() < 0 or codes.max() >= m)
        ):
            raise DataError(f"category column {cat[0]} must hold integer codes in [0, {m})")
        out = np.zeros((codes.shape[0], m), dtype=np.int64)
        out[np.arange(codes.shape[0]), codes] = 1
        return out
    h = np.asarray(batch.column(params.get("column", "histogram")))
    if h.ndim >= 2:
        h = h.reshape(h.shape[0], -1)
    if h.ndim != 2 or h.shape[1] != int(params["m"]):
        raise DataError(
            f"client histograms must have {params['m']} categories, got shape {h.shape}"
        )
    if (h < 0).any():
        raise DataError("a client's histogram has a negative count")
    return h


def encode_histogram_size(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Client side of FED-H round 1: the client's total count.

    Parameters
    ----------
    batch : ClientBatch
        Column ``params["column"]`` (default ``"histogram"``): ``(n, m)`` counts.
    params : Mapping
        ``m`` (categories), optional ``column``.
    rng : RNG
        Unused (an exact round).

    Returns
    -------
    numpy.ndarray
        int64, shape ``(n, 1)``.

    Raises
    ------
    DataError
        On a wrong shape or a negative count.
    """
    del rng  # exact round: no randomness
    out: np.ndarray = _client_hist(batch, params).astype(np.int64).sum(axis=1, keepdims=True)
    return out


def encode_entropy_projection(
    batch: ClientBatch, params: Mapping[str, Any], rng: RNG
) -> np.ndarray:
    """Client side of round 2: fixed-point ``[P+ w_i, P- w_i]`` modulo ``2**bits``.

    ``w_i = v^(i) / |v|`` (Pang et al. 2023, Sec. 3.5); only the client's non-zero categories are touched.
    ``P+`` and ``P-`` are the public stable projections of stability ``1 + D`` and ``1 - D``
    (``D`` = ``params["fd_step"]``).

    Parameters
    ----------
    batch : ClientBatch
        ``(n, m)`` histograms (or ``(n, m_x, m_y)`` tables, flattened).
    params : Mapping
        ``m``, ``total`` (``|v|``, from round 1), ``encoding_size``, ``fd_step``, ``seed_plus``,
        ``seed_minus``, ``frac_bits``, ``clip``, ``bits``, optional ``column``.
    rng : RNG
        The clients' private randomness (randomized rounding).

    Returns
    -------
    numpy.ndarray
        Shape ``(n, 2 l)``: signed representatives modulo ``2**bits``.

    Raises
    ------
    DataError
        On a wrong shape or a negative count.
    """
    h = _client_hist(batch, params).astype(np.float64) / float(params["total"])
    ell, d = int(params["encoding_size"]), float(params["fd_step"])
    sp, sm = int(params["seed_plus"]), int(params["seed_minus"])
    e = np.concatenate(
        [StableProjection(sp, ell, 1 + d).project(h), StableProjection(sm, ell, 1 - d).project(h)],
        axis=1,
    )
    fp = FixedPoint(int(params["frac_bits"]), float(params["clip"]))
    q, _ = fp.encode(e, rng, bits=int(params["bits"]))
    return q
