"""The exact samplers' own code, enumerated on 16-bit words, against exact (rational / 60-digit) values.

Every random decision of ``fedstats.privacy.mechanisms.samplers`` (and of ``exact_bernoulli`` and ``words``,
which it builds on) is a uniform integer by rejection or the event R < p for a lazily drawn uniform R. These tests feed the same functions 16-bit words (an injected
``WordSource``), enumerate every word a decision can see, and compare the resulting probabilities with
exact ones: rationals (:class:`fractions.Fraction`) where the probability is rational, brackets of width
2^-32 from two enumerated word levels against 60-digit mpmath values where it is e^-x. The composite pmf is
then assembled from the enumerated components through the samplers' own assembly functions and compared
with the exact discrete Laplace / Gaussian pmf, including scales 1 and 2^40.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import scipy.stats as st

from fedstats.privacy.mechanisms import LaplaceMechanism, sample_discrete_gaussian
from fedstats.privacy.mechanisms import exact_bernoulli as eb
from fedstats.privacy.mechanisms import samplers as sm

B = 16


@pytest.fixture(autouse=True, scope="module")
def _mp_precision() -> Iterator[None]:
    """60 digits for this module's tests only (a module-level setting leaked into the next module)."""
    with mpmath.workdps(60):
        yield


class Scripted:
    """A WordSource of ``bits``-bit words: scripted words first, then a seeded generator's."""

    def __init__(
        self, script: list[np.ndarray] | None = None, bits: int = B, seed: int = 0
    ) -> None:
        self.bits = bits
        self.script = list(script or [])
        self.rng = np.random.default_rng(seed)

    def words(self, n: int) -> np.ndarray:
        if self.script:
            w = np.asarray(self.script.pop(0), dtype=np.uint64).copy()
            assert w.size == n
            return w
        return self.rng.integers(0, 2**self.bits, size=n, dtype=np.uint64)


ALL = np.arange(2**B, dtype=np.uint64)


# -- uniform integers ----------------------------------------------------------------------------------
@pytest.mark.parametrize("m", [2, 3, 1000, 2**16 - 1, 2**16])
def test_uniform_below_one_attempt_is_exactly_uniform(m: int) -> None:
    length = (m - 1).bit_length()
    words = ALL[: 2**length]
    out = sm.uniform_below(m, words.size, Scripted([words]))
    accepted = words < m  # the first attempt: masked word, accepted below m
    assert np.array_equal(out[accepted], words[accepted].astype(np.int64))
    counts = np.bincount(out[accepted], minlength=m)
    assert counts.size == m and np.all(
        counts == 1
    )  # each value exactly once: P = 1/m, all reachable
    assert np.all((out >= 0) & (out < m))


