"""One face per analysis (issue 25, item 1): config, plan and privacy loss of every registered analysis.

For each analysis of :data:`fedstats.wire.registry.ANALYSES`:

(a) ``from_params`` refuses an unknown key and every out-of-range option (naming it), and
    ``from_params(to_params())`` round-trips;
(b) the plan is deterministic: replaying it with the same public seed and the same sums gives the same
    rounds (name, encoder, canonical digest of the parameters, dim, bound, client range); a different
    seed changes the rounds exactly where the analysis uses the seed;
(c) the library reports the privacy loss that :func:`privacy_loss_for` gives (what the server's ledger and
    the device's budget charge): the result's (epsilon, delta, rho) and the library ledger's total.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats import wire
from fedstats.analyses._config import NOT_PRIVATE, plan_randomness
from fedstats.engine import Engine, InMemoryPopulation
from fedstats.engine.rounds import Round, RoundSum
from fedstats.errors import ParameterError
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.randomness import RandomSource
from fedstats.wire.registry import (
    ANALYSES,
    config_for,
    encoder_name,
    lookup,
    plan_for,
    privacy_loss_for,
    resolve,
)

N = 240
SEED_A = bytes(range(32))
SEED_B = bytes(range(1, 33))

# one valid task per analysis, the options each refuses out of range, and whether its rounds use the seed
TASKS: dict[str, dict[str, Any]] = {
    "exact-mean": {
        "params": {"clip": 64.0},
        "privacy": {"epsilon": None, "delta": None},
        "bad": [
            ("clip", 0.0),
            ("clip", -1.0),
            ("frac_bits", 53),
            ("frac_bits", -1),
            ("column", ""),
        ],
        "seeded": False,
    },
    "bitpushing-mean": {
        "params": {"low": 0.0, "high": 100.0},
        "privacy": {"epsilon": 1.0, "delta": 0.0},
        "bad": [
            ("high", -5.0),
            ("resolution", 0.0),
            ("bit_depth", 0),
            ("bit_depth", 53),
            ("bits_per_client", 0),
            ("bits_per_client", 9),
            ("round1_fraction", 1.0),
            ("round1_fraction", 0.0),
            ("method", "magic"),
        ],
        "seeded": True,
    },
    "bitpushing-variance": {
        "params": {"low": 0.0, "high": 100.0, "mean_fraction": 0.25},
        "privacy": {"epsilon": 2.0, "delta": 0.0},
        "bad": [("mean_fraction", 0.0), ("mean_fraction", 1.0), ("bits_per_client", 0)],
        "seeded": True,
    },
    "performance-gap": {
        "params": {"mechanism": "R"},
        "privacy": {"epsilon": 1.0, "delta": 0.0},
        "bad": [
            ("mechanism", "Q"),
            ("n_groups", 1),
            ("pair", [0, 0]),
            ("pair", [0, 2]),
            ("fractions", [0.2, 0.2]),
            ("fractions", [1.5, -0.5]),
            ("confidence", 1.0),
            ("resolution_bits", 1),
            ("resolution_bits", 31),
            ("accounting", "optimistic"),
            ("scale", "percent"),
        ],
        "seeded": False,
    },
    "heterogeneity": {
        "params": {"dim": 4},
        "privacy": {"epsilon": 4.0, "delta": 1e-5},
        "bad": [
            ("dim", 0),
            ("p", 0.5),
            ("p", 65.0),
            ("min_variance", 0.0),
            ("min_variance", 0.3),
            ("round1_fraction", 1.0),
            ("min_reporting", 0.0),
            ("min_reporting", 1.5),
            ("confidence", 0.0),
            ("frac_bits", 3),
            ("frac_bits", 39),
            ("statistic", "median"),
            (
                "mechanism",
                "classical",
            ),  # distributed shares are the discrete Gaussian: analytic only
        ],
        "seeded": False,
    },
    "fed-chi2": {
        "params": {"shape": [3, 4]},
        "privacy": {"epsilon": None, "delta": None},
        "bad": [
            ("shape", [1, 4]),
            ("shape", [3]),
            ("encoding_size", 1),
            ("max_cell", 0),
            ("level", 1.0),
            ("decoder", "median"),
            ("drop_empty", "yes"),
        ],
        "seeded": True,
    },
    "fed-entropy": {
        "params": {"m": 5, "encoding_size": 200},
        "privacy": {"epsilon": None, "delta": None},
        "bad": [
            ("m", 1),
            ("encoding_size", 1),
            ("fd_step", 0.0),
            ("fd_step", 0.6),
            ("coupling", "x"),
        ],
        "seeded": True,
    },
    "g-test": {
        "params": {"shape": [3, 4], "encoding_size": 200},
        "privacy": {"epsilon": None, "delta": None},
        "bad": [("shape", [3, 1]), ("encoding_size", 1), ("fd_step", -0.1), ("level", 0.0)],
        "seeded": True,
    },
}


def _task(name: str, **params: Any) -> dict[str, Any]:
    t = TASKS[name]
    return {
        "analysis": name,
        "version": 1,
        "params": {**t["params"], **params},
        "privacy": {**t["privacy"], "population": "default"},
    }


def _population(name: str) -> InMemoryPopulation:
    rng = np.random.default_rng(11)
    if name in ("exact-mean", "bitpushing-mean", "bitpushing-variance"):
        return InMemoryPopulation({"value": rng.uniform(10.0, 60.0, N)})
    if name == "performance-gap":
        return InMemoryPopulation({"group": np.arange(N) % 2, "value": rng.uniform(-1.0, 1.0, N)})
    if name == "heterogeneity":
        return InMemoryPopulation({"x": rng.uniform(0.1, 0.9, (N, 4))})
    if name == "fed-entropy":
        return InMemoryPopulation({"x": rng.integers(0, 5, N)})
    return InMemoryPopulation({"x": rng.integers(0, 3, N), "y": rng.integers(0, 4, N)})


def test_every_registered_analysis_has_a_task_here() -> None:
    assert {name for name, _ in ANALYSES} == set(TASKS)


def test_importing_the_registry_imports_no_analysis() -> None:
    import subprocess
    import sys

    code = (
        "import sys, fedstats.wire.registry as r; "
        "print(sorted(m for m in sys.modules if m.startswith('fedstats.analyses')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- (a) the config: unknown keys, ranges, round trip ------------------------------------------------


@pytest.mark.parametrize("name", sorted(TASKS))
def test_config_refuses_an_unknown_key_naming_it(name: str) -> None:
    with pytest.raises(ParameterError) as err:
        config_for(_task(name, colour="blue"))
    assert err.value.name == "params" and "colour" in str(err.value)


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [(name, key, value) for name, t in sorted(TASKS.items()) for key, value in t["bad"]],
)
def test_config_refuses_an_out_of_range_option_naming_it(name: str, key: str, value: Any) -> None:
    config_for(_task(name))  # the task is valid without the bad value
    with pytest.raises(ParameterError) as err:
        config_for(_task(name, **{key: value}))
    assert err.value.name == f"params.{key}", str(err.value)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_config_round_trips_through_its_canonical_params(name: str) -> None:
    task = _task(name)
    cfg = config_for(task)
    params = cfg.to_params()
    assert set(params) == set(type(cfg).param_names())  # every option, defaults included
    again = config_for({**task, "params": wire.decode(wire.encode(params))})
    assert again == cfg
    assert again.to_params() == params
    assert dataclasses.is_dataclass(cfg) and type(cfg) is resolve(lookup(name, 1).config)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_config_is_frozen(name: str) -> None:
    cfg = config_for(_task(name))
    field = dataclasses.fields(cfg)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cfg, field, None)


def test_privacy_parameters_are_checked_by_the_config() -> None:
    with pytest.raises(ParameterError) as err:
        config_for({**_task("exact-mean"), "privacy": {"epsilon": 1.0, "delta": None}})
    assert err.value.name == "privacy.epsilon"
    with pytest.raises(ParameterError) as err:
        config_for({**_task("bitpushing-mean"), "privacy": {"epsilon": 1.0, "delta": 1e-6}})
    assert err.value.name == "privacy.delta"
    with pytest.raises(ParameterError) as err:
        config_for({**_task("performance-gap"), "privacy": {"epsilon": -1.0, "delta": 0}})
    assert err.value.name == "privacy.epsilon"
    with pytest.raises(ParameterError) as err:
        config_for({**_task("heterogeneity"), "privacy": {"epsilon": 1.0, "delta": None}})
    assert err.value.name.startswith("privacy.")


def test_a_required_option_missing_is_named() -> None:
    with pytest.raises(ParameterError) as err:
        config_for({**_task("heterogeneity"), "params": {}})
    assert err.value.name == "params.dim"
    with pytest.raises(ParameterError) as err:
        config_for({**_task("bitpushing-mean"), "params": {"low": 0.0}})
    assert err.value.name == "params.high"


def test_a_task_cannot_choose_where_heterogeneity_noise_is_added() -> None:
    for key, value in (("noise", "central"), ("secure", False), ("float_noise", True)):
        with pytest.raises(ParameterError) as err:
            config_for(_task("heterogeneity", **{key: value}))
        assert err.value.name == "params" and key in str(err.value)
    cfg = config_for(_task("heterogeneity"))
    assert (cfg.noise, cfg.secure, cfg.float_noise) == ("distributed", True, False)


@settings(max_examples=40, deadline=None)
@given(
    frac=st.floats(allow_nan=False, allow_infinity=False, width=64),
    p=st.floats(allow_nan=False, allow_infinity=True, width=64),
)
def test_heterogeneity_ranges_hold_for_any_value(frac: float, p: float) -> None:
    ok = 0.0 < frac < 1.0 and 1.0 <= p <= 64.0
    task = _task("heterogeneity", round1_fraction=frac, p=p)
    if ok:
        cfg = config_for(task)
        assert (cfg.round1_fraction, cfg.p) == (frac, p)
    else:
        with pytest.raises(ParameterError) as err:
            config_for(task)
        assert err.value.name in ("params.round1_fraction", "params.p")


@settings(max_examples=40, deadline=None)
@given(
    low=st.floats(-1e6, 1e6, allow_nan=False),
    width=st.floats(-10.0, 1e6, allow_nan=False),
    bits=st.integers(-2, 60),
)
def test_bitpushing_ranges_hold_for_any_value(low: float, width: float, bits: int) -> None:
    high = low + width
    task = _task("bitpushing-mean", low=low, high=high, bits_per_client=bits)
    try:
        cfg = config_for(task)
    except ParameterError as exc:
        assert exc.name.startswith("params.")
        assert not (high > low and bits == 1)  # a proper range with one bit is always valid
        return
    assert cfg.high > cfg.low and 1 <= cfg.bits_per_client <= cfg.encoding().b


# -- (b) the plan: deterministic, keyed by the public seed ---------------------------------------------


def _describe(rnd: Round) -> tuple[Any, ...]:
    return (
        rnd.name,
        encoder_name(rnd.encode),
        wire.digest(rnd.params),
        rnd.dim,
        rnd.bound,
        rnd.client_range,
    )


def _recorded(
    gen: Generator[Round, RoundSum, Any], rounds: list[tuple[Any, ...]], sums: list[RoundSum]
) -> Generator[Round, RoundSum, Any]:
    rnd = next(gen)
    while True:
        rounds.append(_describe(rnd))
        s = yield rnd
        sums.append(s)
        try:
            rnd = gen.send(s)
        except StopIteration as stop:
            return stop.value


def _replay(
    gen: Generator[Round, RoundSum, Any], sums: list[RoundSum], *, complete: bool = True
) -> tuple[list[tuple[Any, ...]], Any]:
    """Drive a plan with given sums, as a device does; return the rounds it yields and its result."""
    rounds = [_describe(next(gen))]
    for s in sums:
        try:
            rounds.append(_describe(gen.send(s)))
        except StopIteration as stop:
            return rounds, stop.value
    if not complete:
        return rounds, None
    raise AssertionError("the plan wants more rounds than were summed")


def _run(name: str, task: dict[str, Any], seed: bytes) -> tuple[list[Any], list[RoundSum], Any]:
    rounds: list[tuple[Any, ...]] = []
    sums: list[RoundSum] = []
    plan = plan_for(task, n_clients=N, public_seed=seed)
    result = Engine(randomness=RandomSource(7)).run(
        _recorded(plan, rounds, sums), _population(name)
    )
    return rounds, sums, result


@pytest.mark.parametrize("name", sorted(TASKS))
def test_plan_replays_identically_from_the_public_sums(name: str) -> None:
    task = _task(name)
    rounds, sums, result = _run(name, task, SEED_A)
    assert rounds and len(sums) == len(rounds)
    replayed, again = _replay(plan_for(task, n_clients=N, public_seed=SEED_A), sums)
    assert replayed == rounds
    assert again.estimate == result.estimate or (
        math.isnan(again.estimate) and math.isnan(result.estimate)
    )
    # the seed changes the rounds exactly where the analysis uses it
    other, _ = _replay(plan_for(task, n_clients=N, public_seed=SEED_B), sums[:1], complete=False)
    if TASKS[name]["seeded"]:
        assert other != rounds[: len(other)]
    else:
        assert other == rounds[: len(other)]


def test_plan_refuses_a_seed_that_is_not_32_bytes() -> None:
    for seed in (b"", bytes(31), bytes(33), "00" * 32):
        with pytest.raises(ParameterError):
            plan_for(_task("bitpushing-mean"), n_clients=N, public_seed=seed)  # type: ignore[arg-type]


def test_bitpushing_plan_keeps_the_bridge_derivation_of_its_seed() -> None:
    """The stage seed is ``plan_randomness(seed).public_seed("bitpushing")``, as before the faces."""
    from fedstats.analyses.bitpushing.methods import make_stage
    from fedstats.analyses.bitpushing.protocol import mean_protocol

    cfg = config_for(_task("bitpushing-mean"))
    expected = mean_protocol(
        make_stage(cfg.method, **cfg.stage_options()),
        "value",
        cfg.encoding(),
        N,
        method=cfg.method,
        public_seed=plan_randomness(SEED_A).public_seed("bitpushing"),
    )
    got = plan_for(_task("bitpushing-mean"), n_clients=N, public_seed=SEED_A)
    assert _describe(next(got)) == _describe(next(expected))


def test_the_deprecated_protocol_for_is_gone() -> None:
    """Every caller builds the task's plan from the config (plan_for / config_for)."""
    from fedstats.wire import registry

    assert not hasattr(registry, "protocol_for")
    assert "protocol_for" not in registry.__all__


