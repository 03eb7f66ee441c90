"""One call: private (or exact) heterogeneity of the clients' vectors, with the truth filled in.

Follows :mod:`fedstats.analyses._api`: ``engine`` sums the rounds and draws the clients' randomness (their
rounding and noise shares), ``randomness`` is the server's (central noise), and ``ledger`` is charged for both
rounds before anything runs: each round's loss as :meth:`HeterogeneityConfig.round_losses` gives it (the
one arithmetic of the library, the server and the device; the rounds' mechanisms report it).

:func:`heterogeneity` takes the options as keyword arguments (each default is the config's);
:func:`heterogeneity_from_config` takes a :class:`HeterogeneityConfig`, the one path the CLI also uses.
"""

from __future__ import annotations

from typing import Any

from fedstats.analyses._api import charging, resolve
from fedstats.analyses.heterogeneity.accuracy import paper_interval_i2
from fedstats.analyses.heterogeneity.config import HeterogeneityConfig, plan_rounds
from fedstats.analyses.heterogeneity.exact import (
    check_vectors,
    exact_heterogeneity,
    inverse_variance_weights,
)
from fedstats.analyses.heterogeneity.protocol import HeterogeneityResult, heterogeneity_protocol
from fedstats.analyses.usefulness import attach_warnings
from fedstats.engine.backends import SerialBackend
from fedstats.engine.core import Engine
from fedstats.engine.populations import InMemoryPopulation
from fedstats.errors import ParameterError
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.randomness import RandomSource

__all__ = ["heterogeneity", "heterogeneity_block_size", "heterogeneity_from_config"]

_DEFAULT = HeterogeneityConfig  # every keyword default below is the config's (one default)
_TOL = (
    1e-9  # planned mechanism loss vs the loss the round is calibrated to (floating-point rounding)
)


def heterogeneity_block_size(d: int) -> int:
    """Engine block size for d-dimensional vectors: about 2^22 report entries (32 MiB) per block.

    The CLI's engine uses the same, so the clients' randomness (keyed by block) and the result agree.
    """
    return int(max(256, min(65536, (1 << 22) // (2 * d + 2))))


def heterogeneity(
    x: Any,
    *,
    statistic: str = _DEFAULT.statistic,
    epsilon: float | None = None,
    delta: float | None = None,
    no_privacy: bool = False,
    mechanism: str = _DEFAULT.mechanism,
    noise: str = _DEFAULT.noise,
    secure: bool = _DEFAULT.secure,
    accounting: str | None = _DEFAULT.accounting,
    round1_fraction: float = _DEFAULT.round1_fraction,
    p: float = _DEFAULT.p,
    min_variance: float = _DEFAULT.min_variance,
    form: str = _DEFAULT.form,
    confidence: float = _DEFAULT.confidence,
    frac_bits: int | None = _DEFAULT.frac_bits,
    min_reporting: float = _DEFAULT.min_reporting,
    float_noise: bool = _DEFAULT.float_noise,
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
        What to release.
    epsilon, delta : float, optional
        Total budget of both rounds (epsilon > 0, delta in (0, 1)). A privacy choice is required, as on
        the CLI (``--epsilon/--delta`` or ``--no-privacy``): give both, or ``no_privacy=True``.
    no_privacy : bool, default False
        Explicit opt-out: exact sums through the engine, no noise (refused together with a budget).
    mechanism, noise, secure, accounting, round1_fraction, p, min_variance, form, confidence, frac_bits, \
min_reporting, float_noise
        See :class:`~fedstats.analyses.heterogeneity.config.HeterogeneityConfig`. ``float_noise=True`` is
        the paper's floating-point noise, for simulation only (refused with a ``ledger``).
    engine : Engine, optional
        Route and clients' randomness (default: serial, on ``randomness``, blocks of about 2^22 entries).
    randomness : RandomSource, optional
        Server-side randomness (default: the engine's, else secure).
    ledger : PrivacyLedger, optional
        Charged for both rounds before they run (all or nothing).

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
        A parameter outside its range, or a ledger with ``float_noise``.
    BudgetExceededError
        If ``ledger`` refuses the releases (nothing is then charged or run).
    """
    if no_privacy and (epsilon is not None or delta is not None):
        raise ParameterError("no_privacy", True, "False when epsilon/delta are given")
    if not no_privacy and (epsilon is None or delta is None):
        raise ParameterError(
            "epsilon",
            (epsilon, delta),
            "a budget: epsilon in (0, inf) and delta in (0, 1), or no_privacy=True for exact sums",
        )
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
        float_noise=float_noise,
    )
    return heterogeneity_from_config(x, cfg, engine=engine, randomness=randomness, ledger=ledger)


def heterogeneity_from_config(
    x: Any,
    config: HeterogeneityConfig,
    *,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
    ledger: PrivacyLedger | None = None,
) -> HeterogeneityResult:
    """Measure heterogeneity of the clients' vectors under ``config`` (the one path of api and CLI).

    Parameters
    ----------
    x, engine, randomness, ledger
        As :func:`heterogeneity`; the vectors' length ``d`` must equal ``config.dim`` when that is set.
    config : HeterogeneityConfig
        Every option; ``epsilon=None`` means exact sums (no noise).

    Returns
    -------
    HeterogeneityResult
        As :func:`heterogeneity`.

    Raises
    ------
    DataError
        Bad vectors (see :func:`heterogeneity`).
    ParameterError
        ``x``'s width differs from ``config.dim``, or a ledger with ``float_noise``.
    BudgetExceededError
        If ``ledger`` refuses the releases (nothing is then charged or run).
    """
    cfg = config
    if ledger is not None and cfg.float_noise:
        raise ParameterError(
            "ledger",
            "a PrivacyLedger",
            "None with float_noise=True (simulation only: not a release)",
        )
    arr = check_vectors(x, need_weights=cfg.wants_q)
    n, d = arr.shape
    if cfg.dim is not None and cfg.dim != d:
        raise ParameterError("dim", cfg.dim, f"the vectors' length {d}")
    if engine is None:
        src = randomness if randomness is not None else RandomSource()
        engine = Engine(SerialBackend(), src, block_size=heterogeneity_block_size(d))
    engine, server = resolve(engine, randomness)
    with charging(ledger):
        if ledger is not None and cfg.private:
            p1, p2, _ = plan_rounds(cfg, n, d)
            for plan, loss in zip((p1, p2), cfg.round_losses(), strict=True):
                planned = plan.loss
                # the round's mechanism reports (at most) the loss it is calibrated to
                assert planned is not None and planned.epsilon <= loss.epsilon * (1 + _TOL)
                ledger.spend_loss(
                    loss,
                    label=f"heterogeneity round {plan.name} ({', '.join(plan.blocks)})",
                    clients=range(0, n),
                )
        pop = InMemoryPopulation({cfg.column: arr})
        res = engine.run(heterogeneity_protocol(cfg, n_clients=n, dim=d, randomness=server), pop)
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
            res.i2.paper_interval = paper_interval_i2(  # Theorem 4.19, around the paper's plug-in
                float(res.i2.details.get("plugin_estimate", res.i2.estimate)),
                eta1_sq=eta * eta,
                n=n,
                inverse_weight_sum=float((1.0 / w).sum()),
            )
    res.truth = (
        res.i2.truth if res.i2 is not None else res.dispersion.truth if res.dispersion else None
    )
    return attach_warnings(res)  # type: ignore[no-any-return]
