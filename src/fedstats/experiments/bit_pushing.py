"""Reproduction of Cormode & Markov (2021), Figures 1-3: bit pushing against its baselines.

Every point is 100 repetitions (``--quick``: 8) on fresh data; the metric is the paper's NRMSE,
``sqrt(mean_r (estimate_r - truth_r)^2) / mean_r truth_r``, with a delta-method standard error. Each
(figure, x, method) cell draws its data from ``randomness.child("data", figure, x, rep)`` (the same data for
every method: common random numbers) and its protocol randomness from ``randomness.child(figure, x, method,
rep)``, and is checkpointed, so an interrupted run resumes.

Setups (the paper leaves most unstated; ours are in ``bit_pushing.md``):

* Fig. 1a: Normal(mu, 100) rounded to integers (clipped at 0), N = 10^4; declared range ``[0, mu + 6 sigma]``,
  so the power-of-two bound ``2^b`` of dithering steps up with mu.
* Fig. 1b: Normal(1000, 100), N = 10^4, bit depth b = 11..24.
* Fig. 1c / 1d: ages (Census-Income KDD test split, Adult), N clients resampled with replacement, b = 7;
  mean against N, variance against N (up to 3 x 10^5).
* Fig. 2: ages of Census-Income KDD (Adult without the shared data), N = 10^4, against epsilon in (0, 1) and
  [1, 8], bit pushing with randomized response against Piecewise, Duchi, Laplace and dithering + RR.
* Fig. 3: Normal(1000, 100), N = 10^4, epsilon = 3: (a) squash threshold sweep at b = 20; (b) the debiased
  bit means of the round-1 and pooled estimates per bit at b = 20; (c) against bit depth.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from fedstats.analyses.bitpushing.api import mean, variance
from fedstats.analyses.bitpushing.encoding import BitEncoding
from fedstats.experiments.bit_pushing_page import claims as _claims
from fedstats.experiments.bit_pushing_page import tables as _tables
from fedstats.experiments.framework import Cell, RunContext
from fedstats.randomness import RandomSource

__all__ = ["NAME", "Method", "nrmse", "run"]

NAME = "bit-pushing"
SIGMA = 100.0


@dataclass(frozen=True)
class Method:
    """A curve: a method name of :data:`fedstats.analyses.bitpushing.methods.METHODS` and its options."""

    label: str
    method: str
    options: dict[str, Any] = field(default_factory=dict)


NO_DP = (
    Method("adaptive", "adaptive"),
    Method("weighted a=0.5", "weighted", {"alpha": 0.5}),
    Method("weighted a=1.0", "weighted", {"alpha": 1.0}),
    Method("dithering", "dithering"),
)
DP = (
    Method("adaptive", "adaptive"),
    Method("adaptive+squash", "adaptive", {"squash_threshold": 0.15}),
    Method("weighted a=0.5", "weighted", {"alpha": 0.5}),
    Method("weighted a=1.0", "weighted", {"alpha": 1.0}),
    Method("dithering+RR", "dithering"),
    Method("piecewise", "piecewise"),
    Method("duchi", "duchi"),
    Method("laplace", "laplace"),
)


_PAPER: dict[str, dict[str, Any]] = {
    "adaptive": {"estimator": "pooled"},
    "basic": {"min_reports": 0},
}
"""Options that select the paper's protocol where fedstats' default differs: the adaptive protocol pools
both rounds (Algorithm 2, line 9), not fedstats' unbiased ``"split"`` default; basic samples bits with
``p_j ~ 2^j`` exactly, without fedstats' floor of 2 reports per bit (``docs/bitpushing.md``)."""


def nrmse(estimates: np.ndarray, truths: np.ndarray) -> dict[str, float]:
    """NRMSE over repetitions with its delta-method standard error, plus the relative bias.

    Returns
    -------
    dict
        ``nrmse``, ``se`` (standard error of the NRMSE), ``bias`` (mean error / mean truth), ``reps``.
    """
    err = np.asarray(estimates, dtype=np.float64) - np.asarray(truths, dtype=np.float64)
    mu = float(np.mean(truths))
    sq = err**2
    rmse = math.sqrt(float(sq.mean()))
    se_mse = float(sq.std(ddof=1)) / math.sqrt(sq.size) if sq.size > 1 else float("nan")
    se = se_mse / (2 * rmse) / abs(mu) if rmse > 0 else 0.0
    return {"nrmse": rmse / abs(mu), "se": se, "bias": float(err.mean()) / abs(mu), "reps": sq.size}


@dataclass
class _Setup:
    reps: int
    ages: dict[str, np.ndarray]
    randomness: RandomSource


