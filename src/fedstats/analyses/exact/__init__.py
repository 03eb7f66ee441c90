"""Exact (non-private) federated baselines on the engine: a global contingency table and a mean.

* :mod:`.client`: the encoders (``encode_table``, ``encode_value``);
* :mod:`.protocol`: the one-round server generators, returning ``"exact.chi2"`` / ``"exact.mean"`` results;
* :mod:`.api`: one call each (:func:`chi_square`, :func:`federated_mean`).

Examples
--------
>>> import numpy as np
>>> from fedstats.analyses.exact import chi_square
>>> from fedstats.randomness import RandomSource
>>> tables = np.random.default_rng(0).integers(0, 4, size=(100, 3, 4))
>>> r = chi_square(tables, randomness=RandomSource(1))
>>> r.analysis, r.dof
('exact.chi2', 6)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if (
    TYPE_CHECKING
):  # the names below load lazily (PEP 562), so a device importing .client loads only it
    from fedstats.analyses.exact.api import chi_square, federated_mean
    from fedstats.analyses.exact.client import encode_table, encode_value
    from fedstats.analyses.exact.protocol import (
        ChiSquareResult,
        MeanResult,
        chi_square_protocol,
        mean_protocol,
    )

_LAZY: dict[str, str] = {
    "ChiSquareResult": "fedstats.analyses.exact.protocol",
    "MeanResult": "fedstats.analyses.exact.protocol",
    "chi_square": "fedstats.analyses.exact.api",
    "chi_square_protocol": "fedstats.analyses.exact.protocol",
    "encode_table": "fedstats.analyses.exact.client",
    "encode_value": "fedstats.analyses.exact.client",
    "federated_mean": "fedstats.analyses.exact.api",
    "mean_protocol": "fedstats.analyses.exact.protocol",
}

__all__ = [
    "ChiSquareResult",
    "MeanResult",
    "chi_square",
    "chi_square_protocol",
    "encode_table",
    "encode_value",
    "federated_mean",
    "mean_protocol",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its submodule on first use (keeps ``import <package>.client`` light)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Public names, including the ones not loaded yet."""
    return sorted(set(globals()) | set(__all__))
