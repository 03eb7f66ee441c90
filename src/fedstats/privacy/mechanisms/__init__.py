"""Vectorized privacy mechanisms and exact samplers (see each class for sources and release grid).

Every ``randomize(values, rng)`` works on a whole array of clients at once and takes the generator it draws
from. ``floating_point_safe`` tells whether a mechanism's outputs may be released (finite set or exact grid)
or are for simulation only (continuous floating-point outputs, Mironov 2012).

Names load on first use (:mod:`fedstats._lazy`), so a device loads only the mechanisms it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedstats._lazy import lazy_exports

if TYPE_CHECKING:
    from fedstats.privacy.mechanisms.base import Mechanism
    from fedstats.privacy.mechanisms.dithering import SubtractiveDithering
    from fedstats.privacy.mechanisms.ldp import DuchiMechanism, Harmony, PiecewiseMechanism
    from fedstats.privacy.mechanisms.noise import (
        GaussianMechanism,
        LaplaceMechanism,
        grid_spacing,
        snap_to_grid,
    )
    from fedstats.privacy.mechanisms.randomized_response import (
        GeneralizedRandomizedResponse,
        RandomizedResponse,
    )
    from fedstats.privacy.mechanisms.samplers import (
        sample_discrete_gaussian,
        sample_discrete_laplace,
    )
    from fedstats.privacy.mechanisms.words import bernoulli, random_raw

_WHERE = {
    "Mechanism": "base",
    "SubtractiveDithering": "dithering",
    "DuchiMechanism": "ldp",
    "Harmony": "ldp",
    "PiecewiseMechanism": "ldp",
    "GaussianMechanism": "noise",
    "LaplaceMechanism": "noise",
    "grid_spacing": "noise",
    "snap_to_grid": "noise",
    "GeneralizedRandomizedResponse": "randomized_response",
    "RandomizedResponse": "randomized_response",
    "sample_discrete_gaussian": "samplers",
    "sample_discrete_laplace": "samplers",
    "bernoulli": "words",
    "random_raw": "words",
}
__all__ = [
    "DuchiMechanism",
    "GaussianMechanism",
    "GeneralizedRandomizedResponse",
    "Harmony",
    "LaplaceMechanism",
    "Mechanism",
    "PiecewiseMechanism",
    "RandomizedResponse",
    "SubtractiveDithering",
    "bernoulli",
    "grid_spacing",
    "random_raw",
    "sample_discrete_gaussian",
    "sample_discrete_laplace",
    "snap_to_grid",
]
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
