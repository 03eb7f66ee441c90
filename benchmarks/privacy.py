"""Benchmark of the privacy core: Gaussian calibration vs diffprivlib, sampler throughput vs numpy.

Usage: ``python benchmarks/privacy.py [--quick]``. Writes ``benchmarks/results/privacy.json``.

* **Calibration**: for a grid of (epsilon, delta), the time of ``analytic_gaussian_sigma`` and of IBM
  diffprivlib's ``GaussianAnalytic`` (run in the same invocation, in a separate virtual environment
  ``benchmarks/.venv-peers`` that this script creates when missing, because diffprivlib pins an older
  scikit-learn), both compared with a 60-digit mpmath solution: relative error of sigma and whether the
  returned sigma is private (its exact delta at most the target).
* **Samplers**: throughput of every fedstats sampler / randomizer driven by the secure generator
  (AES-256-CTR keystream) and by numpy's PCG64 ``Generator``, and numpy's own raw, uniform, Laplace and
  normal generators for scale; the ratio secure / numpy is the cost of security.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import venv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mpmath as mp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import write_results
from fedstats.privacy.analysis import analytic_gaussian_sigma
from fedstats.privacy.mechanisms import (
    GaussianMechanism,
    GeneralizedRandomizedResponse,
    Harmony,
    LaplaceMechanism,
    PiecewiseMechanism,
    RandomizedResponse,
    sample_discrete_gaussian,
    sample_discrete_laplace,
)
from fedstats.randomness import RandomSource

PEER_VENV = Path(__file__).resolve().parent / ".venv-peers"
PEER_REQUIREMENTS = ["diffprivlib==0.6.6", "scikit-learn<1.6"]

PEER_SCRIPT = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
from diffprivlib.mechanisms import GaussianAnalytic
pairs, repeat = json.loads(sys.stdin.read())
out = []
for eps, delta in pairs:
    try:
        t0 = time.perf_counter()
        for _ in range(repeat):
            m = GaussianAnalytic(epsilon=eps, delta=delta, sensitivity=1.0)
        dt = (time.perf_counter() - t0) / repeat
        sigma = float(m._scale)
        out.append({"sigma": sigma if sigma == sigma and sigma != float("inf") else None,
                    "seconds": dt, "error": None})
    except Exception as exc:  # diffprivlib overflows or loops at extreme parameters
        out.append({"sigma": None, "seconds": None, "error": f"{type(exc).__name__}: {exc}"})
import diffprivlib
print(json.dumps({"version": diffprivlib.__version__, "results": out}))
"""


def ensure_peer_venv() -> Path:
    """Create ``benchmarks/.venv-peers`` with diffprivlib when missing; return its python."""
    py = PEER_VENV / "bin" / "python"
    if py.exists():
        ok = (
            subprocess.run([str(py), "-c", "import diffprivlib"], capture_output=True).returncode
            == 0
        )
        if ok:
            return py
    print(f"creating {PEER_VENV} with {' '.join(PEER_REQUIREMENTS)} ...", file=sys.stderr)
    venv.EnvBuilder(with_pip=True, clear=not py.exists()).create(PEER_VENV)
    (PEER_VENV / ".gitignore").write_text("*\n")  # never committed
    subprocess.run([str(py), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS], check=True)
    return py


mp.mp.dps = 60


def mp_delta(eps: float, sigma: mp.mpf) -> mp.mpf:
    a = 1 / (2 * sigma)
    b = mp.mpf(eps) * sigma
    return mp.ncdf(a - b) - mp.exp(mp.mpf(eps)) * mp.ncdf(-a - b)


def mp_sigma(eps: float, delta: float, guess: float) -> mp.mpf:
    target = mp.log(mp.mpf(delta))

    def f(t: mp.mpf) -> mp.mpf:
        return mp.log(mp_delta(eps, mp.exp(t))) - target

    lo, hi = mp.log(guess) - mp.mpf("0.05"), mp.log(guess) + mp.mpf("0.05")
    while f(lo) < 0:
        lo -= 1
    while f(hi) > 0:
        hi += 1
    return mp.exp(mp.findroot(f, (lo, hi), solver="illinois", tol=mp.mpf(10) ** -40))


