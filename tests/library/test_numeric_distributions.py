"""The release path's distribution functions (fedstats._numeric) are scipy.stats' to the bit, and a
release of FED-chi^2 or FED-H does not import scipy.stats (issue 40: the server's memory)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.stats

from fedstats import _numeric

Q = np.concatenate(
    [[1e-300, 1e-12, 1e-6, 0.001, 0.025], np.linspace(0.01, 0.99, 99), [0.975, 1 - 1e-9]]
)
X = np.concatenate([[0.0, 1e-9, 0.5], np.geomspace(1e-3, 2e3, 120)])
DF = [1, 2, 3, 7, 10, 24.5, 99, 1000, 4096]


def test_normal_functions_equal_scipy_stats() -> None:
    np.testing.assert_array_equal(_numeric.norm_ppf(Q), scipy.stats.norm.ppf(Q))
    z = np.linspace(-40, 40, 801)
    np.testing.assert_array_equal(_numeric.norm_sf(z), scipy.stats.norm.sf(z))
    assert _numeric.norm_ppf(0.975) == scipy.stats.norm.ppf(0.975)  # scalars too


@pytest.mark.parametrize("df", DF)
def test_chi_square_functions_equal_scipy_stats(df: float) -> None:
    np.testing.assert_array_equal(_numeric.chi2_sf(X, df), scipy.stats.chi2.sf(X, df))
    np.testing.assert_array_equal(_numeric.chi2_sf(-X - 1, df), scipy.stats.chi2.sf(-X - 1, df))
    np.testing.assert_array_equal(_numeric.chi2_isf(Q, df), scipy.stats.chi2.isf(Q, df))
    np.testing.assert_array_equal(_numeric.chi2_ppf(Q, df), scipy.stats.chi2.ppf(Q, df))
    np.testing.assert_array_equal(_numeric.chi2_pdf(X[1:], df), scipy.stats.chi2.pdf(X[1:], df))


def test_broadcasting_over_degrees_of_freedom_as_scipy_stats() -> None:
    grid = np.geomspace(0.1, 500, 40)[:, None] / np.array([1.0, 2.0, 3.0])
    dof = np.array([3, 8, 40])
    np.testing.assert_array_equal(_numeric.chi2_sf(grid, dof), scipy.stats.chi2.sf(grid, dof))


def test_fed_chi2_fed_h_and_g_test_releases_do_not_import_scipy_stats() -> None:
    code = (
        "import sys, numpy as np\n"
        "from fedstats import fed_chi2, fed_entropy, fed_g_test\n"
        "from fedstats.randomness import RandomSource\n"
        "rng = np.random.default_rng(1)\n"
        "tables = rng.integers(0, 5, size=(30, 3, 4))\n"
        "fed_chi2(tables, epsilon=2.0, delta=1e-6, randomness=RandomSource(seed=1))\n"
        "fed_entropy(tables.sum(axis=2), randomness=RandomSource(seed=2))\n"
        "fed_g_test(tables, randomness=RandomSource(seed=3))\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
