r"""Planning FED-H: the encoding size ``l`` an entropy interval of a target width needs.

FED-H adds no DP noise; its interval (:func:`~fedstats.analyses.entropy.estimator.decode_entropy`) is
``[H - z sd - b, H + z sd]``, with ``sd`` the delta-method standard deviation over the ``l`` coordinates of
the two stable projections and ``b`` the finite-difference bias bound
(:func:`~fedstats.analyses.entropy.estimator.finite_difference_bias_bound`, fixed by ``m`` and ``D``). The
coordinates are i.i.d., so :math:`sd \propto 1/\sqrt l` with a constant that depends on the distribution
(through the coupled projections' covariance). The planner measures that constant once, on a pilot run of
the estimator itself (:func:`~fedstats.analyses.entropy.simulate.simulate_fed_entropy`, :data:`PILOT_RUNS` runs of
:data:`PILOT_ENCODING_SIZE` coordinates on the stated category proportions, default uniform, fixed public
seeds), and solves ``2 z sd(l) + b <= width`` for the smallest ``l``:
:math:`l = \lceil L_0 (2 z\, sd_{L_0} / (width - b))^2 \rceil`. The number of clients does not enter (the
sums are exact: linearity). The width planned is the decoder's (``details["unclipped_ci"]``); the released
interval, clipped to ``[0, log m]``, is never wider.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedstats._numeric import two_sided_z
from fedstats._validation import check_choice, check_int, check_open_unit, check_real
from fedstats.analyses._planning import Plan
from fedstats.analyses.entropy.estimator import (
    COUPLINGS,
    DEFAULT_FD_STEP,
    check_fd_step,
    finite_difference_bias_bound,
)
from fedstats.analyses.entropy.simulate import simulate_fed_entropy
from fedstats.errors import ParameterError
from fedstats.randomness import RandomSource

__all__ = ["PILOT_ENCODING_SIZE", "PILOT_RUNS", "plan_entropy"]

PILOT_ENCODING_SIZE = 20_000
"""Coordinates of each pilot run."""

PILOT_RUNS = 8
"""Pilot runs (seeds 0..7), their variances averaged: the log of a stable variable is heavy-tailed, and
one run's standard deviation is off by about 1.2% (3% at worst in 10 seeds, measured on 15 uniform
categories); the average of 8 by about 0.4%."""

_PILOT_RECORDS = 1_000_000
_MAX_ENCODING = 100_000  # FedEntropyConfig's largest encoding_size


def _proportions(m: int, probabilities: Any) -> np.ndarray:
    if probabilities is None:
        return np.full(m, 1.0 / m)
    p = np.asarray(probabilities, dtype=np.float64).ravel()
    if p.size != m or not np.isfinite(p).all() or (p < 0).any() or p.sum() <= 0:
        raise ParameterError("probabilities", probabilities, f"{m} non-negative proportions")
    out: np.ndarray = p / p.sum()
    return out


def plan_entropy(
    width: float,
    *,
    m: int,
    probabilities: Any = None,
    confidence: float = 0.95,
    fd_step: float = DEFAULT_FD_STEP,
    coupling: str = "coupled",
) -> Plan:
    """The smallest encoding size whose FED-H interval is at most ``width`` nats wide.

    Parameters
    ----------
    width : float
        Target interval width in nats, > 0 (the range of the entropy is ``[0, log m]``).
    m : int
        Categories, in [2, 10000].
    probabilities : array_like of float, shape (m,), optional
        Expected category proportions (default uniform).
    confidence : float
        In (0, 1).
    fd_step, coupling
        As :func:`~fedstats.analyses.entropy.api.fed_entropy`.

    Returns
    -------
    Plan
        ``solved_for="encoding_size"``; ``value`` None when ``width`` does not exceed the bias bound
        (no encoding size reaches it: lower ``fd_step``) or needs more than 100,000 coordinates.

    Raises
    ------
    ParameterError
        Naming the parameter out of range.
    """
    w = check_real("width", width, low=0.0, low_open=True)
    k = check_int("m", m, low=2, high=10_000)
    conf = check_open_unit("confidence", confidence)
    d = check_fd_step(fd_step)
    check_choice("coupling", coupling, COUPLINGS)
    p = _proportions(k, probabilities)

    hist = np.round(p * _PILOT_RECORDS).astype(np.int64)
    hist[hist.argmax()] += max(0, 1 - int(hist.sum()))
    variances = [
        float(
            simulate_fed_entropy(
                hist,
                encoding_size=PILOT_ENCODING_SIZE,
                fd_step=d,
                coupling=coupling,
                randomness=RandomSource(seed=seed),
                confidence=conf,
            ).standard_error
            or 0.0
        )
        ** 2
        for seed in range(PILOT_RUNS)
    ]
    sd0 = math.sqrt(sum(variances) / PILOT_RUNS)
    bias = finite_difference_bias_bound(k, d)
    z = two_sided_z(conf)
    goal = f"{100 * conf:g}% interval width <= {w:g} nats"
    inputs = {
        "m": k,
        "range": (0.0, math.log(k)),
        "proportions": "uniform" if probabilities is None else "given",
        "confidence": conf,
        "fd_step": d,
        "coupling": coupling,
        "bias_bound": bias,
        "pilot_standard_error": sd0,
        "pilot_encoding_size": PILOT_ENCODING_SIZE,
        "pilot_runs": PILOT_RUNS,
    }
    if w <= bias:
        note = f"the width must exceed the finite-difference bias bound {bias:.4g} (lower fd_step)"
        return Plan("entropy", "encoding_size", None, goal, None, inputs, note)
    ell = max(2, math.ceil(PILOT_ENCODING_SIZE * (2.0 * z * sd0 / (w - bias)) ** 2))
    if ell > _MAX_ENCODING:
        note = f"needs {ell} coordinates, over the largest encoding size {_MAX_ENCODING}"
        return Plan("entropy", "encoding_size", None, goal, None, inputs, note)
    achieved = 2.0 * z * sd0 * math.sqrt(PILOT_ENCODING_SIZE / ell) + bias
    return Plan("entropy", "encoding_size", ell, goal, achieved, inputs)
