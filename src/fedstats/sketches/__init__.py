"""Sketches: symmetric alpha-stable variables, stable random projections and frequency-moment decoders.

Pure mathematics, independent of clients and rounds (``DESIGN.md``): :mod:`~fedstats.sketches.stable`
(sampler and the public projection) and :mod:`~fedstats.sketches.decoders` (geometric mean and mean of squares
with confidence intervals). The commit-then-reveal agreement on the public projection seed is a protocol
step: :mod:`fedstats.analyses.seed_agreement`.
"""

from fedstats.sketches.decoders import (
    FrequencyMomentEstimate,
    geometric_mean_estimator,
    geometric_relative_standard_error,
    mean_of_squares_estimator,
)
from fedstats.sketches.stable import StableProjection, cms_transform, sample_symmetric_stable

__all__ = [
    "FrequencyMomentEstimate",
    "StableProjection",
    "cms_transform",
    "geometric_mean_estimator",
    "geometric_relative_standard_error",
    "mean_of_squares_estimator",
    "sample_symmetric_stable",
]
