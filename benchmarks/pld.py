"""Benchmark of the privacy-loss-distribution accountant: time to compose 1,000 releases.

Usage: ``python benchmarks/pld.py [--repeat N]``. Writes ``benchmarks/results/pld.json``.

For each scenario of 1,000 releases, the time of :func:`fedstats.privacy.analysis.pld.pld_epsilon`

* **cold**: every cache cleared (each distinct mechanism's PLD is built, then composed), and
* **spend**: what a ledger's next charge costs (the releases' PLDs cached, the composition of one more
  release computed anew),

the median (and the minimum) of ``--repeat`` runs, with the epsilon it reports at delta 1e-6 against basic composition, and,
when Google's ``dp_accounting`` is installed, its time and epsilon for the same composition (default
discretization 1e-4; connect-the-dots where it offers it). The target (issue 43) is at most 50 ms for 1,000
events. The machine's load average is recorded: this machine is shared, and times scale with it.
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
from fedstats.errors import BudgetExceededError
from fedstats.privacy.analysis import pld as pld_module
from fedstats.privacy.analysis.loss import MechanismSpec as M
from fedstats.privacy.ledger import PrivacyLedger

DELTA = 1e-6
SCENARIOS: dict[str, list[tuple[M, int, float]]] = {
    # (mechanism, count, its pure epsilon or None-like inf for the Gaussian)
    "1000 x randomized response eps 0.1": [(M("randomized_response", 0.1), 1000, 0.1)],
    "1000 x Laplace b 20 (eps 0.05)": [(M("laplace", 20.0), 1000, 0.05)],
    "1000 x Gaussian sigma 30": [(M("gaussian", 30.0), 1000, math.inf)],
    "1000 mixed: 400 RR 0.1, 300 Laplace 20, 200 Gaussian 30, 100 Laplace 2 sampled at 0.1": [
        (M("randomized_response", 0.1), 400, 0.1),
        (M("laplace", 20.0), 300, 0.05),
        (M("gaussian", 30.0), 200, math.inf),
        (M("laplace", 2.0, sampling_rate=0.1), 100, 0.5),
    ],
}


def _clear() -> None:
    pld_module._clear_caches()


def _seconds(fn: Callable[[], Any], repeat: int, before: Callable[[], None]) -> tuple[float, float]:
    """(median, minimum) over ``repeat`` runs of ``fn``, each after ``before``."""
    times = []
    for _ in range(repeat):
        before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def _dp_accounting(groups: list[tuple[M, int, float]]) -> dict[str, Any] | None:
    try:
        from dp_accounting.pld import privacy_loss_distribution as pld
    except ImportError:
        return None

    def one(spec: M) -> Any:
        if spec.kind == "randomized_response":
            return pld.from_randomized_response(2 / (math.exp(spec.parameter) + 1), 2)
        if spec.kind == "laplace":
            return pld.from_laplace_mechanism(spec.parameter, sampling_prob=spec.sampling_rate)
        return pld.from_gaussian_mechanism(spec.parameter, sampling_prob=spec.sampling_rate)

    t0 = time.perf_counter()
    out = None
    for spec, n, _ in groups:
        c = one(spec).self_compose(n)
        out = c if out is None else out.compose(c)
    eps = out.get_epsilon_for_delta(DELTA)
    import dp_accounting

    return {
        "version": getattr(dp_accounting, "__version__", "?"),
        "seconds": time.perf_counter() - t0,
        "epsilon": eps,
    }


def main() -> None:
    """Run the scenarios and write ``benchmarks/results/pld.json``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for name, groups in SCENARIOS.items():
        specs = [s for s, n, _ in groups for _ in range(n)]
        more = [*specs, groups[0][0]]
        eps = pld_module.pld_epsilon(specs, delta=DELTA)
        cold, cold_min = _seconds(
            lambda s=specs: pld_module.pld_epsilon(s, delta=DELTA), args.repeat, _clear
        )

        def warm_up(s: list[M] = specs) -> None:
            pld_module._composed.cache_clear()
            pld_module._epsilon_of.cache_clear()
            pld_module.pld_epsilon(s, delta=DELTA)  # the releases' PLDs are cached, as in a ledger
            pld_module._composed.cache_clear()
            pld_module._epsilon_of.cache_clear()

        spend, spend_min = _seconds(
            lambda s=more: pld_module.pld_epsilon(s, delta=DELTA), args.repeat, warm_up
        )
        basic = sum(n * e for _, n, e in groups)
        row = {
            "scenario": name,
            "events": len(specs),
            "delta": DELTA,
            "epsilon_pld": eps,
            "epsilon_basic": basic,
            "cold_ms": cold * 1e3,
            "cold_min_ms": cold_min * 1e3,
            "spend_ms": spend * 1e3,
            "spend_min_ms": spend_min * 1e3,
            "dp_accounting": _dp_accounting(groups),
        }
        rows.append(row)
        print(
            f"{name}: eps {eps:.4f} (basic {basic:.4g}); cold {cold * 1e3:.1f} ms, spend {spend * 1e3:.1f} ms"
        )
    write_results(
        "pld",
        {
            "command": "python benchmarks/pld.py --repeat " + str(args.repeat),
            "load_average": os.getloadavg(),
            "cpus": os.cpu_count(),
            "target_ms_per_1000_events": 50,
            "results": rows,
            "ledger": _ledger(args.repeat),
        },
    )


def _ledger(repeat: int) -> dict[str, Any]:
    """A ledger's check of its 1,001st charge: 1,000 pure (0.1, 0) releases on it, one more asked for.

    What a device's budget or the server's ledger does at each task (pure releases composed as randomized
    response at the delta target); cold: every cache cleared; basic composition: 100.1.
    """
    ledger = PrivacyLedger()
    for i in range(1000):
        ledger.spend(epsilon=0.1, label=f"task {i}")

    def check() -> None:
        with contextlib.suppress(BudgetExceededError), ledger.atomic():
            ledger.epsilon_budget = 1000.0  # the budget check composes the 1,000 charges
            ledger.spend(epsilon=0.1, label="one more")  # and the 1,001
            raise BudgetExceededError("roll back")

    median, low = _seconds(check, repeat, _clear)
    out = {"charges": 1000, "epsilon": ledger.total().epsilon, "check_ms": median * 1e3}
    out["check_min_ms"] = low * 1e3
    print(f"ledger, 1,001st charge: {median * 1e3:.1f} ms (min {low * 1e3:.1f})")
    return out


if __name__ == "__main__":
    main()
