"""Discrete Laplace / discrete Gaussian samplers: fedstats' exact ones vs the previous ones vs OpenDP's.

Run: ``python benchmarks/samplers.py [--quick]``. Writes ``benchmarks/results/samplers.json``.

* ``exact``: :func:`fedstats.privacy.mechanisms.sample_discrete_laplace` / ``sample_discrete_gaussian``
  (Canonne-Kamath-Steinke 2020 Algorithms 1-3, exact).
* ``previous``: the samplers these replaced (float ``-log U`` magnitudes, 53-bit Bernoulli trials; *not*
  exact), kept only here, verbatim in their essentials, for comparison.
* ``opendp``: OpenDP's vectorized ``make_laplace`` / ``make_gaussian`` on integer vectors (exact samplers
  in Rust), run in ``benchmarks/.venv-opendp``, which this script creates when missing (never committed).

Rates are samples per second, best of ``repeat`` runs, measured interleaved in one run on numpy's PCG64
and on the secure AES-CTR generator (fedstats) and OpenDP's own CSPRNG.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
import venv
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fedstats._io import atomic_write_text
from fedstats.privacy.mechanisms import sample_discrete_gaussian, sample_discrete_laplace
from fedstats.randomness import RNG, SecureGenerator

OUT = Path(__file__).resolve().parent / "results" / "samplers.json"
OPENDP_VENV = Path(__file__).resolve().parent / ".venv-opendp"
OPENDP_REQUIREMENTS = ["opendp==0.16.0"]


# -- the previous (inexact) samplers, for comparison only ------------------------------------------------
def _raw(rng: RNG, n: int) -> np.ndarray:
    if isinstance(rng, SecureGenerator):
        return np.asarray(rng.random_raw(n), dtype=np.uint64)
    return np.asarray(rng.bit_generator.random_raw(n), dtype=np.uint64)


def _old_exponential(raw: np.ndarray, rng: RNG) -> np.ndarray:
    top = raw >> np.uint64(11)
    e = top.view(np.int64).astype(np.float64)
    e += 0.5
    e *= 2.0**-53
    np.log(e, out=e)
    np.negative(e, out=e)
    low = np.flatnonzero(top == 0)
    while low.size:
        more = _raw(rng, low.size) >> np.uint64(11)
        e[low] = 53 * math.log(2) - np.log((more.astype(np.float64) + 0.5) * 2.0**-53)
        low = low[more == 0]
    return e


def _old_dlap_block(scale: float, m: int, rng: RNG) -> np.ndarray:
    raw = _raw(rng, m)
    negative = (raw & np.uint64(1)) == 0
    mag = _old_exponential(raw, rng)
    mag *= scale
    np.floor(mag, out=mag)
    keep = ~(negative & (mag == 0.0))
    np.negative(mag, out=mag, where=negative)
    return np.asarray(mag[keep], dtype=np.int64)


def old_discrete_laplace(scale: float, n: int, rng: RNG) -> np.ndarray:
    out = np.empty(n, dtype=np.int64)
    filled = 0
    p_keep = 1.0 - 0.5 * (-math.expm1(-1.0 / scale))
    while filled < n:
        need = min(n - filled, 1 << 18)
        cand = _old_dlap_block(scale, int(need / p_keep * 1.02) + 16, rng)[:need]
        out[filled : filled + cand.size] = cand
        filled += cand.size
    return out


def old_discrete_gaussian(sigma2: float, n: int, rng: RNG) -> np.ndarray:
    t = float(math.floor(math.sqrt(sigma2)) + 1)
    out = np.empty(n, dtype=np.int64)
    filled, rate = 0, 0.5
    while filled < n:
        need = min(n - filled, 1 << 18)
        m = int(need / rate * 1.05) + 16
        y = _old_dlap_block(t, m, rng)
        d = np.abs(y).astype(np.float64) - sigma2 / t
        acc_p = np.exp(-d * d / (2.0 * sigma2))
        u = (_raw(rng, y.size) >> np.uint64(11)).astype(np.float64) * 2.0**-53
        acc = y[u < acc_p]
        rate = max(0.05, acc.size / m)
        take = acc[:need]
        out[filled : filled + take.size] = take
        filled += take.size
    return out


# -- OpenDP, in its own virtualenv -----------------------------------------------------------------------
OPENDP_SCRIPT = r"""
import json, sys, time
import opendp.prelude as dp
dp.enable_features("contrib")
n, repeat, cases = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
out = {}
for name, kind, param in cases:
    space = (dp.vector_domain(dp.atom_domain(T=int)),
             dp.l1_distance(T=int) if kind == "laplace" else dp.l2_distance(T=int))
    meas = dp.m.make_laplace(*space, scale=param) if kind == "laplace" else dp.m.make_gaussian(*space, scale=param)
    zeros = [0] * n
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter(); meas(zeros); best = min(best, time.perf_counter() - t0)
    out[name] = n / best
