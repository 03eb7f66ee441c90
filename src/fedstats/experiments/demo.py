"""``fedstats demo``: every analysis implemented so far, on real data shipped inside the package.

Each module named in ``_DEMO_MODULES`` exposes ``run_demo(randomness: RandomSource) -> list[dict]``; each
dict is one row with at least ``name``, ``dataset``, ``estimate``, ``truth``, ``error`` and ``epsilon``
(``None`` when not private).
"""

from __future__ import annotations

import importlib
from typing import Any

from fedstats.progress import NullProgress, Progress
from fedstats.randomness import RandomSource

__all__ = ["REQUIRED_KEYS", "run_demo"]

_DEMO_MODULES: tuple[str, ...] = (
    "fedstats.experiments.demo_basic",
    "fedstats.experiments.demo_performance_gap",
    "fedstats.experiments.demo_bitpushing",
    "fedstats.experiments.demo_heterogeneity",
    "fedstats.experiments.demo_chi2",
)

REQUIRED_KEYS = ("name", "dataset", "estimate", "truth", "error", "epsilon")


def run_demo(randomness: RandomSource, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Run every registered demo and return their rows in registration order.

    Parameters
    ----------
    randomness : RandomSource
        Source of all randomness (secure by default; seeded for a reproducible demo).
    progress : Progress, optional
        Receives one unit per demo module.

    Returns
    -------
    list of dict
        One dict per analysis, each with at least the keys in ``REQUIRED_KEYS``.
    """
    progress = progress or NullProgress()
    rows: list[dict[str, Any]] = []
    progress.start("demo", len(_DEMO_MODULES))
    for i, name in enumerate(_DEMO_MODULES):
        module = importlib.import_module(name)
        for row in module.run_demo(randomness.child("demo", i)):
            missing = [k for k in REQUIRED_KEYS if k not in row]
            if missing:
                raise KeyError(f"demo {name} row lacks {missing}")
            rows.append(row)
        progress.advance("demo")
    progress.finish("demo")
    return rows
