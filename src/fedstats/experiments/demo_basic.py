"""Demo rows of the foundation: exact federated aggregates on embedded Adult (issue 2).

* The Adult occupation x native-country table (train and test, 48,842 records, "?" kept as a category)
  split across 100 clients with the FED-chi^2 authors' method, assembled by the engine's exact sum, and
  its Pearson chi-square statistic (the p-value in the row's details).
* The mean age of the 48,842 Adult records, one client each, through the engine (fixed point, exact to
  2^-16).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.stats

from fedstats.analyses.exact import chi_square_protocol, mean_protocol
from fedstats.datasets import contingency_table, load_adult, split_contingency_table
from fedstats.engine import Engine, InMemoryPopulation
from fedstats.randomness import RandomSource

__all__ = ["run_demo"]


def run_demo(randomness: RandomSource) -> list[dict[str, Any]]:
    """Two rows: the federated chi-square statistic and the federated mean age (not private)."""
    adult = load_adult("all")
    ct = contingency_table(adult, "occupation", "native_country")
    tables = split_contingency_table(ct.counts, 100, rng=randomness.child("split"))
    engine = Engine(randomness=randomness.child("engine"))
    chi = engine.run(
        chi_square_protocol(ct.counts.shape, max_cell=int(tables.max())),
        InMemoryPopulation.from_tables(tables),
    )
    truth_stat = float(scipy.stats.chi2_contingency(ct.counts, correction=False)[0])
    ages = adult["age"].to_numpy(dtype=np.float64)
    mean = Engine(randomness=randomness.child("engine-mean")).run(
        mean_protocol("age", clip=128.0), InMemoryPopulation({"age": ages})
    )
    truth_mean = float(ages.mean())
    return [
        {
            "name": "chi2 (exact, federated sum)",
            "dataset": f"adult occupation x native-country, {ct.counts.shape[0]}x{ct.counts.shape[1]}, "
            "100 clients",
            "estimate": chi.statistic,
            "truth": truth_stat,
            "error": chi.statistic - truth_stat,
            "epsilon": None,
            "p_value": chi.p_value,
            "dof": chi.dof,
        },
        {
            "name": "mean age (exact, federated sum)",
            "dataset": f"adult ages, {mean.n_clients} clients",
            "estimate": mean.estimate,
            "truth": truth_mean,
            "error": mean.estimate - truth_mean,
            "epsilon": None,
        },
    ]