@pytest.mark.parametrize("m", [2**16 + 1, 3 * 2**20 + 7, 2**40 + 3])
def test_uniform_below_multiword_structure(m: int) -> None:
    """Above one word, word i supplies bits 16 i and up: the attempt is a bijection onto [0, 2^L)."""
    length = (m - 1).bit_length()
    k = -(-length // B)
    rng = np.random.default_rng(m)
    for i in range(k):  # enumerate word i over all values, the others fixed
        fixed = [rng.integers(0, 2**B, dtype=np.uint64) for _ in range(k)]
        script = [np.full(2**B, fixed[j], dtype=np.uint64) if j != i else ALL for j in range(k)]
        raw = sum(int(fixed[j]) << (B * j) for j in range(k) if j != i)
        expected = (raw + (ALL.astype(object) << (B * i))) & ((1 << length) - 1)
        ok = np.array([e < m for e in expected])
        out = sm.uniform_below(m, 2**B, Scripted(script, seed=i))
        assert all(int(o) == int(e) for o, e in zip(out[ok], expected[ok], strict=True))
        assert len({int(e) for e in expected}) == 2 ** min(B, length - B * i)  # all bits reach
        assert {int(o) for o in out[ok]} == {int(e) for e in expected[ok]}
    assert sm.uniform_below(m, 1, Scripted()).dtype == np.int64


# -- R < p ---------------------------------------------------------------------------------------------
def prob_less(p_digits: sm.DigitsFn, levels: int = 2) -> tuple[Fraction, Fraction]:
    """P(R < p) by enumerating every word of the first ``levels`` levels of _LazyUniform: (low, high).

    Mirrors ``_LazyUniform.less``: at level L the known prefix r (L words) is true when r < floor(p 2^n),
    false when above (or equal with p 2^n an integer), else one more word is drawn.
    """
    low = Fraction(0)
    prefixes = np.array([0], dtype=np.int64)  # before the first word: the empty prefix
    for level in range(levels):
        words = (prefixes[:, None] << B) | np.arange(2**B, dtype=np.int64)[None, :]
        d, exact = p_digits(B * (level + 1))
        low += Fraction(int((words < d).sum()), 2 ** (B * (level + 1)))
        prefixes = words[words == d] if not exact else np.array([], dtype=np.int64)
        if not prefixes.size:
            break
    return low, low + Fraction(int(prefixes.size), 2 ** (B * levels))


@pytest.mark.parametrize("p", [Fraction(1, 3), Fraction(12345, 2**20), Fraction(2**16 - 1, 2**16)])
def test_lazy_comparison_with_a_rational_is_exact(p: Fraction) -> None:
    low, high = prob_less(eb._rational_digits(p))
    assert low <= p <= high and high - low <= Fraction(1, 2**32)
    if p.denominator & (p.denominator - 1) == 0 and p.denominator <= 2**32:  # dyadic: exactly p
        assert low == high == p


def test_certified_bernoulli_first_word_decisions_are_exact() -> None:
    """Every word the float filter decides is decided correctly; the rest go to the exact comparison."""
    rng = np.random.default_rng(3)
    for p in [
        Fraction(int(a), int(b))
        for a, b in zip(rng.integers(1, 2**40, 12), [2**40 + 9] * 12, strict=True)
    ]:
        g = np.full(2**B, float(p))
        err = np.full(2**B, abs(float(p) - p) * 1.0)
        src = Scripted([ALL])
        calls = []
        res = eb._bernoulli_certified(g, err, lambda i, p=p, calls=calls: calls.append(i) or p, src)  # type: ignore[func-returns-value]
        decided = np.setdiff1d(np.arange(2**B), calls)
        truth = (ALL.astype(np.int64) + 1) * p.denominator <= p.numerator << B
        assert np.array_equal(res[decided], truth[decided])
        assert (
            len(calls) <= 2
        )  # only the word containing p (and a neighbour at the slack) is undecided
        for i in calls:  # its exact continuation, enumerated, gives P(R < p | cell) = 2^16 p - w
            w = i
            cond = p * 2**B - w
            if 0 < cond < 1:
                lo, hi = prob_less(
                    lambda n, w=w, p=p: eb._rational_digits(p * 2**B - w)(n), levels=2
                )
                assert lo <= cond <= hi and hi - lo <= Fraction(1, 2**32)


# -- Algorithm 1: Bernoulli(exp(-gamma)) ---------------------------------------------------------------
def test_algorithm1_chain_outputs_parity_of_first_failure() -> None:
    """Scripted trials: word 0 makes R < gamma/K true, word 2^16 - 1 false; the output is [K odd]."""
    for kstar in range(1, 9):
        script = [np.array([0])] * (kstar - 1) + [np.array([2**B - 1])]
        out = eb._bernoulli_exp_small(
            np.array([0.9]), np.array([1e-16]), lambda i: Fraction(9, 10), Scripted(script)
        )
        assert bool(out[0]) == (kstar % 2 == 1)


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 7), Fraction(1, 2), Fraction(1)])
def test_algorithm1_probability_is_exp_minus_gamma(gamma: Fraction) -> None:
    """P(K = k) = prod_{j<k} (gamma/j) (1 - gamma/k) (each trial exactly gamma/j, tests above), summed
    over odd k with Fractions, is e^-gamma to 50 digits."""
    total, reach = Fraction(0), Fraction(1)
    for k in range(1, 60):
        if k % 2 == 1:
            total += reach * (1 - gamma / k)
        reach *= gamma / k
    assert (
        abs(
            mpmath.mpf(total.numerator) / total.denominator
            - mpmath.exp(-mpmath.mpf(gamma.numerator) / gamma.denominator)
        )
        < mpmath.mpf(10) ** -50
    )


