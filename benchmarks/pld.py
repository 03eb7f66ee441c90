"""Benchmark of the privacy-loss-distribution accountant: CPU time to compose 1,000 releases.

Usage: ``python benchmarks/pld.py [--repeat N]``. Writes ``benchmarks/results/pld.json``.

Times are CPU seconds of this process (``time.process_time``, not wall time: the machine is shared), the
median (and the maximum) of ``--repeat`` runs; the load average is recorded before and after. Issue 43's
target is at most 50 ms for 1,000 events. For each scenario of 1,000 releases, the time of
:func:`fedstats.privacy.analysis.pld.pld_epsilon`

* **cold**: every cache of the module cleared first (each distinct release's PLD is built, then composed);
* **next charge**: the composition of 1,001 releases right after that of the 1,000 (what a ledger's next
  charge costs: the releases' PLDs, transforms and bounds are cached, the new count's power is not),

with the epsilon at delta 1e-6, basic composition's, and, when Google's ``dp_accounting`` is installed,
its CPU time and epsilon for the same composition (default discretization 1e-4, connect-the-dots). Then a
next charge on each of the three sides that keep one arithmetic, each holding 1,000 pure charges of
epsilon 0.1 (composed as randomized response at the delta target): the library's ``PrivacyLedger.spend``
with a budget, the device's ``LocalBudget.check`` (which replays its charges into a ledger) and the
server's ``ledger.reserve`` on an in-memory store (two budgets: population and analyst, each replayed),
in steady state (the previous charge's compositions cached, as in a running process) and cold.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import write_results
from fedstats.client import LocalBudget
from fedstats.errors import BudgetExceededError
from fedstats.privacy.analysis import pld as pld_module
from fedstats.privacy.analysis.loss import MechanismSpec as M
from fedstats.privacy.analysis.loss import PrivacyLoss
from fedstats.privacy.ledger import PrivacyLedger
from fedstats.service.domain import ledger as server
from fedstats.service.store import open_store

DELTA = 1e-6
N = 1000
RR = M("randomized_response", 0.1)
SCENARIOS: dict[str, list[tuple[M, int, float]]] = {
    # (mechanism, count, its pure epsilon; inf for the Gaussian)
    "1000 x randomized response eps 0.1": [(RR, 1000, 0.1)],
    "1000 x Laplace b 20 (eps 0.05)": [(M("laplace", 20.0), 1000, 0.05)],
    "1000 x Gaussian sigma 30": [(M("gaussian", 30.0), 1000, math.inf)],
    "1000 mixed: 400 RR 0.1, 300 Laplace 20, 200 Gaussian 30, 100 Laplace 2 sampled at 0.1": [
        (RR, 400, 0.1),
        (M("laplace", 20.0), 300, 0.05),
        (M("gaussian", 30.0), 200, math.inf),
        (M("laplace", 2.0, sampling_rate=0.1), 100, 0.5),
    ],
    "1000 mixed, 10 distinct: RR 0.05-0.5, Laplace b 5-40, Gaussian 10-40, 100 each": [
        *[(M("randomized_response", e), 100, e) for e in (0.05, 0.1, 0.2, 0.3, 0.5)],
        *[(M("laplace", b), 100, 1 / b) for b in (5.0, 20.0, 40.0)],
        *[(M("gaussian", s), 100, math.inf) for s in (10.0, 40.0)],
    ],
}


def _cpu_ms(fn: Callable[[], Any], repeat: int, before: Callable[[], None]) -> tuple[float, float]:
    """(median, maximum) CPU milliseconds over ``repeat`` runs of ``fn``, each after ``before``."""
    times = []
    for _ in range(repeat):
        before()
        t0 = time.process_time()
        fn()
        times.append((time.process_time() - t0) * 1e3)
    return statistics.median(times), max(times)


def _dp_accounting(groups: list[tuple[M, int, float]]) -> dict[str, Any] | None:
    try:
        import dp_accounting  # type: ignore[import-untyped]
        from dp_accounting.pld import privacy_loss_distribution as pld  # type: ignore[import-untyped]
    except ImportError:
        return None

    def one(spec: M) -> Any:
        if spec.kind == "randomized_response":
            return pld.from_randomized_response(2 / (math.exp(spec.parameter) + 1), 2)
        if spec.kind == "laplace":
            return pld.from_laplace_mechanism(spec.parameter, sampling_prob=spec.sampling_rate)
        return pld.from_gaussian_mechanism(spec.parameter, sampling_prob=spec.sampling_rate)

    t0 = time.process_time()
    out: Any = None
    for spec, n, _ in groups:
        c = one(spec).self_compose(n)
        out = c if out is None else out.compose(c)
    eps = out.get_epsilon_for_delta(DELTA)
    return {
        "version": getattr(dp_accounting, "__version__", "?"),
        "cpu_ms": (time.process_time() - t0) * 1e3,
        "epsilon": eps,
    }


def _scenario(name: str, groups: list[tuple[M, int, float]], repeat: int) -> dict[str, Any]:
    counts = {s: n for s, n, _ in groups}
    more = {**counts, groups[0][0]: counts[groups[0][0]] + 1}
    pld_module._clear_caches()
    eps = pld_module.pld_epsilon(counts, delta=DELTA)
    h, pmfs = pld_module._composed(pld_module._groups(counts), pld_module.DISCRETIZATION)

    def after_n() -> None:  # the state right after the 1,000 were composed
        pld_module._clear_caches()
        pld_module.pld_epsilon(counts, delta=DELTA)

    cold, cold_max = _cpu_ms(
        lambda: pld_module.pld_epsilon(counts, delta=DELTA), repeat, pld_module._clear_caches
    )
    spend, spend_max = _cpu_ms(lambda: pld_module.pld_epsilon(more, delta=DELTA), repeat, after_n)
    dp = _dp_accounting(groups)
    finite = all(math.isfinite(e) for _, _, e in groups)
    row = {
        "scenario": name,
        "events": sum(counts.values()),
        "distinct": len(counts),
        "delta": DELTA,
        "grid": h,
        "window_points": max(p[1].size for p in pmfs),
        "epsilon_pld": eps,
        "epsilon_basic": sum(n * e for _, n, e in groups) if finite else None,
        "cold_ms": cold,
        "cold_max_ms": cold_max,
        "next_charge_ms": spend,
        "next_charge_max_ms": spend_max,
        "dp_accounting": dp,
        "relative_to_dp_accounting": None if dp is None else eps / dp["epsilon"] - 1,
    }
    print(
        f"{name}: eps {eps:.5f} (dp_accounting {dp['epsilon'] if dp else '-'}), grid {h:.3g}; "
        f"CPU cold {cold:.1f} ms (max {cold_max:.1f}), next charge {spend:.1f} ms (max {spend_max:.1f})"
    )
    return row


def _library(repeat: int) -> dict[str, Any]:
    """PrivacyLedger.spend of a 1,001st pure charge (epsilon 0.1) on a ledger with a budget."""
    ledger = PrivacyLedger()
    for i in range(N):
        ledger.spend(epsilon=0.1, label=f"task {i}")
    ledger.epsilon_budget = 1000.0  # composes the 1,000 (as the previous charge did)

    def charge() -> None:
        with contextlib.suppress(BudgetExceededError), ledger.atomic():
            ledger.spend(epsilon=0.1, label="one more")  # composes the 1,001 against the budget
            raise BudgetExceededError("roll back")

    def steady() -> None:
        pld_module._clear_caches()
        ledger.total()

    def cold() -> None:
        pld_module._clear_caches()

    return _three(ledger.total().epsilon, charge, steady, cold, repeat)


def _three(
    eps: float,
    charge: Callable[[], None],
    steady: Callable[[], None],
    cold: Callable[[], None],
    r: int,
) -> dict[str, Any]:
    median, high = _cpu_ms(charge, r, steady)
    cmedian, chigh = _cpu_ms(charge, r, cold)
    return {
        "charges": N,
        "epsilon": eps,
        "next_charge_ms": median,
        "next_charge_max_ms": high,
        "cold_ms": cmedian,
        "cold_max_ms": chigh,
    }


def _device(repeat: int) -> dict[str, Any]:
    """LocalBudget.check of a 1,001st charge: the device replays its 1,000 charges into a ledger."""
    loss = PrivacyLoss(0.1, 0.0, None, (RR,))
    budget = LocalBudget(None, epsilon=1000.0, delta=1e-4)
    for i in range(N):
        budget.charges[f"run-{i}"] = {
            "epsilon": 0.1,
            "delta": 0.0,
            "rho": None,
            "status": "spent",
            "mechanisms": [RR.as_dict()],
        }

    def steady() -> None:
        pld_module._clear_caches()
        budget.spent()

    return _three(
        budget.spent()[0], lambda: budget.check(loss), steady, pld_module._clear_caches, repeat
    )


def _server(repeat: int) -> dict[str, Any]:
    """ledger.reserve of a 1,001st charge on the population's and the analyst's budgets (memory store).

    Committed, and released before the next repeat (a released charge no longer counts).
    """
    loss = PrivacyLoss(0.1, 0.0, None, (RR,))
    store = open_store("memory://")
    with store.transaction() as tx:
        for scope, name in (("population", "pop"), ("analyst", "ana")):
            server.set_budget(tx, scope, name, epsilon=1000.0, delta=1e-4, actor="admin")
    for i in range(N):
        with store.transaction() as tx:
            charge = server.Charge.of(loss, f"run {i}")
            server.reserve(tx, run_id=f"run-{i}", population="pop", analyst="ana", charge=charge)

    extra = iter(range(10**6))
    runs: list[str] = []

    def reserve() -> None:
        runs.append(f"extra-{next(extra)}")
        with store.transaction() as tx:
            charge = server.Charge.of(loss, "one more")
            server.reserve(tx, run_id=runs[-1], population="pop", analyst="ana", charge=charge)

    def release() -> None:  # the previous repeat's charge given back: 1,000 charges again
        if runs:
            with store.transaction() as tx:
                server.release(tx, runs[-1], reason="benchmark")

    def status() -> dict[str, Any]:
        with store.transaction() as tx:
            out = server.budget_status(tx, "population", "pop")
        assert out is not None and out["charges"] == N
        return out

    def steady() -> None:
        release()
        pld_module._clear_caches()
        status()

    def cold() -> None:
        release()
        status()
        pld_module._clear_caches()

    try:
        return _three(float(status()["spent_epsilon"]), reserve, steady, cold, repeat)
    finally:
        store.close()


def main() -> None:
    """Run the scenarios and write ``benchmarks/results/pld.json``."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    load_before = os.getloadavg()
    rows = [_scenario(name, groups, args.repeat) for name, groups in SCENARIOS.items()]
    sides = {
        "library PrivacyLedger.spend": _library(args.repeat),
        "device LocalBudget.check": _device(args.repeat),
        "server ledger.reserve (population and analyst)": _server(args.repeat),
    }
    for side, out in sides.items():
        print(
            f"{side}, 1,001st charge: eps {out['epsilon']:.5f}; CPU next charge "
            f"{out['next_charge_ms']:.1f} ms (max {out['next_charge_max_ms']:.1f}), cold "
            f"{out['cold_ms']:.1f} ms (max {out['cold_max_ms']:.1f})"
        )
    load_after = os.getloadavg()
    print(f"load average before {load_before}, after {load_after}")
    write_results(
        "pld",
        {
            "command": "python benchmarks/pld.py --repeat " + str(args.repeat),
            "clock": "time.process_time (CPU seconds of this process), median and max of repeats",
            "repeat": args.repeat,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "cpus": os.cpu_count(),
            "target_ms_per_1000_events": 50,
            "results": rows,
            "ledger_next_charge": sides,
        },
    )


if __name__ == "__main__":
    main()
