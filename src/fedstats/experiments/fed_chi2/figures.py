"""Figures 1, 2 and 5 of Pang et al. (ICML 2023): one module-level function per checkpointed cell."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from fedstats.analyses.chi2 import fed_chi2, simulate_fed_chi2
from fedstats.analyses.entropy import (
    DEFAULT_FD_STEP,
    entropy_from_moments,
    shannon_entropy,
    simulate_fed_entropy,
)
from fedstats.experiments.fed_chi2.settings import DECODERS, Settings
from fedstats.experiments.synthetic_tables import (
    synthetic_client_tables,
    synthetic_global_histogram,
)
from fedstats.randomness import RandomSource
from fedstats.sketches.stable import StableProjection

__all__ = ["fig1_cell", "fig2_cell", "fig5_cell", "fig5_validate"]


def fig1_cell(
    dataset: str,
    table: np.ndarray | None,
    dropout: float,
    ell: int,
    st: Settings,
    rs: RandomSource,
) -> dict[str, Any]:
    """``st.runs`` runs of one (dataset, dropout, l) setting of Figure 1, both decoders.

    Synthetic tables (``table`` None) are redrawn each run and go through the engine (:func:`fed_chi2`,
    dropout by the route); a real table goes through the fast path (:func:`simulate_fed_chi2`, authors'
    split, encoding drawn in distribution).

    Returns
    -------
    dict
        Per decoder: mean and sd of the multiplicative error, power with both dof conventions, interval
        coverage, decision stability; and the centralized test's power.
    """
    import scipy.stats  # lazily (import cost)

    n = st.n_clients
    rows: dict[str, dict[str, list[float]]] = {
        d: {"err": [], "rej": [], "rej_authors": [], "covered": [], "stable": []} for d in DECODERS
    }
    central: list[float] = []
    central_authors: list[float] = []
    for r in range(st.runs):
        key = ("fig1", dataset, "run", r)
        if table is None:
            kind = dataset.split(": ")[1]
            tables = synthetic_client_tables(kind, n, rng=rs.child(*key, "tables"))
            m_x, m_y = tables.shape[1:]
        else:
            m_x, m_y = table.shape
        cell_rs = rs.child(*key, f"drop={dropout}", f"l={ell}")
        for dec in DECODERS:
            if table is None:
                res = fed_chi2(
                    tables,
                    encoding_size=ell,
                    decoder=dec,
                    dropout=dropout,
                    randomness=cell_rs,
                    projection_seed=cell_rs.public_seed("projection") % (1 << 256),
                    level=st.level,
                    drop_empty=True,
                )
            else:
                res = simulate_fed_chi2(
                    table,
                    n,
                    encoding_size=ell,
                    decoder=dec,
                    dropout=dropout,
                    randomness=cell_rs,
                    split="authors",
                    projection="distribution",
                    level=st.level,
                    drop_empty=True,
                )
            exact = float(res.exact_statistic if res.exact_statistic is not None else math.nan)
            authors_dof = m_x * m_y - 1
            row = rows[dec]
            row["err"].append(float(res.multiplicative_error or 0.0))
            row["rej"].append(float(res.p_value_paper < st.level))
            row["rej_authors"].append(
                float(scipy.stats.chi2.sf(res.statistic, authors_dof) < st.level)
            )
            ci = res.ci if res.ci is not None else (math.nan, math.nan)
            row["covered"].append(float(ci[0] <= exact <= ci[1]))
            # the paper's decision (p_value_paper < level) and its stability over the interval
            row["stable"].append(float(ci[0] > res.critical_value or ci[1] <= res.critical_value))
            if dec == DECODERS[0]:
                central.append(float(scipy.stats.chi2.sf(exact, res.dof) < st.level))
                central_authors.append(float(scipy.stats.chi2.sf(exact, authors_dof) < st.level))
    out: dict[str, Any] = {
        "central_power": float(np.mean(central)),
        "central_power_authors_dof": float(np.mean(central_authors)),
        "runs": st.runs,
    }
    for dec in DECODERS:
        row = rows[dec]
        out[dec] = {
            "mult_error_mean": float(np.mean(row["err"])),
            "mult_error_sd": float(np.std(row["err"], ddof=1)) if st.runs > 1 else 0.0,
            "power": float(np.mean(row["rej"])),
            "power_authors_dof": float(np.mean(row["rej_authors"])),
            "ci_coverage": float(np.mean(row["covered"])),
            "decision_stable": float(np.mean(row["stable"])),
        }
    return out


def fig2_cell(m: int, st: Settings, rs: RandomSource) -> dict[str, Any]:
    """Client-side timings for an ``m x m`` table at l = 50 (this machine, one core, one BLAS thread).

    Returns
    -------
    dict
        Projection generation (s), dense encoding (ms, median and sd), sparse on-demand encoding (ms).
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional, ships with scikit-learn
        return _fig2_timings(m, st, rs)
    with threadpool_limits(limits=1):
        return _fig2_timings(m, st, rs)