def _normal_data(rs: RandomSource, *, mu: float, n: int) -> np.ndarray:
    g = rs.generator()
    out: np.ndarray = np.clip(np.round(np.asarray(g.normal(mu, SIGMA, n))), 0.0, None)
    return out


def _resample(rs: RandomSource, *, ages: np.ndarray, n: int) -> np.ndarray:
    idx = np.asarray(rs.generator().integers(0, ages.size, n))
    out: np.ndarray = ages[idx]
    return out


def _cell(
    setup: _Setup,
    fig: str,
    x: Any,
    m: Method,
    data: Callable[[RandomSource], np.ndarray],
    enc: BitEncoding,
    *,
    epsilon: float | None = None,
    statistic: str = "mean",
) -> dict[str, float]:
    est, tru = [], []
    for r in range(setup.reps):
        values = data(setup.randomness.child("data", fig, str(x), r))
        rs = setup.randomness.child(fig, str(x), m.label, r)
        seed = rs.public_seed("public")
        kw: dict[str, Any] = {
            "method": m.method,
            "epsilon": epsilon,
            "no_privacy": epsilon is None,
            "randomness": rs,
            "public_seed": seed,
            "truth": False,
            "shuffle": False,
            **_PAPER.get(m.method, {}),
            **m.options,
        }
        # the paper's estimates, unclipped (the released estimate; fedstats does not clip it)
        if statistic == "mean":
            est.append(mean(values, enc, **kw).estimate)
            tru.append(float(values.mean()))
        else:
            est.append(variance(values, enc, **kw).estimate)
            tru.append(float(values.var()))
    return nrmse(np.array(est), np.array(tru))


def _grids(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "mu": [300.0, 1000.0, 3000.0],
            "bits": [11, 16, 22],
            "n_mean": [1000, 10_000],
            "n_var": [10_000, 30_000],
            "eps_low": [0.2, 0.5],
            "eps_high": [1.0, 4.0],
            "tau": [0.0, 0.05, 0.15, 0.5],
            "bits_dp": [11, 16, 22],
        }
    return {
        "mu": [float(v) for v in np.linspace(200, 4000, 20)],
        "bits": list(range(11, 25)),
        "n_mean": [1000, 3162, 10_000, 31_623, 100_000],
        "n_var": [10_000, 31_623, 100_000, 316_228],
        "eps_low": [0.1, 0.2, 0.3, 0.5, 0.7, 0.9],
        "eps_high": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        "tau": [0.0, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0],
        "bits_dp": list(range(11, 25)),
    }


def _load_ages(
    data_dir: Path | None, quick: bool = False
) -> tuple[dict[str, np.ndarray], list[str]]:
    from fedstats.datasets import load_adult, load_census_kdd
    from fedstats.errors import FedstatsError

    notes = []
    ages = {"adult": load_adult("all")["age"].to_numpy(dtype=np.float64)}
    if quick:
        notes.append("quick run: Adult ages only (Census-Income KDD in the full run).")
        return ages, notes
    try:
        ages["census-kdd"] = load_census_kdd(data_dir=data_dir)["age"].to_numpy(dtype=np.float64)
    except FedstatsError as exc:
        notes.append(f"Census-Income KDD unavailable ({exc}); its panels are skipped.")
    return ages, notes


def run(ctx: RunContext) -> dict[str, Any]:
    """Run every figure's cells (resuming from the checkpoint), write JSON, PNG plots and the page.

    Parameters
    ----------
    ctx : RunContext
        The framework's context: output folder, quick, seed (default 2021), repetitions (default 100,
        quick 8), data folder, progress.

    Returns
    -------
    dict
        The document written to ``bit-pushing[-quick].json``: ``figures`` (NRMSE series per figure),
        ``claims`` (the paper's statements with our numbers and a verdict), ``tables``.
    """
    ages, notes = _load_ages(ctx.data_dir, ctx.quick)
    setup = _Setup(ctx.reps or (8 if ctx.quick else 100), ages, ctx.randomness)
    g = _grids(ctx.quick)
    cells = _cells(setup, g)
    store = ctx.store()
    cached = sum(1 for c in cells if c.key in store)
    values = ctx.cells(cells, task="bit-pushing cells")
    ds2 = "census-kdd" if "census-kdd" in ages else "adult"
    doc = _document(values, g, ages, ds2, setup, notes)
    doc["cells"] = {"total": len(cells), "from_checkpoint": cached}
    plots = _plots(doc, ctx.out, ctx.plot_title)
    doc["claims"] = _claims(doc)
    doc["tables"] = _tables(doc)
    ctx.finish(doc, plots=plots)
    return doc


