"""Clear reports are checked against their encoder's output set (issue 29, item 1).

For every analysis whose rounds may be sent in the clear, and for the encoder variants its rounds take
(bit pushing's exact and random allocation, one and several bits, with and without randomized response; the
performance gap's mechanisms R and L; heterogeneity's discrete, Gaussian and absent noise shares):

(a) no false rejection: every honest report, of one record and summed over several records (as a device
    with several records sends it), passes the check, over many random and extreme inputs;
(b) specific impossible reports fail with the expected reason;
(c) on small domains the check is exact: it accepts precisely the sums of ``k`` possible outputs;
(d) a malicious device in a simulated clear round is excluded with a counted reason and the sum of the
    others is exact.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedstats import wire
from fedstats.analyses.bitpushing.client import encode_bits
from fedstats.analyses.bitpushing.encoding import BitEncoding
from fedstats.analyses.bitpushing.stages import CodeSpec
from fedstats.analyses.heterogeneity.config import HeterogeneityConfig
from fedstats.engine import Engine, InMemoryPopulation
from fedstats.engine.rounds import ClientBatch, Round, RoundSum
from fedstats.engine.validity import (
    REASONS,
    check_report,
    check_reports,
    has_output_check,
    screened_sum,
)
from fedstats.errors import ParameterError
from fedstats.randomness import RandomSource
from fedstats.wire.registry import ANALYSES, plan_for, resolve

N = 200
SEED = bytes(range(32))


# -- rounds of each analysis, as its plan yields them ----------------------------------------------------


def _recorded(
    gen: Generator[Round, RoundSum, Any], rounds: list[Round]
) -> Generator[Round, Any, Any]:
    rnd = next(gen)
    while True:
        rounds.append(rnd)
        s = yield rnd
        try:
            rnd = gen.send(s)
        except StopIteration as stop:
            return stop.value


def _plan_rounds(
    plan: Generator[Round, RoundSum, Any], columns: dict[str, np.ndarray]
) -> list[Round]:
    rounds: list[Round] = []
    Engine(randomness=RandomSource(7)).run(_recorded(plan, rounds), InMemoryPopulation(columns))
    return rounds


def _task(name: str, params: dict[str, Any], epsilon: float | None, delta: float | None) -> Any:
    task = {"analysis": name, "version": 1, "params": params}
    task["privacy"] = {"epsilon": epsilon, "delta": delta}
    return plan_for(task, n_clients=N, public_seed=SEED)


def _values(rng: np.random.Generator, low: float, high: float) -> np.ndarray:
    """Values over and beyond ``[low, high]``, with the ends themselves (clipped by the encoders)."""
    v = rng.uniform(low - 0.2 * (high - low), high + 0.2 * (high - low), N)
    v[: N // 10] = rng.choice([low, high], N // 10)
    return v


def _het_x(rng: np.random.Generator, d: int = 4) -> np.ndarray:
    """Vectors in [0, 1]^d, a fifth of them at corners (the extremes of every block)."""
    x = rng.uniform(0.0, 1.0, (N, d))
    x[: N // 5] = rng.integers(0, 2, (N // 5, d))
    return x


def _bit_round(
    *, allocation: str, s: int, epsilon_bit: float | None, bit_depth: int | None = None
) -> Callable[[np.random.Generator], tuple[list[Round], dict[str, np.ndarray]]]:
    from fedstats.analyses.bitpushing.bit_stages import bit_round

    def build(rng: np.random.Generator) -> tuple[list[Round], dict[str, np.ndarray]]:
        enc = BitEncoding(0.0, 90.0, resolution=1.0, bit_depth=bit_depth)
        spec = CodeSpec.for_mean("value", enc)
        b = spec.bit_depth
        p = rng.dirichlet(np.ones(b))
        if s > 1:
            p[0] = 0.0  # a bit no client reports
            p /= p.sum()
        gen = bit_round(
            "bits",
            spec,
            p,
            (0, N),
            int(rng.integers(1 << 32)),
            bits_per_client=s,
            allocation=allocation,
            epsilon_bit=epsilon_bit,
        )
        return [next(gen)], {"value": _values(rng, 0.0, 90.0)}

    return build


def _from_task(
    name: str, params: dict[str, Any], epsilon: float | None, delta: float | None
) -> Callable[[np.random.Generator], tuple[list[Round], dict[str, np.ndarray]]]:
    def build(rng: np.random.Generator) -> tuple[list[Round], dict[str, np.ndarray]]:
        if name in ("exact-mean", "bitpushing-mean", "bitpushing-variance"):
            cols = {"value": _values(rng, 0.0, 100.0)}
        elif name == "performance-gap":
            v = rng.uniform(-1.0, 1.0, N)
            v[: N // 10] = rng.choice([-1.0, 1.0], N // 10)
            cols = {"group": rng.integers(0, int(params.get("n_groups", 2)), N), "value": v}
        else:
            cols = {"x": _het_x(rng)}
        return _plan_rounds(_task(name, params, epsilon, delta), cols), cols

    return build


def _heterogeneity(**options: Any) -> Callable[[np.random.Generator], Any]:
    def build(rng: np.random.Generator) -> tuple[list[Round], dict[str, np.ndarray]]:
        cfg = HeterogeneityConfig(dim=4, **options)
        cols = {"x": _het_x(rng)}
        plan = cfg.plan(n_clients=N, public_seed=SEED, randomness=RandomSource(5))
        return _plan_rounds(plan, cols), cols

    return build


# analysis (registry name, or a variant of it) -> rounds and the population they were planned on
CASES: dict[str, Callable[[np.random.Generator], tuple[list[Round], dict[str, np.ndarray]]]] = {
    "exact-mean": _from_task("exact-mean", {"clip": 64.0}, None, None),
    "exact-mean/clip-fraction": _from_task("exact-mean", {"clip": 2.5, "frac_bits": 0}, None, None),
    "bitpushing-mean": _from_task("bitpushing-mean", {"low": 0.0, "high": 100.0}, 1.0, 0.0),
    "bitpushing-variance": _from_task(
        "bitpushing-variance", {"low": 0.0, "high": 100.0, "mean_fraction": 0.25}, 2.0, 0.0
    ),
    "bitpushing/exact-3-bits": _bit_round(allocation="exact", s=3, epsilon_bit=0.5),
    "bitpushing/random-1-bit": _bit_round(allocation="random", s=1, epsilon_bit=1.0),
    "bitpushing/random-3-bits": _bit_round(allocation="random", s=3, epsilon_bit=1.0),
    "bitpushing/exact-no-rr-loose": _bit_round(
        allocation="exact", s=1, epsilon_bit=None, bit_depth=10
    ),
    "bitpushing/random-no-rr-loose": _bit_round(
        allocation="random", s=2, epsilon_bit=None, bit_depth=10
    ),
    "performance-gap": _from_task("performance-gap", {"mechanism": "R"}, 1.0, 0.0),
    "performance-gap/R-3-groups": _from_task(
        "performance-gap", {"mechanism": "R", "n_groups": 3, "pair": [0, 2]}, 0.5, 0.0
    ),
    "performance-gap/L": _from_task("performance-gap", {"mechanism": "L"}, 1.0, 0.0),
    "heterogeneity": _from_task("heterogeneity", {"dim": 4}, 4.0, 1e-5),
    "heterogeneity/central": _heterogeneity(epsilon=2.0, delta=1e-5, noise="central"),
    "heterogeneity/exact": _heterogeneity(),
    "heterogeneity/paper-form": _heterogeneity(form="paper", p=3.0),
    "heterogeneity/float-shares": _heterogeneity(
        epsilon=2.0, delta=1e-5, noise="distributed", float_noise=True
    ),
}


def _reports(rnd: Round, cols: dict[str, np.ndarray], seed: int) -> tuple[np.ndarray, int]:
    lo, hi = rnd.client_range or (0, N)
    batch = ClientBatch({k: v[lo:hi] for k, v in cols.items()}, lo, N)
    return rnd.encode_checked(batch, np.random.default_rng(seed)), lo


def test_every_encoder_of_a_clear_analysis_has_an_output_check() -> None:
    """Each analysis that may run in the clear checks every round; secure-only ones are not checkable."""
    for spec in ANALYSES.values():
        for ref in spec.encoders:
            fn = resolve(ref)
            if spec.secure == "optional":
                assert has_output_check(fn), f"{spec.name}: {ref} has no output check"
    clear = {s.name for s in ANALYSES.values() if s.secure == "optional"}
    assert clear <= {c.split("/")[0] for c in CASES}


# -- (a) no false rejection --------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_honest_report_passes(case: str) -> None:
    for seed in range(4):
        rng = np.random.default_rng(seed)
        rounds, cols = CASES[case](rng)
        assert rounds
        for rnd in rounds:
            reps, lo = _reports(rnd, cols, seed + 100)
            n = reps.shape[0]
            ones = [1] * n
            # one record per device, with and without its index
            assert check_reports(rnd, reps, ones, starts=list(range(lo, lo + n))) == [None] * n
            assert check_reports(rnd, reps, ones) == [None] * n
            # devices of 1 to 7 consecutive records send their records' sum
            sizes = rng.integers(1, 8, n)
            firsts = np.concatenate([[0], np.cumsum(sizes)])
            firsts = firsts[firsts < n]
            sums = np.add.reduceat(reps, firsts, axis=0)
            counts = np.diff(np.append(firsts, n)).tolist()
            starts = (firsts + lo).tolist()
            assert check_reports(rnd, sums, counts, starts=starts) == [None] * len(counts), case
            assert check_reports(rnd, sums.tolist(), counts) == [None] * len(counts), case
            # one device holding every record of the round
            assert check_report(rnd, reps.sum(axis=0).tolist(), n, first_index=lo) is None
            # the server checks against the round as it stored it: parameters through JSON
            stored = dataclasses.replace(rnd, params=wire.loads(wire.dumps(dict(rnd.params))))
            assert check_reports(stored, sums.tolist(), counts, starts=starts) == [None] * len(
                counts
            )


# -- the one-report check agrees with the vectorized one ---------------------------------------------------

_BIT_CASES = sorted(c for c in CASES if c.startswith("bitpushing"))


@functools.cache
def _bit_rounds(case: str) -> tuple[Round, np.ndarray, int]:
    """The case's first round, its honest one-record reports and its first record index."""
    rounds, cols = CASES[case](np.random.default_rng(11))
    reps, lo = _reports(rounds[0], cols, 12)
    return rounds[0], reps, lo


