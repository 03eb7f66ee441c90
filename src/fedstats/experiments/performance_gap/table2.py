"""Juarez & Korolova (2023) reproduction: Table 2 on the activity data, runs of the protocol on the engine."""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import numpy as np

from fedstats.analyses.performance_gap.allocation import (
    Allocation,
    GroupLayout,
    allocate,
)
from fedstats.analyses.performance_gap.api import simulated_truth
from fedstats.analyses.performance_gap.client import GROUP_COLUMN, VALUE_COLUMN
from fedstats.analyses.performance_gap.planning import error_bound
from fedstats.analyses.performance_gap.protocol import performance_gap_protocol
from fedstats.engine import Engine, ResampledPopulation
from fedstats.engine.aggregate import AggregateBackend
from fedstats.errors import ParameterError
from fedstats.experiments.framework import Cell, RunContext
from fedstats.experiments.performance_gap.settings import (
    _Z995,
    NAME,
    PAPER_ACTIVITY,
    PAPER_TABLE2,
)
from fedstats.randomness import RandomSource

__all__ = ["table2", "table2_cell"]


def table2(ctx: RunContext) -> dict[str, Any]:
    """Table 2 on the Appendix D data: K clients resampled within each sex, runs per cell on the engine."""
    from fedstats.experiments.activity import activity_performance

    quick = ctx.quick
    perf = activity_performance(ctx.data_dir, seed=0)
    K = ctx.options.get("table2_clients") or (10**5 if quick else 10**7)
    route = "aggregate" if ctx.options.get("aggregate") else "per-client"
    # M_L's discrete Laplace report is clipped per client: no aggregate form, so that route runs M_R only
    kinds = ("R",) if route == "aggregate" else ("R", "L")
    runs = ctx.reps or (2 if quick else 10)
    eps_list = (0.1, 1.0) if quick else (0.01, 0.1, 1.0, 10.0)
    metrics = ("tpr",) if quick else ("tpr", "fpr")
    clients = perf.clients
    sex = clients["sex"].to_numpy()
    codes = (sex == "F").astype(np.int64)  # 0 = male, 1 = female (the paper's gap: male - female)
    cells = []
    for metric in metrics:
        rate = clients[metric].to_numpy(dtype=np.float64)
        v = 2.0 * rate - 1.0
        for acc in ("paper", "exact"):
            for kind in kinds:
                for eps in eps_list:
                    for run in range(runs):
                        key = f"table2/{metric}/{acc}/{kind}/{eps}/{run}"
                        rs = ctx.randomness.child(NAME, key)
                        args: tuple[Any, ...] = (codes, v, K, kind, eps, acc, rs)
                        if route == "aggregate":  # the default's cell arguments stay as they were
                            args = (*args, route)
                        cells.append(Cell(key, table2_cell, args))
    done = ctx.cells(cells, part="table-2", task="table 2")
    sizes_frac = np.bincount(codes, minlength=2) / codes.size
    out: dict[str, Any] = {
        "K": K,
        "runs": runs,
        "route": route,
        "mechanisms": list(kinds),
        "activity": perf.to_dict(),
        "paper_activity": PAPER_ACTIVITY,
        "rows": [],
    }
    for metric in metrics:
        rate = clients[metric].to_numpy(dtype=np.float64)
        v = 2.0 * rate - 1.0
        nu2 = tuple(float(np.mean(v[codes == i] ** 2)) for i in (0, 1))
        data_gap = float(rate[codes == 0].mean() - rate[codes == 1].mean())
        for acc in ("paper", "exact"):
            for kind in kinds:
                for eps in eps_list:
                    vals = [
                        done[f"table2/{metric}/{acc}/{kind}/{eps}/{run}"] for run in range(runs)
                    ]
                    errs = np.array([abs(x["gap"] - x["true_gap"]) for x in vals])
                    balanced = GroupLayout.balanced(K)
                    data_layout = GroupLayout(
                        tuple(sizes_frac * K),
                        (0, 1),
                        (
                            nu2[0],
                            nu2[1],
                        ),
                    )
                    alloc = allocate(kind, eps, balanced, accounting=acc)
                    mech = allocate(kind, eps, data_layout, accounting=acc).mechanism
                    var_paper = balanced.gap_variance(alloc.mechanism)
                    var_data = data_layout.gap_variance(mech)
                    out["rows"].append(
                        {
                            "metric": metric,
                            "accounting": acc,
                            "mechanism": kind,
                            "epsilon": eps,
                            "true_loss": vals[0]["true_loss"],
                            "mean_abs_error": float(errs.mean()),
                            "sd_abs_error": float(errs.std(ddof=1)) if errs.size > 1 else 0.0,
                            "gap_mean": float(np.mean([x["gap"] for x in vals])),
                            "true_gap_mean": float(np.mean([x["true_gap"] for x in vals])),
                            "data_gap": data_gap,
                            # rate units: half the value-unit bound
                            "alpha_chebyshev_paper": error_bound(var_paper, 0.99) / 2,
                            "alpha_chebyshev_data": error_bound(var_data, 0.99) / 2,
                            "alpha_normal_data": error_bound(var_data, 0.99, bound="normal") / 2,
                            # E|error| = sqrt(2/pi) sigma for the data's variance (rate units)
                            "expected_abs_error": error_bound(var_data, 0.99, bound="normal")
                            / 2
                            / _Z995
                            * math.sqrt(2 / math.pi),
                            "coverage_normal_99": float(
                                np.mean(errs < error_bound(var_data, 0.99, bound="normal") / 2)
                            ),
                            "seconds_per_run": float(np.mean([x["seconds"] for x in vals])),
                            "paper": _paper_t2(kind, eps) if acc == "paper" else None,
                        }
                    )
    return out


