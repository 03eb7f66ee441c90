"""The analyses on Prio3: every round's sum computed by two aggregators that verify each report's proof.

:class:`Prio3Backend` is an engine route (:class:`~fedstats.engine.backends.Backend`): for each round it
runs the clients' encoder as every route does, turns each client's integer report into a Prio3
measurement whose validity circuit encodes what the encoder may output (:func:`validity_for`), shards it
(:meth:`fedstats.vdaf.Prio3.shard_encoded`), and plays the leader and the helper: both run
``verify_init`` on the batch, combine their verifier shares, drop the reports whose proof fails
(counted in :attr:`Prio3Backend.rejected`), sum the output shares of the others, and each adds its share of
DP noise (:class:`AggregatorNoise`) before the two aggregate shares are combined. Without noise and without
cheating clients the sum is the serial route's sum exactly, so every analysis's server-side estimator runs
unchanged, and the results are bit-identical to the in-process engine's for the same seed. One process
plays every party here: the route measures the protocol's cost and proves its robustness; the deployment
is the service's two-aggregator mode (:mod:`fedstats.service.domain.vdaf`, ``docs/vdaf.md``).

What each analysis's reports become (:func:`validity_for`):

* **bit pushing**, a bit round (:func:`~fedstats.analyses.bitpushing.client.encode_bits`):
  ``MultihotCountVec(length=dim, max_weight=bits_per_client)`` (twice that with random allocation): the
  entries are bits and at most that many are ones, so a client adds at most its share of ones whatever it
  does. The randomized response stays on the device; the server's estimator is unchanged.
* **FED-chi^2 / G-test marginals, FED-H's histogram size**: ``SumVec(length=dim, max_measurement=bound)``,
  each entry in ``[0, bound]`` (``bound = max_cell * max(m_x, m_y)``, resp. ``max_cell``).
* **FED-chi^2 and FED-H projections** (:func:`~fedstats.analyses.chi2.client.encode_projection`,
  :func:`~fedstats.analyses.entropy.client.encode_entropy_projection`): ``SumVec(length=dim,
  max_measurement=2B)`` of ``entry + B`` with ``B = ceil(clip 2^frac_bits)``, the encoder's clipping
  bound, whenever ``B < 2^(bits-1)`` (always with ``bits=64``, where ``choose_frac_bits`` keeps a client's
  entry below 2^62; with 16 or 32 bits only when the client bound is well below the sum's, else honest
  reports wrap and the check is the generic one below, modulo ``2^bits``): the check bounds the real
  entry, not merely its residue modulo ``2^bits``. For FED-H the
  clip is the bound of the whole sum (``||w_i||_1 <= 1``), so the check stops overflow-scale poisoning, not
  a client that reports up to the population's total.
* **performance gap, M_R** (:func:`~fedstats.analyses.performance_gap.client.encode_gap_report`): a
  ``Histogram(length=2 d)`` of (group, outcome): one group, a value of -1 or +1, nothing clipped; the cell
  counts give back the report sum exactly.
* **heterogeneity, performance gap M_L, any other round**: ``SumVec(length=dim, max_measurement=2 bound)``
  of ``entry + bound``: every entry in ``[-bound, bound]`` (heterogeneity: its fixed-point sums, ``x_i``,
  ``w_i``, ``w_i x_i`` and ``w_i (x_i - mu')^2``, each on the grid ``2^-f`` within its clip; with
  ``noise="aggregators"`` the reports carry no noise share and ``bound = 2^f + 1``, see below).

**Quantization.** Prio3 sums integers, and every report is already an integer on its analysis's own
fixed-point grid (the engine's contract), so this route adds no error of its own: without noise and
cheaters its sums equal the serial route's bit for bit. The encoders' own fixed-point error, stated for
the analyses that quantize: a projection coordinate (FED-chi^2, FED-H) or a heterogeneity report entry is
rounded at random to the grid ``2^-f`` (``f = frac_bits`` of the round; FED-chi^2 and FED-H choose it with
:func:`fedstats.secagg.quantize.choose_frac_bits` from ``bits``; heterogeneity from its ``frac_bits``,
default 24): each client's entry is off by less than ``2^-f``, zero in expectation, so a sum over ``n``
clients is off by less than ``n 2^-f`` and has standard deviation at most ``sqrt(n) 2^-f / 2``. FED-chi^2's
statistic is ``||e||^2 / (2 l)`` over ``l`` such coordinates, so its error is at most
``(2 ||e||_inf d + d^2) / 2`` with ``d = n 2^-f`` (``tests/library/test_prio3_analyses.py`` checks the
``6 sigma`` version). Bit pushing and the performance gap's M_R send exact integers (bits, counts).

**DP noise.** :class:`AggregatorNoise` gives each aggregator a discrete Gaussian (or discrete Laplace) of
the full scale calibrated for the round's sensitivity (:func:`calibrate_discrete_gaussian`). An
aggregator's own additions depend only on its aggregate share, which is uniformly random and independent of
the data, so they are post-processing: the release is (epsilon, delta)-DP if **at least one** aggregator is
honest; with both honest the noise variance is twice one aggregator's.

**Heterogeneity's noise on Prio3.** ``heterogeneity(..., noise="aggregators")`` (or
:meth:`~fedstats.analyses.heterogeneity.HeterogeneityConfig.on_aggregators`) plans each round for this
route: the clients send their fixed-point reports without a noise share, each aggregator adds
``N_Z(0, sigma_a^2)`` to every entry of its aggregate share with ``sigma_a^2 = Delta_2^2 / (2 rho_r)``
(:func:`fedstats.analyses.heterogeneity.config.aggregator_variance`; ``Delta_2`` the L2 sensitivity of
one client's integer report on the grid ``2^-f``: the fixed-point scale, the clip and the randomized
rounding included; ``rho_r`` the round's stated loss, ``HeterogeneityConfig.round_losses()``), and the
server adds nothing. One honest aggregator's noise alone makes the round ``rho_r``-zCDP, so the run's loss
is the config's :meth:`~fedstats.analyses.heterogeneity.HeterogeneityConfig.privacy_loss`
(``privacy_loss_for(task)``); with both honest the sum carries ``2 sigma_a^2`` per entry (``2^-2f``
times that in the statistic's normalised units), which the released error bars use. The round states
``sigma_a^2`` in its parameters (``aggregator_variance``), :class:`Prio3Backend` adds it
(:func:`planned_noise`), and the protocol refuses a sum that does not carry it
(:class:`AggregatorSum`), so no route releases these rounds without noise. :func:`heterogeneity_noise`
gives the same noise per round name ahead of a run (for a deployment's aggregators).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstats._validation import check_epsilon_delta, check_int, check_real
from fedstats.engine.backends import RoundJob
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import ParameterError
from fedstats.privacy.analysis.discrete_gaussian import discrete_gaussian_sigma
from fedstats.privacy.analysis.zcdp import zcdp_to_approx_dp
from fedstats.privacy.mechanisms.aggregator_noise import AggregatorNoise
from fedstats.progress import NullProgress, Progress
from fedstats.randomness import RandomSource
from fedstats.vdaf import (
    Prio3,
    Prio3Histogram,
    Prio3MultihotCountVec,
    Prio3SumVec,
)

__all__ = [
    "AggregatorNoise",
    "AggregatorSum",
    "Prio3Backend",
    "Prio3RoundStats",
    "Validity",
    "bit_pushing_noise",
    "calibrate_discrete_gaussian",
    "heterogeneity_noise",
    "planned_noise",
    "validity_for",
]

if TYPE_CHECKING:
    from fedstats.analyses.heterogeneity.config import HeterogeneityConfig

CTX = b"fedstats prio3 route"


def _chunk(length: int) -> int:
    """``chunk_length`` about ``sqrt(length)`` (draft-irtf-cfrg-vdaf-20 §7.4.3.1)."""
    return max(1, math.isqrt(max(length, 1)))


@dataclass(frozen=True)
class Validity:
    """How a round's integer reports become Prio3 measurements, and the sum comes back.

    Attributes
    ----------
    vdaf : Prio3
        The variant whose circuit checks each report.
    to_measurements : callable
        ``(n, dim)`` int64 reports -> the variant's measurements for ``n`` clients (raises
        :class:`~fedstats.errors.ParameterError` for a report outside the circuit's set: an honest
        client's report never is).
    from_total : callable
        ``(OUTPUT_LEN,)`` integer aggregate and the number of summed reports -> ``(dim,)`` integer sum of
        the reports.
    description : str
        The variant and its parameters, for logs.
    """

    vdaf: Prio3
    to_measurements: Callable[[np.ndarray], Any]
    from_total: Callable[[np.ndarray, int], np.ndarray]
    description: str


def _as_sum(total: np.ndarray, n: int) -> np.ndarray:
    """The aggregate is the reports' sum itself (``n`` unused)."""
    del n
    out: np.ndarray = np.asarray(total, dtype=object)
    return out