def _cells(setup: _Setup, g: dict[str, Any]) -> list[Cell]:
    """Every (figure, x, method) cell, keyed by figure, x and curve label."""
    n0 = 10_000
    cells: list[Cell] = []

    def add(key: str, fn: Callable[[], Any]) -> None:
        cells.append(Cell(key, fn))

    normal_n0 = partial(_normal_data, n=n0)
    # Figure 1a: against mu
    for mu in g["mu"]:
        enc = BitEncoding(0, mu + 6 * SIGMA)
        for m in NO_DP:
            add(
                f"1a|{mu:g}|{m.label}",
                partial(_cell, setup, "1a", mu, m, partial(normal_n0, mu=mu), enc),
            )
    # Figure 1b: against bit depth
    n1000 = partial(normal_n0, mu=1000.0)
    for b in g["bits"]:
        enc = BitEncoding(0, 2**b - 1)
        for m in NO_DP:
            add(f"1b|{b}|{m.label}", partial(_cell, setup, "1b", b, m, n1000, enc))
    # Figures 1c, 1d: real ages against N
    age_enc = BitEncoding(0, 127)
    for ds, a in setup.ages.items():
        for n in g["n_mean"]:
            data = partial(_resample, ages=a, n=n)
            for m in NO_DP:
                add(
                    f"1c|{ds}|{n}|{m.label}", partial(_cell, setup, f"1c-{ds}", n, m, data, age_enc)
                )
        for n in g["n_var"]:
            data = partial(_resample, ages=a, n=n)
            for m in NO_DP:
                add(
                    f"1d|{ds}|{n}|{m.label}",
                    partial(_cell, setup, f"1d-{ds}", n, m, data, age_enc, statistic="variance"),
                )
    # Figure 2: against epsilon on ages
    ds2 = "census-kdd" if "census-kdd" in setup.ages else "adult"
    data2 = partial(_resample, ages=setup.ages[ds2], n=n0)
    for eps in [*g["eps_low"], *g["eps_high"]]:
        for m in DP:
            add(
                f"2|{eps:g}|{m.label}",
                partial(_cell, setup, "2", eps, m, data2, age_enc, epsilon=eps),
            )
    # Figure 3a: squash threshold at b = 20, epsilon = 3
    enc20 = BitEncoding(0, 2**20 - 1)
    for tau in g["tau"]:
        m = Method(f"adaptive tau={tau:g}", "adaptive", {"squash_threshold": tau or None})
        add(f"3a|{tau:g}", partial(_cell, setup, "3a", tau, m, n1000, enc20, epsilon=3.0))
    # Figure 3b: bit means at epsilon = 3
    add("3b", partial(_bit_means_cell, setup, enc20, n0))
    # Figure 3c: against bit depth with DP
    for b in g["bits_dp"]:
        enc = BitEncoding(0, 2**b - 1)
        for m in (DP[1], DP[0], DP[3], DP[4], DP[5]):
            add(f"3c|{b}|{m.label}", partial(_cell, setup, "3c", b, m, n1000, enc, epsilon=3.0))
    return cells


def _bit_means_cell(setup: _Setup, enc: BitEncoding, n: int) -> dict[str, Any]:
    r1, pooled = [], []
    for r in range(setup.reps):
        values = _normal_data(setup.randomness.child("data", "3b", r), mu=1000.0, n=n)
        rs = setup.randomness.child("3b", r)
        res = mean(
            values,
            enc,
            method="adaptive",
            epsilon=3.0,
            estimator="pooled",
            randomness=rs,
            public_seed=rs.public_seed("public"),
            truth=False,
            shuffle=False,
        )
        r1.append(np.asarray(res.details["round1_bit_means"], dtype=np.float64))
        pooled.append(np.asarray(res.details["bit_means"], dtype=np.float64))
    true = _normal_data(setup.randomness.child("data", "3b", 0), mu=1000.0, n=n).astype(np.int64)
    true_means = [float(((true >> j) & 1).mean()) for j in range(enc.b)]
    return {
        "round1": np.array(r1).tolist(),
        "pooled": np.array(pooled).tolist(),
        "true": true_means,
    }


