"""The released dispersion and Cochran's Q are unbiased; paper 000's plug-ins are biased up (issue 26).

Round 2 centres on the noisy, clipped centres of round 1, so the plug-ins carry the expected squared error
of those centres: ``D'' = D + ||mu' - mu||^2 + Z_D`` and ``Q'' = Q + W ||mubar' - mubar||^2 + Z_Q``. The
released estimates subtract that expectation (``accuracy.dispersion_excess``,
``accuracy.weighted_mean_excess``). Bias is judged by seeded Monte Carlo: ``z = mean error / (sd / sqrt
runs)``; an unbiased estimator has ``|z| <= 3`` except with probability 0.27% (normal approximation over
400 runs), a biased one fails once its bias exceeds about 3 standard errors. The data are synthetic vectors
chosen to exercise the clipping: one coordinate always 0, one rarely 1, one squeezed towards 0.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedstats.analyses.heterogeneity import heterogeneity
from fedstats.analyses.heterogeneity.accuracy import (
    clipped_centre_sq_error,
    clipped_error_moments,
    dispersion_excess,
    weighted_mean_excess,
)
from fedstats.randomness import RandomSource

RUNS = 400
Z_BOUND = 3.0


def _vectors(n: int = 200, d: int = 8) -> np.ndarray:
    rng = np.random.default_rng(7)
    x = rng.beta(0.6, 0.6, (n, d))
    x[:, 0] = 0.0  # a border pixel: the clipping halves its excess
    x[:, 1] = (rng.random(n) < 0.05) * 1.0
    x[: n // 2, 2] *= 0.2
    return x


def _z(err: np.ndarray) -> float:
    return float(err.mean() / (err.std(ddof=1) / math.sqrt(err.size)))


class _Runs(dict[float, dict[str, np.ndarray]]):
    """Per epsilon, run on first use: debiased (unclamped) and plug-in errors of D and Q, coverage, over
    RUNS seeded runs (so that make test-fast, which selects epsilon 1 only, runs 400 of them, not 800)."""

    def __missing__(self, eps: float) -> dict[str, np.ndarray]:
        self[eps] = _monte_carlo(eps)
        return self[eps]


@pytest.fixture(scope="module")
def runs() -> _Runs:
    return _Runs()


# epsilon 1 in make test-fast: its plug-ins' bias is the larger (z = 5.0 for D and 11.5 for Q over the 400
# runs, against 3.8 and 8.6 at epsilon 2), so it shows best that the unbiasedness check can fail; epsilon 2
# runs in make test
EPS = [1.0, pytest.param(2.0, marks=pytest.mark.slow)]


def _monte_carlo(eps: float) -> dict[str, np.ndarray]:
    x = _vectors()
    rows = []
    for s in range(RUNS):
        r = heterogeneity(x, epsilon=eps, delta=1e-5, randomness=RandomSource(7000 + s))
        assert r.dispersion is not None and r.q is not None and r.i2 is not None
        td, tq = float(r.dispersion.truth or 0.0), float(r.q.truth or 0.0)
        rows.append(
            [
                r.dispersion.details["unclipped_estimate"] - td,
                r.dispersion.details["plugin_unclipped"] - td,
                r.q.details["unclipped_estimate"] - tq,
                r.q.details["plugin_unclipped"] - tq,
                bool(r.dispersion.covers()),
                bool(r.q.covers()),
                bool(r.i2.covers()),
            ]
        )
    a = np.asarray(rows, dtype=np.float64)
    return {
        "dispersion": a[:, 0],
        "dispersion_plugin": a[:, 1],
        "q": a[:, 2],
        "q_plugin": a[:, 3],
        "cover": a[:, 4:].mean(axis=0),
    }


@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("stat", ["dispersion", "q"])
def test_released_estimate_is_unbiased(runs: _Runs, eps: float, stat: str) -> None:
    z = _z(runs[eps][stat])
    assert abs(z) <= Z_BOUND, (stat, eps, z)


@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("stat", ["dispersion", "q"])
def test_paper_plugin_is_biased_up(runs: _Runs, eps: float, stat: str) -> None:
    """The same runs show the plug-in's upward bias: the test above can fail."""
    z = _z(runs[eps][f"{stat}_plugin"])
    assert z > Z_BOUND, (stat, eps, z)


