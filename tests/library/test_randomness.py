"""RandomSource and SecureGenerator: keyed reproducibility, domain separation, distributions (alpha 1e-6)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.stats

from fedstats.errors import ParameterError
from fedstats.randomness import RandomSource, SecureGenerator, as_generator

ALPHA = 1e-6
N = 200_000


def test_seeded_streams_depend_only_on_seed_and_key() -> None:
    a = RandomSource(3).generator("round", 1, "block", 2).random(5)
    b = RandomSource(3).generator("round", 1, "block", 2).random(5)
    c = RandomSource(3).generator("round", 1, "block", 3).random(5)
    d = RandomSource(4).generator("round", 1, "block", 2).random(5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)


def test_public_and_private_domains_are_separate() -> None:
    rs = RandomSource(9)
    assert not np.array_equal(rs.generator("k").random(4), rs.public("k").random(4))
    srs = RandomSource()
    assert not np.array_equal(srs.generator("k").random(4), srs.public("k").random(4))


def test_child_prefixes_keys_and_pickles() -> None:
    rs = RandomSource(5)
    np.testing.assert_array_equal(
        rs.child("run", 2).generator("x").random(3), rs.child("run", 2).generator("x").random(3)
    )
    secure = RandomSource().child("run", 1)
    clone = pickle.loads(pickle.dumps(secure))
    np.testing.assert_array_equal(clone.generator("a").random(4), secure.generator("a").random(4))
    assert not secure.reproducible and secure.release_note is None
    assert rs.release_note == "reproducible (seeded) run: not for release"


def test_bad_seeds_and_keys_are_rejected() -> None:
    with pytest.raises(ParameterError, match="seed"):
        RandomSource(-1)
    with pytest.raises(ParameterError, match="key"):
        RandomSource(1).generator(-3)
    with pytest.raises(ParameterError, match="key"):
        RandomSource(1).generator(1.5)  # type: ignore[arg-type]


def test_as_generator_accepts_the_usual_forms() -> None:
    g = np.random.default_rng(0)
    assert as_generator(g) is g
    assert isinstance(as_generator(None), SecureGenerator)
    np.testing.assert_array_equal(
        as_generator(4, "a").random(2), RandomSource(4).generator("a").random(2)
    )


@pytest.fixture()
def sg() -> SecureGenerator:
    return SecureGenerator(bytes(range(32)))


def test_secure_uniform_normal_exponential_laplace(sg: SecureGenerator) -> None:
    assert scipy.stats.kstest(sg.random(N), "uniform").pvalue > ALPHA
    assert scipy.stats.kstest(sg.standard_normal(N), "norm").pvalue > ALPHA
    assert scipy.stats.kstest(sg.normal(2.0, 3.0, size=N), "norm", args=(2.0, 3.0)).pvalue > ALPHA
    assert scipy.stats.kstest(sg.standard_exponential(N), "expon").pvalue > ALPHA
    assert (
        scipy.stats.kstest(sg.laplace(1.0, 2.0, size=N), "laplace", args=(1.0, 2.0)).pvalue > ALPHA
    )
    assert scipy.stats.kstest(sg.uniform(-2, 5, size=N), "uniform", args=(-2, 7)).pvalue > ALPHA


def test_secure_discrete_variates(sg: SecureGenerator) -> None:
    k = sg.integers(3, 10, size=N)
    assert k.min() == 3 and k.max() == 9
    assert scipy.stats.chisquare(np.bincount(k - 3)).pvalue > ALPHA
    g = sg.geometric(0.3, size=N)
    obs = np.bincount(np.minimum(g, 15))[1:]
    exp = scipy.stats.geom.pmf(np.arange(1, 15), 0.3) * N
    exp = np.append(exp, N - exp.sum())
    assert scipy.stats.chisquare(obs, exp).pvalue > ALPHA
    b = sg.binomial(10, 0.3, size=50_000)
    exp_b = scipy.stats.binom.pmf(np.arange(11), 10, 0.3) * b.size
    keep = exp_b > 5
    obs_b = np.bincount(b, minlength=11)
    assert (
        scipy.stats.chisquare(
            np.append(obs_b[keep], obs_b[~keep].sum()), np.append(exp_b[keep], exp_b[~keep].sum())
        ).pvalue
        > ALPHA
    )
    perm = sg.permutation(1000)
    assert sorted(perm.tolist()) == list(range(1000))
    c = sg.choice(5, size=N, p=[0.1, 0.2, 0.3, 0.2, 0.2])
    assert (
        scipy.stats.chisquare(np.bincount(c), np.array([0.1, 0.2, 0.3, 0.2, 0.2]) * N).pvalue
        > ALPHA
    )


def test_secure_generator_is_a_deterministic_keystream() -> None:
    a = SecureGenerator(b"\x01" * 32).random(10)
    b = SecureGenerator(b"\x01" * 32).random(10)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ParameterError, match="key"):
        SecureGenerator(b"short")


def test_binomial_quantile_equals_scipy_binom_ppf() -> None:
    """The secure generator's binomial (inversion through scipy.special, without importing scipy.stats)
    is scipy.stats.binom.ppf exactly, including u = 1, p at 0 and 1, and n up to 2^40."""
    import scipy.stats

    from fedstats.randomness import binomial_quantile

    rng = np.random.default_rng(12)
    m = 2_000
    u = rng.random(m)
    u[:50] = 1.0
    u[50:100] = np.nextafter(0.0, 1.0)
    n = np.concatenate([rng.integers(0, 50, m // 2), rng.integers(0, 2**40, m - m // 2)])
    p = rng.random(m)
    p[100:150] = 0.0
    p[150:200] = 1.0
    want = np.asarray(scipy.stats.binom.ppf(u, n, p)).astype(np.int64)
    np.testing.assert_array_equal(binomial_quantile(u, n, p), want)
    assert binomial_quantile(0.3, 10, 0.5).shape == ()


def test_splitmix64_is_the_reference_generator() -> None:
    """The one counter hash reproduces Vigna's splitmix64.c from state 0 (its first three outputs)."""
    from fedstats.randomness import SPLITMIX64_GAMMA, splitmix64

    with np.errstate(over="ignore"):
        got = splitmix64(np.arange(1, 4, dtype=np.uint64) * SPLITMIX64_GAMMA)
    assert [int(v) for v in got] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
