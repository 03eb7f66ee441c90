"""The G-test through FED-H holds its size: its p-value averages over FED-H's error.

``G = 2 |v| (H_X + H_Y - H_XY)`` inherits ``2 |v|`` times FED-H's error on ``H_XY``; read as an exact
chi-square statistic (``chi2_sf`` of the estimate), it rejected independence in about half the runs at level
0.05 (400 clients, 3 x 2 tables; ``python benchmarks/g_test_size.py`` measures it). The p-value is now ``E[chi2_sf(G_hat - e)]`` over the error ``e``
(:func:`fedstats.analyses.chi2.calibration.normal_averaged_p_value`).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from fedstats import fed_g_test
from fedstats.analyses.chi2.calibration import normal_averaged_p_value
from fedstats.errors import ParameterError
from fedstats.randomness import RandomSource

N_CLIENTS = 400
RUNS = 100
LEVEL = 0.05


def _one_hot(x: np.ndarray, y: np.ndarray, m_x: int, m_y: int) -> np.ndarray:
    t = np.zeros((x.size, m_x, m_y), dtype=np.int64)
    t[np.arange(x.size), x, y] = 1
    return t


def test_size_under_independence_is_at_most_the_level() -> None:
    rng = np.random.default_rng(20261129)
    p = []
    for r in range(RUNS):
        x, y = rng.integers(0, 3, N_CLIENTS), rng.integers(0, 2, N_CLIENTS)
        res = fed_g_test(_one_hot(x, y, 3, 2), randomness=RandomSource(seed=r))
        p.append(res.p_value)
        assert res.p_value_method == "chi2-normal-error"
    rate = float(np.mean(np.asarray(p) <= LEVEL))
    # three standard errors of a binomial proportion above the level (the old p-value gave about 0.47)
    assert rate <= LEVEL + 3 * np.sqrt(LEVEL * (1 - LEVEL) / RUNS), rate


def test_a_strong_dependence_is_still_rejected() -> None:
    rng = np.random.default_rng(7)
    rejected = 0
    for r in range(20):
        x = rng.integers(0, 3, 4000)
        y = np.where(rng.random(4000) < 0.9, (x > 0).astype(np.int64), rng.integers(0, 2, 4000))
        res = fed_g_test(_one_hot(x, y, 3, 2), randomness=RandomSource(seed=100 + r))
        rejected += res.rejected
    # the averaged p-value costs power (FED-H's error is wide: docs/chi2.md), but not all of it
    assert rejected >= 10, rejected


def test_normal_averaged_p_value_is_the_convolution() -> None:
    # against a Monte Carlo of s + e, s ~ chi2_2, e ~ N(0, 3^2)
    rng = np.random.default_rng(1)
    draws = rng.chisquare(2, 400_000) + 3.0 * rng.standard_normal(400_000)
    for x in (-2.0, 0.0, 3.0, 8.0, 15.0):
        mc = float(np.mean(draws >= x))
        assert (
            abs(normal_averaged_p_value(x, 2, 3.0) - mc) <= 4 * np.sqrt(mc * (1 - mc) / 4e5) + 1e-4
        )
    assert normal_averaged_p_value(5.0, 3, 0.0) == pytest.approx(scipy.stats.chi2.sf(5.0, 3))
    with pytest.raises(ParameterError, match="noise_sd"):
        normal_averaged_p_value(1.0, 2, -1.0)
