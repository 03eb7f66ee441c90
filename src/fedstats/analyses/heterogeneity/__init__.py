r"""Differentially private measures of statistical heterogeneity: dispersion, Cochran's Q and I^2.

Paper 000 (Scott, Cormode & Maple, "Towards robust federated analytics via differentially private
measurements of statistical heterogeneity"), implemented on the round engine with the corrections listed in
``PAPER_NOTES.md``: correct sensitivities (:mod:`.calibration`), the standard inverse-variance weighted mean
with bounded weights, Q as a sum, I^2 by post-processing, MSE formulas and intervals derived from the actual
noise (:mod:`.accuracy`), and every release on the discrete Gaussian grid (:mod:`.config`).

* :mod:`.client`: the encoders a device runs (``encode_centre``, ``encode_spread``) and its noise share;
* :mod:`.protocol`: the two-round server generator and its result;
* :mod:`.api`: :func:`heterogeneity`, one call that validates the data, charges the ledger, runs the protocol
  on an engine and fills in the exact values (simulation);
* :mod:`.config`: the public parameters and each round's calibration and privacy loss;
* :mod:`.calibration`: sensitivities, Gaussian / distributed discrete Gaussian calibration, budget split;
* :mod:`.exact`: the exact statistics (numpy); :mod:`.accuracy`: MSE, intervals, the paper's formulas.

Examples
--------
>>> import numpy as np
>>> from fedstats.randomness import RandomSource
>>> x = np.random.default_rng(0).random((200, 16))
>>> r = heterogeneity(x, randomness=RandomSource(1))            # no privacy: exact through the engine
>>> abs(r.dispersion.estimate - r.dispersion.truth) < 1e-5
True
>>> r = heterogeneity(x, epsilon=1.0, delta=1e-5, randomness=RandomSource(1))
>>> r.q.interval is not None and r.epsilon == 1.0 and r.details["noise_path"] == "grid"
True
"""

from __future__ import annotations

from fedstats.analyses.heterogeneity.accuracy import (
    dispersion_mse,
    i2_mse,
    paper_interval_dispersion,
    paper_interval_i2,
    paper_interval_q,
    paper_tmse_dispersion,
    paper_tmse_i2,
    paper_tmse_q,
    q_mse,
)
from fedstats.analyses.heterogeneity.api import heterogeneity
from fedstats.analyses.heterogeneity.calibration import (
    MECHANISMS,
    NOISE_MODES,
    Sensitivities,
    ddg_rho,
    ddg_share_variance,
    gaussian_sigma,
    sensitivities,
    split_budget,
)
from fedstats.analyses.heterogeneity.client import encode_centre, encode_spread
from fedstats.analyses.heterogeneity.config import (
    STATISTICS,
    HeterogeneityConfig,
    RoundPlan,
    plan_rounds,
)
from fedstats.analyses.heterogeneity.exact import (
    ExactHeterogeneity,
    check_vectors,
    cochran_q,
    dispersion,
    exact_heterogeneity,
    i_squared,
    inverse_variance_weights,
    mean,
    weighted_mean,
    within_vector_variance,
)
from fedstats.analyses.heterogeneity.protocol import (
    HeterogeneityResult,
    StatisticEstimate,
    heterogeneity_protocol,
)

__all__ = [
    "MECHANISMS",
    "NOISE_MODES",
    "STATISTICS",
    "ExactHeterogeneity",
    "HeterogeneityConfig",
    "HeterogeneityResult",
    "RoundPlan",
    "Sensitivities",
    "StatisticEstimate",
    "check_vectors",
    "cochran_q",
    "ddg_rho",
    "ddg_share_variance",
    "dispersion",
    "dispersion_mse",
    "encode_centre",
    "encode_spread",
    "exact_heterogeneity",
    "gaussian_sigma",
    "heterogeneity",
    "heterogeneity_protocol",
    "i2_mse",
    "i_squared",
    "inverse_variance_weights",
    "mean",
    "paper_interval_dispersion",
    "paper_interval_i2",
    "paper_interval_q",
    "paper_tmse_dispersion",
    "paper_tmse_i2",
    "paper_tmse_q",
    "plan_rounds",
    "q_mse",
    "sensitivities",
    "split_budget",
    "weighted_mean",
    "within_vector_variance",
]
