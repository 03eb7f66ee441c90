"""The performance gap's warning about a noisy estimated group size reads sensibly (issue 42, readouts).

A group of one client among 2,000 at epsilon 1 has an estimated size whose relative standard error is
far above the range where the remaining bias was measured (up to 0.37): the warning says the group is
too small to estimate, with its estimated size and the size a group needs (never a bias of 79,000%, never
"1 clients"); a group just above the warning threshold still gets its bias stated.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from fedstats.analyses.performance_gap import measure_performance_gap
from fedstats.analyses.performance_gap.mechanisms import GapMechanism
from fedstats.analyses.performance_gap.protocol import (
    SIZE_RSE_LIMIT,
    SIZE_RSE_WARN,
    size_needed,
    size_variance,
    size_warning,
)
from fedstats.randomness import RandomSource


@pytest.mark.parametrize("kind", ["R", "L"])
@pytest.mark.parametrize("k", [2_000.0, 84_822.0])
def test_the_size_needed_reaches_the_threshold(kind: str, k: float) -> None:
    mech = GapMechanism(kind, 0.6, 0.4) if kind == "L" else GapMechanism(kind, 1.0, 1.0)
    n = size_needed(mech, k)
    assert n > 0
    rse = float(np.sqrt(size_variance(mech, n, k)) / n)
    assert rse == pytest.approx(SIZE_RSE_WARN, rel=1e-9)
    # smaller groups are noisier, larger ones less
    assert float(np.sqrt(size_variance(mech, 0.9 * n, k)) / (0.9 * n)) > SIZE_RSE_WARN
    assert float(np.sqrt(size_variance(mech, 1.1 * n, k)) / (1.1 * n)) < SIZE_RSE_WARN


def test_a_one_client_group_is_too_small_to_estimate_not_biased_by_a_huge_percentage() -> None:
    g = np.repeat(["a", "b"], [1, 1_999])
    v = np.tile([1.0, 0.0], 1_000)
    res = measure_performance_gap(g, v, epsilon=1.0, randomness=RandomSource(5))
    assert res.details["size_relative_se"][0] > SIZE_RSE_LIMIT
    (w,) = [w for w in res.warnings if "group 'a'" in w]
    assert "too small to estimate" in w, w
    assert "%" not in w, w  # no extrapolated bias
    assert not re.search(r"\b1 clients\b", w), w
    n_hat = res.group_sizes[0]
    noun = "client" if round(n_hat) == 1 else "clients"
    assert f"estimated size is {n_hat:.0f} {noun}" in w, w
    assert re.search(r"relative standard error of \d+\.\d\d", w), w
    # the size needed, or that none of these clients can reach it
    mech_need = re.search(r"needs about (\d+) clients", w)
    if mech_need is not None:
        assert int(mech_need.group(1)) <= 2_000
    else:
        assert "no group of these 2000 clients" in w, w


def test_a_moderately_noisy_size_states_its_bias_with_the_right_plural() -> None:
    mech = GapMechanism("R", 1.0, 1.0)
    assert size_warning("a", 500.0, SIZE_RSE_WARN, mech, 1e4) is None  # at the threshold: quiet
    w = size_warning("a", 1.0, 0.3, mech, 1e4)
    assert w is not None
    assert "(1 client)" in w and "biased towards zero by about 4%" in w, w  # 5 * 0.3**4 = 4.05%
    w = size_warning("a", 812.4, 0.3, mech, 1e4)
    assert w is not None and "(812 clients)" in w, w
    w = size_warning("a", 3.0, 3.5, mech, 1e4)
    assert w is not None and "too small to estimate" in w and "%" not in w, w
    need = size_needed(mech, 1e4)
    assert f"about {int(np.ceil(need))} clients" in w, (w, need)
