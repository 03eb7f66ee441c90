"""The progress protocol (moved to :mod:`fedstats.progress`, a base module every layer may use)."""

from fedstats.progress import NullProgress, Progress, RecordingProgress

__all__ = ["NullProgress", "Progress", "RecordingProgress"]
