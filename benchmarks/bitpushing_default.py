"""Which bit-pushing protocol should be the default: basic (one round) or adaptive (two rounds)?

Cormode & Markov 2021: Algorithm 1 (``basic``, p_j ~ 2^j) against Algorithm 2 (``adaptive``, fedstats'
unbiased ``split`` estimator with its defaults) and Algorithm 1 exactly (``basic-paper``: basic without
its floor of 2 reports per bit, ``min_reports=0``), on real columns of different shapes, means and variances, epsilon 0.5, 1, 2 and no DP,
n = 1,000, 10,000 and every row, at the declared range a user gives by default (the fewest bits that hold
the column's maximum) and at loose ranges (1.5 and 2 times that bit depth, the paper's Fig. 1b).

Every run is the library's fastest exact route for a fixed population,
:func:`fedstats.analyses.bitpushing.simulate.simulate_release`: the library's own server code (protocol
generator and stage) with each round's sum drawn in a few vectorized passes over the clients, equal in
distribution to the per-client route (tested against ``fedstats.mean`` in
``tests/library/test_bitpushing_default.py``). The rows of a run are drawn without replacement (every row for
``n = all``) and shared by the protocols (common random numbers); truth is their exact mean or variance
(ddof = 0).

Per cell and protocol: NRMSE = sqrt(mean (estimate - truth)^2) / mean truth, the bias z of the released
estimate (mean error / (sd / sqrt(seeds))), the coverage of the released 95% interval, and the same
NRMSE and z for the estimate clipped to the parameter space (``details["clipped_estimate"]``).

Usage::

    python benchmarks/bitpushing_default.py [--seeds 300] [--quick] [--output NAME]
    python benchmarks/bitpushing_default.py --render-docs   # rewrite the table in docs/bitpushing.md

writes ``benchmarks/results/bitpushing_default.json``; the docs' table is :func:`render_docs_table` of it.
The census column needs ``census-income-kdd`` (``$FEDSTATS_DATA`` or ``../shared/data``); Adult is
embedded. 288 cells took 1,502 s on one core of the shared 2-core development machine.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import RESULTS, write_results
from fedstats.analyses.bitpushing.encoding import BitEncoding
from fedstats.analyses.bitpushing.simulate import simulate_release

PROTOCOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "basic": ("basic", {}),
    "adaptive": ("adaptive", {}),
    "basic-paper": ("basic", {"min_reports": 0}),
}
"""Protocol label -> (method, options): the two candidates for the default, and Algorithm 1 exactly
(``basic`` without the 2-report floor per bit, which leaves the low bits of a loose range unreported)."""

EPSILONS: tuple[float | None, ...] = (0.5, 1.0, 2.0, None)
SIZES: tuple[int | None, ...] = (1000, 10000, None)
DEPTHS: tuple[float, ...] = (1.0, 1.5, 2.0)
"""Bit depth of the declared range [0, 2^b - 1] as a multiple of the needed one (rounded up)."""
STATISTICS = ("mean", "variance")
DOCS = Path(__file__).resolve().parent.parent / "docs" / "bitpushing.md"
BEGIN, END = "<!-- bitpushing_default table: begin -->", "<!-- bitpushing_default table: end -->"


def load_columns() -> dict[str, np.ndarray]:
    """The four columns: Adult age, hours_per_week, capital_gain (mostly 0), census weeks worked."""
    from fedstats.datasets.loaders import load_adult, load_census_kdd

    adult = load_adult("all")
    census = load_census_kdd()
    return {
        "age": adult["age"].to_numpy(np.float64),
        "hours_per_week": adult["hours_per_week"].to_numpy(np.float64),
        "capital_gain": adult["capital_gain"].to_numpy(np.float64),
        "weeks_worked": census["weeks_worked_in_year"].to_numpy(np.float64),
    }


def one_run(
    statistic: str, method: str, options: dict[str, Any], x: np.ndarray, enc: BitEncoding,
    epsilon: float | None, rng: np.random.Generator,
) -> tuple[float, float, float, float]:  # fmt: skip
    """One release by the library's fast route: (estimate, ci low, ci high, clipped estimate)."""
    res = simulate_release(statistic, x, enc, rng=rng, method=method, epsilon=epsilon, **options)
    return res.estimate, res.ci[0], res.ci[1], res.details["clipped_estimate"]


