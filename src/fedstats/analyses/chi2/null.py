r"""FED-chi^2 under central DP: the shared release steps, and the null distribution of the released statistic.

The release steps are shared by the protocol and the fast path; the null distribution is a parametric
bootstrap (ours, not in the paper).

With ``epsilon`` the server sees noisy marginals (round 1) and a noisy sketch (round 2). The decoded value
``D`` estimates ``s~ + tau``, where ``s~ = ||(v - vbar~) / sqrt(vbar~)||^2`` uses the expected counts ``vbar~``
of the NOISY marginals (so ``s~`` is not chi-square under independence: the marginal noise adds a positive
term of order ``sigma_m^2 / vbar``) and ``tau`` is half the sketch noise's variance per coordinate, itself a
function of the noisy marginals (through ``c = max_j ||P_j|| / sqrt(vbar~_j)``). No closed form covers all
three noises, so the test's p-value is a Monte Carlo p-value (:func:`simulate_null`, :func:`mc_p_value`):

1. the null model is independence with the released noisy marginals as its margins: ``B`` tables drawn
   from ``Multinomial(N~, p~_x p~_y^T)``, ``N~`` the mean of the two noisy totals;
2. each replicate goes through the same release as the real run (:func:`noisy_marginals`,
   :func:`round2_plan`): its marginals get the round-1 discrete Gaussian, ``vbar`` and the fixed-point
   scale, ``c``, the round-2 ``sigma`` and ``tau`` are recomputed from them, its ``w`` is projected with the
   run's public projection (or drawn as ``sqrt(||w||^2) N(0, 2)^l`` when the projection is too large to
   hold), and the round-2 noise is added (a continuous Gaussian of the discrete Gaussian's exact variance,
   plus the rounding to the grid ``2**k`` when ``k > 0``: at ``sigma >= 1`` grid unit, far below the
   sketch's own noise, the two give the same decoded statistic in distribution to within Monte Carlo error);
3. the test statistic is ``R = D / (dof + tau)``, the decoded value over its null mean without marginal
   noise, which makes replicates with different ``tau`` comparable (monotone in the released statistic for
   the run's own ``tau``);
4. ``p = (1 + #{R_b >= R_obs}) / (B + 1)`` (Davison & Hinkley 1997, Eq. 4.11): under a null whose law the
   simulation reproduces, ``P(p <= level) <= level`` for every ``level``; its Monte Carlo standard error
   ``sqrt(p (1 - p) / B)`` is reported.

The plug-in margins make it a parametric bootstrap: valid up to the error of estimating the margins (the
tests measure the size, ``tests/library/test_chi2_dp_test.py``). With dropout (round 2 without some clients) the
survivors' table is modelled by binomial thinning of each cell (records spread i.i.d. over clients).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NotRequired, TypedDict

import numpy as np

from fedstats.analyses.chi2.calibration import batch_decode
from fedstats.analyses.chi2.privacy import Chi2Privacy, add_discrete_gaussian
from fedstats.analyses.chi2.rare import effect_probabilities
from fedstats.privacy.analysis.discrete_gaussian import discrete_gaussian_variance
from fedstats.privacy.mechanisms.samplers import sample_discrete_gaussian
from fedstats.randomness import RNG
from fedstats.secagg.quantize import choose_frac_bits
from fedstats.sketches.stable import MAX_DENSE_ENTRIES, StableProjection

__all__ = [
    "DEFAULT_NULL_REPLICATES",
    "NullSample",
    "NullSetting",
    "Round2Inputs",
    "Round2Plan",
    "headroom",
    "mc_p_value",
    "noisy_marginals",
    "privacy_details",
    "release_marginals",
    "release_projection",
    "round2_plan",
    "shifted_interval",
    "simulate_null",
]

DEFAULT_NULL_REPLICATES = 999
"""Default ``B``: ``level (B + 1)`` is an integer at 0.05 and 0.01, and ``B`` replicates take well under 1 s."""

_COL_CHUNK = 1 << 16


@dataclass(frozen=True)
class Round2Plan:
    """How round 2 is encoded and released (public: computed from the released marginals).

    Attributes
    ----------
    frac_bits : int
        ``f``, fixed-point fraction bits.
    k : int
        The sum is rounded to multiples of ``2**k`` before the noise (0 without privacy).
    sigma : float
        Discrete Gaussian parameter, in units of ``2**(k - f)`` (0 without privacy).
    step : float
        One noise unit in encoding units, ``2**(k - f)``.
    tau : float
        Half the noise variance per encoding coordinate: the decoders estimate ``s + tau``.
    """

    frac_bits: int
    k: int
    sigma: float
    step: float
    tau: float


class Round2Inputs(TypedDict):
    """The public inputs of :func:`round2_plan` besides the projection's norms and size (meanings there)."""

    n_clients: int
    max_cell: int
    bits: int
    total_bound: float
    min_dim: int
    exact: NotRequired[bool]