# another valid value of one option per analysis: a different configuration, so a different id
OTHER_VALUE: dict[str, tuple[str, Any]] = {
    "exact-mean": ("clip", 32.0),
    "bitpushing-mean": ("high", 50.0),
    "bitpushing-variance": ("mean_fraction", 0.5),
    "performance-gap": ("mechanism", "L"),
    "heterogeneity": ("dim", 5),
    "fed-chi2": ("shape", [3, 5]),
    "fed-entropy": ("m", 6),
    "g-test": ("shape", [3, 5]),
}


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(sorted(TASKS)), data=st.data())
def test_spelled_out_defaults_give_the_same_task_id(name: str, data: st.DataObject) -> None:
    """A task with any subset of its defaults written out has the id of the task without them (the id
    hashes the canonical params), while what is signed and relayed keeps the params as given; another
    value of an option is another task."""
    from fedstats.wire.tasks import normalize_task, task_id

    def task(params: dict[str, Any]) -> dict[str, Any]:
        return normalize_task(
            {
                **_task(name),
                "params": params,
                "cohort_size": 10,
                "secure_aggregation": {"max_session": 10},
            }
        )

    given_params = dict(TASKS[name]["params"])
    full = config_for(task(given_params)).to_params()
    spelled = data.draw(st.sets(st.sampled_from(sorted(full))), label="spelled out")
    params = {**{k: full[k] for k in spelled}, **given_params}
    variant = task(params)
    assert variant["params"] == params
    assert task_id(variant) == task_id(task(given_params))
    assert task_id(task(full)) == task_id(variant)
    key, value = OTHER_VALUE[name]
    assert full[key] != value
    assert task_id(task({**params, key: value})) != task_id(variant)


