"""Summaries of a cell's runs (bias, z, RMSE, coverage, rejection rate) and the report's three files.

The rules of the PASS/FLAG column (also printed on the page):

* **bias**: ``z = bias / (sd / sqrt(runs))`` with ``bias = mean(estimate - truth)`` over the runs and ``sd``
  their standard deviation; FLAG when ``|z| > 3``. The bias is measured on the unclipped estimate when the
  result reports one (``details["unclipped_estimate"]``), on the released estimate otherwise; the released
  estimate's bias and z are reported beside it. Targets that are not claimed unbiased (:data:`NOT_UNBIASED`:
  I^2, a clipped non-linear function of Q) show their bias but are not flagged for it.
* **released bias**: where the bias is measured on the unclipped estimate, the released (clipped) one is
  judged too: FLAG "released bias" when its ``|z| > 3`` (:func:`released_bias`). The clip to the parameter
  space is post-processing (lower error, but biased wherever noise reaches a bound); each such flag on a
  default is named with its cause in ``docs/validation.md``.
* **coverage**: the share of runs whose 95% interval holds the truth, with its binomial standard error
  ``sqrt(c (1 - c) / runs)``; FLAG when ``c < 0.94`` **and** ``c + 2 SE < 0.95`` (the shortfall is beyond
  Monte Carlo error, not a few unlucky runs).
* **chi-square under independence**: the rejection rate at level 0.05, FLAG when it exceeds
  ``0.05 + 3 sqrt(0.05 * 0.95 / runs)``; the Kolmogorov-Smirnov p-value of each reported p-value's
  uniformity is printed (FLAG when below 0.001 for a p-value documented as uniform).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from fedstats._io import atomic_write_bytes, atomic_write_text

__all__ = [
    "Z_BOUND",
    "released_bias",
    "summarize_estimates",
    "summarize_test",
    "write_json",
    "write_markdown",
    "write_plot",
]

Z_BOUND = 3.0
COVERAGE_TARGET = 0.95
COVERAGE_BAR = 0.94
LEVEL = 0.05
KS_BOUND = 1e-3


def _arr(recs: list[dict[str, Any]], key: str) -> np.ndarray:
    return np.array([np.nan if r.get(key) is None else r[key] for r in recs], dtype=np.float64)


def _bias(err: np.ndarray) -> tuple[float, float, float]:
    """(bias, sd, z) of the finite errors."""
    e = err[np.isfinite(err)]
    if e.size < 2:
        return math.nan, math.nan, math.nan
    bias = float(e.mean())
    sd = float(e.std(ddof=1))
    if sd == 0.0:
        return bias, sd, 0.0 if bias == 0.0 else math.copysign(math.inf, bias)
    return bias, sd, bias / (sd / math.sqrt(e.size))


NOT_UNBIASED = frozenset({"i2"})
"""Targets whose estimator is not claimed unbiased: their bias is reported, never flagged. I^2 =
max(0, 1 - (n - 1)/Q) is a concave, clipped function of the (unbiased) Q, so it is biased low by Jensen's
inequality wherever Q's noise is large (``docs/heterogeneity.md``); its interval must still cover."""