def round2_plan(
    privacy: Chi2Privacy | None,
    *,
    vbar: np.ndarray,
    row_norm: float,
    column_norm: float,
    n_clients: int,
    max_cell: int,
    bits: int,
    ell: int,
    total_bound: float,
    min_dim: int,
    exact: bool = True,
) -> Round2Plan:
    """The fixed-point scale and the round-2 noise from public values (protocol and simulations alike).

    Parameters
    ----------
    privacy : Chi2Privacy or None
    vbar : numpy.ndarray
        Expected counts over the kept cells (from the released marginals), float64, > 0.
    row_norm, column_norm : float
        ``max_k ||P_k||`` and ``c = max_j ||P_j|| / sqrt(vbar_j)``.
    n_clients, max_cell, bits, ell : int
        Clients of round 1, declared ``max_cell``, field width, encoding size.
    total_bound : float
        Bound on the table's total (the marginals' total plus, with privacy, headroom for their noise).
    min_dim : int
        ``min(kept rows, kept columns)``.
    exact : bool
        True (a release): ``sigma`` rounded up exactly (:func:`~fedstats.analyses.chi2.privacy.sigma_up`).
        False (the null simulation, which only needs the noise's variance): ``Delta / sqrt(2 rho)`` in
        floating point, within a relative 1e-15 of it and 100 times faster.

    Returns
    -------
    Round2Plan
    """
    u2 = float((np.maximum(float(max_cell), vbar / n_clients) ** 2 / vbar).sum())
    bound_one = row_norm * math.sqrt(u2)  # estimator.client_bound, inlined (no import cycle)
    f = choose_frac_bits(bits, bound_one, row_norm * math.sqrt(total_bound * (min_dim - 1)))
    if privacy is None:
        return Round2Plan(f, 0, 0.0, 2.0**-f, 0.0)
    if exact:
        k, sigma = privacy.projection_release(column_norm, f, ell)
    else:
        k, sens = privacy.projection_sensitivity(column_norm, f, ell)
        sigma = sens / math.sqrt(2.0 * privacy.rho_projection)
    step = 2.0**k / 2.0**f
    tau = (discrete_gaussian_variance(sigma) + (1.0 / 12.0 if k else 0.0)) * step**2 / 2.0
    return Round2Plan(f, k, sigma, step, tau)


def release_projection(total: Any, plan: Round2Plan, rng: RNG) -> np.ndarray:
    """Round 2's central DP release: the summed integer sketch, coarsened, plus discrete Gaussian noise.

    Each coordinate is rounded to the nearest multiple of ``2**k`` (exact integer arithmetic) and
    discrete Gaussian noise of parameter ``plan.sigma`` is added in those units (Canonne et al. 2020).

    Parameters
    ----------
    total : sequence of int
        The round-2 sum, reduced to signed integers (length ``l``).
    plan : Round2Plan
        The release's public plan (:func:`round2_plan`), with privacy.
    rng : numpy.random.Generator
        The server's noise generator.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(l,)``: the released sum in encoding units times ``2**f``.
    """
    half = (1 << plan.k) >> 1
    coarse = [(int(x) + half) >> plan.k for x in total]  # nearest multiple of 2**k (exact integers)
    return add_discrete_gaussian(coarse, plan.sigma, rng) * 2.0**plan.k


def privacy_details(privacy: Chi2Privacy, plan: Round2Plan, marginals: Any) -> dict[str, Any]:
    """``details["privacy"]`` of a release: the budget, the projection's noise and the noisy marginals."""
    return {
        **privacy.as_dict(),
        "sigma_projection": plan.sigma * plan.step,
        "noise_offset": plan.tau,
        "noisy_marginals": np.asarray(marginals).tolist(),
    }


