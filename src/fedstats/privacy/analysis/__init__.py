"""Pure mathematics of differential privacy: Gaussian calibration, zCDP, privacy loss distributions.

Importable without the rest of fedstats (only numpy and scipy).

Names load on first use (:mod:`fedstats._lazy`): a mechanism that needs only ``loss`` does not load scipy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedstats._lazy import lazy_exports

if TYPE_CHECKING:
    from fedstats.privacy.analysis.gaussian import (
        PrivacyWarning,
        analytic_gaussian_delta,
        analytic_gaussian_epsilon,
        analytic_gaussian_sigma,
        classical_gaussian_sigma,
    )
    from fedstats.privacy.analysis.loss import (
        MechanismSpec,
        PrivacyLoss,
        continuous_privacy_loss,
        discrete_privacy_loss,
        mixed_privacy_loss,
    )
    from fedstats.privacy.analysis.pld import pld_delta, pld_epsilon, pld_pmf
    from fedstats.privacy.analysis.zcdp import (
        approx_dp_to_zcdp,
        compose_zcdp,
        gaussian_rho,
        zcdp_to_approx_dp,
    )

_WHERE = {
    "PrivacyWarning": "gaussian",
    "analytic_gaussian_delta": "gaussian",
    "analytic_gaussian_epsilon": "gaussian",
    "analytic_gaussian_sigma": "gaussian",
    "classical_gaussian_sigma": "gaussian",
    "MechanismSpec": "loss",
    "PrivacyLoss": "loss",
    "continuous_privacy_loss": "loss",
    "discrete_privacy_loss": "loss",
    "mixed_privacy_loss": "loss",
    "pld_delta": "pld",
    "pld_epsilon": "pld",
    "pld_pmf": "pld",
    "approx_dp_to_zcdp": "zcdp",
    "compose_zcdp": "zcdp",
    "gaussian_rho": "zcdp",
    "zcdp_to_approx_dp": "zcdp",
}
__all__ = [
    "MechanismSpec",
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
    "pld_delta",
    "pld_epsilon",
    "pld_pmf",
    "zcdp_to_approx_dp",
]
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