def _shifted_sumvec(dim: int, bound: int) -> Validity:
    """Entries in ``[-bound, bound]``: SumVec of ``report + bound`` in ``[0, 2 bound]``."""
    vdaf = Prio3SumVec(
        length=dim, max_measurement=2 * bound, chunk_length=_chunk(dim * (2 * bound).bit_length())
    )

    def back(total: np.ndarray, n: int) -> np.ndarray:
        out: np.ndarray = np.asarray(total, dtype=object) - n * bound
        return out

    return Validity(
        vdaf, lambda r: r + bound, back, f"SumVec(length={dim}, max={2 * bound}, shifted {bound})"
    )


def _sumvec(dim: int, bound: int) -> Validity:
    """Non-negative entries in ``[0, bound]``."""
    vdaf = Prio3SumVec(
        length=dim, max_measurement=bound, chunk_length=_chunk(dim * bound.bit_length())
    )
    return Validity(
        vdaf,
        lambda r: r,
        _as_sum,
        f"SumVec(length={dim}, max={bound})",
    )


def _multihot(dim: int, max_weight: int) -> Validity:
    vdaf = Prio3MultihotCountVec(length=dim, max_weight=max_weight, chunk_length=_chunk(dim))
    return Validity(
        vdaf,
        lambda r: r,
        _as_sum,
        f"MultihotCountVec(length={dim}, max_weight={max_weight})",
    )