# 60 examples per case, not 150 (8 cases, 40 ms an example: 4-11 s a case was the most of any test file in
# make test-fast); every run draws new ones, and each example's changes reach the conditions one by one
@pytest.mark.parametrize("case", _BIT_CASES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_small_check_answers_as_the_vectorized_check(case: str, data: st.DataObject) -> None:
    """A quiet server checks one to eight uploads in plain Python (:func:`small_output_check`).

    Its answers must be the vectorized check's, reason and detail, on honest sums and on sums pushed
    off the output set (negative, above the records, unassigned or vacuous bits, extreme entries), with
    and without the devices' record indices, and on devices of more records than it walks (there it
    defers to the vectorized check).
    """
    rnd, reps, lo = _bit_rounds(case)
    n_rep = data.draw(st.integers(1, 8), label="reports")
    vectors, counts, starts = [], [], []
    for _ in range(n_rep):
        count = min(data.draw(st.sampled_from([1, 1, 2, 3, 7, 64, 65]), label="count"), len(reps))
        first = data.draw(st.integers(0, reps.shape[0] - count), label="first")
        honest = reps[first : first + count].sum(axis=0)
        # honest, or pushed off the output set at one to three entries (one change at a time
        # reaches every condition in turn)
        push = [0] * rnd.dim
        for _ in range(data.draw(st.integers(0, 3), label="changes")):
            at = data.draw(st.integers(0, rnd.dim - 1), label="at")
            push[at] += data.draw(
                st.one_of(st.integers(-2, 2), st.sampled_from([2**62, -(2**62) - 1])),
                label="by",
            )
        vectors.append([int(h) + p for h, p in zip(honest.tolist(), push, strict=True)])
        counts.append(count)
        starts.append(lo + first)
    with_starts = data.draw(st.booleans(), label="with starts")
    got = check_reports(rnd, vectors, counts, starts=starts if with_starts else None)
    # a two-dimensional array takes the vectorized check whatever the number of reports (of objects:
    # entries beyond int64 are the array path's to name)
    want = [
        check_reports(
            rnd,
            np.array([v], dtype=object),
            [c],
            starts=[s] if with_starts else None,
        )[0]
        for v, c, s in zip(vectors, counts, starts, strict=True)
    ]
    assert got == want


@pytest.mark.parametrize("case", _BIT_CASES)
def test_small_check_on_every_single_change(case: str) -> None:
    """Every report one or two changes away from an honest one: the one-report check answers as the array one."""
    rnd, reps, lo = _bit_rounds(case)
    for first, count in [(0, 1), (1, 1), (2, 1), (3, 2), (5, 3)]:
        if first + count > len(reps):
            continue
        honest = reps[first : first + count].sum(axis=0).tolist()
        singles = [{at: by} for at in range(rnd.dim) for by in (-2, -1, 1, 2, 2**62)]
        pairs = [{i: -1, j: -1} for i, j in itertools.combinations(range(rnd.dim), 2)]
        for change in singles + pairs:  # (two removals reach the lowest total of random allocation)
            v = [int(x) for x in honest]
            for at, by in change.items():
                v[at] += by
            for starts in ([lo + first], None):
                got = check_reports(rnd, [v], [count], starts=starts)
                want = check_reports(rnd, np.array([v], dtype=object), [count], starts=starts)
                assert got == want, (change, starts)


# -- (b) specific impossible reports ------------------------------------------------------------------------


def _one(case: str, index: int = 0) -> tuple[Round, np.ndarray, int]:
    rounds, cols = CASES[case](np.random.default_rng(0))
    rnd = rounds[index]
    reps, lo = _reports(rnd, cols, 1)
    return rnd, reps, lo


def _reason(rnd: Round, vector: Any, count: int = 1, first: int | None = None) -> str | None:
    got = check_report(rnd, vector, count, first_index=first)
    if got is not None:
        assert got.split(":", 1)[0] in REASONS, got
        return got.split(":", 1)[0]
    return None


def test_generic_malformed_reports_fail() -> None:
    rnd, reps, _ = _one("exact-mean")
    good = reps[0].tolist()
    assert _reason(rnd, good) is None
    assert _reason(rnd, [good[0] + 0.5, 1]) == "not_integer"
    assert _reason(rnd, [float(good[0]), 1]) == "not_integer"
    assert _reason(rnd, [good[0], True]) == "not_integer"
    assert _reason(rnd, np.asarray(good, dtype=np.float64)) == "not_integer"
    assert _reason(rnd, good[:1]) == "shape"
    assert _reason(rnd, [*good, 0]) == "shape"
    assert _reason(rnd, {"vector": good}) == "shape"
    assert _reason(rnd, [10**30, 1]) == "out_of_range"
    assert _reason(rnd, good, 0) == "count"
    assert _reason(rnd, good, True) == "count"
    assert _reason(rnd, good, 10**30) == "count"
    assert _reason(rnd, np.array([2**63 + 5, 1], dtype=np.uint64)) == "out_of_range"
    assert check_reports(rnd, np.array([[2**63 + 5, 1]], dtype=np.uint64), [1])[0] is not None
    assert _reason(rnd, good, 1.0) == "count"  # type: ignore[arg-type]


def test_exact_mean_reports_that_fail() -> None:
    rnd, reps, _ = _one("exact-mean")
    m = int(np.rint(64.0 * 2.0 ** int(rnd.params["frac_bits"])))
    assert _reason(rnd, [m, 1]) is None and _reason(rnd, [-m, 1]) is None
    assert _reason(rnd, [m + 1, 1]) == "value_out_of_range"
    assert _reason(rnd, [2 * m + 1, 2], 2) == "value_out_of_range"
    assert _reason(rnd, [2 * m, 2], 2) is None
    assert _reason(rnd, [int(reps[0, 0]), 2]) == "total_mismatch"
    assert _reason(rnd, [int(reps[0, 0]), 0]) == "total_mismatch"
    assert _reason(rnd, [10**6 * m, 1]) == "value_out_of_range"


def test_bitpushing_exact_allocation_reports_that_fail() -> None:
    rnd, reps, lo = _one("bitpushing-mean")
    row = reps[0]
    j = int(np.flatnonzero(_assigned(rnd, lo))[0])  # the bit record lo reports
    other = (j + 1) % rnd.dim
    for bit, want in (
        (2, "bit_out_of_range"),
        (-1, "bit_out_of_range"),
        (10**6, "bit_out_of_range"),
    ):
        bad = row.copy()
        bad[j] = bit
        assert _reason(rnd, bad.tolist(), 1, lo) == want
    assert _reason(rnd, row.tolist(), 1, lo) is None
    bad = row.copy()
    bad[other] = 1
    assert _reason(rnd, bad.tolist(), 1, lo) == "unassigned_bit"
    # without the record's index, a 1 on each of two bits is more than one record's one bit
    two = np.zeros(rnd.dim, dtype=np.int64)
    two[[j, other]] = 1
    assert _reason(rnd, two.tolist(), 1) == "total_mismatch"
    assert _reason(rnd, two.tolist(), 2) is None  # two records may report them


def _assigned(rnd: Round, index: int) -> np.ndarray:
    """The bits record ``index`` reports under the exact allocation (0/1 per bit)."""
    from fedstats.analyses.bitpushing.client import _exact_assigned

    b = int(rnd.params["bit_depth"])
    out: np.ndarray = _exact_assigned(rnd.params, np.array([1]), np.array([index]), b)[0]
    return out


def test_bitpushing_random_allocation_reports_that_fail() -> None:
    rnd, reps, _ = _one("bitpushing/random-1-bit")
    b = rnd.dim // 2
    row = reps[0].copy()
    j = int(np.flatnonzero(row[:b])[0])
    bad = row.copy()
    bad[(j + 1) % b] += 1  # two bits reported by one record
    assert _reason(rnd, bad.tolist()) == "total_mismatch"
    bad = row.copy()
    bad[j] = 0
    bad[b + j] = 0  # no bit reported at all
    assert _reason(rnd, bad.tolist()) == "total_mismatch"
    bad = row.copy()
    bad[b + (j + 1) % b] = 1  # a one on a bit it did not report
    assert _reason(rnd, bad.tolist()) == "bit_out_of_range"
    bad = row.copy()
    bad[b + j] = -1
    assert _reason(rnd, bad.tolist()) == "bit_out_of_range"
    rnd3, reps3, _ = _one("bitpushing/random-3-bits")
    b3 = rnd3.dim // 2
    bad = reps3[0].copy()
    bad[0] = 1  # bit 0 has inclusion probability 0 in this case
    bad[int(np.flatnonzero(bad[1:b3])[0]) + 1] = 0
    assert _reason(rnd3, bad.tolist()) == "unassigned_bit"


def test_bitpushing_without_randomized_response_refuses_a_vacuous_bit() -> None:
    for case in ("bitpushing/exact-no-rr-loose", "bitpushing/random-no-rr-loose"):
        rnd, reps, lo = _one(case)
        b = int(rnd.params["bit_depth"])
        assert b == 10 and int(rnd.params["max_code"]) == 90  # bits 7, 8, 9 are vacuous
        bad = reps[0].copy()
        if rnd.params["allocation"] == "exact":
            j = int(np.flatnonzero(_assigned(rnd, lo))[0])
            bad[j] = 1
            want_ok = j < 7
        else:
            j = int(np.flatnonzero(bad[:b])[0])
            bad[b + j] = 1
            want_ok = j < 7
        assert _reason(rnd, bad.tolist(), 1, lo) == (None if want_ok else "vacuous_bit")
        # a record that reports a vacuous bit, found among the honest ones, may send 0 there but not 1
        rows = [
            i
            for i in range(reps.shape[0])
            if (
                rnd.params["allocation"] == "exact"
                and np.flatnonzero(_assigned(rnd, lo + i))[0] >= 7
            )
            or (rnd.params["allocation"] != "exact" and np.flatnonzero(reps[i, :b])[-1] >= 7)
        ]
        assert rows, case
        i = rows[0]
        bad = reps[i].copy()
        if rnd.params["allocation"] == "exact":
            bad[int(np.flatnonzero(_assigned(rnd, lo + i))[0])] = 1
        else:
            bad[b + int(np.flatnonzero(reps[i, :b])[-1])] = 1
        assert _reason(rnd, bad.tolist(), 1, lo + i) == "vacuous_bit"


def test_performance_gap_reports_that_fail() -> None:
    rnd, _, _ = _one("performance-gap")
    d = int(rnd.params["n_groups"])

    def rep(values: list[int], groups: list[int], flag: int = 0) -> list[int]:
        return [*values, *groups, flag]

    assert _reason(rnd, rep([1, 0], [1, 0])) is None
    assert _reason(rnd, rep([0, -1], [0, 1])) is None
    assert _reason(rnd, rep([0, 0], [1, 1])) == "total_mismatch"  # two groups from one record
    assert _reason(rnd, rep([1, 0], [2, -1])) == "group_out_of_range"  # a group outside the domain
    assert _reason(rnd, rep([0, 0], [0, 0])) == "total_mismatch"
    assert _reason(rnd, rep([3, 0], [3, 0]), 1) == "total_mismatch"
    assert _reason(rnd, rep([3, 0], [3, 0]), 3) is None
    assert _reason(rnd, rep([2, 0], [1, 0])) == "value_out_of_range"
    assert _reason(rnd, rep([3, 0], [2, 1]), 3) == "value_out_of_range"
    assert _reason(rnd, rep([0, 0], [1, 0])) == "parity"  # a +-1 value cannot sum to 0 alone
    assert _reason(rnd, rep([1, 1], [2, 1]), 3) == "parity"
    assert _reason(rnd, rep([1, 0], [1, 0], 1)) == "clip_flag"
    assert d == 2


def test_performance_gap_l_reports_that_fail() -> None:
    rnd, _, _ = _one("performance-gap/L")
    clip = int(rnd.params["clip"])

    def rep(values: list[int], groups: list[int], flag: int = 0) -> list[int]:
        return [*values, *groups, flag]

    assert _reason(rnd, rep([clip, 0], [1, 0], 1)) is None
    assert _reason(rnd, rep([clip - 1, 0], [1, 0], 0)) is None
    assert _reason(rnd, rep([clip - 1, 0], [1, 0], 1)) == "clip_flag"  # flagged, yet not clipped
    assert _reason(rnd, rep([clip, 0], [1, 0], 2)) == "clip_flag"
    assert _reason(rnd, rep([clip, 0], [1, 0], -1)) == "clip_flag"
    assert _reason(rnd, rep([clip + 1, 0], [1, 0])) == "value_out_of_range"
    assert _reason(rnd, rep([0, 1], [1, 0])) == "value_out_of_range"  # a value in an empty group
    assert _reason(rnd, rep([2 * clip, 1], [2, 1], 2), 3) is None  # two clipped + one unclipped
    assert _reason(rnd, rep([2 * clip, 1], [2, 1], 3), 3) == "clip_flag"
    assert _reason(rnd, rep([10**6 * clip, 0], [1, 0])) == "value_out_of_range"


def test_heterogeneity_reports_that_fail() -> None:
    rnd, reps, _ = _one("heterogeneity")
    bound = int(rnd.params["bound"])
    assert rnd.params["noise"] == "discrete"
    edge = np.full(rnd.dim, bound, dtype=np.int64)
    assert _reason(rnd, edge.tolist()) is None and _reason(rnd, (-edge).tolist()) is None
    bad = reps[0].copy()
    bad[0] = bound + 1
    assert _reason(rnd, bad.tolist()) == "value_out_of_range"
    bad[0] = 10**6 * bound
    assert _reason(rnd, bad.tolist()) == "value_out_of_range"
    assert _reason(rnd, (2 * edge).tolist(), 2) is None
    # without shares every block is non-negative and bounded; a weighted entry needs its weight
    rnd, reps, _ = _one("heterogeneity/exact")
    assert rnd.params["noise"] == "none"
    bad = reps[0].copy()
    bad[0] = -1
    assert _reason(rnd, bad.tolist()) == "value_out_of_range"
    fp_max = int(np.ceil(2.0 ** int(rnd.params["frac_bits"]) / float(rnd.params["sens_mean"])))
    bad = reps[0].copy()
    bad[0] = fp_max + 1
    assert _reason(rnd, bad.tolist()) == "value_out_of_range"
    d = 4
    bad = reps[0].copy()
    bad[d] = int(bad[2 * d]) + 2  # u x_0 two grid steps above u
    if _reason(rnd, bad.tolist()) != "value_out_of_range":  # u near its top: the range catches it
        assert _reason(rnd, bad.tolist()) == "weight_mismatch"
    bad = reps[0].copy()
    bad[2 * d] = 0  # u below its floor min(1, 4 v_min)
    assert _reason(rnd, bad.tolist()) == "value_out_of_range"
    spread, reps2, _ = _one("heterogeneity/exact", 1)
    bad = reps2[0].copy()
    bad[0] = -1
    assert _reason(spread, bad.tolist()) == "value_out_of_range"
    mu = np.asarray(spread.params["mu"])
    far = float(np.sum(np.maximum(mu, 1.0 - mu) ** 2)) / float(spread.params["sens_dispersion"])
    top = int(
        np.ceil(min(far, float(spread.params["clip"])) * 2.0 ** int(spread.params["frac_bits"]))
    )
    bad[0] = top
    assert _reason(spread, bad.tolist()) is None
    bad[0] = top + 2  # beyond the farthest point of [0, 1]^d from the released centre (1e-9 slack)
    assert _reason(spread, bad.tolist()) == "value_out_of_range"
    bad[0] = 10**6 * top
    assert _reason(spread, bad.tolist()) == "value_out_of_range"


def test_a_secure_only_round_is_not_checkable() -> None:
    from fedstats.analyses.chi2.client import encode_projection

    rnd = Round("projection", encode_projection, {}, dim=3, bound=10)
    with pytest.raises(ParameterError, match="clear rounds"):
        check_report(rnd, [0, 0, 0], 1)


def test_counts_and_starts_must_match_the_reports() -> None:
    rnd, reps, _ = _one("exact-mean")
    with pytest.raises(ParameterError, match="counts"):
        check_reports(rnd, reps[:3], [1, 1])
    with pytest.raises(ParameterError, match="starts"):
        check_reports(rnd, reps[:3], [1, 1, 1], starts=[0])


# -- (c) exactness on small domains -------------------------------------------------------------------------


def _sums(outputs: list[tuple[int, ...]], k: int) -> set[tuple[int, ...]]:
    return {
        tuple(int(v) for v in np.sum(c, axis=0))
        for c in itertools.combinations_with_replacement(outputs, k)
    }


def _accepted(
    rnd: Round, box: list[range], k: int, first: int | None = None
) -> set[tuple[int, ...]]:
    cands = np.array(list(itertools.product(*box)), dtype=np.int64)
    starts = None if first is None else [first] * len(cands)
    got = check_reports(rnd, cands, [k] * len(cands), starts=starts)
    return {tuple(int(v) for v in c) for c, g in zip(cands, got, strict=True) if g is None}


def test_the_performance_gap_check_is_exact() -> None:
    from fedstats.analyses.performance_gap.client import encode_gap_report

    for mech, clip in (("R", 1), ("L", 2)):
        rnd = Round("g", encode_gap_report, {"mechanism": mech, "n_groups": 2, "clip": clip}, 5, 2)
        vals = [-1, 1] if mech == "R" else list(range(-clip, clip + 1))
        outs = []
        for g in range(2):
            for v in vals:
                flags = [0] if mech == "R" else ([0, 1] if abs(v) == clip else [0])
                for f in flags:
                    row = [0] * 5
                    row[g], row[2 + g], row[4] = v, 1, f
                    outs.append(tuple(row))
        for k in (1, 2, 3):
            box = [range(-clip * k, clip * k + 1)] * 2 + [range(-1, k + 2)] * 2 + [range(-1, k + 2)]
            assert _accepted(rnd, box, k) == _sums(outs, k), (mech, k)


def test_the_exact_mean_check_is_exact() -> None:
    from fedstats.analyses.exact.client import encode_value

    rnd = Round("v", encode_value, {"frac_bits": 0, "clip": 2.5, "column": "value"}, 2, 3)
    outs = [(q, 1) for q in range(-2, 3)]  # rint(2.5) = 2: round half to even
    for k in (1, 2, 3):
        box = [range(-3 * k, 3 * k + 1), range(-1, k + 2)]
        assert _accepted(rnd, box, k) == _sums(outs, k)


def test_the_bitpushing_check_is_exact_given_the_records() -> None:
    rounds, _ = CASES["bitpushing/exact-3-bits"](np.random.default_rng(3))
    rnd = rounds[0]
    b = rnd.dim
    assert b == 7
    for first, k in ((0, 1), (5, 2), (N - 2, 2)):
        per = [np.flatnonzero(_assigned(rnd, first + t)) for t in range(k)]
        # each record sends any 0/1 on each of its bits
        per_record = [
            {
                tuple(int(v) for v in np.bincount(bits[np.array(m, dtype=bool)], minlength=b))
                for m in itertools.product((0, 1), repeat=bits.size)
            }
            for bits in per
        ]
        possible = {
            tuple(int(v) for v in np.sum(c, axis=0)) for c in itertools.product(*per_record)
        }
        box = [range(-1, k + 2) if _assigned_any(per, j) else range(-1, 2) for j in range(b)]
        assert _accepted(rnd, box, k, first) == possible


def _assigned_any(per: list[np.ndarray], j: int) -> bool:
    return any(j in bits for bits in per)


def test_the_random_allocation_check_is_exact_for_one_bit() -> None:
    rounds, _ = CASES["bitpushing/random-1-bit"](np.random.default_rng(4))
    rnd = rounds[0]
    b = rnd.dim // 2
    outs = []
    for j in range(b):
        for bit in (0, 1):
            row = [0] * (2 * b)
            row[j], row[b + j] = 1, bit
            outs.append(tuple(row))
    params = dict(rnd.params)
    # three bits keep the box small: the first three with their inclusion probabilities renormalised
    small = Round(
        "bits",
        encode_bits,
        {**params, "bit_depth": 3, "cum_pi": [0.0, 0.2, 0.7, 1.0], "max_code": 7},
        dim=6,
        bound=1,
    )
    outs3 = [o[:3] + o[b : b + 3] for o in outs if o.index(1) < 3]
    for k in (1, 2, 3):
        assert _accepted(small, [range(-1, k + 2)] * 6, k) == _sums(outs3, k)


# -- (d) a malicious device in a simulated clear round ------------------------------------------------------

MALICIOUS = {
    "exact-mean": lambda h: [int(h[0]) + 10**9, int(h[1])],
    "bitpushing-mean": lambda h: [10**6, *[int(v) for v in h[1:]]],
    "bitpushing-variance": lambda h: [2, *[int(v) for v in h[1:]]],
    "performance-gap": lambda h: [5, *[int(v) for v in h[1:]]],
    "heterogeneity": lambda h: [10**12, *[int(v) for v in h[1:]]],
}


@pytest.mark.parametrize("case", sorted(MALICIOUS))
def test_a_malicious_device_is_excluded_and_counted_and_the_rest_summed_exactly(case: str) -> None:
    rounds, cols = CASES[case](np.random.default_rng(9))
    rnd = rounds[0]
    lo, hi = rnd.client_range or (0, N)
    batch = ClientBatch({k: v[lo:hi] for k, v in cols.items()}, lo, N)
    per = 3
    honest = rnd.encode_checked(batch, np.random.default_rng(21))
    devices = np.add.reduceat(honest, np.arange(0, honest.shape[0], per), axis=0)
    bad_dev = 2
    forged = MALICIOUS[case](devices[bad_dev])
    got = screened_sum(
        rnd, batch, np.random.default_rng(21), records_per_device=per, malicious={bad_dev: forged}
    )
    assert set(got.rejected) == {bad_dev}
    assert sum(got.excluded.values()) == 1
    assert got.n_clients == honest.shape[0] - per
    want = honest.sum(axis=0) - devices[bad_dev]
    assert got.total.tolist() == want.tolist()
    # the same round without the malicious device: nothing excluded, the full sum
    clean = screened_sum(rnd, batch, np.random.default_rng(21), records_per_device=per)
    assert clean.excluded == {} and clean.total.tolist() == honest.sum(axis=0).tolist()
    # malformed uploads are excluded too, each with its reason
    odd = screened_sum(
        rnd,
        batch,
        np.random.default_rng(21),
        records_per_device=per,
        malicious={0: [0.5] * rnd.dim, 1: [0] * (rnd.dim + 1)},
    )
    assert odd.excluded == {"not_integer": 1, "shape": 1}
    assert odd.total.tolist() == (honest.sum(axis=0) - devices[0] - devices[1]).tolist()


class _FixedUniform:
    """A generator stub whose uniforms are all ``u``: places every client's slots where a test wants."""

    def __init__(self, u: float) -> None:
        self.u = u

    def random(self, size: Any = None) -> np.ndarray:
        return np.full(size, self.u)


@pytest.mark.parametrize(
    ("cum_pi", "u", "bits"),
    [
        # bit 1 is 1 + 2^-52 wide (a float cumulative sum): slots 0.3 and 1.3 both fall on it
        ([0.0, 0.3, 1.3000000000000003, 2.0], 0.3, [1]),
        # the top slot fl(u + 1) rounds up to 2.0 = s: clamped onto the last bit, whose pi is 0
        ([0.0, 1.0, 2.0, 2.0], float(np.nextafter(1.0, 0.0)), [0, 2]),
    ],
)
def test_random_allocation_float_slivers_are_honest_reports(
    cum_pi: list[float], u: float, bits: list[int]
) -> None:
    """The encoder's rare float edge cases (two slots on one bit, a clamped top slot) pass the check."""
    params = {
        "column": "value",
        "low": 0.0,
        "high": 7.0,
        "out_of_range": "clip",
        "offset": 0.0,
        "resolution": 1.0,
        "max_code": 7,
        "bit_depth": 3,
        "center": None,
        "allocation": "random",
        "bits_per_client": 2,
        "epsilon_bit": None,
        "cum_pi": cum_pi,
    }
    rnd = Round("bits", encode_bits, params, dim=6, bound=1)
    batch = ClientBatch({"value": np.array([7.0, 0.0, 5.0])}, 0, 3)
    reps = encode_bits(batch, params, _FixedUniform(u))  # type: ignore[arg-type]
    assert [list(np.flatnonzero(r[:3])) for r in reps] == [bits] * 3  # the edge case happened
    assert check_reports(rnd, reps, [1, 1, 1]) == [None] * 3
    assert check_report(rnd, reps.sum(axis=0), 3) is None
