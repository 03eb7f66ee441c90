r"""Private measurement of performance gaps across groups (Juarez & Korolova 2023), with corrected accounting.

* :mod:`.mechanisms`: :math:`\\mathcal M_R` and :math:`\\mathcal M_L`, their exact privacy loss (the paper's
  Theorems 5 and 6 do not hold as stated) and the variances of Eqs. (19), (20) and Theorem 9;
* :mod:`.allocation`: the budget split minimizing the gap's variance under the true loss, and the paper's;
* :mod:`.planning`: the smallest budget reaching an error target (Chebyshev, Bernstein, normal);
* :mod:`.protocol`: the one-round protocol on the engine and the estimators of Def. 7;
* :mod:`.analysis`: :func:`measure_performance_gap`, the entry point.
"""

from fedstats.analyses.performance_gap.allocation import (
    Allocation,
    GroupLayout,
    allocate,
    optimal_allocation,
    paper_allocation,
)
from fedstats.analyses.performance_gap.analysis import measure_performance_gap, prepare_columns
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
    perturb,
)

__all__ = [
    "Allocation",
    "GapMechanism",
    "GapPlan",
    "GapSums",
    "GroupLayout",
    "PerformanceGapResult",
    "allocate",
    "error_bound",
    "estimate_gap",
    "measure_performance_gap",
    "optimal_allocation",
    "paper_allocation",
    "performance_gap_protocol",
    "perturb",
    "plan_epsilon",
    "prepare_columns",
    "tail_probability",
]