def calibration(quick: bool) -> dict[str, Any]:
    eps_grid = [0.01, 0.1, 1.0, 5.0, 20.0, 100.0, 800.0]
    delta_grid = [1e-3, 1e-5, 1e-8, 1e-12, 1e-20, 1e-50]
    if quick:
        eps_grid, delta_grid = [0.1, 1.0, 20.0, 800.0], [1e-5, 1e-8, 1e-20]
    pairs = [(e, d) for e in eps_grid for d in delta_grid]
    repeat = 3 if quick else 20

    py = ensure_peer_venv()
    peer = subprocess.run(
        [str(py), "-c", PEER_SCRIPT],
        input=json.dumps([pairs, repeat]),
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    peer_out = json.loads(peer.stdout)

    rows = []
    for (eps, delta), theirs in zip(pairs, peer_out["results"], strict=True):
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            ours = analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=1.0)
            times.append(time.perf_counter() - t0)
        ref = mp_sigma(eps, delta, ours)
        row: dict[str, Any] = {
            "epsilon": eps,
            "delta": delta,
            "sigma_exact": float(ref),
            "fedstats_sigma": ours,
            "fedstats_seconds": statistics.median(times),
            "fedstats_rel_error": float(mp.mpf(ours) / ref - 1),
            "fedstats_private": bool(mp_delta(eps, mp.mpf(ours)) <= mp.mpf(delta)),
            "diffprivlib_sigma": theirs["sigma"],
            "diffprivlib_seconds": theirs["seconds"],
            "diffprivlib_error": theirs["error"],
        }
        if theirs["sigma"] is not None and theirs["sigma"] > 0:
            row["diffprivlib_rel_error"] = float(mp.mpf(theirs["sigma"]) / ref - 1)
            row["diffprivlib_private"] = bool(
                mp_delta(eps, mp.mpf(theirs["sigma"])) <= mp.mpf(delta)
            )
        else:
            row["diffprivlib_rel_error"] = None
            row["diffprivlib_private"] = False
        if theirs["seconds"]:
            row["speedup"] = theirs["seconds"] / row["fedstats_seconds"]
        rows.append(row)
    speedups = [r["speedup"] for r in rows if "speedup" in r]
    their_errors = [
        abs(r["diffprivlib_rel_error"]) for r in rows if r["diffprivlib_rel_error"] is not None
    ]
    return {
        "diffprivlib_version": peer_out["version"],
        "repeat": repeat,
        "rows": rows,
        "summary": {
            "pairs": len(rows),
            "speedup_median": statistics.median(speedups) if speedups else None,
            "speedup_min": min(speedups) if speedups else None,
            "fedstats_max_rel_error": max(abs(r["fedstats_rel_error"]) for r in rows),
            "fedstats_all_private": all(r["fedstats_private"] for r in rows),
            "diffprivlib_max_rel_error": max(their_errors) if their_errors else None,
            "diffprivlib_not_private": sum(1 for r in rows if not r["diffprivlib_private"]),
            "diffprivlib_failed": sum(1 for r in rows if r["diffprivlib_sigma"] is None),
        },
    }