def _summary(out: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    est, lo, hi, clipped = out.T
    seeds = truth.size
    err, cerr = est - truth, clipped - truth
    scale = float(np.mean(truth))

    def z(e: np.ndarray) -> float:
        sd = float(np.std(e, ddof=1))
        return float(np.mean(e) / (sd / math.sqrt(seeds))) if sd > 0 else 0.0

    return {
        "nrmse": float(np.sqrt(np.mean(err**2)) / scale),
        "relative_bias": float(np.mean(err) / scale),
        "bias_z": z(err),
        "coverage": float(np.mean((lo <= truth) & (truth <= hi))),
        "clipped_nrmse": float(np.sqrt(np.mean(cerr**2)) / scale),
        "clipped_bias_z": z(cerr),
    }


def cells(columns: dict[str, np.ndarray], quick: bool) -> Iterator[dict[str, Any]]:
    """The settings of every cell (quick: one column, n = 1,000, the default and the 2x range)."""
    for col, values in columns.items():
        needed = int(values.max()).bit_length()
        for depth in (1.0, 2.0) if quick else DEPTHS:
            b = math.ceil(needed * depth)
            for statistic in ("mean",) if quick else STATISTICS:
                for eps in EPSILONS:
                    for n in (1000,) if quick else SIZES:
                        yield {"column": col, "statistic": statistic, "bit_depth": b,
                               "needed_bit_depth": needed, "depth": depth, "epsilon": eps,
                               "n": n}  # fmt: skip


def allocation_bound(values: np.ndarray, bit_depth: int, epsilon: float | None) -> float:
    r"""Var(basic) / Var(best allocation) of a mean for the column's bit means (Lemma 1 and Lemma 3).

    With one report's variance :math:`\sigma_j^2 = m_j(1-m_j) + v_\varepsilon`, basic's
    :math:`p_j \propto 2^j` gives :math:`(2^b-1)\sum_j 2^j\sigma_j^2 / N` and Lemma 3's optimum
    :math:`(\sum_j 2^j\sigma_j)^2 / N`: the most any allocation, adaptive or not, can gain over basic.
    """
    codes = values.astype(np.int64)
    m = np.array([np.mean((codes >> j) & 1) for j in range(bit_depth)])
    v = 0.0 if epsilon is None else math.exp(epsilon) / math.expm1(epsilon) ** 2
    sig2 = m * (1.0 - m) + v
    w = 2.0 ** np.arange(bit_depth)
    return float((2.0**bit_depth - 1.0) * (w * sig2).sum() / (w * np.sqrt(sig2)).sum() ** 2)


def run_cell(cell: dict[str, Any], values: np.ndarray, seeds: int) -> dict[str, Any]:
    """Every protocol on the same ``seeds`` samples of the column."""
    enc = BitEncoding(0.0, float(2 ** cell["bit_depth"] - 1))
    n = cell["n"] or values.size
    outs = {name: np.empty((seeds, 4)) for name in PROTOCOLS}
    truth = np.empty(seeds)
    key = zlib.crc32(
        repr((cell["column"], cell["statistic"], cell["bit_depth"], cell["epsilon"], n)).encode()
    )
    for s in range(seeds):
        rng = np.random.default_rng([key, s])
        if n >= values.size:
            x = values[rng.permutation(values.size)]
        else:
            x = values[rng.choice(values.size, size=n, replace=False)]
        truth[s] = float(np.mean(x)) if cell["statistic"] == "mean" else float(np.var(x))
        for name, (method, options) in PROTOCOLS.items():
            outs[name][s] = one_run(
                cell["statistic"], method, options, x, enc, cell["epsilon"], rng
            )
    return {
        **cell,
        "n": n,
        "seeds": seeds,
        "truth": float(np.mean(truth)),
        "allocation_bound": allocation_bound(values, cell["bit_depth"], cell["epsilon"])
        if cell["statistic"] == "mean"
        else None,
        "protocols": {name: _summary(out, truth) for name, out in outs.items()},
    }


def verdict(
    doc_cells: list[dict[str, Any]], a: str = "adaptive", b: str = "basic"
) -> dict[str, int]:
    """Cells where ``a`` has the lower NRMSE, where ``b`` has, and ties (equal to 3 digits)."""
    wins = {a: 0, b: 0, "tie": 0}
    for c in doc_cells:
        ea, eb = (round(c["protocols"][p]["nrmse"], 3 if c["protocols"][p]["nrmse"] < 1 else 2)
                  for p in (a, b))  # fmt: skip
        wins[a if ea < eb else b if eb < ea else "tie"] += 1
    return wins


def _eps(e: float | None) -> str:
    return "no DP" if e is None else f"{e:g}"


def _g(v: float) -> str:
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.3g}"


