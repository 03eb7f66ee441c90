r"""Private measurement of performance gaps across groups (Juarez & Korolova 2023), with corrected accounting.

* :mod:`.mechanisms`: :math:`\mathcal M_R` and :math:`\mathcal M_L`, their exact privacy loss (the paper's
  Theorems 5 and 6 do not hold as stated) and the variances of Eqs. (19), (20) and Theorem 9;
* :mod:`.allocation`: the budget split minimizing the gap's variance under the true loss, and the paper's;
* :mod:`.planning`: the smallest budget reaching an error target (Chebyshev, Bernstein, normal);
* :mod:`.client`: the clients' encoders (and :math:`\mathcal M_R`'s aggregate form);
* :mod:`.protocol`: the one-round server protocol and the estimators of Def. 7, returning a
  :class:`PerformanceGapResult`;
* :mod:`.api`: :func:`measure_performance_gap`, the one-call entry point;
* :mod:`.simulate`: :func:`simulate_sums`, the Monte Carlo fast path (many runs without the engine).

Importing the package (or :mod:`.client`, which a client device imports) loads no submodule: the names
below are loaded on first use, so the encoders stay free of scipy.stats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedstats._lazy import lazy_exports

if TYPE_CHECKING:
    from fedstats.analyses.performance_gap.allocation import (
        Allocation,
        GroupLayout,
        allocate,
        optimal_allocation,
        paper_allocation,
    )
    from fedstats.analyses.performance_gap.api import (
        measure_performance_gap,
        prepare_columns,
        simulated_truth,
    )
    from fedstats.analyses.performance_gap.client import (
        aggregate_gap_report,
        encode_gap_report,
        perturb,
    )
    from fedstats.analyses.performance_gap.mechanisms import GapMechanism
    from fedstats.analyses.performance_gap.planning import (
        GapPlan,
        error_bound,
        plan_epsilon,
        tail_probability,
    )
    from fedstats.analyses.performance_gap.protocol import (
        GapSums,
        PerformanceGapResult,
        estimate_gap,
        performance_gap_protocol,
        report_params,
    )
    from fedstats.analyses.performance_gap.simulate import simulate_sums

_LAZY: dict[str, str] = {
    "Allocation": "allocation",
    "GapMechanism": "mechanisms",
    "GapPlan": "planning",
    "GapSums": "protocol",
    "GroupLayout": "allocation",
    "PerformanceGapResult": "protocol",
    "aggregate_gap_report": "client",
    "allocate": "allocation",
    "encode_gap_report": "client",
    "error_bound": "planning",
    "estimate_gap": "protocol",
    "measure_performance_gap": "api",
    "optimal_allocation": "allocation",
    "paper_allocation": "allocation",
    "performance_gap_protocol": "protocol",
    "perturb": "client",
    "plan_epsilon": "planning",
    "prepare_columns": "api",
    "report_params": "protocol",
    "simulate_sums": "simulate",
    "simulated_truth": "api",
    "tail_probability": "planning",
}


__all__ = [
    "Allocation",
    "GapMechanism",
    "GapPlan",
    "GapSums",
    "GroupLayout",
    "PerformanceGapResult",
    "aggregate_gap_report",
    "allocate",
    "encode_gap_report",
    "error_bound",
    "estimate_gap",
    "measure_performance_gap",
    "optimal_allocation",
    "paper_allocation",
    "performance_gap_protocol",
    "perturb",
    "plan_epsilon",
    "prepare_columns",
    "report_params",
    "simulate_sums",
    "simulated_truth",
    "tail_probability",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
