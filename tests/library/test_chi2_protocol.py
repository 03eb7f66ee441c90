"""FED-chi^2: correctness of the protocol, intervals on real tables, dropout, routes and bad input."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.analyses.chi2 import (
    chi_square_statistic,
    fed_chi2,
    fed_chi2_protocol,
    simulate_fed_chi2,
    sketched_p_value,
)
from fedstats.analyses.chi2.simulate import survivor_table
from fedstats.datasets import contingency_table, load_adult, split_contingency_table
from fedstats.engine import Engine, InMemoryPopulation
from fedstats.engine.core import Dropout
from fedstats.errors import DataError, OverflowRiskError, ParameterError
from fedstats.randomness import RandomSource
from fedstats.sketches.stable import StableProjection


@pytest.fixture(scope="module")
def adult_table() -> np.ndarray:
    ct = contingency_table(load_adult("train"), "occupation", "native_country")
    return np.asarray(ct.counts)


@pytest.fixture(scope="module")
def adult_clients(adult_table: np.ndarray) -> np.ndarray:
    return split_contingency_table(adult_table, 100, rng=RandomSource(7))


def _direct_statistic(table: np.ndarray, seed: int, ell: int) -> float:
    """||P w||^2 / (2 l) computed centrally from the global table (what the protocol must reproduce)."""
    t = table.astype(np.float64)
    vbar = np.outer(t.sum(1), t.sum(0)) / t.sum()
    w = ((t - vbar) / np.sqrt(vbar)).ravel()
    e = StableProjection(seed, ell, 2.0).project(w[None, :])[0]
    return float(e @ e / (2 * ell))


def test_chi_square_statistic_matches_scipy(adult_table: np.ndarray) -> None:
    stat, dof = chi_square_statistic(adult_table)
    ref = scipy.stats.chi2_contingency(adult_table, correction=False)
    assert stat == pytest.approx(ref[0], rel=1e-10)
    assert dof == ref[2] == (adult_table.shape[0] - 1) * (adult_table.shape[1] - 1)


@pytest.mark.parametrize("bits", [16, 32, 64])
def test_protocol_reproduces_central_sketch(adult_clients: np.ndarray, bits: int) -> None:
    # by linearity the summed client encodings are P w: only fixed-point rounding may differ
    seed = 12345
    res = fed_chi2(adult_clients, bits=bits, projection_seed=seed, randomness=RandomSource(1))
    direct = _direct_statistic(adult_clients.sum(0), seed, 50)
    # rounding noise of 100 clients at resolution 2^-f on |e_k| ~ sqrt(2 s)
    tol = 6 * math.sqrt(100 / 4) * 2.0**-res.frac_bits * 2 / math.sqrt(2 * direct) + 1e-9
    assert res.statistic == pytest.approx(direct, rel=tol)
    assert res.dof == 14 * 41
    assert res.bytes_full_table == math.ceil(15 * 42 * bits / 8)
    assert res.bytes_per_client == math.ceil(57 * bits / 8) + math.ceil(50 * bits / 8)


@pytest.mark.parametrize("decoder", ["mean-of-squares", "geometric"])
def test_interval_covers_exact_statistic_on_adult(adult_clients: np.ndarray, decoder: str) -> None:
    hits = 0
    runs = 12
    for r in range(runs):
        res = fed_chi2(adult_clients, decoder=decoder, randomness=RandomSource(100 + r))
        assert res.exact_statistic == pytest.approx(chi_square_statistic(adult_clients.sum(0))[0])
        hits += res.ci is not None and res.ci[0] <= res.exact_statistic <= res.ci[1]
        assert res.release_note is not None
    # P(at most 8 of 12 hits | 95% coverage) < 2e-3
    assert hits >= 9


def test_p_value_and_decision(adult_clients: np.ndarray) -> None:
    res = fed_chi2(adult_clients, randomness=RandomSource(2))
    # the paper's p-value reads the sketched statistic as exact; the decision uses the sketch-aware one
    assert res.p_value_paper == pytest.approx(scipy.stats.chi2.sf(res.statistic, res.dof))
    assert res.p_value == pytest.approx(
        sketched_p_value(res.statistic, res.dof, encoding_size=50, decoder="mean-of-squares")
    )
    assert res.p_value_method == "sketch" and res.p_value_mc_error == 0.0
    assert (
        res.rejected and res.decision_stable
    )  # Adult occupation x country is far from independent
    # an independent table: stable iff the p-values at both ends of the interval agree on the decision
    rng = np.random.default_rng(0)
    indep = rng.multinomial(2000, np.full(16, 1 / 16), size=30).reshape(30, 4, 4)
    r2 = fed_chi2(indep, randomness=RandomSource(3))
    assert r2.ci is not None
    ends = sketched_p_value(np.array(r2.ci), r2.dof, encoding_size=50, decoder="mean-of-squares")
    assert r2.decision_stable == ((ends[0] <= 0.05) == (ends[1] <= 0.05))
    assert r2.rejected == (r2.p_value <= r2.level)


def test_dropout_is_without_replacement_and_keeps_marginals(adult_clients: np.ndarray) -> None:
    res = fed_chi2(adult_clients, dropout=0.2, randomness=RandomSource(4), projection_seed=99)
    assert res.n_dropped == 20 and res.n_clients == 80
    # the route drew them (first run of an engine on RandomSource(4)); the server only sees the count
    dropped = Dropout(0.2).draw(100, RandomSource(4), 0)
    assert dropped.size == 20 and np.unique(dropped).size == 20
    assert "dropped_clients" not in res.details
    survivors = np.setdiff1d(np.arange(100), dropped)
    # the protocol's estimate is the sketch of the survivors' sum of u_i, with round-1 marginals
    t = adult_clients.sum(0).astype(np.float64)
    vbar = np.outer(t.sum(1), t.sum(0)) / t.sum()
    vs = adult_clients[survivors].sum(0)
    w = ((vs - 0.8 * vbar) / np.sqrt(vbar)).ravel()
    e = StableProjection(99, 50, 2.0).project(w[None, :])[0]
    assert res.statistic == pytest.approx(float(e @ e) / 100, rel=1e-6)
    assert res.dof == 14 * 41


def test_simulation_has_the_protocols_distribution(adult_table: np.ndarray) -> None:
    # no dropout: l * s_hat / s ~ chi2_l exactly, for the materialized and the distribution shortcut
    s = chi_square_statistic(adult_table)[0]
    for mode, runs in (("materialize", 150), ("distribution", 400)):
        x = [
            simulate_fed_chi2(
                adult_table, 100, randomness=RandomSource(r), projection=mode
            ).statistic
            * 50
            / s
            for r in range(runs)
        ]
        assert scipy.stats.kstest(x, scipy.stats.chi2(50).cdf).pvalue > 1e-6


def test_survivor_table_matches_brute_force_authors_split() -> None:
    table = np.array([[40, 3], [7, 120]])
    rng = np.random.default_rng(5)
    fast = np.array([survivor_table(table, 10, 7, "authors", rng)[1, 1] for _ in range(400)])
    slow = np.array(
        [
            split_contingency_table(table, 10, rng=np.random.default_rng(1000 + i))[:7, 1, 1].sum()
            for i in range(400)
        ]
    )
    assert scipy.stats.ks_2samp(fast, slow).pvalue > 1e-6
    iid = np.array([survivor_table(table, 10, 7, "iid", rng)[1, 1] for _ in range(400)])
    assert abs(iid.mean() - 84) < 6 * math.sqrt(120 * 0.7 * 0.3 / 400)


def test_protocol_runs_on_engine_directly() -> None:
    rng = np.random.default_rng(1)
    tables = rng.integers(0, 5, size=(20, 3, 4))
    proto = fed_chi2_protocol((3, 4), projection_seed=5, max_cell=4, encoding_size=10)
    res = Engine(randomness=RandomSource(0)).run(proto, InMemoryPopulation.from_tables(tables))
    assert res.dof == 6 and res.encoding_size == 10
    assert res.statistic == pytest.approx(_direct_statistic(tables.sum(0), 5, 10), rel=1e-6)


def test_bad_input() -> None:
    good = np.ones((3, 2, 2), dtype=np.int64)
    neg = good.copy()
    neg[1, 0, 1] = -1
    with pytest.raises(DataError, match="negative"):
        fed_chi2(neg)
    empty_row = np.ones((3, 3, 2), dtype=np.int64)
    empty_row[:, 2, :] = 0
    with pytest.raises(DataError, match="empty row"):
        fed_chi2(empty_row)
    res = fed_chi2(empty_row, drop_empty=True, randomness=RandomSource(0))
    assert res.dof == 1
    with pytest.raises(ParameterError, match="encoding_size"):
        fed_chi2(good, encoding_size=1)
    with pytest.raises(ParameterError, match="decoder"):
        fed_chi2(good, decoder="median")
    with pytest.raises(ParameterError, match="bits"):
        fed_chi2(good, bits=8)
    with pytest.raises(ParameterError, match="dropout"):
        fed_chi2(good, dropout=1.0)
    with pytest.raises(DataError, match="whole-number"):
        fed_chi2(good + 0.5)
    with pytest.raises(DataError, match="shape"):
        fed_chi2(np.ones((2, 2)))
    with pytest.raises(DataError, match="empty"):
        simulate_fed_chi2(np.array([[1, 0], [2, 0]]), 5)


def test_narrow_field_is_refused_not_wrapped() -> None:
    big = np.full((2, 30, 30), 10**6, dtype=np.int64)
    big[0, 0, 0] = 1
    with pytest.raises(OverflowRiskError, match="bits=16"):
        fed_chi2(big, bits=16, randomness=RandomSource(0))


def test_secure_route_gives_identical_results(adult_clients: np.ndarray) -> None:
    secure = pytest.importorskip("fedstats.engine.secure")
    tables = adult_clients[:30]
    for bits in (16, 64):
        plain = fed_chi2(
            tables, bits=bits, drop_empty=True, engine=Engine(randomness=RandomSource(8))
        )
        sec = fed_chi2(
            tables,
            bits=bits,
            drop_empty=True,
            engine=Engine(secure.SecureAggregationBackend(), RandomSource(8)),
        )
        assert sec.statistic == plain.statistic
        assert sec.ci == plain.ci


def test_secure_route_with_engine_dropout_equals_plain(adult_clients: np.ndarray) -> None:
    secure = pytest.importorskip("fedstats.engine.secure")
    kw: dict[str, Any] = {"dropout": 0.1, "drop_empty": True}
    plain = fed_chi2(adult_clients[:30], engine=Engine(randomness=RandomSource(8)), **kw)
    sec = fed_chi2(
        adult_clients[:30],
        engine=Engine(secure.SecureAggregationBackend(), RandomSource(8)),
        **kw,
    )
    assert sec.n_clients == plain.n_clients
    assert sec.statistic == plain.statistic


def test_dropped_clients_never_reach_the_round_parameters(adult_clients: np.ndarray) -> None:
    shape = adult_clients.shape[1:]
    proto = fed_chi2_protocol(shape, projection_seed=3, max_cell=10**6, drop_empty=True)
    pop = InMemoryPopulation({"table": adult_clients})
    dropout = Dropout(0.3)
    engine = Engine(randomness=RandomSource(1), dropout=dropout)
    rounds = []
    rnd = next(proto)
    try:
        for index in range(2):
            rounds.append(rnd)
            gone = dropout.draw(100, engine.randomness, 0) if index else None
            rnd = proto.send(engine.sum_round(rnd, pop, index, dropped=gone))
    except StopIteration as stop:
        res = stop.value
    for r in rounds:
        assert not {"dropped", "dropout", "survivors"} & set(r.params)
    assert res.n_clients == 70 and res.n_dropped == 30


def test_fast_path_equals_the_protocol_for_the_same_seed(adult_table: np.ndarray) -> None:
    # no dropout, 64 bits: the fast path's projection of the sum is the protocol's sum of projections
    tables = split_contingency_table(adult_table, 40, rng=np.random.default_rng(2))
    for decoder in ("mean-of-squares", "geometric"):
        src = RandomSource(6)
        fast = simulate_fed_chi2(adult_table, 40, decoder=decoder, randomness=src, drop_empty=True)
        full = fed_chi2(
            tables,
            decoder=decoder,
            projection_seed=src.public_seed("chi2", "projection"),
            randomness=RandomSource(7),
            drop_empty=True,
        )
        assert fast.dof == full.dof
        assert fast.statistic == pytest.approx(full.statistic, rel=1e-6)
        assert fast.exact_statistic == pytest.approx(full.exact_statistic, rel=1e-12)


def test_process_route_gives_identical_results() -> None:
    from fedstats.engine.routes import open_backend

    tables = np.random.default_rng(0).integers(0, 9, size=(200, 4, 5))
    plain = fed_chi2(tables, dropout=0.1, engine=Engine(randomness=RandomSource(3), block_size=64))
    with open_backend("process", workers=2, shard_size=64) as be:
        proc = fed_chi2(tables, dropout=0.1, engine=Engine(be, RandomSource(3), block_size=64))
    assert proc.statistic == plain.statistic and proc.ci == plain.ci


def test_cell_above_declared_max_cell_is_refused() -> None:
    tables = np.ones((4, 2, 3), dtype=np.int64)
    tables[2, 1, 1] = 9
    proto = fed_chi2_protocol((2, 3), projection_seed=1, max_cell=5, encoding_size=4)
    with pytest.raises((DataError, ParameterError)):
        Engine(randomness=RandomSource(0)).run(proto, InMemoryPopulation.from_tables(tables))


def test_batch_fast_path_has_the_protocols_distribution() -> None:
    # simulate_decoded (used by the FDR experiment) against the engine protocol on one table, both
    # decoders: the decoded statistics of many exact ones at once have the protocol's distribution
    from fedstats.analyses.chi2 import simulate_decoded

    rng = np.random.default_rng(11)
    tables = rng.integers(0, 6, size=(12, 3, 4))
    s = chi_square_statistic(tables.sum(0))[0]
    for decoder in ("mean-of-squares", "geometric"):
        proto = [
            fed_chi2(
                tables, encoding_size=8, decoder=decoder, randomness=RandomSource(500 + r)
            ).statistic
            for r in range(150)
        ]
        fast = simulate_decoded(np.full(2000, s), 8, decoder, np.random.default_rng(3))
        assert scipy.stats.ks_2samp(proto, fast).pvalue > 1e-4
    with pytest.raises(DataError):
        simulate_decoded([1.0, -2.0], 8, "geometric", np.random.default_rng(0))
    with pytest.raises(ParameterError, match="encoding_size"):
        simulate_decoded([1.0], 1, "geometric", np.random.default_rng(0))


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(["level", "confidence"]),
    value=st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0), st.just(float("nan"))),
)
def test_out_of_range_options_name_their_parameter(name: str, value: float) -> None:
    tables = np.ones((3, 2, 2), dtype=np.int64)
    with pytest.raises(ParameterError, match=name):
        fed_chi2(tables, **{name: value})
    with pytest.raises(ParameterError, match=name):
        simulate_fed_chi2(tables.sum(0), 3, **{name: value})