def noisy_marginals(marginals: Any, privacy: Chi2Privacy, rng: RNG) -> np.ndarray:
    """Round 1's release: the marginals plus discrete Gaussian noise, rounded, at least 1 (post-processing).

    Parameters
    ----------
    marginals : array_like of int, shape (..., m_x + m_y)
    privacy : Chi2Privacy
    rng : RNG
        The server's generator.

    Returns
    -------
    numpy.ndarray
        int64, the shape of ``marginals``.
    """
    m = np.asarray(marginals, dtype=np.int64)
    z = sample_discrete_gaussian(Fraction(privacy.marginal_sigma) ** 2, m.shape, rng)
    out: np.ndarray = np.maximum(m + z, 1)
    return out


def release_marginals(
    marginals: Any, shape: tuple[int, int], privacy: Chi2Privacy, rng: RNG
) -> tuple[np.ndarray, float]:
    """Round 1's release and the bound on the table's total behind round 2's plan (protocol and fast path).

    Parameters
    ----------
    marginals : array_like of int, shape (m_x + m_y,)
        The exact row then column sums.
    shape : tuple of int
        ``(m_x, m_y)``.
    privacy : Chi2Privacy
    rng : RNG
        The server's generator.

    Returns
    -------
    (numpy.ndarray, float)
        :func:`noisy_marginals`, and their row total plus :func:`headroom` (the noisy total can fall
        below the true one).
    """
    noisy = noisy_marginals(marginals, privacy, rng)
    return noisy, float(noisy[: shape[0]].sum()) + headroom(privacy, *shape)


def headroom(privacy: Chi2Privacy, m_x: int, m_y: int) -> float:
    """Bound on how far the noisy total can fall below the true one (10 sigma per marginal, summed)."""
    return 10.0 * privacy.marginal_sigma * math.sqrt(m_x + m_y)


@dataclass(frozen=True)
class NullSample:
    """Simulated null values of ``R = D / (dof + tau)`` (module docstring) and how to read a p-value.

    Attributes
    ----------
    r : numpy.ndarray
        float64, shape ``(B,)``, sorted.
    denominator : float
        ``dof + tau`` of the observed run.
    shift : numpy.ndarray
        float64, shape ``(B,)``, sorted: ``s~_b - s_b``, what the noisy marginals add to each replicate's
        statistic (the squared norm its sketch encodes, minus Pearson's statistic of its table). Its mean
        is subtracted from the estimate and its quantiles widen the interval (:func:`shifted_interval`).
    power : (float, float) or None
        ``(w, power)``: the fraction of ``B`` replicates of an alternative at Cohen's effect ``w`` (same
        margins, :func:`~fedstats.analyses.chi2.rare.effect_probabilities`) that the test rejects at its
        level; Monte Carlo standard error ``sqrt(power (1 - power) / B)``.
    """

    r: np.ndarray
    denominator: float
    shift: np.ndarray
    power: tuple[float, float] | None = None

    @property
    def replicates(self) -> int:
        """``B``."""
        return int(self.r.size)

    def p_value(self, decoded: float) -> float:
        """``(1 + #{R_b >= D / (dof + tau)}) / (B + 1)`` for a decoded value ``D`` (before subtracting tau)."""
        return mc_p_value(decoded / self.denominator, self.r)


def shifted_interval(
    wide: tuple[float, float], tau: float, shift: np.ndarray, confidence: float
) -> tuple[float, float]:
    """Interval on the exact statistic ``s`` from one on ``s~ + tau`` and the simulated ``s~ - s``.

    A Bonferroni union (conservative): ``wide`` has level ``1 - (1 - confidence) / 2`` for ``s~ + tau``
    (the decoder's interval), and ``[q_lo, q_hi]``, the ``(1 - confidence) / 4`` and
    ``1 - (1 - confidence) / 4`` quantiles of ``shift``, holds ``s~ - s`` with probability
    ``1 - (1 - confidence) / 2`` under the null model; so ``[lo - tau - q_hi, hi - tau - q_lo]`` clipped at 0
    covers ``s`` with probability at least ``confidence`` (up to the null model's fit).

    Parameters
    ----------
    wide : tuple of float
        The decoder's interval at level ``1 - (1 - confidence) / 2``.
    tau : float
    shift : numpy.ndarray
        Sorted ``s~_b - s_b`` (:class:`NullSample`).
    confidence : float

    Returns
    -------
    tuple of float
        ``(low, high)``, both >= 0.
    """
    a = (1.0 - confidence) / 4.0
    q_lo, q_hi = (float(v) for v in np.quantile(shift, [a, 1.0 - a]))
    return max(0.0, wide[0] - tau - q_hi), max(0.0, wide[1] - tau - q_lo)


