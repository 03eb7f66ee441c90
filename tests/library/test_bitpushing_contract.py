"""Bit pushing and the mean baselines under the analysis contract: tags, options refused, all-or-nothing
charging from the mechanisms' losses, and the Laplace baseline released on its discrete grid."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.analyses import mean_baselines
from fedstats.analyses.bitpushing import BitEncoding, make_stage, mean, stage_mechanisms, variance
from fedstats.analyses.bitpushing.protocol import STAGE_OPTIONS
from fedstats.analyses.mean_baselines.client import encode_ldp, ldp_mechanism
from fedstats.analyses.mean_baselines.protocol import BASELINE_OPTIONS
from fedstats.engine import ClientBatch, Engine
from fedstats.errors import BudgetExceededError, ParameterError
from fedstats.privacy.ledger import BitMeter, PrivacyLedger
from fedstats.privacy.mechanisms import RandomizedResponse
from fedstats.randomness import RandomSource

ENC = BitEncoding(0, 15)
X = (np.arange(2000) % 16).astype(np.float64)


def test_results_are_tagged_by_package_and_statistic() -> None:
    rs = RandomSource(3)
    assert mean(X, ENC, no_privacy=True, randomness=rs).analysis == "bitpushing.mean"
    assert variance(X, ENC, no_privacy=True, randomness=rs).analysis == "bitpushing.variance"
    res = mean_baselines.mean(X, ENC, method="duchi", epsilon=1.0, randomness=rs)
    assert res.analysis == "mean_baselines.mean" and res.method == "duchi"
    res_v = mean_baselines.variance(X, ENC, method="dithering", no_privacy=True, randomness=rs)
    assert res_v.analysis == "mean_baselines.variance"
    d = res.to_dict()
    assert d["analysis"] == "mean_baselines.mean" and d["error"] == res.error
    with pytest.raises(ParameterError, match="method"):
        mean_baselines.mean(X, ENC, method="adaptive", no_privacy=True, randomness=rs)


def test_randomness_alone_reproduces_a_run() -> None:
    a = mean(X, ENC, epsilon=1.0, randomness=RandomSource(9))
    b = mean(X, ENC, epsilon=1.0, engine=Engine(randomness=RandomSource(9)))
    c = mean(X, ENC, epsilon=1.0, randomness=RandomSource(10))
    assert a.estimate == b.estimate and a.estimate != c.estimate
    assert a.release_note == "reproducible (seeded) run: not for release"


@pytest.mark.parametrize(
    ("method", "option", "value"),
    [
        ("weighted", "round1_fraction", 0.5),
        ("basic", "gamma", 1.0),
        ("adaptive", "probabilities", [0.5, 0.5, 0, 0]),
        ("adaptive", "frac_bits", 10),
        ("dithering", "alpha", 0.5),
        ("duchi", "frac_bits", 10),
        ("laplace", "bits_per_client", 1),
        ("piecewise", "squash_threshold", 0.1),
    ],
)
def test_options_a_method_does_not_use_are_refused(method: str, option: str, value: object) -> None:
    with pytest.raises(ParameterError, match=option):
        make_stage(method, epsilon=1.0, **{option: value})
    with pytest.raises(ParameterError, match=option):
        mean(X, ENC, method=method, epsilon=1.0, randomness=RandomSource(1), **{option: value})


def test_squash_threshold_needs_epsilon() -> None:
    with pytest.raises(ParameterError, match="squash_threshold"):
        mean(X, ENC, squash_threshold=0.15, no_privacy=True, randomness=RandomSource(1))


@settings(max_examples=40, deadline=None)
@given(
    method=st.sampled_from(["adaptive", "weighted", "basic", *BASELINE_OPTIONS]),
    name=st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12),
)
def test_any_unknown_option_is_refused(method: str, name: str) -> None:
    accepted = STAGE_OPTIONS.get(method) or BASELINE_OPTIONS[method]
    if name in accepted:
        return
    with pytest.raises(ParameterError, match=name):
        make_stage(method, epsilon=1.0, **{name: 1})


def test_ledger_is_charged_from_the_mechanisms() -> None:
    ledger, meter = PrivacyLedger(), BitMeter()
    res = mean(X, ENC, epsilon=1.2, bits_per_client=3, randomness=RandomSource(2), ledger=ledger,
               bit_meter=meter)  # fmt: skip
    # three randomized responses of 0.4 each per client, composed by the ledger
    assert len(ledger.entries) == 3
    per = RandomizedResponse(epsilon=0.4).privacy_loss().epsilon
    assert all(e.epsilon == per for e in ledger.entries)
    assert math.isclose(ledger.total().epsilon, 1.2, rel_tol=1e-12)
    assert res.epsilon is not None and math.isclose(res.epsilon, 1.2, rel_tol=1e-12)
    assert meter.max_bits_per_client() == 3
    mechs = stage_mechanisms("laplace", epsilon=2.0)
    assert len(mechs) == 1 and mechs[0].floating_point_safe
    assert stage_mechanisms("adaptive") == [] and stage_mechanisms("dithering") == []


@pytest.mark.parametrize("refuser", ["ledger", "meter"])
def test_refused_second_stage_records_nothing(refuser: str) -> None:
    n = X.size
    n_m = round(0.2 * n)
    second = range(n_m, n)
    ledger = PrivacyLedger(epsilon_budget=1.0)
    meter = BitMeter(bit_budget=1)
    # earlier releases touched only the clients of the variance's second stage
    if refuser == "ledger":
        ledger.spend(epsilon=0.5, label="earlier", clients=second)
    else:
        meter.record(bits=1, label="earlier", clients=second)
    before = (ledger.entries, meter.max_bits_per_client(), meter.total_bits(n))
    engine = Engine(randomness=RandomSource(4))
    with pytest.raises(BudgetExceededError):
        variance(X, ENC, epsilon=0.8, engine=engine, ledger=ledger, bit_meter=meter)
    # the first stage alone would have fitted: it is not recorded, and no round ran
    assert (ledger.entries, meter.max_bits_per_client(), meter.total_bits(n)) == before
    assert engine.log == []


def _ldp_reports(
    name: str, code: int, b: int, n: int, eps: float, fb: int, seed: int
) -> np.ndarray:
    """Reports of ``n`` clients holding the b-bit ``code`` (``t = 2 code / (2^b - 1) - 1``)."""
    top = float(2**b - 1)
    params = {
        "column": "value", "low": 0.0, "high": top, "out_of_range": "clip", "offset": 0.0,
        "resolution": 1.0, "max_code": 2**b - 1, "bit_depth": b, "center": None, "mechanism": name,
        "epsilon": eps, "frac_bits": fb, "clip": 1.0 + 40.0 * 2.0 / eps,
    }  # fmt: skip
    batch = ClientBatch({"value": np.full(n, float(code))}, 0, n)
    return encode_ldp(batch, params, np.random.default_rng(seed))[:, 0]


def test_laplace_baseline_releases_on_the_grid_with_its_epsilon() -> None:
    eps, fb, n = 1.0, 2, 400_000  # grid 1/4: integer sensitivity 8, discrete Laplace scale 8
    mech = ldp_mechanism("laplace", eps, fb)
    assert mech.floating_point_safe and mech.privacy_loss().epsilon == pytest.approx(eps)
    lo = _ldp_reports("laplace", 0, 1, n, eps, fb, 1)  # t = -1
    hi = _ldp_reports("laplace", 1, 1, n, eps, fb, 2)  # t = +1
    assert lo.dtype == np.int64
    # unbiased on the grid: E[report] = t * 2^fb
    sd = math.sqrt(mech.variance()) * 2**fb
    assert abs(lo.mean() + 4) < 6 * sd / math.sqrt(n) and abs(hi.mean() - 4) < 6 * sd / math.sqrt(n)
    # the output distributions of the two extreme inputs differ by at most e^eps per point
    ks = np.arange(-12, 13)
    p_lo = np.array([(lo == k).mean() for k in ks])
    p_hi = np.array([(hi == k).mean() for k in ks])
    ratio = np.log(p_lo / p_hi)
    se = np.sqrt(1 / (p_lo * n) + 1 / (p_hi * n))
    assert np.all(np.abs(ratio) <= eps + 6 * se)
    # and the bound is attained away from the middle (the grid path is not over-noised)
    assert abs(ratio[0]) > eps - 6 * se[0]


def test_laplace_rounding_of_t_keeps_it_unbiased_off_the_grid() -> None:
    eps, fb, n = 2.0, 3, 300_000
    t = 2.0 * 8 / 15 - 1.0  # code 8 of 4 bits: t = 1/15, not on the grid 1/8
    r = _ldp_reports("laplace", 8, 4, n, eps, fb, 3)
    var = ldp_mechanism("laplace", eps, fb).variance() + 0.25 / 4**fb
    assert abs(r.mean() / 2**fb - t) < 6 * math.sqrt(var / n)
    # without the rounding of t the snap would put every client at 1/8 (index 1): a bias of 0.058
    assert abs(r.mean() / 2**fb - 0.125) > 6 * math.sqrt(var / n)


@settings(max_examples=30, deadline=None)
@given(
    method=st.sampled_from(
        ["adaptive", "weighted", "basic", "dithering", "piecewise", "duchi", "laplace"]
    ),
    epsilon=st.one_of(st.floats(max_value=0.0), st.floats(min_value=700.5), st.just(float("nan"))),
)
def test_bad_epsilon_is_refused_by_every_method(method: str, epsilon: float) -> None:
    with pytest.raises(ParameterError, match="epsilon"):
        make_stage(method, epsilon=epsilon)
    with pytest.raises(ParameterError, match="epsilon"):
        stage_mechanisms(method, epsilon=epsilon)


@settings(max_examples=30, deadline=None)
@given(
    method=st.sampled_from(["piecewise", "laplace"]),
    frac_bits=st.one_of(st.integers(max_value=-1), st.integers(min_value=40, max_value=10**6)),
)
def test_frac_bits_outside_the_grid_range_is_refused(method: str, frac_bits: int) -> None:
    with pytest.raises(ParameterError, match="frac_bits"):
        make_stage(method, epsilon=1.0, frac_bits=frac_bits)
