"""Baselines for bit pushing (Cormode & Markov 2021, Sec. 5): dithering, Piecewise, Duchi, Laplace.

The analysis contract (``docs/architecture.md``): :mod:`~fedstats.analyses.mean_baselines.client`
(the encoders :func:`encode_dithering`, :func:`encode_ldp`), :mod:`~fedstats.analyses.mean_baselines.
protocol` (the stages and the mean/variance protocols, results tagged ``"mean_baselines.mean"`` /
``"mean_baselines.variance"``) and :mod:`~fedstats.analyses.mean_baselines.api` (:func:`mean`,
:func:`variance`). Names load on first use, so the client module imports nothing of the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedstats._lazy import lazy_exports

if TYPE_CHECKING:  # the same names, for type checkers (at run time they load lazily, below)
    from fedstats.analyses.mean_baselines.api import mean, variance
    from fedstats.analyses.mean_baselines.client import encode_dithering, encode_ldp
    from fedstats.analyses.mean_baselines.protocol import (
        BASELINE_METHODS,
        baseline_mechanisms,
        baseline_stage,
        dithering_stage,
        ldp_stage,
        mean_protocol,
        variance_protocol,
    )

_EXPORTS = {
    "api": ("mean", "variance"),
    "client": ("encode_dithering", "encode_ldp"),
    "protocol": (
        "BASELINE_METHODS",
        "baseline_mechanisms",
        "baseline_stage",
        "dithering_stage",
        "ldp_stage",
        "mean_protocol",
        "variance_protocol",
    ),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "BASELINE_METHODS",
    "baseline_mechanisms",
    "baseline_stage",
    "dithering_stage",
    "encode_dithering",
    "encode_ldp",
    "ldp_stage",
    "mean",
    "mean_protocol",
    "variance",
    "variance_protocol",
]

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