def _paper_t2(kind: str, eps: float) -> dict[str, float] | None:
    row = PAPER_TABLE2.get(eps)
    if row is None:
        return None
    off = 0 if kind == "R" else 3
    return {"mean_abs_error": row[off], "sd": row[off + 1], "alpha": row[off + 2]}


@functools.lru_cache(maxsize=256)
def _cached_allocation(kind: str, eps: float, sizes: tuple[float, ...], acc: str) -> Allocation:
    """:func:`allocate` for one cell's sizes (a pure function; the cells of a row share it)."""
    return allocate(kind, eps, GroupLayout(sizes), accounting=acc)


def table2_cell(
    codes: np.ndarray,
    v: np.ndarray,
    K: int,
    kind: str,
    eps: float,
    acc: str,
    rs: RandomSource,
    route: str = "per-client",
) -> dict[str, Any]:
    """One run of Table 2: K clients resampled within each sex, the protocol on a serial engine.

    Parameters
    ----------
    codes : numpy.ndarray of int64, shape (n,)
        Each real client's group (0 male, 1 female).
    v : numpy.ndarray of float64, shape (n,)
        Each real client's value in [-1, 1] (``2 rate - 1``).
    K : int
        Simulated clients.
    kind : {"R", "L"}
        Mechanism.
    eps : float
        Budget.
    acc : {"paper", "exact"}
        Accounting of the budget split.
    rs : RandomSource
        The run's randomness (the engine's).
    route : {"per-client", "aggregate"}
        ``"per-client"`` (default: every client encodes its report, the reference) or ``"aggregate"``
        (:class:`~fedstats.engine.aggregate.AggregateBackend`: the sums drawn per distinct input, equal in
        distribution to the per-client route but not bit-identical, cost independent of ``K``).

    Returns
    -------
    dict
        ``gap``, ``true_gap`` (the simulated clients'), ``standard_error`` (rate units), ``true_loss``,
        ``seconds``.
    """
    t0 = time.perf_counter()
    pop = ResampledPopulation({GROUP_COLUMN: codes, VALUE_COLUMN: v}, K, strata=GROUP_COLUMN)
    sizes = [float(x) for x in pop.stratum_clients]
    alloc = _cached_allocation(kind, eps, tuple(sizes), acc)
    if route == "aggregate":
        engine = Engine(randomness=rs, backend=AggregateBackend())
    elif route == "per-client":
        engine = Engine(randomness=rs)
    else:
        raise ParameterError("route", route, '"per-client" or "aggregate"')
    res = engine.run(performance_gap_protocol(alloc.mechanism, sizes=sizes, scale="rate"), pop)
    true_sums, true_counts = simulated_truth(pop, engine, 2)
    true_gap = float(true_sums[0] / true_counts[0] - true_sums[1] / true_counts[1]) / 2.0
    return {
        "gap": res.gap,
        "true_gap": true_gap,
        "standard_error": res.standard_error,
        "true_loss": alloc.true_loss,
        "seconds": time.perf_counter() - t0,
    }