def mc_p_value(observed: float, simulated: np.ndarray) -> float:
    """Monte Carlo p-value ``(1 + #{T_b >= t}) / (B + 1)`` (valid: ``P(p <= a) <= a`` under the null).

    Parameters
    ----------
    observed : float
    simulated : numpy.ndarray
        Sorted float64 null values, shape ``(B,)``.

    Returns
    -------
    float
        In ``[1 / (B + 1), 1]``.
    """
    b = simulated.size
    at_least = b - int(np.searchsorted(simulated, observed, side="left"))
    return (1.0 + at_least) / (b + 1.0)


def _multinomial(rng: RNG, total: int, p: np.ndarray, size: int) -> np.ndarray:
    """``size`` draws of ``Multinomial(total, p)`` by conditional binomials (any :data:`RNG`), int64."""
    out = np.zeros((size, p.size), dtype=np.int64)
    left = np.full(size, total, dtype=np.int64)
    mass = 1.0
    for j in range(p.size - 1):
        q = min(1.0, max(0.0, float(p[j]) / mass)) if mass > 0 else 0.0
        out[:, j] = np.asarray(rng.binomial(left, q), dtype=np.int64)
        left -= out[:, j]
        mass -= float(p[j])
    out[:, -1] = left
    return out


@dataclass(frozen=True, kw_only=True)
class NullSetting:
    """The run's release as :func:`simulate_null` replays it (public values only).

    Attributes
    ----------
    shape : tuple of int
        ``(m_x, m_y)``.
    privacy : Chi2Privacy
    projection : StableProjection
        The run's public projection (its columns' norms set ``c``; ``w`` is projected with it when
        ``l m <= MAX_DENSE_ENTRIES``).
    decoder : {"mean-of-squares", "geometric"}
    n_clients, n_survivors : int
        Clients of round 1 and of round 2.
    max_cell, bits : int
        As in the protocol.
    """

    shape: tuple[int, int]
    privacy: Chi2Privacy
    projection: StableProjection
    decoder: str
    n_clients: int
    n_survivors: int
    max_cell: int
    bits: int


def simulate_null(
    marginals: Any,
    setting: NullSetting,
    *,
    tau: float,
    replicates: int,
    rng: RNG,
    effect: float = 0.0,
    level: float = 0.05,
) -> NullSample:
    """Draw the released statistic's null distribution given the released noisy marginals (module docstring).

    Parameters
    ----------
    marginals : array_like of int, shape (m_x + m_y,)
        The released (noisy, >= 1) row then column sums.
    setting : NullSetting
        The run's release: shape, privacy, projection, decoder, clients of both rounds, ``max_cell``
        and ``bits``.
    tau : float
        The observed run's noise offset.
    replicates : int
        ``B >= 1``.
    rng : RNG
        The server's generator for the simulation (a stream of its own).
    effect : float
        Cohen's ``w`` in [0, 1] (0: none): also draw ``B`` tables of the alternative of
        :func:`~fedstats.analyses.chi2.rare.effect_probabilities` through the same release (after the null
        ones, so the null sample does not depend on it) and estimate the test's power there.
    level : float
        The test's level, for the power.

    Returns
    -------
    NullSample
        With ``power = (w, power)`` when ``effect > 0``.
    """
    m_x = setting.shape[0]
    marg = np.asarray(marginals, dtype=np.float64)
    vx, vy = marg[:m_x], marg[m_x:]
    total = max(1, round(0.5 * (vx.sum() + vy.sum())))
    p = np.outer(vx / vx.sum(), vy / vy.sum()).ravel()
    tables = _multinomial(rng, total, p / p.sum(), replicates)
    r, shift = _released(tables, setting, total, rng)
    power = None
    if effect > 0.0:
        p1, w = effect_probabilities(vx, vy, effect)
        r1, _ = _released(_multinomial(rng, total, p1, replicates), setting, total, rng)
        # the test rejects when p = (1 + #{R_b >= R}) / (B + 1) <= level
        allowed = math.floor(level * (replicates + 1) + 1e-9) - 1
        crit = math.inf if allowed < 0 else float(np.sort(r)[replicates - 1 - allowed])
        power = (w, float(np.mean(r1 > crit)) if math.isfinite(crit) else 0.0)
    return NullSample(np.sort(r), float(dof_of(setting.shape) + tau), np.sort(shift), power)