def validity_for(rnd: Round) -> Validity:
    """The Prio3 check of a round's reports (see the module's table).

    Parameters
    ----------
    rnd : Round

    Returns
    -------
    Validity

    Raises
    ------
    ParameterError
        If the round's reports are too wide for Field128 sums (``bound`` above ``2^100``).
    """
    from fedstats.analyses.bitpushing.client import encode_bits
    from fedstats.analyses.chi2.client import encode_marginals, encode_projection
    from fedstats.analyses.entropy.client import (
        encode_entropy_projection,
        encode_histogram_size,
    )
    from fedstats.analyses.performance_gap.client import encode_gap_report

    if rnd.bound > 2**100:
        raise ParameterError("bound", rnd.bound, "at most 2^100 (Field128 sums)")
    p = rnd.params
    if rnd.encode is encode_bits:
        s = int(p["bits_per_client"]) * (1 if p["allocation"] == "exact" else 2)
        return _multihot(rnd.dim, min(s, rnd.dim))
    if rnd.encode is encode_marginals or rnd.encode is encode_histogram_size:
        return _sumvec(rnd.dim, rnd.bound)
    if rnd.encode is encode_projection or rnd.encode is encode_entropy_projection:
        b = math.ceil(float(p["clip"]) * 2.0 ** int(p["frac_bits"]))
        if 1 <= b < 2 ** (int(p["bits"]) - 1):
            return _shifted_sumvec(rnd.dim, b)  # no honest report wraps modulo 2^bits
    if rnd.encode is encode_gap_report and p["mechanism"] == "R":
        return _gap_histogram(int(p["n_groups"]))
    return _shifted_sumvec(rnd.dim, rnd.bound)


