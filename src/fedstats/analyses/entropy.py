"""FED-H: secure federated Shannon entropy, and the G-test built on it (Pang et al., ICML 2023, Sec. 3.5).

Clients hold histograms ``v^(i)`` over ``m`` categories; ``v = sum_i v^(i)`` and ``p = v / |v|``. With the
frequency moments ``F_a = sum_x p_x**a`` (Eq. 9, natural log)::

    H = -sum_x p_x log p_x  ~  H_D = -(F_(1+D) - F_(1-D)) / (2 D)

Round 1 sums the histogram sizes (one count per client). Round 2 sums two stable projections of each
client's normalised histogram ``w_i = v^(i) / |v|`` (stability ``1 + D`` and ``1 - D``, ``2 l`` numbers, fixed
point modulo ``2**bits``); the server decodes ``F_(1 +- D)`` with Li's geometric-mean estimator.

Choices and deviations (PAPER_NOTES, 004):

* ``delta`` (the paper's ``Delta``, not stated there) defaults to 0.05, the value in the authors' related code.
* ``coupling="coupled"`` (default): both projections come from the *same* seed, so the stable variates of
  the two stabilities share their uniform angle and exponential (:mod:`fedstats.sketches.stable`) and their
  errors are strongly correlated; the difference ``F_(1+D) - F_(1-D)`` is then estimated with about half
  the standard deviation of independent projections (measured in ``docs/chi2.md``). ``"independent"``
  uses two seeds, as the paper's description suggests.
* The finite difference is biased *upwards*: ``H_D >= H`` for every distribution (the third derivative of
  ``t -> p**t`` is negative). Appendix G bounds the bias per category by ``9 D^2 / (2 (1 - D)^3 e^3)`` but
  then drops the sum over the ``m`` categories; :func:`finite_difference_bias_bound` gives a rigorous
  data-free bound on the *sum*: ``m * hbar(1/m)`` with ``hbar`` the concave envelope of the per-category
  bias ``h(p) = (p^(1-D) - p^(1+D)) / (2D) + p log p`` (the maximum over distributions on ``m`` categories,
  attained near the uniform distribution when ``m`` is large: 0.65 nats at ``m = 100,000``, ``D = 0.05``).
  :func:`appendix_g_bound` evaluates the paper's printed bound for comparison.
* The interval: a delta-method interval for ``H_D`` from the sample covariance of
  ``(log|e+_k|, log|e-_k|)`` over the ``l`` coordinates (i.i.d. pairs), widened downwards by the
  finite-difference bias bound: ``[H_hat - z sd - bias_bound, H_hat + z sd]``. An approximation (the
  geometric means are log-normal only asymptotically); coverage is checked by Monte Carlo in the tests.

G-test: ``G = 2 sum_xy v_xy log(v_xy / vbar_xy) = 2 |v| (H_X + H_Y - H_XY)``; the marginal entropies are
exact (round 1 sums the marginals, as in FED-chi^2) and ``H_XY`` comes from FED-H on the joint table
(:func:`fed_g_test`, :func:`simulate_fed_g_test`). Its error is ``2 |v|`` times FED-H's, which is large at
small ``l`` for big tables: report the interval.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.stats

from fedstats._validation import check_choice, check_int, check_real
from fedstats.analyses.chi2 import Chi2Result, _check_tables, _finish, _kept
from fedstats.engine import ClientBatch, Engine, FixedPoint, InMemoryPopulation, Round, RoundSum
from fedstats.engine.backends import SerialBackend
from fedstats.engine.core import ProtocolGenerator
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RNG, RandomSource
from fedstats.results import AnalysisResult
from fedstats.sketches.decoders import FrequencyMomentEstimate, geometric_mean_estimator
from fedstats.sketches.modular import BITS, choose_frac_bits, reduce_signed, wrap_reports
from fedstats.sketches.seed_agreement import agree_projection_seed
from fedstats.sketches.stable import (
    StableProjection,
    project_coupled,
    sample_symmetric_stable,
)

__all__ = [
    "COUPLINGS",
    "DEFAULT_DELTA",
    "EntropyResult",
    "appendix_g_bound",
    "encode_entropy_projection",
    "encode_histogram_size",
    "entropy_from_moments",
    "fed_entropy",
    "fed_entropy_protocol",
    "fed_g_test",
    "finite_difference_bias_bound",
    "g_statistic",
    "shannon_entropy",
    "simulate_fed_entropy",
    "simulate_fed_g_test",
]

DEFAULT_DELTA = 0.05
"""Default finite-difference step ``D`` (the value in the authors' related code; the paper gives none)."""

COUPLINGS: tuple[str, ...] = ("coupled", "independent")
_CHUNK = 1 << 16


@dataclass
class EntropyResult(AnalysisResult):
    """Result of FED-H.

    Attributes
    ----------
    entropy : float
        Estimated Shannon entropy in nats (also ``estimate``).
    moments : tuple of float
        Decoded ``(F_(1+D), F_(1-D))``.
    fd_step : float
        Finite-difference step ``D`` (not ``delta``, which names the privacy parameter).
    bias_bound : float
        Data-free bound on the finite-difference bias ``H_D - H`` (>= 0).
    exact_entropy : float or None
        Entropy of the summed histogram, when simulating (also ``truth``).
    additive_error : float or None
        ``|entropy - exact_entropy|`` (the paper's Fig. 5 metric), when simulating.
    encoding_size : int
    coupling : str
    bits, frac_bits : int
    n_categories : int
    """

    entropy: float = 0.0
    moments: tuple[float, float] = (0.0, 0.0)
    fd_step: float = DEFAULT_DELTA
    bias_bound: float = 0.0
    exact_entropy: float | None = None
    additive_error: float | None = None
    encoding_size: int = 0
    coupling: str = "coupled"
    bits: int = 64
    frac_bits: int = 0
    n_categories: int = 0


# --------------------------------------------------------------------------------------------------
# pure helpers
# --------------------------------------------------------------------------------------------------


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


def _check_delta(delta: float) -> float:
    return check_real("delta", delta, low=0.0, high=0.5, low_open=True)


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


def finite_difference_bias_bound(m: int, delta: float = DEFAULT_DELTA) -> float:
    """Largest finite-difference bias ``H_D - H`` over all distributions on ``m`` categories (nats).

    Parameters
    ----------
    m : int
        Number of categories, >= 1.
    delta : float
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
    d = _check_delta(delta)
    hx, hy = _envelope(d)
    return float(mm * np.interp(1.0 / mm, hx, hy) * 1.01)


def appendix_g_bound(m: int, delta: float, epsilon: float) -> float:
    """The error bound printed in Pang et al. 2023, Appendix G (Eq. 11), for comparison.

    ``(m^D + 1) epsilon / (2 D) + 9 D^2 / (2 (1 - D)^3 e^3)`` when both moments are within a factor
    ``1 +- epsilon``. The second term bounds the finite-difference error of *one* category; the sum over
    ``m`` categories can be ``m`` times larger (:func:`finite_difference_bias_bound` is the rigorous one).
    """
    mm = check_int("m", m, low=1)
    d = _check_delta(delta)
    eps = check_real("epsilon", epsilon, low=0.0)
    return float((mm**d + 1) * eps / (2 * d) + 9 * d * d / (2 * (1 - d) ** 3 * math.e**3))


def entropy_from_moments(f_plus: float, f_minus: float, delta: float = DEFAULT_DELTA) -> float:
    """``H_D = -(F_(1+D) - F_(1-D)) / (2 D)`` (Eq. 9)."""
    d = _check_delta(delta)
    return -(f_plus - f_minus) / (2 * d)


def _decode_entropy(
    e_plus: np.ndarray,
    e_minus: np.ndarray,
    d: float,
    m: int,
    conf: float,
    resolution: float = 0.0,
) -> tuple[float, tuple[float, float], float, tuple[float, float], float]:
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
    z = float(scipy.stats.norm.ppf(0.5 + conf / 2))
    bias = finite_difference_bias_bound(m, d)
    ci = (h - z * sd - bias, h + z * sd)
    return h, ci, sd, (fp.estimate, fm.estimate), bias


def _check_common(
    encoding_size: int, delta: float, coupling: str, bits: int, confidence: float
) -> tuple[int, float, str, int, float]:
    ell = check_int("encoding_size", encoding_size, low=2)
    d = _check_delta(delta)
    cp = check_choice("coupling", coupling, COUPLINGS)
    if isinstance(bits, bool) or bits not in BITS:
        raise ParameterError("bits", bits, "one of 16, 32, 64")
    conf = check_real("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    return ell, d, cp, int(bits), conf


def _seeds(seed: int, coupling: str) -> tuple[int, int]:
    """Seeds of the ``1 + D`` and ``1 - D`` projections: equal when coupled."""
    return (seed, seed) if coupling == "coupled" else (seed, (seed + 1) % 2**256)


def _abs_max(proj: StableProjection, m: int) -> float:
    """``max_{k, j} |P_kj|`` over ``m`` columns (streamed): bounds ``|P w|_k`` when ``||w||_1 <= 1``."""
    out = 0.0
    for a in range(0, m, _CHUNK):
        out = max(out, float(np.abs(proj.columns(np.arange(a, min(m, a + _CHUNK)))).max()))
    return out


# --------------------------------------------------------------------------------------------------
# client side
# --------------------------------------------------------------------------------------------------


def _client_hist(batch: ClientBatch, params: Mapping[str, Any]) -> np.ndarray:
    h = np.asarray(batch.column(params.get("column", "histogram")))
    if h.ndim != 2 or h.shape[1] != int(params["m"]):
        raise DataError(f"client histograms must have shape (n, {params['m']}), got {h.shape}")
    if (h < 0).any():
        raise DataError("a client's histogram has a negative count")
    return h


def encode_histogram_size(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Client side of FED-H round 1: the client's total count, ``(n, 1)`` int64."""
    out: np.ndarray = _client_hist(batch, params).astype(np.int64).sum(axis=1, keepdims=True)
    return out


def encode_entropy_projection(
    batch: ClientBatch, params: Mapping[str, Any], rng: RNG
) -> np.ndarray:
    """Client side of FED-H round 2: fixed-point ``[P+ w_i, P- w_i]`` modulo ``2**bits``, ``(n, 2 l)``.

    ``w_i = v^(i) / |v|`` (Pang et al. 2023, Sec. 3.5); only the client's non-zero categories are touched.
    """
    h = _client_hist(batch, params).astype(np.float64) / float(params["total"])
    ell, d = int(params["encoding_size"]), float(params["delta"])
    sp, sm = int(params["seed_plus"]), int(params["seed_minus"])
    e = np.concatenate(
        [StableProjection(sp, ell, 1 + d).project(h), StableProjection(sm, ell, 1 - d).project(h)],
        axis=1,
    )
    fp = FixedPoint(int(params["frac_bits"]), float(params["clip"]))
    q, _ = fp.encode(e, rng)
    return wrap_reports(q, int(params["bits"]))


# --------------------------------------------------------------------------------------------------
# protocols
# --------------------------------------------------------------------------------------------------


def fed_entropy_protocol(
    m: int,
    *,
    encoding_size: int = 1000,
    delta: float = DEFAULT_DELTA,
    coupling: str = "coupled",
    projection_seed: int,
    bits: int = 64,
    max_count: int,
    confidence: float = 0.95,
    column: str = "histogram",
) -> ProtocolGenerator[EntropyResult]:
    """FED-H as an engine protocol (Pang et al. 2023, Sec. 3.5 on Algorithm 2).

    Parameters
    ----------
    m : int
        Number of categories, >= 2.
    encoding_size : int
        ``l`` of each of the two projections, >= 2 (default 1000: FED-H needs far larger ``l`` than
        FED-chi^2, see the paper's Fig. 5).
    delta : float
        Finite-difference step ``D`` in (0, 0.5]; default :data:`DEFAULT_DELTA`.
    coupling : {"coupled", "independent"}
        Same seed for both stabilities (default) or two seeds.
    projection_seed : int
        Public seed, agreed beforehand.
    bits : {16, 32, 64}
        Field of the round-2 sum.
    max_count : int
        Declared largest total count of one client (>= 1), the bound of round 1.
    confidence : float
        Level of the interval, in (0, 1).
    column : str
        Population column holding the ``(n, m)`` histograms.

    Returns
    -------
    ProtocolGenerator[EntropyResult]

    Raises
    ------
    ParameterError, DataError, OverflowRiskError
    """
    ell, d, cp, b, conf = _check_common(encoding_size, delta, coupling, bits, confidence)
    mm = check_int("m", m, low=2)
    mc = check_int("max_count", max_count, low=1)
    seed = check_int("projection_seed", projection_seed, low=0, high=2**256 - 1)
    base = {"column": column, "m": mm}
    s1: RoundSum = yield Round("size", encode_histogram_size, base, dim=1, bound=mc)
    total = int(np.asarray(s1.total).ravel()[0])
    if total <= 0:
        raise DataError("the summed histogram is empty (total count 0)")
    sp, sm = _seeds(seed, cp)
    pmax = max(
        _abs_max(StableProjection(sp, ell, 1 + d), mm),
        _abs_max(StableProjection(sm, ell, 1 - d), mm),
    )
    # ||w_i||_1 <= 1 for every client and for the sum, so |e_k| <= max |P_kj|
    f = choose_frac_bits(b, pmax, pmax)
    fp = FixedPoint(f, pmax)
    params = {
        **base,
        "total": total,
        "encoding_size": ell,
        "delta": d,
        "seed_plus": sp,
        "seed_minus": sm,
        "frac_bits": f,
        "clip": fp.clip,
        "bits": b,
    }
    bound = (1 << (b - 1)) if b < 64 else max(fp.bound, 1)
    s2: RoundSum = yield Round(
        "projections", encode_entropy_projection, params, dim=2 * ell, bound=bound
    )
    e = reduce_signed(s2.total, b) / fp.scale
    h, ci, sd, moments, bias = _decode_entropy(e[:ell], e[ell:], d, mm, conf, 1.0 / fp.scale)
    return EntropyResult(
        analysis="fed-entropy",
        estimate=h,
        ci=ci,
        standard_error=sd,
        confidence=conf,
        n_clients=s1.n_clients,
        bytes_per_client=math.ceil(b / 8) + math.ceil(2 * ell * b / 8),
        entropy=h,
        moments=moments,
        fd_step=d,
        bias_bound=bias,
        encoding_size=ell,
        coupling=cp,
        bits=b,
        frac_bits=f,
        n_categories=mm,
        details={"encoding_plus": e[:ell].tolist(), "encoding_minus": e[ell:].tolist()},
    )


def _check_histograms(histograms: Any) -> np.ndarray:
    arr = np.asarray(histograms)
    if arr.ndim != 2 or arr.size == 0:
        raise DataError(f"histograms must have shape (n_clients, m), got {arr.shape}")
    return _check_tables(arr[:, :, None], "histograms")[:, :, 0]


def fed_entropy(
    histograms: Any,
    *,
    encoding_size: int = 1000,
    delta: float = DEFAULT_DELTA,
    coupling: str = "coupled",
    bits: int = 64,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
    confidence: float = 0.95,
    projection_seed: int | None = None,
) -> EntropyResult:
    """Run FED-H on clients' histograms through the engine and compare with the exact entropy.

    Parameters
    ----------
    histograms : array_like of int, shape (n_clients, m)
        Non-negative counts, ``m >= 2``.
    encoding_size, delta, coupling, bits, confidence
        As in :func:`fed_entropy_protocol`.
    engine : Engine, optional
    randomness : RandomSource, optional
    projection_seed : int, optional
        Default: commit-then-reveal agreement among the clients.

    Returns
    -------
    EntropyResult
        With ``exact_entropy`` and ``additive_error``.

    Raises
    ------
    DataError
        Negative or non-integer counts, wrong shape, an all-zero histogram.
    ParameterError
        Out-of-range parameters.
    """
    h = _check_histograms(histograms)
    _check_common(encoding_size, delta, coupling, bits, confidence)
    n, m = h.shape
    src = (
        randomness if randomness is not None else (engine.randomness if engine else RandomSource())
    )
    eng = engine if engine is not None else Engine(SerialBackend(), src)
    seed = (
        projection_seed
        if projection_seed is not None
        else agree_projection_seed(n, src.child("entropy"))
    )
    proto = fed_entropy_protocol(
        m,
        encoding_size=encoding_size,
        delta=delta,
        coupling=coupling,
        projection_seed=seed,
        bits=bits,
        max_count=max(int(h.sum(axis=1).max()), 1),
        confidence=confidence,
    )
    res = eng.run(proto, InMemoryPopulation({"histogram": h}))
    exact = shannon_entropy(h.sum(axis=0))
    res.truth = res.exact_entropy = exact
    res.additive_error = abs(res.entropy - exact)
    res.release_note = src.release_note
    return res


def _source(randomness: RandomSource | RNG | None, name: str) -> tuple[RNG, int, str | None]:
    if isinstance(randomness, RandomSource) or randomness is None:
        src = randomness if randomness is not None else RandomSource()
        return (
            src.generator(name, "simulate"),
            src.public_seed(name, "projection"),
            src.release_note,
        )
    return randomness, int(randomness.integers(0, 2**63)), None


def simulate_fed_entropy(
    global_hist: Any,
    *,
    encoding_size: int = 1000,
    delta: float = DEFAULT_DELTA,
    coupling: str = "coupled",
    randomness: RandomSource | RNG | None = None,
    confidence: float = 0.95,
    projection: str = "materialize",
) -> EntropyResult:
    """FED-H on a global histogram without the per-client engine (fast path, bounded memory).

    Parameters
    ----------
    global_hist : array_like, shape (m,)
        Non-negative counts or frequencies (normalised internally), ``m >= 2``.
    encoding_size, delta, coupling, confidence
        As in :func:`fed_entropy_protocol`.
    randomness : RandomSource or generator, optional
    projection : {"materialize", "distribution"}
        ``"materialize"``: generate the public projection's columns of the non-zero categories in chunks
        (memory ``O(l + chunk)``, time ``O(l * nnz)``); ``"distribution"`` (only with
        ``coupling="independent"``): draw ``e_k = F_a^(1/a) S_k`` directly, ``O(l)``, exactly the same
        distribution.

    Returns
    -------
    EntropyResult

    Notes
    -----
    Shortcuts (same distribution as :func:`fed_entropy` at 64 bits): linearity (the sum of the clients'
    projections is the projection of the summed histogram, so the number of clients does not matter), a
    public seed instead of the agreement, and no fixed-point rounding (its error, below ``n 2**-40``, is
    negligible against the sketch error).
    """
    c = np.asarray(global_hist, dtype=np.float64).ravel()
    if c.size < 2:
        raise DataError("global_hist needs at least 2 categories")
    shannon_entropy(c)  # validates
    ell, d, cp, _, conf = _check_common(encoding_size, delta, coupling, 64, confidence)
    mode = check_choice("projection", projection, ("materialize", "distribution"))
    rng, seed, note = _source(randomness, "entropy")
    w = c / c.sum()
    nz = np.flatnonzero(w)
    if mode == "distribution":
        if cp == "coupled":
            raise ParameterError(
                "projection", "distribution", "'materialize' when coupling='coupled'"
            )
        fpl = float((w[nz] ** (1 + d)).sum())
        fmi = float((w[nz] ** (1 - d)).sum())
        ep = fpl ** (1 / (1 + d)) * sample_symmetric_stable(1 + d, ell, rng)
        em = fmi ** (1 / (1 - d)) * sample_symmetric_stable(1 - d, ell, rng)
    else:
        sp, sm = _seeds(seed, cp)
        if cp == "coupled":
            ep, em = project_coupled(seed, ell, (1 + d, 1 - d), nz, w[nz])
        else:
            ep = StableProjection(sp, ell, 1 + d).project((nz, w[nz]), m=c.size)[0]
            em = StableProjection(sm, ell, 1 - d).project((nz, w[nz]), m=c.size)[0]
    h, ci, sd, moments, bias = _decode_entropy(ep, em, d, c.size, conf)
    exact = shannon_entropy(c)
    return EntropyResult(
        analysis="fed-entropy",
        estimate=h,
        ci=ci,
        standard_error=sd,
        confidence=conf,
        truth=exact,
        release_note=note,
        entropy=h,
        moments=moments,
        fd_step=d,
        bias_bound=bias,
        exact_entropy=exact,
        additive_error=abs(h - exact),
        encoding_size=ell,
        coupling=cp,
        bits=64,
        frac_bits=0,
        n_categories=int(c.size),
        details={"projection": mode},
    )


# --------------------------------------------------------------------------------------------------
# G-test
# --------------------------------------------------------------------------------------------------


def g_statistic(table: Any) -> tuple[float, int]:
    """Exact G statistic ``2 sum v log(v / vbar)`` and dof of a table (empty rows/columns dropped)."""
    t = _check_tables(np.asarray(table)[None], "table")[0].astype(np.float64)
    rows, cols = _kept(t.sum(axis=1), t.sum(axis=0), True)
    k = t[np.ix_(rows, cols)]
    v = k.sum()
    g = (
        2
        * v
        * (shannon_entropy(k.sum(axis=1)) + shannon_entropy(k.sum(axis=0)) - shannon_entropy(k))
    )
    return float(g), int((rows.size - 1) * (cols.size - 1))


def _g_result(
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
    lo_h, hi_h = ent.ci if ent.ci is not None else (ent.entropy, ent.entropy)
    g = 2 * table_total * (hx + hy - ent.entropy)
    ci = (max(2 * table_total * (hx + hy - hi_h), 0.0), 2 * table_total * (hx + hy - lo_h))
    est = FrequencyMomentEstimate(
        max(g, 0.0), ci, ent.confidence, 0.0, "geometric", 1.0, ent.encoding_size, False
    )
    res = _finish(
        est,
        dof=dof,
        level=level,
        n_clients=ent.n_clients,
        n_dropped=0,
        m_x=m_x,
        m_y=m_y,
        ell=2 * ent.encoding_size,
        bits=ent.bits,
        frac_bits=ent.frac_bits,
        decoder="fed-h",
        test="g-test",
        details={"joint_entropy": ent.to_dict()},
    )
    res.standard_error = 2 * table_total * (ent.standard_error or 0.0)
    res.encoding_size = ent.encoding_size
    if truth is not None:
        res.truth = res.exact_statistic = truth
        res.exact_p_value = float(scipy.stats.chi2.sf(truth, dof))
        res.multiplicative_error = abs(res.statistic - truth) / truth if truth > 0 else math.inf
    return res


def simulate_fed_g_test(
    global_table: Any,
    *,
    encoding_size: int = 1000,
    delta: float = DEFAULT_DELTA,
    coupling: str = "coupled",
    randomness: RandomSource | RNG | None = None,
    level: float = 0.05,
    confidence: float = 0.95,
) -> Chi2Result:
    """The G-test from FED-H on the joint table plus exact marginal entropies (fast path).

    ``G = 2 |v| (H_X + H_Y - H_XY)`` with ``H_XY`` from :func:`simulate_fed_entropy`; ``dof`` is
    ``(m_x - 1)(m_y - 1)``. Same shortcuts as :func:`simulate_fed_entropy`.
    """
    t = _check_tables(np.asarray(global_table)[None], "global_table")[0]
    rows, cols = _kept(t.sum(axis=1), t.sum(axis=0), True)
    k = t[np.ix_(rows, cols)]
    lev = check_real("level", level, low=0.0, high=1.0, low_open=True, high_open=True)
    ent = simulate_fed_entropy(
        k.ravel(),
        encoding_size=encoding_size,
        delta=delta,
        coupling=coupling,
        randomness=randomness,
        confidence=confidence,
    )
    truth, dof = g_statistic(k)
    return _g_result(
        ent,
        float(k.sum()),
        shannon_entropy(k.sum(axis=1)),
        shannon_entropy(k.sum(axis=0)),
        dof,
        lev,
        int(t.shape[0]),
        int(t.shape[1]),
        truth,
    )


def fed_g_test(
    tables: Any,
    *,
    encoding_size: int = 1000,
    delta: float = DEFAULT_DELTA,
    coupling: str = "coupled",
    bits: int = 64,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
    level: float = 0.05,
    confidence: float = 0.95,
    projection_seed: int | None = None,
) -> Chi2Result:
    """The G-test of independence via FED-H on clients' tables, through the engine.

    Parameters
    ----------
    tables : array_like of int, shape (n_clients, m_x, m_y)
    encoding_size, delta, coupling, bits, engine, randomness, confidence, projection_seed
        As in :func:`fed_entropy`.
    level : float
        Significance level of the decision.

    Returns
    -------
    Chi2Result
        ``test="g-test"``; ``exact_statistic`` is the exact G of the summed table.

    Notes
    -----
    Rows and columns empty in the summed table are an error (as in FED-chi^2). The marginals are summed
    exactly (here from the clients' tables, as round 1 of FED-chi^2 would); the joint entropy by FED-H.
    """
    t = _check_tables(tables)
    lev = check_real("level", level, low=0.0, high=1.0, low_open=True, high_open=True)
    n, m_x, m_y = t.shape
    total = t.sum(axis=0)
    _kept(total.sum(axis=1), total.sum(axis=0), False)
    ent = fed_entropy(
        t.reshape(n, m_x * m_y),
        encoding_size=encoding_size,
        delta=delta,
        coupling=coupling,
        bits=bits,
        engine=engine,
        randomness=randomness,
        confidence=confidence,
        projection_seed=projection_seed,
    )
    truth, dof = g_statistic(total)
    res = _g_result(
        ent,
        float(total.sum()),
        shannon_entropy(total.sum(axis=1)),
        shannon_entropy(total.sum(axis=0)),
        dof,
        lev,
        m_x,
        m_y,
        truth,
    )
    res.release_note = ent.release_note
    return res
