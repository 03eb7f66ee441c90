"""fedstats: private federated analytics.

Statistics over data that stays on many clients, where the server learns only what differential privacy
and secure aggregation allow. See the README for a tour and ``fedstats --help`` for the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedstats._lazy import lazy_exports
from fedstats.errors import FedstatsError

if TYPE_CHECKING:
    from fedstats.randomness import RandomSource

_ONE_CALL = {
    "RandomSource": "fedstats.randomness",
    "fed_chi2": "fedstats.analyses.chi2.api",
    "fed_entropy": "fedstats.analyses.entropy.api",
    "fed_g_test": "fedstats.analyses.entropy.api",
    "mean": "fedstats.analyses.bitpushing.api",
    "variance": "fedstats.analyses.bitpushing.api",
    "BitEncoding": "fedstats.analyses.bitpushing.encoding",
    "measure_performance_gap": "fedstats.analyses.performance_gap.api",
    "plan_epsilon": "fedstats.analyses.performance_gap.planning",
    "plan_mean": "fedstats.analyses.bitpushing.planning",
    "plan_variance": "fedstats.analyses.bitpushing.planning",
    "plan_gap": "fedstats.analyses.performance_gap.planning",
    "plan_chi2": "fedstats.analyses.chi2.planning",
    "plan_entropy": "fedstats.analyses.entropy.planning",
    "plan_heterogeneity": "fedstats.analyses.heterogeneity.planning",
    "result_warnings": "fedstats.analyses.usefulness",
    "heterogeneity": "fedstats.analyses.heterogeneity.api",
    "federated_mean": "fedstats.analyses.exact.api",
    "chi_square": "fedstats.analyses.exact.api",
    "PrivacyLedger": "fedstats.privacy.ledger",
}
"""The one-call API of each analysis, its planner (``plan_*``: the clients, epsilon or encoding size a
useful run needs), :func:`result_warnings` and :class:`RandomSource`, loaded on first use: ``import fedstats``
stays light (no numpy), so ``fedstats --version`` answers from the package metadata alone."""

_lazy_getattr, _lazy_dir = lazy_exports(__name__, _ONE_CALL)


def __dir__() -> list[str]:
    """Public names, including the lazily loaded one-call API."""
    return sorted({*_lazy_dir(), "__version__"})


def __getattr__(name: str) -> Any:
    """Load a one-call API, or compute ``__version__``, on first use (both cost imports)."""
    if name in _ONE_CALL:
        return _lazy_getattr(name)
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("fedstats")
        except PackageNotFoundError:  # pragma: no cover - a source tree without install
            v = "0.0.0"
        globals()["__version__"] = v
        return v
    raise AttributeError(f"module 'fedstats' has no attribute {name!r}")


__all__ = [
    "BitEncoding",
    "FedstatsError",
    "PrivacyLedger",
    "RandomSource",
    "__version__",
    "chi_square",
    "fed_chi2",
    "fed_entropy",
    "fed_g_test",
    "federated_mean",
    "heterogeneity",
    "mean",
    "measure_performance_gap",
    "plan_chi2",
    "plan_entropy",
    "plan_epsilon",
    "plan_gap",
    "plan_heterogeneity",
    "plan_mean",
    "plan_variance",
    "result_warnings",
    "variance",
]