def _gap_histogram(d: int) -> Validity:
    """The performance gap's M_R reports as a Histogram of the ``2 d`` cells (group, outcome).

    A report ``[y e_g, e_g, 0]`` with ``y`` in {-1, +1} is the bucket ``2 g + [y = +1]``; the bucket counts
    give back the report sum: per group (+1 count) - (-1 count), then the group's count, then 0 clipped.
    """
    vdaf = Prio3Histogram(length=2 * d, chunk_length=_chunk(2 * d))

    def to_cell(r: np.ndarray) -> np.ndarray:
        g = r[:, d : 2 * d].argmax(axis=1)
        y = r[np.arange(r.shape[0]), g]
        ok = (
            (r[:, d : 2 * d].sum(axis=1) == 1)
            & (np.abs(y) == 1)
            & (np.count_nonzero(r[:, :d], axis=1) == 1)
            & (r[:, 2 * d] == 0)
        )
        if not ok.all():
            raise ParameterError("reports", "not an M_R report", "one group, a value of -1 or +1")
        cell: np.ndarray = 2 * g + (y > 0)
        return cell

    def back(total: np.ndarray, n: int) -> np.ndarray:
        del n
        cells = np.asarray(total, dtype=object).reshape(d, 2)
        return np.concatenate(
            [cells[:, 1] - cells[:, 0], cells.sum(axis=1), np.zeros(1, dtype=object)]
        )

    return Validity(vdaf, to_cell, back, f"Histogram(length={2 * d}) of (group, outcome)")


def histogram_validity(length: int) -> Validity:
    """One-hot reports of ``length`` buckets checked by Prio3Histogram (a report is its bucket index)."""
    vdaf = Prio3Histogram(length=length, chunk_length=_chunk(length))

    def to_index(r: np.ndarray) -> np.ndarray:
        if r.ndim != 2 or r.shape[1] != length or not np.all(r.sum(axis=1) == 1):
            raise ParameterError("reports", "not one-hot", f"one-hot rows of length {length}")
        idx: np.ndarray = r.argmax(axis=1)
        return idx

    return Validity(vdaf, to_index, _as_sum, f"Histogram(length={length})")


def calibrate_discrete_gaussian(
    *, epsilon: float, delta: float, l2_sensitivity: float, dim: int
) -> AggregatorNoise:
    """One aggregator's discrete Gaussian noise for an (epsilon, delta)-DP release of a ``dim``-vector sum.

    ``dim == 1`` with an integer sensitivity: the exact condition of Canonne, Kamath & Steinke 2020,
    Thm. 7 (:func:`~fedstats.privacy.analysis.discrete_gaussian.discrete_gaussian_sigma`). Otherwise their
    Thm. 14: independent discrete Gaussians of parameter ``sigma`` on every entry are
    ``l2^2 / (2 sigma^2)``-zCDP, converted to (epsilon, delta) by
    :func:`~fedstats.privacy.analysis.zcdp.zcdp_to_approx_dp`; sigma is the smallest (bisection to a relative
    1e-9) whose epsilon is at most ``epsilon``.

    Parameters
    ----------
    epsilon, delta : float
        The (epsilon, delta)-DP target of the released sum, met with one honest aggregator's noise alone:
        epsilon in (0, inf), delta in (0, 1) (:func:`~fedstats._validation.check_epsilon_delta`).
    l2_sensitivity : float
        L2 norm of the largest change of the sum when one client's data changes, > 0.
    dim : int
        Entries of the sum, >= 1.

    Returns
    -------
    AggregatorNoise
        What *each* aggregator adds (the release is DP if at least one is honest).
    """
    check_epsilon_delta(epsilon, delta)
    check_real(
        "l2_sensitivity", l2_sensitivity, low=0.0, high=math.inf, low_open=True, high_open=True
    )
    check_int("dim", dim, low=1)
    if dim == 1 and float(l2_sensitivity).is_integer():
        sigma = discrete_gaussian_sigma(
            epsilon=epsilon, delta=delta, sensitivity=int(l2_sensitivity)
        )
        return AggregatorNoise("discrete_gaussian", sigma * sigma)

    def eps_of(sigma: float) -> float:
        return zcdp_to_approx_dp(rho=l2_sensitivity**2 / (2.0 * sigma * sigma), delta=delta)

    lo, hi = 1e-6, 1.0
    while eps_of(hi) > epsilon:
        hi *= 2.0
        if hi > 1e11:
            raise ParameterError("epsilon", epsilon, "a budget that needs sigma <= 1e11")
    while hi / lo > 1 + 1e-9:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if eps_of(mid) > epsilon else (lo, mid)
    return AggregatorNoise("discrete_gaussian", hi * hi)


