"""Measure a performance gap between groups from per-client (group, value) data, privately, on the engine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedstats._validation import check_choice, check_int, check_real
from fedstats.analyses.performance_gap.allocation import GroupLayout, allocate
from fedstats.analyses.performance_gap.mechanisms import check_mechanism
from fedstats.analyses.performance_gap.protocol import (
    GROUP_COLUMN,
    VALUE_COLUMN,
    PerformanceGapResult,
    run_gap,
)
from fedstats.engine import Engine, InMemoryPopulation, ResampledPopulation
from fedstats.engine.populations import Population
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RandomSource

__all__ = ["measure_performance_gap", "prepare_columns"]


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


def measure_performance_gap(
    groups: Any,
    values: Any,
    *,
    mechanism: str,
    epsilon: float,
    accounting: str = "exact",
    scale: str = "rate",
    pair: Sequence[Any] | None = None,
    estimate_sizes: bool = False,
    n_clients: int | None = None,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
    confidence: float = 0.95,
    resolution_bits: int = 16,
) -> PerformanceGapResult:
    r"""Measure the gap between two groups' mean performance under local DP (Juarez & Korolova 2023).

    Each client applies :math:`\\mathcal M_R` or :math:`\\mathcal M_L` to its (group, value) pair with the
    budget split chosen by ``accounting`` and sends a one-hot report; the server sees only the sum
    (:mod:`.protocol`).

    Parameters
    ----------
    groups : array_like, shape (n,)
        Each client's group label.
    values : array_like of float, shape (n,)
        Each client's performance value (rates in [0, 1] or values in [-1, 1], see ``scale``).
    mechanism : {"R", "L"}
    epsilon : float
        Total local privacy budget per client, in (0, inf).
    accounting : {"exact", "paper"}, default "exact"
        ``"exact"``: the split minimizing the gap's variance with true loss <= epsilon. ``"paper"``: the
        paper's split (for reproduction; its real loss, reported as ``true_loss``, exceeds ``epsilon``).
    scale : {"rate", "signed"}, default "rate"
    pair : (label, label), optional
        The two compared groups (A, B), gap = m_A - m_B; default the two groups in sorted order (required
        with more than two groups).
    estimate_sizes : bool, default False
        Estimate group sizes from the perturbed groups instead of using the true ones.
    n_clients : int, optional
        Simulate this many clients resampled with replacement from the rows within each group (block by
        block, never materialized; groups keep their proportions); adds ``true_gap``.
    engine : Engine, optional
        Route for the sum (default: serial engine on ``randomness``).
    randomness : RandomSource, optional
        Used when ``engine`` is None (default: secure).
    confidence : float, default 0.95
    resolution_bits : int, default 16
        :math:`\\mathcal M_L`'s release grid (see :mod:`.protocol`).

    Returns
    -------
    PerformanceGapResult

    Raises
    ------
    DataError
        Bad data (see :func:`prepare_columns`).
    ParameterError
        Bad parameters (epsilon <= 0, too few clients to give each group one, unknown mechanism, ...).
    """
    kind = check_mechanism(mechanism)
    eps = check_real("epsilon", epsilon, low=0.0, high=math.inf, low_open=True, high_open=True)
    check_choice("accounting", accounting, ("exact", "paper"))
    codes, v, labels = prepare_columns(groups, values, scale=scale)
    i, j = _resolve_pair(pair, labels)
    d = len(labels)
    if engine is None:
        engine = Engine(randomness=randomness or RandomSource())
    population: Population
    if n_clients is None:
        population = InMemoryPopulation({GROUP_COLUMN: codes, VALUE_COLUMN: v})
        sizes = np.bincount(codes, minlength=d).astype(np.float64)
    else:
        K = check_int("clients", n_clients, low=d)
        pop = ResampledPopulation({GROUP_COLUMN: codes, VALUE_COLUMN: v}, K, strata=GROUP_COLUMN)
        sizes = np.asarray(pop.stratum_clients, dtype=np.float64)
        if (sizes < 1).any():
            raise ParameterError(
                "clients", K, f"enough clients to give each of the {d} groups at least one"
            )
        population = pop
    layout = GroupLayout(tuple(sizes.tolist()), (i, j))
    alloc = allocate(kind, eps, layout, accounting=accounting)
    mech = alloc.mechanism
    est, sums = run_gap(
        engine,
        population,
        mech,
        sizes=None if estimate_sizes else sizes.tolist(),
        pair=(i, j),
        scale=scale,
        confidence=confidence,
        with_truth=n_clients is not None,
        resolution_bits=resolution_bits,
    )
    if n_clients is None:
        unit = 0.5 if scale == "rate" else 1.0
        m = [float(v[codes == g].mean()) for g in (i, j)]
        truth: float | None = (m[0] - m[1]) * unit
    else:
        truth = est.get("true_gap")
    rs = engine.randomness
    return PerformanceGapResult(
        analysis="performance_gap",
        estimate=est["gap"],
        ci=est["ci"],
        standard_error=est["standard_error"],
        confidence=confidence,
        truth=truth,
        epsilon=alloc.true_loss,
        delta=0.0,
        n_clients=int(sums.n_clients),
        bytes_per_client=int(est["bytes_per_client"]),
        release_note=rs.release_note,
        gap=est["gap"],
        true_gap=truth,
        groups=labels,
        pair=(labels[i], labels[j]),
        group_means=est["group_means"],
        group_standard_errors=est["group_standard_errors"],
        group_sizes=est["group_sizes"],
        true_loss=alloc.true_loss,
        mechanism=kind,
        allocation=alloc.to_dict(),
        estimate_sizes=estimate_sizes,
        chebyshev_half_width=est["chebyshev_half_width"],
        clipped_reports=int(est["clipped_reports"]),
        details={"scale": scale, "budget": eps, "accounting": accounting},
    )
