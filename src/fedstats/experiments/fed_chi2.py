"""Reproduction of the experiments of Pang et al. (ICML 2023), FED-chi^2 and FED-H (paper 004).

``fedstats reproduce fed-chi2`` runs, as checkpointed cells (:mod:`fedstats.experiments.checkpoint`):

* **Figure 1** (and App. J/L): multiplicative error ``|s_hat - s| / s`` and power of FED-chi^2 against the
  encoding size ``l`` on the four synthetic generators (20 x 20 tables, 100 clients, each run a fresh draw)
  and the real tables available here (Adult occupation x native-country, four Mushroom pairs, Lymphography,
  six GTSRB attributes x class), with 0/5/10/20% round-2 dropout, for the paper's geometric-mean decoder
  and the mean-of-squares decoder. Power with ``(m_x - 1)(m_y - 1)`` degrees of freedom and with the
  authors' ``m_x m_y - 1``. Synthetic tables run the real protocol through the engine
  (:func:`fedstats.analyses.chi2.fed_chi2`); real tables the fast path
  (:func:`fedstats.analyses.chi2.simulate_fed_chi2`, authors' table split, projection in distribution).
* **Figure 2**: client encoding time for ``m x m`` tables up to 500 x 500 at ``l = 50``; projection
  generation timed separately, and the on-demand encoding of a sparse client.
* **Figure 5**: FED-H additive error against ``l`` for histograms of ``m_x = 100,000`` cells.
* **Section 4.2 / App. N**: chi-square feature selection on Reuters-21578 (100 clients, ``l = 50``, top
  40,000 terms): overlap with the exact selection and a logistic regression on the selected terms; and
  online FDR control with SAFFRON (App. C parameters): FDR and TDR against ``l`` and the counts of Table 3,
  plus a sketch-calibrated p-value that restores FDR control (ours).

It writes ``<out>/fed-chi2.json``, PNG plots and ``<out>/fed-chi2.md`` (the results page set against the
paper's numbers). ``quick=True`` is a small version (about a minute) used by the end-to-end CLI test.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.stats

from fedstats.analyses.chi2 import (
    chi_square_statistic,
    fed_chi2,
    noise_averaged_p_value,
    simulate_fed_chi2,
)
from fedstats.analyses.fdr import discovery_counts, saffron
from fedstats.analyses.feature_selection import (
    batch_decode,
    chi2_scores,
    chi2_scores_from_tables,
    federated_chi2_scores,
    selection_overlap,
    top_k,
)
from fedstats.engine.progress import NullProgress, Progress
from fedstats.errors import DatasetNotFoundError, FedstatsError
from fedstats.experiments.checkpoint import CheckpointStore, write_json_atomic, write_text_atomic
from fedstats.experiments.synthetic_tables import (
    GENERATORS,
    synthetic_client_tables,
    synthetic_global_histogram,
)
from fedstats.randomness import RandomSource
from fedstats.sketches.stable import StableProjection

__all__ = ["NAME", "PAPER", "Settings", "real_tables", "run_fed_chi2", "settings_for"]

NAME = "fed-chi2"
DECODERS: tuple[str, ...] = ("geometric", "mean-of-squares")

PAPER: dict[str, Any] = {
    "fig1_mult_error_l50": 0.2,
    "fig2_encoding_ms_500x500": 30.0,
    "fig2_device": "Snapdragon 865 (Android 10, Py-Droid)",
    "fig5_additive_error_l10000": 0.5,
    "fig5_relative_error_l10000": 0.045,
    "fs_overlap": 0.9503,
    "fs_selected": 38012,
    "fs_k": 40000,
    "fs_vocabulary": 167135,
    "fs_train_docs": 17262,
    "fs_test_docs": 4316,
    "table3": {
        "10": (5900, 4100, 5144, 1392),
        "25": (5900, 4100, 5328, 1356),
        "50": (5900, 4100, 5325, 1143),
        "100": (5900, 4100, 5398, 943),
        "150": (5900, 4100, 5393, 765),
        "200": (5900, 4100, 5377, 687),
        "250": (5900, 4100, 5328, 615),
        "300": (5900, 4100, 5361, 556),
        "central": (5900, 4100, 5294, 408),
    },
}


@dataclass(frozen=True)
class Settings:
    """Sizes of every part of the reproduction (see :func:`settings_for`)."""

    quick: bool
    n_clients: int
    runs: int
    l_grid: tuple[int, ...]
    dropouts: tuple[float, ...]
    level: float
    fig2_sizes: tuple[int, ...]
    fig2_reps: int
    fig2_gen_reps: int
    fedh_m: int
    fedh_l_grid: tuple[int, ...]
    fedh_runs: int
    fedh_validate_l: int
    fs_k: int
    fs_l: int
    fs_l_grid: tuple[int, ...]
    fs_dropouts: tuple[float, ...]
    fs_reps: int
    fs_max_documents: int | None
    fs_ngram_max: int
    fs_lr_grid: bool
    fdr_times: int
    fdr_hypotheses: int
    fdr_samples: int
    fdr_bins: int
    fdr_clients: int
    fdr_l_grid: tuple[int, ...]
    fdr_runs: int
    real_tables: str  # "all" or "quick"


def settings_for(quick: bool) -> Settings:
    """The full reproduction (about 15 minutes on 2 cores) or the quick one (under a minute)."""
    if quick:
        return Settings(
            quick=True,
            n_clients=100,
            runs=10,
            l_grid=(10, 50, 200),
            dropouts=(0.0, 0.1),
            level=0.05,
            fig2_sizes=(10, 50, 100),
            fig2_reps=5,
            fig2_gen_reps=1,
            fedh_m=10_000,
            fedh_l_grid=(100, 1000),
            fedh_runs=5,
            fedh_validate_l=50,
            fs_k=2000,
            fs_l=50,
            fs_l_grid=(10, 50),
            fs_dropouts=(0.0, 0.2),
            fs_reps=1,
            fs_max_documents=1500,
            fs_ngram_max=1,
            fs_lr_grid=False,
            fdr_times=10,
            fdr_hypotheses=50,
            fdr_samples=500,
            fdr_bins=5,
            fdr_clients=10,
            fdr_l_grid=(10, 50, 300),
            fdr_runs=1,
            real_tables="quick",
        )
    return Settings(
        quick=False,
        n_clients=100,
        runs=100,
        l_grid=(10, 25, 50, 100, 150, 200),
        dropouts=(0.0, 0.05, 0.1, 0.2),
        level=0.05,
        fig2_sizes=(10, 50, 100, 200, 300, 400, 500),
        fig2_reps=20,
        fig2_gen_reps=3,
        fedh_m=100_000,
        fedh_l_grid=(100, 500, 1000, 2000, 5000, 10000),
        fedh_runs=20,
        fedh_validate_l=200,
        fs_k=40_000,
        fs_l=50,
        fs_l_grid=(10, 25, 50, 100, 200),
        fs_dropouts=(0.0, 0.1, 0.2),
        fs_reps=5,
        fs_max_documents=None,
        fs_ngram_max=2,
        fs_lr_grid=True,
        fdr_times=100,
        fdr_hypotheses=100,
        fdr_samples=500,
        fdr_bins=5,
        fdr_clients=10,
        fdr_l_grid=(10, 25, 50, 100, 150, 200, 250, 300),
        fdr_runs=5,
        real_tables="all",
    )


# ------------------------------------------------------------------------------------------------
# real tables (Appendix I)
# ------------------------------------------------------------------------------------------------

MUSHROOM_PAIRS: tuple[tuple[str, str], ...] = (
    ("cap-color", "odor"),
    ("gill-color", "stalk-color-above-ring"),
    ("stalk-color-below-ring", "ring-type"),
    ("spore-print-color", "habitat"),
)
GTSRB_ATTRIBUTES: tuple[str, ...] = ("Width", "Height", "Roi.X1", "Roi.Y1", "Roi.X2", "Roi.Y2")


def real_tables(
    data_dir: str | Path | None, *, which: str = "all"
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The real contingency tables of App. I that are available, and notes on the missing ones.

    Parameters
    ----------
    data_dir : str or path, optional
        Data root (default: the datasets registry's search path).
    which : {"all", "quick"}
        ``"quick"``: Adult (embedded, always available), one Mushroom pair and Lymphography.

    Returns
    -------
    tables : dict
        ``name -> (m_x, m_y)`` int64 table.
    notes : list of str
        What was skipped and why.
    """
    from fedstats.datasets import (
        contingency_table,
        load_adult,
        load_gtsrb,
        load_lymphography,
        load_mushroom,
    )

    out: dict[str, np.ndarray] = {}
    notes: list[str] = []
    try:
        adult = load_adult("train", data_dir)
    except DatasetNotFoundError:
        adult = load_adult("train")  # the package's embedded copy (same bytes, same checksum)
        notes.append("Adult: not in the data folder; the embedded copy was used.")
    out["adult: occupation x native-country"] = contingency_table(
        adult, "occupation", "native_country"
    ).counts
    pairs = MUSHROOM_PAIRS[:1] if which == "quick" else MUSHROOM_PAIRS
    try:
        mush = load_mushroom(data_dir)
        for a, b in pairs:
            out[f"mushroom: {a} x {b}"] = contingency_table(mush, a, b).counts
    except (DatasetNotFoundError, FedstatsError) as exc:
        notes.append(f"Mushroom skipped: {exc}")
    try:
        lym = load_lymphography(data_dir)
        out["lymphography: changes-in-structure x no-of-nodes"] = contingency_table(
            lym, "changes_in_stru", "no_of_nodes_in"
        ).counts
    except (DatasetNotFoundError, FedstatsError) as exc:
        notes.append(f"Lymphography skipped: {exc}")
    if which == "all":
        try:
            import pandas as pd

            g = pd.concat([load_gtsrb("train", data_dir), load_gtsrb("test", data_dir)])
            for attr in GTSRB_ATTRIBUTES:
                out[f"gtsrb: {attr} x class"] = contingency_table(g, attr, "ClassId").counts
        except (DatasetNotFoundError, FedstatsError) as exc:
            notes.append(f"GTSRB skipped: {exc}")
    notes.append(
        "Credit Risk Classification (App. I tables 2-5) is not available offline and is not reproduced."
    )
    return out, notes


