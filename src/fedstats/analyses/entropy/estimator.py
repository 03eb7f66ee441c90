"""FED-H, server side: the entropy estimator, its bias bound and interval, and the G statistic.

With the frequency moments ``F_a = sum_x p_x**a`` (Pang et al. 2023, Eq. 9, natural log)::

    H = -sum_x p_x log p_x  ~  H_D = -(F_(1+D) - F_(1-D)) / (2 D)

where ``D`` is the finite-difference step ``fd_step``. The server decodes ``F_(1 +- D)`` with Li's
geometric-mean estimator (:func:`decode_entropy`). See :mod:`fedstats.analyses.entropy` for the choices
made (coupling, the rigorous bias bound, the interval).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats._numeric import two_sided_z
from fedstats._validation import check_choice, check_int, check_open_unit, check_real
from fedstats.analyses.chi2.estimator import (
    Chi2Result,
    Sketch,
    attach_truth,
    check_tables,
    finish,
    kept_cells,
)
from fedstats.errors import DataError, ParameterError
from fedstats.results import AnalysisResult
from fedstats.secagg.quantize import BITS
from fedstats.sketches.decoders import FrequencyMomentEstimate, geometric_mean_estimator
from fedstats.sketches.stable import StableProjection

__all__ = [
    "COUPLINGS",
    "DEFAULT_FD_STEP",
    "EntropyResult",
    "appendix_g_bound",
    "check_fd_step",
    "check_histograms",
    "check_options",
    "clip_to_range",
    "decode_entropy",
    "entropy_from_moments",
    "entropy_result",
    "finite_difference_bias_bound",
    "g_result",
    "g_statistic",
    "projection_abs_max",
    "projection_seeds",
    "shannon_entropy",
]

DEFAULT_FD_STEP = 0.05
"""Default finite-difference step ``D`` (the value in the authors' related code; the paper gives none)."""

COUPLINGS: tuple[str, ...] = ("coupled", "independent")
_CHUNK = 1 << 16


@dataclass
class EntropyResult(AnalysisResult):
    """Result of FED-H.

    Attributes
    ----------
    estimate : float
        Estimated Shannon entropy in nats (alias :attr:`entropy`).
    moments : tuple of float
        Decoded ``(F_(1+D), F_(1-D))``.
    fd_step : float
        Finite-difference step ``D`` (not ``delta``, which names the privacy parameter).
    bias_bound : float
        Data-free bound on the finite-difference bias ``H_D - H`` (>= 0).
    truth : float or None
        Entropy of the summed histogram, when simulating (alias :attr:`exact_entropy`).
    additive_error : float or None
        ``|entropy - exact_entropy|`` (the paper's Fig. 5 metric), when simulating.
    encoding_size : int
    coupling : str
    bits, frac_bits : int
    n_categories : int
    """

    moments: tuple[float, float] = (0.0, 0.0)
    fd_step: float = DEFAULT_FD_STEP
    bias_bound: float = 0.0
    additive_error: float | None = None
    encoding_size: int = 0
    coupling: str = "coupled"
    bits: int = 64
    frac_bits: int = 0
    n_categories: int = 0

    @property
    def entropy(self) -> float:
        """The estimated entropy (nats): :attr:`estimate` under the paper's name."""
        return float(self.estimate) if self.estimate is not None else math.nan

    @property
    def exact_entropy(self) -> float | None:
        """Entropy of the summed histogram (simulation): :attr:`truth` under the paper's name."""
        return None if self.truth is None else float(self.truth)


def shannon_entropy(counts: Any) -> float:
    """Shannon entropy (nats) of a histogram of non-negative counts or frequencies.

    Raises
    ------
    DataError
        If a value is negative or not finite, or all are zero.
    """
    c = np.asarray(counts, dtype=np.float64).ravel()
    if c.size == 0 or not np.isfinite(c).all() or (c < 0).any():
        raise DataError("histogram must be non-empty, finite and non-negative")
    tot = c.sum()
    if tot <= 0:
        raise DataError("histogram is all zeros")
    p = c[c > 0] / tot
    return float(-(p * np.log(p)).sum())


def check_fd_step(fd_step: float) -> float:
    """Validate the finite-difference step ``D`` (``fd_step``) in (0, 0.5]."""
    return check_real("fd_step", fd_step, low=0.0, high=0.5, low_open=True)


def _bias_h(p: np.ndarray, d: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (p ** (1 - d) - p ** (1 + d)) / (2 * d) + np.where(p > 0, p * np.log(p), 0.0)
    return np.where(p > 0, out, 0.0)


@functools.lru_cache(maxsize=64)
def _envelope(d: float) -> tuple[np.ndarray, np.ndarray]:
    """Upper concave hull of ``h(p)`` on [0, 1] (fine log + linear grid; monotone chain)."""
    grid = np.unique(
        np.concatenate([[0.0], np.logspace(-18, 0, 6000), np.linspace(0.0, 1.0, 6000)])
    )
    vals = _bias_h(grid, d)
    hx: list[float] = []
    hy: list[float] = []
    for x, y in zip(grid.tolist(), vals.tolist(), strict=True):
        while (
            len(hx) >= 2
            and (hx[-1] - hx[-2]) * (y - hy[-2]) - (hy[-1] - hy[-2]) * (x - hx[-2]) >= 0
        ):
            hx.pop()
            hy.pop()
        hx.append(x)
        hy.append(y)
    return np.asarray(hx), np.asarray(hy)


def finite_difference_bias_bound(m: int, fd_step: float = DEFAULT_FD_STEP) -> float:
    """Largest finite-difference bias ``H_D - H`` over all distributions on ``m`` categories (nats).

    Parameters
    ----------
    m : int
        Number of categories, >= 1.
    fd_step : float
        Step ``D`` in (0, 0.5].

    Returns
    -------
    float
        ``m * hbar(1/m)`` where ``hbar`` is the concave envelope of the per-category bias ``h`` (Jensen:
        ``sum_x h(p_x) <= sum_x hbar(p_x) <= m hbar(1/m)``), plus 1% for the grid on which the envelope is
        computed. Always >= the true bias; ``H_D - H >= 0`` too.

    Notes
    -----
    Replaces the summed form of Pang et al. 2023, Appendix G (see :func:`appendix_g_bound`).
    """
    mm = check_int("m", m, low=1)
    d = check_fd_step(fd_step)
    hx, hy = _envelope(d)
    return float(mm * np.interp(1.0 / mm, hx, hy) * 1.01)


def appendix_g_bound(m: int, fd_step: float, epsilon: float) -> float:
    """Evaluate the error bound printed in Pang et al. 2023, Appendix G (Eq. 11), for comparison.

    ``(m^D + 1) epsilon / (2 D) + 9 D^2 / (2 (1 - D)^3 e^3)`` when both moments are within a factor
    ``1 +- epsilon``. The second term bounds the finite-difference error of *one* category; the sum over
    ``m`` categories can be ``m`` times larger (:func:`finite_difference_bias_bound` is the rigorous one).
    """
    mm = check_int("m", m, low=1)
    d = check_fd_step(fd_step)
    eps = check_real("epsilon", epsilon, low=0.0)
    return float((mm**d + 1) * eps / (2 * d) + 9 * d * d / (2 * (1 - d) ** 3 * math.e**3))


def entropy_from_moments(f_plus: float, f_minus: float, fd_step: float = DEFAULT_FD_STEP) -> float:
    """``H_D = -(F_(1+D) - F_(1-D)) / (2 D)`` (Eq. 9)."""
    d = check_fd_step(fd_step)
    return -(f_plus - f_minus) / (2 * d)


def decode_entropy(
    e_plus: np.ndarray,
    e_minus: np.ndarray,
    d: float,
    m: int,
    conf: float,
    resolution: float = 0.0,
) -> tuple[float, tuple[float, float], float, tuple[float, float], float]:
    """Entropy from the two aggregated encodings (Pang et al. 2023, Eq. 9) with its interval.

    Parameters
    ----------
    e_plus, e_minus : numpy.ndarray
        float64, shape ``(l,)``: the encodings of stability ``1 + d`` and ``1 - d``.
    d : float
        Finite-difference step ``D``.
    m : int
        Number of categories (for the bias bound).
    conf : float
        Interval level.
    resolution : float
        Fixed-point grid step (0 without quantisation).

    Returns
    -------
    (entropy, ci, standard_error, (F_plus, F_minus), bias_bound)
        The interval is ``[H - z sd - bias_bound, H + z sd]`` (delta method over the ``l`` coordinates,
        widened downwards by the finite-difference bias bound).
    """
    a_p, a_m = 1 + d, 1 - d
    fp: FrequencyMomentEstimate = geometric_mean_estimator(
        e_plus, a_p, confidence=conf, resolution=resolution
    )
    fm: FrequencyMomentEstimate = geometric_mean_estimator(
        e_minus, a_m, confidence=conf, resolution=resolution
    )
    if resolution > 0:
        e_plus = np.where(e_plus == 0.0, resolution / 4, e_plus)
        e_minus = np.where(e_minus == 0.0, resolution / 4, e_minus)
    h = entropy_from_moments(fp.estimate, fm.estimate, d)
    ell = e_plus.size
    with np.errstate(divide="ignore"):
        lp = a_p * np.log(np.abs(e_plus))
        lm = a_m * np.log(np.abs(e_minus))
    if np.isfinite(lp).all() and np.isfinite(lm).all():
        cov = np.cov(np.vstack([lp, lm]))
        var = (
            fp.estimate**2 * cov[0, 0]
            - 2 * fp.estimate * fm.estimate * cov[0, 1]
            + fm.estimate**2 * cov[1, 1]
        ) / (4 * d * d * ell)
        sd = math.sqrt(max(var, 0.0))
    else:
        sd = math.inf
    z = two_sided_z(conf)
    bias = finite_difference_bias_bound(m, d)
    ci = (h - z * sd - bias, h + z * sd)
    return h, ci, sd, (fp.estimate, fm.estimate), bias


def entropy_result(
    encodings: tuple[np.ndarray, np.ndarray],
    d: float,
    m: int,
    conf: float,
    resolution: float = 0.0,
    *,
    coupling: str,
    bits: int,
    frac_bits: int,
    **fields: Any,
) -> EntropyResult:
    """The :class:`EntropyResult` of two aggregated encodings, decoded by :func:`decode_entropy`.

    Parameters
    ----------
    encodings : (numpy.ndarray, numpy.ndarray)
        ``(e_plus, e_minus)`` of :func:`decode_entropy`; ``encoding_size`` is their length.
    d, m, conf, resolution
        As :func:`decode_entropy`.
    coupling : str
    bits, frac_bits : int
        Recorded in the result.
    **fields
        Further fields of the result (``n_clients``, ``truth``, ``details``, ...).

    Returns
    -------
    EntropyResult
        Tagged ``"entropy.shannon"``. The released ``estimate`` and ``ci`` are clipped to the range of the
        entropy of ``m`` categories, ``[0, log m]`` (:func:`clip_to_range`: post-processing, once, here, so
        the library, the CLI and the service release the same number); ``details["unclipped_estimate"]``
        and ``details["unclipped_ci"]`` keep the decoder's values, and a warning says when the clip moved
        the estimate.
    """
    e_plus, e_minus = encodings
    h, ci, sd, moments, bias = decode_entropy(e_plus, e_minus, d, m, conf, resolution)
    details = dict(fields.pop("details", None) or {})
    est, ci_released, note = clip_to_range(h, ci, m)
    details["unclipped_estimate"] = h
    details["unclipped_ci"] = ci
    res = EntropyResult(
        analysis="entropy.shannon",
        estimate=est,
        ci=ci_released,
        standard_error=sd,
        confidence=conf,
        moments=moments,
        fd_step=d,
        bias_bound=bias,
        encoding_size=e_plus.size,
        coupling=coupling,
        bits=bits,
        frac_bits=frac_bits,
        n_categories=m,
        details=details,
        **fields,
    )
    if note:
        res.warn(note)
    return res


def clip_to_range(
    entropy: float, ci: tuple[float, float], m: int
) -> tuple[float, tuple[float, float], str | None]:
    """Clip an entropy estimate and its interval to ``[0, log m]``, the range of ``m`` categories' entropy.

    Post-processing (no privacy or accuracy cost: the true entropy lies in the range, so the clipped
    interval covers whenever the unclipped one does, and the clipped estimate is never further from it).

    Parameters
    ----------
    entropy : float
        The decoded estimate (nats); may be NaN.
    ci : (float, float)
        Its interval.
    m : int
        Number of categories, >= 1.

    Returns
    -------
    (estimate, ci, warning)
        The clipped values, and a sentence when the estimate moved (None otherwise).
    """
    top = math.log(m)
    lo, hi = (min(max(float(c), 0.0), top) for c in ci)
    if math.isnan(entropy) or 0.0 <= entropy <= top:
        return entropy, (lo, hi), None
    est = min(max(entropy, 0.0), top)
    return (
        est,
        (lo, hi),
        f"the entropy estimate {entropy:.6g} was outside [0, log {m}] = [0, {top:.4g}] and is released "
        f"clipped to {est:.4g} (post-processing; details['unclipped_estimate'] keeps it)",
    )


def check_options(
    encoding_size: int, fd_step: float, coupling: str, bits: int, confidence: float
) -> tuple[int, float, str, int, float]:
    """Validate the options of FED-H; return ``(encoding_size, fd_step, coupling, bits, confidence)``.

    Raises
    ------
    ParameterError
        If ``encoding_size < 2``, ``fd_step`` is outside (0, 0.5], the coupling is unknown, ``bits`` is not
        16, 32 or 64, or ``confidence`` is outside (0, 1).
    """
    ell = check_int("encoding_size", encoding_size, low=2)
    d = check_fd_step(fd_step)
    cp = check_choice("coupling", coupling, COUPLINGS)
    if isinstance(bits, bool) or bits not in BITS:
        raise ParameterError("bits", bits, "one of 16, 32, 64")
    conf = check_open_unit("confidence", confidence)
    return ell, d, cp, int(bits), conf


def projection_seeds(seed: int, coupling: str) -> tuple[int, int]:
    """Seeds of the ``1 + D`` and ``1 - D`` projections: equal when coupled."""
    return (seed, seed) if coupling == "coupled" else (seed, (seed + 1) % 2**256)


def projection_abs_max(proj: StableProjection, m: int) -> float:
    """``max_{k, j} |P_kj|`` over ``m`` columns (streamed): bounds ``|P w|_k`` when ``||w||_1 <= 1``."""
    out = 0.0
    for a in range(0, m, _CHUNK):
        out = max(out, float(np.abs(proj.columns(np.arange(a, min(m, a + _CHUNK)))).max()))
    return out


def check_histograms(histograms: Any) -> np.ndarray:
    """Validate ``(n_clients, m)`` whole-number, non-negative counts; return them as int64."""
    arr = np.asarray(histograms)
    if arr.ndim != 2 or arr.size == 0:
        raise DataError(f"histograms must have shape (n_clients, m), got {arr.shape}")
    return check_tables(arr[:, :, None], "histograms")[:, :, 0]


def g_statistic(table: Any) -> tuple[float, int]:
    """Exact G statistic ``2 sum v log(v / vbar)`` and dof of a table (empty rows/columns dropped)."""
    t = check_tables(np.asarray(table)[None], "table")[0].astype(np.float64)
    rows, cols = kept_cells(t.sum(axis=1), t.sum(axis=0), True)
    k = t[np.ix_(rows, cols)]
    v = k.sum()
    g = (
        2
        * v
        * (shannon_entropy(k.sum(axis=1)) + shannon_entropy(k.sum(axis=0)) - shannon_entropy(k))
    )
    return float(g), int((rows.size - 1) * (cols.size - 1))


def g_result(
    ent: EntropyResult,
    table_total: float,
    hx: float,
    hy: float,
    dof: int,
    level: float,
    m_x: int,
    m_y: int,
    truth: float | None,
) -> Chi2Result:
    """Build the G-test's result from FED-H's joint entropy and the exact marginal entropies.

    ``G = 2 |v| (H_X + H_Y - H_XY)``: the interval of ``H_XY`` maps to one on ``G`` (reversed), and the
    standard error scales by ``2 |v|``.

    Parameters
    ----------
    ent : EntropyResult
        FED-H on the joint table.
    table_total : float
        ``|v|``.
    hx, hy : float
        Exact marginal entropies (nats).
    dof : int
    level : float
    m_x, m_y : int
        Table shape.
    truth : float or None
        The exact G, when simulating.

    Returns
    -------
    Chi2Result
        ``test="g-test"``, tag ``"entropy.g_test"``.
    """
    lo_h, hi_h = ent.ci if ent.ci is not None else (ent.entropy, ent.entropy)
    g = 2 * table_total * (hx + hy - ent.entropy)
    ci = (max(2 * table_total * (hx + hy - hi_h), 0.0), 2 * table_total * (hx + hy - lo_h))
    # the unclipped G: finish clips the release at 0 and reads the p-value of this value, averaged over
    # FED-H's error (2 |v| times its standard error)
    est = FrequencyMomentEstimate(
        g, ci, ent.confidence, 0.0, "geometric", 1.0, ent.encoding_size, False
    )
    noise_sd = 2 * table_total * (ent.standard_error or 0.0)
    res = finish(
        est,
        Sketch(
            m_x=m_x,
            m_y=m_y,
            ell=2 * ent.encoding_size,
            bits=ent.bits,
            frac_bits=ent.frac_bits,
            decoder="fed-h",
        ),
        dof=dof,
        level=level,
        n_clients=ent.n_clients,
        n_dropped=0,
        test="g-test",
        details={"joint_entropy": ent.to_dict()},
        noise_sd=noise_sd,
    )
    res.standard_error = noise_sd
    res.encoding_size = ent.encoding_size
    if truth is not None:
        attach_truth(res, truth, dof)
    return res
