"""Partitioners from a dataset to clients, and contingency tables.

Every partitioner is exact (each row goes to exactly one client, every count is preserved) and vectorized
(no Python loop over clients or rows). Row partitioners return an *assignment*: an int64 array of shape
``(n_rows,)`` whose entry ``i`` is the client (``0 .. n_clients - 1``) that holds row ``i``;
:func:`client_indices` turns it into per-client row indices.

* :func:`one_per_client`: client ``i`` holds row ``i`` (the local-DP setting of papers 001 and 003).
* :func:`iid_partition`: a uniformly random split into clients whose sizes differ by at most one.
* :func:`label_ratio_sample`: a stratified sample whose label counts follow a ratio such as
  ``"91:1:1:1:1:1:1:1:1:1"`` (paper 000, Sec. 5: 2% of the images, label ratios [1:...:1], [91:1:...:1],
  [96:1:1:1:1], [99:1]).
* :func:`dirichlet_partition`: label skew where, for each label, the shares of the clients follow
  Dirichlet(alpha) (Hsu, Qi & Brown 2019, "Measuring the effects of non-identical data distribution").

Contingency tables (counts of two columns, globally or per client, and splitting a global table across
clients) are in :mod:`fedstats.datasets.tables`.

Randomness comes from a :data:`~fedstats.randomness.RNG` or a :class:`~fedstats.randomness.RandomSource`
(never a global generator) and uses only the methods :class:`~fedstats.randomness.SecureGenerator` offers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedstats._numeric import largest_remainder
from fedstats._validation import check_int, check_real
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RNG, RandomSource, as_generator

__all__ = [
    "Randomness",
    "allocate_counts",
    "client_indices",
    "dirichlet_partition",
    "dirichlet_proportions",
    "generator_for",
    "iid_partition",
    "label_ratio_sample",
    "one_per_client",
    "parse_label_ratios",
]

Randomness = RNG | RandomSource


def generator_for(rng: Randomness, *key: str) -> RNG:
    """The generator of a partitioner: ``rng`` itself, or the stream ``("datasets", *key)`` of a source.

    Raises
    ------
    ParameterError
        If ``rng`` is not a numpy Generator, a SecureGenerator or a RandomSource.
    """
    if not isinstance(rng, (np.random.Generator, RandomSource)) and not hasattr(rng, "random_raw"):
        raise ParameterError("rng", rng, "a numpy Generator, a SecureGenerator or a RandomSource")
    return as_generator(rng, "datasets", *key)


def _check_n_rows(n_rows: Any) -> int:
    return check_int("n_rows", n_rows, low=1)


def one_per_client(n_rows: int) -> np.ndarray:
    """Assignment of one row per client: client ``i`` holds row ``i``.

    Parameters
    ----------
    n_rows : int
        Number of rows (= clients), at least 1.

    Returns
    -------
    numpy.ndarray
        ``(n_rows,)`` int64, ``arange(n_rows)``.

    Raises
    ------
    ParameterError
        If ``n_rows`` is not a positive integer.
    """
    return np.arange(_check_n_rows(n_rows), dtype=np.int64)


def iid_partition(n_rows: int, n_clients: int, *, rng: Randomness) -> np.ndarray:
    """Uniformly random split of ``n_rows`` rows into ``n_clients`` clients of (almost) equal size.

    Client sizes are ``n_rows // n_clients`` or one more (the first ``n_rows % n_clients`` clients get
    the extra row); which rows a client holds is a uniformly random choice.

    Parameters
    ----------
    n_rows : int
        Number of rows, at least 1.
    n_clients : int
        Number of clients, in ``[1, n_rows]`` (no client is empty).
    rng : numpy.random.Generator, SecureGenerator or RandomSource
        Randomness (a RandomSource gives its stream ``("datasets", "iid")``).

    Returns
    -------
    numpy.ndarray
        ``(n_rows,)`` int64 assignment in ``[0, n_clients)``.

    Raises
    ------
    ParameterError
        If ``n_rows`` or ``n_clients`` is out of range.
    """
    n = _check_n_rows(n_rows)
    k = check_int("n_clients", n_clients, low=1, high=n)
    perm = np.asarray(generator_for(rng, "iid").permutation(n), dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    out[perm] = np.arange(n, dtype=np.int64) % k
    return out


def client_indices(assignment: Any, n_clients: int | None = None) -> list[np.ndarray]:
    """Row indices of each client from an assignment.

    Parameters
    ----------
    assignment : array_like of int, shape (n_rows,)
        Client of each row, in ``[0, n_clients)``.
    n_clients : int, optional
        Number of clients (default ``max(assignment) + 1``); clients without rows get an empty array.

    Returns
    -------
    list of numpy.ndarray
        ``n_clients`` int64 arrays of increasing row indices; their lengths sum to ``n_rows``.

    Raises
    ------
    ParameterError
        If ``n_clients`` is not a positive integer.
    DataError
        If an entry of ``assignment`` is negative or not below ``n_clients``.
    """
    a = np.asarray(assignment)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise DataError(
            f"assignment must be a 1-D integer array, got shape {a.shape}, dtype {a.dtype}"
        )
    if n_clients is None:
        k = int(a.max()) + 1 if a.size else 0
    else:
        k = check_int("n_clients", n_clients, low=1)
    if a.size and (a.min() < 0 or a.max() >= k):
        raise DataError(f"assignment has entries outside [0, {k}): min {a.min()}, max {a.max()}")
    if k == 0:
        return []
    order = np.argsort(a, kind="stable").astype(np.int64)
    sizes = np.bincount(a, minlength=k) if a.size else np.zeros(k, dtype=np.int64)
    return list(np.split(order, np.cumsum(sizes)[:-1]))


def parse_label_ratios(ratios: str | Sequence[float]) -> np.ndarray:
    """Parse a label ratio such as ``"91:1:1:1:1:1:1:1:1:1"`` (paper 000, Sec. 5.2).

    Parameters
    ----------
    ratios : str or sequence of float
        Colon-separated non-negative numbers (``"96:1:1:1:1"``, ``"1:1"``) or a sequence of them; the
        sum must be positive.

    Returns
    -------
    numpy.ndarray
        ``(n_labels,)`` float64 ratios.

    Raises
    ------
    ParameterError
        If the text does not parse, a ratio is negative or not finite, or all ratios are zero.
    """
    accepted = "colon-separated non-negative numbers with a positive sum, e.g. '91:1:1:1'"
    try:
        if isinstance(ratios, str):
            parts = [float(p) for p in ratios.strip().split(":")]
        else:
            parts = [float(p) for p in ratios]
    except (TypeError, ValueError) as exc:
        raise ParameterError("ratios", ratios, accepted) from exc
    arr = np.asarray(parts, dtype=np.float64)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0) or arr.sum() <= 0:
        raise ParameterError("ratios", ratios, accepted)
    return arr


def allocate_counts(total: int, weights: Any) -> np.ndarray:
    """Split the integer ``total`` in proportion to ``weights``, exactly (largest-remainder method).

    :func:`fedstats._numeric.largest_remainder` (parameters, counts and method), with the weights checked
    as label ratios first (:func:`parse_label_ratios`: its error names ``ratios``).

    Raises
    ------
    ParameterError
        If ``total`` is negative or the weights are invalid.
    """
    t = check_int("total", total, low=0)
    w = parse_label_ratios(list(np.asarray(weights, dtype=np.float64).ravel()))
    return largest_remainder(t, w)


def _label_codes(labels: Any, name: str = "labels") -> tuple[np.ndarray, np.ndarray]:
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.size == 0:
        raise DataError(f"{name} must be a non-empty 1-D array, got shape {arr.shape}")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise DataError(f"{name} has NaN or infinite values")
    uniques, codes = np.unique(arr, return_inverse=True)
    return uniques, codes.astype(np.int64).ravel()


def label_ratio_sample(
    labels: Any,
    ratios: str | Sequence[float],
    *,
    size: int | None = None,
    fraction: float | None = None,
    label_order: Sequence[Any] | None = None,
    rng: Randomness,
) -> np.ndarray:
    """Stratified sample without replacement whose label counts follow ``ratios``.

    Reproduces the experimental design of paper 000 (Sec. 5): "2% of the images are sampled such that
    the following ratios are satisfied", e.g. ``[91:1:1:1:1:1:1:1:1:1]``. The sample size is split over
    labels with :func:`allocate_counts` (exact), and within each label the rows are a uniformly random
    subset. Each sampled row is then typically one client.

    Parameters
    ----------
    labels : array_like, shape (n_rows,)
        Label of each row.
    ratios : str or sequence of float
        One ratio per label (see :func:`parse_label_ratios`); ratio ``k`` applies to the ``k``-th label of
        ``label_order`` (default: the distinct labels in sorted order).
    size : int, optional
        Total sample size in ``[1, n_rows]``. Give exactly one of ``size`` and ``fraction``.
    fraction : float, optional
        Sample size as a fraction of ``n_rows`` in ``(0, 1]`` (rounded to the nearest integer, at least 1).
    label_order : sequence, optional
        The labels the ratios refer to, in order (must be distinct and present in ``labels``).
    rng : numpy.random.Generator, SecureGenerator or RandomSource
        Randomness (stream ``("datasets", "label_ratio")`` of a RandomSource).

    Returns
    -------
    numpy.ndarray
        Sorted int64 row indices of the sample, of length ``size``.

    Raises
    ------
    ParameterError
        If the ratios do not match the number of labels, or ``size`` / ``fraction`` is invalid.
    DataError
        If a label has fewer rows than its share of the sample (the message names the label).
    """
    uniques, codes = _label_codes(labels)
    n = codes.size
    r = parse_label_ratios(ratios)
    if label_order is not None:
        order_arr = np.asarray(list(label_order))
        if order_arr.size != np.unique(order_arr).size:
            raise ParameterError("label_order", list(label_order), "distinct labels")
        pos = np.searchsorted(uniques, order_arr)
        pos = np.minimum(pos, uniques.size - 1)
        if not np.all(uniques[pos] == order_arr):
            raise ParameterError(
                "label_order",
                list(label_order),
                "labels present in the data: " + ", ".join(map(str, uniques)),
            )
        ratio_of_label = np.zeros(uniques.size)
        if r.size != order_arr.size:
            raise ParameterError(
                "ratios", ratios, f"{order_arr.size} ratios, one per label of label_order"
            )
        ratio_of_label[pos] = r
    else:
        if r.size != uniques.size:
            raise ParameterError(
                "ratios",
                ratios,
                f"{uniques.size} ratios, one per label (labels: {', '.join(map(str, uniques))})",
            )
        ratio_of_label = r
    if (size is None) == (fraction is None):
        raise ParameterError("size", size, "exactly one of size and fraction")
    if size is not None:
        total = check_int("size", size, low=1, high=n)
    else:
        f = check_real("fraction", fraction, low=0.0, high=1.0, low_open=True)
        total = max(1, round(f * n))
    counts = allocate_counts(total, ratio_of_label)
    available = np.bincount(codes, minlength=uniques.size)
    short = np.flatnonzero(counts > available)
    if short.size:
        j = int(short[0])
        raise DataError(
            f"label {uniques[j].item()!r} has {int(available[j])} rows but the ratio asks for {int(counts[j])}; "
            "lower size/fraction or change the ratios"
        )
    keys = np.asarray(generator_for(rng, "label_ratio").random(n), dtype=np.float64)
    order = np.lexsort((keys, codes))
    starts = np.concatenate(([0], np.cumsum(available)[:-1]))
    sorted_codes = codes[order]
    rank = np.arange(n, dtype=np.int64) - starts[sorted_codes]
    return np.sort(order[rank < counts[sorted_codes]]).astype(np.int64)


def _log_standard_gamma(rng: RNG, shape: float, size: int) -> np.ndarray:
    """Logs of ``size`` Gamma(shape, 1) variates (Marsaglia & Tsang 2000), vectorized rejection.

    For ``shape < 1`` the boost ``G(a) = G(a + 1) U^(1/a)`` is applied in log space, so tiny shapes
    (Dirichlet alpha = 0.01) do not underflow to zero.
    """
    a = shape + 1.0 if shape < 1.0 else shape
    d = a - 1.0 / 3.0
    c = 1.0 / np.sqrt(9.0 * d)
    out = np.empty(size, dtype=np.float64)
    todo = np.arange(size)
    while todo.size:
        m = todo.size
        x = np.asarray(rng.standard_normal(m), dtype=np.float64)
        u = np.asarray(rng.random(m), dtype=np.float64)
        v = (1.0 + c * x) ** 3
        ok = v > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            logv = np.where(ok, np.log(np.where(ok, v, 1.0)), 0.0)
            accept = ok & (np.log(u) < 0.5 * x * x + d - d * v + d * logv)
        out[todo[accept]] = np.log(d) + logv[accept]
        todo = todo[~accept]
    if shape < 1.0:
        u = np.asarray(rng.random(size), dtype=np.float64)
        u = np.where(u > 0, u, np.finfo(np.float64).tiny)
        out += np.log(u) / shape
    return out


def dirichlet_proportions(
    alpha: float, n_labels: int, n_clients: int, *, rng: Randomness
) -> np.ndarray:
    """For each label, the clients' shares drawn from a symmetric Dirichlet(alpha) distribution.

    Parameters
    ----------
    alpha : float
        Concentration in ``(0, inf)``: small values (0.1) give strong label skew, large values (100)
        nearly IID shares.
    n_labels, n_clients : int
        Positive sizes.
    rng : numpy.random.Generator, SecureGenerator or RandomSource
        Randomness (stream ``("datasets", "dirichlet")`` of a RandomSource).

    Returns
    -------
    numpy.ndarray
        ``(n_labels, n_clients)`` float64, rows non-negative and summing to 1.

    Raises
    ------
    ParameterError
        If a parameter is out of range.
    """
    a = check_real("alpha", alpha, low=0.0, high=np.inf, low_open=True, high_open=True)
    nl = check_int("n_labels", n_labels, low=1)
    k = check_int("n_clients", n_clients, low=1)
    logg = _log_standard_gamma(generator_for(rng, "dirichlet"), a, nl * k).reshape(nl, k)
    logg -= logg.max(axis=1, keepdims=True)
    p: np.ndarray = np.exp(logg)
    p /= p.sum(axis=1, keepdims=True)
    return p


def dirichlet_partition(
    labels: Any,
    n_clients: int,
    alpha: float,
    *,
    rng: Randomness,
    min_size: int = 0,
    max_tries: int = 100,
) -> np.ndarray:
    """Label-skewed split: for each label, the clients' shares follow Dirichlet(alpha).

    For label ``k`` with ``n_k`` rows, shares ``p_k ~ Dir(alpha 1_K)`` are drawn, the label's rows are put in
    random order and cut at ``round(n_k cumsum(p_k))``, so every row goes to exactly one client (Hsu, Qi &
    Brown 2019; the partitioner of Flower and FedLab). Draws are repeated (up to ``max_tries``) until
    every client has at least ``min_size`` rows.

    Parameters
    ----------
    labels : array_like, shape (n_rows,)
        Label of each row.
    n_clients : int
        Number of clients, at least 1.
    alpha : float
        Dirichlet concentration in ``(0, inf)``.
    rng : numpy.random.Generator, SecureGenerator or RandomSource
        Randomness.
    min_size : int, optional
        Minimum rows per client (default 0: empty clients allowed), at most ``n_rows // n_clients``.
    max_tries : int, optional
        Attempts to satisfy ``min_size``.

    Returns
    -------
    numpy.ndarray
        ``(n_rows,)`` int64 assignment in ``[0, n_clients)``.

    Raises
    ------
    ParameterError
        If a parameter is out of range.
    DataError
        If ``min_size`` was not met after ``max_tries`` draws.
    """
    _, codes = _label_codes(labels)
    n = codes.size
    k = check_int("n_clients", n_clients, low=1)
    check_real("alpha", alpha, low=0.0, high=np.inf, low_open=True, high_open=True)
    ms = check_int("min_size", min_size, low=0, high=n // k)
    tries = check_int("max_tries", max_tries, low=1)
    gen = generator_for(rng, "dirichlet_partition")
    n_labels = int(codes.max()) + 1
    per_label = np.bincount(codes, minlength=n_labels)
    starts = np.concatenate(([0], np.cumsum(per_label)[:-1]))
    offset = np.arange(n_labels, dtype=np.int64) * (n + 1)
    for _ in range(tries):
        p = dirichlet_proportions(alpha, n_labels, k, rng=gen)
        bounds = np.rint(np.cumsum(p, axis=1) * per_label[:, None]).astype(np.int64)
        bounds[:, -1] = per_label
        bounds = np.maximum.accumulate(np.minimum(bounds, per_label[:, None]), axis=1)
        keys = np.asarray(gen.random(n), dtype=np.float64)
        order = np.lexsort((keys, codes))
        sorted_codes = codes[order]
        rank = np.arange(n, dtype=np.int64) - starts[sorted_codes]
        flat = (bounds + offset[:, None]).ravel()
        client = np.searchsorted(flat, rank + offset[sorted_codes], side="right") - sorted_codes * k
        out = np.empty(n, dtype=np.int64)
        out[order] = client
        if ms == 0 or np.bincount(out, minlength=k).min() >= ms:
            return out
    raise DataError(
        f"no Dirichlet(alpha={alpha}) split gave every one of {k} clients at least {ms} rows in "
        f"{tries} tries; raise alpha or lower min_size"
    )
