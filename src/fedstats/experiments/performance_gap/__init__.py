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

Modules: :mod:`~.settings` (the paper's numbers), :mod:`~.analytic` (Table 1, Figures 1-2, Appendix C),
:mod:`~.table2` (Table 2's runs on the engine), :mod:`~.plots` (the PNG files).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from fedstats.errors import DatasetNotFoundError
from fedstats.experiments.framework import RunContext
from fedstats.experiments.performance_gap.analytic import appendix_c, figure1, figure2, table1
from fedstats.experiments.performance_gap.plots import plots
from fedstats.experiments.performance_gap.settings import NAME, PAPER_TABLE1, PAPER_TABLE2
from fedstats.experiments.performance_gap.table2 import table2, table2_cell

__all__ = ["NAME", "PAPER_TABLE1", "PAPER_TABLE2", "run", "table2_cell"]


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
    files = plots(ctx.out, doc)
    ctx.finish(doc, plots=files)
    return doc
