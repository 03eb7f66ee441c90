"""Demo rows of paper 004 (Pang et al., ICML 2023): FED-chi^2 and FED-H on embedded Adult.

* FED-chi^2 of occupation x native-country (train and test, 48,842 records, the authors keep the "?"
  category), the table split across 100 clients with the authors' cut-point method, ``l = 50``, the
  maximum-likelihood (mean of squares) decoder, through real secure aggregation.
* FED-H of the occupation column over the same 100 clients (coupled projections, ``l = 500``,
  ``D = 0.05``), also through secure aggregation.

Neither is differentially private (``epsilon = None``): the server learns the marginals and the aggregated
sketch only.
"""

from __future__ import annotations

from typing import Any

from fedstats.analyses.chi2 import fed_chi2
from fedstats.analyses.entropy import fed_entropy
from fedstats.datasets import contingency_table, load_adult, split_contingency_table
from fedstats.engine import Engine
from fedstats.engine.routes import open_backend
from fedstats.randomness import RandomSource

__all__ = ["run_demo"]


def run_demo(randomness: RandomSource) -> list[dict[str, Any]]:
    """Two rows: the FED-chi^2 statistic and the FED-H entropy on Adult, with truth and error.

    Parameters
    ----------
    randomness : RandomSource
        Source of the table split, the seed agreement and the clients' rounding.

    Returns
    -------
    list of dict
        Rows with ``name``, ``dataset``, ``estimate``, ``truth``, ``error``, ``epsilon`` (None) and the
        interval, p-value and communication.
    """
    adult = load_adult("all")
    ct = contingency_table(adult, "occupation", "native_country")
    tables = split_contingency_table(ct.counts, 100, rng=randomness.child("split"))
    m_x, m_y = ct.counts.shape
    with open_backend("secure") as backend:
        chi = fed_chi2(
            tables, engine=Engine(backend, randomness.child("chi2")), randomness=randomness
        )
    with open_backend("secure") as backend:
        ent = fed_entropy(
            tables.sum(axis=2),
            encoding_size=500,
            engine=Engine(backend, randomness.child("entropy")),
            randomness=randomness,
        )
    assert chi.exact_statistic is not None and ent.exact_entropy is not None
    return [
        {
            "name": "FED-chi^2 (l=50, mean of squares, secure aggregation)",
            "dataset": f"adult occupation x native-country, {m_x}x{m_y}, 100 clients",
            "estimate": chi.statistic,
            "truth": chi.exact_statistic,
            "error": chi.statistic - chi.exact_statistic,
            "epsilon": None,
            "ci": chi.ci,
            "p_value": chi.p_value,
            "dof": chi.dof,
            "multiplicative_error": chi.multiplicative_error,
            "bytes_per_client": chi.bytes_per_client,
            "bytes_full_table": chi.bytes_full_table,
        },
        {
            "name": "FED-H entropy, nats (l=500, D=0.05, coupled, secure aggregation)",
            "dataset": f"adult occupation, {m_x} categories, 100 clients",
            "estimate": ent.entropy,
            "truth": ent.exact_entropy,
            "error": ent.entropy - ent.exact_entropy,
            "epsilon": None,
            "ci": ent.ci,
            "bytes_per_client": ent.bytes_per_client,
        },
    ]
