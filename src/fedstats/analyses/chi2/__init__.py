"""FED-chi^2: the secure federated chi-square test of independence (Pang et al., ICML 2023, Algorithm 2).

Each of ``n`` clients holds a contingency table ``v^(i)`` of shape ``(m_x, m_y)``. Pearson's statistic of
the summed table ``v`` is a second frequency moment (Eq. 4-5)::

    s = sum_xy (v_xy - vbar_xy)**2 / vbar_xy = || sum_i u_i ||**2,
    u_i(x, y) = (v_xy^(i) - vbar_xy / n) / sqrt(vbar_xy),   vbar_xy = v_x v_y / v.

The package follows the analysis contract (``docs/architecture.md``):

* :mod:`~fedstats.analyses.chi2.client`: the two encoders a device runs (marginals; fixed-point ``P u_i``);
* :mod:`~fedstats.analyses.chi2.protocol`: :func:`fed_chi2_protocol`, the server generator;
* :mod:`~fedstats.analyses.chi2.estimator`: the one decoder and result (:class:`Chi2Result`);
* :mod:`~fedstats.analyses.chi2.calibration`: the sketch-aware p-value and batch decoding;
* :mod:`~fedstats.analyses.chi2.api`: :func:`fed_chi2`, the one-call wrapper (with the exact test);
* :mod:`~fedstats.analyses.chi2.privacy`: optional central DP (:func:`plan_chi2_privacy`, discrete
  Gaussian noise on both sums; ours, not in the paper);
* :mod:`~fedstats.analyses.chi2.null`: with DP, the release steps shared by the protocol and the fast path
  and the null distribution of the released statistic (the test's Monte Carlo p-value);
* :mod:`~fedstats.analyses.chi2.simulate`: :func:`simulate_fed_chi2` and :func:`simulate_decoded`, the
  fast path, tested against the protocol.

Deviations from the paper (PAPER_NOTES, 004), each an explicit option or documented choice:

* decoder: ``"mean-of-squares"`` by default (relative variance ``2/l`` against about ``pi^2/(2l)``);
  ``decoder="geometric"`` is the paper's;
* the p-value and the decision come from the released statistic's distribution (sketch noise; with DP,
  both rounds' noise, simulated); the paper's ``chi2_sf(statistic)`` is ``p_value_paper``;
* degrees of freedom ``(m_x - 1)(m_y - 1)`` (the authors' code uses ``m_x m_y - 1``);
* the shared seed by commit-then-reveal (:mod:`fedstats.analyses.seed_agreement`), not the sum of the
  clients' seeds;
* round-2 dropout without replacement, simulated by the route (:class:`fedstats.engine.core.Dropout`);
* a row or column that is empty in the summed table is an error (its expected counts are zero); with
  ``drop_empty=True`` it is removed.

The names are loaded on first use, so ``import fedstats.analyses.chi2.client`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedstats._lazy import lazy_exports

if TYPE_CHECKING:
    from fedstats.analyses.chi2.api import fed_chi2, with_dropout
    from fedstats.analyses.chi2.calibration import (
        DECODERS,
        batch_decode,
        noise_averaged_p_value,
        sketch_noise_quantiles,
        sketched_p_value,
    )
    from fedstats.analyses.chi2.client import encode_marginals, encode_projection, expected_counts
    from fedstats.analyses.chi2.estimator import Chi2Result, chi_square_statistic
    from fedstats.analyses.chi2.privacy import Chi2Privacy, plan_chi2_privacy
    from fedstats.analyses.chi2.protocol import fed_chi2_protocol
    from fedstats.analyses.chi2.simulate import SPLITS, simulate_decoded, simulate_fed_chi2

_WHERE = {
    "fed_chi2": "api",
    "with_dropout": "api",
    "encode_marginals": "client",
    "encode_projection": "client",
    "expected_counts": "client",
    "DECODERS": "calibration",
    "Chi2Result": "estimator",
    "batch_decode": "calibration",
    "chi_square_statistic": "estimator",
    "noise_averaged_p_value": "calibration",
    "sketch_noise_quantiles": "calibration",
    "sketched_p_value": "calibration",
    "fed_chi2_protocol": "protocol",
    "Chi2Privacy": "privacy",
    "plan_chi2_privacy": "privacy",
    "SPLITS": "simulate",
    "simulate_decoded": "simulate",
    "simulate_fed_chi2": "simulate",
}

__all__ = [
    "DECODERS",
    "SPLITS",
    "Chi2Privacy",
    "Chi2Result",
    "batch_decode",
    "chi_square_statistic",
    "encode_marginals",
    "encode_projection",
    "expected_counts",
    "fed_chi2",
    "fed_chi2_protocol",
    "noise_averaged_p_value",
    "plan_chi2_privacy",
    "simulate_decoded",
    "simulate_fed_chi2",
    "sketch_noise_quantiles",
    "sketched_p_value",
    "with_dropout",
]

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
