"""Reproduction of the experiments of Pang et al. (ICML 2023), FED-chi^2 and FED-H (paper 004).

``fedstats reproduce fed-chi2`` (:mod:`fedstats.experiments.framework`) runs, as checkpointed cells:

* **Figure 1** (and App. J/L): multiplicative error ``|s_hat - s| / s`` and power of FED-chi^2 against the
  encoding size ``l`` on the four synthetic generators (20 x 20 tables, 100 clients, each run a fresh draw)
  and the real tables available here (Adult occupation x native-country, four Mushroom pairs, Lymphography,
  six GTSRB attributes x class), with 0/5/10/20% round-2 dropout, for the paper's geometric-mean decoder
  and the mean-of-squares decoder. Power with ``(m_x - 1)(m_y - 1)`` degrees of freedom and with the
  authors' ``m_x m_y - 1``. Synthetic tables run the real protocol through the engine
  (:func:`fedstats.analyses.chi2.fed_chi2`, dropout by the route); real tables the fast path
  (:func:`fedstats.analyses.chi2.simulate_fed_chi2`, authors' table split, projection in distribution).
* **Figure 2**: client encoding time for ``m x m`` tables up to 500 x 500 at ``l = 50``; projection
  generation timed separately, and the on-demand encoding of a sparse client.
* **Figure 5**: FED-H additive error against ``l`` for histograms of ``m_x = 100,000`` cells.
* **Section 4.2 / App. N**: chi-square feature selection on Reuters-21578 (100 clients, ``l = 50``, top
  40,000 terms): overlap with the exact selection and a logistic regression on the selected terms; and
  online FDR control with SAFFRON (App. C parameters): FDR and TDR against ``l`` and the counts of Table 3,
  plus a sketch-calibrated p-value that restores FDR control (ours).

Modules: :mod:`~.settings` (grids, the paper's numbers, the real tables), :mod:`~.figures` (Figures 1, 2,
5), :mod:`~.downstream` (feature selection, FDR), :mod:`~.plots`, :mod:`~.page` (what the Jinja2 page
``templates/fed_chi2.md.j2`` shows). The document's ``config`` holds the grids of :class:`Settings`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from fedstats.analyses.chi2 import chi_square_statistic
from fedstats.errors import DatasetNotFoundError, FedstatsError
from fedstats.experiments.fed_chi2.downstream import (
    clear_corpus_cache,
    fdr_cell,
    fs_exact_cell,
    fs_fed_cell,
    summarize_fdr,
)
from fedstats.experiments.fed_chi2.figures import fig1_cell, fig2_cell, fig5_cell, fig5_validate
from fedstats.experiments.fed_chi2.page import page_context
from fedstats.experiments.fed_chi2.plots import write_plots
from fedstats.experiments.fed_chi2.settings import (
    DECODERS,
    NAME,
    PAPER,
    Settings,
    real_tables,
    settings_for,
)
from fedstats.experiments.framework import Cell, RunContext
from fedstats.experiments.synthetic_tables import GENERATORS

__all__ = ["DECODERS", "NAME", "PAPER", "Settings", "real_tables", "run", "settings_for"]


def shared_data_present(data_dir: Any) -> bool:
    """Whether the shared datasets folder (``../shared/data``) is reachable (Mushroom as the witness)."""
    from fedstats.datasets import dataset_status

    try:
        return bool(dataset_status("mushroom", data_dir, verify=False).present)
    except FedstatsError:
        return False


def _fig1(ctx: RunContext, st: Settings, notes: list[str]) -> dict[str, Any]:
    tables, table_notes = real_tables(ctx.data_dir, which=st.real_tables)
    notes.extend(table_notes)
    datasets: dict[str, np.ndarray | None] = {f"synthetic: {k}": None for k in GENERATORS}
    datasets.update(tables)
    rs = ctx.randomness
    cells = [
        Cell(f"fig1|{name}|drop={d}|l={ell}", fig1_cell, (name, table, d, ell, st, rs))
        for name, table in datasets.items()
        for d in st.dropouts
        for ell in st.l_grid
    ]
    values = ctx.cells(cells, part="fig1", task="Figure 1")
    fig1: dict[str, Any] = {}
    for name, table in datasets.items():
        fig1[name] = {
            "shape": (20, 20) if table is None else tuple(int(v) for v in table.shape),
            "exact_statistic": None if table is None else chi_square_statistic(table)[0],
            "cells": {
                f"drop={d}|l={ell}": values[f"fig1|{name}|drop={d}|l={ell}"]
                for d in st.dropouts
                for ell in st.l_grid
            },
        }
    return fig1


def _feature_selection(ctx: RunContext, st: Settings, notes: list[str]) -> dict[str, Any]:
    rs, data_dir = ctx.randomness, ctx.data_dir
    cells = [Cell("fs|exact", fs_exact_cell, (st, rs, data_dir))]
    for d in st.fs_dropouts:
        for dec in DECODERS:
            with_lr = dec == "geometric" or d == 0.0
            args = (st.fs_l, d, dec, with_lr, st, rs, data_dir)
            cells.append(Cell(f"fs|l={st.fs_l}|drop={d}|{dec}", fs_fed_cell, args))
    for ell in st.fs_l_grid:
        if ell == st.fs_l:
            continue
        for dec in DECODERS:
            args = (ell, 0.0, dec, st.fs_lr_grid and dec == "geometric", st, rs, data_dir)
            cells.append(Cell(f"fs|l={ell}|drop=0.0|{dec}", fs_fed_cell, args))
    try:
        # one process: the cells share the loaded corpus
        return dataclasses.replace(ctx, workers=1).cells(cells, part="fs", task="Feature selection")
    except DatasetNotFoundError as exc:
        notes.append(f"Feature selection skipped: Reuters-21578 not found ({exc})")
        return {}
    finally:
        clear_corpus_cache()


def run(ctx: RunContext) -> dict[str, Any]:
    """Run the reproduction: ``<stem>.json``, the PNG plots and the page ``<stem>.md`` in ``ctx.out``.

    Parameters
    ----------
    ctx : RunContext
        The framework's context (quick, seed, workers for the Figure 1 grid, data folder).

    Returns
    -------
    dict
        The JSON document written.
    """
    st = settings_for(ctx.quick)
    rs = ctx.randomness
    serial = dataclasses.replace(ctx, workers=1)  # timings and shared caches: one process
    notes: list[str] = []
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    fig1 = _fig1(ctx, st, notes)
    timings["fig1_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    f2 = serial.cells(
        [Cell(f"fig2|m={m}", fig2_cell, (m, st, rs)) for m in st.fig2_sizes],
        part="fig2",
        task="Figure 2",
    )
    timings["fig2_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    fig5 = serial.cells(
        [Cell(f"fig5|{kind}", fig5_cell, (kind, st, rs)) for kind in GENERATORS]
        + [Cell("fig5|validation", fig5_validate, (st, rs))],
        part="fig5",
        task="Figure 5",
    )
    timings["fig5_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    fs = _feature_selection(ctx, st, notes)
    timings["feature_selection_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    fdr_runs = ctx.cells(
        [Cell(f"fdr|run={r}", fdr_cell, (r, st, rs)) for r in range(st.fdr_runs)],
        part="fdr",
        task="Online FDR",
    )
    timings["fdr_s"] = time.perf_counter() - t0
    timings["total_s"] = sum(timings.values())

    if not shared_data_present(ctx.data_dir):
        notes.insert(
            0,
            "../shared/data was not found: only the synthetic tables and the embedded Adult data "
            "were used.",
        )
    doc: dict[str, Any] = {
        "name": NAME,
        "paper": "Pang et al., Secure Federated Correlation Test and Entropy Estimation, ICML 2023",
        "config": asdict(st),
        "seed": ctx.seed,
        "release_note": rs.release_note,
        "notes": notes,
        "paper_numbers": PAPER,
        "fig1": fig1,
        "fig2": [f2[f"fig2|m={m}"] for m in st.fig2_sizes],
        "fig5": {
            **{kind: fig5[f"fig5|{kind}"] for kind in GENERATORS},
            "validation": fig5["fig5|validation"],
        },
        "feature_selection": fs,
        "fdr": summarize_fdr([fdr_runs[f"fdr|run={r}"] for r in range(st.fdr_runs)]),
        "timings": timings,
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "cpu_count": os.cpu_count(),
    }
    plots = write_plots(ctx.out, doc, ctx.plot_title)
    doc["page"] = page_context(doc)
    ctx.finish(doc, plots=plots)
    return doc