def _fig2_timings(m: int, st: Settings, rs: RandomSource) -> dict[str, Any]:
    ell = 50
    gen = rs.generator("fig2", m)
    n = st.n_clients
    table = np.asarray(gen.integers(0, 5, size=(m, m)), dtype=np.int64) + 1
    vbar = np.full(m * m, float(n) * 2.0)  # expected counts (public after round 1)
    gen_times = []
    for rep in range(st.fig2_gen_reps):
        proj = StableProjection(rs.public_seed("fig2", m, "gen", rep), ell, 2.0)
        t0 = time.perf_counter()
        pm = proj.columns(np.arange(m * m))
        gen_times.append(time.perf_counter() - t0)
    mat = np.ascontiguousarray(pm.T)  # (l, m*m), generated once per seed and kept
    enc_times = []
    for _ in range(st.fig2_reps):
        t0 = time.perf_counter()
        u = (table.ravel() - vbar / n) / np.sqrt(vbar)
        e = mat @ u
        enc_times.append(time.perf_counter() - t0)
    assert e.shape == (ell,)
    # a sparse client: 1% of the cells non-zero, projection columns generated on demand
    nnz = max(1, (m * m) // 100)
    idx = np.asarray(gen.choice(m * m, size=nnz, replace=False), dtype=np.int64)
    vals = np.ones(nnz)
    sparse_times = []
    for rep in range(st.fig2_reps):
        proj = StableProjection(rs.public_seed("fig2", m, "sparse", rep), ell, 2.0)
        t0 = time.perf_counter()
        proj.project((idx, vals), m=m * m)
        sparse_times.append(time.perf_counter() - t0)
    return {
        "m": m,
        "cells": m * m,
        "projection_generation_s_mean": float(np.median(gen_times)),
        "encoding_ms_mean": 1e3 * float(np.median(enc_times)),
        "encoding_ms_sd": 1e3 * float(np.std(enc_times)),
        "sparse_client_nnz": nnz,
        "sparse_on_demand_ms_mean": 1e3 * float(np.median(sparse_times)),
    }


def fig5_cell(kind: str, st: Settings, rs: RandomSource) -> dict[str, Any]:
    """FED-H additive error against l on one synthetic histogram of m_x cells (Figure 5).

    Two independent projections (alpha = 1 +/- Delta, Delta = 0.05, the authors' value) drawn in
    distribution (exact given the histogram), as the paper's protocol with two separate seeds would give.
    """
    hist = synthetic_global_histogram(kind, st.n_clients, st.fedh_m, rng=rs.child("fig5", kind))
    truth = shannon_entropy(hist)
    out: dict[str, Any] = {"kind": kind, "m": st.fedh_m, "truth": truth, "by_l": {}}
    bias = None
    for ell in st.fedh_l_grid:
        errs = []
        for r in range(st.fedh_runs):
            res = simulate_fed_entropy(
                hist,
                encoding_size=ell,
                coupling="independent",
                projection="distribution",
                randomness=rs.child("fig5", kind, ell, r),
            )
            # the paper's figure measures the decoder: the value before the release's clip to [0, log m]
            errs.append(abs(float(res.details["unclipped_estimate"]) - truth))
            bias = res.bias_bound
        out["by_l"][str(ell)] = {
            "additive_error_mean": float(np.mean(errs)),
            "additive_error_sd": float(np.std(errs, ddof=1)) if len(errs) > 1 else 0.0,
            "relative_error_mean": float(np.mean(errs)) / truth,
        }
    # the finite-difference value -(F_(1+D) - F_(1-D)) / (2 D) with exact moments: the error floor
    p = hist[hist > 0] / hist.sum()
    d = DEFAULT_FD_STEP
    fd = entropy_from_moments(float(np.sum(p ** (1 + d))), float(np.sum(p ** (1 - d))), d)
    out["finite_difference_error"] = abs(fd - truth)
    out["bias_bound"] = bias
    return out


def fig5_validate(st: Settings, rs: RandomSource) -> dict[str, Any]:
    """Real (streamed, bounded-memory) projections, coupled from one seed, against independent ones.

    Returns
    -------
    dict
        ``truth``, ``l`` and one row per (``fd_step``, coupling): mean absolute error, seconds per run.
    """
    hist = synthetic_global_histogram("linear", st.n_clients, st.fedh_m, rng=rs.child("fig5v"))
    truth = shannon_entropy(hist)
    ell = st.fedh_validate_l
    out: dict[str, Any] = {"truth": truth, "l": ell, "rows": []}
    for fd_step in (0.05, 0.01):
        for coupling, mode in (("coupled", "materialize"), ("independent", "distribution")):
            errs, secs = [], []
            for r in range(2):
                t0 = time.perf_counter()
                res = simulate_fed_entropy(
                    hist,
                    encoding_size=ell,
                    fd_step=fd_step,
                    coupling=coupling,
                    projection=mode,
                    randomness=rs.child("fig5v", coupling, f"d={fd_step}", r),
                )
                secs.append(time.perf_counter() - t0)
                errs.append(abs(float(res.details["unclipped_estimate"]) - truth))  # the decoder's
            out["rows"].append(
                {
                    "fd_step": fd_step,
                    "coupling": coupling,
                    "projection": mode,
                    "abs_error_mean": float(np.mean(errs)),
                    "seconds_per_run": float(np.mean(secs)),
                }
            )
    return out