def dof_of(shape: tuple[int, int]) -> int:
    """``(m_x - 1)(m_y - 1)``."""
    return (shape[0] - 1) * (shape[1] - 1)


def _released(
    tables: np.ndarray, st: NullSetting, total: int, rng: RNG
) -> tuple[np.ndarray, np.ndarray]:
    """Each table through the release (module docstring, steps 2-3): ``R_b`` and ``s~_b - s_b``."""
    m_x, m_y = st.shape
    m = m_x * m_y
    replicates = tables.shape[0]
    privacy, projection = st.privacy, st.projection
    n_clients, n_survivors = st.n_clients, st.n_survivors
    ell = projection.encoding_size
    dof = dof_of(st.shape)
    cube = tables.reshape(replicates, m_x, m_y)
    exact = np.concatenate([cube.sum(axis=2), cube.sum(axis=1)], axis=1)
    noisy = noisy_marginals(exact, privacy, rng).astype(np.float64)
    bx, by = noisy[:, :m_x], noisy[:, m_x:]
    vbar = (bx[:, :, None] * by[:, None, :]).reshape(replicates, m) / bx.sum(axis=1)[:, None]
    sq = np.sqrt(vbar)
    counts = tables.astype(np.float64)
    frac = n_survivors / n_clients
    if n_survivors < n_clients:
        counts = np.asarray(rng.binomial(tables, frac), dtype=np.float64)
    w = (counts - frac * vbar) / sq
    # the marginal noise's share of the statistic: ||w||^2 against Pearson's statistic of the replicate's
    # own table (its exact expected counts; an empty row or column contributes 0)
    ex = (cube.sum(axis=2)[:, :, None] * cube.sum(axis=1)[:, None, :]).reshape(
        replicates, m
    ) / total
    with np.errstate(divide="ignore", invalid="ignore"):
        pearson = np.where(ex > 0, (tables - ex) ** 2 / np.where(ex > 0, ex, 1.0), 0.0).sum(axis=1)
    shift = (w * w).sum(axis=1) - pearson
    # public column norms ||P_j|| (streamed), and the largest row norm
    col = np.empty(m)
    acc = np.zeros(ell)
    for a in range(0, m, _COL_CHUNK):
        c = projection.columns(np.arange(a, min(m, a + _COL_CHUNK)))
        col[a : a + c.shape[0]] = np.sqrt((c * c).sum(axis=1))
        acc += (c * c).sum(axis=0)
    row_norm = float(np.sqrt(acc.max()))
    cnorm = (col[None, :] / sq).max(axis=1)
    room = headroom(privacy, m_x, m_y)
    plans = [
        round2_plan(
            privacy,
            vbar=vbar[b],
            row_norm=row_norm,
            column_norm=float(cnorm[b]),
            n_clients=n_clients,
            max_cell=st.max_cell,
            bits=st.bits,
            ell=ell,
            total_bound=float(bx[b].sum()) + room,
            min_dim=min(m_x, m_y),
            exact=False,
        )
        for b in range(replicates)
    ]
    if m * ell <= MAX_DENSE_ENTRIES:
        e = w @ projection.matrix(m).T
    else:
        norm = np.sqrt((w * w).sum(axis=1))
        e = norm[:, None] * np.asarray(rng.normal(0.0, math.sqrt(2.0), (replicates, ell)))
    sd = np.array([math.sqrt(discrete_gaussian_variance(q.sigma)) * q.step for q in plans])
    grid = np.array([q.step if q.k else 0.0 for q in plans])
    rounding = np.array([math.sqrt(n_survivors / 6.0) * 2.0**-q.frac_bits for q in plans])
    e = e + sd[:, None] * np.asarray(rng.standard_normal((replicates, ell)))
    e = e + grid[:, None] * (np.asarray(rng.random((replicates, ell))) - 0.5)
    e = e + rounding[:, None] * np.asarray(rng.standard_normal((replicates, ell)))
    taus = np.array([q.tau for q in plans])
    r = batch_decode(e, st.decoder) / (dof + taus)
    return r, shift
