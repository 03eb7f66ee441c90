"""The round engine: every protocol is a few rounds in which the server learns only an exact sum."""

from fedstats.engine.backends import Backend, RoundJob, SerialBackend, sum_shard
from fedstats.engine.core import Engine, RoundLog
from fedstats.engine.fixedpoint import FixedPoint
from fedstats.engine.populations import (
    GeneratedPopulation,
    InMemoryPopulation,
    Population,
    ResampledPopulation,
)
from fedstats.engine.progress import NullProgress, Progress, RecordingProgress
from fedstats.engine.rounds import ClientBatch, Round, RoundSum

__all__ = [
    "Backend",
    "ClientBatch",
    "Engine",
    "FixedPoint",
    "GeneratedPopulation",
    "InMemoryPopulation",
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
