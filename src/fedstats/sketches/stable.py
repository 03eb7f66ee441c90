"""Symmetric alpha-stable variables and stable random projections from a public seed.

A symmetric alpha-stable variable ``S`` with unit scale has characteristic function
``E exp(i t S) = exp(-|t|**alpha)`` for ``alpha`` in (0, 2]; ``alpha = 2`` is N(0, 2) (not N(0, 1)) and
``alpha = 1`` is the standard Cauchy. Stability is what makes the sketch work: for a real vector ``w`` and
i.i.d. ``S_j``, ``sum_j w_j S_j`` is distributed as ``(sum_j |w_j|**alpha)**(1/alpha) * S``, so the scale of
a projection carries the frequency moment ``F_alpha(w) = sum_j |w_j|**alpha`` (Indyk 2006; Pang et al. 2023,
Definition 3 and Algorithm 1).

Sampling uses the Chambers-Mallows-Stuck (CMS) transform of a uniform angle ``V`` in (-pi/2, pi/2) and an
independent exponential ``W``::

    S = sin(alpha V) / cos(V)**(1/alpha) * (cos((1 - alpha) V) / W)**((1 - alpha) / alpha)

which is exact for every alpha in (0, 2] (at alpha = 1 it is ``tan V``; at alpha = 2 it is ``2 sqrt(W) sin V``).

:class:`StableProjection` is the ``l x m`` projection matrix ``P`` of Algorithm 2, defined by a public seed
and generated *column by column* on demand: entry ``P[k, j]`` is a deterministic function of
``(seed, j, k)`` (counter-based), so a client only generates the columns of its non-zero cells and the whole
matrix is never materialized when it would not fit in memory. The same seed gives the same ``(V, W)`` for
every ``alpha``: projections at two stabilities built from one seed are *coupled*, which FED-H exploits
(:mod:`fedstats.analyses.entropy`).

Examples
--------
>>> import numpy as np
>>> p = StableProjection(seed=7, encoding_size=4, alpha=2.0)
>>> e = p.project(np.array([[1.0, 0.0, 2.0]]))
>>> e.shape
(1, 4)
>>> bool(np.allclose(e, p.project((np.array([0, 2]), np.array([1.0, 2.0])))))
True
"""

from __future__ import annotations

import functools
import hashlib
import math
from typing import Any

import numpy as np

from fedstats._validation import check_int, check_real
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RNG, SPLITMIX64_GAMMA, splitmix64

__all__ = [
    "MAX_DENSE_ENTRIES",
    "StableProjection",
    "check_alpha",
    "cms_transform",
    "coupled_columns",
    "project_coupled",
    "sample_symmetric_stable",
]

MAX_DENSE_ENTRIES = 1 << 24
"""Largest ``l * m`` kept as one dense cached matrix (128 MiB of float64); larger projections stream."""

_TWO_POW_53 = float(2**53)
_COLUMN_CHUNK_ENTRIES = 1 << 19  # entries of P generated per chunk when streaming (~40 MB peak)


def check_alpha(alpha: float) -> float:
    """Check a stability index: symmetric alpha-stable laws exist for ``alpha`` in (0, 2].

    Parameters
    ----------
    alpha : float
        The stability index.

    Returns
    -------
    float
        ``alpha``, as a float.

    Raises
    ------
    ParameterError
        If ``alpha`` is outside (0, 2].
    """
    return check_real("alpha", alpha, low=0.0, high=2.0, low_open=True)


