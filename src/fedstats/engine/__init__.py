"""The round engine: every protocol is a few rounds in which the server learns only an exact sum.

Names load on first use (:mod:`fedstats._lazy`), so a device that imports ``fedstats.engine.rounds`` or
``fedstats.engine.fixedpoint`` does not load the routes and populations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedstats._lazy import lazy_exports

if TYPE_CHECKING:
    from fedstats.engine.backends import Backend, RoundJob, SerialBackend, sum_shard
    from fedstats.engine.core import Dropout, Engine, RoundLog
    from fedstats.engine.fixedpoint import FixedPoint
    from fedstats.engine.populations import (
        GeneratedPopulation,
        HistogramPopulation,
        InMemoryPopulation,
        Population,
        ResampledPopulation,
    )
    from fedstats.engine.progress import NullProgress, Progress, RecordingProgress
    from fedstats.engine.rounds import ClientBatch, InputHistogram, Round, RoundSum

_WHERE = {
    "Backend": "backends",
    "RoundJob": "backends",
    "SerialBackend": "backends",
    "sum_shard": "backends",
    "Dropout": "core",
    "Engine": "core",
    "RoundLog": "core",
    "FixedPoint": "fixedpoint",
    "GeneratedPopulation": "populations",
    "HistogramPopulation": "populations",
    "InMemoryPopulation": "populations",
    "Population": "populations",
    "ResampledPopulation": "populations",
    "NullProgress": "progress",
    "Progress": "progress",
    "RecordingProgress": "progress",
    "ClientBatch": "rounds",
    "InputHistogram": "rounds",
    "Round": "rounds",
    "RoundSum": "rounds",
}
__all__ = [
    "Backend",
    "ClientBatch",
    "Dropout",
    "Engine",
    "FixedPoint",
    "GeneratedPopulation",
    "HistogramPopulation",
    "InMemoryPopulation",
    "InputHistogram",
    "NullProgress",
    "Population",
    "Progress",
    "RecordingProgress",
    "ResampledPopulation",
    "Round",
    "RoundJob",
    "RoundLog",
    "RoundSum",
    "SerialBackend",
    "sum_shard",
]
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