def _series(
    values: dict[str, Any], prefix: str, xs: list[Any], labels: list[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for lab in labels:
        pts = []
        for x in xs:
            key = f"{prefix}|{x:g}|{lab}" if isinstance(x, float) else f"{prefix}|{x}|{lab}"
            if key in values:
                pts.append({"x": x, **values[key]})
        out[lab] = pts
    return out


def _document(
    values: dict[str, Any],
    g: dict[str, Any],
    ages: dict[str, np.ndarray],
    ds2: str,
    setup: _Setup,
    notes: list[str],
) -> dict[str, Any]:
    nd = [m.label for m in NO_DP]
    figs: dict[str, Any] = {
        "1a": _series(values, "1a", g["mu"], nd),
        "1b": _series(values, "1b", g["bits"], nd),
    }
    for ds in ages:
        figs[f"1c-{ds}"] = _series(values, f"1c|{ds}", g["n_mean"], nd)
        figs[f"1d-{ds}"] = _series(values, f"1d|{ds}", g["n_var"], nd)
    dl = [m.label for m in DP]
    figs["2"] = _series(values, "2", [*g["eps_low"], *g["eps_high"]], dl)
    figs["3a"] = {
        "adaptive": [{"x": t, **values[f"3a|{t:g}"]} for t in g["tau"] if f"3a|{t:g}" in values]
    }
    figs["3b"] = values.get("3b", {})
    figs["3c"] = _series(values, "3c", g["bits_dp"], [DP[i].label for i in (1, 0, 3, 4, 5)])
    return {
        "experiment": NAME,
        "paper": "Cormode & Markov 2021, Bit-efficient numerical aggregation (Figures 1-3)",
        "repetitions": setup.reps,
        "figure2_dataset": ds2,
        "datasets": {k: int(v.size) for k, v in ages.items()},
        "figures": figs,
        "notes": notes,
        "release_note": setup.randomness.release_note,
    }


# -- plots -----------------------------------------------------------------------------------------


def _plots(doc: dict[str, Any], out: Path, title_of: Callable[[str], str]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = doc["figures"]
    files: list[str] = []

    def line_plot(key: str, title: str, xlabel: str, logx: bool = False, logy: bool = True) -> None:
        series = figs.get(key)
        if not series or not any(series.values()):
            return
        fig, ax = plt.subplots(figsize=(5.2, 3.6))
        for lab, pts in series.items():
            if not pts:
                continue
            xs = [p["x"] for p in pts]
            ys = [p["nrmse"] for p in pts]
            es = [p["se"] for p in pts]
            ax.errorbar(xs, ys, yerr=es, label=lab, marker="o", ms=3, capsize=2, lw=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("NRMSE")
        ax.set_title(title_of(title), fontsize=9)
        if logx:
            ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fname = f"fig{key}.png"
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)
        files.append(fname)

    line_plot("1a", "Fig. 1a: mean, Normal(mu, 100), N=1e4", "mu")
    line_plot("1b", "Fig. 1b: mean, Normal(1000, 100), N=1e4", "bit depth b")
    for ds in doc["datasets"]:
        line_plot(f"1c-{ds}", f"Fig. 1c: mean age ({ds})", "clients N", logx=True)
        line_plot(f"1d-{ds}", f"Fig. 1d: variance of age ({ds})", "clients N", logx=True)
    s2 = figs.get("2", {})
    for part, high in (("2a", False), ("2b", True)):
        figs[part] = {lab: [p for p in pts if (p["x"] >= 1) == high] for lab, pts in s2.items()}
        line_plot(part, f"Fig. {part}: mean age ({doc['figure2_dataset']}), N=1e4, LDP", "epsilon")
        figs.pop(part)
    line_plot("3a", "Fig. 3a: squash threshold, eps=3, b=20", "threshold (x DP noise)", logy=True)
    line_plot("3c", "Fig. 3c: mean vs bit depth, eps=3, N=1e4", "bit depth b")
    b3 = figs.get("3b")
    if b3:
        pooled = np.array(b3["pooled"])
        r1 = np.array(b3["round1"])
        fig, axs = plt.subplots(1, 2, figsize=(9, 3.6))
        bits = np.arange(pooled.shape[1])
        axs[0].boxplot([r1[:, j] for j in bits], positions=bits, widths=0.6, showfliers=False)
        axs[0].plot(bits, b3["true"], "r.", label="true bit mean")
        axs[0].axhline(0, color="k", lw=0.5)
        axs[0].set_xlabel("bit j")
        axs[0].set_ylabel("round-1 debiased bit mean")
        axs[0].legend(fontsize=7)
        axs[0].set_title(title_of("Fig. 3b: noisy bit means, eps=3, b=20"), fontsize=9)
        axs[1].hist(r1.ravel(), bins=60)
        axs[1].set_xlabel("round-1 debiased bit mean (all bits, all reps)")
        axs[1].set_ylabel("count")
        fig.tight_layout()
        fig.savefig(out / "fig3b.png", dpi=110)
        plt.close(fig)
        files.append("fig3b.png")
    return files
