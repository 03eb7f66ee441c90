"""The exact (non-private) baselines package: one-round chi-square and mean through the engine."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedstats.analyses.exact import (
    ChiSquareResult,
    MeanResult,
    chi_square,
    chi_square_protocol,
    federated_mean,
    mean_protocol,
)
from fedstats.engine import Engine, InMemoryPopulation
from fedstats.errors import DataError, ParameterError
from fedstats.randomness import RandomSource


@settings(max_examples=25, deadline=None)
@given(
    arrays(
        np.int64,
        st.tuples(st.integers(1, 30), st.integers(2, 4), st.integers(2, 5)),
        elements=st.integers(0, 6),
    )
)
def test_chi_square_equals_scipy_on_the_summed_table(tables: np.ndarray) -> None:
    total = tables.sum(axis=0)
    kept = total[total.sum(axis=1) > 0][:, total.sum(axis=0) > 0]
    if kept.shape[0] < 2 or kept.shape[1] < 2:
        with pytest.raises(DataError, match="non-empty"):
            chi_square(tables, randomness=RandomSource(0))
        return
    res = chi_square(tables, randomness=RandomSource(0))
    stat, p, dof, _ = scipy.stats.chi2_contingency(kept, correction=False)
    assert isinstance(res, ChiSquareResult) and res.analysis == "exact.chi2"
    assert res.estimate == pytest.approx(stat, rel=1e-12, abs=1e-12)
    assert res.statistic == res.estimate
    assert res.p_value == pytest.approx(p, rel=1e-9, abs=1e-15) and res.dof == dof
    np.testing.assert_array_equal(res.table, total)
    assert res.n_clients == tables.shape[0] and res.epsilon is None


def test_chi_square_result_json_keeps_the_readme_fields() -> None:
    tables = np.random.default_rng(0).integers(0, 4, size=(100, 3, 4))
    engine = Engine(randomness=RandomSource(seed=1))
    result = engine.run(
        chi_square_protocol((3, 4), max_cell=3), InMemoryPopulation.from_tables(tables)
    )
    out = result.to_dict()
    assert out["dof"] == 6 and out["estimate"] == result.statistic
    assert out["analysis"] == "exact.chi2" and out["table"] == tables.sum(axis=0).tolist()


@pytest.mark.parametrize(
    ("tables", "match"),
    [
        (np.ones((3, 2)), "shape"),
        (np.full((2, 2, 2), 0.5), "integer"),
        (-np.ones((2, 2, 2), dtype=np.int64), "negative"),
    ],
)
def test_chi_square_refuses_bad_tables(tables: np.ndarray, match: str) -> None:
    with pytest.raises(DataError, match=match):
        chi_square(tables)


def test_package_names_load_lazily_and_unknown_names_raise() -> None:
    import fedstats.analyses.exact as pkg

    assert "chi_square" in dir(pkg) and pkg.chi_square is chi_square
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = pkg.no_such_name


def test_chi_square_protocol_refuses_bad_shape_and_bound() -> None:
    pop = InMemoryPopulation.from_tables(np.ones((2, 2, 2), dtype=np.int64))
    with pytest.raises(ParameterError, match="max_cell"):
        Engine(randomness=RandomSource(0)).run(chi_square_protocol((2, 2), max_cell=0), pop)
    with pytest.raises(ParameterError, match="m_x"):
        Engine(randomness=RandomSource(0)).run(chi_square_protocol((1, 2), max_cell=1), pop)


@settings(max_examples=25, deadline=None)
@given(arrays(np.float64, st.integers(1, 200), elements=st.floats(-1000, 1000)))
def test_federated_mean_is_exact_to_the_grid(values: np.ndarray) -> None:
    res = federated_mean(values, randomness=RandomSource(3))
    assert isinstance(res, MeanResult) and res.analysis == "exact.mean"
    # each value is rounded to 2^-16 (half an ulp of the grid at most), so the mean is within 2^-17
    assert abs(res.estimate - values.mean()) <= 2.0**-17 * (1 + 1e-9)
    assert res.truth == pytest.approx(values.mean(), abs=1e-9)
    assert res.n_clients == values.size and res.details["resolution"] == 2.0**-16


def test_mean_protocol_clips_to_the_declared_bound_and_refuses_bad_clip() -> None:
    pop = InMemoryPopulation({"v": np.array([1.0, 3.0, 100.0])})
    res = Engine(randomness=RandomSource(0)).run(mean_protocol("v", clip=4.0), pop)
    assert res.estimate == pytest.approx((1.0 + 3.0 + 4.0) / 3, abs=2.0**-16)
    with pytest.raises(ParameterError, match="clip"):
        Engine(randomness=RandomSource(0)).run(mean_protocol("v", clip=0.0), pop)
    with pytest.raises(DataError, match="NaN"):
        federated_mean(np.array([1.0, np.nan]))
