"""One-call mean and variance estimation with any method, plus simulation truth and privacy metering.

:func:`estimate_mean` and :func:`estimate_variance` take the data (an array, or any engine
:class:`~fedstats.engine.Population` up to 10^9 clients), a declared :class:`BitEncoding`, a method name
(:data:`METHODS`) and its options; they spend the privacy budget in a
:class:`~fedstats.privacy.ledger.PrivacyLedger` and the disclosed bits in a
:class:`~fedstats.privacy.ledger.BitMeter` *before* running (so an over-budget request is refused without
any client disclosing anything), run the protocol on the engine, and, in simulation, fill in the true value
and the number of clipped clients from a separate pass over the data.

Round membership is by client index (round 1 takes the first ``round1_fraction`` of the clients): arrays are
shuffled first; a :class:`~fedstats.engine.Population` must be in random order (generated and resampled
populations are).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedstats._validation import check_choice, check_finite_array
from fedstats.analyses.bitpushing.encoding import BitEncoding
from fedstats.analyses.bitpushing.protocols import (
    BIT_PUSHING_METHODS,
    MeanEstimate,
    VarianceEstimate,
    bit_pushing_stage,
    mean_protocol,
    variance_protocol,
)
from fedstats.analyses.bitpushing.stages import Stage
from fedstats.engine import Engine, InMemoryPopulation, Population
from fedstats.engine.populations import block_count
from fedstats.errors import DataError
from fedstats.privacy.ledger import BitMeter, PrivacyLedger
from fedstats.randomness import RandomSource

__all__ = [
    "DEFAULT_SQUASH_THRESHOLD",
    "METHODS",
    "Truth",
    "estimate_mean",
    "estimate_variance",
    "make_stage",
    "population_truth",
]

METHODS = (*BIT_PUSHING_METHODS, "dithering", "piecewise", "duchi", "laplace")
DEFAULT_SQUASH_THRESHOLD = 0.15
"""Recommended bit squashing threshold (units of the per-report DP noise standard deviation), inside the
0.1-0.2 the paper found best. Off by default: it removes vacuous high-order bits of a loose range, but also
squashes genuine bits whose mean is that small (e.g. bit 6 of ages, mean ~0.05, when epsilon <= 2)."""


def make_stage(method: str, **options: Any) -> Stage:
    """The stage of any method in :data:`METHODS` with its options bound.

    Options not used by a method are ignored: ``epsilon``, ``bits_per_client``, ``allocation``,
    ``round1_fraction``, ``gamma``, ``alpha``, ``probabilities`` (basic), ``squash_threshold`` (bit pushing);
    ``frac_bits`` (Piecewise/Laplace).

    Raises
    ------
    ParameterError
        If ``method`` is unknown or an option is invalid for it.
    """
    check_choice("protocol", method, METHODS)
    if method in BIT_PUSHING_METHODS:
        keys = {
            "adaptive": (
                "epsilon",
                "bits_per_client",
                "allocation",
                "round1_fraction",
                "gamma",
                "alpha",
                "min_reports",
                "squash_z",
                "squash_threshold",
            ),
            "weighted": ("epsilon", "bits_per_client", "allocation", "alpha", "squash_threshold"),
            "basic": (
                "epsilon",
                "bits_per_client",
                "allocation",
                "probabilities",
                "alpha",
                "squash_threshold",
            ),
        }[method]
        return bit_pushing_stage(method, **{k: v for k, v in options.items() if k in keys})
    from fedstats.analyses.mean_baselines import baseline_stage

    return baseline_stage(method, **options)


class Truth:
    """Exact statistics of a population column, from one pass over its blocks (simulation only).

    Attributes
    ----------
    mean, variance : float
        Of the values as given (variance with ddof = 0).
    clipped_mean, clipped_variance : float
        Of the values clipped to the declared range (what the protocol can estimate).
    n_clipped : int
        Values outside the declared range.
    n : int
    """

    def __init__(self, s: np.ndarray, n: int, n_clipped: int) -> None:
        self.n = n
        self.n_clipped = n_clipped
        self.mean = float(s[0] / n)
        self.variance = float(max(s[1] / n - self.mean**2, 0.0))
        self.clipped_mean = float(s[2] / n)
        self.clipped_variance = float(max(s[3] / n - self.clipped_mean**2, 0.0))


def population_truth(
    population: Population,
    column: str,
    encoding: BitEncoding,
    randomness: RandomSource,
    block_size: int,
) -> Truth:
    """Exact mean and variance of ``column`` (and of its clipped values), reading block by block.

    Uses shifted sums (around the first block's mean) so the variance is accurate in float64.
    """
    n = population.n_clients
    shift: float | None = None
    s = np.zeros(4)
    n_clip = 0
    for b in range(block_count(n, block_size)):
        start = b * block_size
        stop = min(n, start + block_size)
        x = np.asarray(
            population.block(b, block_size, start, stop, randomness).column(column),
            dtype=np.float64,
        )
        if shift is None:
            shift = float(x.mean())
        c = np.clip(x, encoding.low, encoding.high)
        n_clip += int(np.count_nonzero(c != x))
        d, dc = x - shift, c - shift
        s += (d.sum(), (d * d).sum(), dc.sum(), (dc * dc).sum())
    t = Truth(s, n, n_clip)
    sh = shift or 0.0
    t.mean += sh
    t.clipped_mean += sh
    return t


def _as_population(data: Any, column: str, randomness: RandomSource, shuffle: bool) -> Population:
    if isinstance(data, Population):
        return data
    v = check_finite_array("values", data, ndim=1)
    if shuffle:
        v = v[np.asarray(randomness.child("shuffle").generator().permutation(v.size))]
    return InMemoryPopulation({column: v})


def _meter(
    stages: list[tuple[str, tuple[int, int], int]],
    epsilon: float | None,
    ledger: PrivacyLedger | None,
    bit_meter: BitMeter | None,
) -> None:
    for label, (lo, hi), bits in stages:
        if bit_meter is not None:
            bit_meter.record(bits=bits, label=label, clients=range(lo, hi))
        if ledger is not None and epsilon is not None:
            ledger.spend(epsilon=epsilon, label=label, clients=range(lo, hi))


def _scan(
    pop: Population, column: str, encoding: BitEncoding, engine: Engine, truth: bool
) -> Truth | None:
    """Simulation truth, and the refuse policy checked before anyone spends privacy or discloses bits."""
    if not truth:
        return None
    tr = population_truth(pop, column, encoding, engine.randomness, engine.block_size)
    if tr.n_clipped and encoding.out_of_range == "refuse":
        raise DataError(
            f"{tr.n_clipped} of {tr.n} {column} values lie outside the declared range "
            f"[{encoding.low:g}, {encoding.high:g}] (use out_of_range='clip' to clip and count them)"
        )
    return tr


def _options(method: str, epsilon: float | None, options: dict[str, Any]) -> dict[str, Any]:
    opts = dict(options)
    opts["epsilon"] = epsilon
    return opts


def _finish(res: Any, engine: Engine, first_log: int, n_bits: int, rounds: int) -> None:
    logs = engine.log[first_log:]
    res.bytes_per_client = max((r.bytes_per_client for r in logs), default=0) * rounds
    res.release_note = engine.randomness.release_note
    res.details["compact_wire_bits_per_client"] = int(res.bits_per_client or 0) * (
        1 + max(1, math.ceil(math.log2(max(n_bits, 2))))
    )
    res.details["rounds"] = [
        {"name": r.name, "clients": r.n_clients, "bytes_per_client": r.bytes_per_client}
        for r in logs
    ]


def estimate_mean(
    data: Any,
    encoding: BitEncoding,
    *,
    method: str = "adaptive",
    column: str = "value",
    epsilon: float | None = None,
    engine: Engine | None = None,
    public_seed: int | None = None,
    confidence: float = 0.95,
    truth: bool = True,
    shuffle: bool = True,
    ledger: PrivacyLedger | None = None,
    bit_meter: BitMeter | None = None,
    **options: Any,
) -> MeanEstimate:
    """Estimate the mean of one value per client with any method of :data:`METHODS`.

    Parameters
    ----------
    data : array_like of float, shape (n,), or Population
        The clients' values (arrays are shuffled with the engine's randomness unless ``shuffle=False``).
    encoding : BitEncoding
        Declared range (enforced: clip-and-count or refuse), resolution and bit depth.
    method : str
        One of :data:`METHODS`; default ``"adaptive"``.
    column : str
        Column of a Population (or the name given to an array).
    epsilon : float, optional
        Local DP epsilon per client, in (0, 700]; None: no DP (bit pushing, dithering only).
    engine : Engine, optional
        Default: serial, secure randomness.
    public_seed : int, optional
        Public randomness; default drawn from the engine's randomness.
    confidence : float
        CI level.
    truth : bool
        Compute the true mean and clipped count by a separate pass (simulation).
    shuffle : bool
        Shuffle an array before making it a population.
    ledger, bit_meter : optional
        Receive the privacy spent and the bits disclosed (before the run; over-budget requests are refused).
    **options
        Method options (see :func:`make_stage`).

    Returns
    -------
    MeanEstimate

    Raises
    ------
    ParameterError, DataError, BudgetExceededError
    """
    engine = engine or Engine()
    rs = engine.randomness
    pop = _as_population(data, column, rs, shuffle)
    n = pop.n_clients
    stage = make_stage(method, **_options(method, epsilon, options))
    seed = public_seed if public_seed is not None else rs.public_seed("bitpushing", "mean")
    bits = int(options.get("bits_per_client", 1))
    tr = _scan(pop, column, encoding, engine, truth)
    _meter([(f"{method} mean of {column}", (0, n), bits)], epsilon, ledger, bit_meter)
    first = len(engine.log)
    res = engine.run(
        mean_protocol(
            stage,
            column,
            encoding,
            n,
            method=method,
            public_seed=seed,
            confidence=confidence,
        ),
        pop,
    )
    if tr is not None:
        res.truth = tr.mean
        res.n_clipped = tr.n_clipped
        res.details["truth_of_clipped"] = tr.clipped_mean
    _finish(res, engine, first, encoding.b, 1)
    return res


def estimate_variance(
    data: Any,
    encoding: BitEncoding,
    *,
    method: str = "adaptive",
    column: str = "value",
    epsilon: float | None = None,
    engine: Engine | None = None,
    public_seed: int | None = None,
    confidence: float = 0.95,
    mean_fraction: float = 0.2,
    truth: bool = True,
    shuffle: bool = True,
    ledger: PrivacyLedger | None = None,
    bit_meter: BitMeter | None = None,
    **options: Any,
) -> VarianceEstimate:
    """Estimate the population variance (ddof = 0): a mean stage, then the mean of ``(x - mean)^2``.

    Parameters as :func:`estimate_mean`, plus ``mean_fraction`` (share of clients in the mean stage,
    default 0.2; see :func:`~fedstats.analyses.bitpushing.protocols.variance_protocol`). Each client takes
    part in one stage only, so it discloses ``bits_per_client`` bits and spends ``epsilon`` once.

    Returns
    -------
    VarianceEstimate
    """
    engine = engine or Engine()
    rs = engine.randomness
    pop = _as_population(data, column, rs, shuffle)
    n = pop.n_clients
    stage = make_stage(method, **_options(method, epsilon, options))
    seed = public_seed if public_seed is not None else rs.public_seed("bitpushing", "variance")
    bits = int(options.get("bits_per_client", 1))
    tr = _scan(pop, column, encoding, engine, truth)
    n_m = round(mean_fraction * n)
    if 0 < n_m < n:
        _meter(
            [
                (f"{method} mean of {column} (variance stage 1)", (0, n_m), bits),
                (f"{method} squared deviations of {column}", (n_m, n), bits),
            ],
            epsilon,
            ledger,
            bit_meter,
        )
    first = len(engine.log)
    res = engine.run(
        variance_protocol(
            stage,
            column,
            encoding,
            n,
            method=method,
            mean_fraction=mean_fraction,
            public_seed=seed,
            confidence=confidence,
        ),
        pop,
    )
    if tr is not None:
        res.truth = tr.variance
        res.n_clipped = tr.n_clipped
        res.details["truth_of_clipped"] = tr.clipped_variance
    _finish(res, engine, first, encoding.b, 1)
    return res
