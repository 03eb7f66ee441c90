"""FED-chi^2 client cost: encoding throughput against numpy's raw matrix-vector product, and Figure 2.

Usage: ``python benchmarks/chi2.py [--quick]``; writes ``benchmarks/results/chi2.json``.

1. Throughput: the client side of round 2 (:func:`fedstats.analyses.chi2.encode_projection`: the scaled
   table ``u_i``, ``P u_i`` with the cached projection, randomized fixed-point rounding, reduction mod
   ``2**bits``) on a block of clients, against the bare ``X @ P.T`` numpy product on the same data in the same
   run (the peer: the least any implementation must do). Ratio = our time / numpy's time.
2. Projection generation: our counter-based column generator (columns keyed by (seed, j), CMS transform)
   against numpy's ``Generator.standard_normal((l, m))`` (a sequential, non-random-access stream), same run.
3. Figure 2 of Pang et al. 2023: one client's encoding time for square tables ``m x m``, m up to 500, at
   ``l = 50``, with the projection generation reported separately (the paper reports < 30 ms at 500 x 500
   on a Snapdragon 865 phone, generation included or not is unstated).
"""

# ruff: noqa: E402
from __future__ import annotations

import os

# one client is one device: single-threaded BLAS (also avoids thread oversubscription on a shared machine,
# where a multi-threaded small matrix-vector product was measured 20x slower)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import best_of, peak_rss_mb, write_results
from fedstats.analyses.chi2 import encode_projection
from fedstats.engine import ClientBatch
from fedstats.sketches.stable import StableProjection, _dense_columns


def _params(m_x: int, m_y: int, n: int, ell: int, seed: int) -> dict[str, Any]:
    return {
        "column": "table",
        "shape": (m_x, m_y),
        "rows": list(range(m_x)),
        "cols": list(range(m_y)),
        "row_marginals": [10 * n * m_y] * m_x,
        "col_marginals": [10 * n * m_x] * m_y,
        "n_total": n,
        "seed": seed,
        "encoding_size": ell,
        "frac_bits": 24,
        "clip": 2.0**15,
        "bits": 64,
        "max_cell": 2**31,
    }


def _offset(proj: StableProjection, params: dict[str, Any]) -> list[float]:
    """The public ``P sqrt(vbar) / n`` the server broadcasts in round 2."""
    vx = np.asarray(params["row_marginals"], dtype=np.float64)
    vy = np.asarray(params["col_marginals"], dtype=np.float64)
    sq = np.sqrt(np.outer(vx, vy).ravel() / vx.sum())
    return list(proj.project(sq[None, :])[0] / params["n_total"])


