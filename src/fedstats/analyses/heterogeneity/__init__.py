r"""Differentially private measures of statistical heterogeneity: dispersion, Cochran's Q and I^2.

Paper 000 (Scott, Cormode & Maple, "Towards robust federated analytics via differentially private
measurements of statistical heterogeneity"), implemented on the round engine with the corrections listed in
``PAPER_NOTES.md``: correct sensitivities (:mod:`.calibration`), the standard inverse-variance weighted mean
with bounded weights, Q as a sum, I^2 by post-processing, MSE formulas and intervals derived from the actual
noise (:mod:`.accuracy`), dispersion and Q debiased for the noise of round 1's centres (paper 000's
plug-ins are biased up; :func:`.accuracy.attach_errors`), and every release on the discrete Gaussian grid
(:mod:`.config`).

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
>>> from fedstats.analyses.heterogeneity import heterogeneity
>>> from fedstats.randomness import RandomSource
>>> x = np.random.default_rng(0).random((200, 16))
>>> r = heterogeneity(x, no_privacy=True, randomness=RandomSource(1))  # exact through the engine
>>> abs(r.dispersion.estimate - r.dispersion.truth) < 1e-5
True
>>> r = heterogeneity(x, epsilon=1.0, delta=1e-5, randomness=RandomSource(1))
>>> r.q.interval is not None and r.epsilon == 1.0 and r.details["noise_path"] == "grid"
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedstats._lazy import lazy_exports

# for type checkers: at run time the names below load lazily (PEP 562), so a device importing .client
# loads only it
if TYPE_CHECKING:
    from fedstats.analyses.heterogeneity.accuracy import (
        clipped_centre_sq_error,
        dispersion_excess,
        dispersion_mse,
        i2_mse,
        paper_interval_dispersion,
        paper_interval_i2,
        paper_interval_q,
        paper_tmse_dispersion,
        paper_tmse_i2,
        paper_tmse_q,
        q_excess,
        q_mse,
        weighted_mean_excess,
    )
    from fedstats.analyses.heterogeneity.api import heterogeneity, heterogeneity_from_config
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

_LAZY: dict[str, str] = {
    "ExactHeterogeneity": "fedstats.analyses.heterogeneity.exact",
    "HeterogeneityConfig": "fedstats.analyses.heterogeneity.config",
    "HeterogeneityResult": "fedstats.analyses.heterogeneity.protocol",
    "MECHANISMS": "fedstats.analyses.heterogeneity.calibration",
    "NOISE_MODES": "fedstats.analyses.heterogeneity.calibration",
    "RoundPlan": "fedstats.analyses.heterogeneity.config",
    "STATISTICS": "fedstats.analyses.heterogeneity.config",
    "Sensitivities": "fedstats.analyses.heterogeneity.calibration",
    "StatisticEstimate": "fedstats.analyses.heterogeneity.protocol",
    "check_vectors": "fedstats.analyses.heterogeneity.exact",
    "clipped_centre_sq_error": "fedstats.analyses.heterogeneity.accuracy",
    "cochran_q": "fedstats.analyses.heterogeneity.exact",
    "ddg_rho": "fedstats.analyses.heterogeneity.calibration",
    "ddg_share_variance": "fedstats.analyses.heterogeneity.calibration",
    "dispersion": "fedstats.analyses.heterogeneity.exact",
    "dispersion_excess": "fedstats.analyses.heterogeneity.accuracy",
    "dispersion_mse": "fedstats.analyses.heterogeneity.accuracy",
    "encode_centre": "fedstats.analyses.heterogeneity.client",
    "encode_spread": "fedstats.analyses.heterogeneity.client",
    "exact_heterogeneity": "fedstats.analyses.heterogeneity.exact",
    "gaussian_sigma": "fedstats.analyses.heterogeneity.calibration",
    "heterogeneity": "fedstats.analyses.heterogeneity.api",
    "heterogeneity_from_config": "fedstats.analyses.heterogeneity.api",
    "heterogeneity_protocol": "fedstats.analyses.heterogeneity.protocol",
    "i2_mse": "fedstats.analyses.heterogeneity.accuracy",
    "i_squared": "fedstats.analyses.heterogeneity.exact",
    "inverse_variance_weights": "fedstats.analyses.heterogeneity.exact",
    "mean": "fedstats.analyses.heterogeneity.exact",
    "paper_interval_dispersion": "fedstats.analyses.heterogeneity.accuracy",
    "paper_interval_i2": "fedstats.analyses.heterogeneity.accuracy",
    "paper_interval_q": "fedstats.analyses.heterogeneity.accuracy",
    "paper_tmse_dispersion": "fedstats.analyses.heterogeneity.accuracy",
    "paper_tmse_i2": "fedstats.analyses.heterogeneity.accuracy",
    "paper_tmse_q": "fedstats.analyses.heterogeneity.accuracy",
    "plan_rounds": "fedstats.analyses.heterogeneity.config",
    "q_excess": "fedstats.analyses.heterogeneity.accuracy",
    "q_mse": "fedstats.analyses.heterogeneity.accuracy",
    "sensitivities": "fedstats.analyses.heterogeneity.calibration",
    "split_budget": "fedstats.analyses.heterogeneity.calibration",
    "weighted_mean": "fedstats.analyses.heterogeneity.exact",
    "weighted_mean_excess": "fedstats.analyses.heterogeneity.accuracy",
    "within_vector_variance": "fedstats.analyses.heterogeneity.exact",
}

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
    "clipped_centre_sq_error",
    "cochran_q",
    "ddg_rho",
    "ddg_share_variance",
    "dispersion",
    "dispersion_excess",
    "dispersion_mse",
    "encode_centre",
    "encode_spread",
    "exact_heterogeneity",
    "gaussian_sigma",
    "heterogeneity",
    "heterogeneity_from_config",
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
    "q_excess",
    "q_mse",
    "sensitivities",
    "split_budget",
    "weighted_mean",
    "weighted_mean_excess",
    "within_vector_variance",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