# -- (c) one privacy loss: the library reports what the server and the device charge -------------------


@pytest.mark.parametrize("name", ["exact-mean", "fed-chi2", "fed-entropy", "g-test"])
def test_exact_sums_are_not_private(name: str) -> None:
    loss = privacy_loss_for(_task(name))
    assert loss == NOT_PRIVATE and math.isinf(loss.epsilon)
    _, _, result = _run(name, _task(name), SEED_A)
    assert result.epsilon is None  # the library reports no DP guarantee for them
    with pytest.raises(ParameterError):  # and a ledger refuses to record them
        PrivacyLedger().spend_loss(loss, label=name)


@pytest.mark.parametrize(
    ("method", "bits"), [("adaptive", 1), ("basic", 1), ("weighted", 3), ("adaptive", 2)]
)
def test_bitpushing_mean_loss_is_what_the_library_reports(method: str, bits: int) -> None:
    from fedstats.analyses.bitpushing.api import mean

    task = _task("bitpushing-mean", method=method, bits_per_client=bits)
    cfg = config_for(task)
    loss = privacy_loss_for(task)
    ledger = PrivacyLedger()
    options = {k: v for k, v in cfg.stage_options().items() if k != "epsilon"}
    res = mean(
        _population("bitpushing-mean").columns["value"],
        cfg.encoding(),
        method=cfg.method,
        epsilon=cfg.epsilon,
        randomness=RandomSource(3),
        ledger=ledger,
        **options,
    )
    assert (res.epsilon, res.delta) == (loss.epsilon, loss.delta)
    assert ledger.total() == dataclasses.replace(
        loss, mechanisms=()
    )  # the loss also describes them
    assert loss.epsilon == pytest.approx(
        1.0, rel=1e-12
    )  # bits randomized responses at eps/bits each
    _, _, planned = _run("bitpushing-mean", task, SEED_A)
    assert planned.epsilon == pytest.approx(loss.epsilon, rel=1e-12)