# -- the geometric part: P(W >= w) = e^(-w/d) ----------------------------------------------------------
@pytest.mark.parametrize("denominator", [1, 16])
def test_geometric_inversion_enumerated(denominator: int) -> None:
    table = eb._geometric_table(B, denominator)
    for v, d in enumerate(table, start=1):  # the table against 60 digits
        assert d == int(mpmath.floor(mpmath.exp(-mpmath.mpf(v) / denominator) * 2**B))
    out = sm.sample_geometric_exp(2**B, Scripted([ALL], seed=denominator), denominator)
    w = ALL.astype(np.int64)
    for v in [*range(1, 8), *range(8, table.size + 2, 23), table.size, table.size + 1]:
        ev = mpmath.exp(-mpmath.mpf(v) / denominator)
        tie = w == (table[v - 1] if v <= table.size else 0)
        # words below D_v give V >= v, words above give V < v, exactly
        assert np.all(out[(w < (table[v - 1] if v <= table.size else 0))] >= v)
        assert np.all(out[~tie & (w > (table[v - 1] if v <= table.size else -1))] < v)
        # the tie word's continuation, enumerated over a second word: P(V >= v) bracketed to 2^-32
        lo, hi = prob_less(eb._exp_digits(Fraction(v, denominator)), levels=2)
        assert (
            mpmath.mpf(lo.numerator) / lo.denominator
            <= ev
            <= mpmath.mpf(hi.numerator) / hi.denominator
        )
        assert hi - lo <= Fraction(1, 2**32)
    reached = set(np.unique(out).tolist())
    missing = set(range(table.size + 1)) - reached
    # a value missing from the first-word enumeration is reachable through a tie continuation: its two
    # thresholds leave no whole word strictly between them (D_v - D_{v+1} <= 1), the continuation of the
    # tie word reaches it with positive probability
    padded = np.append(table, 0)
    assert all(padded[v - 1] - padded[v] <= 1 for v in missing)


