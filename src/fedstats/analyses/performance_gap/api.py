"""One-call API: measure a performance gap between groups from per-client (group, value) data, privately.

Follows the rule of :mod:`fedstats.analyses._api` for ``engine``, ``randomness`` and ``ledger``: the
clients' draws and the simulated population's resampling come from the engine (its route reads the
population with its own randomness; the analysis makes no server-side draw), and the ledger is charged the mechanism's true loss before the round runs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedstats._validation import (
    GRID_WHY,
    MIN_GRID_EPSILON,
    check_choice,
    check_int,
    check_local_epsilon,
    check_open_unit,
)
from fedstats.analyses import _api
from fedstats.analyses.performance_gap.allocation import GroupLayout, allocate
from fedstats.analyses.performance_gap.client import GROUP_COLUMN, VALUE_COLUMN
from fedstats.analyses.performance_gap.config import PerformanceGapConfig
from fedstats.analyses.performance_gap.mechanisms import check_mechanism
from fedstats.analyses.performance_gap.protocol import (
    PerformanceGapResult,
    performance_gap_protocol,
)
from fedstats.analyses.usefulness import attach_warnings
from fedstats.engine import Engine, InMemoryPopulation, ResampledPopulation
from fedstats.engine.populations import Population, block_count
from fedstats.errors import DataError, ParameterError
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.randomness import RandomSource

__all__ = ["measure_performance_gap", "prepare_columns", "simulated_truth"]


def prepare_columns(
    groups: Any, values: Any, *, scale: str = "rate"
) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """Validate per-client groups and values; return group codes, values in [-1, 1] and the labels.

    Parameters
    ----------
    groups : array_like, shape (n,)
        Group label of each client (any sortable values: strings, integers).
    values : array_like of float, shape (n,)
        Performance value of each client: a rate in [0, 1] (``scale="rate"``) or a value in [-1, 1]
        (``scale="signed"``).
    scale : {"rate", "signed"}

    Returns
    -------
    codes : numpy.ndarray of int64, shape (n,)
        Index of each client's group in ``labels``.
    v : numpy.ndarray of float64, shape (n,)
        Values in [-1, 1] (``2 r - 1`` for rates).
    labels : list
        Sorted distinct group labels (at least two).

    Raises
    ------
    DataError
        If the arrays are empty, differ in length, hold NaN/inf or out-of-range values, or there are fewer
        than two groups.
    """
    check_choice("scale", scale, ("rate", "signed"))
    g = np.asarray(groups)
    v = np.asarray(values, dtype=np.float64) if np.size(values) else np.zeros(0)
    if g.ndim != 1 or v.ndim != 1 or g.size != v.size:
        raise DataError(
            f"groups and values must be 1-D of equal length, got shapes {g.shape} and {v.shape}"
        )
    if v.size == 0:
        raise DataError("no clients: groups and values are empty")
    if not np.isfinite(v).all():
        raise DataError("values has a NaN or infinite value")
    lo, hi = (0.0, 1.0) if scale == "rate" else (-1.0, 1.0)
    if float(v.min()) < lo or float(v.max()) > hi:
        bad = float(v[(v < lo) | (v > hi)][0])
        raise DataError(
            f"values must lie in [{lo:g}, {hi:g}] for scale={scale!r}; found {bad!r} "
            "(performance values are bounded: rates in [0, 1] or values in [-1, 1])"
        )
    if g.dtype.kind == "f" and not np.isfinite(g).all():
        raise DataError("groups has a missing (NaN) label")
    labels_arr, codes = np.unique(g, return_inverse=True)
    if labels_arr.size < 2:
        raise DataError(
            f"a performance gap needs at least two groups; found only {labels_arr.size} "
            f"({labels_arr.tolist()!r})"
        )
    vv = 2.0 * v - 1.0 if scale == "rate" else v
    return codes.astype(np.int64), vv, [x.item() if hasattr(x, "item") else x for x in labels_arr]


def _resolve_pair(pair: Sequence[Any] | None, labels: list[Any]) -> tuple[int, int]:
    if pair is None:
        if len(labels) != 2:
            raise ParameterError(
                "pair", None, f"two of the {len(labels)} groups {labels!r} to compare"
            )
        return (0, 1)
    if len(pair) != 2:
        raise ParameterError("pair", pair, "two group labels")
    idx = []
    str_labels = [str(x) for x in labels]
    for p in pair:
        if p in labels:
            idx.append(labels.index(p))
        elif str(p) in str_labels:
            idx.append(str_labels.index(str(p)))
        else:
            raise ParameterError("pair", pair, f"two labels among {labels!r}")
    if idx[0] == idx[1]:
        raise ParameterError("pair", pair, "two different groups")
    return idx[0], idx[1]


def _block_truth(batch: Any, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-group sums of the values and sizes of one block's clients."""
    g = np.asarray(batch.column(GROUP_COLUMN), dtype=np.int64)
    v = np.asarray(batch.column(VALUE_COLUMN), dtype=np.float64)
    return np.bincount(g, weights=v, minlength=n_groups), np.bincount(g, minlength=n_groups)


