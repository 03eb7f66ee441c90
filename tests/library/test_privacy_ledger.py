"""PrivacyLedger (sequential / parallel / zCDP composition, budgets) and BitMeter."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from fedstats.errors import BudgetExceededError, ParameterError
from fedstats.privacy.analysis import gaussian_rho, zcdp_to_approx_dp
from fedstats.privacy.ledger import BitMeter, PrivacyLedger


def test_sequential_basic_composition() -> None:
    led = PrivacyLedger()
    led.spend(epsilon=0.3, delta=1e-6, label="a")
    led.spend(epsilon=0.2, delta=2e-6, label="b")
    t = led.total()
    assert t.epsilon == pytest.approx(0.5) and t.delta == pytest.approx(3e-6) and t.rho is None
    assert [e.label for e in led.entries] == ["a", "b"]


def test_parallel_composition_over_disjoint_clients() -> None:
    led = PrivacyLedger(epsilon_budget=1.0)
    led.spend(epsilon=0.6, label="g0", clients=range(0, 10**9))
    led.spend(epsilon=0.6, label="g1", clients=range(10**9, 2 * 10**9))
    led.spend(epsilon=0.4, label="ids", clients=np.array([5, 6, 7, 2 * 10**9 + 3]))
    assert led.total().epsilon == pytest.approx(1.0)
    # client 3 is only in g0 (0.6): 0.4 more is fine for it, but the release touches 5..7 (already 1.0)
    with pytest.raises(BudgetExceededError):
        led.spend(epsilon=0.4, label="overlap", clients=[3, 5])
    led.spend(epsilon=0.4, label="g0 rest", clients=range(100, 200))
    assert led.total().epsilon == pytest.approx(1.0)


def test_over_budget_message_and_nothing_recorded() -> None:
    led = PrivacyLedger(epsilon_budget=1.0, delta_budget=1e-5)
    led.spend(epsilon=0.7, delta=4e-6, label="first")
    with pytest.raises(BudgetExceededError) as info:
        led.spend(epsilon=0.5, label="second")
    msg = str(info.value)
    assert (
        "spent epsilon=0.7" in msg
        and "requested epsilon=0.5" in msg
        and "remaining epsilon=0.3" in msg
    )
    with pytest.raises(BudgetExceededError, match="delta"):
        led.spend(epsilon=0.1, delta=7e-6, label="third")
    assert len(led.entries) == 1
    e, d = led.remaining()
    assert e == pytest.approx(0.3) and d == pytest.approx(6e-6)


def test_zcdp_composition_of_gaussian_releases_beats_basic() -> None:
    sigma, delta = 20.0, 1e-7
    rho = gaussian_rho(sigma=sigma, sensitivity=1.0)
    per_eps = 0.3  # any valid (eps, delta) of each release
    led = PrivacyLedger()
    for i in range(50):
        led.spend(epsilon=per_eps, delta=delta, rho=rho, label=f"g{i}")
    t = led.total()
    assert t.rho == pytest.approx(50 * rho)
    assert t.delta == pytest.approx(50 * delta)
    assert t.epsilon == pytest.approx(zcdp_to_approx_dp(rho=50 * rho, delta=50 * delta))
    assert t.epsilon < 50 * per_eps


def test_mixed_pure_and_gaussian() -> None:
    led = PrivacyLedger()
    led.spend(epsilon=0.5, label="laplace")
    led.spend(epsilon=1.0, delta=1e-6, rho=0.01, label="gauss")
    t = led.total()
    expect = 0.5 + min(1.0, zcdp_to_approx_dp(rho=0.01, delta=1e-6))
    assert t.epsilon == pytest.approx(expect)


@given(
    spends=hs.lists(
        hs.tuples(hs.floats(0, 2), hs.integers(0, 50), hs.integers(1, 30)), min_size=1, max_size=12
    )
)
@settings(max_examples=80, deadline=None)
def test_total_is_worst_client_by_brute_force(spends: list[tuple[float, int, int]]) -> None:
    led = PrivacyLedger(delta_target=0.0)  # pure releases at delta 0: basic composition
    per_client = np.zeros(100)
    for i, (eps, start, length) in enumerate(spends):
        led.spend(epsilon=eps, label=f"r{i}", clients=range(start, start + length))
        per_client[start : start + length] += eps
    assert led.total().epsilon == pytest.approx(per_client.max(), abs=1e-9)


def test_invalid_spends() -> None:
    led = PrivacyLedger()
    for kwargs in (
        {"epsilon": -1.0, "label": "x"},
        {"epsilon": math.nan, "label": "x"},
        {"epsilon": 1.0, "delta": 1.0, "label": "x"},
        {"epsilon": 1.0, "rho": -0.1, "label": "x"},
        {"epsilon": 1.0, "label": ""},
        {"epsilon": 1.0, "label": "x", "clients": [-1]},
        {"epsilon": 1.0, "label": "x", "clients": range(5, 5)},
    ):
        with pytest.raises(ParameterError):
            led.spend(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        PrivacyLedger(epsilon_budget=0.0)
    with pytest.raises(ParameterError):
        PrivacyLedger(delta_budget=1.0)


def test_bit_meter() -> None:
    meter = BitMeter(bit_budget=2)
    meter.record(bits=1, label="round 1", clients=range(0, 600))
    meter.record(bits=1, label="round 2", clients=range(600, 1000))
    assert meter.max_bits_per_client() == 1
    assert meter.bits_of(5) == 1 and meter.bits_of(2000) == 0
    assert meter.total_bits(1000) == 1000
    meter.record(bits=1, label="extra", clients=[5])
    assert meter.max_bits_per_client() == 2
    with pytest.raises(BudgetExceededError, match="spent 2"):
        meter.record(bits=1, label="too much")
    assert meter.as_dict()["max_bits_per_client"] == 2


def test_spend_loss_from_mechanisms() -> None:
    from fedstats.privacy.mechanisms import (
        GaussianMechanism,
        RandomizedResponse,
        SubtractiveDithering,
    )

    led = PrivacyLedger(epsilon_budget=3.0, delta_budget=1e-5)
    g = GaussianMechanism(epsilon=1.0, delta=1e-6, sensitivity=1.0)
    led.spend_loss(g.privacy_loss(), label="gaussian")
    led.spend_loss(RandomizedResponse(epsilon=0.5).privacy_loss(), label="rr", clients=range(10))
    t = led.total()
    assert t.rho == pytest.approx(g.privacy_loss().rho)
    assert t.epsilon == pytest.approx(1.5)
    with pytest.raises(ParameterError):
        led.spend_loss(SubtractiveDithering().privacy_loss(), label="quantizer")


def test_explain_lists_every_release() -> None:
    led = PrivacyLedger(epsilon_budget=2.0)
    led.spend(epsilon=0.5, label="mean", clients=range(0, 10))
    led.spend(epsilon=0.25, delta=1e-7, rho=0.01, label="gauss")
    text = led.explain()
    assert "1. mean" in text and "2. gauss" in text and "remaining: epsilon=1.25" in text


def test_a_budget_cannot_be_set_below_what_is_spent() -> None:
    led = PrivacyLedger(epsilon_budget=2.0, delta_budget=1e-5)
    led.spend(epsilon=0.7, delta=4e-6, label="a")
    led.spend(epsilon=0.5, label="b")
    with pytest.raises(BudgetExceededError, match=r"epsilon_budget=1 refused.*spent \(1\.2\)"):
        led.epsilon_budget = 1.0
    with pytest.raises(BudgetExceededError, match="delta_budget=1e-06 refused"):
        led.delta_budget = 1e-6
    assert led.epsilon_budget == 2.0 and led.delta_budget == 1e-5
    led.epsilon_budget = 1.2  # the spent amount itself is accepted: nothing remains
    assert led.remaining()[0] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(BudgetExceededError):
        led.spend(epsilon=0.1, label="c")
    led.epsilon_budget = None
    led.spend(epsilon=0.1, label="c")
    with pytest.raises(ParameterError, match="epsilon_budget"):
        led.epsilon_budget = -1.0


def test_replayed_descriptions_are_read_once_and_compose_as_the_originals() -> None:
    from fedstats.privacy.analysis.loss import MechanismSpec
    from fedstats.privacy.ledger import mechanisms_of

    rr = MechanismSpec("randomized_response", 0.1)
    g = MechanismSpec("gaussian", 3.0, sampling_rate=0.5)
    stored = [
        [rr.as_dict(), g.as_dict()] for _ in range(300)
    ]  # as a device's file or the server keeps
    replayed = [mechanisms_of(s) for s in stored]
    assert replayed[0] == (rr, g) and all(r is replayed[0] for r in replayed)  # one shared tuple
    ledger, original = PrivacyLedger(), PrivacyLedger()
    for i, specs in enumerate(replayed):
        ledger.spend(epsilon=0.1 + 1.0, delta=1e-7, label=f"r{i}", mechanisms=specs)
        original.spend(epsilon=0.1 + 1.0, delta=1e-7, label=f"r{i}", mechanisms=[rr, g])
    assert ledger.total() == original.total()
    with pytest.raises(ParameterError, match="mechanism"):
        mechanisms_of([{"parameter": 1.0}])
    with pytest.raises(ParameterError, match="parameter"):
        mechanisms_of([{"kind": "gaussian", "parameter": -1.0}])
    with pytest.raises(ParameterError, match="mechanism"):
        mechanisms_of([["not", "a dict"]])