def summarize_estimates(recs: list[dict[str, Any]], *, unbiased: bool = True) -> dict[str, Any]:
    """Bias, z, RMSE, coverage and interval width of one target's runs (see the module docstring).

    Parameters
    ----------
    recs : list of dict
        One record per run: ``estimate``, ``unclipped`` (or None), ``lo``, ``hi``, ``truth``.
    unbiased : bool, default True
        Whether the estimator is claimed unbiased; False reports the bias without flagging it.

    Returns
    -------
    dict
        ``runs, truth, mean_estimate, bias, bias_sd, bias_z, relative_bias, rmse, bias_on, bias_released,
        z_released, coverage, coverage_se, ci_width, ci_runs, flags, verdict``.
    """
    est = _arr(recs, "estimate")
    unc = _arr(recs, "unclipped")
    truth = _arr(recs, "truth")
    has_unc = bool(np.isfinite(unc).any())
    measured = np.where(np.isfinite(unc), unc, est) if has_unc else est
    bias, sd, z = _bias(measured - truth)
    bias_r, _, z_r = _bias(est - truth)
    err = (measured - truth)[np.isfinite(measured - truth)]
    rmse = float(np.sqrt(np.mean(err**2))) if err.size else math.nan
    lo, hi = _arr(recs, "lo"), _arr(recs, "hi")
    with_ci = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(truth)
    k = int(with_ci.sum())
    if k:
        cov = float(np.mean((lo[with_ci] <= truth[with_ci]) & (truth[with_ci] <= hi[with_ci])))
        cov_se = math.sqrt(cov * (1.0 - cov) / k)
        width = float(np.mean(hi[with_ci] - lo[with_ci]))
    else:
        cov = cov_se = width = math.nan
    t_mean = float(np.nanmean(truth)) if np.isfinite(truth).any() else math.nan
    flags = []
    if unbiased and abs(z) > Z_BOUND:  # nan (fewer than 2 runs) never, inf (sd 0, bias != 0) always
        flags.append("bias")
    if k and cov < COVERAGE_BAR and cov + 2.0 * cov_se < COVERAGE_TARGET:
        flags.append("coverage")
    if unbiased and has_unc and abs(z_r) > Z_BOUND:
        flags.append("released bias")
    return {
        "runs": len(recs),
        "truth": t_mean,
        "mean_estimate": float(np.nanmean(measured)) if np.isfinite(measured).any() else math.nan,
        "bias": bias,
        "bias_sd": sd,
        "bias_z": z,
        "relative_bias": bias / abs(t_mean) if t_mean else math.nan,
        "rmse": rmse,
        "bias_on": "unclipped" if has_unc else "estimate",
        "mean_released": float(np.nanmean(est)) if np.isfinite(est).any() else math.nan,
        "bias_released": bias_r,
        "z_released": z_r,
        "coverage": cov,
        "coverage_se": cov_se,
        "ci_width": width,
        "ci_runs": k,
        "bias_claimed": unbiased,
        "flags": flags,
        "verdict": "FLAG" if flags else "PASS",
    }


