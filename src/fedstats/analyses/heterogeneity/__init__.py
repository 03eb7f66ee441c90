r"""Differentially private measures of statistical heterogeneity: dispersion, Cochran's Q and I^2.

Paper 000 (Scott, Cormode & Maple, "Towards robust federated analytics via differentially private
measurements of statistical heterogeneity"), implemented on the round engine with the corrections listed in
``PAPER_NOTES.md``: correct sensitivities (:mod:`.calibration`), the standard inverse-variance weighted mean
with bounded weights, Q as a sum, I^2 by post-processing, MSE formulas and intervals derived from the actual
noise (:mod:`.accuracy`).

* :mod:`.exact`: the exact statistics (numpy);
* :mod:`.calibration`: sensitivities, Gaussian / distributed discrete Gaussian calibration, budget split;
* :mod:`.protocol`: the two-round engine protocol and its result;
* :mod:`.accuracy`: MSE, intervals, and the paper's formulas for comparison;
* :func:`heterogeneity`: one call that validates the data, runs the protocol on an engine, records the
  privacy spent in a ledger and fills in the exact values (simulation).

Examples
--------
>>> import numpy as np
>>> from fedstats.randomness import RandomSource
>>> x = np.random.default_rng(0).random((200, 16))
>>> r = heterogeneity(x, randomness=RandomSource(1))            # no privacy: exact through the engine
>>> abs(r.dispersion.estimate - r.dispersion.truth) < 1e-5
True
>>> r = heterogeneity(x, epsilon=1.0, delta=1e-5, randomness=RandomSource(1))
>>> r.q.interval is not None and r.epsilon == 1.0
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

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
from fedstats.analyses.heterogeneity.calibration import (
    MECHANISMS,
    NOISE_MODES,
    Sensitivities,
    ddg_rho,
    ddg_share_variance,
    gaussian_sigma,
    rho_for_epsilon,
    sensitivities,
    split_budget,
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
    STATISTICS,
    HeterogeneityConfig,
    HeterogeneityResult,
    RoundPlan,
    StatisticEstimate,
    heterogeneity_protocol,
    plan_rounds,
)
from fedstats.engine import Engine, InMemoryPopulation, SerialBackend
from fedstats.privacy.analysis.zcdp import zcdp_to_approx_dp
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.randomness import RandomSource

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
    "record_privacy",
    "rho_for_epsilon",
    "sensitivities",
    "split_budget",
    "weighted_mean",
    "within_vector_variance",
]


def _block_size(d: int) -> int:
    # bounded memory: about 2^22 report entries (32 MiB of float64) per logical block
    return int(max(256, min(65536, (1 << 22) // (2 * d + 2))))


def record_privacy(ledger: PrivacyLedger, cfg: HeterogeneityConfig, n: int, d: int) -> None:
    """Record both rounds' releases in ``ledger`` before they happen (refused if over budget).

    Raises
    ------
    BudgetExceededError
        If the two releases would exceed the ledger's budget (nothing is then run).
    """
    if not cfg.private:
        return
    p1, p2, _ = plan_rounds(cfg, n, d)
    for plan in (p1, p2):
        assert plan.delta is not None and plan.epsilon is not None
        eps = plan.epsilon
        if (cfg.secure or cfg.accounting == "zcdp") and plan.rho is not None:
            eps = zcdp_to_approx_dp(rho=plan.rho, delta=plan.delta)
        ledger.spend(
            epsilon=eps,
            delta=plan.delta,
            rho=plan.rho,
            label=f"heterogeneity round {plan.name} ({', '.join(plan.blocks)})",
            clients=range(0, n),
        )


def heterogeneity(
    x: Any,
    *,
    statistic: str = "all",
    epsilon: float | None = None,
    delta: float | None = None,
    mechanism: str = "analytic",
    noise: str = "central",
    secure: bool = False,
    accounting: str = "basic",
    round1_fraction: float = 0.5,
    p: float = 2.0,
    min_variance: float = 0.05,
    form: str = "standard",
    confidence: float = 0.95,
    frac_bits: int | None = None,
    min_reporting: float = 1.0,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
    ledger: PrivacyLedger | None = None,
) -> HeterogeneityResult:
    """Measure heterogeneity of the clients' vectors, privately or exactly, and compare with the truth.

    Parameters
    ----------
    x : array_like, shape (n_clients, d)
        One vector per client, entries in [0, 1]; ``n_clients >= 2``.
    statistic : {"dispersion", "q", "i2", "all"}
    epsilon, delta : float, optional
        Total budget of both rounds; omit both for an exact (non-private) run.
    mechanism : {"analytic", "classical"}
    noise : {"central", "distributed"}
    secure : bool
        Distributed discrete Gaussian shares (pair with an engine on the ``secure`` route).
    accounting : {"basic", "zcdp"}
        Budget split by epsilon (the paper's) or calibration through zCDP composition (less noise).
    round1_fraction, p, min_variance, form, confidence, frac_bits, min_reporting
        See :class:`~fedstats.analyses.heterogeneity.protocol.HeterogeneityConfig`.
    engine : Engine, optional
        Route and randomness of the client side (default: serial, with ``randomness``).
    randomness : RandomSource, optional
        Server-side randomness (default: the engine's, else secure).
    ledger : PrivacyLedger, optional
        Records both rounds (and refuses them if over its budget).

    Returns
    -------
    HeterogeneityResult
        With ``truth`` filled in on every statistic.

    Raises
    ------
    DataError
        Bad vectors: not 2-D, fewer than 2 clients, NaN, entries outside [0, 1], or a constant vector
        when Q / I^2 is requested.
    ParameterError
        A parameter outside its range.
    BudgetExceededError
        If ``ledger`` refuses the releases.
    """
    cfg = HeterogeneityConfig(
        statistic=statistic,
        epsilon=epsilon,
        delta=delta,
        mechanism=mechanism,
        noise=noise,
        secure=secure,
        accounting=accounting,
        round1_fraction=round1_fraction,
        p=p,
        min_variance=min_variance,
        form=form,
        frac_bits=frac_bits,
        confidence=confidence,
        min_reporting=min_reporting,
    )
    arr = check_vectors(x, need_weights=cfg.wants_q)
    n, d = arr.shape
    if randomness is None:
        randomness = engine.randomness if engine is not None else RandomSource()
    if engine is None:
        engine = Engine(SerialBackend(), randomness, block_size=_block_size(d))
    if ledger is not None:
        record_privacy(ledger, cfg, n, d)
    pop = InMemoryPopulation({cfg.column: arr})
    res = engine.run(heterogeneity_protocol(cfg, n_clients=n, dim=d, randomness=randomness), pop)
    truth = exact_heterogeneity(
        arr, p=cfg.p, weights=cfg.wants_q, min_variance=cfg.min_variance, form=cfg.form
    )
    res.bytes_per_client = engine.bytes_per_client
    if res.dispersion is not None:
        res.dispersion.truth = truth.dispersion
    if res.q is not None and res.i2 is not None:
        res.q.truth = truth.q
        res.i2.truth = truth.i2
        res.details["clipped_weights"] = truth.clipped_weights
        eta = res.details.get("weighted_mean_noise_sd")
        if eta:
            w = inverse_variance_weights(arr, min_variance=cfg.min_variance)
            res.i2.paper_interval = paper_interval_i2(
                res.i2.estimate, eta1_sq=eta * eta, n=n, inverse_weight_sum=float((1.0 / w).sum())
            )
    res.truth = (
        res.i2.truth if res.i2 is not None else res.dispersion.truth if res.dispersion else None
    )
    return res


def exact_mean(x: Any) -> np.ndarray:
    """Mean of validated vectors (convenience)."""
    return mean(check_vectors(x))