def bit_pushing_noise(
    *, epsilon: float, delta: float, bits_per_client: int = 1
) -> Callable[[Round], AggregatorNoise | None]:
    """The aggregators' noise for central-DP bit pushing on Prio3 (devices send exact bits).

    A bit round's sum changes in at most ``bits_per_client`` entries by 1 when one client's value changes
    (which entries a client reports is public, or drawn independently of its value), so its L2
    sensitivity is ``sqrt(bits_per_client)``; each aggregator adds
    :func:`calibrate_discrete_gaussian` noise for it. The rounds of one estimate (basic: one; adaptive: two)
    have disjoint clients, so the estimate is (epsilon, delta)-DP by parallel composition when at least
    one aggregator is honest. The estimator is linear in the bit sums given the public allocation, so
    the noise leaves it unbiased (``tests/library/test_prio3_analyses.py``). The library's result does not record
    this loss (its ``epsilon`` is the local one): charge a ledger with ``(epsilon, delta)`` yourself.

    Parameters
    ----------
    epsilon, delta : float
        The budget of each estimate, as :func:`calibrate_discrete_gaussian`'s.
    bits_per_client : int
        The method's ``bits_per_client`` (>= 1).

    Returns
    -------
    callable
        ``noise(round)`` for :class:`Prio3Backend`: the noise for bit rounds, None for other rounds.
    """
    from fedstats.analyses.bitpushing.client import encode_bits

    s = check_int("bits_per_client", bits_per_client, low=1)
    calibrate_discrete_gaussian(epsilon=epsilon, delta=delta, l2_sensitivity=1.0, dim=2)  # checks
    by_dim: dict[int, AggregatorNoise] = {}

    def for_round(rnd: Round) -> AggregatorNoise | None:
        if rnd.encode is not encode_bits:
            return None
        if rnd.dim not in by_dim:
            by_dim[rnd.dim] = calibrate_discrete_gaussian(
                epsilon=epsilon, delta=delta, l2_sensitivity=math.sqrt(s), dim=rnd.dim
            )
        return by_dim[rnd.dim]

    return for_round


def planned_noise(rnd: Round) -> AggregatorNoise | None:
    """The aggregators' noise a round's plan states: ``params["aggregator_variance"]``, else None.

    A plan that wants its noise added by the aggregators (heterogeneity with ``noise="aggregators"``)
    states each aggregator's discrete Gaussian parameter ``sigma_a^2`` (integer units) there; the value is
    public, like every round parameter. This is the hook a deployment's two aggregators call on each
    round of the plan (both derive the same rounds from the task).

    Parameters
    ----------
    rnd : Round

    Returns
    -------
    AggregatorNoise or None
        ``AggregatorNoise("discrete_gaussian", sigma_a^2)`` for each aggregator to add.

    Raises
    ------
    ParameterError
        If the stated variance is not a positive number below 2^84.
    """
    v = rnd.params.get("aggregator_variance")
    if v is None:
        return None
    return AggregatorNoise("discrete_gaussian", float(v))