def released_bias(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (a cell's summary) with the "released bias" flag applied (module docstring).

    A report written before the rule existed keeps the fields it needs (``bias_on``, ``z_released``,
    ``bias_claimed``): an update re-judges its rows with this function instead of re-running them.

    Parameters
    ----------
    row : dict
        One row of a report's ``cells``.

    Returns
    -------
    dict
        A copy, its ``flags`` and ``verdict`` updated.
    """
    flags = [f for f in row.get("flags", []) if f != "released bias"]
    z_r = row.get("z_released")
    if (
        row.get("bias_claimed", True)
        and row.get("bias_on") == "unclipped"
        and isinstance(z_r, (int, float))
        and abs(z_r) > Z_BOUND
    ):
        flags.append("released bias")
    return {**row, "flags": flags, "verdict": "FLAG" if flags else "PASS"}


def _ks(p: np.ndarray) -> tuple[float, float]:
    """(KS p-value of uniformity, share of p-values equal to 1)."""
    from scipy import stats

    q = p[np.isfinite(p)]
    if q.size < 2:
        return math.nan, math.nan
    return float(stats.kstest(q, "uniform").pvalue), float(np.mean(q >= 1.0))


def summarize_test(recs: list[dict[str, Any]], *, null: bool) -> dict[str, Any]:
    """Rejection rate at level 0.05 and the p-values' uniformity of a chi-square cell.

    Parameters
    ----------
    recs : list of dict
        One record per run with ``rejected``, ``p_value``, ``p_value_sketch``.
    null : bool
        True under independence (the rate is the test's size: FLAG above ``0.05 + 3 SE``, SE at the
        nominal level); False under dependence (the rate is the power, never flagged).

    Returns
    -------
    dict
        ``runs, rejection_rate, rejection_se, ks_p_value, p_value_at_1, ks_p_value_sketch,
        p_value_sketch_at_1, flags, verdict``.
    """
    rej = np.array([bool(r.get("rejected")) for r in recs], dtype=np.float64)
    runs = rej.size
    rate = float(rej.mean()) if runs else math.nan
    se = math.sqrt(rate * (1.0 - rate) / runs) if runs else math.nan
    ks, at1 = _ks(_arr(recs, "p_value"))
    ks_s, at1_s = _ks(_arr(recs, "p_value_sketch"))
    flags = []
    if null:
        bound = LEVEL + Z_BOUND * math.sqrt(LEVEL * (1.0 - LEVEL) / runs)
        if rate > bound:
            flags.append("size")
        if math.isfinite(ks) and ks < KS_BOUND:
            flags.append("p_value not uniform")
    else:
        bound = math.nan
    return {
        "runs": runs,
        "rejection_rate": rate,
        "rejection_se": se,
        "size_bound": bound,
        "ks_p_value": ks,
        "p_value_at_1": at1,
        "ks_p_value_sketch": ks_s,
        "p_value_sketch_at_1": at1_s,
        "flags": flags,
        "verdict": "FLAG" if flags else "PASS",
    }


# -- files -------------------------------------------------------------------------------------------


def _clean(x: Any) -> Any:
    """JSON-safe: non-finite floats become None, numpy scalars Python numbers."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return v if math.isfinite(v) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` as indented JSON, atomically (non-finite numbers as null)."""
    import json

    atomic_write_text(path, json.dumps(_clean(doc), indent=1, sort_keys=False) + "\n")


def _g(x: Any, nd: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}g}"
    return str(x)


def _n(n: Any) -> str:
    return "all" if n is None else str(n)


TITLES = {
    "mean": "Bit pushing: mean (`fedstats.mean`, local DP)",
    "variance": "Bit pushing: variance (`fedstats.variance`, local DP)",
    "performance_gap": "Performance gap (`fedstats.measure_performance_gap`, local DP, estimated group sizes)",
    "heterogeneity": "Heterogeneity (`fedstats.heterogeneity`, central or distributed noise: column method)",
    "chi2": "Chi-square statistic (FED-chi^2 with epsilon: `fed_chi2`'s release, central DP)",
    "chi2_api": "Chi-square statistic through the public API (`fedstats.fed_chi2`: engine, per-client "
    "tables, central DP)",
}


def markdown(doc: dict[str, Any]) -> str:
    """The report page: one table per analysis, then the chi-square decisions, the rules and settings."""
    s = doc["settings"]
    out = [
        "# Validation report: bias and coverage of every analysis",
        "",
        f"> Seeded Monte Carlo (seed {s['seed']}): **seeded, not for release**. Produced by "
        f"`{doc['command']}` in {doc['seconds']:.0f} s on {s['workers']} worker(s)"
        + (
            " (**quick slice**: few cells and runs, for checking the pipeline)."
            if s["quick"]
            else "."
        ),
        "",
        "Each cell draws its clients afresh in every run (rows sampled without replacement from the real "
        "column; `n = all` uses every row, shuffled) and estimates a quantity of those clients, whose "
        "exact value is the truth of that run. bias = mean(estimate - truth); z = bias / (sd / sqrt(runs)); "
        "coverage = share of runs whose 95% interval holds the truth (binomial SE in brackets).",
        "",
        f"**Rules.** FLAG when |z| > {Z_BOUND:g} (bias), or when coverage < {COVERAGE_BAR} **and** coverage + "
        f"2 SE < {COVERAGE_TARGET} (a coverage flag needs the shortfall to exceed Monte Carlo error). Bias is "
        "measured on `details['unclipped_estimate']` when the result reports one, on the released "
        "estimate otherwise (column *on*); the released estimate's bias z is the column *z rel.*, "
        f"FLAG (released bias) when |z rel.| > {Z_BOUND:g} where *on* is unclipped: the released value is "
        "clipped to the parameter space (causes: docs/validation.md). "
        f"The bias of {', '.join(sorted(NOT_UNBIASED))} is shown but not flagged (marked *not claimed*): I^2 "
        "= max(0, 1 - (n - 1)/Q) is a clipped concave function of Q, biased low where Q's noise is large, "
        "and only its interval is held to the coverage bar. "
        f"Chi-square under independence: FLAG when the rejection rate at level {LEVEL} exceeds "
        f"{LEVEL} + {Z_BOUND:g} SE (SE at the nominal level), or when the KS test rejects the uniformity of "
        f"`p_value` at {KS_BOUND}.",
        "",
        f"**Summary:** {doc['summary']['flagged']} of {doc['summary']['rows']} rows flagged.",
        "",
        "![coverage per cell](coverage.png)",
        "",
    ]
    by: dict[str, list[dict[str, Any]]] = {}
    for c in doc["cells"]:
        by.setdefault(c["analysis"], []).append(c)
    for analysis, rows in by.items():
        out += [f"## {TITLES.get(analysis, analysis)}", ""]
        out.append(
            "| analysis | method | data | target | epsilon | n | runs | truth | mean est. | bias | bias z | "
            "on | z rel. | RMSE | coverage (SE) | CI width | verdict |"
        )
        out.append("|" + "---|" * 17)
        for c in rows:
            cov = "-" if c["coverage"] is None else f"{c['coverage']:.3f} ({c['coverage_se']:.3f})"
            verdict = c["verdict"] + (f" ({', '.join(c['flags'])})" if c["flags"] else "")
            out.append(
                f"| {analysis} | {c['method']} | {c['data']} | {c['target']} | {c['epsilon']:g} | {_n(c['n'])} "
                f"| {c['runs']} | {_g(c['truth'])} | {_g(c['mean_estimate'])} | {_g(c['bias'])} "
                f"| {_g(c['bias_z'], 3)}{'' if c.get('bias_claimed', True) else ' (not claimed)'} | {c['bias_on']} | {_g(c['z_released'], 3)} | {_g(c['rmse'])} | {cov} "
                f"| {_g(c['ci_width'])} | {verdict} |"
            )
        out.append("")
    if doc["tests"]:
        out += [
            "## Chi-square decisions (FED-chi^2 with epsilon, delta 1e-6: `fed_chi2`'s release and p-value)",
            "",
            "Under independence one column is permuted in every run (the real margins, no dependence): the "
            "rejection rate is the test's size. Under dependence the real table is used: the rate is the "
            "power. KS = p-value of the Kolmogorov-Smirnov test of uniformity; 'at 1' = share of p-values "
            "equal to 1.",
            "",
            "| table | hypothesis | epsilon | runs | rejection rate (SE) | size bound | KS `p_value` | at 1 "
            "| KS `p_value_sketch` | at 1 | verdict |",
            "|" + "---|" * 11,
        ]
        for t in doc["tests"]:
            verdict = t["verdict"] + (f" ({', '.join(t['flags'])})" if t["flags"] else "")
            out.append(
                f"| {t['data']}, n {_n(t.get('n'))}"
                + (" (`fedstats.fed_chi2`)" if t.get("analysis") == "chi2_api" else "")
                + f" | {t['method']} | {t['epsilon']:g} | {t['runs']} "
                f"| {_g(t['rejection_rate'], 3)} ({_g(t['rejection_se'], 2)}) | {_g(t['size_bound'], 3)} "
                f"| {_g(t['ks_p_value'], 3)} | {_g(t['p_value_at_1'], 3)} | {_g(t['ks_p_value_sketch'], 3)} "
                f"| {_g(t['p_value_sketch_at_1'], 3)} | {verdict} |"
            )
        out.append("")
    out += [
        "---",
        "Settings: " + ", ".join(f"{k}={v}" for k, v in s.items()) + ".",
        "Files: `validation.json` (every number above, per cell), `README.md` (this page), `coverage.png`.",
        "",
    ]
    return "\n".join(out)


def write_markdown(path: Path, doc: dict[str, Any]) -> None:
    """Write the report page (:func:`markdown`) atomically."""
    atomic_write_text(path, markdown(doc))


def write_plot(path: Path, doc: dict[str, Any]) -> None:
    """Coverage of every cell with its 2-SE bar, the 0.95 target and the 0.94 bar (PNG, atomically)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by: dict[str, list[dict[str, Any]]] = {}
    for c in doc["cells"]:
        if c["coverage"] is not None:
            by.setdefault(c["analysis"], []).append(c)
    k = max(1, len(by))
    fig, axes = plt.subplots(k, 1, figsize=(9.0, 2.2 * k + 0.6), squeeze=False)
    for ax, (analysis, rows) in zip(axes[:, 0], by.items(), strict=False):
        xs = np.arange(len(rows))
        ys = np.array([r["coverage"] for r in rows])
        es = 2.0 * np.array([r["coverage_se"] for r in rows])
        bad = np.array(["coverage" in r["flags"] for r in rows])
        ax.errorbar(
            xs[~bad],
            ys[~bad],
            yerr=es[~bad],
            fmt="o",
            ms=2.5,
            lw=0.7,
            color="tab:blue",
            label="coverage (2 SE)",
        )
        if bad.any():
            ax.errorbar(
                xs[bad],
                ys[bad],
                yerr=es[bad],
                fmt="o",
                ms=2.5,
                lw=0.7,
                color="tab:red",
                label="coverage FLAG",
            )
        if len(rows) <= 24:  # few cells: name them
            ax.set_xticks(xs)
            ax.set_xticklabels(
                [
                    f"{r['method']} {r['data']} {r['target']} e={r['epsilon']:g} n={_n(r['n'])}"
                    for r in rows
                ],
                rotation=20,
                ha="right",
                fontsize=5,
            )
        else:
            ax.locator_params(axis="x", integer=True)
        ax.axhline(COVERAGE_TARGET, color="k", ls="--", lw=0.8, label="0.95 target")
        ax.axhline(COVERAGE_BAR, color="tab:red", ls=":", lw=0.8, label="0.94 bar")
        ax.set_ylim(max(0.0, min(0.8, float(np.nanmin(ys)) - 0.05)), 1.005)
        ax.set_ylabel("coverage", fontsize=8)
        ax.set_title(TITLES.get(analysis, analysis), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower left", ncol=4)
    axes[-1, 0].set_xlabel("cell (in table order)", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