class _ObservedPopulation:
    """A population that keeps the truth of each whole block the round reads in this process.

    Simulation only: :func:`simulated_truth` then adds the recorded per-block sums (in block order: the
    same arithmetic as reading the blocks again) instead of generating every client a second time. Blocks
    read by other processes (the process and Dask routes) are not recorded; the truth then reads them.
    """

    def __init__(self, inner: Population, n_groups: int) -> None:
        self.inner = inner
        self.n_groups = n_groups
        self.pid = os.getpid()
        self.seen: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.key: tuple[int, RandomSource] | None = None

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        return self.inner.n_clients

    def block(
        self, block_index: int, block_size: int, start: int, stop: int, randomness: RandomSource
    ) -> Any:
        """The inner population's clients; a whole block read here is also summed per group."""
        batch = self.inner.block(block_index, block_size, start, stop, randomness)
        first = block_index * block_size
        whole = start == first and stop == min(first + block_size, self.n_clients)
        if whole and os.getpid() == self.pid:
            if self.key != (block_size, randomness):
                self.key, self.seen = (block_size, randomness), {}
            self.seen[block_index] = _block_truth(batch, self.n_groups)
        return batch

    def histogram(self, start: int, stop: int, randomness: RandomSource) -> Any:
        """The inner population's histogram (aggregate route)."""
        return self.inner.histogram(start, stop, randomness)  # type: ignore[attr-defined]

    def recorded(
        self, block_size: int, randomness: RandomSource
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every block's truth when all were read with this block size and randomness, else empty."""
        n_blocks = block_count(self.n_clients, block_size)
        if self.key != (block_size, randomness) or len(self.seen) != n_blocks:
            return []
        return [self.seen[b] for b in range(n_blocks)]


def simulated_truth(
    population: Population, engine: Engine, n_groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """Compute the exact per-group sums and sizes of the clients the engine ran on (simulation only).

    Reads the population outside any protocol (nothing here is sent by a client) the way the engine's
    route does: block by block with the engine's block size and randomness on the per-client routes (a
    generated population gives the same clients as in the round), or as the histogram of every client on
    the aggregate route (the same range gives the same histogram). A population of
    :func:`measure_performance_gap` whose blocks the round read in this process gives their recorded
    per-block sums instead (the same numbers, added in the same order).

    Parameters
    ----------
    population : Population
        Columns ``group`` (int in ``[0, n_groups)``) and ``value``.
    engine : Engine
        The engine that ran the round.
    n_groups : int
        Number of groups ``d``.

    Returns
    -------
    sums : numpy.ndarray of float64, shape (d,)
        Per-group sums of the values.
    counts : numpy.ndarray of int64, shape (d,)
        Per-group sizes.
    """
    n = population.n_clients
    sums = np.zeros(n_groups)
    counts = np.zeros(n_groups, dtype=np.int64)
    histogram = getattr(population, "histogram", None)
    if engine.backend.name == "aggregate" and histogram is not None:
        hist = histogram(0, n, engine.randomness)
        g = np.asarray(hist.column(GROUP_COLUMN), dtype=np.int64)
        v = np.asarray(hist.column(VALUE_COLUMN), dtype=np.float64)
        c = np.asarray(hist.counts, dtype=np.int64)
        np.add.at(sums, g, v * c.astype(np.float64))
        np.add.at(counts, g, c)
        return sums, counts
    bs = engine.block_size
    seen = (
        population.recorded(bs, engine.randomness)
        if isinstance(population, _ObservedPopulation)
        else []
    )
    for b in range(block_count(n, bs)):
        if seen:
            block_sums, block_counts = seen[b]
        else:
            start, stop = b * bs, min((b + 1) * bs, n)
            batch = population.block(b, bs, start, stop, engine.randomness)
            block_sums, block_counts = _block_truth(batch, n_groups)
        sums += block_sums
        counts += block_counts
    return sums, counts


_DEFAULT = PerformanceGapConfig
"""The options the library shares with a task take the config's defaults. ``scale`` differs on purpose:
the library reads rates by default (``fedstats gap``), a task's ``value`` column is already in [-1, 1]."""


def measure_performance_gap(
    groups: Any,
    values: Any,
    *,
    mechanism: str = _DEFAULT.mechanism,
    epsilon: float | None = None,
    accounting: str = _DEFAULT.accounting,
    scale: str = "rate",
    pair: Sequence[Any] | None = None,
    estimate_sizes: bool = True,
    n_clients: int | None = None,
    confidence: float = _DEFAULT.confidence,
    resolution_bits: int = _DEFAULT.resolution_bits,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
    ledger: PrivacyLedger | None = None,
) -> PerformanceGapResult:
    r"""Measure the gap between two groups' mean performance under local DP (Juarez & Korolova 2023).

    Each client applies :math:`\mathcal M_R` or :math:`\mathcal M_L` to its (group, value) pair with the
    budget split chosen by ``accounting`` and sends a one-hot report; the server sees only the sum
    (:mod:`.protocol`). By default the group sizes are estimated from the randomized group reports, so
    nothing exact is released; ``estimate_sizes=False`` uses the known exact sizes (the paper's Def. 7
    assumption) and releases them as they are (:attr:`PerformanceGapResult.exact_group_sizes_released`).
    The defaults are those of ``fedstats gap``: the same seed and options give the same result (the CLI's
    ``--seed s`` is ``randomness=RandomSource(s)``).

    The estimate, the interval's end points and the group means are clipped to the parameter space as
    post-processing (group means in the value range, the gap in [-1, 1] for rates, [-2, 2] for signed
    values); the unclipped numbers are in ``details["unclipped"]``. With estimated sizes each group mean is
    Beale's bias-corrected ratio (:func:`~.protocol.ratio_bias_factor`; its remaining bias is stated there,
    and ``warnings`` name a compared group whose estimated size has a relative standard error above
    :data:`~.protocol.SIZE_RSE_WARN`), and the standard error is the delta method's evaluated at a lower
    confidence bound of each group size (a conservative small-sample correction, see
    ``docs/performance_gap.md``).

    Parameters
    ----------
    groups : array_like, shape (n,)
        Each client's group label.
    values : array_like of float, shape (n,)
        Each client's performance value (rates in [0, 1] or values in [-1, 1], see ``scale``).
    mechanism : {"R", "L"}, default "R"
        :math:`\mathcal M_R` (randomized response on the value bit) or :math:`\mathcal M_L`
        (discrete Laplace on a grid).
    epsilon : float
        Total local privacy budget per client, in (0, inf). Required: the measurement is local DP and has
        no non-private mode (a call without it raises :class:`ParameterError` naming ``epsilon``, as the
        CLI requires ``--epsilon``).
    accounting : {"exact", "paper"}, default "exact"
        ``"exact"``: the split minimizing the gap's variance with true loss <= epsilon. ``"paper"``: the
        paper's split (for reproduction; its real loss, reported as ``epsilon`` and charged to the
        ledger, exceeds the budget).
    scale : {"rate", "signed"}, default "rate"
        Units of ``values``.
    pair : (label, label), optional
        The two compared groups (A, B), gap = m_A - m_B; default the two groups in sorted order (required
        with more than two groups).
    estimate_sizes : bool, default True
        Estimate the group sizes from the perturbed groups (private, the default); False uses the known
        exact sizes and releases them without privacy (opt-in, the paper's assumption).
    n_clients : int, optional
        Simulate this many clients resampled with replacement from the rows within each group (block by
        block, never materialized; groups keep their proportions); ``truth`` is then the simulated
        clients' exact gap.
    confidence : float, default 0.95
        Level of the interval, in (0, 1).
    resolution_bits : int, default 16
        :math:`\mathcal M_L`'s release grid (see :mod:`.protocol`), in [2, 30].
    engine : Engine, optional
        Route for the sum and the clients' randomness (see :mod:`fedstats.analyses._api`).
    randomness : RandomSource, optional
        Builds the serial engine when ``engine`` is None (this analysis makes no server-side draw).
    ledger : PrivacyLedger, optional
        Charged the mechanism's true loss (``mechanism.privacy_loss()``) before the round runs; a refused
        charge runs nothing.

    Returns
    -------
    PerformanceGapResult
        Estimate, interval, group means, ``truth`` (the data's or the simulated clients' exact gap).

    Raises
    ------
    DataError
        Bad data (see :func:`prepare_columns`).
    ParameterError
        Bad parameters (epsilon <= 0, too few clients to give each group one, unknown mechanism, a
        mechanism that is not DP charged to a ledger, ...).
    BudgetExceededError
        If the ledger refuses the charge.
    """
    if epsilon is None:
        raise ParameterError(
            "epsilon",
            None,
            "a local privacy budget in (0, inf): the performance gap has no non-private mode",
        )
    kind = check_mechanism(mechanism)
    eps = check_local_epsilon("epsilon", epsilon, low=MIN_GRID_EPSILON, why=GRID_WHY)
    check_choice("accounting", accounting, ("exact", "paper"))
    check_open_unit("confidence", confidence)
    codes, v, labels = prepare_columns(groups, values, scale=scale)
    i, j = _resolve_pair(pair, labels)
    d = len(labels)
    engine, _ = _api.resolve(engine, randomness)
    population, sizes = _population(codes, v, d, n_clients)
    layout = GroupLayout(tuple(sizes.tolist()), (i, j))
    alloc = allocate(kind, eps, layout, accounting=accounting)
    mech = alloc.mechanism
    protocol = performance_gap_protocol(
        mech,
        sizes=None if estimate_sizes else sizes.tolist(),
        pair=(i, j),
        labels=labels,
        scale=scale,
        confidence=confidence,
        resolution_bits=resolution_bits,
        allocation=alloc.to_dict(),
    )
    with _api.charging(ledger):
        if ledger is not None:
            ledger.spend_loss(mech.privacy_loss(), label=f"performance gap (M_{kind})")
    n_log = len(engine.log)
    res = engine.run(protocol, population)
    truth = _true_gap(codes, v, (i, j), population if n_clients is not None else None, engine, d)
    truth *= 0.5 if scale == "rate" else 1.0
    res = dataclasses.replace(
        res,
        truth=truth,
        true_gap=truth,
        bytes_per_client=int(engine.log[n_log].bytes_per_client),
        release_note=engine.randomness.release_note,
        details={**res.details, "budget": eps, "accounting": accounting},
    )
    return attach_warnings(res)  # type: ignore[no-any-return]


def _population(
    codes: np.ndarray, v: np.ndarray, d: int, n_clients: int | None
) -> tuple[Population, np.ndarray]:
    """The clients and the group sizes: one client a row, or ``n_clients`` resampled within each group.

    Raises
    ------
    ParameterError
        If ``n_clients`` is too small to give each of the ``d`` groups one client.
    """
    if n_clients is None:
        population = InMemoryPopulation({GROUP_COLUMN: codes, VALUE_COLUMN: v})
        return population, np.bincount(codes, minlength=d).astype(np.float64)
    K = check_int("n_clients", n_clients, low=d)
    pop = ResampledPopulation({GROUP_COLUMN: codes, VALUE_COLUMN: v}, K, strata=GROUP_COLUMN)
    sizes = np.asarray(pop.stratum_clients, dtype=np.float64)
    if (sizes < 1).any():
        raise ParameterError(
            "n_clients", K, f"enough clients to give each of the {d} groups at least one"
        )
    # the round's own reads of each block give the truth (no second generation of the clients)
    return _ObservedPopulation(pop, d), sizes


def _true_gap(
    codes: np.ndarray,
    v: np.ndarray,
    pair: tuple[int, int],
    observed: Any,
    engine: Engine,
    d: int,
) -> float:
    """The exact gap ``m_i - m_j`` of the encoded values: the data's, or the simulated clients' (observed)."""
    i, j = pair
    if observed is None:
        m = [float(v[codes == g].mean()) for g in (i, j)]
    else:
        true_sums, true_counts = simulated_truth(observed, engine, d)
        if true_counts[i] == 0 or true_counts[j] == 0:
            raise DataError("a compared group has no simulated client")
        m = [float(true_sums[g] / true_counts[g]) for g in (i, j)]
    return m[0] - m[1]
