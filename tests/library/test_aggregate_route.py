"""The aggregate route (issue 16): histograms of distinct inputs, closed-form sums, refusals.

Each aggregate form is compared with the per-client encoder by a two-sample test on the distribution of
the round's sum: means (Welch z) and variances (log variance ratio) at alpha = 1e-4 (|z| < 3.89), with
enough runs (R = 45,000 per side) that a 5% variance error gives |z| ~ 5.2 and is caught (bit pushing's
form, one call per run: 6,000 to 12,500 runs beside four times as many per-client runs, a 7-10% variance
error).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from fedstats.engine import Engine
from fedstats.engine.aggregate import (
    AggregateBackend,
    discrete_laplace_sum,
    gaussian_sum,
    laplace_sum,
    multinomial,
    randomized_response_sum,
)
from fedstats.engine.populations import (
    GeneratedPopulation,
    HistogramPopulation,
    InMemoryPopulation,
    ResampledPopulation,
)
from fedstats.engine.rounds import ClientBatch, InputHistogram, Round
from fedstats.errors import ParameterError
from fedstats.randomness import RNG, RandomSource

Z = 3.89  # two-sided alpha = 1e-4


def same_distribution(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(z of the mean difference, z of the log variance ratio) of two samples."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    z_mean = (a.mean() - b.mean()) / math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    z_var = math.log(a.var(ddof=1) / b.var(ddof=1)) / math.sqrt(2 / (a.size - 1) + 2 / (b.size - 1))
    return z_mean, z_var


def encode_rr(batch: ClientBatch, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    bit = np.asarray(batch.column("bit"), dtype=np.int64)
    flip = np.asarray(rng.random(batch.n)) >= params["keep"]
    return (bit ^ flip).astype(np.int64)[:, None]


def aggregate_rr(hist: InputHistogram, params: Mapping[str, Any], rng: RNG) -> np.ndarray:
    bit = np.asarray(hist.column("bit"), dtype=np.int64)
    ones = int(hist.counts[bit == 1].sum())
    zeros = int(hist.counts[bit == 0].sum())
    return np.atleast_1d(randomized_response_sum(rng, ones, zeros, params["keep"]))


def test_histograms_describe_the_clients() -> None:
    rng = np.random.default_rng(0)
    cols = {"a": rng.integers(0, 5, 1000), "t": rng.integers(0, 2, (1000, 2, 2))}
    pop = InMemoryPopulation(cols)
    h = pop.histogram(100, 900, RandomSource(1))
    assert h.n == 800 and h.total == 1000
    keys = [(int(a), tuple(t.ravel())) for a, t in zip(h.columns["a"], h.columns["t"], strict=True)]
    assert len(set(keys)) == h.k
    for (a, t), c in zip(keys, h.counts, strict=True):
        rows = (cols["a"][100:900] == a) & (cols["t"][100:900].reshape(800, -1) == t).all(axis=1)
        assert int(rows.sum()) == int(c)


def test_histogram_population_costs_no_memory_at_1e12() -> None:
    pop = HistogramPopulation({"age": np.array([20, 30, 40])}, np.array([10**12, 5, 2 * 10**12]))
    assert pop.n_clients == 3 * 10**12 + 5
    h = pop.histogram(10**12 - 2, 10**12 + 4, RandomSource(1))
    assert h.columns["age"].tolist() == [20, 30] and h.counts.tolist() == [2, 4]
    b = pop.block(0, 8, 10**12 - 2, 10**12 + 6, RandomSource(1))
    assert b.columns["age"].tolist() == [20, 20, 30, 30, 30, 30, 30, 40]


def test_resampled_histogram_is_multinomial_and_consistent() -> None:
    ages = np.array([20] * 6 + [30] * 3 + [40])
    pop = ResampledPopulation({"age": ages}, 10**12)
    rs = RandomSource(3)
    h = pop.histogram(0, 10**12, rs)
    assert h.n == 10**12
    again = pop.histogram(0, 10**12, rs)
    assert again.counts.tolist() == h.counts.tolist()  # a client keeps its data across rounds
    share = dict(zip(h.columns["age"].tolist(), (h.counts / 1e12).tolist(), strict=True))
    for age, p in ((20, 0.6), (30, 0.3), (40, 0.1)):
        se = math.sqrt(p * (1 - p) / 1e12)
        assert abs(share[age] - p) < Z * se


def test_multinomial_moments() -> None:
    rng = RandomSource(5).generator("t")
    p = np.array([[0.2, 0.5, 0.3]] * 20000)
    x = multinomial(rng, np.full(20000, 50), p)
    assert (x.sum(axis=1) == 50).all()
    for j, pj in enumerate(p[0]):
        se = math.sqrt(50 * pj * (1 - pj) / 20000)
        assert abs(x[:, j].mean() - 50 * pj) < Z * se


@pytest.mark.parametrize("kind", ["laplace", "discrete_laplace", "gaussian"])
def test_noise_sums_match_sums_of_draws(kind: str) -> None:
    rs = RandomSource(7)
    m, runs = 5, 45000
    g = rs.generator("per-variate")
    if kind == "laplace":
        direct = np.asarray(g.laplace(0.0, 2.0, (runs, m))).sum(axis=1)
        agg = laplace_sum(rs.generator("agg"), np.full(runs, m), 2.0)
    elif kind == "gaussian":
        direct = np.asarray(g.normal(0.0, 1.5, (runs, m))).sum(axis=1)
        agg = gaussian_sum(rs.generator("agg"), np.full(runs, m), 1.5)
    else:
        t = 3.0
        q = -math.expm1(-1 / t)
        geo = np.asarray(g.geometric(q, (2, runs, m))) - 1
        direct = (geo[0] - geo[1]).sum(axis=1)
        agg = discrete_laplace_sum(rs.generator("agg"), np.full(runs, m), t)
    zm, zv = same_distribution(direct, agg)
    assert abs(zm) < Z and abs(zv) < Z


# R = 45,000 in make test; 5,000 in make test-fast, where a 15% variance error gives |z| ~ 4.9
@pytest.mark.parametrize("runs", [pytest.param(45_000, marks=pytest.mark.slow), 5_000])
def test_rr_aggregate_equals_per_client_in_distribution(runs: int) -> None:
    n, keep = 40, 0.8
    bits = (np.arange(n) % 4 == 0).astype(np.int64)
    rs = RandomSource(11)
    # per client: the real encoder over runs x n clients in one batch
    big = ClientBatch({"bit": np.tile(bits, runs)}, 0, runs * n)
    per = encode_rr(big, {"keep": keep}, rs.generator("per")).reshape(runs, n).sum(axis=1)
    hist = InMemoryPopulation({"bit": bits}).histogram(0, n, rs)
    g = rs.generator("agg")
    agg = np.array([aggregate_rr(hist, {"keep": keep}, g)[0] for _ in range(runs)])
    zm, zv = same_distribution(per, agg)
    assert abs(zm) < Z and abs(zv) < Z


def test_engine_aggregate_route_runs_1e12_clients() -> None:
    pop = HistogramPopulation({"bit": np.array([0, 1])}, np.array([7 * 10**11, 3 * 10**11]))

    def protocol() -> Any:
        s = yield Round("rr", encode_rr, {"keep": 0.75}, aggregate=aggregate_rr)
        return s

    eng = Engine(AggregateBackend(), RandomSource(2))
    s = eng.run(protocol(), pop)
    est = (s.total[0] / 1e12 - 0.25) / 0.5  # debiased share of ones
    assert s.n_clients == 10**12
    assert abs(est - 0.3) < Z * math.sqrt(0.75 * 0.25 / 1e12) / 0.5


def test_refusals_name_the_per_client_routes() -> None:
    pop = InMemoryPopulation({"bit": np.array([0, 1, 1])})
    eng = Engine(AggregateBackend(), RandomSource(2))

    def no_form() -> Any:
        return (yield Round("rr", encode_rr, {"keep": 0.75}))

    with pytest.raises(ParameterError, match="serial"):
        eng.run(no_form(), pop)

    def gen(start: int, n: int, params: Mapping[str, Any], rng: RNG) -> dict[str, np.ndarray]:
        return {"bit": np.zeros(n, dtype=np.int64)}

    with pytest.raises(ParameterError, match="distinct inputs"):
        eng.run(no_form_with_aggregate(), GeneratedPopulation(3, gen))

    def overlapping() -> Any:
        yield Round("a", encode_rr, {"keep": 0.75}, client_range=(0, 2), aggregate=aggregate_rr)
        yield Round("b", encode_rr, {"keep": 0.75}, client_range=(1, 3), aggregate=aggregate_rr)

    with pytest.raises(ParameterError, match="overlap"):
        Engine(AggregateBackend(), RandomSource(2)).run(overlapping(), pop)


def no_form_with_aggregate() -> Any:
    return (yield Round("rr", encode_rr, {"keep": 0.75}, aggregate=aggregate_rr))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("allocation", "bits_per_client"), [("exact", 1), ("random", 1), ("exact", 2), ("random", 3)]
)
def test_bit_pushing_aggregate_form_matches_its_encoder(
    allocation: str, bits_per_client: int
) -> None:
    """Bit pushing's round sum: per-client encoder vs aggregate form, i.i.d. clients, every coordinate
    (one bit per client, and Corollary 2's several distinct bits per client)."""
    from fedstats.analyses.bitpushing.bit_stages import bit_round
    from fedstats.analyses.bitpushing.client import aggregate_bits, encode_bits
    from fedstats.analyses.bitpushing.stages import CodeSpec

    spec = CodeSpec("x", 0.0, 15.0, "clip", 0.0, 1.5, 10, 4, None)  # randomized rounding: 1.5 units
    # one aggregate_bits call per run (about 1 ms each; 105,000 calls were this file's 184 s of the
    # suite), the per-client encoder vectorized (about 20 ms per 1,000 runs): so four times as many
    # per-client runs as aggregate ones. The two-sample z statistics' variances go as 1 / R_agg + 1 / R_per,
    # the same as with 20,000 (10,000) runs on each side: (12,500, 50,000) for the default (exact, one
    # bit), where a 7% error in a bit's variance gives |z| ~ 5 (Bonferroni bound 4.69) and a mean off by
    # 0.05 SD |z| ~ 5; (6,000, 30,000) for the other three (a 10% variance error, a 0.07 SD mean
    # error). A wrong form (a missing randomized-response flip, the allocation's counts or a slot class
    # drawn wrongly) moves a bit's variance by far more
    n = 60
    runs, per_runs = (
        (12500, 50000) if (allocation, bits_per_client) == ("exact", 1) else (6000, 30000)
    )
    rnd = next(
        bit_round(
            "r",
            spec,
            [0.1, 0.2, 0.3, 0.4],
            (0, n),
            7,
            allocation=allocation,
            epsilon_bit=1.0,
            bits_per_client=bits_per_client,
        )
    )
    values = np.array([0.0, 4.0, 9.5, 15.0])
    probs = np.array([0.1, 0.4, 0.3, 0.2])
    rs = RandomSource(13)
    g, p = rs.generator("data"), rs.generator("per")
    # exact allocation: the public permutation of positions repeats in every block of n clients; in
    # chunks of 10,000 runs (at most about 80 MB at once), each starting at a block
    chunk, sums = 10000, []
    for start in range(0, per_runs, chunk):
        m = min(chunk, per_runs - start)
        x = values[np.asarray(g.choice(values.size, size=m * n, p=probs))]
        per = encode_bits(ClientBatch({"x": x}, start * n, per_runs * n), rnd.params, p)
        sums.append(per.astype(np.int64).reshape(m, n, -1).sum(axis=1))
    per_sums = np.concatenate(sums)
    a = rs.generator("agg")
    counts = np.asarray(rs.generator("cohorts").multinomial(n, probs, size=runs))
    agg_sums = np.array(
        [
            aggregate_bits(
                InputHistogram({"x": values}, c, n, ({"x": values}, probs)), rnd.params, a
            )
            for c in counts
        ]
    )
    z = Z + 0.8  # Bonferroni over up to 16 comparisons: two-sided alpha 1e-4 / 16
    for j in range(per_sums.shape[1]):
        if per_sums[:, j].var() == 0 or agg_sums[:, j].var() == 0:  # a bit every client reports
            assert (per_sums[:, j] == agg_sums[0, j]).all() and (
                agg_sums[:, j] == agg_sums[0, j]
            ).all()
            continue
        zm, zv = same_distribution(per_sums[:, j], agg_sums[:, j])
        assert abs(zm) < z and abs(zv) < z, (j, zm, zv)


def test_exact_analyses_give_the_same_sum_on_the_aggregate_route() -> None:
    """Deterministic encoders: the aggregate form is exact (not only equal in distribution)."""
    from fedstats.analyses.exact import chi_square_protocol, mean_protocol

    rng = np.random.default_rng(4)
    tables = rng.integers(0, 3, size=(500, 2, 3))
    pop = InMemoryPopulation.from_tables(tables)
    plain = Engine(randomness=RandomSource(1)).run(chi_square_protocol((2, 3), max_cell=2), pop)
    agg = Engine(AggregateBackend(), RandomSource(1)).run(
        chi_square_protocol((2, 3), max_cell=2), pop
    )
    assert agg.estimate == plain.estimate
    ages = HistogramPopulation(
        {"age": np.array([20.5, 31.0, 64.25])}, np.array([10**12, 3, 2 * 10**12])
    )
    m = Engine(AggregateBackend(), RandomSource(1)).run(mean_protocol("age", clip=128.0), ages)
    assert m.n_clients == 3 * 10**12 + 3
    assert abs(m.estimate - (20.5 * 1e12 + 93.0 + 64.25 * 2e12) / (3e12 + 3)) < 1e-9


def test_a_secure_source_draws_binomials_from_a_numpy_generator_keyed_by_its_stream() -> None:
    """Seeded: the run's own numpy generator (results unchanged); secure: one keyed from the stream,
    reproducible from the stream's key and Binomial(n, p) at 10^12 trials."""
    from fedstats.engine.aggregate import binomial, simulation_generator

    seeded = RandomSource(4).generator("t")
    assert simulation_generator(seeded) is seeded
    key = bytes(range(32))
    a = binomial(RandomSource(None, _master=key).generator("t"), np.full(4000, 10**12), 0.3)
    b = binomial(RandomSource(None, _master=key).generator("t"), np.full(4000, 10**12), 0.3)
    assert (a == b).all()
    n, p = 10**12, 0.3
    sd = math.sqrt(n * p * (1 - p))
    z_mean = (a.mean() - n * p) / (sd / math.sqrt(a.size))
    z_var = math.log(a.var(ddof=1) / sd**2) / math.sqrt(2 / (a.size - 1))
    assert abs(z_mean) < Z and abs(z_var) < Z
    secure = RandomSource(None, _master=key)
    h = ResampledPopulation({"age": np.array([20] * 6 + [30] * 3 + [40])}, 10**12).histogram(
        0, 10**12, secure
    )
    assert int(h.counts.sum()) == 10**12
    share = dict(zip(h.columns["age"].tolist(), (h.counts / 1e12).tolist(), strict=True))
    for age, q in ((20, 0.6), (30, 0.3), (40, 0.1)):
        assert abs(share[age] - q) < Z * math.sqrt(q * (1 - q) / 1e12)
