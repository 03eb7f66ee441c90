"""The ``secure`` route: each round's sum computed by real secure aggregation (Bell et al. 2020).

The participating clients are split into cohorts of about ``cohort_size`` consecutive clients. Each cohort
runs the full protocol of :mod:`fedstats.secagg` on its clients' integer reports (reduced mod 2^b, two's
complement): the server learns only the cohort's sum mod 2^b. Before anything runs, the route checks that a
cohort's sum cannot wrap (``b >= value bits + ceil(log2 cohort) + headroom``, else
:class:`~fedstats.errors.OverflowRiskError`), so each cohort sum read as a signed integer is exact, and the
engine adds the cohort sums exactly. Without dropouts the result equals the plain route's sum.

The threat model is the user's choice (``threat_model``, default ``"malicious"``). In the malicious model
the route plays the enrollment authority in-process (one :class:`~fedstats.secagg.EnrollmentAuthority`
per backend, a signed roster per cohort): this simulates the deployment's cost and checks, not its trust
split, since one process holds every party.

With ``dropout > 0`` each client independently drops with that probability, before a uniformly chosen
step of the protocol; clients dropping before their masked input are left out of the sum (the returned
:class:`~fedstats.engine.rounds.RoundSum` counts the included clients). A cohort with more dropouts than
its parameters tolerate aborts, and so does the round (:class:`~fedstats.errors.ProtocolAbortError`).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedstats._validation import check_int, check_real
from fedstats.engine.backends import RoundJob, add_exact
from fedstats.engine.rounds import RoundSum
from fedstats.engine.routes import register_backend
from fedstats.errors import ParameterError
from fedstats.progress import NullProgress, Progress
from fedstats.randomness import RandomSource
from fedstats.secagg.crypto import check_bits
from fedstats.secagg.driver import DROPOUT_STAGES, run_secure_aggregation
from fedstats.secagg.identity import EnrollmentAuthority
from fedstats.secagg.params import (
    THREAT_MODELS,
    SecAggParameters,
    find_parameters,
    validate_parameters,
)
from fedstats.secagg.quantize import check_overflow

__all__ = ["CohortStats", "SecureAggregationBackend", "cohort_bounds"]


@dataclass(frozen=True)
class CohortStats:
    """Measurements of one cohort's protocol run.

    Attributes
    ----------
    round_index, cohort : int
    n_clients, included : int
        Invited clients and clients whose input is in the sum.
    k, t : int
        Graph degree and Shamir threshold used.
    client_seconds, server_seconds : float
        Total compute of the cohort's clients, and of the server.
    bytes_per_client : float
        Mean bytes sent plus received per client.
    """

    round_index: int
    cohort: int
    n_clients: int
    included: int
    k: int
    t: int
    client_seconds: float
    server_seconds: float
    bytes_per_client: float


def cohort_bounds(lo: int, hi: int, cohort_size: int) -> list[tuple[int, int]]:
    """Split clients ``[lo, hi)`` into ``ceil(n / cohort_size)`` contiguous cohorts of near-equal size.

    Every cohort has at least 2 clients when ``hi - lo >= 2`` (a cohort of one would reveal its input).
    """
    n = hi - lo
    count = max(1, math.ceil(n / cohort_size))
    if n >= 2:
        count = min(count, n // 2)
    edges = [lo + (n * c) // count for c in range(count + 1)]
    return [(edges[c], edges[c + 1]) for c in range(count)]


def _parameters(n: int, dropout: float, threat_model: str = "malicious") -> SecAggParameters:
    """Parameters tolerating the dropouts a Bernoulli(dropout) model produces (mean + 5 SE + 1)."""
    tolerance = (
        0.05 if dropout == 0 else dropout + 5.0 * math.sqrt(dropout * (1 - dropout) / n) + 1.0 / n
    )
    for tol in (min(tolerance, 0.45), 0.3, 0.2, 0.1, 0.0):
        try:
            return find_parameters(n, dropout_rate=tol, threat_model=threat_model)
        except ParameterError:
            continue
    return validate_parameters(n, n - 1, n - 1, dropout_rate=0.0, threat_model=threat_model)


class SecureAggregationBackend:
    """Compute each round's sum with the secure-aggregation protocol, cohort by cohort.

    Parameters
    ----------
    cohort_size : int, default 1000
        Target clients per protocol run, >= 2.
    bits : int, default 64
        Modulus width b in {16, 32, 64}.
    dropout : float, default 0.0
        Probability in [0, 0.5) that a client drops out (at a uniformly random step).
    randomness : RandomSource, optional
        Source of the dropout pattern and of the graph permutations (default: the run's source).
    headroom : int, default 1
        Spare bits in the overflow check, >= 0.
    params : SecAggParameters, optional
        Fixed ``k``/``t``/``min_survivors``/threat model for every cohort (then all cohorts must have
        ``params.n`` clients); default :func:`~fedstats.secagg.find_parameters` per cohort size.
    threat_model : {"malicious", "semi-malicious", "semi-honest"}, default "malicious"
        Protocol variant when ``params`` is not given (see ``docs/secagg.md`` for what each stops).

    Attributes
    ----------
    stats : list of CohortStats
        One entry per cohort run.

    Raises
    ------
    ParameterError
        If an option is out of range.
    """

    name = "secure"

    def __init__(
        self,
        cohort_size: int = 1000,
        bits: int = 64,
        dropout: float = 0.0,
        randomness: RandomSource | None = None,
        *,
        headroom: int = 1,
        params: SecAggParameters | None = None,
        threat_model: str = "malicious",
    ) -> None:
        self.cohort_size = check_int("cohort_size", cohort_size, low=2)
        check_bits(bits)
        self.bits = int(bits)
        self.dropout = check_real("dropout", dropout, low=0.0, high=0.5, high_open=True)
        self.randomness = randomness
        self.headroom = check_int("headroom", headroom, low=0)
        self.params = params
        if threat_model not in THREAT_MODELS:
            raise ParameterError("threat_model", threat_model, "one of " + ", ".join(THREAT_MODELS))
        self.threat_model = threat_model
        self._authority = EnrollmentAuthority()
        self.stats: list[CohortStats] = []

    def bits_per_entry(self, job: RoundJob) -> int:  # noqa: ARG002 - the Backend protocol's signature
        """Masked inputs travel at the modulus width: ``bits`` per entry."""
        return self.bits

    def sum_round(self, job: RoundJob, progress: Progress | None = None) -> RoundSum:
        """Run the protocol on every cohort and add the cohort sums exactly.

        Raises
        ------
        ParameterError
            If fewer than 2 clients take part.
        OverflowRiskError
            If a cohort sum could wrap modulo 2^bits.
        ProtocolAbortError
            If a cohort aborts (too many dropouts).
        """
        progress = progress or NullProgress()
        lo, hi = job.client_range
        if hi - lo < 2:
            raise ParameterError("clients", hi - lo, "at least 2 for secure aggregation")
        cohorts = cohort_bounds(lo, hi, self.cohort_size)
        largest = max(c1 - c0 for c0, c1 in cohorts)
        check_overflow(
            value_bits=int(job.round.bound).bit_length() + 1,
            n_clients=largest,
            bits=self.bits,
            headroom=self.headroom,
        )
        source = self.randomness if self.randomness is not None else job.randomness
        task = f"round {job.round_index} ({job.round.name}, secure)"
        progress.start(task, len(cohorts))
        total = job.zero_total()
        included = 0
        # Reports of a block are encoded once even when a cohort boundary splits the block.
        cache: dict[int, np.ndarray] = {}
        for c, (c0, c1) in enumerate(cohorts):
            rows = self._cohort_rows(job, c0, c1, cache)
            # clients the engine's dropout model removed are not in ``rows``: they never join this
            # session, exactly as a device that went offline between rounds
            n = int(rows.shape[0])
            if n < 2:
                raise ParameterError("clients", n, "at least 2 answering clients per secure cohort")
            params = (
                self.params
                if self.params is not None
                else _parameters(n, self.dropout, self.threat_model)
            )
            drops = self._dropouts(source, job.round_index, c, n)
            res = run_secure_aggregation(
                rows,
                bits=self.bits,
                params=params,
                dropouts=drops,
                randomness=source.child("secagg", job.round_index, c),
                round_id=struct.pack("<QQ", job.round_index, c),
                authority=self._authority,
            )
            part = res.signed_total().astype(np.int64)
            total = add_exact(total, part)
            included += len(res.included)
            self.stats.append(
                CohortStats(
                    job.round_index,
                    c,
                    n,
                    len(res.included),
                    params.k,
                    params.t,
                    float(res.client_seconds.sum()),
                    res.server_seconds,
                    res.bytes_per_client,
                )
            )
            progress.advance(task, 1)
        progress.finish(task)
        return RoundSum(total, included)

    def _cohort_rows(
        self, job: RoundJob, c0: int, c1: int, cache: dict[int, np.ndarray]
    ) -> np.ndarray:
        parts = []
        bs = job.block_size
        for b in range(c0 // bs, math.ceil(c1 / bs)):
            if b not in cache:
                cache.clear()  # cohorts are contiguous: only the current block is reused
                cache[b] = job.encode_block(b)
            b_lo = max(job.client_range[0], b * bs)
            s0, s1 = max(c0, b_lo) - b_lo, min(c1, (b + 1) * bs) - b_lo
            parts.append(cache[b][s0:s1])
        return np.concatenate(parts, axis=0)

    def _dropouts(
        self, source: RandomSource, round_index: int, cohort: int, n: int
    ) -> dict[str, set[int]]:
        if self.dropout == 0:
            return {}
        rng = source.generator("secagg", "dropout", round_index, cohort)
        dropped = np.asarray(rng.random(n)) < self.dropout
        stage = np.asarray(rng.integers(0, len(DROPOUT_STAGES), size=n))
        return {
            s: {int(i) for i in np.flatnonzero(dropped & (stage == j))}
            for j, s in enumerate(DROPOUT_STAGES)
        }


def _factory(
    *,
    cohort_size: int = 1000,
    bits: int = 64,
    dropout: float = 0.0,
    randomness: RandomSource | None = None,
    threat_model: str = "malicious",
    **_: Any,
) -> SecureAggregationBackend:
    return SecureAggregationBackend(
        cohort_size=cohort_size,
        bits=bits,
        dropout=dropout,
        randomness=randomness,
        threat_model=threat_model,
    )


register_backend("secure", _factory)