def cms_transform(alpha: float, v: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Chambers-Mallows-Stuck transform: symmetric alpha-stable variates from an angle and an exponential.

    Parameters
    ----------
    alpha : float
        Stability, in (0, 2].
    v : numpy.ndarray of float64
        Angles, uniform in the open interval (-pi/2, pi/2).
    w : numpy.ndarray of float64
        Exponential(1) variates (> 0), same shape as ``v``.

    Returns
    -------
    numpy.ndarray of float64
        Variates with characteristic function ``exp(-|t|**alpha)``, shape of ``v``.

    Raises
    ------
    ParameterError
        If ``alpha`` is outside (0, 2].

    Notes
    -----
    Chambers, Mallows and Stuck (JASA 1976), symmetric case (beta = 0), evaluated in log space for the
    powers so that small alpha does not overflow in intermediate products.
    """
    a = check_alpha(alpha)
    if a == 2.0:
        out: np.ndarray = 2.0 * np.sin(v) * np.sqrt(w)
        return out
    if a == 1.0:
        return np.asarray(np.tan(v))
    log_scale = -np.log(np.cos(v)) / a + ((1.0 - a) / a) * (
        np.log(np.cos((1.0 - a) * v)) - np.log(w)
    )
    return np.asarray(np.sin(a * v) * np.exp(log_scale))


def sample_symmetric_stable(alpha: float, size: int | tuple[int, ...], rng: RNG) -> np.ndarray:
    """Draw symmetric alpha-stable variates with unit scale (characteristic function ``exp(-|t|^alpha)``).

    Parameters
    ----------
    alpha : float
        Stability, in (0, 2]. ``alpha = 2`` gives N(0, 2); ``alpha = 1`` the standard Cauchy.
    size : int or tuple of int
        Output shape.
    rng : numpy.random.Generator or SecureGenerator
        Source of the uniform angle and the exponential (only ``random`` and ``standard_exponential``
        are used, so the secure generator works).

    Returns
    -------
    numpy.ndarray of float64
        Shape ``size``.

    Raises
    ------
    ParameterError
        If ``alpha`` is outside (0, 2].

    Notes
    -----
    Chambers-Mallows-Stuck (1976); matches ``scipy.stats.levy_stable(alpha, 0)`` (S1 parametrisation,
    which coincides with S0 when beta = 0). Pang et al. 2023, Definition 2 with beta = 0 and F = 1.
    """
    check_alpha(alpha)
    shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    u = np.asarray(rng.random(shape), dtype=np.float64)
    # map [0, 1) to the open interval: (u - 1/2) * pi is in [-pi/2, pi/2); nudge the left end inside
    v = (u - 0.5) * math.pi
    v = np.where(v <= -math.pi / 2, -math.pi / 2 + 1e-300, v)
    w = np.asarray(rng.standard_exponential(shape), dtype=np.float64)
    w = np.where(w <= 0.0, np.finfo(np.float64).tiny, w)
    return cms_transform(alpha, v, w)


def _cms_from_parts(
    alpha: float, v: np.ndarray, log_cos_v: np.ndarray, log_w: np.ndarray
) -> np.ndarray:
    """CMS transform from precomputed ``log cos V`` and ``log W`` (shared across coupled stabilities)."""
    if alpha == 2.0:
        out: np.ndarray = 2.0 * np.sin(v) * np.exp(0.5 * log_w)
        return out
    if alpha == 1.0:
        return np.asarray(np.tan(v))
    c = (1.0 - alpha) / alpha
    log_scale = -log_cos_v / alpha + c * (np.log(np.cos((1.0 - alpha) * v)) - log_w)
    return np.asarray(np.sin(alpha * v) * np.exp(log_scale))


def coupled_columns(
    seed: int, encoding_size: int, alphas: tuple[float, ...], columns: Any
) -> list[np.ndarray]:
    """Columns of the projections of several stabilities from one seed, sharing their uniforms.

    Parameters
    ----------
    seed : int
        Public seed in ``[0, 2**256)``.
    encoding_size : int
        ``l`` >= 1.
    alphas : tuple of float
        Stabilities in (0, 2].
    columns : array_like of int
        Column indices (>= 0).

    Returns
    -------
    list of numpy.ndarray
        One ``(len(columns), l)`` array per alpha, equal to ``StableProjection(seed, l, a).columns(columns)``
        (the angle, the exponential and their logarithms are computed once for all alphas).
    """
    s = check_int("projection_seed", seed, low=0, high=2**256 - 1)
    ell = check_int("encoding_size", encoding_size, low=1)
    al = [check_alpha(a) for a in alphas]
    j = np.asarray(columns, dtype=np.int64).ravel()
    if j.size and int(j.min()) < 0:
        raise ParameterError("columns", int(j.min()), "non-negative column indices")
    outs = [np.empty((j.size, ell), dtype=np.float64) for _ in al]
    step = max(1, _COLUMN_CHUNK_ENTRIES // ell)
    for a in range(0, j.size, step):
        u = _column_uniforms(s, j[a : a + step], 2 * ell)
        v = (u[:, 0::2] - 0.5) * math.pi
        if al == [2.0]:
            # the Gaussian case alone: 2 sin(V) sqrt(W) without the logarithms of the general form
            outs[0][a : a + step] = 2.0 * np.sin(v) * np.sqrt(-np.log(u[:, 1::2]))
            continue
        log_w = np.log(-np.log(u[:, 1::2]))
        log_cos_v = np.log(np.cos(v)) if any(x not in (1.0, 2.0) for x in al) else v
        for out, alpha in zip(outs, al, strict=True):
            out[a : a + step] = _cms_from_parts(alpha, v, log_cos_v, log_w)
    return outs


def project_coupled(
    seed: int, encoding_size: int, alphas: tuple[float, ...], idx: Any, vals: Any
) -> list[np.ndarray]:
    """Project one sparse vector ``(idx, vals)`` at several stabilities from one seed (shared uniforms).

    Returns one ``(l,)`` array per alpha, equal to ``StableProjection(seed, l, a).project((idx, vals))[0]``
    up to rounding; memory ``O(len(alphas) * chunk)``, never ``l * m``.
    """
    i = np.asarray(idx, dtype=np.int64).ravel()
    x = np.asarray(vals, dtype=np.float64).ravel()
    if i.shape != x.shape:
        raise DataError(f"idx and vals must have the same shape, got {i.shape} and {x.shape}")
    if not np.isfinite(x).all():
        raise DataError("vals has a NaN or infinite value")
    ell = check_int("encoding_size", encoding_size, low=1)
    res = [np.zeros(ell) for _ in alphas]
    step = max(1, _COLUMN_CHUNK_ENTRIES // ell)
    for a in range(0, i.size, step):
        cols = coupled_columns(seed, ell, alphas, i[a : a + step])
        for r, c in zip(res, cols, strict=True):
            r += np.dot(x[a : a + step], c)
    return res


# ---------------------------------------------------------------------------------------------------
# counter-based public randomness
# ---------------------------------------------------------------------------------------------------


def _seed_keys(seed: int) -> tuple[np.uint64, np.uint64]:
    digest = hashlib.sha256(
        b"fedstats-stable-projection\x00" + seed.to_bytes(32, "little")
    ).digest()
    return (
        np.uint64(int.from_bytes(digest[:8], "little")),
        np.uint64(int.from_bytes(digest[8:16], "little")),
    )


def _column_uniforms(seed: int, columns: np.ndarray, count: int) -> np.ndarray:
    """Uniforms in (0, 1), shape ``(len(columns), count)``; row ``i`` depends only on (seed, columns[i])."""
    k1, k2 = _seed_keys(seed)
    with np.errstate(over="ignore"):
        j = np.asarray(columns, dtype=np.uint64)
        col_key = splitmix64(splitmix64(j * SPLITMIX64_GAMMA + k1) ^ k2)
        ctr = (np.arange(1, count + 1, dtype=np.uint64) * SPLITMIX64_GAMMA)[None, :]
        raw = splitmix64(col_key[:, None] + ctr)
    return ((raw >> np.uint64(11)).astype(np.float64) + 0.5) / _TWO_POW_53


@functools.lru_cache(maxsize=4)
def _dense_columns(seed: int, encoding_size: int, alpha: float, m: int) -> np.ndarray:
    p = StableProjection(seed, encoding_size, alpha)
    out = p.columns(np.arange(m, dtype=np.int64))
    out.setflags(write=False)
    return out


class StableProjection:
    """The public ``l x m`` stable projection matrix of FED-chi^2 / FED-H, generated on demand.

    Parameters
    ----------
    seed : int
        Public seed in ``[0, 2**256)`` (agreed with :mod:`fedstats.analyses.seed_agreement`).
    encoding_size : int
        ``l``, the number of rows (length of each encoding), >= 1.
    alpha : float
        Stability, in (0, 2].

    Raises
    ------
    ParameterError
        If a parameter is out of range.

    Notes
    -----
    Entry ``P[k, j]`` is the CMS transform of the uniforms number ``2k`` and ``2k + 1`` of column ``j``'s
    counter-based stream: ``u = SplitMix64(key_j + c * gamma)`` with ``key_j`` a mix of ``j`` and two 64-bit
    keys hashed (SHA-256) from the seed. Column ``j`` therefore depends only on ``(seed, j)`` (and its first
    ``l`` entries do not depend on ``l``: a longer encoding extends a shorter one). The projection is public,
    so its generator needs statistical quality, not secrecy; SplitMix64's output function is a strong
    64-bit mixer (it passes BigCrush). Pang et al. 2023, Algorithm 2 lines 11-13 (the seed agreement of
    lines 11-12 is replaced by commit-then-reveal).
    """

    def __init__(self, seed: int, encoding_size: int, alpha: float) -> None:
        self.seed = check_int("projection_seed", seed, low=0, high=2**256 - 1)
        self.encoding_size = check_int("encoding_size", encoding_size, low=1)
        self.alpha = check_alpha(alpha)

    def __repr__(self) -> str:
        return (
            f"StableProjection(seed={self.seed}, encoding_size={self.encoding_size}, "
            f"alpha={self.alpha})"
        )

    def columns(self, columns: Any) -> np.ndarray:
        """Columns ``j`` of ``P``, transposed: float64 array of shape ``(len(columns), l)``.

        Parameters
        ----------
        columns : array_like of int
            Column indices, each in ``[0, 2**63)``.

        Returns
        -------
        numpy.ndarray of float64
            Row ``i`` is column ``columns[i]`` of ``P``.
        """
        return coupled_columns(self.seed, self.encoding_size, (self.alpha,), columns)[0]

    def matrix(self, m: int) -> np.ndarray:
        """The dense ``(l, m)`` matrix (a read-only view of a cached array).

        Raises
        ------
        ParameterError
            If ``l * m`` exceeds :data:`MAX_DENSE_ENTRIES` (use :meth:`project`, which streams).
        """
        m = check_int("m", m, low=1)
        if m * self.encoding_size > MAX_DENSE_ENTRIES:
            raise ParameterError(
                "encoding_size * m",
                m * self.encoding_size,
                f"at most {MAX_DENSE_ENTRIES} for a dense matrix (project() streams larger ones)",
            )
        return _dense_columns(self.seed, self.encoding_size, self.alpha, m).T

    def project(self, values: Any, *, m: int | None = None) -> np.ndarray:
        """Encode vectors: ``values @ P.T``, touching only the columns where some value is non-zero.

        Parameters
        ----------
        values : array_like (n, m), scipy.sparse matrix (n, m), or tuple (idx, vals)
            Dense rows; a sparse matrix; or the sparse cells of clients as ``(idx, vals)`` with ``idx`` and
            ``vals`` both of shape ``(nnz,)`` (one client) or ``(n, k)`` (``n`` clients with ``k`` cells each,
            padded with zero values). Values must be finite.
        m : int, optional
            Number of columns of ``P``; only used to check sparse indices.

        Returns
        -------
        numpy.ndarray of float64
            Shape ``(n, l)`` (``(1, l)`` for one sparse client).

        Raises
        ------
        DataError
            If a value is not finite or an index is negative or ``>= m``.

        Notes
        -----
        When ``l * m`` fits in :data:`MAX_DENSE_ENTRIES` the whole matrix is generated once and cached
        (four most recent); otherwise columns are generated in chunks and dropped, so memory stays at
        ``O(n l + chunk)``.
        """
        if isinstance(values, tuple):
            return self._project_cells(values[0], values[1], m)
        if hasattr(values, "tocsc"):
            return self._project_scipy(values)
        x = np.asarray(values, dtype=np.float64)
        if x.ndim == 1:
            x = x[None, :]
        if x.ndim != 2:
            raise DataError(f"values must be (n, m), got shape {x.shape}")
        if not np.isfinite(x).all():
            raise DataError("values has a NaN or infinite value")
        n, mm = x.shape
        ell = self.encoding_size
        if mm * ell <= MAX_DENSE_ENTRIES:
            nz = np.flatnonzero(np.any(x != 0.0, axis=0))
            if nz.size * 2 > mm:
                return np.asarray(np.dot(x, self.matrix(mm).T))
            return np.asarray(np.dot(x[:, nz], self.columns(nz)))
        out = np.zeros((n, ell), dtype=np.float64)
        nz = np.flatnonzero(np.any(x != 0.0, axis=0))
        step = max(1, _COLUMN_CHUNK_ENTRIES // ell)
        for a in range(0, nz.size, step):
            cols = nz[a : a + step]
            out += np.dot(x[:, cols], self.columns(cols))
        return out

    def _project_scipy(self, sp: Any) -> np.ndarray:
        csc = sp.tocsc()
        n = csc.shape[0]
        data = np.asarray(csc.data, dtype=np.float64)
        if not np.isfinite(data).all():
            raise DataError("values has a NaN or infinite value")
        nz = np.flatnonzero(np.diff(csc.indptr))
        out = np.zeros((n, self.encoding_size), dtype=np.float64)
        step = max(1, _COLUMN_CHUNK_ENTRIES // self.encoding_size)
        for a in range(0, nz.size, step):
            cols = nz[a : a + step]
            out += np.asarray(csc[:, cols] @ self.columns(cols))
        return out

    def _project_cells(self, idx: Any, vals: Any, m: int | None) -> np.ndarray:
        i = np.asarray(idx)
        v = np.asarray(vals, dtype=np.float64)
        if i.shape != v.shape:
            raise DataError(f"idx and vals must have the same shape, got {i.shape} and {v.shape}")
        if i.ndim == 1:
            i, v = i[None, :], v[None, :]
        if i.ndim != 2:
            raise DataError(f"idx must be (nnz,) or (n, k), got shape {i.shape}")
        if not np.isfinite(v).all():
            raise DataError("vals has a NaN or infinite value")
        if i.size and (int(i.min()) < 0 or (m is not None and int(i.max()) >= m)):
            raise DataError(f"a cell index lies outside [0, {m if m is not None else 'inf'})")
        n = i.shape[0]
        out = np.zeros((n, self.encoding_size), dtype=np.float64)
        keep = v != 0.0
        if not keep.any():
            return out
        rows = np.broadcast_to(np.arange(n)[:, None], i.shape)[keep]
        cols, inv = np.unique(i[keep], return_inverse=True)
        pv = v[keep]
        step = max(1, _COLUMN_CHUNK_ENTRIES // self.encoding_size)
        for a in range(0, cols.size, step):
            pc = self.columns(cols[a : a + step])
            sel = (inv >= a) & (inv < a + step)
            contrib = pc[inv[sel] - a] * pv[sel, None]
            np.add.at(out, rows[sel], contrib)
        return out