def test_bitpushing_variance_loss_is_what_the_library_reports() -> None:
    from fedstats.analyses.bitpushing.api import variance

    task = _task("bitpushing-variance")
    cfg = config_for(task)
    loss = privacy_loss_for(task)
    ledger = PrivacyLedger()
    res = variance(
        _population("bitpushing-variance").columns["value"],
        cfg.encoding(),
        method=cfg.method,
        epsilon=cfg.epsilon,
        mean_fraction=cfg.mean_fraction,
        randomness=RandomSource(3),
        ledger=ledger,
        **{k: v for k, v in cfg.stage_options().items() if k != "epsilon"},
    )
    assert (res.epsilon, res.delta) == (loss.epsilon, loss.delta)
    assert ledger.total() == dataclasses.replace(
        loss, mechanisms=()
    )  # each record in one stage: parallel


@pytest.mark.parametrize(
    ("mechanism", "accounting"), [("R", "exact"), ("L", "exact"), ("R", "paper")]
)
def test_performance_gap_loss_is_the_mechanisms_true_loss(mechanism: str, accounting: str) -> None:
    from fedstats.analyses.performance_gap.api import measure_performance_gap

    eps = 1.0
    task = _task("performance-gap", mechanism=mechanism, accounting=accounting)
    task["privacy"]["epsilon"] = eps
    loss = privacy_loss_for(task)
    _, _, planned = _run("performance-gap", task, SEED_A)
    assert (planned.epsilon, planned.delta, None) == (loss.epsilon, loss.delta, loss.rho)
    assert planned.true_loss == loss.epsilon
    pop = _population("performance-gap").columns
    ledger = PrivacyLedger()
    lib = measure_performance_gap(
        pop["group"],
        pop["value"],
        mechanism=mechanism,
        epsilon=eps,
        accounting=accounting,
        scale="signed",
        randomness=RandomSource(3),
        ledger=ledger,
    )
    assert lib.epsilon == pytest.approx(loss.epsilon, rel=1e-12)
    assert ledger.total().epsilon == pytest.approx(loss.epsilon, rel=1e-12)
    if accounting == "paper":
        # M_R with eps1 = eps2 = eps: max(eps2, eps1 + ln 2b), b = e^eps / (1 + e^eps), above the budget
        b = math.exp(eps) / (1.0 + math.exp(eps))
        assert loss.epsilon == pytest.approx(max(eps, eps + math.log(2.0 * b)), rel=1e-9)
        assert loss.epsilon > eps
    else:
        assert loss.epsilon <= eps