print(json.dumps({"version": dp.__version__ if hasattr(dp, "__version__") else None, "rates": out}))
"""


def ensure_opendp() -> Path:
    py = OPENDP_VENV / "bin" / "python"
    if (
        py.exists()
        and subprocess.run([str(py), "-c", "import opendp"], capture_output=True).returncode == 0
    ):
        return py
    print(f"creating {OPENDP_VENV} with {' '.join(OPENDP_REQUIREMENTS)} ...", file=sys.stderr)
    venv.EnvBuilder(with_pip=True, clear=not py.exists()).create(OPENDP_VENV)
    (OPENDP_VENV / ".gitignore").write_text("*\n")  # never committed
    subprocess.run([str(py), "-m", "pip", "install", "-q", *OPENDP_REQUIREMENTS], check=True)
    return py


def best_rate(f: Callable[[], object], n: int, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer samples and repeats")
    args = ap.parse_args()
    n = 200_000 if args.quick else 1_000_000
    repeat = 3 if args.quick else 5
    n_opendp = 20_000 if args.quick else 100_000
    # (name, kind, fedstats parameter (scale or sigma^2), OpenDP scale)
    cases = [
        ("discrete_laplace(scale=1)", "laplace", 1.0, 1.0),
        ("discrete_laplace(scale=10)", "laplace", 10.0, 10.0),
        ("discrete_laplace(scale=1e6)", "laplace", 1e6, 1e6),
        ("discrete_laplace(scale=2^40)", "laplace", 2.0**40, 2.0**40),
        ("discrete_gaussian(sigma=1)", "gaussian", 1.0, 1.0),
        ("discrete_gaussian(sigma=10)", "gaussian", 100.0, 10.0),
        ("discrete_gaussian(sigma=1e6)", "gaussian", 1e12, 1e6),
        ("discrete_gaussian(sigma=2^40)", "gaussian", 2.0**80, 2.0**40),
    ]
    gens: dict[str, Callable[[], RNG]] = {
        "numpy": lambda: np.random.default_rng(1),
        "secure": lambda: SecureGenerator(bytes(range(32))),
    }
    rows = []
    for name, kind, param, _ in cases:
        new = sample_discrete_laplace if kind == "laplace" else sample_discrete_gaussian
        old = old_discrete_laplace if kind == "laplace" else old_discrete_gaussian
        row: dict[str, object] = {"case": name}
        for gname, make in gens.items():
            g = make()
            new(param, 1000, g)  # warm up tables
            # interleaved: previous, exact, previous, exact, ...
            r_old = r_new = 0.0
            for _ in range(2):
                r_old = max(r_old, best_rate(lambda old=old, g=g, p=param: old(p, n, g), n, repeat))
                r_new = max(r_new, best_rate(lambda new=new, g=g, p=param: new(p, n, g), n, repeat))
            row[f"previous_{gname}_per_s"] = r_old
            row[f"exact_{gname}_per_s"] = r_new
            row[f"slowdown_{gname}"] = r_old / r_new
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    opendp: dict[str, object] = {}
    try:
        py = ensure_opendp()
        res = subprocess.run(
            [
                str(py),
                "-c",
                OPENDP_SCRIPT,
                str(n_opendp),
                str(repeat),
                json.dumps([[c[0], c[1], c[3]] for c in cases]),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=1200,
        )
        opendp = json.loads(res.stdout)
        for row in rows:
            rate = opendp["rates"].get(row["case"])  # type: ignore[union-attr]
            row["opendp_per_s"] = rate
            row["opendp_slowdown_vs_exact_secure"] = (
                row["exact_secure_per_s"] / rate if rate else None  # type: ignore[operator]
            )
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as exc:
        opendp = {"error": f"{type(exc).__name__}: {exc}"}
    result = {
        "command": "python benchmarks/samplers.py" + (" --quick" if args.quick else ""),
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "processor": platform.processor() or platform.machine(),
        },
        "n": n,
        "n_opendp": n_opendp,
        "repeat": repeat,
        "opendp": {k: v for k, v in opendp.items() if k != "rates"},
        "rows": rows,
    }
    atomic_write_text(OUT, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