# ------------------------------------------------------------------------------------------------
# Figure 1
# ------------------------------------------------------------------------------------------------


def _fig1_cell(
    dataset: str,
    table: np.ndarray | None,
    dropout: float,
    ell: int,
    st: Settings,
    rs: RandomSource,
) -> dict[str, Any]:
    """100 runs of one (dataset, dropout, l) setting, both decoders on the same encodings."""
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
            row["rej"].append(float(res.p_value < st.level))
            row["rej_authors"].append(
                float(scipy.stats.chi2.sf(res.statistic, authors_dof) < st.level)
            )
            ci = res.ci if res.ci is not None else (math.nan, math.nan)
            row["covered"].append(float(ci[0] <= exact <= ci[1]))
            row["stable"].append(float(res.decision_stable))
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


def _fig1_job(args: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    key, dataset, table, dropout, ell, st, rs = args
    return key, _fig1_cell(dataset, table, dropout, ell, st, rs)


# ------------------------------------------------------------------------------------------------
# Figure 2
# ------------------------------------------------------------------------------------------------


def _fig2_cell(m: int, st: Settings, rs: RandomSource) -> dict[str, Any]:
    """Client-side timings for an ``m x m`` table at l = 50 (this machine, one core, one BLAS thread)."""
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


# ------------------------------------------------------------------------------------------------
# Figure 5 (FED-H)
# ------------------------------------------------------------------------------------------------


def _entropy(hist: np.ndarray) -> float:
    p = hist[hist > 0].astype(np.float64)
    p /= p.sum()
    return float(-np.sum(p * np.log(p)))


def _fig5_cell(kind: str, st: Settings, rs: RandomSource) -> dict[str, Any]:
    """FED-H additive error against l on one synthetic histogram of m_x cells.

    Two independent projections (alpha = 1 +/- Delta, Delta = 0.05, the authors' value) drawn in
    distribution (exact given the histogram), as the paper's protocol with two separate seeds would give.
    """
    sim = importlib.import_module("fedstats.analyses.entropy").simulate_fed_entropy
    hist = synthetic_global_histogram(kind, st.n_clients, st.fedh_m, rng=rs.child("fig5", kind))
    truth = _entropy(hist)
    out: dict[str, Any] = {"kind": kind, "m": st.fedh_m, "truth": truth, "by_l": {}}
    bias = None
    for ell in st.fedh_l_grid:
        errs = []
        for r in range(st.fedh_runs):
            res = sim(
                hist,
                encoding_size=ell,
                coupling="independent",
                projection="distribution",
                randomness=rs.child("fig5", kind, ell, r),
            )
            errs.append(abs(float(res.estimate) - truth))
            bias = getattr(res, "bias_bound", None)
        out["by_l"][str(ell)] = {
            "additive_error_mean": float(np.mean(errs)),
            "additive_error_sd": float(np.std(errs, ddof=1)) if len(errs) > 1 else 0.0,
            "relative_error_mean": float(np.mean(errs)) / truth,
        }
    # the finite-difference value -(F_(1+D) - F_(1-D)) / (2 D) with exact moments: the error floor
    p = hist[hist > 0] / hist.sum()
    d = 0.05
    fd = -(float(np.sum(p ** (1 + d))) - float(np.sum(p ** (1 - d)))) / (2 * d)
    out["finite_difference_error"] = abs(fd - truth)
    out["bias_bound"] = bias
    return out


def _fig5_validate(st: Settings, rs: RandomSource) -> dict[str, Any]:
    """Real (streamed, bounded-memory) projections, coupled from one seed, against independent ones."""
    sim = importlib.import_module("fedstats.analyses.entropy").simulate_fed_entropy
    hist = synthetic_global_histogram("linear", st.n_clients, st.fedh_m, rng=rs.child("fig5v"))
    truth = _entropy(hist)
    ell = st.fedh_validate_l
    out: dict[str, Any] = {"truth": truth, "l": ell, "rows": []}
    for delta in (0.05, 0.01):
        for coupling, mode in (("coupled", "materialize"), ("independent", "distribution")):
            errs, secs = [], []
            for r in range(2):
                t0 = time.perf_counter()
                res = sim(
                    hist,
                    encoding_size=ell,
                    delta=delta,
                    coupling=coupling,
                    projection=mode,
                    randomness=rs.child("fig5v", coupling, f"d={delta}", r),
                )
                secs.append(time.perf_counter() - t0)
                errs.append(abs(float(res.estimate) - truth))
            out["rows"].append(
                {
                    "delta": delta,
                    "coupling": coupling,
                    "projection": mode,
                    "abs_error_mean": float(np.mean(errs)),
                    "seconds_per_run": float(np.mean(secs)),
                }
            )
    return out


# ------------------------------------------------------------------------------------------------
# Section 4.2: feature selection
# ------------------------------------------------------------------------------------------------

_CORPUS_CACHE: dict[Any, Any] = {}


def _corpus(st: Settings, rs: RandomSource, data_dir: str | Path | None) -> Any:
    from fedstats.experiments.reuters import load_reuters_corpus

    key = (st.fs_max_documents, st.fs_ngram_max, str(data_dir), rs.seed)
    if key not in _CORPUS_CACHE:
        _CORPUS_CACHE.clear()
        _CORPUS_CACHE[key] = load_reuters_corpus(
            rng=rs.child("fs", "corpus"),
            max_documents=st.fs_max_documents,
            ngram_max=st.fs_ngram_max,
            min_df=2,
            data_dir=data_dir,
        )
    return _CORPUS_CACHE[key]


def _owners(n_docs: int, n_clients: int, rs: RandomSource) -> np.ndarray:
    """Documents spread randomly over clients, each with the same number (up to one)."""
    perm = np.asarray(rs.generator("fs", "owners").permutation(n_docs))
    owner = np.empty(n_docs, dtype=np.int64)
    owner[perm] = np.arange(n_docs) % n_clients
    return owner


def _lr_accuracy(corpus: Any, columns: np.ndarray | None) -> float:
    """Test accuracy of a multinomial logistic regression trained by SGD on the chosen terms.

    Like the paper's models (App. K: learning rate 0.1, seed 0): log-loss SGD with a constant step 0.1,
    30 epochs, a small L2 penalty (1e-5), ``random_state=0``, on binary presence features.
    """
    from sklearn.linear_model import SGDClassifier

    xtr = corpus.x_train if columns is None else corpus.x_train[:, columns]
    xte = corpus.x_test if columns is None else corpus.x_test[:, columns]
    model = SGDClassifier(
        loss="log_loss",
        learning_rate="constant",
        eta0=0.1,
        alpha=1e-5,
        max_iter=30,
        tol=None,
        random_state=0,
    )
    model.fit(xtr, corpus.y_train)
    return float(model.score(xte, corpus.y_test))


def _fs_exact_cell(st: Settings, rs: RandomSource, data_dir: Any) -> dict[str, Any]:
    c = _corpus(st, rs, data_dir)
    k = min(st.fs_k, c.n_terms)
    t0 = time.perf_counter()
    scores = chi2_scores(c.x_train, c.y_train, len(c.categories))
    sel = top_k(scores, k)
    return {
        "n_train": int(c.x_train.shape[0]),
        "n_test": int(c.x_test.shape[0]),
        "n_terms": c.n_terms,
        "n_classes": len(c.categories),
        "categories": list(c.categories),
        "k": k,
        "exact_seconds": time.perf_counter() - t0,
        "accuracy_exact_selection": _lr_accuracy(c, sel),
        "accuracy_no_selection": _lr_accuracy(c, None),
    }


def _fs_fed_cell(
    ell: int,
    dropout: float,
    decoder: str,
    with_lr: bool,
    st: Settings,
    rs: RandomSource,
    data_dir: Any,
) -> dict[str, Any]:
    c = _corpus(st, rs, data_dir)
    k = min(st.fs_k, c.n_terms)
    owner = _owners(c.x_train.shape[0], st.n_clients, rs)
    overlaps = []
    first_sel = None
    bytes_pc = bytes_full = 0
    for rep in range(st.fs_reps):
        f = federated_chi2_scores(
            c.x_train,
            c.y_train,
            owner,
            n_clients=st.n_clients,
            n_classes=len(c.categories),
            encoding_size=ell,
            decoder=decoder,
            dropout=dropout,
            randomness=rs.child("fs", ell, f"drop={dropout}", decoder, rep),
        )
        exact_sel = top_k(f.exact, k)
        sel = top_k(f.statistic, k)
        overlaps.append(selection_overlap(exact_sel, sel))
        if first_sel is None:
            first_sel = sel
        bytes_pc, bytes_full = f.bytes_per_client, f.bytes_whole_tables
    out: dict[str, Any] = {
        "l": ell,
        "dropout": dropout,
        "decoder": decoder,
        "overlap_mean": float(np.mean(overlaps)),
        "overlap_sd": float(np.std(overlaps, ddof=1)) if len(overlaps) > 1 else 0.0,
        "common_terms_rep0": round(overlaps[0] * k),
        "reps": st.fs_reps,
        "bytes_per_client": bytes_pc,
        "bytes_whole_tables": bytes_full,
    }
    if with_lr and first_sel is not None:
        out["accuracy"] = _lr_accuracy(c, first_sel)
    return out


# ------------------------------------------------------------------------------------------------
# Section 4.2: online FDR control
# ------------------------------------------------------------------------------------------------


def _fdr_data(st: Settings, rs: RandomSource, run: int) -> tuple[np.ndarray, np.ndarray]:
    """The hypothesis stream: ``(T*H, bins, bins)`` tables and the null indicator.

    Each hypothesis draws ``fdr_samples`` points of a bivariate Gaussian; with probability 0.5 it is
    correlated (covariance ``A A^T`` with ``A`` uniform on [-1, 1]^(2x2)), otherwise independent (diagonal
    covariance, entries uniform on (0, 1)). Each variable is cut into ``bins`` equal-probability bins of its
    marginal normal, giving a ``bins x bins`` table (Pang et al. 2023, Sec. 4.2, which leaves the details
    open; ours).
    """
    gen = rs.generator("fdr", "data", run)
    n_h = st.fdr_times * st.fdr_hypotheses
    null = np.asarray(gen.random(n_h)) >= 0.5
    a = np.asarray(gen.uniform(-1.0, 1.0, size=(n_h, 2, 2)))
    cov = a @ np.swapaxes(a, 1, 2)
    diag = np.asarray(gen.uniform(0.0, 1.0, size=(n_h, 2)))
    cov[null] = 0.0
    cov[null, 0, 0] = diag[null, 0]
    cov[null, 1, 1] = diag[null, 1]
    cov += 1e-9 * np.eye(2)
    chol = np.linalg.cholesky(cov)
    z = np.asarray(gen.standard_normal((n_h, st.fdr_samples, 2)))
    xy = z @ np.swapaxes(chol, 1, 2)
    sd = np.sqrt(np.stack([cov[:, 0, 0], cov[:, 1, 1]], axis=1))  # (n_h, 2)
    b = st.fdr_bins
    edges = scipy.stats.norm.ppf(np.arange(1, b) / b)
    bx = np.searchsorted(edges, xy[:, :, 0] / sd[:, None, 0])
    by = np.searchsorted(edges, xy[:, :, 1] / sd[:, None, 1])
    flat = (np.arange(n_h)[:, None] * b + bx) * b + by
    tables = np.bincount(flat.ravel(), minlength=n_h * b * b).reshape(n_h, b, b)
    return tables, null


def _unit_scale_quantiles(
    decoder: str, ell: int, rs: RandomSource, points: int = 1000
) -> np.ndarray:
    """Quantiles of the decoded statistic when the true statistic is 1 (its sketch noise)."""
    z = np.asarray(rs.generator("fdr", "calibration", decoder, ell).standard_normal((20_000, ell)))
    g = np.sort(batch_decode(math.sqrt(2.0) * z, decoder))
    return np.asarray(np.quantile(g, (np.arange(points) + 0.5) / points))


def _fdr_cell(run: int, st: Settings, rs: RandomSource) -> dict[str, Any]:
    tables, null = _fdr_data(st, rs, run)
    s = chi2_scores_from_tables(tables)
    b = st.fdr_bins
    dof = (b - 1) * (b - 1)

    def summarize(p: np.ndarray) -> dict[str, Any]:
        res = saffron(p)
        counts = discovery_counts(res.rejected, null)
        rej = counts["correct_reject"] + counts["false_reject"]
        rates: dict[str, Any] = dict(counts)
        rates["fdr"] = counts["false_reject"] / max(1, rej)
        rates["tdr"] = counts["correct_reject"] / max(1, counts["should_reject"])
        return rates

    out: dict[str, Any] = {"central": summarize(scipy.stats.chi2.sf(s, dof))}
    # No dropout here, so the aggregated encoding is sqrt(s) * N(0, 2)^l exactly (s the exact statistic):
    # drawn in distribution and decoded with the sketches' decoders (as simulate_fed_chi2 does).
    for dec in DECODERS:
        for ell in st.fdr_l_grid:
            z = np.asarray(rs.generator("fdr", "enc", run, dec, ell).standard_normal((s.size, ell)))
            s_hat = batch_decode(np.sqrt(2.0 * s)[:, None] * z, dec)
            out[f"{dec}|{ell}"] = summarize(scipy.stats.chi2.sf(s_hat, dof))
            q = _unit_scale_quantiles(dec, ell, rs)
            out[f"{dec}|{ell}|calibrated"] = summarize(noise_averaged_p_value(s_hat, dof, q))
    return out


# ------------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------------


def _run_parallel(
    jobs: list[tuple[Any, ...]],
    fn: Callable[[tuple[Any, ...]], tuple[str, dict[str, Any]]],
    store: CheckpointStore,
    workers: int,
    progress: Progress,
    task: str,
) -> None:
    todo = [j for j in jobs if j[0] not in store]
    progress.start(task, len(jobs))
    progress.advance(task, len(jobs) - len(todo))
    if workers <= 1 or len(todo) <= 1:
        for j in todo:
            key, val = fn(j)
            store.put(key, val)
            progress.advance(task)
    else:
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
            for key, val in pool.map(fn, todo, chunksize=1):
                store.put(key, val)
                progress.advance(task)
    progress.finish(task)


def _cell(
    store: CheckpointStore, key: str, fn: Callable[[], Any], progress: Progress, task: str
) -> Any:
    if key not in store:
        store.put(key, fn())
    progress.advance(task)
    return store.get(key)


def run_fed_chi2(
    out: Path,
    *,
    quick: bool = False,
    data_dir: str | Path | None = None,
    randomness: RandomSource | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the reproduction, write ``fed-chi2.json``, the PNG plots and ``fed-chi2.md`` under ``out``.

    Parameters
    ----------
    out : pathlib.Path
        Output folder (created); completed cells are kept in ``fed-chi2[-quick].cells.jsonl`` there, so
        an interrupted run resumes.
    quick : bool
        The small version (under about a minute).
    data_dir : str or path, optional
        Root of the real datasets (default ``$FEDSTATS_DATA`` or ``../shared/data``); without it only the
        synthetic tables and the embedded Adult data are used, and the page says so.
    randomness : RandomSource, optional
        Default ``RandomSource(seed=2023)`` (a reproduction is reproducible).
    workers : int, optional
        Processes for the Figure 1 grid (default ``min(2, cpu_count)``).
    progress : Progress, optional

    Returns
    -------
    dict
        The JSON document written.
    """
    t_start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    st = settings_for(quick)
    rs = randomness if randomness is not None else RandomSource(seed=2023)
    prog: Progress = progress or NullProgress()
    workers = workers if workers is not None else max(1, min(2, os.cpu_count() or 1))
    store = CheckpointStore(out, NAME + ("-quick" if quick else ""))
    cells_before = len(store)
    # compute time is summed over resumed invocations (the previous page's timings are carried over)
    prev_doc: dict[str, Any] = {}
    if len(store) and (out / f"{NAME}.json").is_file():
        try:
            prev_doc = json.loads((out / f"{NAME}.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            prev_doc = {}
        if prev_doc.get("quick") != quick:
            prev_doc = {}
    prev_found = bool(prev_doc.get("timings"))
    prev_timings: dict[str, float] = {
        k: float(v) for k, v in prev_doc.get("timings", {}).items() if isinstance(v, (int, float))
    }
    timings: dict[str, float] = {}
    notes: list[str] = []

    # ---- Figure 1 --------------------------------------------------------------------------------
    t0 = time.perf_counter()
    tables, table_notes = real_tables(data_dir, which=st.real_tables)
    notes.extend(table_notes)
    datasets: dict[str, np.ndarray | None] = {f"synthetic: {k}": None for k in GENERATORS}
    datasets.update(tables)
    jobs = []
    for name, table in datasets.items():
        for d in st.dropouts:
            for ell in st.l_grid:
                key = f"fig1|{name}|drop={d}|l={ell}"
                jobs.append((key, name, table, d, ell, st, rs))
    _run_parallel(jobs, _fig1_job, store, workers, prog, "Figure 1")
    fig1: dict[str, Any] = {}
    for name, table in datasets.items():
        shape = (20, 20) if table is None else tuple(int(v) for v in table.shape)
        exact = None
        if table is not None:
            exact = chi_square_statistic(table)[0]
        entry: dict[str, Any] = {"shape": shape, "exact_statistic": exact, "cells": {}}
        for d in st.dropouts:
            for ell in st.l_grid:
                entry["cells"][f"drop={d}|l={ell}"] = store.get(f"fig1|{name}|drop={d}|l={ell}")
        fig1[name] = entry
    timings["fig1_s"] = prev_timings.get("fig1_s", 0.0) + time.perf_counter() - t0

    # ---- Figure 2 --------------------------------------------------------------------------------
    t0 = time.perf_counter()
    prog.start("Figure 2", len(st.fig2_sizes))
    fig2 = [
        _cell(store, f"fig2|m={m}", functools.partial(_fig2_cell, m, st, rs), prog, "Figure 2")
        for m in st.fig2_sizes
    ]
    prog.finish("Figure 2")
    timings["fig2_s"] = prev_timings.get("fig2_s", 0.0) + time.perf_counter() - t0

    # ---- Figure 5 --------------------------------------------------------------------------------
    t0 = time.perf_counter()
    fig5: dict[str, Any] = {}
    try:
        prog.start("Figure 5", len(GENERATORS) + 1)
        for kind in GENERATORS:
            fig5[kind] = _cell(
                store, f"fig5|{kind}", functools.partial(_fig5_cell, kind, st, rs), prog, "Figure 5"
            )
        fig5["validation"] = _cell(
            store, "fig5|validation", lambda: _fig5_validate(st, rs), prog, "Figure 5"
        )
        prog.finish("Figure 5")
    except (ImportError, AttributeError) as exc:
        notes.append(f"Figure 5 (FED-H) skipped: fedstats.analyses.entropy unavailable ({exc})")
    timings["fig5_s"] = prev_timings.get("fig5_s", 0.0) + time.perf_counter() - t0

    # ---- Feature selection -----------------------------------------------------------------------
    t0 = time.perf_counter()
    fs: dict[str, Any] = {}
    try:
        fs_cells: list[tuple[str, Callable[[], Any]]] = [
            ("fs|exact", lambda: _fs_exact_cell(st, rs, data_dir))
        ]
        for d in st.fs_dropouts:
            for dec in DECODERS:
                with_lr = dec == "geometric" or d == 0.0
                fs_cells.append(
                    (
                        f"fs|l={st.fs_l}|drop={d}|{dec}",
                        functools.partial(_fs_fed_cell, st.fs_l, d, dec, with_lr, st, rs, data_dir),
                    )
                )
        for ell in st.fs_l_grid:
            for dec in DECODERS:
                if ell == st.fs_l:
                    continue
                fs_cells.append(
                    (
                        f"fs|l={ell}|drop=0.0|{dec}",
                        functools.partial(
                            _fs_fed_cell,
                            ell,
                            0.0,
                            dec,
                            st.fs_lr_grid and dec == "geometric",
                            st,
                            rs,
                            data_dir,
                        ),
                    )
                )
        prog.start("Feature selection", len(fs_cells))
        for key, fn in fs_cells:
            fs[key] = _cell(store, key, fn, prog, "Feature selection")
        prog.finish("Feature selection")
    except DatasetNotFoundError as exc:
        notes.append(f"Feature selection skipped: Reuters-21578 not found ({exc})")
        fs = {}
    _CORPUS_CACHE.clear()
    timings["feature_selection_s"] = (
        prev_timings.get("feature_selection_s", 0.0) + time.perf_counter() - t0
    )

    # ---- Online FDR ------------------------------------------------------------------------------
    t0 = time.perf_counter()
    prog.start("Online FDR", st.fdr_runs)
    fdr_runs = [
        _cell(store, f"fdr|run={r}", functools.partial(_fdr_cell, r, st, rs), prog, "Online FDR")
        for r in range(st.fdr_runs)
    ]
    prog.finish("Online FDR")
    fdr = _summarize_fdr(fdr_runs)
    timings["fdr_s"] = prev_timings.get("fdr_s", 0.0) + time.perf_counter() - t0
    timings["total_s"] = sum(v for k, v in timings.items() if k != "total_s")
    timings["this_invocation_s"] = time.perf_counter() - t_start

    if not _shared_data_present(data_dir):
        notes.insert(
            0,
            "../shared/data was not found: only the synthetic tables and the embedded Adult data were used.",
        )
    doc: dict[str, Any] = {
        "name": NAME,
        "paper": "Pang et al., Secure Federated Correlation Test and Entropy Estimation, ICML 2023",
        "quick": quick,
        "settings": asdict(st),
        "seed": rs.seed,
        "release_note": rs.release_note,
        "notes": notes,
        "paper_numbers": PAPER,
        "fig1": fig1,
        "fig2": fig2,
        "fig5": fig5,
        "feature_selection": fs,
        "fdr": fdr,
        "timings": timings,
        "cells_reused": cells_before,
        "prev_timings_found": prev_found,
        "cells_total": len(store),
    }
    doc["load_average"] = prev_doc.get("load_average") or (
        os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    )
    doc["plots"] = write_plots(out, doc)
    write_json_atomic(out / f"{NAME}.json", doc)
    write_text_atomic(out / f"{NAME}.md", render_markdown(doc))
    return doc


def _shared_data_present(data_dir: str | Path | None) -> bool:
    from fedstats.datasets import dataset_status

    try:
        return bool(dataset_status("mushroom", data_dir, verify=False).present)
    except FedstatsError:
        return False


def _summarize_fdr(runs: list[dict[str, Any]]) -> dict[str, Any]:
    if not runs:
        return {}
    keys = list(runs[0].keys())
    summary: dict[str, Any] = {"runs": len(runs), "run0": runs[0], "mean": {}}
    for k in keys:
        summary["mean"][k] = {
            "fdr": float(np.mean([r[k]["fdr"] for r in runs])),
            "fdr_sd": float(np.std([r[k]["fdr"] for r in runs])),
            "tdr": float(np.mean([r[k]["tdr"] for r in runs])),
        }
    return summary


# ------------------------------------------------------------------------------------------------
# plots and the results page
# ------------------------------------------------------------------------------------------------

_DROP_STYLES = ("-", "--", "-.", ":")
_DEC_COLORS = {"geometric": "tab:blue", "mean-of-squares": "tab:orange"}


def _fig1_series(
    entry: dict[str, Any], drop: float, dec: str, field: str, ls: list[int]
) -> list[float]:
    return [float(entry["cells"][f"drop={drop}|l={ell}"][dec][field]) for ell in ls]


def write_plots(out: Path, doc: dict[str, Any]) -> list[str]:
    """Draw the PNG figures of the reproduction (matplotlib, Agg) and return their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    st = doc["settings"]
    ls = list(st["l_grid"])
    drops = list(st["dropouts"])
    written: list[str] = []

    def save(fig: Any, name: str) -> None:
        import io

        from fedstats._io import atomic_write_bytes

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90)
        plt.close(fig)
        atomic_write_bytes(out / name, buf.getvalue())
        written.append(name)

    fig1 = doc["fig1"]
    names = list(fig1)
    ncol = 4
    nrow = max(1, math.ceil(len(names) / ncol))
    for field, fname, ylabel in (
        ("mult_error_mean", "fig1_error.png", "multiplicative error"),
        ("power", "fig1_power.png", "power (p < 0.05)"),
    ):
        fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3 * nrow), squeeze=False)
        for ax, name in zip(axes.ravel(), names, strict=False):
            entry = fig1[name]
            for i, d in enumerate(drops):
                for dec in DECODERS:
                    y = _fig1_series(entry, d, dec, field, ls)
                    if field == "mult_error_mean":
                        sd = _fig1_series(entry, d, dec, "mult_error_sd", ls)
                        ax.errorbar(
                            ls,
                            y,
                            yerr=sd,
                            color=_DEC_COLORS[dec],
                            ls=_DROP_STYLES[i % 4],
                            capsize=2,
                            lw=1,
                            label=f"{dec}, {int(100 * d)}% dropout",
                        )
                    else:
                        ax.plot(
                            ls,
                            y,
                            color=_DEC_COLORS[dec],
                            ls=_DROP_STYLES[i % 4],
                            lw=1,
                            label=f"{dec}, {int(100 * d)}% dropout",
                        )
            if field == "power":
                c0 = entry["cells"][f"drop={drops[0]}|l={ls[0]}"]
                ax.axhline(c0["central_power"], color="k", lw=1, ls="--", label="centralized")
                ya = _fig1_series(entry, drops[0], "geometric", "power_authors_dof", ls)
                ax.plot(ls, ya, color="tab:red", lw=1, ls=":", label="geometric, dof m_x m_y - 1")
                ax.set_ylim(-0.05, 1.05)
            ax.set_title(name, fontsize=8)
            ax.set_xlabel("encoding size l", fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.tick_params(labelsize=7)
        for ax in axes.ravel()[len(names) :]:
            ax.axis("off")
        handles, labels = axes.ravel()[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        save(fig, fname)

    fig2 = doc["fig2"]
    if fig2:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        ms = [r["m"] for r in fig2]
        ax.errorbar(
            ms,
            [r["encoding_ms_mean"] for r in fig2],
            yerr=[r["encoding_ms_sd"] for r in fig2],
            marker="o",
            label="encoding (P kept in memory)",
        )
        ax.plot(
            ms,
            [r["sparse_on_demand_ms_mean"] for r in fig2],
            marker="s",
            label="sparse client, 1% cells, columns on demand",
        )
        ax.plot(
            ms,
            [1e3 * r["projection_generation_s_mean"] for r in fig2],
            marker="^",
            label="generating the whole l x m projection",
        )
        ax.set_yscale("log")
        ax.set_xlabel("m (table m x m), l = 50")
        ax.set_ylabel("milliseconds")
        ax.legend(fontsize=7)
        fig.tight_layout()
        save(fig, "fig2_encoding.png")

    fig5 = doc["fig5"]
    if fig5:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for kind in GENERATORS:
            if kind not in fig5:
                continue
            by_l = fig5[kind]["by_l"]
            lx = [int(k) for k in by_l]
            ax.errorbar(
                lx,
                [by_l[str(v)]["additive_error_mean"] for v in lx],
                yerr=[by_l[str(v)]["additive_error_sd"] for v in lx],
                marker="o",
                capsize=2,
                label=kind,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("encoding size l")
        ax.set_ylabel("additive error |H_hat - H| (nats)")
        ax.set_title(f"FED-H, m_x = {st['fedh_m']:,}", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        save(fig, "fig5_fedh.png")

    fs = doc["feature_selection"]
    if fs:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for dec in DECODERS:
            pts = sorted(
                (v["l"], v["overlap_mean"])
                for k, v in fs.items()
                if k != "fs|exact" and v["decoder"] == dec and v["dropout"] == 0.0
            )
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker="o",
                label=dec,
                color=_DEC_COLORS[dec],
            )
        ax.axhline(PAPER["fs_overlap"], color="k", ls="--", lw=1, label="paper, l = 50")
        ax.set_xlabel("encoding size l")
        ax.set_ylabel("overlap with exact selection")
        ax.legend(fontsize=7)
        fig.tight_layout()
        save(fig, "fig8_overlap.png")

    fdr = doc["fdr"]
    if fdr:
        mean = fdr["mean"]
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        for metric, ax in zip(("fdr", "tdr"), axes, strict=True):
            for dec in DECODERS:
                for cal, ls_ in (("", "-"), ("|calibrated", "--")):
                    lx = list(st["fdr_l_grid"])
                    ax.plot(
                        lx,
                        [mean[f"{dec}|{v}{cal}"][metric] for v in lx],
                        marker="o",
                        ls=ls_,
                        color=_DEC_COLORS[dec],
                        label=f"{dec}{' calibrated p' if cal else ''}",
                    )
            ax.axhline(mean["central"][metric], color="k", lw=1, label="centralized")
            if metric == "fdr":
                ax.axhline(0.05, color="grey", lw=0.8, ls=":", label="target 0.05")
                pl = [int(k) for k in PAPER["table3"] if k != "central"]
                ax.plot(
                    pl,
                    [
                        PAPER["table3"][str(v)][3]
                        / (PAPER["table3"][str(v)][2] + PAPER["table3"][str(v)][3])
                        for v in pl
                    ],
                    color="tab:red",
                    ls=":",
                    marker="x",
                    label="paper (Table 3)",
                )
            ax.set_xlabel("encoding size l")
            ax.set_ylabel(metric.upper())
        axes[0].legend(fontsize=6)
        fig.tight_layout()
        save(fig, "fig4_fdr.png")
    return written


def _f(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{float(v):.{nd}f}"


def render_markdown(doc: dict[str, Any]) -> str:
    """The results page: each reproduced number beside the paper's, and why they differ."""
    st = doc["settings"]
    ls = list(st["l_grid"])
    drops = list(st["dropouts"])
    out: list[str] = []
    w = out.append
    w(f"# FED-chi^2 / FED-H reproduction ({'quick' if doc['quick'] else 'full'} run)\n")
    w(
        f"Paper: {doc['paper']} (paper 004). Command: `fedstats reproduce fed-chi2"
        f"{' --quick' if doc['quick'] else ''}`; seed {doc['seed']} ({doc['release_note'] or 'secure'}); "
        f"compute time {doc['timings']['total_s']:.0f} s on this machine (summed over resumed "
        "invocations"
        + (
            f"; {doc['cells_reused']} of {doc['cells_total']} cells came from an interrupted earlier "
            "invocation whose time is not included"
            if doc.get("cells_reused") and not doc.get("prev_timings_found")
            else ""
        )
        + ").\n"
    )
    if doc["notes"]:
        w("**Notes on data.**\n")
        for n in doc["notes"]:
            w(f"- {n}")
        w("")
    # ---- Figure 1
    w("## Figure 1: multiplicative error and power against l\n")
    w(
        f"{st['n_clients']} clients, {st['runs']} runs per point; dropout in round 2 of "
        f"{', '.join(f'{int(100 * d)}%' for d in drops)}. Error = mean of |s_hat - s| / s (sd). "
        "Power = share of runs with p < 0.05 using (m_x - 1)(m_y - 1) degrees of freedom; "
        "'authors dof' uses m_x m_y - 1 as the authors' code does. Synthetic tables are redrawn each run "
        "and run through the engine (real protocol); real tables use the fast path "
        "(`simulate_fed_chi2`, authors' table split, encoding drawn in distribution).\n"
    )
    ell50 = 50 if 50 in ls else ls[len(ls) // 2]
    w(
        f"### At l = {ell50}, no dropout (paper: error about {PAPER['fig1_mult_error_l50']} at l = 50, geometric decoder)\n"
    )
    w(
        "| dataset | shape | error geometric | error mean-of-squares | power geo | power MoS | "
        "power geo (authors dof) | centralized power | centralized (authors dof) | CI coverage MoS |"
    )
    w("|---|---|---|---|---|---|---|---|---|---|")
    for name, entry in doc["fig1"].items():
        c = entry["cells"][f"drop={drops[0]}|l={ell50}"]
        g, m = c["geometric"], c["mean-of-squares"]
        w(
            f"| {name} | {entry['shape'][0]}x{entry['shape'][1]} | {_f(g['mult_error_mean'])} ({_f(g['mult_error_sd'])}) | "
            f"{_f(m['mult_error_mean'])} ({_f(m['mult_error_sd'])}) | {_f(g['power'], 2)} | {_f(m['power'], 2)} | "
            f"{_f(g['power_authors_dof'], 2)} | {_f(c['central_power'], 2)} | {_f(c['central_power_authors_dof'], 2)} | "
            f"{_f(m['ci_coverage'], 2)} |"
        )
    w("")
    w("### Error against l and dropout (mean over datasets; geometric / mean-of-squares)\n")
    w("| dropout | " + " | ".join(f"l = {v}" for v in ls) + " |")
    w("|---|" + "---|" * len(ls))
    for d in drops:
        cells = []
        for ell in ls:
            ge = np.mean(
                [
                    e["cells"][f"drop={d}|l={ell}"]["geometric"]["mult_error_mean"]
                    for e in doc["fig1"].values()
                ]
            )
            me = np.mean(
                [
                    e["cells"][f"drop={d}|l={ell}"]["mean-of-squares"]["mult_error_mean"]
                    for e in doc["fig1"].values()
                ]
            )
            cells.append(f"{ge:.3f} / {me:.3f}")
        w(f"| {int(100 * d)}% | " + " | ".join(cells) + " |")
    w("")
    w("![Figure 1 error](fig1_error.png)\n\n![Figure 1 power](fig1_power.png)\n")
    f1 = doc["fig1"]

    def avg(dec: str, field: str, d: float, ell: int, names: list[str] | None = None) -> float:
        keys = names if names is not None else list(f1)
        return float(np.mean([f1[n]["cells"][f"drop={d}|l={ell}"][dec][field] for n in keys]))

    ind = [n for n in f1 if n == "synthetic: independent"]
    ell_hi = ls[-1]
    d_hi = drops[-1]
    txt = (
        "**Differences and why.** (1) Accuracy. The geometric-mean decoder's relative sd is "
        f"sqrt(pi^2 / (2 l)), 0.31 at l = 50: its mean error at l = {ell50} is "
        f"{avg('geometric', 'mult_error_mean', drops[0], ell50):.3f} here (mean over datasets), in line with "
        "the paper's 'about 0.2' read off its plot. The mean-of-squares decoder (maximum likelihood, relative "
        f"sd sqrt(2 / l)) gives {avg('mean-of-squares', 'mult_error_mean', drops[0], ell50):.3f} at the same l, "
        "and its exact interval covers the true statistic in "
        f"{100 * avg('mean-of-squares', 'ci_coverage', drops[0], ell50):.0f}% of runs (nominal 95%). "
    )
    if ind:
        txt += (
            "(2) Power on independent data is the false-positive rate. The 'independent' generator is truly "
            "independent: the centralized test rejects in "
            f"{100 * f1[ind[0]]['cells'][f'drop={drops[0]}|l={ell50}']['central_power']:.0f}% of runs, but "
            "FED-chi^2 read with the exact test's p-value rejects in "
            f"{100 * avg('geometric', 'power', drops[0], ell50, ind):.0f}% (geometric) / "
            f"{100 * avg('mean-of-squares', 'power', drops[0], ell50, ind):.0f}% (mean of squares) at l = "
            f"{ell50}: a relative error of sqrt(2 / l) moves near-threshold statistics across it. The "
            "authors' m_x m_y - 1 degrees of freedom raise the threshold (399 instead of 361 dof at 20 x 20), "
            "which masks this (geometric: "
            f"{100 * avg('geometric', 'power_authors_dof', drops[0], ell50, ind):.0f}%) and makes the "
            "centralized test reject "
            f"{100 * f1[ind[0]]['cells'][f'drop={drops[0]}|l={ell50}']['central_power_authors_dof']:.0f}%. "
            "A p-value that accounts for the known sketch noise restores the level (see the FDR section). "
        )
    txt += (
        "(3) The 'logistic' generator's signal sits in row 0 only and is barely over-dispersed, so its "
        "power is low for every method, and the authors' dof lowers it further. "
        "(4) Dropout. The survivors' deviations shrink by about (1 - dropout) while the expected counts "
        "come from round 1, so for dependent tables the statistic is biased low (by up to "
        f"1 - (1 - d)^2 = {100 * (1 - (1 - d_hi) ** 2):.0f}% at {100 * d_hi:.0f}% dropout), partly offset by "
        "the noise of the split. No l removes this bias: at l = "
        f"{ell_hi} the mean error is {avg('mean-of-squares', 'mult_error_mean', d_hi, ell_hi):.3f} at "
        f"{100 * d_hi:.0f}% dropout against {avg('mean-of-squares', 'mult_error_mean', drops[0], ell_hi):.3f} "
        "without (mean of squares), and the interval's coverage falls to "
        f"{100 * avg('mean-of-squares', 'ci_coverage', d_hi, ell_hi):.0f}%. Decisions are still robust "
        "because most real statistics are far from the threshold, as the paper says. Rescaling the "
        "survivors' sum by n / |S| would remove the first-order bias (not done here: it is not the paper's "
        "protocol).\n"
    )
    w(txt)
    # ---- Figure 2
    w("## Figure 2: client encoding time (l = 50)\n")
    w(
        f"Paper: a 500 x 500 table encodes in under {PAPER['fig2_encoding_ms_500x500']:.0f} ms on a "
        f"{PAPER['fig2_device']}. Here: one core of this machine.\n"
    )
    w(
        "| m x m | encoding, P in memory (ms) | sparse client (1% cells), columns on demand (ms) | generating the whole P (s) |"
    )
    w("|---|---|---|---|")
    for r in doc["fig2"]:
        w(
            f"| {r['m']} x {r['m']} | {_f(r['encoding_ms_mean'], 2)} ± {_f(r['encoding_ms_sd'], 2)} | "
            f"{_f(r['sparse_on_demand_ms_mean'], 2)} | {_f(r['projection_generation_s_mean'], 3)} |"
        )
    w("\n![Figure 2](fig2_encoding.png)\n")
    w(
        "**Differences and why.** The paper times the matrix-vector product only; generating the l x m "
        "projection from the shared seed costs far more (last column) and is reported separately; a client "
        "that keeps P pays it once per seed. "
        "A client whose table is sparse needs only its non-zero columns, generated on demand "
        "(counter-based), which is both faster and memory-bounded. Hardware differs (server core vs phone).\n"
    )
    # ---- Figure 5
    w("## Figure 5: FED-H additive error\n")
    if doc["fig5"]:
        f5 = doc["fig5"]
        lx = [int(k) for k in next(iter(v for k, v in f5.items() if k != "validation"))["by_l"]]
        w(
            f"m_x = {st['fedh_m']:,}, {st['n_clients']} clients, {st['fedh_runs']} runs per point. "
            f"Paper: about {PAPER['fig5_additive_error_l10000']} nats ({100 * PAPER['fig5_relative_error_l10000']:.1f}% "
            "of the truth) at l = 10,000.\n"
        )
        w("| generator | H (nats) | " + " | ".join(f"l = {v}" for v in lx) + " |")
        w("|---|---|" + "---|" * len(lx))
        for kind in GENERATORS:
            if kind in f5:
                e = f5[kind]
                w(
                    f"| {kind} | {e['truth']:.3f} | "
                    + " | ".join(f"{e['by_l'][str(v)]['additive_error_mean']:.3f}" for v in lx)
                    + " |"
                )
        w(
            "\nError floor of the finite difference with Delta = 0.05 (exact moments): "
            + ", ".join(
                f"{kind} {f5[kind]['finite_difference_error']:.3f}"
                for kind in GENERATORS
                if kind in f5
            )
            + " nats.\n"
        )
        if "validation" in f5:
            v = f5["validation"]
            w(
                f"Bounded-memory check at l = {v['l']} (linear generator, H = {v['truth']:.3f}, mean of 2 "
                "runs): real projections streamed column by column from one seed (coupled) against two "
                "independent projections drawn in distribution.\n"
            )
            w("| Delta | projections | abs error | seconds per run |")
            w("|---|---|---|---|")
            for row in v["rows"]:
                w(
                    f"| {row['delta']} | {row['coupling']} ({row['projection']}) | "
                    f"{row['abs_error_mean']:.3f} | {row['seconds_per_run']:.2f} |"
                )
            w("")
        w("![Figure 5](fig5_fedh.png)\n")
        w(
            "**Differences and why.** The paper does not state Delta; Delta = 0.05 (the authors' related "
            "code) is used. At m_x = 100,000 the finite difference itself is off by the floor above "
            "(sinh(Delta log m) / Delta against log m for a near-uniform histogram), so the error stops "
            "falling with l, and the paper's 0.5 at l = 10,000 is of that order. Coupling the two "
            "projections (one seed, the same stable variates at alpha = 1 +/- Delta) makes their errors "
            "largely cancel, which allows a smaller Delta and lowers the floor (table above); it needs the "
            "real projections, generated on demand in bounded memory. Histograms are the authors' "
            "generators with m_y = 1 (the paper does not say how its 1-D data were built).\n"
        )
    else:
        w("Skipped (see notes).\n")
    # ---- Feature selection
    w("## Section 4.2: feature selection on Reuters-21578\n")
    fs = doc["feature_selection"]
    if fs:
        ex = fs["fs|exact"]
        w(
            f"Corpus: {ex['n_train']:,} training / {ex['n_test']:,} test documents, {ex['n_classes']} classes, "
            f"{ex['n_terms']:,} terms; top k = {ex['k']:,}; {st['n_clients']} clients. Paper: "
            f"{PAPER['fs_train_docs']:,} / {PAPER['fs_test_docs']:,} documents, {PAPER['fs_vocabulary']:,} terms, "
            f"k = {PAPER['fs_k']:,}, overlap {100 * PAPER['fs_overlap']:.2f}% ({PAPER['fs_selected']:,} terms) at l = 50.\n"
        )
        w("| l | dropout | decoder | overlap (mean ± sd) | LR accuracy |")
        w("|---|---|---|---|---|")
        for _k, v in sorted(
            ((k, v) for k, v in fs.items() if k != "fs|exact"),
            key=lambda kv: (kv[1]["l"], kv[1]["dropout"], kv[1]["decoder"]),
        ):
            w(
                f"| {v['l']} | {int(100 * v['dropout'])}% | {v['decoder']} | {100 * v['overlap_mean']:.2f}% ± "
                f"{100 * v['overlap_sd']:.2f} | {_f(v.get('accuracy'), 4)} |"
            )
        w(
            f"\nLogistic regression accuracy: exact chi-square selection {ex['accuracy_exact_selection']:.4f}; "
            f"no selection (all {ex['n_terms']:,} terms) {ex['accuracy_no_selection']:.4f}.\n"
        )
        w("![overlap](fig8_overlap.png)\n")
        w(
            "**Differences and why.** The paper's preprocessing is not fully specified: its 21,578 documents "
            "are the whole collection although Reuters is multi-label and only about 10,000 documents carry "
            "one of the 20 top topics; we keep those and label each by its most frequent top-20 topic, and use "
            "unigrams + bigrams (the paper's 167,135 terms exceed the ~40,000 unigrams). The overlap depends on "
            "how many terms have scores near the k-th one, so it is comparable only in kind. The logistic "
            "regression is scikit-learn's SGD with log loss, constant step 0.1 and seed 0 on binary term "
            "presence (the paper: learning rate 0.1, seed 0, on GPU; its other settings are not given). "
            "The paper finds selection clearly better than no selection; here the two are close: with "
            "this linear model and L2 penalty, the extra terms neither help nor hurt much.\n"
        )
    else:
        w("Skipped (see notes).\n")
    # ---- FDR
    w("## Section 4.2: online FDR control with SAFFRON (Figure 4, Table 3)\n")
    fdr = doc["fdr"]
    if fdr:
        r0 = fdr["run0"]
        mean = fdr["mean"]
        n_h = st["fdr_times"] * st["fdr_hypotheses"]
        w(
            f"{st['fdr_times']} times x {st['fdr_hypotheses']} hypotheses = {n_h:,} tests per run, "
            f"{st['fdr_runs']} runs; {st['fdr_bins']}x{st['fdr_bins']} tables of {st['fdr_samples']} Gaussian "
            "points (correlated with probability 0.5); SAFFRON with alpha = 0.05, W0 = 0.0125, lambda = 0.5, "
            "gamma_j ~ j^-1.6. Counts of run 0 (geometric decoder = the paper's), mean FDR/TDR over runs.\n"
        )
        w(
            "| method | l | should reject | should accept | correct reject | false reject | FDR | TDR | "
            "FDR calibrated p | TDR calibrated p | paper (correct / false reject) | paper FDR |"
        )
        w("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for ell in st["fdr_l_grid"]:
            c = r0[f"geometric|{ell}"]
            m = mean[f"geometric|{ell}"]
            mc = mean[f"geometric|{ell}|calibrated"]
            p = PAPER["table3"].get(str(ell))
            ptxt = f"{p[2]:,} / {p[3]:,}" if p else "-"
            pf = f"{p[3] / (p[2] + p[3]):.3f}" if p else "-"
            w(
                f"| FED-chi^2 | {ell} | {c['should_reject']:,} | {c['should_accept']:,} | {c['correct_reject']:,} | "
                f"{c['false_reject']:,} | {m['fdr']:.3f} | {m['tdr']:.3f} | {mc['fdr']:.3f} | {mc['tdr']:.3f} | {ptxt} | {pf} |"
            )
        c = r0["central"]
        p = PAPER["table3"]["central"]
        w(
            f"| centralized | - | {c['should_reject']:,} | {c['should_accept']:,} | {c['correct_reject']:,} | "
            f"{c['false_reject']:,} | {mean['central']['fdr']:.3f} | {mean['central']['tdr']:.3f} | - | - | "
            f"{p[2]:,} / {p[3]:,} | {p[3] / (p[2] + p[3]):.3f} |"
        )
        w(
            "\nMean-of-squares decoder: "
            + ", ".join(
                f"l = {ell}: FDR {mean[f'mean-of-squares|{ell}']['fdr']:.3f} (calibrated {mean[f'mean-of-squares|{ell}|calibrated']['fdr']:.3f})"
                for ell in st["fdr_l_grid"]
            )
            + ".\n"
        )
        w("![Figure 4](fig4_fdr.png)\n")
        w(
            "**Differences and why.** The paper's data generator is described in one sentence; ours is stated "
            "above, so the counts differ (about 50% non-null here against 59% there). The qualitative result "
            "reproduces: reading the sketched statistic's p-value as if it were exact inflates false "
            "discoveries at small l, and FDR falls towards the centralized value as l grows. Our centralized "
            "FDR stays below the 0.05 target, while the paper's centralized test has FDR 0.072 (408 / 5,702) — "
            "above the target, which suggests its ground truth labels some dependent pairs as independent. "
            "The calibrated p-value (ours) accounts for the known sketch noise, P(s G > x) = E_G[chi2_sf(x / G)], "
            "and restores FDR control at every l at a modest cost in TDR.\n"
        )
    w("## Timings\n")
    if doc.get("load_average") is not None:
        w(
            f"The server was shared with other jobs (load average {doc['load_average']:.1f} on "
            f"{os.cpu_count()} cores when the page was written), so timings are upper bounds.\n"
        )
    w(" | ".join(f"{k}: {v:.1f}" for k, v in doc["timings"].items()) + "\n")
    return "\n".join(out) + "\n"