def test_performance_gap_split_does_not_depend_on_the_cohort_size() -> None:
    """The plan's split is planned on the shares alone; any cohort size gives the same split."""
    from fedstats.analyses.performance_gap.allocation import allocate, layout_from_fractions

    for mechanism in ("R", "L"):
        for fractions in (None, (0.3, 0.7)):
            cfg = config_for(
                {
                    **_task("performance-gap", mechanism=mechanism, fractions=fractions),
                    "privacy": {"epsilon": 0.7, "delta": 0.0},
                }
            )
            ref = cfg.allocation().mechanism
            for k in (2.0, 97.0, 10_000.0, 1e7):
                fr = list(fractions) if fractions else None
                alloc = allocate(mechanism, 0.7, layout_from_fractions(k, fr, (0, 1)))
                assert (alloc.epsilon1, alloc.epsilon2) == (ref.epsilon1, ref.epsilon2)


@pytest.mark.parametrize("accounting", ["basic", "zcdp"])
def test_heterogeneity_loss_is_the_zcdp_composition_the_library_reports(accounting: str) -> None:
    from fedstats.analyses.heterogeneity.api import heterogeneity_from_config

    task = _task("heterogeneity", accounting=accounting)
    cfg = config_for(task)
    loss = privacy_loss_for(task)
    assert loss.rho is not None and loss.rho > 0
    # two Gaussian rounds composed as the ledger composes them: rho adds, epsilon from the summed rho
    r1, r2 = cfg.round_losses()
    assert loss.rho == pytest.approx(r1.rho + r2.rho, rel=1e-15)
    assert loss.delta == pytest.approx(1e-5, rel=1e-12)
    assert loss.epsilon < 4.0  # tighter than adding the rounds' epsilons (the nominal budget)
    ledger = PrivacyLedger()
    x = _population("heterogeneity").columns["x"]
    res = heterogeneity_from_config(x, cfg, randomness=RandomSource(3), ledger=ledger)
    assert ledger.total() == dataclasses.replace(loss, mechanisms=())  # the library's ledger
    achieved = (
        res.details["epsilon_achieved"],
        res.details["delta_achieved"],
        res.details["rho_achieved"],
    )  # what the rounds' mechanisms report at the number of shares summed
    assert achieved == pytest.approx((loss.epsilon, loss.delta, loss.rho), rel=1e-9)
    _, _, planned = _run("heterogeneity", task, SEED_A)
    assert (
        planned.details["epsilon_achieved"],
        planned.details["delta_achieved"],
        planned.details["rho_achieved"],
    ) == pytest.approx((loss.epsilon, loss.delta, loss.rho), rel=1e-9)