@pytest.mark.parametrize("eps", EPS)
def test_intervals_still_cover(runs: _Runs, eps: float) -> None:
    # nominal 95%; with 400 runs the binomial standard error at 0.95 is 0.011, so 0.94 - 0.95 is ~1 SE
    # below nominal: a union-bound interval (coverage >= 95% by construction) passes with room
    assert (runs[eps]["cover"] >= 0.94).all(), (eps, runs[eps]["cover"])


def test_clipped_centre_error_matches_monte_carlo() -> None:
    rng = np.random.default_rng(3)
    t = np.array([0.0, 0.02, 0.3, 0.5, 0.97, 1.0])
    a = np.array([0.1, -0.2, 0.3, 0.9, 1.3, 0.5])
    m = rng.normal(a, 0.4, size=(200_000, t.size))
    mc = ((t - np.clip(m, 0.0, 1.0)) ** 2).mean(axis=0)
    sd = ((t - np.clip(m, 0.0, 1.0)) ** 2).std(axis=0) / math.sqrt(m.shape[0])
    exact = clipped_centre_sq_error(t, a, 0.4)
    assert (np.abs(mc - exact) <= 4.0 * sd).all(), (mc, exact)  # |z| <= 4 per coordinate
    # centred at the target, it is the truncated-normal second moment of clipped_error_moments
    np.testing.assert_allclose(clipped_centre_sq_error(t, t, 0.3), clipped_error_moments(t, 0.3)[0])
    # at a border the clipping halves the excess; far inside it is the full variance
    assert dispersion_excess(np.array([0.0, 1.0]), 0.1) == pytest.approx(0.01)
    assert dispersion_excess(np.array([0.5]), 1e-3) == pytest.approx(1e-6)


def test_weighted_mean_excess_matches_monte_carlo() -> None:
    """The ratio N'/S' with a clipped S' and a clipped centre, at a noise level where S' is far from S."""
    rng = np.random.default_rng(4)
    c = rng.random(6)
    c[0] = 0.0
    s, sw, lo, hi, reps = 50.0, 30.0, 20.0, 100.0, 100_000
    zn = rng.normal(0.0, sw, (reps, c.size))
    s1 = np.clip(s + rng.normal(0.0, sw, (reps, 1)), lo, hi)
    err = ((np.clip((s * c + zn) / s1, 0.0, 1.0) - c) ** 2).sum(axis=1)
    exact = weighted_mean_excess(c, weight_sum_u=s, weighted_sd=sw, lower=lo, upper=hi)
    assert abs(err.mean() - exact) <= 4.0 * err.std() / math.sqrt(reps), (err.mean(), exact)
    assert weighted_mean_excess(c, weight_sum_u=s, weighted_sd=0.0, lower=lo, upper=hi) == 0.0


def test_released_values_and_details_are_consistent() -> None:
    x = _vectors()
    r = heterogeneity(x, epsilon=0.5, delta=1e-5, randomness=RandomSource(11))
    assert r.dispersion is not None and r.q is not None and r.i2 is not None
    for st in (r.dispersion, r.q):
        d = st.details
        assert d["bias_correction"] > 0.0
        assert d["unclipped_estimate"] == pytest.approx(
            d["plugin_unclipped"] - d["bias_correction"]
        )
        assert st.estimate == max(0.0, d["unclipped_estimate"])
        assert d["plugin_estimate"] == max(0.0, d["plugin_unclipped"])
        assert st.standard_error is not None and st.standard_error <= d["plugin_standard_error"]
    assert r.details["dispersion_unclipped"] == r.dispersion.details["unclipped_estimate"]
    assert r.details["q_unclipped"] == r.q.details["unclipped_estimate"]
    n = x.shape[0]
    assert r.i2.estimate == (max(0.0, 1.0 - (n - 1) / r.q.estimate) if r.q.estimate > 0 else 0.0)
    assert 0.0 <= r.i2.estimate <= 1.0
    # without privacy nothing is corrected: the plug-in is the exact value
    e = heterogeneity(x, no_privacy=True, randomness=RandomSource(11))
    assert e.dispersion is not None and e.dispersion.details.get("bias_correction", 0.0) == 0.0