def best_time(fn: Callable[[], Any], repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def samplers(quick: bool) -> dict[str, Any]:
    n = 10**6 if quick else 10**7
    repeat = 3
    x_bits = (np.arange(n) % 2).astype(np.uint8)
    x_cat = np.arange(n) % 16
    x_unit = np.linspace(-1, 1, n)
    cases: dict[str, Callable[[Any], Any]] = {
        "raw_uint64": lambda g: (
            g.random_raw(n) if hasattr(g, "random_raw") else g.bit_generator.random_raw(n)
        ),
        "uniform": lambda g: g.random(n),
        "discrete_laplace(scale=10)": lambda g: sample_discrete_laplace(10.0, n, g),
        "discrete_laplace(scale=1e6)": lambda g: sample_discrete_laplace(1e6, n, g),
        "discrete_gaussian(sigma=10)": lambda g: sample_discrete_gaussian(100.0, n, g),
        "discrete_gaussian(sigma=1e6)": lambda g: sample_discrete_gaussian(1e12, n, g),
        "randomized_response": lambda g: RandomizedResponse(epsilon=1.0).randomize(x_bits, g),
        "generalized_rr(k=16)": lambda g: GeneralizedRandomizedResponse(
            epsilon=1.0, k=16
        ).randomize(x_cat, g),
        "harmony": lambda g: Harmony(epsilon=1.0).randomize(x_unit, g),
        "piecewise": lambda g: PiecewiseMechanism(epsilon=1.0).randomize(x_unit, g),
        "laplace_grid": lambda g: LaplaceMechanism(epsilon=1.0, sensitivity=2.0).randomize(
            x_unit, g
        ),
        "gaussian_grid": lambda g: GaussianMechanism(
            epsilon=1.0, delta=1e-6, sensitivity=2.0
        ).randomize(x_unit, g),
        "laplace_float": lambda g: LaplaceMechanism(
            epsilon=1.0, sensitivity=2.0, resolution_bits=None
        ).randomize(x_unit, g),
        "gaussian_float": lambda g: GaussianMechanism(
            epsilon=1.0, delta=1e-6, sensitivity=2.0, resolution_bits=None
        ).randomize(x_unit, g),
    }
    numpy_rng = np.random.default_rng(1)
    secure_rng = RandomSource().generator("benchmark")
    rows = []
    for name, fn in cases.items():
        t_np = best_time(lambda fn=fn: fn(numpy_rng), repeat)
        t_sec = best_time(lambda fn=fn: fn(secure_rng), repeat)
        rows.append(
            {
                "sampler": name,
                "n": n,
                "numpy_per_second": n / t_np,
                "secure_per_second": n / t_sec,
                "secure_over_numpy_time": t_sec / t_np,
            }
        )
    baselines = {
        "numpy_raw_per_second": n
        / best_time(lambda: numpy_rng.bit_generator.random_raw(n), repeat),
        "numpy_laplace_per_second": n / best_time(lambda: numpy_rng.laplace(0, 1, n), repeat),
        "numpy_normal_per_second": n / best_time(lambda: numpy_rng.standard_normal(n), repeat),
    }
    return {
        "rows": rows,
        "baselines": baselines,
        "summary": {"max_secure_over_numpy": max(r["secure_over_numpy_time"] for r in rows)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grid and 10^6 samples")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cal = calibration(args.quick)
    smp = samplers(args.quick)
    path = write_results(
        "privacy",
        {
            "command": "python benchmarks/privacy.py" + (" --quick" if args.quick else ""),
            "quick": args.quick,
            "calibration": cal,
            "samplers": smp,
        },
    )
    s = cal["summary"]
    print(
        f"calibration: {s['pairs']} pairs, median speedup vs diffprivlib {s['speedup_median']:.1f}x "
        f"(min {s['speedup_min']:.1f}x); fedstats max rel. error {s['fedstats_max_rel_error']:.2e}, "
        f"all private: {s['fedstats_all_private']}; diffprivlib max rel. error "
        f"{s['diffprivlib_max_rel_error']}, not private in {s['diffprivlib_not_private']} pairs, "
        f"failed in {s['diffprivlib_failed']}"
    )
    for r in smp["rows"]:
        print(
            f"  {r['sampler']:32s} numpy {r['numpy_per_second'] / 1e6:8.1f} M/s   secure "
            f"{r['secure_per_second'] / 1e6:8.1f} M/s   secure/numpy time {r['secure_over_numpy_time']:.2f}"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
