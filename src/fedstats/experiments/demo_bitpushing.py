"""Demo rows of bit pushing (issue 6): mean age of the 48,842 embedded Adult records, one client each.

The library's default protocol (Cormode & Markov 2021, Algorithm 1: one round, ``docs/bitpushing.md``),
7-bit codes (declared range [0, 127]), one bit disclosed per client: without privacy, and with randomized
response at epsilon = 2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedstats.analyses.bitpushing.api import mean, variance
from fedstats.analyses.bitpushing.encoding import BitEncoding
from fedstats.datasets import load_adult
from fedstats.randomness import RandomSource

__all__ = ["run_demo"]

DEMO_EPSILON = 2.0


def run_demo(randomness: RandomSource) -> list[dict[str, Any]]:
    """Three rows: mean age (no DP, epsilon = 2) and variance of age (no DP), by the default protocol."""
    ages = load_adult("all")["age"].to_numpy(dtype=np.float64)
    enc = BitEncoding(0, 127)
    dataset = f"adult age, {ages.size} clients, 1 bit each"
    rows: list[dict[str, Any]] = []
    for i, eps in enumerate((None, DEMO_EPSILON)):
        res = mean(
            ages, enc, epsilon=eps, no_privacy=eps is None, randomness=randomness.child("mean", i)
        )
        rows.append(
            {
                "name": f"mean, {res.method} bit pushing" + (" + RR" if eps else ""),
                "dataset": dataset,
                "estimate": res.estimate,
                "truth": res.truth,
                "error": res.error,
                "epsilon": eps,
                "ci": res.ci,
                "bits_per_client": res.bits_per_client,
            }
        )
    var = variance(ages, enc, no_privacy=True, randomness=randomness.child("variance"))
    rows.append(
        {
            "name": f"variance, {var.method} bit pushing",
            "dataset": dataset,
            "estimate": var.estimate,
            "truth": var.truth,
            "error": var.error,
            "epsilon": None,
            "ci": var.ci,
            "bits_per_client": var.bits_per_client,
        }
    )
    return rows
