"""The top-level ``fedstats`` namespace exposes each analysis's one-call API, loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import fedstats

ONE_CALL = {
    "fed_chi2": "fedstats.analyses.chi2.api",
    "fed_entropy": "fedstats.analyses.entropy.api",
    "fed_g_test": "fedstats.analyses.entropy.api",
    "mean": "fedstats.analyses.bitpushing.api",
    "variance": "fedstats.analyses.bitpushing.api",
    "measure_performance_gap": "fedstats.analyses.performance_gap.api",
    "heterogeneity": "fedstats.analyses.heterogeneity.api",
    "federated_mean": "fedstats.analyses.exact.api",
}


@pytest.mark.parametrize(("name", "module"), sorted(ONE_CALL.items()))
def test_one_call_api_is_the_analysis_function(name: str, module: str) -> None:
    __import__(module)
    assert getattr(fedstats, name) is getattr(sys.modules[module], name)
    assert name in dir(fedstats) and name in fedstats.__all__


def test_import_fedstats_loads_no_analysis_and_unknown_names_fail() -> None:
    code = (
        "import sys, fedstats; "
        "print(sorted(m for m in sys.modules if m.startswith(('fedstats.analyses', 'scipy', 'pandas'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    with pytest.raises(AttributeError):
        _ = fedstats.no_such_analysis  # type: ignore[attr-defined]


def test_one_call_mean_runs_from_the_top_level() -> None:
    x = np.full(2000, 64.0)
    res = fedstats.mean(
        x, fedstats.BitEncoding(0, 127), no_privacy=True, randomness=fedstats.RandomSource(3)
    )
    assert res.estimate == pytest.approx(64.0, abs=6 * res.standard_error + 1e-9)
