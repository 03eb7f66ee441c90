"""The sketched p-value: uniform under independence, where the paper's p-value is far too small."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.stats
from typer.testing import CliRunner

from fedstats.analyses.chi2 import batch_decode, fed_chi2, sketch_noise_quantiles, sketched_p_value
from fedstats.cli.app import app
from fedstats.errors import ParameterError
from fedstats.randomness import RandomSource

ALPHA = 1e-6
DOF, ELL, N = 300, 50, 4000


def _sketched_null_statistics(decoder: str, seed: int) -> np.ndarray:
    """Decoded statistics under independence: s ~ chi2_dof, encoding sqrt(s) N(0, 2)^l (Pang et al.)."""
    rng = np.random.default_rng(seed)
    s = rng.chisquare(DOF, size=N)
    return batch_decode(np.sqrt(2.0 * s)[:, None] * rng.standard_normal((N, ELL)), decoder)


@pytest.mark.parametrize("decoder", ["mean-of-squares", "geometric"])
def test_uniform_under_independence_where_the_papers_is_not(decoder: str) -> None:
    shat = _sketched_null_statistics(decoder, seed=11)
    p = sketched_p_value(shat, DOF, encoding_size=ELL, decoder=decoder)
    assert scipy.stats.kstest(p, "uniform").pvalue > ALPHA
    naive = scipy.stats.chi2.sf(shat, DOF)
    assert scipy.stats.kstest(naive, "uniform").pvalue < ALPHA
    # rejections at 0.05: binomial SE sqrt(.05 .95 / N) = 0.0034
    assert abs(float(np.mean(p < 0.05)) - 0.05) < 6 * 0.0034
    assert float(np.mean(naive < 0.05)) > 0.2


def test_mean_of_squares_noise_is_chi2_over_l_and_scalar_input_gives_a_float() -> None:
    g = sketch_noise_quantiles(ELL, "mean-of-squares", points=1000)
    assert np.all(np.diff(g) > 0)
    assert float(np.mean(g)) == pytest.approx(1.0, abs=2e-3)
    p = sketched_p_value(float(DOF), DOF, encoding_size=ELL, decoder="mean-of-squares")
    assert isinstance(p, float) and 0.3 < p < 0.7


def test_results_and_cli_carry_the_sketched_p_value() -> None:
    tables = np.random.default_rng(0).integers(0, 5, size=(30, 4, 5))
    res = fed_chi2(tables, encoding_size=ELL, randomness=RandomSource(2))
    expect = sketched_p_value(res.statistic, res.dof, encoding_size=ELL, decoder=res.decoder)
    assert res.p_value_sketch == pytest.approx(expect)
    out = CliRunner().invoke(
        app,
        [
            "--seed",
            "1",
            "chi2",
            "adult",
            "--x",
            "sex",
            "--y",
            "race",
            "--clients",
            "20",
            "--backend",
            "serial",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert 0.0 <= data["p_value_sketch"] <= 1.0


def test_invalid_parameters_are_rejected() -> None:
    with pytest.raises(ParameterError, match="encoding_size"):
        sketched_p_value(1.0, 3, encoding_size=1, decoder="mean-of-squares")
    with pytest.raises(ParameterError, match="decoder"):
        sketched_p_value(1.0, 3, encoding_size=10, decoder="median")
    with pytest.raises(ParameterError, match="dof"):
        sketched_p_value(1.0, 0, encoding_size=10, decoder="geometric")