def throughput(n: int, m_x: int, m_y: int, ell: int, repeat: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    tables = rng.poisson(10, size=(n, m_x, m_y)).astype(np.int64)
    params = _params(m_x, m_y, n, ell, seed=11)
    params["offset"] = _offset(StableProjection(11, ell, 2.0), params)
    batch = ClientBatch({"table": tables}, 0, n)
    gen = np.random.default_rng(1)
    encode_projection(batch, params, gen)  # warm the projection cache
    ours = best_of(lambda: encode_projection(batch, params, gen), repeat)
    p = StableProjection(11, ell, 2.0).matrix(m_x * m_y)
    x = tables.reshape(n, -1).astype(np.float64)
    peer = best_of(lambda: x @ p.T, repeat)
    return {
        "clients": n,
        "table": [m_x, m_y],
        "encoding_size": ell,
        "ours_seconds": ours,
        "numpy_matvec_seconds": peer,
        "ours_clients_per_second": n / ours,
        "numpy_clients_per_second": n / peer,
        "ratio_ours_over_numpy": ours / peer,
    }


def generation(m: int, ell: int, repeat: int) -> dict[str, Any]:
    def ours() -> None:
        StableProjection(5, ell, 2.0).columns(np.arange(m))

    def ours_alpha() -> None:
        StableProjection(5, ell, 1.05).columns(np.arange(m))

    def peer() -> None:
        np.random.default_rng(5).standard_normal((ell, m))

    t_ours, t_alpha, t_peer = (
        best_of(ours, repeat),
        best_of(ours_alpha, repeat),
        best_of(peer, repeat),
    )
    return {
        "entries": m * ell,
        "ours_alpha2_seconds": t_ours,
        "ours_alpha1.05_seconds": t_alpha,
        "numpy_standard_normal_seconds": t_peer,
        "ratio_ours_over_numpy": t_ours / t_peer,
        "ours_entries_per_second": m * ell / t_ours,
    }


def figure2(sizes: list[int], ell: int, runs: int) -> list[dict[str, Any]]:
    out = []
    for m in sizes:
        rng = np.random.default_rng(m)
        table = rng.poisson(5, size=(1, m, m)).astype(np.int64)
        params = _params(m, m, 100, ell, seed=1000 + m)
        batch = ClientBatch({"table": table}, 0, 100)
        gen_t, enc_t = [], []
        for r in range(runs):
            params["seed"] = 1000 + m + r  # a fresh projection each run: generation is not cached
            _dense_columns.cache_clear()
            t0 = time.perf_counter()
            proj = StableProjection(params["seed"], ell, 2.0)
            proj.matrix(m * m)
            t1 = time.perf_counter()
            params["offset"] = _offset(proj, params)  # broadcast by the server (not client time)
            t1b = time.perf_counter()
            encode_projection(batch, params, rng)
            t2 = time.perf_counter()
            gen_t.append(t1 - t0)
            enc_t.append(t2 - t1b)
        out.append(
            {
                "m_x": m,
                "m_y": m,
                "encoding_size": ell,
                "runs": runs,
                "generation_ms_mean": 1e3 * statistics.fmean(gen_t),
                "generation_ms_sd": 1e3 * (statistics.stdev(gen_t) if runs > 1 else 0.0),
                "encoding_ms_mean": 1e3 * statistics.fmean(enc_t),
                "encoding_ms_sd": 1e3 * (statistics.stdev(enc_t) if runs > 1 else 0.0),
            }
        )
        print(
            f"  {m}x{m}: generation {out[-1]['generation_ms_mean']:.2f} ms, "
            f"encoding {out[-1]['encoding_ms_mean']:.3f} ms"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    args = ap.parse_args()
    q = args.quick
    load_before = os.getloadavg()
    print("throughput (client encoding vs numpy X @ P.T) ...")
    thr = [
        throughput(2000 if q else 20000, 20, 20, 50, 7),
        throughput(200 if q else 2000, 100, 100, 50, 7),
    ]
    for t in thr:
        print(
            f"  {t['table']} l={t['encoding_size']}: {t['ours_clients_per_second']:.0f} clients/s, "
            f"numpy {t['numpy_clients_per_second']:.0f}/s, ratio {t['ratio_ours_over_numpy']:.2f}"
        )
    print("projection generation vs numpy standard_normal ...")
    gen = generation(20_000 if q else 250_000, 50, 3)
    print(
        f"  ratio {gen['ratio_ours_over_numpy']:.2f}, {gen['ours_entries_per_second']:.3g} entries/s"
    )
    print("Figure 2 (one client, l = 50) ...")
    sizes = [10, 50, 100, 200] if q else [10, 50, 100, 200, 300, 400, 500]
    fig2 = figure2(sizes, 50, 5 if q else 30)
    path = write_results(
        "chi2",
        {
            "quick": q,
            "throughput": thr,
            "projection_generation": gen,
            "figure2": fig2,
            "paper_figure2": "under 30 ms at 500 x 500 on a Snapdragon 865 (Pang et al. 2023, Fig. 2)",
            "peak_rss_mb": peak_rss_mb(),
            "load_average_before_after": [load_before, os.getloadavg()],
            "cpu_count": os.cpu_count(),
            "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
