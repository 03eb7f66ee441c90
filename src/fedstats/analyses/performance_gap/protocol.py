r"""The performance-gap measurement as a one-round protocol on the engine.

Each client perturbs its (group, value) pair locally with :math:`\mathcal M_R` or :math:`\mathcal M_L`
(:mod:`.mechanisms`) and sends a report of length ``2d + 1``: its perturbed value in the slot of its
perturbed group (a one-hot vector), a 1 in the count slot of that group, and (for :math:`\mathcal M_L`) a
clipping flag. The server learns only the sum: per perturbed group, the sum of reported values
:math:`S_g` and the number of reports :math:`N'_g`. It then computes the estimators of Def. 7,

.. math:: \hat m_g = \frac{S_g}{c\, n_g}, \qquad c = a(2b-1)\ (\mathcal M_R), \quad c = a\ (\mathcal M_L),

with the true group sizes :math:`n_g` known (the paper's assumption) or estimated from the perturbed counts
(GRR frequency estimator :math:`\hat n_g = (N'_g - K\bar a)/(a - \bar a)`, ``estimate_sizes=True``; the
standard error then comes from the delta method), and the gap :math:`\hat m_A - \hat m_B` with its
standard error from Theorem 9.

Encoding on the wire: :math:`\mathcal M_R`'s values are :math:`\pm 1` (exact integers).
:math:`\mathcal M_L`'s values are released on the grid of spacing :math:`\gamma = 2^{1-r}` (``r`` =
``resolution_bits``): the value index :math:`v/\gamma` is rounded at random (unbiased, still within
:math:`\pm 2^{r-1}`, so the integer sensitivity is :math:`2^r`) and discrete Laplace noise of scale
:math:`2^r/\varepsilon_2` (kept group) or :math:`k 2^{r-1}/\varepsilon_2` (changed group) is added
(:func:`fedstats.privacy.mechanisms.samplers.sample_discrete_laplace`): the released integer is safe from
floating-point attacks and its privacy loss is that of the continuous analysis. Reports are clipped to
``clip_scales`` noise scales (post-processing; the probability of any clipping is below
:math:`10^{-8}` for ``10^9`` clients with the default 40 scales) and clipped reports are counted.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import norm

from fedstats._validation import check_choice, check_int, check_real
from fedstats.analyses.performance_gap.allocation import GroupLayout
from fedstats.analyses.performance_gap.mechanisms import GapMechanism
from fedstats.engine import ClientBatch, Engine, Round, RoundSum
from fedstats.engine.populations import Population
from fedstats.errors import DataError, ParameterError
from fedstats.privacy.mechanisms.randomized_response import (
    GeneralizedRandomizedResponse,
    RandomizedResponse,
)
from fedstats.privacy.mechanisms.samplers import bernoulli, sample_discrete_laplace
from fedstats.randomness import RNG
from fedstats.results import AnalysisResult

__all__ = [
    "GapSums",
    "PerformanceGapResult",
    "encode_gap_report",
    "encode_truth",
    "estimate_gap",
    "performance_gap_protocol",
    "perturb",
]

GROUP_COLUMN = "group"
VALUE_COLUMN = "value"
_TRUTH_BITS = 30


def _report_layout(mech: GapMechanism, resolution_bits: int, clip_scales: float) -> dict[str, Any]:
    """Public parameters of the round (plain numbers)."""
    params: dict[str, Any] = {
        "mechanism": mech.kind,
        "epsilon1": mech.epsilon1,
        "epsilon2": mech.epsilon2,
        "n_groups": mech.n_groups,
        "k": mech.k,
    }
    if mech.kind == "L":
        half = 2 ** (resolution_bits - 1)  # value index range [-half, half]
        t_keep = 2.0 * half / mech.epsilon2  # integer sensitivity 2 * half
        t_flip = mech.k * half / mech.epsilon2
        clip = math.ceil(half + clip_scales * max(t_keep, t_flip))
        params.update(
            resolution_bits=resolution_bits,
            half=half,
            t_keep=t_keep,
            t_flip=t_flip,
            clip=clip,
        )
    return params


def perturb(
    groups: np.ndarray, values: np.ndarray, params: Mapping[str, Any], rng: RNG
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Apply the mechanism to each client's (group, value): Algorithm 1 (R) or its Laplace variant (L).

    Parameters
    ----------
    groups : numpy.ndarray of int, shape (n,)
        Groups in {0, ..., d-1}.
    values : numpy.ndarray of float, shape (n,)
        Values in [-1, 1].
    params : Mapping
        The round's public parameters (see :func:`performance_gap_protocol`).
    rng : RNG

    Returns
    -------
    new_groups : numpy.ndarray of int64, shape (n,)
    reported : numpy.ndarray of int64, shape (n,)
        R: the value bit as -1/+1. L: the released grid index (value / gamma), clipped.
    clipped : numpy.ndarray of bool, shape (n,)
        L: whether the report was clipped (always False for R).
    """
    d = int(params["n_groups"])
    g = np.asarray(groups, dtype=np.int64)
    n = g.size
    grr = GeneralizedRandomizedResponse(epsilon=max(float(params["epsilon1"]), 1e-300), k=d)
    new_g = grr.randomize(g, rng) if n else g
    kept = new_g == g
    v = np.where(kept, np.asarray(values, dtype=np.float64), 0.0)
    if params["mechanism"] == "R":
        bits = bernoulli((1.0 + v) / 2.0, n, rng)  # Harmony discretization (Alg. 1, line 5)
        rr = RandomizedResponse(epsilon=float(params["epsilon2"]))
        out = rr.randomize(bits.astype(np.uint8), rng).astype(np.int64) * 2 - 1
        return new_g, out, np.zeros(n, dtype=bool)
    half = int(params["half"])
    x = v * half  # grid index of the value, in [-half, half]
    fl = np.floor(x)
    idx = (fl + bernoulli(x - fl, n, rng)).astype(np.int64)  # unbiased randomized rounding
    noise = np.asarray(sample_discrete_laplace(float(params["t_keep"]), n, rng), dtype=np.int64)
    flipped = np.flatnonzero(~kept)
    if flipped.size:
        noise[flipped] = sample_discrete_laplace(float(params["t_flip"]), flipped.size, rng)
    y = idx + noise
    clip = int(params["clip"])
    clipped = np.abs(y) > clip
    return new_g, np.clip(y, -clip, clip), clipped


