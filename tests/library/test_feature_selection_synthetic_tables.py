"""The authors' synthetic table generators: shapes, non-negativity, where the signal lives."""

from __future__ import annotations

import numpy as np
import pytest

from fedstats.errors import ParameterError
from fedstats.experiments.synthetic_tables import (
    GENERATORS,
    synthetic_client_tables,
    synthetic_global_histogram,
    synthetic_global_table,
)
from fedstats.randomness import RandomSource


@pytest.mark.parametrize("kind", GENERATORS)
def test_shapes_and_non_negative(kind: str) -> None:
    t = synthetic_client_tables(kind, 7, rng=np.random.default_rng(1))
    assert t.shape == (7, 20, 20) and t.dtype == np.int64
    assert t.min() >= 0
    g = synthetic_global_table(kind, 7, m_x=3, m_y=5, rng=np.random.default_rng(1))
    assert g.shape == (3, 5) and g.min() >= 0


def test_signal_rows() -> None:
    rng = np.random.default_rng(2)
    lg = synthetic_client_tables("logistic", 50, rng=rng, noise=False)
    assert lg[:, 1:, :].sum() == 0 and lg[:, 0, :].sum() > 0
    assert lg.max() <= 9
    lin = synthetic_client_tables("linear", 50, rng=rng, noise=False)
    assert lin[:, 0, :].sum() == 0
    assert set(np.unique(lin[:, 3, :] % 3).tolist()) == {0}  # randint * row
    quad = synthetic_client_tables("quadratic", 50, rng=rng, noise=False)
    assert set(np.unique(quad[:, 4, :] % 16).tolist()) == {0}
    assert quad[:, 19, :].max() <= 4 * 19**2
    ind = synthetic_client_tables("independent", 50, rng=rng)
    assert set(np.unique(ind).tolist()) == {0, 1, 2, 3, 4}


def test_noise_is_truncated_normal() -> None:
    """Rows >= 1 of the logistic table hold max(0, trunc(N(0,1))): P(>=1) = P(Z >= 1) = 0.1587."""
    t = synthetic_client_tables("logistic", 400, rng=np.random.default_rng(3))
    rest = t[:, 1:, :].ravel()
    p = 0.15865525393145707
    se = np.sqrt(p * (1 - p) / rest.size)
    assert abs((rest >= 1).mean() - p) < 6 * se
    assert abs((rest >= 2).mean() - 0.022750131948179195) < 6 * np.sqrt(0.0228 / rest.size)
    # row 0: randint(0, 10) + trunc noise, mean 4.5
    assert abs(t[:, 0, :].mean() - 4.5) < 0.1


def test_histogram_blocks_match_and_seeded() -> None:
    rs = RandomSource(seed=4)
    h1 = synthetic_global_histogram("linear", 30, 1000, rng=rs)
    h2 = synthetic_global_histogram("linear", 30, 1000, rng=RandomSource(seed=4))
    assert h1.shape == (1000,) and np.array_equal(h1, h2) and h1.min() >= 0
    # linear: row x of a client is randint(0,5) x + noise: mean 2x, sd sqrt(2) x; 30 clients summed
    x = np.arange(100, 1000)
    ratio = h1[100:] / (30 * 2 * x)  # mean 1, sd sqrt(2 * 30) / 60 per row
    assert abs(ratio.mean() - 1.0) < 6 * (np.sqrt(60) / 60) / np.sqrt(x.size)
    with pytest.raises(ParameterError):
        synthetic_global_histogram("cubic", 3, 10, rng=rs)
    with pytest.raises(ParameterError):
        synthetic_client_tables("linear", 0, rng=rs)
