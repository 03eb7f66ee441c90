"""``fedstats admin runs wait|show`` name what a test's released number is (issue 42, readouts).

A chi-square or G-test result was printed as a bare ``0.71 [0.5, 1.1]``; it now reads as the statistic it
is, with its degrees of freedom, p-value and decision. Results of real runs of the library's tests are
formatted, the line checked against the result's own fields.
"""

from __future__ import annotations

import re

import numpy as np

from fedstats.analyses.chi2 import fed_chi2
from fedstats.analyses.entropy import fed_g_test
from fedstats.cli.admin import _run_view
from fedstats.randomness import RandomSource
from fedstats.results import AnalysisResult, released_summary
from test_admin_readable import _printed

NUM = r"-?[0-9.]+(?:e[+-]?[0-9]+)?"


def _tables(n: int = 400) -> np.ndarray:
    """One record per client: a 3 x 2 one-hot table each, y depending on x."""
    rs = RandomSource(7).generator("tables")
    x = rs.integers(0, 3, size=n)
    y = (x + rs.integers(0, 2, size=n)) % 2
    tables = np.zeros((n, 3, 2), dtype=np.int64)
    tables[np.arange(n), x, y] = 1
    return tables


def _check(res: AnalysisResult, name: str) -> str:
    payload = {**res.to_dict(), "n_devices": 20}
    line = released_summary(payload)
    m = re.fullmatch(
        rf"{name} ({NUM}) \[({NUM}), ({NUM})\], dof (\d+), p = ({NUM}): independence "
        rf"(rejected|not rejected) at ({NUM}) \(privacy spent: none \(exact\)\), 20 devices",
        line,
    )
    assert m is not None, line
    stat, lo, hi, dof, p, verdict, level = m.groups()
    assert float(stat) == float(f"{res.estimate:.4g}")
    assert res.ci is not None and (float(lo), float(hi)) == tuple(float(f"{c:.4g}") for c in res.ci)
    assert int(dof) == payload["dof"] and float(p) == float(f"{payload['p_value']:.4g}")
    assert (verdict == "rejected") == bool(payload["rejected"])
    assert float(level) == payload["level"]
    # runs show prints the same line, never the bare numbers first
    text = _printed(_run_view, {"run_id": "r1", "status": "done", "result": payload, "rounds": []})
    assert line in text
    assert not re.search(rf"(^|\s){NUM} \[{NUM}, {NUM}\]", text.replace(line, "")), text
    return line


def test_a_chi_square_result_names_its_statistic_and_p_value() -> None:
    res = fed_chi2(_tables(), randomness=RandomSource(1))
    assert _check(res, "chi-square statistic").startswith("chi-square statistic ")


def test_a_g_test_result_names_its_statistic_and_p_value() -> None:
    res = fed_g_test(_tables(), randomness=RandomSource(1))
    assert _check(res, "G statistic").startswith("G statistic ")


def test_other_results_keep_their_line_and_an_entropy_says_it_is_one() -> None:
    mean = {"analysis": "bitpushing-mean", "estimate": 2.5, "ci": [2, 3], "epsilon": 1.0}
    assert released_summary(mean) == "2.5 [2, 3] (privacy spent: epsilon 1)"
    ent = {"analysis": "entropy.shannon", "estimate": 1.0986, "epsilon": None}
    assert released_summary(ent) == "entropy (nats) 1.099 (privacy spent: none (exact))"
    # a test result missing its p-value (null in JSON: non-finite) still names the statistic
    assert released_summary({"analysis": "chi2", "estimate": 0.71, "p_value": None}).startswith(
        "chi-square statistic 0.71 (privacy"
    )