@pytest.mark.parametrize(
    "options",
    [
        {"noise": "central"},
        {"noise": "central", "mechanism": "classical"},
        {"noise": "central", "accounting": "zcdp"},
        {"noise": "distributed", "round1_fraction": 0.3},
        {"noise": "central", "float_noise": True},
    ],
)
def test_heterogeneity_round_losses_are_what_the_rounds_mechanisms_report(
    options: dict[str, Any],
) -> None:
    """Library configs too (central, classical, float noise): each round reports its calibrated loss."""
    from fedstats.analyses.heterogeneity.config import HeterogeneityConfig, plan_rounds

    cfg = HeterogeneityConfig(epsilon=2.0, delta=1e-6, **options)
    for n, d in ((10, 3), (500, 64)):
        p1, p2, _ = plan_rounds(cfg, n, d)
        for plan, loss in zip((p1, p2), cfg.round_losses(), strict=True):
            assert plan.spent is not None
            assert (plan.spent.epsilon, plan.spent.delta, plan.spent.rho) == pytest.approx(
                (loss.epsilon, loss.delta, loss.rho), rel=1e-9
            )


def test_heterogeneity_without_a_budget_is_not_private() -> None:
    from fedstats.analyses.heterogeneity.config import HeterogeneityConfig

    assert HeterogeneityConfig(dim=3).privacy_loss() == NOT_PRIVATE
    assert HeterogeneityConfig(dim=3).round_losses() == ()


def test_heterogeneity_central_plan_needs_the_servers_randomness() -> None:
    from fedstats.analyses.heterogeneity.config import HeterogeneityConfig

    cfg = HeterogeneityConfig(epsilon=1.0, delta=1e-6, dim=3)
    with pytest.raises(ParameterError) as err:
        cfg.plan(n_clients=10, public_seed=SEED_A)
    assert err.value.name == "randomness"
    with pytest.raises(ParameterError):
        cfg.to_params()  # central noise is not a task's


def test_heterogeneity_api_and_config_share_their_defaults() -> None:
    import inspect

    from fedstats.analyses.heterogeneity.api import heterogeneity
    from fedstats.analyses.heterogeneity.config import HeterogeneityConfig

    defaults = {f.name: f.default for f in dataclasses.fields(HeterogeneityConfig)}
    for name, parameter in inspect.signature(heterogeneity).parameters.items():
        if name in defaults and name not in ("epsilon", "delta"):
            assert parameter.default == defaults[name], name