def heterogeneity_noise(
    config: HeterogeneityConfig, *, n_clients: int, dim: int | None = None
) -> dict[str, AggregatorNoise]:
    """Each aggregator's noise per round of a heterogeneity run on Prio3 (see the module).

    Parameters
    ----------
    config : HeterogeneityConfig
        A private config; it is planned as
        :meth:`~fedstats.analyses.heterogeneity.HeterogeneityConfig.on_aggregators` (a task's config is
        accepted: the budget and options are kept).
    n_clients : int
        Clients of the run, >= 2 (the grid ``2^-f`` is narrowed for large cohorts).
    dim : int, optional
        Vector length ``d >= 1``; default ``config.dim``.

    Returns
    -------
    dict
        ``{"centre": AggregatorNoise, "spread": AggregatorNoise}``: the discrete Gaussian each aggregator
        adds, ``sigma_a^2 = Delta_2^2 / (2 rho_r)``; ``Prio3Backend(noise=...)`` takes it as is, and it
        equals what the round states (:func:`planned_noise`) when the protocol runs the same config.

    Raises
    ------
    ParameterError
        If the config is not private, is on the float path, or ``dim`` is missing or out of range.
    """
    from fedstats.analyses.heterogeneity.config import HeterogeneityConfig, plan_rounds

    if not isinstance(config, HeterogeneityConfig):
        raise ParameterError("config", type(config).__name__, "a HeterogeneityConfig")
    if not config.private:
        raise ParameterError("config.epsilon", None, "a budget (the aggregators add noise for it)")
    cfg = config.on_aggregators()
    d = cfg.dim if dim is None else dim
    if d is None:
        raise ParameterError("dim", None, "the vector length (or config.dim)")
    p1, p2, _ = plan_rounds(
        cfg, check_int("n_clients", n_clients, low=2), check_int("dim", d, low=1)
    )
    return {p.name: AggregatorNoise("discrete_gaussian", p.share_variance) for p in (p1, p2)}


@dataclass(frozen=True)
class AggregatorSum(RoundSum):
    """A Prio3 round's sum, marked with the noise each aggregator added to it.

    Attributes
    ----------
    aggregator_noise : AggregatorNoise or None
        What *each* aggregator added (None: the exact sum of the accepted reports).
    aggregators : int
        How many aggregators added it (2).
    """

    aggregator_noise: AggregatorNoise | None = None
    aggregators: int = 2


@dataclass
class Prio3RoundStats:
    """What the two aggregators saw in one round.

    Attributes
    ----------
    round_index : int
    name : str
    variant : str
        The Prio3 variant and its parameters.
    accepted, rejected : int
        Reports whose proofs verified, and reports refused (left out of the sum and of ``n_clients``).
    upload_bytes : int
        One client's upload: public share plus both input shares (the draft's encodings).
    """

    round_index: int
    name: str
    variant: str
    accepted: int
    rejected: int
    upload_bytes: int


