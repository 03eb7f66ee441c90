"""fedstats: private federated analytics.

Statistics over data that stays on many clients, where the server learns only what differential privacy
and secure aggregation allow. See the README for a tour and ``fedstats --help`` for the command line.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fedstats.errors import FedstatsError
from fedstats.randomness import RandomSource

try:
    __version__ = version("fedstats")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["FedstatsError", "RandomSource", "__version__"]
