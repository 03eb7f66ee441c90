"""One-call mean and variance estimation with any method, plus simulation truth and privacy metering.

:func:`mean` and :func:`variance` take the data (an array, or any engine
:class:`~fedstats.engine.Population` up to 10^9 clients), a declared :class:`BitEncoding`, a method name
(:data:`~fedstats.analyses.bitpushing.methods.METHODS`) and its options. They follow the rule of
:mod:`fedstats.analyses._api`: ``engine`` sums the rounds and holds the clients' randomness; ``randomness``
(default ``engine.randomness``) is the server's: the shuffle of an array and the public seed. They charge
every release of the request to the :class:`~fedstats.privacy.ledger.PrivacyLedger` (from the mechanisms'
own :meth:`~fedstats.privacy.mechanisms.Mechanism.privacy_loss`) and the disclosed bits to the
:class:`~fedstats.privacy.ledger.BitMeter` *before* running, all or nothing (so a refused request, even the
second stage of a variance, records nothing and no client discloses anything), run the protocol on the
engine, and, in simulation, fill in the true value and the number of clipped clients from a separate pass.

Round membership is by client index (round 1 takes the first ``round1_fraction`` of the clients): arrays are
shuffled first; a :class:`~fedstats.engine.Population` must be in random order (generated and resampled
populations are).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from fedstats._validation import check_finite_array, check_open_unit
from fedstats.analyses._api import charging, resolve
from fedstats.analyses.bitpushing.config import BitPushingMeanConfig, BitPushingVarianceConfig
from fedstats.analyses.bitpushing.encoding import BitEncoding
from fedstats.analyses.bitpushing.methods import make_stage, stage_mechanisms
from fedstats.analyses.bitpushing.protocol import (
    BitPushingResult,
    MeanEstimate,
    VarianceEstimate,
    mean_protocol,
    variance_protocol,
    variance_split,
)
from fedstats.analyses.usefulness import attach_warnings
from fedstats.engine import Engine, InMemoryPopulation, Population
from fedstats.engine.core import ProtocolGenerator
from fedstats.engine.populations import HistogramSource, block_count
from fedstats.errors import DataError, ParameterError
from fedstats.privacy.ledger import BitMeter, PrivacyLedger, compose_losses
from fedstats.privacy.mechanisms import Mechanism
from fedstats.randomness import RandomSource

__all__ = [
    "DEFAULT_SQUASH_THRESHOLD",
    "Truth",
    "check_privacy_choice",
    "mean",
    "population_truth",
    "variance",
]

R = TypeVar("R", bound=BitPushingResult)

# the options a task can set take the configs' defaults (one default each)
_MEAN = BitPushingMeanConfig
_VARIANCE = BitPushingVarianceConfig

DEFAULT_SQUASH_THRESHOLD = 0.15
"""Recommended bit squashing threshold (units of the per-report DP noise standard deviation), inside the
0.1-0.2 the paper found best. Off by default: it removes vacuous high-order bits of a loose range, but also
squashes genuine bits whose mean is that small (e.g. bit 6 of ages, mean ~0.05, when epsilon <= 2)."""


class Truth:
    """Exact statistics of a population column, from one pass over its blocks (simulation only).

    Parameters
    ----------
    s : numpy.ndarray, shape (4,)
        Shifted sums of the values, their squares, the clipped values and their squares.
    n : int
        Number of values.
    n_clipped : int
        Values outside the declared range.

    Attributes
    ----------
    mean, variance : float
        Of the values as given (variance with ddof = 0), before the shift is added back.
    clipped_mean, clipped_variance : float
        Of the values clipped to the declared range (what the protocol can estimate).
    n_clipped : int
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

    Parameters
    ----------
    population : Population
        The clients.
    column : str
        The column.
    encoding : BitEncoding
        The declared range (for the clipped statistics).
    randomness : RandomSource
        The source the population's blocks are generated from (the engine's).
    block_size : int
        Clients per block (the engine's).

    Returns
    -------
    Truth
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


def histogram_truth(
    population: HistogramSource, column: str, encoding: BitEncoding, randomness: RandomSource
) -> Truth:
    """The truth on the aggregate route, from the population's histogram (no pass over the clients).

    For a fixed population it is the exact statistic of its clients; for a population of i.i.d. clients
    (resampled), the expectation under the distribution they are drawn from, since the aggregate route
    draws every cohort afresh from it and never fixes the clients' values.

    Parameters
    ----------
    population : HistogramSource
        The clients.
    column : str
        The column.
    encoding : BitEncoding
        The declared range (for the clipped statistics).
    randomness : RandomSource
        The engine's source (the histogram's keys).

    Returns
    -------
    Truth
    """
    n = int(population.n_clients)  # type: ignore[attr-defined]
    hist = population.histogram(0, n, randomness)
    if hist.source is not None:
        values = np.asarray(hist.source[0][column], dtype=np.float64)
        w = np.asarray(hist.source[1], dtype=np.float64) * n
    else:
        values = np.asarray(hist.column(column), dtype=np.float64)
        w = hist.counts.astype(np.float64)
    shift = float(np.average(values, weights=w))
    x = values - shift
    xc = np.clip(values, encoding.low, encoding.high) - shift
    s = np.array([w @ x, w @ x**2, w @ xc, w @ xc**2])
    outside = (values < encoding.low) | (values > encoding.high)
    t = Truth(s, n, round(float(w[outside].sum())))
    t.mean += shift
    t.clipped_mean += shift
    return t


def _as_population(data: Any, column: str, randomness: RandomSource, shuffle: bool) -> Population:
    if isinstance(data, Population):
        return data
    v = check_finite_array("values", data, ndim=1)
    if shuffle:
        v = v[np.asarray(randomness.child("shuffle").generator().permutation(v.size))]
    return InMemoryPopulation({column: v})


def _charge(
    stages: Sequence[tuple[str, tuple[int, int]]],
    mechanisms: list[Mechanism],
    bits: int,
    ledger: PrivacyLedger | None,
    bit_meter: BitMeter | None,
) -> tuple[float | None, float | None]:
    """Charge every stage's releases and bits, all or nothing; return the per-client (epsilon, delta).

    Each client of a stage's cohort applies every mechanism once; the ledger composes their losses (the
    cohorts are disjoint, so they compose in parallel).
    """
    with charging(ledger, bit_meter):
        for label, (lo, hi) in stages:
            if bit_meter is not None:
                bit_meter.record(bits=bits, label=label, clients=range(lo, hi))
            if ledger is not None:
                for k, mech in enumerate(mechanisms):
                    ledger.spend_loss(
                        mech.privacy_loss(), label=f"{label}: report {k + 1}", clients=range(lo, hi)
                    )
    if not mechanisms:
        return None, None
    # what one client spends, as the task's privacy loss: the ledger composes, nothing by hand
    total = compose_losses(mech.privacy_loss() for mech in mechanisms)
    return total.epsilon, total.delta


def _scan(
    pop: Population, column: str, encoding: BitEncoding, engine: Engine, truth: bool
) -> Truth | None:
    """Compute the simulation truth; check the refuse policy before anyone spends privacy or bits."""
    if not truth:
        return None
    if getattr(engine.backend, "name", "") == "aggregate" and isinstance(pop, HistogramSource):
        tr = histogram_truth(pop, column, encoding, engine.randomness)
    else:
        tr = population_truth(pop, column, encoding, engine.randomness, engine.block_size)
    if tr.n_clipped and encoding.out_of_range == "refuse":
        raise DataError(
            f"{tr.n_clipped} of {tr.n} {column} values lie outside the declared range "
            f"[{encoding.low:g}, {encoding.high:g}] (use out_of_range='clip' to clip and count them)"
        )
    return tr


def check_privacy_choice(epsilon: float | None, no_privacy: bool, *, cli: bool = False) -> None:
    """Require an explicit privacy choice: ``epsilon=E`` or ``no_privacy=True``.

    On the command line the choice is ``--epsilon E`` or ``--no-privacy`` (``cli=True`` says so).

    Parameters
    ----------
    epsilon : float or None
        Local DP epsilon per client.
    no_privacy : bool
        The explicit choice of a non-private estimate.
    cli : bool
        Word the errors with the command line's options instead of the keyword arguments; default False.

    Raises
    ------
    ParameterError
        Naming ``epsilon`` if neither is given, and ``epsilon`` (``--no-privacy`` on the command line) if
        both are.
    """
    eps, off = ("--epsilon E", "--no-privacy") if cli else ("epsilon=E", "no_privacy=True")
    if epsilon is None and not no_privacy:
        raise ParameterError(
            "--epsilon" if cli else "epsilon",
            None,
            f"a privacy choice: {eps} (local DP, E > 0), or {off} to release a non-private estimate",
        )
    if epsilon is not None and no_privacy:
        name, value = ("--no-privacy", True) if cli else ("epsilon", epsilon)
        raise ParameterError(name, value, f"either {eps} or {off}, not both")


def _start(
    data: Any,
    column: str,
    method: str,
    epsilon: float | None,
    no_privacy: bool,
    confidence: float,
    shuffle: bool,
    engine: Engine | None,
    randomness: RandomSource | None,
    options: dict[str, Any],
) -> tuple[Engine, RandomSource, Population, Any, list[Mechanism]]:
    """Check a request and set it up: ``(engine, randomness, population, stage, mechanisms)``.

    The privacy choice and confidence are refused before the (possibly long) truth scan and rounds, not
    after them; the stage of ``method`` is bound to its options, with the mechanisms each of its clients
    applies.
    """
    check_privacy_choice(epsilon, no_privacy)
    check_open_unit("confidence", confidence)
    engine, rs = resolve(engine, randomness)
    pop = _as_population(data, column, rs, shuffle)
    opts = {**options, "epsilon": epsilon}
    return engine, rs, pop, make_stage(method, **opts), stage_mechanisms(method, **opts)


def _bits(options: dict[str, Any]) -> int:
    return int(options.get("bits_per_client", 1))


def _run(
    engine: Engine,
    protocol: ProtocolGenerator[R],
    pop: Population,
    encoding: BitEncoding,
    privacy: tuple[float | None, float | None],
    randomness: RandomSource,
    truth: Truth | None,
    statistic: str,
) -> R:
    """Run the protocol and fill in what the engine, the charge and the truth know.

    Privacy, bytes, rounds and release note; with a ``truth``, its ``statistic`` (``"mean"`` or
    ``"variance"``), that of the clipped values and the clipped count. Usefulness warnings attached.
    """
    first = len(engine.log)
    res = engine.run(protocol, pop)
    logs = engine.log[first:]
    res.epsilon, res.delta = privacy
    res.bytes_per_client = max((r.bytes_per_client for r in logs), default=0)
    notes = {engine.randomness.release_note, randomness.release_note} - {None}
    res.release_note = "; ".join(sorted(n for n in notes if n)) or None
    res.details["compact_wire_bits_per_client"] = int(res.bits_per_client or 0) * (
        1 + max(1, math.ceil(math.log2(max(encoding.b, 2))))
    )
    res.details["rounds"] = [
        {"name": r.name, "clients": r.n_clients, "bytes_per_client": r.bytes_per_client}
        for r in logs
    ]
    if truth is not None:
        res.truth, res.n_clipped = getattr(truth, statistic), truth.n_clipped
        res.details["truth_of_clipped"] = getattr(truth, f"clipped_{statistic}")
    return attach_warnings(res)  # type: ignore[no-any-return]


def mean(
    data: Any,
    encoding: BitEncoding,
    *,
    method: str = _MEAN.method,
    column: str = "value",
    epsilon: float | None = None,
    no_privacy: bool = False,
    public_seed: int | None = None,
    confidence: float = 0.95,
    truth: bool = True,
    shuffle: bool = True,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
    ledger: PrivacyLedger | None = None,
    bit_meter: BitMeter | None = None,
    **options: Any,
) -> MeanEstimate:
    """Estimate the mean of one value per client with bit pushing (or a baseline).

    Cormode & Markov 2021: Algorithm 1 (``"basic"``, ``"weighted"``), Algorithm 2 (``"adaptive"``), and the
    baselines of their Sec. 5 (:mod:`fedstats.analyses.mean_baselines`).

    Parameters
    ----------
    data : array_like of float, shape (n,), or Population
        The clients' values (arrays are shuffled with the server's randomness unless ``shuffle=False``).
    encoding : BitEncoding
        Declared range (enforced: clip-and-count or refuse), resolution and bit depth.
    method : str
        One of :data:`~fedstats.analyses.bitpushing.methods.METHODS`; default the config's
        (:attr:`~fedstats.analyses.bitpushing.config.BitPushingMeanConfig.method`, ``"basic"``:
        ``docs/bitpushing.md``, "Which protocol is the default").
    column : str
        Column of a Population (or the name given to an array).
    epsilon : float, optional
        Local DP epsilon per client, in (0, 700]. A privacy choice is required, as on the command line:
        ``epsilon=E`` or ``no_privacy=True`` (neither, or both, raise ``ParameterError``).
    no_privacy : bool
        The explicit choice of a non-private estimate (bit pushing, dithering only); default False.
    public_seed : int, optional
        Public randomness (permutation, dither); default ``randomness.public_seed("bitpushing", "mean")``.
    confidence : float
        CI level in (0, 1).
    truth : bool
        Compute the true mean and clipped count by a separate pass (simulation).
    shuffle : bool
        Shuffle an array before making it a population.
    engine : Engine, optional
        Sums the rounds; holds the clients' randomness (see :mod:`fedstats.analyses._api`).
    randomness : RandomSource, optional
        The server's randomness (shuffle, public seed); default ``engine.randomness``.
    ledger : PrivacyLedger, optional
        Charged before the run, all or nothing (an over-budget request is refused and runs nothing).
    bit_meter : BitMeter, optional
        Charged with the bits each client discloses, likewise.
    **options
        The method's options (:func:`~fedstats.analyses.bitpushing.methods.make_stage`); others are
        refused.

    Returns
    -------
    MeanEstimate
        Tagged ``"bitpushing.mean"`` (``"mean_baselines.mean"`` for a baseline).

    Raises
    ------
    ParameterError
        If the method or an option is invalid, or no privacy choice (or both) is given.
    DataError
        If the data is empty, not finite, or outside the range under ``out_of_range="refuse"``.
    BudgetExceededError
        If the ledger or the bit meter refuses the request (nothing is charged then).
    """
    engine, rs, pop, stage, mechanisms = _start(
        data, column, method, epsilon, no_privacy, confidence, shuffle, engine, randomness, options
    )
    n = pop.n_clients
    seed = public_seed if public_seed is not None else rs.public_seed("bitpushing", "mean")
    tr = _scan(pop, column, encoding, engine, truth)
    stages = [(f"{method} mean of {column}", (0, n))]
    privacy = _charge(stages, mechanisms, _bits(options), ledger, bit_meter)
    proto = mean_protocol(
        stage, column, encoding, n, method=method, public_seed=seed, confidence=confidence
    )
    return _run(engine, proto, pop, encoding, privacy, rs, tr, "mean")


def variance(
    data: Any,
    encoding: BitEncoding,
    *,
    method: str = _VARIANCE.method,
    column: str = "value",
    epsilon: float | None = None,
    no_privacy: bool = False,
    mean_fraction: float = _VARIANCE.mean_fraction,
    public_seed: int | None = None,
    confidence: float = 0.95,
    truth: bool = True,
    shuffle: bool = True,
    engine: Engine | None = None,
    randomness: RandomSource | None = None,
    ledger: PrivacyLedger | None = None,
    bit_meter: BitMeter | None = None,
    **options: Any,
) -> VarianceEstimate:
    """Estimate the population variance (ddof = 0): a mean stage, then the mean of ``(x - mean)^2``.

    Cormode & Markov 2021, Sec. 4 (variance as the mean of squared deviations), see
    :func:`~fedstats.analyses.bitpushing.protocol.variance_protocol`. Each client takes part in one stage
    only, so it discloses ``bits_per_client`` bits and spends ``epsilon`` once.

    Parameters
    ----------
    data, encoding, method, column, epsilon, no_privacy, confidence, truth, shuffle, engine, randomness,
    ledger, bit_meter, **options
        As :func:`mean`.
    mean_fraction : float
        Share of clients in the mean stage, in (0, 1), default 0.2.
    public_seed : int, optional
        Public randomness; default ``randomness.public_seed("bitpushing", "variance")``.

    Returns
    -------
    VarianceEstimate
        Tagged ``"bitpushing.variance"`` (``"mean_baselines.variance"`` for a baseline).

    Raises
    ------
    ParameterError
        If the method, an option or ``mean_fraction`` is invalid, or the privacy choice is missing.
    DataError
        As :func:`mean`.
    BudgetExceededError
        If the ledger or the bit meter refuses either stage (nothing is charged then).
    """
    engine, rs, pop, stage, mechanisms = _start(
        data, column, method, epsilon, no_privacy, confidence, shuffle, engine, randomness, options
    )
    n = pop.n_clients
    seed = public_seed if public_seed is not None else rs.public_seed("bitpushing", "variance")
    n_m = variance_split(n, mean_fraction)
    tr = _scan(pop, column, encoding, engine, truth)
    stages = [
        (f"{method} mean of {column} (variance stage 1)", (0, n_m)),
        (f"{method} squared deviations of {column}", (n_m, n)),
    ]
    privacy = _charge(stages, mechanisms, _bits(options), ledger, bit_meter)
    proto = variance_protocol(
        stage,
        column,
        encoding,
        n,
        method=method,
        mean_fraction=mean_fraction,
        public_seed=seed,
        confidence=confidence,
    )
    return _run(engine, proto, pop, encoding, privacy, rs, tr, "variance")
