"""Pure mathematics of differential privacy: Gaussian calibration, zCDP, privacy loss of mechanisms.

Importable without the rest of fedstats (only numpy and scipy).
"""

from fedstats.privacy.analysis.gaussian import (
    PrivacyWarning,
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
)
from fedstats.privacy.analysis.loss import (
    PrivacyLoss,
    continuous_privacy_loss,
    discrete_privacy_loss,
    mixed_privacy_loss,
)
from fedstats.privacy.analysis.zcdp import (
    approx_dp_to_zcdp,
    compose_zcdp,
    gaussian_rho,
    zcdp_to_approx_dp,
)

__all__ = [
    "PrivacyLoss",
    "PrivacyWarning",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "analytic_gaussian_sigma",
    "approx_dp_to_zcdp",
    "classical_gaussian_sigma",
    "compose_zcdp",
    "continuous_privacy_loss",
    "discrete_privacy_loss",
    "gaussian_rho",
    "mixed_privacy_loss",
    "zcdp_to_approx_dp",
]
