"""Chi-square feature selection for text classification, exact and federated (Pang et al. 2023, Sec. 4.2).

For each term ``t`` and documents labelled with one of ``C`` classes, the ``2 x C`` contingency table counts,
per class, the documents that contain ``t`` (row 0) and those that do not (row 1). The terms with the
``k`` largest Pearson chi-square statistics are kept (Yang & Pedersen 1997).

* :func:`chi2_scores` computes every term's statistic exactly from the per-term, per-class presence counts
  (one sparse product, no loop over terms).
* :func:`federated_chi2_scores` runs FED-chi^2 (Algorithm 2) for every term at once when the documents are
  spread over clients: round 1 sums the marginals (term document frequency and class sizes, exactly), round 2
  sums the clients' scaled tables ``u_i = (v^(i) - vbar / n) / sqrt(vbar)`` projected on a stable matrix, with
  a fraction of clients dropping out of round 2; the server decodes each term's statistic.

Simulation of round 2. The projection is linear, so ``sum_i P u_i = P sum_i u_i``: the sum of the surviving
clients' tables is computed exactly and projected once. Two routes:

* ``method="projection"`` uses :class:`fedstats.sketches.StableProjection` with one public seed and a
  disjoint block of ``2 C`` columns per term (so each term has its own independent matrix, as separate runs
  of the protocol would);
* ``method="distribution"`` (default, fast) draws the encoding from its exact distribution: for a Gaussian
  (alpha = 2, unit-scale 2-stable = N(0, 2)) projection, ``P u ~ N(0, 2 ||u||^2 I_l)`` given ``u``, so
  ``e = sqrt(2) ||u|| z`` with ``z`` standard normal. Both routes give the same distribution of results
  (tested); the second costs ``O(l)`` per term instead of ``O(l C)`` stable variates.

The decoders are those of :mod:`fedstats.sketches.decoders`, applied to many encodings at once through their
homogeneity (:func:`fedstats.analyses.chi2.estimator.batch_decode`, re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse

from fedstats._validation import check_choice, check_int, check_real
from fedstats.analyses.chi2.calibration import DECODERS, batch_decode
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RNG, RandomSource, as_generator
from fedstats.sketches.stable import StableProjection

__all__ = [
    "FederatedScores",
    "batch_decode",
    "chi2_scores",
    "chi2_scores_from_tables",
    "federated_chi2_scores",
    "selection_overlap",
    "term_class_counts",
    "top_k",
]

_TERM_BLOCK = 4096


def _as_csr(presence: Any) -> scipy.sparse.csr_matrix:
    if scipy.sparse.issparse(presence):
        x = scipy.sparse.csr_matrix(presence)
    else:
        arr = np.asarray(presence)
        if arr.ndim != 2:
            raise DataError(
                f"presence must be a 2-d (documents x terms) matrix, got shape {arr.shape}"
            )
        x = scipy.sparse.csr_matrix(arr)
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise DataError(f"presence is empty (shape {x.shape})")
    if x.nnz and (np.asarray(x.data) < 0).any():
        raise DataError("presence has negative entries")
    x = x.astype(bool).astype(np.int64)  # presence, not counts
    return x


def _labels(labels: Any, n_docs: int, n_classes: int | None) -> tuple[np.ndarray, int]:
    y = np.asarray(labels)
    if y.shape != (n_docs,) or not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"labels must be {n_docs} integer class codes, got shape {y.shape}")
    if y.size and int(y.min()) < 0:
        raise DataError("labels must be non-negative class codes")
    c = int(y.max()) + 1 if n_classes is None else check_int("n_classes", n_classes, low=1)
    if int(y.max()) >= c:
        raise DataError(f"labels has a class code >= n_classes = {c}")
    return y.astype(np.int64), c


def term_class_counts(
    presence: Any, labels: Any, n_classes: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per term and class, the number of documents containing the term; and the class sizes.

    Parameters
    ----------
    presence : scipy.sparse matrix or array_like, shape (n_docs, n_terms)
        Term occurrence (any positive entry counts as present).
    labels : array_like of int, shape (n_docs,)
        Class code of each document in ``[0, n_classes)``.
    n_classes : int, optional
        Number of classes (default ``max(labels) + 1``).

    Returns
    -------
    present : numpy.ndarray
        ``(n_terms, n_classes)`` int64: row 0 of each term's ``2 x C`` table.
    class_totals : numpy.ndarray
        ``(n_classes,)`` int64 class sizes; row 1 of term ``t``'s table is ``class_totals - present[t]``.

    Raises
    ------
    DataError
        If the shapes disagree, a label is out of range or ``presence`` is empty or negative.
    """
    x = _as_csr(presence)
    y, c = _labels(labels, x.shape[0], n_classes)
    onehot = scipy.sparse.csr_matrix(
        (np.ones(y.size, dtype=np.int64), (np.arange(y.size), y)), shape=(y.size, c)
    )
    present = np.asarray((x.T @ onehot).toarray(), dtype=np.int64)
    return present, np.bincount(y, minlength=c).astype(np.int64)


