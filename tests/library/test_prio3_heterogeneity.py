"""Heterogeneity on Prio3 with the aggregators' noise (issue 29, gap 3).

With ``noise="aggregators"`` the clients send their fixed-point reports without a noise share, each of the
two aggregators adds a discrete Gaussian ``N_Z(0, sigma_a^2)``, ``sigma_a^2 = Delta_2^2 / (2 rho_r)``, to
its aggregate share, and the server adds nothing. Shown here: the calibration gives each round its stated
loss, so the run's loss is ``privacy_loss_for(task)``; the noise in the sum has twice one aggregator's
variance; the released (debiased) dispersion and Q are unbiased, as on the in-process engine, with error
bars of the right variance; and no route releases these rounds without the noise. Monte Carlo with fixed
seeds; tolerances from the standard errors. The heterogeneity tests use synthetic vectors (no real column),
and so do these.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fedstats.analyses._prio3 import (
    AggregatorNoise,
    AggregatorSum,
    Prio3Backend,
    heterogeneity_noise,
    planned_noise,
)
from fedstats.analyses.heterogeneity import (
    HeterogeneityConfig,
    heterogeneity,
    heterogeneity_from_config,
    plan_rounds,
)
from fedstats.engine import Engine, InMemoryPopulation
from fedstats.engine.backends import RoundJob, SerialBackend
from fedstats.engine.rounds import Round
from fedstats.errors import ParameterError
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.randomness import RandomSource
from fedstats.wire.registry import config_for, privacy_loss_for

SEED = bytes(range(32))


def _vectors(n: int, d: int, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.beta(0.6, 0.6, (n, d))
    x[:, 0] = 0.0  # a border coordinate: the released centre is clipped there
    return x


def _task(**params: Any) -> dict[str, Any]:
    return {
        "analysis": "heterogeneity",
        "params": {"dim": 3, **params},
        "privacy": {"epsilon": 2.0, "delta": 1e-5},
    }


def _rounds(cfg: HeterogeneityConfig, x: np.ndarray) -> list[Round]:
    """The rounds the protocol yields for ``x`` (round 2 after an exact round 1: its params are public)."""
    gen = cfg.plan(n_clients=x.shape[0], public_seed=SEED)
    first = next(gen)
    pop = InMemoryPopulation({cfg.column: x})
    s1 = SerialBackend().sum_round(_job(first, pop, 0))
    # the protocol checks the aggregators' mark: hand it the sum as Prio3 would (noise-free here)
    second = gen.send(AggregatorSum(s1.total, s1.n_clients, planned_noise(first), 2))
    return [first, second]


def _job(rnd: Round, pop: InMemoryPopulation, seed: int) -> RoundJob:
    n = pop.n_clients
    return RoundJob(rnd, pop, RandomSource(seed), 0, 64, (0, n), np.zeros(0, dtype=np.int64))


@pytest.mark.parametrize(
    "params",
    [{}, {"accounting": "zcdp", "round1_fraction": 0.3}, {"statistic": "dispersion", "p": 1.0}],
)
def test_each_aggregator_s_noise_gives_the_round_its_stated_loss(params: dict[str, Any]) -> None:
    task = _task(**params)
    cfg = config_for(task).on_aggregators()
    assert cfg.noise == "aggregators" and not cfg.secure
    assert cfg.privacy_loss() == privacy_loss_for(task)  # the task's budget, unchanged
    n = 40
    p1, p2, _ = plan_rounds(cfg, n, 3)
    noise = heterogeneity_noise(config_for(task), n_clients=n)
    for plan, stated in zip((p1, p2), cfg.round_losses(), strict=True):
        assert plan.noise == "aggregators" and plan.loss == stated
        assert stated.rho is not None
        # sigma_a^2 = Delta_2^2 / (2 rho_r), Delta_2 on the integer grid: k blocks of unit sensitivity
        # times 2^f, plus the randomized rounding
        k = len(plan.blocks)
        assert (
            math.sqrt(k) * 2.0**plan.frac_bits
            <= plan.l2
            <= (math.sqrt(k) + 1) * 2.0**plan.frac_bits
        )
        one = plan.share_variance
        assert plan.l2**2 / (2.0 * one) <= stated.rho  # one aggregator alone is rho_r-zCDP
        assert plan.l2**2 / (2.0 * one) == pytest.approx(stated.rho, rel=1e-9)
        # the error bars' noise: both aggregators', in normalised units
        assert plan.sigma == pytest.approx(math.sqrt(2.0 * one) / 2.0**plan.frac_bits, rel=1e-12)
        assert noise[plan.name] == AggregatorNoise("discrete_gaussian", one)
    # the rounds state the same noise, and clients add no share
    x = _vectors(n, 3)
    for rnd in _rounds(cfg, x):
        assert planned_noise(rnd) == noise[rnd.name]
        assert rnd.params["noise"] == "none"


def test_the_privacy_loss_reported_and_charged_is_the_task_s() -> None:
    task = _task(statistic="all")
    cfg = config_for(task).on_aggregators()
    x = _vectors(30, 3)
    ledger = PrivacyLedger()
    be = Prio3Backend(randomness=RandomSource(11))
    res = heterogeneity_from_config(
        x, cfg, engine=Engine(backend=be, randomness=RandomSource(4)), ledger=ledger
    )
    want = privacy_loss_for(task)
    got = (res.details["epsilon_achieved"], res.details["delta_achieved"])
    assert got == pytest.approx((want.epsilon, want.delta), rel=1e-12)
    assert res.details["rho_achieved"] == pytest.approx(want.rho, rel=1e-12)
    total = ledger.total()
    assert (total.epsilon, total.delta) == pytest.approx((want.epsilon, want.delta), rel=1e-12)
    assert res.mechanism == "aggregator-discrete-gaussian" and res.noise == "aggregators"
    # both rounds went through Prio3, range-checked at the report's own bound (no share margin)
    assert [s.accepted for s in be.stats] == [30, 30] and be.rejected == 0
    f = [int(r["frac_bits"]) for r in res.rounds]
    assert [s.variant.rsplit("shifted ", 1)[1] for s in be.stats] == [f"{2**g + 1})" for g in f]


@pytest.mark.slow
def test_the_sum_carries_twice_one_aggregator_s_variance() -> None:
    n, d = 6, 3
    x = _vectors(n, d, seed=1)
    cfg = HeterogeneityConfig(epsilon=4.0, delta=1e-5, dim=d, noise="aggregators")
    rnd = _rounds(cfg, x)[0]
    one = planned_noise(rnd)
    assert one is not None
    pop = InMemoryPopulation({"x": x})
    exact = SerialBackend().sum_round(_job(rnd, pop, 5)).total.astype(np.float64)
    reps = 120
    diff = np.empty((reps, rnd.dim))
    for r in range(reps):
        s = Prio3Backend(randomness=RandomSource(900 + r)).sum_round(_job(rnd, pop, 5))
        assert isinstance(s, AggregatorSum) and s.aggregator_noise == one and s.aggregators == 2
        diff[r] = np.asarray(s.total, dtype=np.float64) - exact
    se = diff.std(axis=0, ddof=1) / math.sqrt(reps)
    assert np.all(np.abs(diff.mean(axis=0)) <= 4.5 * se)  # unbiased
    # pooled over reps x dim Gaussian entries: chi-square with k degrees, sd of the ratio sqrt(2 / k);
    # one aggregator's variance (ratio 1/2) lies far outside
    k = reps * rnd.dim
    ratio = float((diff**2).mean()) / (2.0 * one.parameter)
    assert abs(ratio - 1.0) <= 5.0 * math.sqrt(2.0 / k)


@pytest.fixture(scope="module")
def runs() -> dict[str, np.ndarray]:
    """Errors of the released dispersion and Q over RUNS Prio3 runs with the aggregators' noise.

    Fixed data and client randomness; only the aggregators' noise varies, as in a repeated release.
    """
    x = _vectors(30, 3)
    rows = []
    for s in range(RUNS):
        be = Prio3Backend(randomness=RandomSource(5000 + s))
        r = heterogeneity(
            x,
            epsilon=4.0,
            delta=1e-5,
            noise="aggregators",
            engine=Engine(backend=be, randomness=RandomSource(3)),
        )
        assert r.dispersion is not None and r.q is not None and r.i2 is not None
        td, tq = float(r.dispersion.truth or 0.0), float(r.q.truth or 0.0)
        assert r.dispersion.mse_theory is not None and r.q.noise_sd is not None
        rows.append(
            [
                r.dispersion.details["unclipped_estimate"] - td,
                r.dispersion.details["plugin_unclipped"] - td,
                r.dispersion.mse_theory,
                r.q.details["unclipped_estimate"] - tq,
                r.q.details["plugin_unclipped"] - tq,
                r.q.noise_sd**2,
                bool(r.dispersion.covers()),
                bool(r.q.covers()),
                bool(r.i2.covers()),
            ]
        )
    a = np.asarray(rows, dtype=np.float64)
    return {
        "dispersion": a[:, 0],
        "dispersion_plugin": a[:, 1],
        "dispersion_mse": a[:, 2],
        "q": a[:, 3],
        "q_plugin": a[:, 4],
        "q_noise_var": a[:, 5],
        "cover": a[:, 6:].mean(axis=0),
    }


RUNS = 200


def _z(err: np.ndarray) -> float:
    return float(err.mean() / (err.std(ddof=1) / math.sqrt(err.size)))


@pytest.mark.slow
@pytest.mark.parametrize("stat", ["dispersion", "q"])
def test_released_statistics_on_prio3_are_unbiased(runs: dict[str, np.ndarray], stat: str) -> None:
    # debiased: |z| <= 3.5 (fails with probability 5e-4 when unbiased); the plug-in, biased up by the
    # round-1 noise, is caught by the same test at these settings (its z is above 3.5)
    assert abs(_z(runs[stat])) <= 3.5
    assert _z(runs[f"{stat}_plugin"]) > 3.5


@pytest.mark.slow
def test_error_bars_on_prio3_use_both_aggregators_variance(runs: dict[str, np.ndarray]) -> None:
    # the mean squared error of the dispersion against its closed form (which holds 2 sigma_a^2): within
    # 4 standard errors of a variance estimate, sqrt(2 / RUNS) relative; half the noise (one aggregator's
    # variance in the closed form) gives a ratio near 2, far outside
    sd = 4.0 * math.sqrt(2.0 / RUNS)
    ratio = float((runs["dispersion"] ** 2).mean() / runs["dispersion_mse"].mean())
    assert 1.0 - sd <= ratio <= 1.0 + sd
    # Q's error holds its round-2 noise, independent of the rest: at least noise_sd^2 (within the same
    # tolerance) whose variance is both aggregators'
    q_ratio = float(runs["q"].var(ddof=1) / runs["q_noise_var"].mean())
    assert q_ratio >= 1.0 - sd
    # the intervals cover at least at the nominal 95% (binomial, 3 standard errors)
    assert np.all(runs["cover"] >= 0.95 - 3.0 * math.sqrt(0.95 * 0.05 / RUNS))


def test_no_route_releases_these_rounds_without_the_aggregators_noise() -> None:
    x = _vectors(20, 3)
    kw: dict[str, Any] = {"epsilon": 2.0, "delta": 1e-5, "noise": "aggregators"}
    with pytest.raises(ParameterError, match="engine"):  # the serial route adds no noise
        heterogeneity(x, **kw, randomness=RandomSource(1))
    wrong = Prio3Backend(noise={"centre": AggregatorNoise("discrete_gaussian", 4.0)})
    with pytest.raises(ParameterError, match="engine"):  # another scale than the planned one
        heterogeneity(x, **kw, engine=Engine(backend=wrong, randomness=RandomSource(1)))
    with pytest.raises(ParameterError, match="float_noise"):
        HeterogeneityConfig(epsilon=1.0, delta=1e-5, noise="aggregators", float_noise=True)
    with pytest.raises(ParameterError, match="noise"):
        HeterogeneityConfig(epsilon=1.0, delta=1e-5, noise="aggregators", secure=True)
    with pytest.raises(ParameterError, match="epsilon"):
        heterogeneity_noise(HeterogeneityConfig(dim=3), n_clients=10)
    # without a budget the rounds state no noise and Prio3 sums exactly, as the engine does
    cfg = HeterogeneityConfig(dim=3, noise="aggregators")
    assert all(planned_noise(r) is None for r in _rounds(cfg, x))
    plain = heterogeneity(x, no_privacy=True, engine=Engine(randomness=RandomSource(2)))
    got = heterogeneity_from_config(
        x, cfg, engine=Engine(backend=Prio3Backend(), randomness=RandomSource(2))
    )
    assert got.estimate == plain.estimate