@dataclass
class Prio3Backend:
    """The engine route whose sums are computed by Prio3 with two aggregators (see the module).

    Parameters
    ----------
    noise : mapping or callable, optional
        Each aggregator's DP noise per round: a mapping round name -> :class:`AggregatorNoise`, or a
        callable ``noise(round) -> AggregatorNoise | None``. A round it gives no noise for gets the noise
        its plan states (:func:`planned_noise`), if any; otherwise the sum is exact.
    batch_size : int
        Reports sharded and verified together, >= 1 (bounds memory: SumVec reports are long).
    randomness : RandomSource, optional
        The aggregators' noise randomness (default secure; seeded only for tests, not for release).
    cheaters : sequence of int, optional
        Tests and demonstrations: global indices of clients that cheat, sending an encoding whose first
        element is 2 (not a bit, which every circuit here range-checks) with an honestly computed proof.
    validity : callable, optional
        ``validity(round) -> Validity`` instead of :func:`validity_for`.

    Attributes
    ----------
    stats : list of Prio3RoundStats
        One entry per round summed.
    """

    noise: Mapping[str, AggregatorNoise] | Callable[[Round], AggregatorNoise | None] | None = None
    batch_size: int = 1000
    randomness: RandomSource = field(default_factory=RandomSource)
    cheaters: Sequence[int] = ()
    validity: Callable[[Round], Validity] | None = None
    stats: list[Prio3RoundStats] = field(default_factory=list)

    name = "prio3"

    def __post_init__(self) -> None:
        check_int("batch_size", self.batch_size, low=1)

    @property
    def rejected(self) -> int:
        """Reports rejected so far, over all rounds."""
        return sum(s.rejected for s in self.stats)

    def _noise_for(self, rnd: Round) -> AggregatorNoise | None:
        given: AggregatorNoise | None = None
        if callable(self.noise):
            given = self.noise(rnd)
        elif self.noise is not None:
            given = self.noise.get(rnd.name)
        return given if given is not None else planned_noise(rnd)

    def sum_round(self, job: RoundJob, progress: Progress | None = None) -> AggregatorSum:
        """The round's sum over the reports whose proofs verified, plus both aggregators' noise.

        Returns an :class:`AggregatorSum` marked with the noise each aggregator added.
        """
        progress = progress or NullProgress()
        rnd = job.round
        val = (self.validity or validity_for)(rnd)
        vdaf = val.vdaf
        f = vdaf.field
        verify_key = os.urandom(32)
        shares = [f.zeros(vdaf.flp.OUTPUT_LEN), f.zeros(vdaf.flp.OUTPUT_LEN)]
        accepted = rejected = 0
        upload = 0
        cheat = np.asarray(sorted(set(int(c) for c in self.cheaters)), dtype=np.int64)
        task = f"round {job.round_index} ({rnd.name}, Prio3)"
        blocks = job.blocks()
        progress.start(task, len(blocks))
        for b in blocks:
            reports = job.encode_block(b)
            start, stop = job._block_range(b)
            gone = job._dropped_in(start, stop)
            idx = np.arange(start, stop, dtype=np.int64)
            if gone.size:
                idx = idx[~np.isin(idx, gone)]
            for lo in range(0, reports.shape[0], self.batch_size):
                rep = reports[lo : lo + self.batch_size]
                who = idx[lo : lo + self.batch_size]
                enc = vdaf.flp.valid.encode(val.to_measurements(rep))
                bad = np.isin(who, cheat)
                if bad.any():
                    enc[bad, 0] = f.array([2])[0]
                nonces = [os.urandom(16) for _ in range(rep.shape[0])]
                batch = vdaf.shard_encoded(CTX, enc, nonces)
                if not upload:
                    upload = len(
                        vdaf.encode_public_share(
                            None if batch.public_shares is None else batch.public_shares[0]
                        )
                    ) + sum(len(vdaf.encode_input_share(s, 0)) for s in batch.input_shares)
                inits = [
                    vdaf.verify_init_batch(
                        verify_key, CTX, j, nonces, batch.public_shares, batch.input_shares[j]
                    )
                    for j in range(2)
                ]
                messages, ok = vdaf.verifier_shares_to_message_batch(CTX, [v for _, v in inits])
                for j, (state, _) in enumerate(inits):
                    out, ok_j = vdaf.verify_next_batch(state, messages)
                    shares[j] = f.add(shares[j], vdaf.aggregate(out, ok_j & ok))
                accepted += int(ok.sum())
                rejected += int((~ok).sum())
            progress.advance(task, 1)
        progress.finish(task)
        noise = self._noise_for(rnd)
        if noise is not None:
            for j in range(2):
                rng = self.randomness.generator("prio3", "aggregator", j, "round", job.round_index)
                shares[j] = f.add(shares[j], f.array(noise.sample(vdaf.flp.OUTPUT_LEN, rng)))
        p = f.MODULUS
        total = np.asarray(
            [v - p if v > p // 2 else v for v in f.to_ints(vdaf.merge(shares))], dtype=object
        )
        out_sum = val.from_total(total, accepted)
        self.stats.append(
            Prio3RoundStats(job.round_index, rnd.name, val.description, accepted, rejected, upload)
        )
        wide = any(abs(int(v)) >= 2**62 for v in out_sum)
        return AggregatorSum(
            np.asarray(out_sum, dtype=object if wide else np.int64), accepted, noise, 2
        )

    def bits_per_entry(self, job: RoundJob) -> int:
        """Upload bits per report entry (a client's public share and both input shares over ``dim``)."""
        for s in reversed(self.stats):
            if s.round_index == job.round_index and s.name == job.round.name:
                return math.ceil(8 * s.upload_bytes / job.round.dim)
        return 0