def encode_gap_report(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Client side: one-hot perturbed value, count and clipping flag, int64 of shape ``(n, 2d + 1)``."""
    g = batch.column(params.get("group_column", GROUP_COLUMN))
    v = batch.column(params.get("value_column", VALUE_COLUMN))
    d = int(params["n_groups"])
    new_g, y, clipped = perturb(g, v, params, rng)
    n = new_g.size
    out = np.zeros((n, 2 * d + 1), dtype=np.int64)
    rows = np.arange(n)
    out[rows, new_g] = y
    out[rows, d + new_g] = 1
    out[:, 2 * d] = clipped
    return out


def encode_truth(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Simulation only (not private): each client's exact value in its true group's slot, and a count."""
    g = np.asarray(batch.column(params.get("group_column", GROUP_COLUMN)), dtype=np.int64)
    v = np.asarray(batch.column(params.get("value_column", VALUE_COLUMN)), dtype=np.float64)
    d = int(params["n_groups"])
    out = np.zeros((g.size, 2 * d), dtype=np.int64)
    rows = np.arange(g.size)
    out[rows, g] = np.rint(v * 2.0**_TRUTH_BITS).astype(np.int64)
    out[rows, d + g] = 1
    return out


@dataclass(frozen=True)
class GapSums:
    """What the server learned: per perturbed group, the sum of reported values and the report count.

    Attributes
    ----------
    value_sums : numpy.ndarray of float64, shape (d,)
        In value units.
    counts : numpy.ndarray of int64, shape (d,)
    n_clients : int
    clipped : int
    true_sums, true_counts : numpy.ndarray or None
        Simulation only: the exact per-group sums and sizes.
    """

    value_sums: np.ndarray
    counts: np.ndarray
    n_clients: int
    clipped: int = 0
    true_sums: np.ndarray | None = None
    true_counts: np.ndarray | None = None


def performance_gap_protocol(
    mech: GapMechanism,
    *,
    resolution_bits: int = 16,
    clip_scales: float = 40.0,
    with_truth: bool = False,
) -> Generator[Round, RoundSum, GapSums]:
    r"""Server-side protocol: one private round (and, in simulation, one exact round for the truth).

    Parameters
    ----------
    mech : GapMechanism
        Mechanism and budget split.
    resolution_bits : int, default 16
        :math:`\\mathcal M_L` grid resolution (grid spacing ``2**(1 - resolution_bits)``), in [2, 30].
    clip_scales : float, default 40
        :math:`\\mathcal M_L` clipping range in noise scales, >= 10.
    with_truth : bool, default False
        Add a non-private round computing the exact group sums (simulation only: never in a deployment).

    Returns
    -------
    GapSums
        The round's decoded sums (returned by ``Engine.run``).
    """
    check_int("resolution_bits", resolution_bits, low=2, high=30)
    check_real("clip_scales", clip_scales, low=10.0, high=1e6)
    params = _report_layout(mech, resolution_bits, clip_scales)
    d = mech.n_groups
    bound = int(params.get("clip", 1))
    s = yield Round("perturbed reports", encode_gap_report, params, dim=2 * d + 1, bound=bound)
    total = np.asarray(s.total, dtype=object).astype(float)
    if mech.kind == "L":
        sums = total[:d] / float(params["half"])
    else:
        sums = total[:d].copy()
    counts = np.asarray([int(c) for c in np.asarray(s.total)[d : 2 * d]], dtype=np.int64)
    clipped = int(np.asarray(s.total)[2 * d])
    true_sums = true_counts = None
    if with_truth:
        t = yield Round(
            "truth (simulation only)", encode_truth, params, dim=2 * d, bound=2**_TRUTH_BITS
        )
        tt = np.asarray(t.total)
        true_sums = np.array([int(x) for x in tt[:d]], dtype=np.float64) / 2.0**_TRUTH_BITS
        true_counts = np.array([int(x) for x in tt[d:]], dtype=np.int64)
    return GapSums(sums, counts, s.n_clients, clipped, true_sums, true_counts)


@dataclass
class PerformanceGapResult(AnalysisResult):
    r"""A measured performance gap ``m_A - m_B`` (Juarez & Korolova, Def. 4 without the absolute value).

    Attributes (beyond :class:`~fedstats.results.AnalysisResult`)
    ------------------------------------------------------------
    gap : float
        Estimated signed gap ``m_A - m_B`` in the data's units (rates or [-1, 1] values); equals
        ``estimate``. Unbiased with known group sizes; ``abs(gap)`` is the paper's :math:`\\Delta m`.
    true_gap : float or None
        Simulation: the exact gap of the simulated clients (equals ``truth``).
    groups : list
        Group labels; ``pair`` names the compared two.
    group_means, group_standard_errors : list of float
        Every group's estimated mean and its standard error.
    group_sizes : list of float
        Sizes used by the estimator (true, or estimated from the perturbed groups).
    true_loss : float
        The mechanism's real worst-case privacy loss (= ``epsilon``).
    allocation : dict
        epsilon1, epsilon2, k, accounting, paper_loss.
    chebyshev_half_width : float
        Half-width of the Chebyshev interval at ``confidence`` (always valid; the CI uses the normal
        approximation).
    """

    gap: float = 0.0
    true_gap: float | None = None
    groups: list[Any] = field(default_factory=list)
    pair: tuple[Any, Any] | None = None
    group_means: list[float] = field(default_factory=list)
    group_standard_errors: list[float] = field(default_factory=list)
    group_sizes: list[float] = field(default_factory=list)
    true_loss: float = math.inf
    mechanism: str = ""
    allocation: dict[str, Any] = field(default_factory=dict)
    estimate_sizes: bool = False
    chebyshev_half_width: float = math.nan
    clipped_reports: int = 0


def estimate_gap(
    sums: GapSums,
    mech: GapMechanism,
    *,
    sizes: Sequence[float] | None,
    pair: tuple[int, int] = (0, 1),
    scale: str = "rate",
    confidence: float = 0.95,
    nu2: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Server side: group means, gap and standard errors from the round's sums (Def. 7, Theorem 9).

    Parameters
    ----------
    sums : GapSums
    mech : GapMechanism
    sizes : sequence of float or None
        True group sizes (known to the operator, the paper's assumption); None: estimate them from the
        perturbed counts.
    pair : (int, int)
        Compared groups (A, B); the gap is ``m_A - m_B``.
    scale : {"rate", "signed"}
        ``"rate"``: values were rates mapped by v = 2r - 1; results are returned in rate units.
    confidence : float
        Level of the normal-approximation interval, in (0, 1).
    nu2 : sequence of float, optional
        Each group's mean squared value for the variance (default: worst case, a conservative SE).

    Returns
    -------
    dict
        ``gap``, ``standard_error``, ``ci``, ``chebyshev_half_width``, ``group_means``,
        ``group_standard_errors``, ``group_sizes``.

    Raises
    ------
    DataError
        If a compared group has no client (or its estimated size is not positive).
    """
    d = mech.n_groups
    K = float(sums.n_clients)
    c = mech.value_gain
    unit = 0.5 if scale == "rate" else 1.0
    if sizes is None:
        a, ao = mech.a, mech.a_other
        n_hat = (sums.counts - K * ao) / (a - ao)
        n_used = np.asarray(n_hat, dtype=np.float64)
    else:
        n_used = np.asarray(sizes, dtype=np.float64)
        if n_used.shape != (d,):
            raise DataError(f"sizes needs one entry per group ({d}), got shape {n_used.shape}")
    i, j = pair
    for g in (i, j):
        if n_used[g] <= 0:
            raise DataError(
                f"group {g} has no clients"
                + (
                    " (estimated size <= 0: too few clients for this epsilon)"
                    if sizes is None
                    else ""
                )
            )
    safe = np.where(n_used > 0, n_used, np.nan)
    means = sums.value_sums / (c * safe)
    var = np.array(
        [
            mech.group_variance(float(safe[g]), K, None if nu2 is None else float(nu2[g]))
            if np.isfinite(safe[g])
            else np.nan
            for g in range(d)
        ]
    )
    if sizes is None:
        # delta method for S / (c n_hat): Var ~ Var(S)/(cn)^2 + m^2 Var(n_hat)/n^2 - 2 m Cov(S, n_hat)/(c n^2)
        a, ao = mech.a, mech.a_other
        m = np.clip(means, -1.0, 1.0)
        var_n = (safe * a * (1 - a) + (K - safe) * ao * (1 - ao)) / (a - ao) ** 2
        cov = c * safe * m * (1 - a) / (a - ao)
        var = var + m**2 * var_n / safe**2 - 2 * m * cov / (c * safe**2)
    gap = float(means[i] - means[j])
    gvar = float(var[i] + var[j])
    se = math.sqrt(max(gvar, 0.0))
    z = float(norm.ppf((1 + confidence) / 2))
    cheb = se / math.sqrt(1 - confidence)
    return {
        "gap": gap * unit,
        "standard_error": se * unit,
        "ci": ((gap - z * se) * unit, (gap + z * se) * unit),
        "chebyshev_half_width": cheb * unit,
        "group_means": [float(x) * unit + (0.5 if scale == "rate" else 0.0) for x in means],
        "group_standard_errors": [math.sqrt(max(float(x), 0.0)) * unit for x in var],
        "group_sizes": [float(x) for x in n_used],
    }


def run_gap(
    engine: Engine,
    population: Population,
    mech: GapMechanism,
    *,
    sizes: Sequence[float] | None,
    pair: tuple[int, int] = (0, 1),
    scale: str = "rate",
    confidence: float = 0.95,
    with_truth: bool = False,
    resolution_bits: int = 16,
) -> tuple[dict[str, Any], GapSums]:
    """Run the protocol on ``engine`` over ``population`` (columns ``group`` and ``value``) and estimate.

    Returns
    -------
    (dict, GapSums)
        :func:`estimate_gap`'s output plus ``true_gap`` (simulation) and ``bytes_per_client``, and the sums.
    """
    check_choice("scale", scale, ("rate", "signed"))
    check_real("confidence", confidence, low=0.0, high=1.0, low_open=True, high_open=True)
    n_log = len(engine.log)
    recorder = _TruthRecorder(population, mech.n_groups) if with_truth else None
    sums = engine.run(
        performance_gap_protocol(mech, resolution_bits=resolution_bits),
        recorder if recorder is not None else population,
    )
    est = estimate_gap(sums, mech, sizes=sizes, pair=pair, scale=scale, confidence=confidence)
    est["bytes_per_client"] = engine.log[n_log].bytes_per_client
    est["clipped_reports"] = sums.clipped
    if with_truth:
        assert recorder is not None
        recorded = recorder.totals(engine.block_size)
        # blocks read in worker processes do not come back: then read the population again
        true_sums, true_counts = (
            recorded if recorded is not None else simulated_truth(population, engine, mech.n_groups)
        )
        i, j = pair
        if true_counts[i] == 0 or true_counts[j] == 0:
            raise DataError("a compared group has no simulated client")
        unit = 0.5 if scale == "rate" else 1.0
        est["true_gap"] = (
            float(true_sums[i] / true_counts[i] - true_sums[j] / true_counts[j]) * unit
        )
    return est, sums


class _TruthRecorder:
    """Simulation only: a population wrapper that adds up each block's true group sums as it is read.

    Nothing recorded here is sent by a client: it is the simulator's bookkeeping of the truth, gathered
    in the same pass as the round (so the truth costs no second generation of the clients). Blocks read in
    other processes are not seen; :meth:`totals` then returns None.
    """

    def __init__(self, population: Population, n_groups: int) -> None:
        self._pop = population
        self._d = n_groups
        self._blocks: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}

    @property
    def n_clients(self) -> int:
        """Number of clients of the wrapped population."""
        return self._pop.n_clients

    def block(
        self, block_index: int, block_size: int, start: int, stop: int, randomness: Any
    ) -> ClientBatch:
        """The wrapped population's block (see :meth:`fedstats.engine.Population.block`)."""
        batch = self._pop.block(block_index, block_size, start, stop, randomness)
        if start == block_index * block_size and stop == min(
            (block_index + 1) * block_size, self._pop.n_clients
        ):
            g = np.asarray(batch.column(GROUP_COLUMN), dtype=np.int64)
            v = np.asarray(batch.column(VALUE_COLUMN), dtype=np.float64)
            self._blocks[block_index] = (
                np.bincount(g, weights=v, minlength=self._d),
                np.bincount(g, minlength=self._d),
                g.size,
            )
        return batch

    def totals(self, block_size: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Per-group sums and counts over every block, or None if some block was not seen here."""
        from fedstats.engine.populations import block_count

        if len(self._blocks) != block_count(self._pop.n_clients, block_size):
            return None
        sums = np.zeros(self._d)
        counts = np.zeros(self._d, dtype=np.int64)
        for b in sorted(self._blocks):
            sums += self._blocks[b][0]
            counts += self._blocks[b][1]
        return sums, counts


def simulated_truth(
    population: Population, engine: Engine, n_groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """Simulation only: exact per-group sums and sizes of the clients the engine ran on.

    Reads the population block by block with the engine's block size and randomness (a generated
    population gives the same clients as in the round), outside any protocol: nothing here is sent by a
    client.

    Returns
    -------
    sums : numpy.ndarray of float64, shape (d,)
    counts : numpy.ndarray of int64, shape (d,)
    """
    from fedstats.engine.populations import block_count

    n = population.n_clients
    bs = engine.block_size
    sums = np.zeros(n_groups)
    counts = np.zeros(n_groups, dtype=np.int64)
    for b in range(block_count(n, bs)):
        start, stop = b * bs, min((b + 1) * bs, n)
        batch = population.block(b, bs, start, stop, engine.randomness)
        g = np.asarray(batch.column(GROUP_COLUMN), dtype=np.int64)
        v = np.asarray(batch.column(VALUE_COLUMN), dtype=np.float64)
        sums += np.bincount(g, weights=v, minlength=n_groups)
        counts += np.bincount(g, minlength=n_groups)
    return sums, counts


def layout_for(sizes: Sequence[float], pair: tuple[int, int]) -> GroupLayout:
    """A :class:`GroupLayout` of the given sizes and pair (raises if a group is empty)."""
    return GroupLayout(tuple(float(s) for s in sizes), pair)


def check_pair(pair: Any, n_groups: int) -> tuple[int, int]:
    """Validate a pair of group indices.

    Raises
    ------
    ParameterError
        If ``pair`` is not two different indices in ``[0, n_groups)``.
    """
    try:
        i, j = (int(x) for x in pair)
    except (TypeError, ValueError):
        raise ParameterError("pair", pair, "two group indices") from None
    if not (0 <= i < n_groups and 0 <= j < n_groups) or i == j:
        raise ParameterError("pair", pair, f"two different groups in [0, {n_groups})")
    return i, j
