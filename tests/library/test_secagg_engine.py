"""The engine's ``secure`` route: real secure aggregation per cohort, equal to the plain sum."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from fedstats.engine import ClientBatch, Engine, InMemoryPopulation, Round, SerialBackend
from fedstats.engine.routes import open_backend
from fedstats.engine.secure import SecureAggregationBackend, cohort_bounds
from fedstats.errors import OverflowRiskError, ParameterError
from fedstats.randomness import RNG, RandomSource


def encode_signed(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    """Value, its negation plus noise, and a count: signed reports."""
    v = batch.column("v").astype(np.int64)
    noise = rng.integers(-50, 51, size=batch.n)
    return np.stack([v, -v + noise, np.ones(batch.n, dtype=np.int64)], axis=1)


def _round(bound: int = 10_000) -> Round:
    return Round("signed", encode_signed, {}, dim=3, bound=bound)


@pytest.mark.parametrize(
    ("n", "cohort", "block", "bits", "model"),
    [
        (2, 1000, 64, 64, "malicious"),
        (257, 50, 64, 32, "malicious"),
        (120, 7, 16, 16, "malicious"),
        (120, 40, 16, 32, "semi-honest"),
        (60, 30, 16, 32, "semi-malicious"),
    ],
)
def test_secure_route_equals_plain_sum(
    n: int, cohort: int, block: int, bits: int, model: str
) -> None:
    rng = np.random.default_rng(n)
    pop = InMemoryPopulation({"v": rng.integers(-10_000 if bits > 16 else -40, 40, size=n)})
    rnd = _round(10_050 if bits > 16 else 90)
    plain = Engine(SerialBackend(), RandomSource(5), block_size=block).sum_round(rnd, pop, 0)
    backend = SecureAggregationBackend(cohort_size=cohort, bits=bits, threat_model=model)
    secure = Engine(backend, RandomSource(5), block_size=block).sum_round(rnd, pop, 0)
    np.testing.assert_array_equal(secure.total, plain.total)
    assert secure.n_clients == plain.n_clients == n
    assert sum(s.n_clients for s in backend.stats) == n
    assert all(s.n_clients >= 2 for s in backend.stats)


def test_open_backend_and_client_range() -> None:
    pop = InMemoryPopulation({"v": np.arange(300) - 150})
    with open_backend("secure", cohort_size=40, bits=32) as be:
        assert be.name == "secure" and be.bits_per_entry  # type: ignore[truthy-function]
        out = Engine(be, RandomSource(1)).sum_round(_round(), pop, 0, client_range=(10, 211))
    plain = Engine(SerialBackend(), RandomSource(1)).sum_round(
        _round(), pop, 0, client_range=(10, 211)
    )
    np.testing.assert_array_equal(out.total, plain.total)


def test_dropouts_leave_out_exactly_the_dropped_clients() -> None:
    n = 200
    values = np.arange(n, dtype=np.int64) ** 2
    pop = InMemoryPopulation({"v": values})
    backend = SecureAggregationBackend(cohort_size=100, bits=64, dropout=0.1)
    res = Engine(backend, RandomSource(3)).sum_round(_round(10**5), pop, 0)
    # Recompute who dropped before sending a masked input (the pattern is keyed by round and cohort).
    want_v, want_n = 0, 0
    for c, (lo, hi) in enumerate(cohort_bounds(0, n, 100)):
        drops = backend._dropouts(RandomSource(3), 0, c, hi - lo)
        out = drops["advertise"] | drops["share"] | drops["masked_input"]
        keep = [lo + i for i in range(hi - lo) if i not in out]
        want_v += int(values[keep].sum())
        want_n += len(keep)
    assert 0.02 * n < n - want_n < 0.2 * n
    assert res.n_clients == want_n == res.total[2]
    assert res.total[0] == want_v


def test_overflow_refused_and_bad_options() -> None:
    pop = InMemoryPopulation({"v": np.zeros(600, dtype=np.int64)})
    with pytest.raises(OverflowRiskError):
        Engine(SecureAggregationBackend(cohort_size=600, bits=16)).sum_round(_round(100), pop, 0)
    with pytest.raises(ParameterError):
        SecureAggregationBackend(bits=8)
    with pytest.raises(ParameterError):
        SecureAggregationBackend(dropout=0.7)
    with pytest.raises(ParameterError, match="threat_model"):
        SecureAggregationBackend(threat_model="honest")
    with pytest.raises(ParameterError):
        Engine(SecureAggregationBackend()).sum_round(_round(), pop, 0, client_range=(0, 1))


def test_cohort_bounds() -> None:
    for n, size in [(2, 1000), (3, 2), (1001, 1000), (10, 3), (7, 1000)]:
        cb = cohort_bounds(5, 5 + n, size)
        assert cb[0][0] == 5 and cb[-1][1] == 5 + n
        assert all(b0 == a1 for (_, a1), (b0, _) in itertools.pairwise(cb))
        assert all(hi - lo >= 2 for lo, hi in cb)
        assert max(hi - lo for lo, hi in cb) <= max(size, 3)
