"""FED-chi^2, server side: the one estimator (decoding, intervals, p-values) the protocol and the fast path share.

The server decodes ``s = F_2(sum_i u_i)`` from the aggregated encoding ``e`` (each ``e_k`` is ``N(0, 2 s)``,
Pang et al. 2023, Eq. 4-5) with the mean of squares (maximum likelihood, exact chi-square interval; default)
or Li's geometric mean (the paper's Algorithm 1), and reports the p-value with ``(m_x - 1)(m_y - 1)``
degrees of freedom and whether the decision at ``level`` holds over the whole confidence interval
(:func:`finish`). :func:`batch_decode` is the same decoders applied to many encodings at once, and
:func:`sketched_p_value` the p-value of the sketched statistic itself (ours, valid under independence).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats._validation import check_choice, check_int, check_real
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RandomSource
from fedstats.results import AnalysisResult
from fedstats.sketches.decoders import (
    FrequencyMomentEstimate,
    geometric_mean_estimator,
    mean_of_squares_estimator,
)
from fedstats.sketches.modular import BITS
from fedstats.sketches.stable import StableProjection

__all__ = [
    "DECODERS",
    "Chi2Result",
    "attach_truth",
    "batch_decode",
    "check_options",
    "check_table",
    "check_tables",
    "chi_square_statistic",
    "client_bound",
    "decode",
    "finish",
    "kept_cells",
    "noise_averaged_p_value",
    "row_norms_and_offset",
    "sketch_noise_quantiles",
    "sketched_p_value",
]

DECODERS: tuple[str, ...] = ("mean-of-squares", "geometric")
_NORM_CHUNK = 1 << 16


@dataclass
class Chi2Result(AnalysisResult):
    """Result of FED-chi^2 (or of the exact test, for comparison).

    Attributes
    ----------
    statistic : float
        The decoded chi-square statistic (also in ``estimate``).
    p_value : float
        ``P(chi2_dof > statistic)``: the paper's p-value, which reads the sketched statistic as if it were
        exact (too small under independence: about 28% rejections at level 0.05 with l = 50).
    p_value_sketch : float
        The p-value of the sketched statistic itself, :func:`sketched_p_value`: valid (uniform) under
        independence without dropout. Use it for decisions and FDR control.
    p_value_ci : tuple of float
        p-values at the ends of ``ci`` (``(p(high), p(low))``).
    dof : int
        ``(m_x - 1)(m_y - 1)`` over the non-empty rows and columns.
    level : float
        Significance level of the decision.
    critical_value : float
        ``chi2_dof`` upper ``level`` quantile.
    rejected : bool
        ``statistic > critical_value`` (independence rejected at ``level``).
    decision_stable : bool
        True when the whole confidence interval lies on one side of ``critical_value``: the decision would
        be the same for any statistic in the interval.
    exact_statistic : float or None
        Pearson's statistic of the summed table, when simulating (also in ``truth``).
    exact_p_value : float or None
    multiplicative_error : float or None
        ``|statistic - exact_statistic| / exact_statistic`` (the paper's epsilon-hat), when simulating.
    bytes_full_table : int
        What a client would send to aggregate its whole table in the same field instead
        (``ceil(m_x m_y bits / 8)``); compare with ``bytes_per_client``
        (``ceil((m_x + m_y) bits / 8) + ceil(l bits / 8)``).
    encoding_size : int
    decoder : str
    bits : int
    frac_bits : int
    n_dropped : int
        Clients that dropped out before round 2.
    test : str
        ``"chi2"`` or ``"g-test"``.
    """

    statistic: float = 0.0
    p_value: float = 1.0
    p_value_sketch: float = 1.0
    p_value_ci: tuple[float, float] | None = None
    dof: int = 0
    level: float = 0.05
    critical_value: float = 0.0
    rejected: bool = False
    decision_stable: bool = True
    exact_statistic: float | None = None
    exact_p_value: float | None = None
    multiplicative_error: float | None = None
    bytes_full_table: int = 0
    encoding_size: int = 0
    decoder: str = "mean-of-squares"
    bits: int = 64
    frac_bits: int = 0
    n_dropped: int = 0
    test: str = "chi2"


def check_options(
    encoding_size: int, decoder: str, bits: int, confidence: float, level: float
) -> tuple[int, str, int, float, float]:
    """Validate the options shared by the protocol and the fast path.

    Returns
    -------
    (encoding_size, decoder, bits, confidence, level)

    Raises
    ------
    ParameterError
        If ``encoding_size < 2``, the decoder is unknown, ``bits`` is not 16, 32 or 64, or ``confidence``
        or ``level`` is outside (0, 1).
    """
    ell = check_int("encoding_size", encoding_size, low=2)
    dec = check_choice("decoder", decoder, DECODERS)
    if isinstance(bits, bool) or bits not in BITS:
        raise ParameterError("bits", bits, "one of 16, 32, 64")
    conf = check_real("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    lev = check_real("level", level, low=0.0, high=1.0, low_open=True, high_open=True)
    return ell, dec, int(bits), conf, lev


def check_tables(tables: Any, name: str = "tables") -> np.ndarray:
    """Validate ``(n_clients, m_x, m_y)`` whole-number, non-negative counts; return them as int64.

    Raises
    ------
    DataError
        If the shape, the dtype or a count is wrong.
    """
    arr = np.asarray(tables)
    if arr.ndim != 3:
        raise DataError(f"{name} must have shape (n_clients, m_x, m_y), got {arr.shape}")
    if arr.size == 0:
        raise DataError(f"{name} is empty")
    if not np.issubdtype(arr.dtype, np.integer):
        if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
            raise DataError(f"{name} must hold whole-number counts, got dtype {arr.dtype}")
        if not np.isfinite(arr).all() or not np.array_equal(arr, np.round(arr)):
            raise DataError(f"{name} must hold whole-number counts (finite integers)")
        arr = arr.astype(np.int64)
    if (arr < 0).any():
        idx = np.unravel_index(int(np.argmax(arr.ravel() < 0)), arr.shape)
        raise DataError(f"{name} has a negative count at index {tuple(int(i) for i in idx)}")
    return arr.astype(np.int64, copy=False)


def check_table(table: Any, name: str = "table") -> np.ndarray:
    """Validate one ``(m_x, m_y)`` table of counts (as :func:`check_tables`); return it as int64."""
    arr = np.asarray(table)
    if arr.ndim != 2:
        raise DataError(f"{name} must have shape (m_x, m_y), got {arr.shape}")
    out: np.ndarray = check_tables(arr[None], name)[0]
    return out


def kept_cells(vx: np.ndarray, vy: np.ndarray, drop_empty: bool) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the non-empty rows and columns of the summed table.

    Raises
    ------
    DataError
        On an empty row or column unless ``drop_empty``, and when fewer than 2 x 2 are non-empty.
    """
    rows = np.flatnonzero(vx > 0)
    cols = np.flatnonzero(vy > 0)
    if not drop_empty and (rows.size < vx.size or cols.size < vy.size):
        er = np.flatnonzero(vx <= 0).tolist()
        ec = np.flatnonzero(vy <= 0).tolist()
        what = []
        if er:
            what.append(f"row(s) {er[:5]}")
        if ec:
            what.append(f"column(s) {ec[:5]}")
        raise DataError(
            f"the summed table has empty {' and '.join(what)} (expected counts 0); remove them or "
            "pass drop_empty=True"
        )
    if rows.size < 2 or cols.size < 2:
        raise DataError(
            f"the summed table has {rows.size} non-empty row(s) and {cols.size} column(s); need 2 x 2"
        )
    return rows, cols


def chi_square_statistic(table: Any) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom of a global table (empty rows/columns dropped).

    Parameters
    ----------
    table : array_like of int, shape (m_x, m_y)

    Returns
    -------
    statistic : float
    dof : int
        ``(m_x' - 1)(m_y' - 1)`` over the non-empty rows and columns.

    Raises
    ------
    DataError
        If fewer than two rows or columns are non-empty, or a count is negative.
    """
    t = check_table(table).astype(np.float64)
    rows, cols = kept_cells(t.sum(axis=1), t.sum(axis=0), True)
    k = t[np.ix_(rows, cols)]
    vbar = np.outer(k.sum(axis=1), k.sum(axis=0)) / k.sum()
    return float(((k - vbar) ** 2 / vbar).sum()), int((rows.size - 1) * (cols.size - 1))


def row_norms_and_offset(proj: StableProjection, sq: np.ndarray) -> tuple[float, np.ndarray]:
    """``max_k ||P_k||_2`` and ``P sq`` in one streamed pass over the columns (public values).

    Parameters
    ----------
    proj : StableProjection
        The public ``l x m`` projection.
    sq : numpy.ndarray
        float64 vector of length ``m`` (``sqrt(vbar)``, or zeros for the row norms alone).

    Returns
    -------
    (float, numpy.ndarray)
        The largest row norm and ``P sq`` (shape ``(l,)``).
    """
    m = sq.size
    acc = np.zeros(proj.encoding_size)
    off = np.zeros(proj.encoding_size)
    for a in range(0, m, _NORM_CHUNK):
        c = proj.columns(np.arange(a, min(m, a + _NORM_CHUNK)))
        acc += (c * c).sum(axis=0)
        off += np.dot(sq[a : a + _NORM_CHUNK], c)
    return float(np.sqrt(acc.max())), off


def client_bound(vbar: np.ndarray, max_cell: int, n: int, row_norm: float) -> float:
    """Public bound on any client's ``|P u_i|_k``.

    ``||P_k|| * ||u_i||`` with ``|u_i(c)| <= max(M, vbar_c / n) / sqrt(vbar_c)``, ``M`` = ``max_cell``.
    """
    u2 = float((np.maximum(float(max_cell), vbar / n) ** 2 / vbar).sum())
    return row_norm * math.sqrt(u2)


def decode(
    e: np.ndarray, decoder: str, confidence: float, resolution: float = 0.0
) -> FrequencyMomentEstimate:
    """Decode ``F_2`` from the aggregated encoding ``e`` (shape ``(l,)``, float64).

    ``decoder="mean-of-squares"`` is the maximum-likelihood estimator (exact chi-square interval);
    ``"geometric"`` is Li's geometric mean (Pang et al. 2023, Algorithm 1), with ``resolution`` the
    fixed-point grid step (an exactly-zero coordinate is read as a quarter of it).
    """
    if decoder == "mean-of-squares":
        return mean_of_squares_estimator(e, confidence=confidence)
    return geometric_mean_estimator(e, 2.0, confidence=confidence, resolution=resolution)


_CALIBRATION_DRAWS = 20_000


@functools.lru_cache(maxsize=64)
def _geometric_noise(encoding_size: int, points: int) -> np.ndarray:
    rng = RandomSource(0).public("fed-chi2", "geometric-noise", encoding_size)
    z = np.asarray(rng.standard_normal((_CALIBRATION_DRAWS, encoding_size)))
    g = np.sort(batch_decode(math.sqrt(2.0) * z, "geometric"))
    return np.asarray(np.quantile(g, (np.arange(points) + 0.5) / points))


def sketch_noise_quantiles(encoding_size: int, decoder: str, points: int = 2000) -> np.ndarray:
    """Quantiles of the decoder's multiplicative noise ``G`` (the decoded statistic when the truth is 1).

    With alpha = 2 the aggregated encoding is ``sqrt(s) * N(0, 2)^l`` (quantization aside), so the decoded
    statistic is ``s * G`` with ``G`` independent of ``s``. For the mean of squares ``G = chi2_l / l``
    exactly, and its quantiles are computed in closed form; for the geometric mean they come from 20,000
    draws of a fixed public stream (deterministic, cached per ``l``).

    Parameters
    ----------
    encoding_size : int
        ``l >= 2``.
    decoder : {"mean-of-squares", "geometric"}
    points : int
        Number of quantile midpoints ``(i + 1/2) / points``, >= 10.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(points,)``, increasing.

    Raises
    ------
    ParameterError
        If ``l < 2``, the decoder is unknown or ``points < 10``.
    """
    ell = check_int("encoding_size", encoding_size, low=2)
    decoder = check_choice("decoder", decoder, DECODERS)
    points = check_int("points", points, low=10)
    if decoder == "mean-of-squares":
        import scipy.stats  # lazily (import cost)

        u = (np.arange(points) + 0.5) / points
        return np.asarray(scipy.stats.chi2.ppf(u, ell) / ell)
    return _geometric_noise(ell, points)


def noise_averaged_p_value(statistic: Any, dof: int, noise_quantiles: Any) -> Any:
    """``P(s G > x)`` for ``s ~ chi2_dof`` and ``G`` given by quantile points: the average of
    ``chi2_sf(x / G, dof)`` over the points.

    Evaluated exactly on 2,000 log-spaced values between the smallest and largest positive ``x`` and
    interpolated in ``log x`` (the function is smooth and monotone); a non-positive ``x`` gets 1.

    Parameters
    ----------
    statistic : float or array_like
        Decoded statistic(s), any shape.
    dof : int
        Degrees of freedom, >= 1.
    noise_quantiles : array_like of float, shape (k,)
        Positive quantile points of ``G`` (e.g. :func:`sketch_noise_quantiles`).

    Returns
    -------
    float or numpy.ndarray
        Same shape as ``statistic``, in [0, 1].

    Raises
    ------
    ParameterError
        If ``dof < 1``.
    """
    dof = check_int("dof", dof, low=1)
    x = np.asarray(statistic, dtype=np.float64)
    flat = x.ravel()
    pos = flat > 0
    out = np.ones(flat.size)
    if pos.any():
        lo, hi = np.log(flat[pos].min()), np.log(flat[pos].max())
        grid = np.exp(np.linspace(lo, hi, 2000)) if hi > lo else np.exp(np.array([lo]))
        import scipy.stats  # lazily (import cost)

        g = np.asarray(noise_quantiles, dtype=np.float64)[None, :]
        p_grid = scipy.stats.chi2.sf(grid[:, None] / g, dof).mean(axis=1)
        out[pos] = np.interp(np.log(flat[pos]), np.log(grid), p_grid)
    res = out.reshape(x.shape)
    return float(res) if res.ndim == 0 else res


def sketched_p_value(statistic: Any, dof: int, *, encoding_size: int, decoder: str) -> Any:
    """p-value of a sketched chi-square statistic under independence.

    Under independence the exact statistic is ``s ~ chi2_dof`` and the decoded one ``s * G`` with ``G`` the
    decoder's noise (:func:`sketch_noise_quantiles`), so ``P(s G > x) = E_G[chi2_sf(x / G, dof)]``
    (:func:`noise_averaged_p_value` over 2,000 quantile midpoints of ``G``).
    The paper (Pang et al. 2023, Alg. 2) reads ``chi2_sf(x, dof)`` instead, as if ``x`` were exact; that
    p-value is too small under independence (measured: 28% rejections at level 0.05 with l = 50, against
    4% for the exact test; ``results/fed-chi2/``). This one is uniform under independence without dropout
    (dropout shrinks the statistic and makes it conservative).

    Parameters
    ----------
    statistic : float or array_like
        Decoded statistic(s), >= 0.
    dof : int
        Degrees of freedom, >= 1.
    encoding_size : int
        ``l >= 2``.
    decoder : {"mean-of-squares", "geometric"}

    Returns
    -------
    float or numpy.ndarray
        Same shape as ``statistic``, in [0, 1].

    Raises
    ------
    ParameterError
        If ``dof < 1``, ``l < 2`` or the decoder is unknown.
    """
    dof = check_int("dof", dof, low=1)
    return noise_averaged_p_value(statistic, dof, sketch_noise_quantiles(encoding_size, decoder))


def finish(
    est: FrequencyMomentEstimate,
    *,
    dof: int,
    level: float,
    n_clients: int,
    n_dropped: int,
    m_x: int,
    m_y: int,
    ell: int,
    bits: int,
    frac_bits: int,
    decoder: str,
    test: str = "chi2",
    details: dict[str, Any] | None = None,
) -> Chi2Result:
    """The result of a decoded statistic: p-values, decision at ``level`` and its stability, cost.

    Parameters
    ----------
    est : FrequencyMomentEstimate
        The decoded statistic and its interval.
    dof : int
        Degrees of freedom ``(m_x - 1)(m_y - 1)`` over the kept rows and columns.
    level : float
        Significance level, in (0, 1).
    n_clients, n_dropped : int
        Clients in the final sum, and clients lost since round 1.
    m_x, m_y, ell, bits, frac_bits : int
        Table shape, report length of round 2, field width and fixed-point fraction bits (for the
        communication cost ``ceil((m_x + m_y) bits / 8) + ceil(l bits / 8)`` bytes per client).
    decoder : str
    test : {"chi2", "g-test"}
        ``"g-test"`` gives the tag ``"entropy.g_test"`` and reads the p-value without the sketch noise.
    details : dict, optional

    Returns
    -------
    Chi2Result
    """
    import scipy.stats  # lazily (import cost)

    stat = est.estimate
    crit = float(scipy.stats.chi2.isf(level, dof))
    lo, hi = est.ci
    return Chi2Result(
        analysis="chi2" if test == "chi2" else "entropy.g_test",
        estimate=stat,
        ci=(lo, hi),
        standard_error=est.relative_standard_error * stat,
        confidence=est.confidence,
        n_clients=n_clients,
        bytes_per_client=math.ceil((m_x + m_y) * bits / 8) + math.ceil(ell * bits / 8),
        statistic=stat,
        p_value=float(scipy.stats.chi2.sf(stat, dof)),
        p_value_sketch=float(sketched_p_value(stat, dof, encoding_size=ell, decoder=decoder))
        if test == "chi2"
        else float(scipy.stats.chi2.sf(stat, dof)),
        p_value_ci=(float(scipy.stats.chi2.sf(hi, dof)), float(scipy.stats.chi2.sf(lo, dof))),
        dof=dof,
        level=level,
        critical_value=crit,
        rejected=bool(stat > crit),
        decision_stable=bool(lo > crit or hi <= crit),
        bytes_full_table=math.ceil(m_x * m_y * bits / 8),
        encoding_size=ell,
        decoder=decoder,
        bits=bits,
        frac_bits=frac_bits,
        n_dropped=n_dropped,
        test=test,
        details=details or {},
    )


def attach_truth(res: Chi2Result, exact: float, dof: int) -> Chi2Result:
    """Record the exact statistic of a simulation: ``truth``, its p-value and the multiplicative error."""
    import scipy.stats  # lazily (import cost)

    res.truth = exact
    res.exact_statistic = exact
    res.exact_p_value = float(scipy.stats.chi2.sf(exact, dof))
    res.multiplicative_error = abs(res.statistic - exact) / exact if exact > 0 else math.inf
    return res


def batch_decode(encodings: Any, decoder: str = "mean-of-squares") -> np.ndarray:
    """Decode ``F_2`` from many aggregated Gaussian encodings at once (estimates only, no intervals).

    Uses the decoders of :mod:`fedstats.sketches.decoders` through their homogeneity: the mean-of-squares
    estimate of ``e`` is its estimate on the all-ones encoding times ``mean(e^2)``, and the geometric-mean
    estimate is its estimate on all-ones times ``exp(2 mean log|e|)``; each decoder is called once per
    encoding size.

    Parameters
    ----------
    encodings : array_like, shape (n, l)
        ``l >= 2`` entries per row, finite.
    decoder : {"mean-of-squares", "geometric"}

    Returns
    -------
    numpy.ndarray
        ``(n,)`` float64 estimates (0 for a row with an exactly-zero entry under the geometric mean).

    Raises
    ------
    ParameterError
        If ``l < 2`` or the decoder is unknown.
    DataError
        If an encoding is not finite.
    """
    decoder = check_choice("decoder", decoder, DECODERS)
    e = np.asarray(encodings, dtype=np.float64)
    if e.ndim != 2:
        raise DataError(f"encodings must be (n, l), got shape {e.shape}")
    ell = e.shape[1]
    if ell < 2:
        raise ParameterError("encoding_size", ell, "an integer >= 2")
    if not np.isfinite(e).all():
        raise DataError("an encoding has a NaN or infinite value")
    ones = np.ones(ell)
    if decoder == "mean-of-squares":
        return np.asarray(mean_of_squares_estimator(ones).estimate * np.mean(e * e, axis=1))
    base = geometric_mean_estimator(ones, 2.0).estimate
    absv = np.abs(e)
    zero = (absv == 0.0).any(axis=1)
    with np.errstate(divide="ignore"):
        out = base * np.exp(2.0 * np.mean(np.log(np.where(absv > 0, absv, 1.0)), axis=1))
    return np.where(zero, 0.0, out)
