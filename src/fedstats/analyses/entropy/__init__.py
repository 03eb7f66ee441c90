"""FED-H: secure federated Shannon entropy, and the G-test built on it (Pang et al., ICML 2023, Sec. 3.5).

Clients hold histograms ``v^(i)`` over ``m`` categories; ``v = sum_i v^(i)`` and ``p = v / |v|``. With the
frequency moments ``F_a = sum_x p_x**a`` (Eq. 9, natural log)::

    H = -sum_x p_x log p_x  ~  H_D = -(F_(1+D) - F_(1-D)) / (2 D)

Round 1 sums the histogram sizes (one count per client). Round 2 sums two stable projections of each
client's normalised histogram ``w_i = v^(i) / |v|`` (stability ``1 + D`` and ``1 - D``, ``2 l`` numbers, fixed
point modulo ``2**bits``); the server decodes ``F_(1 +- D)`` with Li's geometric-mean estimator.

Parts (``docs/architecture.md``): :mod:`~fedstats.analyses.entropy.client` (encoders),
:mod:`~fedstats.analyses.entropy.protocol` (:func:`fed_entropy_protocol`, :func:`g_test_protocol`),
:mod:`~fedstats.analyses.entropy.estimator` (decoding, bias bound, :class:`EntropyResult`),
:mod:`~fedstats.analyses.entropy.api` (:func:`fed_entropy`, :func:`fed_g_test`) and
:mod:`~fedstats.analyses.entropy.simulate` (the fast path).

Choices and deviations (PAPER_NOTES, 004):

* ``fd_step`` (the paper's ``Delta``, not stated there) defaults to 0.05, the value in the authors' related
  code. (It is not ``delta``, which names DP's delta everywhere else.)
* ``coupling="coupled"`` (default): both projections come from the *same* seed, so the stable variates of
  the two stabilities share their uniform angle and exponential (:mod:`fedstats.sketches.stable`) and their
  errors are strongly correlated; the difference ``F_(1+D) - F_(1-D)`` is then estimated with about half
  the standard deviation of independent projections (measured in ``docs/chi2.md``). ``"independent"``
  uses two seeds, as the paper's description suggests.
* The finite difference is biased *upwards*: ``H_D >= H`` for every distribution (the third derivative of
  ``t -> p**t`` is negative). Appendix G bounds the bias per category by ``9 D^2 / (2 (1 - D)^3 e^3)`` but
  then drops the sum over the ``m`` categories; :func:`finite_difference_bias_bound` gives a rigorous
  data-free bound on the *sum*: ``m * hbar(1/m)`` with ``hbar`` the concave envelope of the per-category
  bias ``h(p) = (p^(1-D) - p^(1+D)) / (2D) + p log p`` (the maximum over distributions on ``m`` categories,
  attained near the uniform distribution when ``m`` is large: 0.65 nats at ``m = 100,000``, ``D = 0.05``).
  :func:`appendix_g_bound` evaluates the paper's printed bound for comparison.
* The interval: a delta-method interval for ``H_D`` from the sample covariance of
  ``(log|e+_k|, log|e-_k|)`` over the ``l`` coordinates (i.i.d. pairs), widened downwards by the
  finite-difference bias bound: ``[H_hat - z sd - bias_bound, H_hat + z sd]``. An approximation (the
  geometric means are log-normal only asymptotically); coverage is checked by Monte Carlo in the tests.

G-test: ``G = 2 sum_xy v_xy log(v_xy / vbar_xy) = 2 |v| (H_X + H_Y - H_XY)``; a two-round protocol
(:func:`g_test_protocol`): round 1 sums the marginals (``|v|`` and the marginal entropies, exactly), round 2
the projections of the joint tables (``H_XY`` by FED-H). Its error is ``2 |v|`` times FED-H's, which is
large at small ``l`` for big tables: report the interval.

The names are loaded on first use, so ``import fedstats.analyses.entropy.client`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedstats.analyses.entropy.api import fed_entropy, fed_g_test
    from fedstats.analyses.entropy.client import encode_entropy_projection, encode_histogram_size
    from fedstats.analyses.entropy.estimator import (
        COUPLINGS,
        DEFAULT_FD_STEP,
        EntropyResult,
        appendix_g_bound,
        entropy_from_moments,
        finite_difference_bias_bound,
        g_statistic,
        shannon_entropy,
    )
    from fedstats.analyses.entropy.protocol import fed_entropy_protocol, g_test_protocol
    from fedstats.analyses.entropy.simulate import simulate_fed_entropy, simulate_fed_g_test

_WHERE = {
    "fed_entropy": "api",
    "fed_g_test": "api",
    "encode_entropy_projection": "client",
    "encode_histogram_size": "client",
    "COUPLINGS": "estimator",
    "DEFAULT_FD_STEP": "estimator",
    "EntropyResult": "estimator",
    "appendix_g_bound": "estimator",
    "entropy_from_moments": "estimator",
    "finite_difference_bias_bound": "estimator",
    "g_statistic": "estimator",
    "shannon_entropy": "estimator",
    "fed_entropy_protocol": "protocol",
    "g_test_protocol": "protocol",
    "simulate_fed_entropy": "simulate",
    "simulate_fed_g_test": "simulate",
}

__all__ = [
    "COUPLINGS",
    "DEFAULT_FD_STEP",
    "EntropyResult",
    "appendix_g_bound",
    "encode_entropy_projection",
    "encode_histogram_size",
    "entropy_from_moments",
    "fed_entropy",
    "fed_entropy_protocol",
    "fed_g_test",
    "finite_difference_bias_bound",
    "g_statistic",
    "g_test_protocol",
    "shannon_entropy",
    "simulate_fed_entropy",
    "simulate_fed_g_test",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