def test_fed_h_default_step_is_the_estimators() -> None:
    from fedstats.analyses.entropy.config import FedEntropyConfig
    from fedstats.analyses.entropy.estimator import DEFAULT_FD_STEP

    assert FedEntropyConfig(m=3).fd_step == DEFAULT_FD_STEP


def test_performance_gap_api_shares_the_configs_defaults() -> None:
    import inspect

    from fedstats.analyses.performance_gap.api import measure_performance_gap
    from fedstats.analyses.performance_gap.config import PerformanceGapConfig

    defaults = {f.name: f.default for f in dataclasses.fields(PerformanceGapConfig)}
    shared = ("mechanism", "accounting", "confidence", "resolution_bits")
    params = inspect.signature(measure_performance_gap).parameters
    for name in shared:
        assert params[name].default == defaults[name], name
    # the one documented difference: the library reads rates, a task's values are in [-1, 1]
    assert (params["scale"].default, defaults["scale"]) == ("rate", "signed")


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(TASKS)), data=st.data())
def test_any_json_value_of_an_option_gives_a_config_or_a_parameter_error(
    name: str, data: st.DataObject
) -> None:
    """A device parses tasks relayed by an untrusted server: any value is refused cleanly, by name."""
    from fedstats.analyses.bitpushing.config import BitPushingMeanConfig

    cls = resolve(lookup(name, 1).config)
    key = data.draw(st.sampled_from(cls.param_names()))
    value = data.draw(_JSON)
    try:
        cfg = config_for(_task(name, **{key: value}))
    except ParameterError as exc:
        assert exc.name in ("params", f"params.{key}") or (
            # bit pushing checks the range's width against the bit depth it implies
            issubclass(cls, BitPushingMeanConfig) and exc.name.startswith("params.")
        ), str(exc)
        return
    assert config_for({**_task(name), "params": cfg.to_params()}) == cfg


def test_each_face_lives_in_its_analysis_package_and_imports_nothing_above_it() -> None:
    import subprocess
    import sys

    modules = sorted({spec.config.partition(":")[0] for spec in ANALYSES.values()})
    for spec in ANALYSES.values():
        package = spec.config.rsplit(".", 2)[0]
        assert spec.config.startswith("fedstats.analyses.") and spec.config.split(":")[0].endswith(
            ".config"
        )
        assert any(enc.startswith(package + ".") for enc in spec.encoders), spec.name
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('fedstats.')}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(out.stdout))  # a printed list of layer names
    assert not loaded & {"service", "client", "cli", "experiments", "datasets"}, loaded


# -- the typed face (issue 41, item 3) -------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted({n for n, _ in ANALYSES}))
def test_every_config_is_a_typed_face_that_defines_its_plan_and_privacy_loss(name: str) -> None:
    """Each registered config defines ``plan`` and ``privacy_loss`` itself (the base declares them and
    refuses), annotates what its plan returns (a generator of rounds, not ``Any``), and is an
    :class:`AnalysisFace`: what the registry hands the server and the device."""
    from fedstats.analyses._config import AnalysisConfig
    from fedstats.wire.registry import AnalysisFace

    cls = resolve(lookup(name, 1).config)
    assert issubclass(cls, AnalysisConfig)
    for method in ("plan", "privacy_loss"):
        assert getattr(cls, method) is not getattr(AnalysisConfig, method), (name, method)
    # annotations as written (the result types are imported for type checkers only)
    assert str(cls.plan.__annotations__["return"]).startswith("ProtocolGenerator["), name
    assert cls.privacy_loss.__annotations__["return"] == "PrivacyLoss", name
    cfg = config_for(_task(name))
    assert isinstance(cfg, AnalysisFace) and type(cfg) is cls


def test_a_config_without_a_plan_is_refused_by_the_base() -> None:
    from fedstats.analyses._config import AnalysisConfig

    @dataclasses.dataclass(frozen=True)
    class Bare(AnalysisConfig):
        x: int = 1

    # refused when made, not when first used: both methods are abstract in the base
    with pytest.raises(TypeError, match="abstract methods plan, privacy_loss"):
        Bare()
