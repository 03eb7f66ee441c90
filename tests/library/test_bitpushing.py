"""Bit pushing (paper 001): encoding, allocation, Lemma 1 / Corollary 2 / Lemma 3 by Monte Carlo, baselines.

Monte Carlo tests draw fresh iid data in every repetition from a fixed discrete distribution, so the bit
means are known exactly and Lemma 1's variance is the exact variance of the estimator (exact allocation).
Tolerances are 6 standard errors (the SE of a sample variance from the sample fourth moment).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fedstats._numeric import largest_remainder
from fedstats.analyses.bitpushing import (
    BitEncoding,
    CodeSpec,
    affine_permutation,
    bit_means,
    bit_round,
    inclusion_probabilities,
    lemma1_variance,
    make_stage,
    mean,
    mean_protocol,
    optimal_allocation,
    rr_noise_variance,
    variance,
    weighted_probabilities,
)
from fedstats.engine import Engine, GeneratedPopulation, InMemoryPopulation
from fedstats.errors import BudgetExceededError, DataError, ParameterError
from fedstats.privacy.ledger import BitMeter, PrivacyLedger
from fedstats.randomness import RNG, RandomSource

# a discrete distribution on 4-bit codes with distinct bit means
SUPPORT = np.arange(16)
WEIGHTS = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 8, 7, 6, 5, 4, 3, 2], dtype=float)
WEIGHTS /= WEIGHTS.sum()
MU = float((SUPPORT * WEIGHTS).sum())
BIT_MEANS = np.array([float(WEIGHTS[(SUPPORT >> j) & 1 == 1].sum()) for j in range(4)])
ENC = BitEncoding(0, 15)


def _draw(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.choice(SUPPORT, size=n, p=WEIGHTS).astype(np.float64)


def _mc(fn: Callable[[np.ndarray, int], float], reps: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([fn(_draw(rng, n), r) for r in range(reps)])


def _check_mean_var(est: np.ndarray, mu: float, var: float, k: float = 6.0) -> None:
    r = est.size
    assert abs(est.mean() - mu) < k * math.sqrt(var / r), (est.mean(), mu, var)
    d = est - est.mean()
    s2 = float((d**2).mean())
    se = math.sqrt(max(float((d**4).mean()) - s2**2, 1e-300) / r)
    assert abs(s2 - var) < k * se, (s2, var, se)


def _run_basic(values: np.ndarray, seed: int, **kw: Any) -> tuple[float, np.ndarray]:
    """One basic bit-pushing run; returns (mean code, counts per bit)."""
    pop = InMemoryPopulation({"value": values})
    spec = CodeSpec.for_mean("value", ENC)
    eng = Engine(randomness=RandomSource(seed), block_size=4096)
    out: dict[str, Any] = {}

    def proto() -> Any:
        sums = yield from bit_round(
            "bits",
            spec,
            kw["p"],
            (0, values.size),
            seed,
            bits_per_client=kw.get("s", 1),
            allocation=kw.get("allocation", "exact"),
            epsilon_bit=kw.get("eps"),
        )
        out["counts"] = sums.counts
        m = bit_means(sums.counts, sums.sums, kw.get("eps"))
        return float((2.0 ** np.arange(4) * m).sum())

    est = eng.run(proto(), pop)
    return est, out["counts"]


# -- encoding ------------------------------------------------------------------------------------


def test_encoding_range_and_bits() -> None:
    enc = BitEncoding(-10.0, 10.0, resolution=0.5)
    assert enc.max_code == 40 and enc.bit_depth == 6
    codes, clipped = enc.encode(np.array([-10.0, 0.0, 10.0, 12.0]))
    assert codes.tolist() == [0, 20, 40, 40] and clipped == 1
    assert enc.decode_mean(20) == 0.0
    with pytest.raises(DataError, match="outside the declared range"):
        BitEncoding(0, 10, out_of_range="refuse").encode(np.array([1.0, 11.0]))
    with pytest.raises(ParameterError, match="bit_depth"):
        BitEncoding(0, 10, bit_depth=0)
    with pytest.raises(ParameterError, match="bit_depth"):
        BitEncoding(0, 100, bit_depth=3)  # too small for the range
    with pytest.raises(ParameterError, match="high"):
        BitEncoding(5, 5)


def test_randomized_rounding_is_unbiased() -> None:
    enc = BitEncoding(0.0, 1.0, resolution=1 / 8)
    x = np.full(200_000, 0.3)
    codes, _ = enc.encode(x, np.random.default_rng(1))
    # E[code] = 2.4, Var = 0.24 per value
    assert abs(codes.mean() - 2.4) < 6 * math.sqrt(0.24 / x.size)
    assert set(np.unique(codes)) == {2, 3}


# -- allocation and the paper's formulas ---------------------------------------------------------


def test_largest_remainder_counts_and_inclusion() -> None:
    c = largest_remainder(1000, [1, 2, 3, 4])
    assert c.sum() == 1000 and c.tolist() == [100, 200, 300, 400]
    pi = inclusion_probabilities([0.05, 0.15, 0.8], 2)
    assert abs(pi.sum() - 2) < 1e-12 and pi.max() <= 1.0 and pi[2] == 1.0
    assert np.allclose(pi[:2], [0.25, 0.75])
    with pytest.raises(ParameterError, match="bits_per_client"):
        inclusion_probabilities([0.5, 0.5, 0.0], 3)
    # a single live bit takes every report
    assert inclusion_probabilities([0, 0, 1.0, 0], 1).tolist() == [0, 0, 1.0, 0]
    assert np.allclose(inclusion_probabilities([0, 0.5, 1.0, 0], 2), [0, 1, 1, 0])


def test_affine_permutation_is_a_permutation() -> None:
    for n in (1, 2, 97, 1000, 4096):
        a, c = affine_permutation(n, 12345, "x")
        k = np.arange(n, dtype=np.int64)
        assert np.array_equal(np.sort((a * k + c) % n), k)


def test_weighted_probabilities() -> None:
    p = weighted_probabilities(4, 1.0)
    assert np.allclose(p, np.array([1, 2, 4, 8]) / 15)
    assert np.allclose(
        weighted_probabilities(3, 0.5), np.sqrt([1, 2, 4]) / np.sqrt([1, 2, 4]).sum()
    )


@pytest.mark.parametrize("eps", [None, 0.7])
def test_lemma3_allocation_is_optimal(eps: float | None) -> None:
    m = np.array([0.5, 0.3, 0.1, 0.45, 0.02])
    p_opt = optimal_allocation(m, epsilon=eps)
    beta = 4.0 ** np.arange(5) * (m * (1 - m) + rr_noise_variance(eps))
    assert np.allclose(p_opt, np.sqrt(beta) / np.sqrt(beta).sum())
    v_opt = lemma1_variance(m, p_opt, 1000, epsilon=eps)
    # the optimum equals B^2 / N (Lemma 4, Eq. (8) with delta = 0)
    assert math.isclose(v_opt, np.sqrt(beta).sum() ** 2 / 1000, rel_tol=1e-12)
    rng = np.random.default_rng(3)
    for _ in range(500):
        q = np.abs(p_opt * np.exp(rng.normal(0, 0.3, 5)))
        assert lemma1_variance(m, q, 1000, epsilon=eps) >= v_opt * (1 - 1e-12)
    # the paper's literal formula (a sum in the numerator) is not a distribution
    assert not math.isclose(float(np.full(5, np.sqrt(beta).sum() / np.sqrt(beta).sum()).sum()), 1.0)


def test_rr_debiasing_formula() -> None:
    eps = 1.3
    q = math.exp(eps) / (1 + math.exp(eps))
    m = np.array([0.0, 0.2, 0.9, 1.0])
    counts = np.full(4, 10_000)
    expected_sums = counts * ((1 - q) + (2 * q - 1) * m)
    assert np.allclose(bit_means(counts, expected_sums, eps), m)
    assert math.isclose(rr_noise_variance(eps), q * (1 - q) / (2 * q - 1) ** 2)


# -- Monte Carlo: Lemma 1 and Corollary 2 ------------------------------------------------------


@pytest.mark.parametrize(("s", "eps"), [(1, None), (1, 1.0), (2, None), (2, 0.8)])
def test_basic_exact_allocation_lemma1(s: int, eps: float | None) -> None:
    n, reps = 1500, 500
    p = np.array([0.1, 0.2, 0.3, 0.4])
    counts_seen: list[np.ndarray] = []

    def one(x: np.ndarray, r: int) -> float:
        est, counts = _run_basic(x, 1000 + r, p=p, s=s, eps=eps)
        counts_seen.append(counts)
        return est

    est = _mc(one, reps, n, seed=11 + s)
    counts = counts_seen[0]
    # exactly round(N * pi_j) clients report bit j, in every run
    pi = inclusion_probabilities(p, s)
    assert np.array_equal(counts, largest_remainder(n * s, pi / s))
    assert all(np.array_equal(c, counts) for c in counts_seen)
    per = 4.0 ** np.arange(4) * (BIT_MEANS * (1 - BIT_MEANS) + rr_noise_variance(eps))
    var = float((per / counts).sum())
    if s == 1 and eps is None:
        assert math.isclose(var, lemma1_variance(BIT_MEANS, p, n), rel_tol=1e-9)
    if s == 2:  # Corollary 2 (no capping here): N b_send p_j reports on bit j
        assert math.isclose(
            var, lemma1_variance(BIT_MEANS, p, n, bits_per_client=2, epsilon=eps), rel_tol=1e-9
        )
    _check_mean_var(est, MU, var)


@pytest.mark.parametrize("eps", [None, 1.0])
def test_basic_random_allocation(eps: float | None) -> None:
    n, reps = 1500, 500
    p = np.array([0.1, 0.2, 0.3, 0.4])

    def one(x: np.ndarray, r: int) -> float:
        return _run_basic(x, 5000 + r, p=p, allocation="random", eps=eps)[0]

    est = _mc(one, reps, n, seed=21)
    per = 4.0 ** np.arange(4) * (BIT_MEANS * (1 - BIT_MEANS) + rr_noise_variance(eps))
    lam = n * p
    inv_c = (1 + (1 - p) / lam) / lam  # E[1/c] for c ~ Binomial(n, p), to second order
    _check_mean_var(est, MU, float((per * inv_c).sum()))


@pytest.mark.parametrize(
    ("method", "eps"),
    [("adaptive", None), ("adaptive", 1.5), ("weighted", None), ("weighted", 1.0)],
)
def test_adaptive_and_weighted_unbiased_with_plugin_variance(
    method: str, eps: float | None
) -> None:
    n, reps = 1500, 400
    stage = make_stage(method, epsilon=eps)
    variances: list[float] = []

    def one(x: np.ndarray, r: int) -> float:
        eng = Engine(randomness=RandomSource(7000 + r))
        res = eng.run(
            mean_protocol(stage, "value", ENC, n, public_seed=r, method=method),
            InMemoryPopulation({"value": x}),
        )
        variances.append(res.variance)
        return res.estimate

    est = _mc(one, reps, n, seed=31)
    # the adaptive allocation depends on round 1, so compare with the average plug-in variance
    _check_mean_var(est, MU, float(np.mean(variances)))


def test_dithering_variance_is_range_squared_over_12() -> None:
    # fixed data; the estimator's randomness is the dither only: Var = 4^b / (12 n) in code units
    rng = np.random.default_rng(5)
    x = rng.integers(0, 100, 400).astype(float)
    enc = BitEncoding(0, 100)  # b = 7, power-of-two bound 128
    reps = 1500
    stage = make_stage("dithering")
    pop = InMemoryPopulation({"value": x})
    est = np.array(
        [
            Engine(randomness=RandomSource(r))
            .run(mean_protocol(stage, "value", enc, x.size, public_seed=r, method="dithering"), pop)
            .estimate
            for r in range(reps)
        ]
    )
    var = 4.0**7 / 12 / x.size
    _check_mean_var(est, float(x.mean()), var)
    res = Engine(randomness=RandomSource(1)).run(
        mean_protocol(stage, "value", enc, x.size, public_seed=1, method="dithering"), pop
    )
    assert math.isclose(res.variance, var)


def test_dithering_with_rr_variance() -> None:
    rng = np.random.default_rng(6)
    x = rng.integers(0, 16, 300).astype(float)
    eps = 1.0
    stage = make_stage("dithering", epsilon=eps)
    pop = InMemoryPopulation({"value": x})
    est = np.array(
        [
            Engine(randomness=RandomSource(r))
            .run(mean_protocol(stage, "value", ENC, x.size, public_seed=r, method="dithering"), pop)
            .estimate
            for r in range(1200)
        ]
    )
    var = 16.0**2 * (1 / 12 + rr_noise_variance(eps)) / x.size
    _check_mean_var(est, float(x.mean()), var)


@pytest.mark.parametrize("method", ["piecewise", "duchi", "laplace"])
def test_ldp_baselines_unbiased(method: str) -> None:
    rng = np.random.default_rng(8)
    x = rng.integers(0, 16, 500).astype(float)
    stage = make_stage(method, epsilon=2.0)
    pop = InMemoryPopulation({"value": x})
    runs = [
        Engine(randomness=RandomSource(r)).run(
            mean_protocol(stage, "value", ENC, x.size, public_seed=r, method=method), pop
        )
        for r in range(400)
    ]
    est = np.array([r.estimate for r in runs])
    # the reported variance is the worst case over t: an upper bound on the true one
    assert abs(est.mean() - x.mean()) < 6 * math.sqrt(runs[0].variance / est.size)
    assert est.var() < runs[0].variance * 1.3


@pytest.mark.parametrize("eps", [None, 2.0])
def test_variance_estimation_unbiased(eps: float | None) -> None:
    n, reps = 3000, 150
    sigma2 = float(((SUPPORT - MU) ** 2 * WEIGHTS).sum())
    rng = np.random.default_rng(9)
    est = []
    for r in range(reps):
        x = _draw(rng, n)
        res = variance(
            x,
            ENC,
            epsilon=eps,
            no_privacy=eps is None,
            engine=Engine(randomness=RandomSource(r)),
            truth=False,
        )
        est.append(res.estimate)
    e = np.array(est)
    assert abs(e.mean() - sigma2) < 6 * e.std() / math.sqrt(reps) + 0.01 * sigma2 / n


# -- engine integration, scale, metering, bad input ----------------------------------------------


def _gen(start: int, n: int, params: Any, rng: RNG) -> dict[str, np.ndarray]:
    return {"value": np.floor(np.asarray(rng.random(n)) * 16.0)}


def test_generated_population_blocks_and_largest_remainder() -> None:
    n = 20_011
    pop = GeneratedPopulation(n, _gen)
    eng = Engine(randomness=RandomSource(4), block_size=1000)
    res = mean(pop, ENC, method="adaptive", no_privacy=True, engine=eng)
    (c1, c2) = res.details["round_clients"]
    assert c1 == round(n / 3) and c1 + c2 == n
    assert res.bit_depth == 4 and res.details["bit_counts"].sum() == n
    assert abs(res.estimate - res.truth) < 6 * res.standard_error  # type: ignore[operator]
    assert res.ci[0] < res.estimate < res.ci[1]  # type: ignore[index]


def test_privacy_metering_and_ledger() -> None:
    x = np.arange(1000) % 16
    meter, ledger = BitMeter(), PrivacyLedger(epsilon_budget=1.0)
    res = variance(
        x,
        ENC,
        epsilon=1.0,
        bits_per_client=2,
        engine=Engine(randomness=RandomSource(1)),
        ledger=ledger,
        bit_meter=meter,
    )
    assert res.bits_per_client == 2.0 and meter.max_bits_per_client() == 2
    assert math.isclose(ledger.total().epsilon, 1.0)  # disjoint stages: parallel composition
    with pytest.raises(BudgetExceededError):
        mean(x, ENC, epsilon=0.5, engine=Engine(randomness=RandomSource(1)), ledger=ledger)
    # a refused range spends nothing and discloses nothing
    fresh, fresh_meter = PrivacyLedger(), BitMeter()
    with pytest.raises(DataError):
        mean(
            np.array([1.0, 99.0]),
            BitEncoding(0, 15, out_of_range="refuse"),
            epsilon=1.0,
            ledger=fresh,
            bit_meter=fresh_meter,
            engine=Engine(randomness=RandomSource(1)),
        )
    assert fresh.total().epsilon == 0.0 and fresh_meter.max_bits_per_client() == 0


def test_bad_input_is_rejected() -> None:
    eng = Engine(randomness=RandomSource(1))
    with pytest.raises(DataError, match="outside the declared range"):
        mean(
            np.array([1.0, 20.0, 3.0]),
            BitEncoding(0, 15, out_of_range="refuse"),
            no_privacy=True,
            engine=eng,
        )
    res = mean(np.array([1.0, 20.0, 3.0, 4.0]), ENC, no_privacy=True, engine=eng, method="weighted")
    assert res.n_clipped == 1
    with pytest.raises(DataError, match="empty"):
        mean(np.array([]), ENC, no_privacy=True, engine=eng)
    for eps in (0.0, -1.0):
        with pytest.raises(ParameterError, match="epsilon"):
            mean(np.arange(10.0), ENC, epsilon=eps, engine=eng)
    with pytest.raises(ParameterError, match="epsilon"):
        mean(np.arange(10.0), ENC, method="piecewise", no_privacy=True, engine=eng)
    with pytest.raises(ParameterError, match="epsilon"):
        mean(np.arange(10.0), ENC, engine=eng)  # no privacy choice
    with pytest.raises(ParameterError, match="method"):
        mean(np.arange(10.0), ENC, method="median", no_privacy=True, engine=eng)
    with pytest.raises(ParameterError, match="bits_per_client"):
        mean(np.arange(10.0), ENC, bits_per_client=5, no_privacy=True, engine=eng)
    with pytest.raises(DataError, match="NaN"):
        mean(np.array([1.0, np.nan]), ENC, no_privacy=True, engine=eng)


def test_squashing_removes_vacuous_bits_under_dp() -> None:
    rng = np.random.default_rng(2)
    x = np.clip(np.round(rng.normal(1000, 100, 20_000)), 0, None)
    enc = BitEncoding(0, 2**20 - 1)  # loose bound: bits 11..19 are vacuous
    err = {}
    for tau in (None, 0.15):
        e = [
            mean(
                x, enc, epsilon=3.0, squash_threshold=tau, engine=Engine(randomness=RandomSource(r))
            ).error
            for r in range(8)
        ]
        err[tau] = math.sqrt(float(np.mean(np.square(e))))
    assert err[0.15] < err[None] / 10


def test_the_normal_quantile_table_is_scipys_ndtri_to_the_bit() -> None:
    from scipy.special import ndtri

    from fedstats._numeric import _Z_TABLE
    from fedstats._numeric import two_sided_z as _z

    assert _Z_TABLE
    for confidence, z in _Z_TABLE.items():
        assert z == float(ndtri(0.5 + confidence / 2.0)), confidence
    assert _z(0.93) == float(ndtri(0.5 + 0.93 / 2.0))  # off the table: scipy
