r"""Reproduction of Juarez & Korolova (2023): Table 1, Figures 1 and 2, Appendix C and Table 2.

``fedstats reproduce performance-gap`` runs every experiment on the run framework
(:mod:`fedstats.experiments.framework`: checkpointed cells keyed by the settings) and writes
``performance-gap.json``, PNG plots and ``performance-gap.md`` (rendered from
``templates/performance_gap.md.j2``: results set against the paper's numbers).

* **Table 1** (minimum epsilon for error alpha with probability 0.99, balanced groups, worst-case
  :math:`\nu^2`, Chebyshev): as published (the paper's allocation, reproduced to the printed digits, each
  labelled with its true privacy loss) and corrected (allocation optimal under the true loss), plus the
  normal bound.
* **Figure 1**: lower/upper bounds of the gap's MSE against epsilon, :math:`10^4` clients per group, for the
  paper's allocations and the corrected ones (x axis: the budget; the paper's curves are also placed at
  their true loss).
* **Figure 2**: upper bound of the MSE for unbalanced groups (K = 2e4) and the effect of a misestimated
  group size: the paper's plug-in curves (the formula evaluated with the wrong size) and the estimator's
  real MSE (variance and bias), plus the estimator that estimates the sizes from the perturbed groups.
* **Appendix C**: empirical MSE of the gap over growing numbers of runs (10 clients per group) against the
  theoretical MSE.
* **Table 2**: the Appendix D activity model's per-client TPR and FPR, :math:`K = 10^7` clients resampled
  within each sex (``--table2-clients``), 10 runs per cell on the engine (``--reps``), mean absolute error
  against Chebyshev (the paper's formula) and the sharper normal bound. ``--aggregate`` runs it on the
  aggregate route (equal in distribution to the per-client route, not bit-identical; a few milliseconds
  per run whatever K), M_R only: M_L clips each client's report and has no aggregate form.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedstats.analyses.performance_gap.allocation import (
    Allocation,
    GroupLayout,
    allocate,
    paper_allocation,
)
from fedstats.analyses.performance_gap.api import simulated_truth
from fedstats.analyses.performance_gap.client import GROUP_COLUMN, VALUE_COLUMN
from fedstats.analyses.performance_gap.mechanisms import GapMechanism
from fedstats.analyses.performance_gap.planning import error_bound, plan_epsilon
from fedstats.analyses.performance_gap.protocol import performance_gap_protocol
from fedstats.analyses.performance_gap.simulate import simulate_sums
from fedstats.engine import Engine, ResampledPopulation
from fedstats.engine.aggregate import AggregateBackend
from fedstats.errors import DatasetNotFoundError, ParameterError
from fedstats.experiments.framework import Cell, RunContext
from fedstats.randomness import RandomSource

__all__ = ["PAPER_TABLE1", "PAPER_TABLE2", "run"]

NAME = "performance-gap"
_Z995 = 2.5758293035489004  # standard normal quantile at 0.995

#: The paper's Table 1 (minimum epsilon; None for "-").
PAPER_TABLE1: dict[str, dict[int, tuple[float | None, ...]]] = {
    "R": {
        10**5: (1.86, None, None),
        10**6: (0.63, None, None),
        10**7: (0.23, 1.86, None),
        10**8: (0.08, 0.63, None),
        10**9: (0.02, 0.23, 1.86),
    },
    "L": {
        10**5: (2.56, 17.89, 178.89),
        10**6: (0.71, 6.32, 56.57),
        10**7: (0.21, 2.56, 17.89),
        10**8: (0.07, 0.71, 6.32),
        10**9: (0.02, 0.21, 2.56),
    },
}
ALPHAS = (0.1, 0.01, 0.001)

#: The paper's Table 2: epsilon -> (R mean error, R sd, R alpha, L mean error, L sd, L alpha).
PAPER_TABLE2: dict[float, tuple[float, float, float, float, float, float]] = {
    0.01: (0.1241, 0.1410, 1.2586, 0.0504, 0.0337, 1.0525),
    0.1: (0.0082, 0.0059, 0.1206, 0.0046, 0.0040, 0.1060),
    1.0: (0.0008, 0.0006, 0.0094, 0.0008, 0.0005, 0.0118),
    10.0: (0.0001, 0.0000, 0.0032, 0.0001, 0.0000, 0.0009),
}
#: Appendix D's published per-sex means (male, female).
PAPER_ACTIVITY = {"tpr": (0.8901, 0.7177), "fpr": (0.1526, 0.2490)}


# ----------------------------------------------------------------------------- analytical parts


def table1(quick: bool) -> dict[str, Any]:
    """Table 1 as published (paper accounting) and corrected (exact accounting), Chebyshev and normal."""
    Ks = (10**5, 10**7, 10**9) if quick else (10**5, 10**6, 10**7, 10**8, 10**9)
    rows = []
    for kind in ("R", "L"):
        for K in Ks:
            for alpha, paper_eps in zip(ALPHAS, PAPER_TABLE1[kind][K], strict=True):
                row: dict[str, Any] = {
                    "mechanism": kind,
                    "K": K,
                    "alpha": alpha,
                    "paper": paper_eps,
                }
                for acc, bound in (
                    ("paper", "chebyshev"),
                    ("exact", "chebyshev"),
                    ("exact", "normal"),
                ):
                    plan = plan_epsilon(K, alpha, 0.99, kind, accounting=acc, bound=bound)
                    key = f"{acc}_{bound}"
                    row[key] = plan.epsilon
                    row[key + "_true_loss"] = (
                        None if plan.allocation is None else plan.allocation.true_loss
                    )
                rows.append(row)
    match = all(
        (r["paper"] is None and r["paper_chebyshev"] is None)
        or (
            r["paper"] is not None
            and r["paper_chebyshev"] is not None
            and f"{r['paper_chebyshev']:.2f}" == f"{r['paper']:.2f}"
        )
        for r in rows
    )
    return {"rows": rows, "probability": 0.99, "reproduces_printed": match}


def _curve(
    kind: str,
    eps: np.ndarray,
    layout: GroupLayout,
    accounting: str,
    variant: str,
    nu2: float | None,
) -> tuple[list[float], list[float]]:
    """MSE (variance) and true loss of an allocation family over a budget grid."""
    mse, loss = [], []
    lay = (
        layout if nu2 is None else GroupLayout(layout.sizes, layout.pair, (nu2,) * layout.n_groups)
    )
    for e in eps:
        if accounting == "paper":
            alloc = paper_allocation(kind, float(e), variant=variant, exact_loss=False)
        else:
            alloc = allocate(kind, float(e), layout, accounting="exact", exact_loss=False)
        mse.append(lay.gap_variance(alloc.mechanism))
        loss.append(alloc.true_loss)
    return mse, loss


def figure1(quick: bool) -> dict[str, Any]:
    """MSE bounds against epsilon for n_G = n_Gbar = 1e4 (the paper's Fig. 1), published and corrected."""
    eps = np.geomspace(0.01, 10.0, 25 if quick else 80)
    layout = GroupLayout((1e4, 1e4))
    series = {}
    for label, kind, acc, variant in (
        ("M_R opt. (paper)", "R", "paper", "opt"),
        ("M_L opt. (paper)", "L", "paper", "opt"),
        ("M_L k=2 (paper)", "L", "paper", "k2"),
        ("M_R (exact)", "R", "exact", "opt"),
        ("M_L (exact, k=2)", "L", "exact", "opt"),
    ):
        lo_nu, hi_nu = (1.0, 0.0) if kind == "R" else (0.0, 1.0)
        lower, loss = _curve(kind, eps, layout, acc, variant, lo_nu)
        upper, _ = _curve(kind, eps, layout, acc, variant, hi_nu)
        series[label] = {"lower": lower, "upper": upper, "true_loss": loss}
    # where M_R opt. beats M_L opt. (paper: 0.31 < eps < 2.6, by the upper bounds)
    r_up = np.asarray(series["M_R opt. (paper)"]["upper"])
    l_up = np.asarray(series["M_L opt. (paper)"]["upper"])
    better = eps[r_up < l_up]
    return {
        "epsilon": eps.tolist(),
        "series": series,
        "r_beats_l_range": [float(better.min()), float(better.max())] if better.size else None,
    }


def figure2(quick: bool) -> dict[str, Any]:
    """Unbalanced groups and misestimated sizes, K = 2e4 (the paper's Fig. 2)."""
    K = 20_000
    eps = np.geomspace(0.05, 10.0, 20 if quick else 60)
    minority = (0.5, 0.2, 0.05, 0.01) if quick else (0.5, 0.3, 0.2, 0.1, 0.05, 0.01, 0.005)
    rel_err = 0.5
    out: dict[str, Any] = {"K": K, "epsilon": eps.tolist(), "relative_error": rel_err, "panels": {}}
    for label, kind, variant in (("M_R opt.", "R", "opt"), ("M_L k=2", "L", "k2")):
        panel = {}
        for f in minority:
            sizes = (f * K, (1 - f) * K)
            true_l = GroupLayout(sizes)
            # the operator believes the minority is (1 + rel_err) times larger than it is
            fe = min(f * (1 + rel_err), 0.999)
            wrong_l = GroupLayout((fe * K, (1 - fe) * K))
            upper, plug, actual, estimated = [], [], [], []
            for e in eps:
                mech = paper_allocation(kind, float(e), variant=variant, exact_loss=False).mechanism
                upper.append(true_l.gap_variance(mech))
                plug.append(wrong_l.gap_variance(mech))
                # real MSE with the wrong sizes: scaled variance + worst-case bias (|m| <= 1)
                act = 0.0
                for g in (0, 1):
                    ratio = sizes[g] / wrong_l.sizes[g]
                    act += mech.group_variance(sizes[g], K) * ratio**2
                    act += (ratio - 1.0) ** 2
                actual.append(act)
                estimated.append(_estimated_size_mse(mech, sizes, K))
            panel[str(f)] = {
                "upper": upper,
                "plug_in_misestimated": plug,
                "actual_mse_misestimated": actual,
                "estimated_sizes_mse": estimated,
            }
        out["panels"][label] = panel
    j = int(np.argmin(np.abs(eps - 1.0)))  # the page's table: the grid point nearest epsilon 1
    out["at_epsilon"] = float(eps[j])
    out["at_epsilon_rows"] = [
        {
            "mechanism": label,
            "minority": float(f),
            "upper": s["upper"][j],
            "plug_in_misestimated": s["plug_in_misestimated"][j],
            "actual_mse_misestimated": s["actual_mse_misestimated"][j],
            "estimated_sizes_mse": s["estimated_sizes_mse"][j],
        }
        for label, panel in out["panels"].items()
        for f, s in panel.items()
    ]
    return out


def _estimated_size_mse(mech: GapMechanism, sizes: tuple[float, float], K: float) -> float:
    """Delta-method variance of the gap when group sizes are estimated from the perturbed groups.

    Worst case over the group means ``|m| <= 1`` and ``nu^2``.
    """
    a, ao, c = mech.a, mech.a_other, mech.value_gain
    total = 0.0
    for n in sizes:
        best = 0.0
        for m in (-1.0, 0.0, 1.0):
            var = mech.group_variance(n, K)
            var_n = (n * a * (1 - a) + (K - n) * ao * (1 - ao)) / (a - ao) ** 2
            cov = c * n * m * (1 - a) / (a - ao)
            best = max(best, var + m * m * var_n / n**2 - 2 * m * cov / (c * n * n))
        total += best
    return total


def _appc_setup() -> tuple[np.ndarray, np.ndarray]:
    rng0 = np.random.default_rng(20230101)  # fixed, public client values
    return np.repeat([0, 1], 10), np.round(rng0.uniform(-1, 1, 20), 2)


def appendix_c(ctx: RunContext) -> dict[str, Any]:
    """Empirical vs theoretical MSE of the gap for 10 clients per group as the number of runs grows."""
    runs_list = (10, 100, 1000, 10_000) if ctx.quick else (10, 100, 1000, 10_000, 100_000)
    g, v = _appc_setup()
    eps = 1.0
    cells = [
        Cell(f"appc/{kind}/{runs}", appendix_c_cell, (kind, runs, ctx.randomness.child(NAME, key)))
        for kind in ("R", "L")
        for runs in runs_list
        for key in (f"appc/{kind}/{runs}",)
    ]
    done = ctx.cells(cells, part="appendix-c", task="appendix C")
    nu2 = (float(np.mean(v[g == 0] ** 2)), float(np.mean(v[g == 1] ** 2)))
    out: dict[str, Any] = {"values": v.tolist(), "epsilon": eps, "runs": list(runs_list)}
    for kind in ("R", "L"):
        mech = paper_allocation(kind, eps, variant="k2").mechanism
        out[kind] = {
            "empirical": [done[f"appc/{kind}/{r}"] for r in runs_list],
            "theoretical": mech.gap_variance((10, 10), 20, nu2),
            "upper_bound": mech.gap_variance((10, 10), 20),
            "mechanism": mech.describe(),
        }
    return out


def appendix_c_cell(kind: str, runs: int, rs: RandomSource) -> float:
    """Empirical MSE of the gap over ``runs`` runs of the paper's k = 2 split at epsilon 1 (one cell).

    Parameters
    ----------
    kind : {"R", "L"}
        Mechanism.
    runs : int
        Independent runs of the 20 clients, >= 1.
    rs : RandomSource
        The cell's randomness.

    Returns
    -------
    float
        Mean squared error of the gap (value units).
    """
    g, v = _appc_setup()
    mech = paper_allocation(kind, 1.0, variant="k2").mechanism
    sums, _ = simulate_sums(g, v, mech, rs.generator("runs"), runs=runs)
    gap = (sums[:, 0] - sums[:, 1]) / (mech.value_gain * 10)
    truth = v[g == 0].mean() - v[g == 1].mean()
    err2 = (gap - truth) ** 2
    chunk = 20_000  # summed chunk by chunk, as the published run did
    total = sum(float(np.sum(err2[i : i + chunk])) for i in range(0, runs, chunk))
    return total / runs


# ----------------------------------------------------------------------------- Table 2 (engine runs)


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


# ----------------------------------------------------------------------------- plots and page


def _plots(out: Path, res: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    f1 = res["figure1"]
    eps = np.asarray(f1["epsilon"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    colors = {
        "M_R": "tab:orange",
        "M_L opt": "tab:blue",
        "M_L k=2": "tab:green",
        "M_L (": "tab:blue",
    }
    for label, s in f1["series"].items():
        ax = axes[0] if "paper" in label else axes[1]
        col = next((c for k, c in colors.items() if label.startswith(k)), "k")
        ax.fill_between(eps, s["lower"], s["upper"], alpha=0.25, color=col)
        ax.plot(eps, s["upper"], color=col, label=label)
        ax.plot(eps, s["lower"], color=col, lw=0.8)
        if "paper" in label and np.isfinite(s["true_loss"]).all():
            axes[1].plot(
                s["true_loss"], s["upper"], color=col, ls=":", label=label + " at its true loss"
            )
    for ax, title in zip(
        axes,
        ("as published (paper's budget split)", "corrected (true loss <= epsilon)"),
        strict=True,
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("epsilon")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("MSE of the gap (value units)")
    fig.suptitle("Figure 1: MSE bounds, n_G = n_Gbar = 1e4", fontsize=11)
    fig.tight_layout()
    fig.savefig(out / "figure1.png", dpi=110)
    plt.close(fig)
    files.append("figure1.png")

    f2 = res["figure2"]
    eps = np.asarray(f2["epsilon"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, (label, panel) in zip(axes, f2["panels"].items(), strict=True):
        cmap = plt.get_cmap("viridis")
        for i, (f, s) in enumerate(panel.items()):
            c2 = cmap(i / max(len(panel) - 1, 1))
            ax.plot(eps, s["upper"], color=c2, lw=2, label=f"minority {float(f):.1%}")
            ax.plot(eps, s["plug_in_misestimated"], color=c2, ls=":", lw=1)
            ax.plot(eps, s["actual_mse_misestimated"], color=c2, ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("epsilon")
        ax.set_title(
            f"{label}: bold = true sizes, dotted = plug-in with +50% size, dashed = real MSE",
            fontsize=8,
        )
        ax.legend(fontsize=7)
    axes[0].set_ylabel("MSE upper bound")
    fig.suptitle("Figure 2: unbalanced and misestimated groups, K = 2e4", fontsize=11)
    fig.tight_layout()
    fig.savefig(out / "figure2.png", dpi=110)
    plt.close(fig)
    files.append("figure2.png")

    ac = res["appendix_c"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for kind, col in (("R", "tab:orange"), ("L", "tab:blue")):
        ax.plot(ac["runs"], ac[kind]["empirical"], "o-", color=col, label=f"M_{kind} empirical")
        ax.axhline(ac[kind]["theoretical"], color=col, ls="--", label=f"M_{kind} theoretical")
        ax.axhline(
            ac[kind]["upper_bound"], color=col, ls=":", lw=0.8, label=f"M_{kind} upper bound"
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("runs")
    ax.set_ylabel("MSE of the gap")
    ax.set_title(
        "Appendix C: empirical vs theoretical MSE (10 clients per group, eps = 1)", fontsize=9
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "appendix_c.png", dpi=110)
    plt.close(fig)
    files.append("appendix_c.png")
    return files


def run(ctx: RunContext) -> dict[str, Any]:
    """Run every experiment (cells resumed from the checkpoint), write JSON, PNG plots and the page.

    Parameters
    ----------
    ctx : RunContext
        The framework's context: output folder, quick (small grids, K = 1e5 for Table 2), seed (default
        0), repetitions (Table 2's runs per cell: default 10, quick 2), data folder (Table 2), progress.

    Returns
    -------
    dict
        The document written to ``performance-gap[-quick].json``: ``table1``, ``figure1``, ``figure2``,
        ``appendix_c``, ``table2`` (or ``{"error": ...}`` without the data or scikit-learn).
    """
    doc: dict[str, Any] = {"seed": ctx.seed}
    doc["table1"] = table1(ctx.quick)
    doc["figure1"] = figure1(ctx.quick)
    doc["figure2"] = figure2(ctx.quick)
    doc["appendix_c"] = appendix_c(ctx)
    notes: list[str] = []
    if importlib.util.find_spec("sklearn") is None:
        doc["table2"] = {
            "error": "scikit-learn is not installed (pip install 'fedstats[experiments]')"
        }
    else:
        try:
            doc["table2"] = table2(ctx)
        except DatasetNotFoundError as exc:  # the activity data are not in the data folder
            doc["table2"] = {"error": f"{type(exc).__name__}: {exc}"}
    if "error" in doc["table2"]:
        notes.append(f"Table 2 not run: {doc['table2']['error']}")
    doc["notes"] = notes
    doc["release_note"] = ctx.randomness.release_note
    plots = _plots(ctx.out, doc)
    ctx.finish(doc, plots=plots)
    return doc
