r"""Exact (non-private) measures of statistical heterogeneity of vectors in :math:`[0, 1]^d`.

Paper 000 (Scott, Cormode & Maple), Section 3.1, with the corrections of ``PAPER_NOTES.md``:

* mean :math:`\mu = \frac1n\sum_i x_i` (Def. 3.2);
* dispersion :math:`D = \frac1n \sum_i \lVert x_i - \mu\rVert_2^p` (Defs. 3.3-3.4, exponent ``p >= 1``);
* within-vector variance :math:`s_i^2 = \frac1d\sum_j (x_i^{(j)} - \bar x_i)^2` and inverse-variance
  weights :math:`w_i = 1/s_i^2` (Def. 3.5), optionally bounded by a floor :math:`s_i^2 \ge v_{\min}`
  (needed for privacy: without it one client's weight, hence Q, is unbounded);
* weighted mean :math:`\bar\mu = \sum_i w_i x_i / \sum_i w_i` (the meta-analysis one; the paper's
  Def. 3.5 carries an extra :math:`1/n`, available as ``form="paper"``);
* Cochran's :math:`Q = \sum_i w_i \lVert x_i - \bar\mu\rVert_2^2`, a *sum* (Def. 4.16; Def. 3.7's
  average is ``Q / n``);
* :math:`I^2 = \max(0, 1 - (n - 1)/Q)` (Higgins & Thompson 2002; Def. 4.16).

Examples
--------
>>> import numpy as np
>>> x = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
>>> float(dispersion(x))
0.3333333333333333
>>> w = inverse_variance_weights(x, min_variance=0.01)  # the constant vector gets the cap 1/0.01
>>> w.tolist(), cochran_q(x, w), i_squared(cochran_q(x, w), 3)
([4.0, 4.0, 100.0], 4.0, 0.5)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats._validation import check_choice, check_real
from fedstats.errors import DataError

__all__ = [
    "WEIGHTED_MEAN_FORMS",
    "ExactHeterogeneity",
    "check_vectors",
    "cochran_q",
    "dispersion",
    "exact_heterogeneity",
    "i_squared",
    "inverse_variance_weights",
    "mean",
    "weighted_mean",
    "within_vector_variance",
]

WEIGHTED_MEAN_FORMS: tuple[str, ...] = ("standard", "paper")


def check_vectors(x: Any, *, need_weights: bool = False) -> np.ndarray:
    """Validate the clients' vectors and return them as float64 ``(n, d)``.

    Parameters
    ----------
    x : array_like, shape (n_clients, d)
        One vector per client; every entry in [0, 1] (pixels / 255). ``n_clients >= 2``.
    need_weights : bool
        Also require every within-vector variance to be positive (Q and I^2 use ``1 / s_i^2``): a client
        whose variance is zero (a constant vector) is refused even with a variance floor, since its weight
        would be set by the floor alone.

    Returns
    -------
    numpy.ndarray
        float64 array of shape ``(n_clients, d)``.

    Raises
    ------
    DataError
        If ``x`` is not 2-D, has fewer than two clients, has NaN/inf, has an entry outside [0, 1], or
        (with ``need_weights``) a client holds a constant vector.
    """
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise DataError(f"the vectors must have shape (n_clients, d), got shape {arr.shape}")
    n, d = arr.shape
    if n < 2:
        raise DataError(f"heterogeneity needs at least 2 clients, got {n}")
    if d < 1:
        raise DataError("the vectors are empty (d = 0)")
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad.any(axis=1))[0])
        raise DataError(f"client {i} has a NaN or infinite value")
    outside = (arr < 0.0) | (arr > 1.0)
    if outside.any():
        i = int(np.flatnonzero(outside.any(axis=1))[0])
        j = int(np.flatnonzero(outside[i])[0])
        raise DataError(
            f"client {i} has the value {arr[i, j]:g} at coordinate {j}, outside [0, 1] "
            "(scale pixels to [0, 1], e.g. divide by 255)"
        )
    if need_weights:
        if d < 2:
            raise DataError("Q and I^2 need d >= 2 (the within-vector variance of one value is 0)")
        zero = (
            np.ptp(arr, axis=1) == 0.0
        )  # exactly constant (the float variance may be 1e-34, not 0)
        if zero.any():
            i = int(np.flatnonzero(zero)[0])
            raise DataError(
                f"client {i} holds a constant vector (within-vector variance 0): its inverse-variance "
                f"weight 1/s^2 is infinite; {int(zero.sum())} such client(s); drop them or use "
                "--statistic dispersion"
            )
    return arr


def mean(x: np.ndarray) -> np.ndarray:
    r"""Mean vector :math:`\mu` (paper 000, Def. 3.2): float64 ``(d,)``."""
    out: np.ndarray = np.asarray(x, dtype=np.float64).mean(axis=0)
    return out


def dispersion(x: np.ndarray, p: float = 2.0, *, center: np.ndarray | None = None) -> float:
    r"""Average dispersion :math:`D = \frac1n\sum_i \lVert x_i - \mu\rVert_2^p` (Defs. 3.3-3.4).

    Parameters
    ----------
    x : numpy.ndarray, shape (n, d)
    p : float
        Dispersion exponent, >= 1 (default 2: the total variance).
    center : numpy.ndarray, shape (d,), optional
        Centre to use instead of the mean (the private protocol uses the released mean).

    Returns
    -------
    float
    """
    arr = np.asarray(x, dtype=np.float64)
    pp = check_real("p", p, low=1.0, high=64.0)
    c = mean(arr) if center is None else np.asarray(center, dtype=np.float64)
    sq = np.einsum("ij,ij->i", arr - c, arr - c)
    terms = sq if pp == 2.0 else np.power(sq, pp / 2.0)
    return float(terms.mean())


def within_vector_variance(x: np.ndarray) -> np.ndarray:
    """Within-vector variance :math:`s_i^2` of each client (over its d coordinates, ddof 0): ``(n,)``.

    For entries in [0, 1] it lies in [0, 1/4].
    """
    out: np.ndarray = np.asarray(x, dtype=np.float64).var(axis=1)
    return out


def inverse_variance_weights(x: np.ndarray, *, min_variance: float | None = None) -> np.ndarray:
    r"""Inverse-variance weights :math:`w_i = 1/\max(s_i^2, v_{\min})` (paper 000, Def. 3.5).

    Parameters
    ----------
    x : numpy.ndarray, shape (n, d)
    min_variance : float, optional
        Floor :math:`v_{\min}` in (0, 1/4]; bounds every weight by ``1 / min_variance``. Without it, a zero
        variance raises.

    Returns
    -------
    numpy.ndarray
        float64 ``(n,)``, each in ``[4, 1 / min_variance]`` (4 because :math:`s_i^2 \le 1/4`).

    Raises
    ------
    DataError
        If a variance is zero and no floor is given.
    """
    s2 = within_vector_variance(x)
    if min_variance is not None:
        v = check_real("min_variance", min_variance, low=0.0, high=0.25, low_open=True)
        floored: np.ndarray = 1.0 / np.maximum(s2, v)
        return floored
    zero = (s2 <= 0.0) | (np.ptp(np.asarray(x, dtype=np.float64), axis=1) == 0.0)
    if zero.any():
        i = int(np.flatnonzero(zero)[0])
        raise DataError(f"client {i} holds a constant vector: its weight 1/s^2 is infinite")
    return 1.0 / s2


def weighted_mean(x: np.ndarray, weights: np.ndarray, *, form: str = "standard") -> np.ndarray:
    r"""Weighted mean :math:`\sum_i w_i x_i / \sum_i w_i` (``form="paper"``: divided once more by n).

    Parameters
    ----------
    x : numpy.ndarray, shape (n, d)
    weights : numpy.ndarray, shape (n,)
        Positive weights.
    form : {"standard", "paper"}
        ``"paper"`` is paper 000's Def. 3.5, :math:`(\sum_i w_i x_i / n) / \sum_i w_i`.

    Returns
    -------
    numpy.ndarray
        float64 ``(d,)``.
    """
    check_choice("form", form, WEIGHTED_MEAN_FORMS)
    arr = np.asarray(x, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    m: np.ndarray = w @ arr / w.sum()
    return m / arr.shape[0] if form == "paper" else m


def cochran_q(x: np.ndarray, weights: np.ndarray, *, form: str = "standard") -> float:
    r"""Cochran's :math:`Q = \sum_i w_i \lVert x_i - \bar\mu\rVert_2^2` (a sum; paper 000, Def. 4.16).

    Parameters
    ----------
    x : numpy.ndarray, shape (n, d)
    weights : numpy.ndarray, shape (n,)
    form : {"standard", "paper"}
        Which weighted mean is the centre (see :func:`weighted_mean`).

    Returns
    -------
    float
    """
    arr = np.asarray(x, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    c = weighted_mean(arr, w, form=form)
    diff = arr - c
    return float(w @ np.einsum("ij,ij->i", diff, diff))


def i_squared(q: float, n: int) -> float:
    r""":math:`I^2 = \max(0, 1 - (n - 1)/Q)` (Higgins & Thompson 2002; paper 000, Def. 4.16).

    Returns 0 when ``Q <= 0`` (then ``Q < n - 1``).
    """
    if q <= 0.0:
        return 0.0
    return max(0.0, 1.0 - (n - 1) / q)


@dataclass(frozen=True)
class ExactHeterogeneity:
    r"""All exact statistics of one dataset.

    Attributes
    ----------
    n_clients, dim : int
    mean : numpy.ndarray
        ``(d,)``.
    dispersion : float
        Average dispersion with exponent ``p``.
    weighted_mean : numpy.ndarray or None
        ``(d,)``; None when weights were not computed.
    q : float or None
        Cochran's Q (a sum).
    i2 : float or None
    weight_sum : float or None
        :math:`\sum_i w_i`.
    clipped_weights : int
        Clients whose variance was below the floor.
    """

    n_clients: int
    dim: int
    mean: np.ndarray
    dispersion: float
    weighted_mean: np.ndarray | None
    q: float | None
    i2: float | None
    weight_sum: float | None
    clipped_weights: int


def exact_heterogeneity(
    x: Any,
    *,
    p: float = 2.0,
    weights: bool = True,
    min_variance: float | None = None,
    form: str = "standard",
) -> ExactHeterogeneity:
    """Compute every exact statistic (the truth a private run is measured against).

    Parameters
    ----------
    x : array_like, shape (n_clients, d)
        Entries in [0, 1], ``n_clients >= 2``.
    p : float
        Dispersion exponent, >= 1.
    weights : bool
        Compute the weighted mean, Q and I^2 (needs non-constant vectors).
    min_variance : float, optional
        Floor on the within-vector variance, in (0, 1/4] (use the same value as the private run).
    form : {"standard", "paper"}
        Weighted-mean form.

    Returns
    -------
    ExactHeterogeneity

    Raises
    ------
    DataError
        See :func:`check_vectors`.
    """
    arr = check_vectors(x, need_weights=weights)
    n, d = arr.shape
    mu = mean(arr)
    disp = dispersion(arr, p)
    if not weights:
        return ExactHeterogeneity(n, d, mu, disp, None, None, None, None, 0)
    w = inverse_variance_weights(arr, min_variance=min_variance)
    clipped = 0 if min_variance is None else int((within_vector_variance(arr) < min_variance).sum())
    q = cochran_q(arr, w, form=form)
    return ExactHeterogeneity(
        n,
        d,
        mu,
        disp,
        weighted_mean(arr, w, form=form),
        q,
        i_squared(q, n),
        float(w.sum()),
        clipped,
    )