def _expected(present_total: np.ndarray, class_totals: np.ndarray) -> np.ndarray:
    """``(n_terms, 2, C)`` expected counts ``v_x v_y / v`` of each term's table."""
    n = float(class_totals.sum())
    rows = np.stack([present_total, n - present_total], axis=1).astype(np.float64)  # (T, 2)
    return rows[:, :, None] * class_totals[None, None, :].astype(np.float64) / n


def chi2_scores_from_tables(tables: Any) -> np.ndarray:
    """Pearson chi-square statistic of each of many tables (no continuity correction).

    Parameters
    ----------
    tables : array_like, shape (n_tables, m_x, m_y)
        Non-negative counts.

    Returns
    -------
    numpy.ndarray
        ``(n_tables,)`` float64. Cells with zero expected count (an empty row or column) contribute 0, so a
        table with a single non-empty row or column scores 0 (no evidence of dependence).

    Raises
    ------
    DataError
        If ``tables`` is not 3-d, not finite or has a negative count.
    """
    t = np.asarray(tables, dtype=np.float64)
    if t.ndim != 3:
        raise DataError(f"tables must be (n_tables, m_x, m_y), got shape {t.shape}")
    if not np.isfinite(t).all() or (t < 0).any():
        raise DataError("tables must hold finite, non-negative counts")
    tot = t.sum(axis=(1, 2), keepdims=True)
    exp = t.sum(axis=2, keepdims=True) * t.sum(axis=1, keepdims=True) / np.where(tot > 0, tot, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(exp > 0, (t - exp) ** 2 / np.where(exp > 0, exp, 1.0), 0.0)
    return np.asarray(terms.sum(axis=(1, 2)))


def chi2_scores(presence: Any, labels: Any, n_classes: int | None = None) -> np.ndarray:
    """Exact chi-square statistic of every term's ``2 x C`` (present/absent x class) table.

    Parameters
    ----------
    presence : scipy.sparse matrix or array_like, shape (n_docs, n_terms)
    labels : array_like of int, shape (n_docs,)
    n_classes : int, optional

    Returns
    -------
    numpy.ndarray
        ``(n_terms,)`` float64 statistics (``scipy.stats.chi2_contingency(table, correction=False)[0]`` for
        each term whose table has no empty row or column; 0 for a term present in every or no document).

    Raises
    ------
    DataError
        As :func:`term_class_counts`.

    Notes
    -----
    This is the full ``2 x C`` statistic of Pang et al. 2023, Sec. 4.2. ``sklearn.feature_selection.chi2``
    computes only the "present" row's part of it, ``sum_c (O_c - E_c)^2 / E_c``.
    """
    present, totals = term_class_counts(presence, labels, n_classes)
    return _scores_from_counts(present, totals)


def _scores_from_counts(present: np.ndarray, totals: np.ndarray) -> np.ndarray:
    exp = _expected(present.sum(axis=1), totals)
    obs = np.stack([present, totals[None, :] - present], axis=1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(exp > 0, (obs - exp) ** 2 / np.where(exp > 0, exp, 1.0), 0.0)
    return np.asarray(terms.sum(axis=(1, 2)))


def top_k(scores: Any, k: int) -> np.ndarray:
    """Return the indices of the ``k`` largest scores (ties broken by the smaller index), sorted by index.

    Raises
    ------
    ParameterError
        If ``k`` is not in ``[1, len(scores)]``.
    """
    s = np.asarray(scores, dtype=np.float64)
    k = check_int("k", k, low=1, high=int(s.size))
    order = np.lexsort((np.arange(s.size), -s))
    return np.sort(order[:k])


def selection_overlap(a: Any, b: Any) -> float:
    """Fraction of the selected set ``a`` also in ``b`` (``|a & b| / |a|``; Pang et al. report 95.03%)."""
    sa, sb = np.unique(np.asarray(a)), np.unique(np.asarray(b))
    if sa.size == 0:
        raise DataError("the first selection is empty")
    return float(np.intersect1d(sa, sb).size) / float(sa.size)


@dataclass
class FederatedScores:
    """Result of :func:`federated_chi2_scores`.

    Attributes
    ----------
    statistic : numpy.ndarray
        ``(n_terms,)`` FED-chi^2 estimates.
    exact : numpy.ndarray
        ``(n_terms,)`` exact statistics over all clients (the centralized chi-square test).
    encoding_size, decoder, dropout, method
        The settings used.
    n_clients, n_round2_clients : int
        Clients in round 1 and survivors of round 2.
    bytes_per_client : int
        Bytes each client sends: round 1 the class-size and presence marginals (8 bytes each, ``C + n_terms``)
        and round 2 ``8 l`` bytes per term.
    bytes_whole_tables : int
        Bytes per client to send every term's whole ``2 x C`` table instead (``8 * 2 C * n_terms``).
    """

    statistic: np.ndarray
    exact: np.ndarray
    encoding_size: int
    decoder: str
    dropout: float
    method: str
    n_clients: int
    n_round2_clients: int
    bytes_per_client: int
    bytes_whole_tables: int
    details: dict[str, Any] = field(default_factory=dict)


def federated_chi2_scores(
    presence: Any,
    labels: Any,
    client_of_doc: Any,
    *,
    n_clients: int | None = None,
    n_classes: int | None = None,
    encoding_size: int = 50,
    decoder: str = "mean-of-squares",
    dropout: float = 0.0,
    method: str = "distribution",
    randomness: RNG | RandomSource,
) -> FederatedScores:
    """FED-chi^2 (Pang et al. 2023, Alg. 2) for every term's ``2 x C`` table, documents spread over clients.

    Parameters
    ----------
    presence : scipy.sparse matrix or array_like, shape (n_docs, n_terms)
        Term occurrence per document.
    labels : array_like of int, shape (n_docs,)
        Class codes.
    client_of_doc : array_like of int, shape (n_docs,)
        Client holding each document, in ``[0, n_clients)``.
    n_clients : int, optional
        Default ``max(client_of_doc) + 1``.
    n_classes : int, optional
        Default ``max(labels) + 1``.
    encoding_size : int, optional
        ``l`` (default 50, as in Sec. 4.2), at least 2.
    decoder : {"mean-of-squares", "geometric"}, optional
        ``"geometric"`` is the paper's (Li 2008); the mean of squares is the maximum-likelihood decoder.
    dropout : float, optional
        Fraction of clients (rounded to the nearest integer, drawn without replacement) that drop out of
        round 2, in [0, 1); round-1 marginals use every client.
    method : {"distribution", "projection"}, optional
        How round 2 is simulated (see the module docstring).
    randomness : numpy.random.Generator, SecureGenerator or RandomSource
        Dropout draws and the projection (a RandomSource gives independent named streams).

    Returns
    -------
    FederatedScores

    Raises
    ------
    ParameterError
        If a parameter is out of range.
    DataError
        If the inputs are inconsistent.
    """
    ell = check_int("encoding_size", encoding_size, low=2)
    decoder = check_choice("decoder", decoder, DECODERS)
    method = check_choice("method", method, ("distribution", "projection"))
    p_drop = check_real("dropout", dropout, low=0.0, high=1.0, high_open=True)
    x = _as_csr(presence)
    y, c = _labels(labels, x.shape[0], n_classes)
    owner = np.asarray(client_of_doc)
    if owner.shape != (x.shape[0],) or not np.issubdtype(owner.dtype, np.integer):
        raise DataError(f"client_of_doc must be {x.shape[0]} integer client indices")
    k = int(owner.max()) + 1 if n_clients is None else check_int("n_clients", n_clients, low=1)
    if int(owner.min()) < 0 or int(owner.max()) >= k:
        raise DataError(f"client_of_doc has entries outside [0, {k})")

    # Round 1: marginals from every client (exact sums).
    present, totals = term_class_counts(x, y, c)
    exact = _scores_from_counts(present, totals)
    n_terms = present.shape[0]
    expected = _expected(present.sum(axis=1), totals)  # (T, 2, C)

    # Round 2: survivors' scaled tables, summed; each client subtracts vbar / n.
    n_drop = round(p_drop * k)
    if n_drop >= k:
        raise ParameterError("dropout", dropout, f"a fraction leaving at least one of {k} clients")
    drop_gen = as_generator(randomness, "feature_selection", "dropout")
    dropped = np.asarray(drop_gen.permutation(k))[:n_drop]
    alive = np.ones(k, dtype=bool)
    alive[dropped] = False
    keep_docs = alive[owner]
    present_kept, totals_kept = term_class_counts(x[keep_docs], y[keep_docs], c)
    obs_kept = np.stack([present_kept, totals_kept[None, :] - present_kept], axis=1).astype(
        np.float64
    )
    frac = float(k - n_drop) / float(k)
    sqrt_exp = np.sqrt(expected)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(
            expected > 0, (obs_kept - frac * expected) / np.where(sqrt_exp > 0, sqrt_exp, 1.0), 0.0
        )
    u = u.reshape(n_terms, 2 * c)

    stats = np.empty(n_terms)
    if method == "distribution":
        gen = as_generator(randomness, "feature_selection", "encoding")
        norms = np.sqrt(np.sum(u * u, axis=1))
        for a in range(0, n_terms, _TERM_BLOCK):
            b = min(n_terms, a + _TERM_BLOCK)
            z = np.asarray(gen.standard_normal((b - a, ell)))
            stats[a:b] = batch_decode(np.sqrt(2.0) * norms[a:b, None] * z, decoder)
    else:
        seed_gen = as_generator(randomness, "feature_selection", "projection_seed")
        raw = np.asarray(seed_gen.integers(0, 2**63, size=4), dtype=np.int64)
        seed = sum(int(v) << (63 * i) for i, v in enumerate(raw.tolist()))
        proj = StableProjection(seed=seed, encoding_size=ell, alpha=2.0)
        for a in range(0, n_terms, _TERM_BLOCK):
            b = min(n_terms, a + _TERM_BLOCK)
            cols = np.arange(a * 2 * c, b * 2 * c, dtype=np.int64)
            pc = proj.columns(cols).reshape(b - a, 2 * c, ell)
            stats[a:b] = batch_decode(np.einsum("tc,tcl->tl", u[a:b], pc), decoder)
    return FederatedScores(
        statistic=stats,
        exact=exact,
        encoding_size=ell,
        decoder=decoder,
        dropout=p_drop,
        method=method,
        n_clients=k,
        n_round2_clients=k - n_drop,
        bytes_per_client=8 * (c + n_terms) + 8 * ell * n_terms,
        bytes_whole_tables=8 * 2 * c * n_terms,
    )
