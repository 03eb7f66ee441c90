"""SAFFRON online FDR control: hand-computed levels from the definition, and FDR control by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats

from fedstats.analyses.fdr import (
    OnlineSaffron,
    discovery_counts,
    false_discovery_proportion,
    saffron,
    saffron_gamma,
    true_discovery_rate,
)
from fedstats.errors import DataError, ParameterError

ALPHA, W0, LAM = 0.05, 0.0125, 0.5


def _g(j: int) -> float:
    z = sum(k**-1.6 for k in range(1, 10_002))
    return j**-1.6 / z


def test_gamma_paper_normalisation() -> None:
    g = saffron_gamma(10_003)
    assert g[:10_001].sum() == pytest.approx(1.0, abs=1e-12)
    assert g[10_001:].tolist() == [0.0, 0.0]
    assert np.all(np.diff(g[:10_001]) < 0)
    assert g[0] == pytest.approx(_g(1), rel=1e-12)
    gi = saffron_gamma(5, normalization="infinite")
    assert gi[0] == pytest.approx(1.0 / float(scipy.special.zeta(1.6, 1)), rel=1e-12)


def test_levels_by_hand_reject_skip_reject() -> None:
    # t=1: alpha_1 = (1-lam) W0 g1; p=0 is rejected (tau_1 = 1, C_1 = 1)
    # t=2: C_0+ = 1, C_1+ = 0 -> (1-lam)(W0 g(2-1) + (a-W0) g(2-1-0)) = (1-lam) a g1; p=1 not a candidate
    # t=3: C_0+ = 1, C_1+ = 0 -> (1-lam)(W0 g(3-1) + (a-W0) g(3-1-0)) = (1-lam) a g2
    res = saffron([0.0, 1.0, 0.0])
    expect = [(1 - LAM) * W0 * _g(1), (1 - LAM) * ALPHA * _g(1), (1 - LAM) * ALPHA * _g(2)]
    np.testing.assert_allclose(res.alpha, expect, rtol=1e-12)
    assert res.rejected.tolist() == [True, False, True]
    assert res.candidate.tolist() == [True, False, True]


def test_levels_by_hand_candidates_do_not_age_wealth() -> None:
    # p = 0.3 is a candidate (<= lambda) but not rejected; candidates freeze the index t - C_0+.
    p = [0.3, 0.3, 0.9, 0.0, 0.3, 0.0, 0.7]
    res = saffron(p)
    a = res.alpha
    # t=1..3: no rejection; indices t - C_0+ = 1, 2 - 1 = 1, 3 - 2 = 1
    np.testing.assert_allclose(a[:3], [(1 - LAM) * W0 * _g(1)] * 3, rtol=1e-12)
    # t=4: C_0+ = 2 -> index 2
    assert a[3] == pytest.approx((1 - LAM) * W0 * _g(2), rel=1e-12)
    assert res.rejected[:4].tolist() == [False, False, False, True]
    # after tau_1 = 4 (candidates through t=4: 3): t=5: C_0+=3 -> g(2); C_1+=0 -> g(5-4-0)=g(1)
    assert a[4] == pytest.approx((1 - LAM) * (W0 * _g(2) + (ALPHA - W0) * _g(1)), rel=1e-12)
    # t=6: C_0+=4 -> g(2); C_1+=1 -> g(6-4-1)=g(1); p=0 -> second rejection tau_2 = 6
    assert a[5] == pytest.approx((1 - LAM) * (W0 * _g(2) + (ALPHA - W0) * _g(1)), rel=1e-12)
    assert res.rejected[5]
    # t=7: C_0+=5 -> g(2); C_1+=2 -> g(7-4-2)=g(1); C_2+=0 -> g(7-6)=g(1)
    assert a[6] == pytest.approx(
        (1 - LAM) * (W0 * _g(2) + (ALPHA - W0) * _g(1) + ALPHA * _g(1)), rel=1e-12
    )


def test_level_capped_at_lambda() -> None:
    res = saffron([0.0] * 30, alpha=0.9, w0=0.9, lambda_=0.05)
    assert np.all(res.alpha <= 0.05 + 1e-15)
    assert res.alpha.max() == pytest.approx(0.05)


def test_online_matches_batch() -> None:
    rng = np.random.default_rng(3)
    p = np.where(rng.random(400) < 0.5, rng.random(400), rng.random(400) ** 8)
    batch = saffron(p)
    online = OnlineSaffron()
    got = [online.test(float(v)) for v in p]
    assert got == batch.rejected.tolist()
    assert online.n_rejections == batch.n_rejections


def test_fdr_controlled_on_independent_nulls() -> None:
    """Mean FDP over runs stays below alpha (+ 5 standard errors); power is substantial."""
    rng = np.random.default_rng(20261120)
    # 20 runs, not 60 (each is 3,000 sequential tests, 0.25 s): the FDP's sd over runs is 0.006-0.009, so
    # the bound is alpha + 0.006 either way (0.0563 with 20 runs, 0.0557 with 60, mean FDP 0.045-0.047):
    # an FDR above about 0.06 fails it
    runs, n = 20, 3000
    fdps, tdrs = [], []
    for _ in range(runs):
        null = rng.random(n) < 0.6
        z = rng.normal(3.0, 1.0, n)
        p = np.where(null, rng.random(n), scipy.stats.norm.sf(z))
        res = saffron(p)
        fdps.append(false_discovery_proportion(res.rejected, null))
        tdrs.append(true_discovery_rate(res.rejected, null))
    fdp = np.asarray(fdps)
    se = fdp.std(ddof=1) / math.sqrt(runs)
    assert fdp.mean() <= ALPHA + 5 * se
    assert np.mean(tdrs) > 0.5


def test_all_null_stream_rarely_rejects() -> None:
    rng = np.random.default_rng(11)
    total = sum(saffron(rng.random(2000)).n_rejections for _ in range(20))
    # FDR = P(any rejection) for all-null streams; <= alpha, so at most a few runs reject anything
    assert total <= 20


def test_counts_and_rates() -> None:
    rej = np.array([True, True, False, False, True])
    null = np.array([True, False, False, True, False])
    assert discovery_counts(rej, null) == {
        "should_reject": 3,
        "should_accept": 2,
        "correct_reject": 2,
        "false_reject": 1,
    }
    assert false_discovery_proportion(rej, null) == pytest.approx(1 / 3)
    assert true_discovery_rate(rej, null) == pytest.approx(2 / 3)
    assert false_discovery_proportion(np.zeros(3, bool), np.ones(3, bool)) == 0.0


def test_bad_input() -> None:
    with pytest.raises(DataError):
        saffron([0.1, float("nan")])
    with pytest.raises(DataError):
        saffron([1.5])
    with pytest.raises(DataError):
        saffron([])
    with pytest.raises(ParameterError):
        saffron([0.1], w0=0.2)  # w0 > alpha
    with pytest.raises(ParameterError):
        saffron([0.1], lambda_=1.0)
    with pytest.raises(ParameterError):
        saffron_gamma(3, exponent=1.0)
    with pytest.raises(DataError):
        OnlineSaffron().test(-0.1)