def coverage_flag(c: float, seeds: int) -> bool:
    """The validation report's coverage rule: below 0.94 and more than 2 SE below 0.95."""
    return c < 0.94 and c + 2.0 * math.sqrt(c * (1.0 - c) / seeds) < 0.95


def _flags(sel: list[dict[str, Any]], p: str) -> str:
    zs = [abs(c["protocols"][p]["bias_z"]) for c in sel]
    cov = [c["protocols"][p]["coverage"] for c in sel]
    nz = sum(z > 3.0 for z in zs)
    nc = sum(coverage_flag(v, c["seeds"]) for v, c in zip(cov, sel, strict=True))
    return f"{nz} ({max(zs):.3g}) / {nc} ({min(cov):.3f})"


def render_docs_table(doc: dict[str, Any]) -> str:
    """The docs' tables, generated from the benchmark's JSON (``--render-docs``).

    A summary per privacy level and range (cells won by each protocol, median NRMSE ratios, the most any
    allocation can gain, and the validation report's bias and coverage FLAGs of the released estimate)
    and the per-cell NRMSE at every n for the default range.
    """
    cs = doc["cells"]
    names = list(PROTOCOLS)
    lines = [
        f"Generated by `python benchmarks/bitpushing_default.py --render-docs` from "
        f"`benchmarks/results/bitpushing_default.json` ({len(cs)} cells, {doc['seeds']} seeds each; "
        f"command: `{doc['command']}`). FLAGs as in the validation report: bias when \\|z\\| > 3, "
        "coverage when below 0.94 and more than 2 SE below 0.95; in brackets the largest \\|z\\| and "
        "the lowest coverage.",
        "",
        "| privacy | range (bit depth) | cells | basic lower | adaptive lower | tie | median NRMSE "
        "adaptive / basic | basic-paper / basic | best allocation's gain (mean cells, largest) "
        "| basic: bias / coverage FLAGs | adaptive: bias / coverage FLAGs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for eps in EPSILONS:
        for depth in DEPTHS:
            sel = [c for c in cs if c["epsilon"] == eps and c["depth"] == depth]
            if not sel:
                continue
            w = verdict(sel)
            ratio = [np.median([c["protocols"][p]["nrmse"] / c["protocols"]["basic"]["nrmse"]
                                for c in sel]) for p in ("adaptive", "basic-paper")]  # fmt: skip
            bound = max((c["allocation_bound"] or 0.0) for c in sel)
            rng = "needed" if depth == 1.0 else f"{depth:g} x needed"
            lines.append(
                f"| {_eps(eps)} | {rng} | {len(sel)} | {w['basic']} | {w['adaptive']} | {w['tie']} "
                f"| {ratio[0]:.3f} | {ratio[1]:.3g} | {bound:.3g} | {_flags(sel, 'basic')} "
                f"| {_flags(sel, 'adaptive')} |"
            )
    w = verdict(cs)
    lines += [
        "",
        f"**All cells:** basic has the lower NRMSE in {w['basic']}, adaptive in {w['adaptive']}, "
        f"tie in {w['tie']}. FLAGs of the released estimate over all cells (bias / coverage): basic "
        f"{_flags(cs, 'basic')}, adaptive {_flags(cs, 'adaptive')}, basic-paper "
        f'{_flags(cs, "basic-paper")}. The clipped estimate (`details["clipped_estimate"]`) '
        f"would have {sum(abs(c['protocols'][p]['clipped_bias_z']) > 3 for c in cs for p in names)} "
        f"bias FLAGs over the {len(cs) * len(names)} (cell, protocol) pairs.",
        "",
        "NRMSE per cell at the default (needed) range, basic / adaptive / basic-paper:",
        "",
        "| column | statistic | epsilon | n = 1,000 | n = 10,000 | n = all |",
        "|---|---|---|---|---|---|",
    ]
    for col in dict.fromkeys(c["column"] for c in cs):
        for stat in STATISTICS:
            for eps in EPSILONS:
                sel = [c for c in cs if (c["column"], c["statistic"], c["epsilon"], c["depth"])
                       == (col, stat, eps, 1.0)]  # fmt: skip
                if not sel:
                    continue
                by_n = sorted(sel, key=lambda c: c["n"])
                vals = [" / ".join(_g(c["protocols"][p]["nrmse"]) for p in names) for c in by_n]
                vals += [""] * (3 - len(vals))
                lines.append(f"| {col} | {stat} | {_eps(eps)} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def render_docs(doc: dict[str, Any], path: Path = DOCS) -> None:
    """Replace the generated block of ``docs/bitpushing.md`` with :func:`render_docs_table`."""
    text = path.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n{render_docs_table(doc)}\n{END}{tail}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument(
        "--quick", action="store_true", help="one column's means at n = 1,000, 50 seeds"
    )
    ap.add_argument("--output", default="bitpushing_default")
    ap.add_argument("--render-docs", action="store_true", help="only rewrite the docs' table")
    args = ap.parse_args(argv)
    if args.render_docs:
        import json

        render_docs(json.loads((RESULTS / f"{args.output}.json").read_text()))
        return
    columns = load_columns()
    if args.quick:
        columns = {"age": columns["age"]}
    seeds = 50 if args.quick else args.seeds
    t0 = time.perf_counter()
    done: list[dict[str, Any]] = []
    log: Callable[[str], None] = lambda s: print(s, flush=True)  # noqa: E731
    for cell in cells(columns, args.quick):
        t = time.perf_counter()
        done.append(run_cell(cell, columns[cell["column"]], seeds))
        pr = done[-1]["protocols"]
        log(f"{cell['column']} {cell['statistic']} b={cell['bit_depth']} eps={_eps(cell['epsilon'])} "
            f"n={done[-1]['n']}: " + ", ".join(f"{k} {v['nrmse']:.4g} (z {v['bias_z']:+.1f}, "
            f"cov {v['coverage']:.3f})" for k, v in pr.items()) + f"  [{time.perf_counter() - t:.1f} s]")  # fmt: skip
    command = "python benchmarks/bitpushing_default.py" + (
        " --quick" if args.quick else f" --seeds {seeds}"
    )
    doc = {
        "command": command,
        "seeds": seeds,
        "protocols": {k: {"method": m, "options": o} for k, (m, o) in PROTOCOLS.items()},
        "seconds": time.perf_counter() - t0,
        "verdict": verdict(done),
        "verdict_paper": verdict(done, "basic-paper"),
        "cells": done,
    }
    path = write_results(args.output, doc)
    print(f"{len(done)} cells in {doc['seconds']:.0f} s; NRMSE lower: {doc['verdict']}; -> {path}")


if __name__ == "__main__":
    main()
