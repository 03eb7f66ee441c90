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

from typing import TYPE_CHECKING

from fedstats._lazy import lazy_exports

# for type checkers: at run time the names below load lazily (PEP 562), so a device importing .client
# loads only it
if TYPE_CHECKING:
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

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