# -- assembly: discrete Laplace ------------------------------------------------------------------------
def dlap_pmf_from_components(t: int, s: int, ys: range) -> dict[int, mpmath.mpf]:
    """pmf of the sampler's output from its components and its own assembly function ``_laplace_magnitude``.

    Components (verified above): U uniform on [0, t) accepted w.p. e^{-U/(t 2^K)}, W with
    P(W = w) = e^{-w/2^K}(1 - e^{-1/2^K}), sign fair, (-, 0) rejected. The magnitude's preimage is found by
    running ``_laplace_magnitude`` on the boundary pairs (u, w); inside, x = u + t w is contiguous.
    """
    k2 = 1 << sm._K
    qx = mpmath.exp(-mpmath.mpf(1) / (t * k2))  # weight of x = u + t w is qx^x (up to a constant)
    pmag = {}
    for y in sorted({abs(v) for v in ys}):
        lo_x, hi_x = y * s * k2, (y + 1) * s * k2  # claimed preimage [lo_x, hi_x)
        for x in (lo_x, hi_x - 1):
            got = sm._laplace_magnitude(np.array([x % t]), np.array([x // t]), t, s)[0]
            assert got == y
        if lo_x > 0:
            x = lo_x - 1
            assert sm._laplace_magnitude(np.array([x % t]), np.array([x // t]), t, s)[0] == y - 1
        pmag[y] = qx**lo_x * (1 - qx ** (hi_x - lo_x))  # (1 - qx) cancels on normalizing
    total0 = pmag.get(0, mpmath.mpf(0))
    norm = 2 * sum((pmag[y] for y in pmag if y > 0), mpmath.mpf(0)) + total0
    # normalize with the closed form of the whole magnitude series: sum_y qx^(y s 2^K)(1 - qx^(s 2^K))
    z = 1 - qx ** (s * k2)
    full = z + 2 * qx ** (s * k2)
    assert norm <= full
    return {y: pmag[abs(y)] / full for y in ys}


@pytest.mark.parametrize(
    "scale", [Fraction(1), Fraction(3, 2), Fraction(0.3), Fraction(2**20), Fraction(2**40)]
)
def test_discrete_laplace_pmf_is_exact(scale: Fraction) -> None:
    t, s = sm._laplace_parts(scale)
    ys = range(-6, 7) if scale < 10 else range(-3, 4)
    probe = [int(y * scale) if scale >= 10 else y for y in ys]
    pmf = dlap_pmf_from_components(t, s, range(min(probe), max(probe) + 1)) if scale < 10 else None
    q = mpmath.exp(-mpmath.mpf(scale.denominator) / scale.numerator)
    exact = lambda y: (1 - q) / (1 + q) * q ** abs(y)  # noqa: E731
    if pmf is not None:
        for y, p in pmf.items():
            assert abs(p / exact(y) - 1) < mpmath.mpf(10) ** -40, (y, p, exact(y))
    else:  # large scales: the pmf at a spread of integers, and every integer in range reachable
        pm = dlap_pmf_from_components(t, s, range(-2, 3))
        for y, p in pm.items():
            assert abs(p / exact(y) - 1) < mpmath.mpf(10) ** -40
        for y in probe:
            pm = dlap_pmf_from_components(t, s, range(abs(y), abs(y) + 1))
            assert abs(pm[abs(y)] / exact(y) - 1) < mpmath.mpf(10) ** -40


def test_laplace_mechanism_epsilon_one_is_exactly_pure() -> None:
    """LaplaceMechanism(epsilon=1): from the enumerated pmf, the privacy loss is exactly (1, 0)."""
    mech = LaplaceMechanism(epsilon=1.0, sensitivity=1.0)
    delta_int = mech.integer_sensitivity
    scale = Fraction(mech.integer_scale)
    assert scale == delta_int  # exactly 2^20
    t, s = sm._laplace_parts(scale)
    ys = list(range(-3, 4)) + [delta_int * j + r for j in (1, 5, 40) for r in (-1, 0, 1)]
    losses = []
    for y in ys:  # neighbouring inputs 0 and delta_int: outputs y (noise y vs y - delta_int)
        a = dlap_pmf_from_components(t, s, range(y, y + 1))[y]
        b = dlap_pmf_from_components(t, s, range(y - delta_int, y - delta_int + 1))[y - delta_int]
        assert a > 0 and b > 0  # every integer reachable from both inputs: delta = 0
        losses.append(abs(mpmath.log(a) - mpmath.log(b)))
    assert abs(max(losses) - 1) < mpmath.mpf(10) ** -40
    assert mech.privacy_loss().epsilon == 1.0 and mech.privacy_loss().delta == 0.0


# -- assembly: discrete Gaussian -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "sigma2", [Fraction(1), Fraction(9, 100), Fraction(2.5e5), Fraction(2**80)]
)
def test_discrete_gaussian_acceptance_is_exact(sigma2: Fraction) -> None:
    """Algorithm 3 with the sampler's own exponent: the float filter brackets the exact rational gamma,
    and DLap(t) weight times e^-gamma is the discrete Gaussian pmf (60 digits)."""
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1
    sigma = mpmath.sqrt(mpmath.mpf(sigma2.numerator) / sigma2.denominator)
    span = [0, 1, 2, 3, t - 1, t, t + 1, 2 * t, 7 * t, 40 * t]
    y = np.array(sorted(set(span + [-v for v in span])), dtype=np.int64)
    g, err, exact = sm._gaussian_gamma(y, sigma2, t)
    ratios = []
    for i, yi in enumerate(y):
        gam = exact(i)
        assert gam == (abs(int(yi)) - sigma2 / t) ** 2 / (2 * sigma2)
        assert abs(Fraction(float(g[i])) - gam) <= Fraction(float(err[i]))  # the filter is sound
        w = mpmath.exp(-mpmath.mpf(abs(int(yi))) / t) * mpmath.exp(
            -mpmath.mpf(gam.numerator) / gam.denominator
        )
        ratios.append(w / mpmath.exp(-(mpmath.mpf(int(yi)) ** 2) / (2 * sigma**2)))
    assert (
        max(ratios) / min(ratios) - 1 < mpmath.mpf(10) ** -40
    )  # proportional to e^{-y^2/(2 sigma^2)}


def test_sixteen_bit_words_end_to_end() -> None:
    """The whole sampler on 16-bit words (every lazy continuation exercised often) matches the law."""
    src = Scripted(seed=11)
    x = sample_discrete_gaussian(20.0, 100_000, None, words=src)
    ks = np.arange(-200, 201)
    w = np.exp(-(ks.astype(float) ** 2) / 40.0)
    p = w / w.sum()
    counts = np.bincount(x + 200, minlength=401)
    keep = p * x.size >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(p[keep], p[~keep].sum()) * x.size
    assert st.chisquare(obs, exp).pvalue > 1e-6
    y = sm.sample_discrete_laplace(Fraction(7, 2), 100_000, None, words=Scripted(seed=12))
    q = math.exp(-2 / 7)
    ks = np.arange(-80, 81)
    p = (1 - q) / (1 + q) * q ** np.abs(ks)
    counts = np.bincount(np.clip(y, -80, 80) + 80, minlength=161)
    assert st.chisquare(counts, p / p.sum() * y.size).pvalue > 1e-6
