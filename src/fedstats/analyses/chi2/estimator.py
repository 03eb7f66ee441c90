"""FED-chi^2, server side: the one estimator (decoding, intervals, p-values) the protocol and the fast path share.

The server decodes ``s = F_2(sum_i u_i)`` from the aggregated encoding ``e`` (each ``e_k`` is ``N(0, 2 s)``,
Pang et al. 2023, Eq. 4-5) with the mean of squares (maximum likelihood, exact chi-square interval; default)
or Li's geometric mean (the paper's Algorithm 1), and reports the p-value with ``(m_x - 1)(m_y - 1)``
degrees of freedom and whether the decision at ``level`` holds over the whole confidence interval
(:func:`finish`). The p-value of the sketched statistic itself (ours, valid under independence) and batch
decoding are in :mod:`fedstats.analyses.chi2.calibration`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Unpack

import numpy as np

from fedstats._numeric import chi2_isf, chi2_sf
from fedstats._validation import check_choice, check_int, check_open_unit
from fedstats.analyses.chi2.calibration import (
    DECODERS,
    normal_averaged_p_value,
    sketched_p_value,
)
from fedstats.analyses.chi2.null import (
    NullSample,
    Round2Inputs,
    Round2Plan,
    round2_plan,
    shifted_interval,
)
from fedstats.analyses.chi2.privacy import Chi2Privacy
from fedstats.errors import DataError, ParameterError
from fedstats.results import AnalysisResult
from fedstats.secagg.quantize import BITS
from fedstats.sketches.decoders import (
    FrequencyMomentEstimate,
    geometric_mean_estimator,
    mean_of_squares_estimator,
)
from fedstats.sketches.stable import StableProjection

__all__ = [
    "Chi2Result",
    "Sketch",
    "attach_truth",
    "check_client_tables",
    "check_options",
    "check_shape",
    "check_table",
    "check_tables",
    "chi_square_statistic",
    "client_bound",
    "decode",
    "finish",
    "finish_encoding",
    "kept_cells",
    "projection_norms",
    "projection_plan",
]

_NORM_CHUNK = 1 << 16


@dataclass
class Chi2Result(AnalysisResult):
    """Result of FED-chi^2 (or of the exact test, for comparison).

    Attributes
    ----------
    estimate : float
        The decoded chi-square statistic (alias :attr:`statistic`, the paper's name).
    p_value : float
        The p-value of the RELEASED statistic under independence, the one the decision uses. Without DP:
        :func:`sketched_p_value` (the decoder's noise averaged exactly; uniform under independence without
        dropout, conservative with it). With DP (``epsilon``): the Monte Carlo p-value
        ``(1 + #{R_b >= R}) / (B + 1)`` of :mod:`fedstats.analyses.chi2.null` (a parametric bootstrap through
        both rounds' noise, the sketch and the decoder), with :attr:`p_value_mc_error`.
    p_value_sketch : float
        The same as :attr:`p_value` (kept under its earlier name).
    p_value_paper : float
        ``P(chi2_dof > statistic)``: the paper's p-value (Pang et al. 2023, Alg. 2), which reads the
        sketched (and noisy) statistic as if it were exact; too small under independence (about 28%
        rejections at level 0.05 with l = 50, 42% with DP at epsilon 0.5). For reproductions only.
    p_value_mc_error : float
        Monte Carlo standard error of :attr:`p_value`, ``sqrt(p (1 - p) / B)`` (0 when it is computed, not
        simulated).
    null_replicates : int
        ``B``, the simulated null replicates behind :attr:`p_value` (0 when it is computed).
    p_value_method : str
        ``"sketch"`` (computed), ``"parametric-bootstrap"`` (DP) or ``"chi2"`` (G-test).
    p_value_ci : tuple of float
        ``(chi2_sf(high), chi2_sf(low))``: an interval for the exact (noise-free, unsketched) test's p-value,
        from the interval on the exact statistic.
    dof : int
        ``(m_x - 1)(m_y - 1)`` over the non-empty rows and columns.
    level : float
        Significance level of the decision.
    critical_value : float
        ``chi2_dof`` upper ``level`` quantile: the exact (noise-free) test's threshold, shown for reference;
        the decision does not compare the released statistic with it.
    rejected : bool
        ``p_value <= level`` (independence rejected at ``level``).
    decision_stable : bool
        True when the decision would be the same for any decoded value in the confidence interval (the
        p-value at both ends on the same side of ``level``) and, with DP, ``|p_value - level|`` exceeds 3
        Monte Carlo standard errors.
    truth : float or None
        Pearson's statistic of the summed table, when simulating (alias :attr:`exact_statistic`).
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

    p_value: float = 1.0
    p_value_sketch: float = 1.0
    p_value_paper: float = 1.0
    p_value_mc_error: float = 0.0
    null_replicates: int = 0
    p_value_method: str = "sketch"
    p_value_ci: tuple[float, float] | None = None
    dof: int = 0
    level: float = 0.05
    critical_value: float = 0.0
    rejected: bool = False
    decision_stable: bool = True
    exact_p_value: float | None = None
    multiplicative_error: float | None = None
    bytes_full_table: int = 0
    encoding_size: int = 0
    decoder: str = "mean-of-squares"
    bits: int = 64
    frac_bits: int = 0
    n_dropped: int = 0
    test: str = "chi2"

    @property
    def statistic(self) -> float:
        """The decoded statistic: :attr:`estimate` under the paper's name."""
        return float(self.estimate) if self.estimate is not None else math.nan

    @property
    def exact_statistic(self) -> float | None:
        """Pearson's statistic of the summed table (simulation): :attr:`truth` under the paper's name."""
        return None if self.truth is None else float(self.truth)


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
    conf = check_open_unit("confidence", confidence)
    lev = check_open_unit("level", level)
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


def check_client_tables(tables: Any, drop_empty: bool) -> tuple[np.ndarray, np.ndarray]:
    """Validate clients' tables and their sum for a test of independence.

    Returns
    -------
    (tables, total)
        int64 arrays of shapes ``(n, m_x, m_y)`` and ``(m_x, m_y)``.

    Raises
    ------
    DataError
        As :func:`check_tables`, and for an empty row or column of the sum unless ``drop_empty``.
    """
    t = check_tables(tables)
    total = t.sum(axis=0)
    kept_cells(total.sum(axis=1), total.sum(axis=0), drop_empty)
    return t, total


def check_shape(shape: Any) -> tuple[int, int]:
    """Validate a table shape ``(m_x, m_y)``, each >= 2.

    Raises
    ------
    ParameterError
        If ``shape`` is not a pair of integers >= 2.
    """
    if len(tuple(shape)) != 2:
        raise ParameterError("shape", shape, "a pair (m_x, m_y)")
    return check_int("m_x", shape[0], low=2), check_int("m_y", shape[1], low=2)


def check_table(table: Any, name: str = "table") -> np.ndarray:
    """Validate one ``(m_x, m_y)`` table of counts (as :func:`check_tables`); return it as int64."""
    arr = np.asarray(table)
    if arr.ndim != 2:
        raise DataError(f"{name} must have shape (m_x, m_y), got {arr.shape}")
    out: np.ndarray = check_tables(arr[None], name)[0]
    return out


def kept_cells(vx: np.ndarray, vy: np.ndarray, drop_empty: bool) -> tuple[np.ndarray, np.ndarray]:
    """Return the indices of the non-empty rows and columns of the summed table.

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


def projection_norms(proj: StableProjection, sq: np.ndarray) -> tuple[float, np.ndarray, float]:
    """``max_k ||P_k||_2``, ``P sq`` and ``max_j ||P_j||_2 / sq_j`` in one streamed pass over the columns.

    All three are public values (``P`` is public, ``sq = sqrt(vbar)`` comes from the released marginals);
    the last is the column factor of round 2's sensitivity under central DP
    (:mod:`fedstats.analyses.chi2.privacy`).

    Parameters
    ----------
    proj : StableProjection
        The public ``l x m`` projection.
    sq : numpy.ndarray
        float64 vector of length ``m``, >= 0 (``sqrt(vbar)``, or zeros for the row norms alone).

    Returns
    -------
    (float, numpy.ndarray, float)
        The largest row norm, ``P sq`` (shape ``(l,)``), and the largest column norm over ``sq`` (``inf``
        when some ``sq_j`` is 0).
    """
    m = sq.size
    acc = np.zeros(proj.encoding_size)
    off = np.zeros(proj.encoding_size)
    scaled = 0.0
    for a in range(0, m, _NORM_CHUNK):
        c = proj.columns(np.arange(a, min(m, a + _NORM_CHUNK)))  # (k, l)
        c2 = c * c
        acc += c2.sum(axis=0)
        part = sq[a : a + _NORM_CHUNK]
        off += np.dot(part, c)
        with np.errstate(divide="ignore"):
            scaled = max(scaled, float(np.max(np.sqrt(c2.sum(axis=1)) / part)))
    return float(np.sqrt(acc.max())), off, scaled


def projection_plan(
    privacy: Chi2Privacy | None,
    proj: StableProjection,
    vbar: np.ndarray,
    **inputs: Unpack[Round2Inputs],
) -> tuple[Round2Plan, float, np.ndarray]:
    """Round 2's public plan from the projection's norms over ``sqrt(vbar)`` (protocol, fast path, planner).

    :func:`projection_norms` of ``proj`` over ``sqrt(vbar)``, then
    :func:`~fedstats.analyses.chi2.null.round2_plan` with them; the other parameters are
    :func:`~fedstats.analyses.chi2.null.round2_plan`'s (``ell`` is ``proj.encoding_size``).

    Parameters
    ----------
    privacy : Chi2Privacy or None
        The run's DP parameters; None for the exact (non-private) plan.
    proj : StableProjection
        The public ``l x m`` projection (``m = m_x m_y``).
    vbar : numpy.ndarray
        float64, shape ``(m,)``, > 0: expected counts over the kept cells (from the released marginals).
    **inputs
        ``n_clients``, ``max_cell``, ``bits``, ``total_bound``, ``min_dim`` and optionally ``exact``
        (keyword only; :class:`~fedstats.analyses.chi2.null.Round2Inputs`), as
        :func:`~fedstats.analyses.chi2.null.round2_plan`.

    Returns
    -------
    (Round2Plan, float, numpy.ndarray)
        The plan, the largest row norm and ``P sqrt(vbar)`` (shape ``(l,)``).
    """
    row_norm, p_sq, column_norm = projection_norms(proj, np.sqrt(vbar))
    plan = round2_plan(
        privacy,
        vbar=vbar,
        row_norm=row_norm,
        column_norm=column_norm,
        ell=proj.encoding_size,
        **inputs,
    )
    return plan, row_norm, p_sq


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


@dataclass(frozen=True, kw_only=True)
class Sketch:
    """What round 2 sends and how the server decodes it: the fields of a result's cost and decoding.

    Attributes
    ----------
    m_x, m_y : int
        Table shape (round 1 sends ``m_x + m_y`` counts).
    ell : int
        Report length of round 2.
    bits, frac_bits : int
        Field width and fixed-point fraction bits (the communication cost is
        ``ceil((m_x + m_y) bits / 8) + ceil(l bits / 8)`` bytes per client).
    decoder : str
        The decoder of round 2's sum: ``"mean-of-squares"`` or ``"geometric"`` (FED-chi^2), ``"fed-h"``
        (FED-H's G-test).
    """

    m_x: int
    m_y: int
    ell: int
    bits: int
    frac_bits: int
    decoder: str


def finish_encoding(
    e: np.ndarray,
    sketch: Sketch,
    *,
    confidence: float,
    null: NullSample | None,
    dof: int,
    level: float,
    n_clients: int,
    n_dropped: int,
    details: dict[str, Any],
    noise_offset: float,
) -> Chi2Result:
    """Decode the aggregated encoding ``e`` and build the result (the protocol's and the fast path's step).

    ``e`` is on the fixed-point grid ``2**-sketch.frac_bits`` (the geometric decoder's resolution); with
    ``null`` the encoding is also decoded at ``1 - (1 - confidence) / 2`` for the interval
    (:func:`finish`'s ``wide``).

    Parameters
    ----------
    e : numpy.ndarray
        float64, shape ``(l,)``: the aggregated round-2 encoding, in value units.
    sketch : Sketch
        The round's shape, cost and decoder.
    confidence : float
        Level of the estimate's interval, in (0, 1).
    null : NullSample or None
        The simulated null of a DP release (its shift and critical value), or None.
    dof, level, n_clients, n_dropped, details, noise_offset
        As :func:`finish`.

    Returns
    -------
    Chi2Result
        The statistic, its interval and p-value, with the run's cost.
    """
    step = 1.0 / 2.0**sketch.frac_bits
    wide = None
    if null is not None:
        wide = decode(e, sketch.decoder, 1.0 - (1.0 - confidence) / 2.0, step)
    return finish(
        decode(e, sketch.decoder, confidence, step),
        sketch,
        dof=dof,
        level=level,
        n_clients=n_clients,
        n_dropped=n_dropped,
        details=details,
        noise_offset=noise_offset,
        null=null,
        wide=wide,
    )


def finish(
    est: FrequencyMomentEstimate,
    sketch: Sketch,
    *,
    dof: int,
    level: float,
    n_clients: int,
    n_dropped: int,
    test: str = "chi2",
    details: dict[str, Any] | None = None,
    noise_offset: float = 0.0,
    null: NullSample | None = None,
    wide: FrequencyMomentEstimate | None = None,
    noise_sd: float = 0.0,
) -> Chi2Result:
    """Build the result of a decoded statistic: p-values, decision at ``level`` and its stability, cost.

    Parameters
    ----------
    est : FrequencyMomentEstimate
        The decoded statistic and its interval.
    sketch : Sketch
        Table shape, report length of round 2, field width, fixed-point fraction bits and decoder.
    dof : int
        Degrees of freedom ``(m_x - 1)(m_y - 1)`` over the kept rows and columns.
    level : float
        Significance level, in (0, 1).
    n_clients, n_dropped : int
        Clients in the final sum, and clients lost since round 1.
    test : {"chi2", "g-test"}
        ``"g-test"`` gives the tag ``"entropy.g_test"`` and reads the p-value of the estimated G averaged
        over its additive error of standard deviation ``noise_sd``
        (:func:`~fedstats.analyses.chi2.calibration.normal_averaged_p_value`).
    details : dict, optional
    noise_offset : float
        ``tau``: the decoded value estimates ``s + tau`` because of central DP noise
        (:mod:`fedstats.analyses.chi2.privacy`); the statistic and its interval are shifted down by ``tau``
        and clipped at 0 (post-processing). Default 0.
    null : NullSample, optional
        With DP: the simulated null distribution of the released statistic
        (:func:`~fedstats.analyses.chi2.null.simulate_null`); the p-value and the decision come from it.
        Without it (no DP) the p-value is :func:`sketched_p_value` (with ``noise_offset`` if positive).
        With it, the estimate also subtracts the simulated mean of what the noisy marginals add
        (``null.shift``), and the interval is
        :func:`~fedstats.analyses.chi2.null.shifted_interval` of ``wide``.
    wide : FrequencyMomentEstimate, optional
        With ``null``: the same decoding at level ``1 - (1 - confidence) / 2``.
    noise_sd : float
        ``test="g-test"`` only: the standard deviation of the estimate's error, >= 0. Default 0.

    Returns
    -------
    Chi2Result
    """
    m_x, m_y, ell, bits = sketch.m_x, sketch.m_y, sketch.ell, sketch.bits
    tau = float(noise_offset)
    stat = max(0.0, est.estimate - tau)
    crit = float(chi2_isf(level, dof))
    lo, hi = (max(0.0, c - tau) for c in est.ci)
    raw = est.estimate - tau
    if null is not None and wide is not None:
        raw = est.estimate - tau - float(null.shift.mean())
        stat = max(0.0, raw)
        lo, hi = shifted_interval(wide.ci, tau, null.shift, est.confidence)
        lo, hi = min(lo, stat), max(hi, stat)
    details = dict(details or {})
    # the estimate before it is clipped at 0 (post-processing): the unbiased one under DP, what bias is
    # measured on (the validation report reads it)
    details["unclipped_estimate"] = float(raw)
    paper = float(chi2_sf(stat, dof))
    mc_error, method = 0.0, "sketch"
    if test != "chi2":
        method = "chi2-normal-error" if noise_sd > 0 else "chi2"
        p_lo_end, p, p_hi_end = (
            normal_averaged_p_value(x, dof, noise_sd) for x in (lo, est.estimate - tau, hi)
        )
    elif null is not None:
        method = "parametric-bootstrap"
        p_lo_end, p, p_hi_end = (null.p_value(x) for x in (est.ci[0], est.estimate, est.ci[1]))
        mc_error = math.sqrt(p * (1.0 - p) / null.replicates)
    else:
        # one value at a time: a vector would be evaluated on a 2,000-point grid (4 million chi2_sf calls)
        p_lo_end, p, p_hi_end = (
            float(
                sketched_p_value(
                    max(x - tau, 0.0),
                    dof,
                    encoding_size=ell,
                    decoder=sketch.decoder,
                    noise_offset=tau,
                )
            )
            for x in (est.ci[0], est.estimate, est.ci[1])
        )
    stable = (p_lo_end <= level) == (p_hi_end <= level)
    if null is not None:
        stable = stable and abs(p - level) > 3.0 * mc_error
    return Chi2Result(
        analysis="chi2" if test == "chi2" else "entropy.g_test",
        estimate=stat,
        ci=(lo, hi),
        standard_error=est.relative_standard_error * est.estimate,
        confidence=est.confidence,
        n_clients=n_clients,
        bytes_per_client=math.ceil((m_x + m_y) * bits / 8) + math.ceil(ell * bits / 8),
        p_value=p,
        p_value_sketch=p,
        p_value_paper=paper,
        p_value_mc_error=mc_error,
        null_replicates=null.replicates if null is not None else 0,
        p_value_method=method,
        p_value_ci=(float(chi2_sf(hi, dof)), float(chi2_sf(lo, dof))),
        dof=dof,
        level=level,
        critical_value=crit,
        rejected=bool(p <= level),
        decision_stable=bool(stable),
        bytes_full_table=math.ceil(m_x * m_y * bits / 8),
        encoding_size=ell,
        decoder=sketch.decoder,
        bits=bits,
        frac_bits=sketch.frac_bits,
        n_dropped=n_dropped,
        test=test,
        details=details,
    )


def attach_truth(res: Chi2Result, exact: float, dof: int) -> Chi2Result:
    """Record the exact statistic of a simulation: ``truth``, its p-value and the multiplicative error."""
    res.truth = exact
    res.exact_p_value = float(chi2_sf(exact, dof))
    res.multiplicative_error = abs(res.statistic - exact) / exact if exact > 0 else math.inf
    return res
