"""fedstats: private federated analytics.

Statistics over data that stays on many clients, where the server learns only what differential privacy
and secure aggregation allow. See the README for a tour and ``fedstats --help`` for the command line.
"""

from __future__ import annotations

from typing import Any

from fedstats.errors import FedstatsError
from fedstats.randomness import RandomSource


def __getattr__(name: str) -> Any:
    """Compute ``__version__`` on first use (``importlib.metadata`` costs as much as numpy to import)."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("fedstats")
        except PackageNotFoundError:  # pragma: no cover - a source tree without install
            v = "0.0.0"
        globals()["__version__"] = v
        return v
    raise AttributeError(f"module 'fedstats' has no attribute {name!r}")


__all__ = ["FedstatsError", "RandomSource", "__version__"]
