"""Section 4.2 of Pang et al. (ICML 2023): feature selection on Reuters-21578 and online FDR (Table 3).

Chi-square feature selection and online FDR control with SAFFRON; one module-level function per
checkpointed cell.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from fedstats.analyses.chi2 import (
    noise_averaged_p_value,
    simulate_decoded,
    sketch_noise_quantiles,
)
from fedstats.analyses.fdr import discovery_counts, saffron
from fedstats.analyses.feature_selection import (
    chi2_scores,
    chi2_scores_from_tables,
    federated_chi2_scores,
    selection_overlap,
    top_k,
)
from fedstats.experiments.fed_chi2.settings import DECODERS, Settings
from fedstats.randomness import RandomSource

__all__ = ["clear_corpus_cache", "fdr_cell", "fs_exact_cell", "fs_fed_cell", "summarize_fdr"]

_NOISE_POINTS = 1000
"""Quantile points of the decoder's noise for the calibrated p-value."""

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


def fs_exact_cell(st: Settings, rs: RandomSource, data_dir: Any) -> dict[str, Any]:
    """Run the exact chi-square selection on Reuters-21578 and the logistic regressions to compare.

    Returns
    -------
    dict
        Corpus sizes, ``k``, the exact selection's time and the accuracies with and without selection.
    """
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


def fs_fed_cell(
    ell: int,
    dropout: float,
    decoder: str,
    with_lr: bool,
    st: Settings,
    rs: RandomSource,
    data_dir: Any,
) -> dict[str, Any]:
    """FED-chi^2 feature selection at one (l, dropout, decoder): overlap with the exact selection.

    Returns
    -------
    dict
        Overlap mean and sd over ``st.fs_reps`` repetitions, communication, and (``with_lr``) the
        accuracy of a logistic regression on the first repetition's selection.
    """
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


def _fdr_data(st: Settings, rs: RandomSource, run: int) -> tuple[np.ndarray, np.ndarray]:
    """Draw the hypothesis stream: ``(T*H, bins, bins)`` tables and the null indicator.

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
    import scipy.stats  # lazily (import cost)

    edges = scipy.stats.norm.ppf(np.arange(1, b) / b)
    bx = np.searchsorted(edges, xy[:, :, 0] / sd[:, None, 0])
    by = np.searchsorted(edges, xy[:, :, 1] / sd[:, None, 1])
    flat = (np.arange(n_h)[:, None] * b + bx) * b + by
    tables = np.bincount(flat.ravel(), minlength=n_h * b * b).reshape(n_h, b, b)
    return tables, null


def fdr_cell(run: int, st: Settings, rs: RandomSource) -> dict[str, Any]:
    """One run of the online FDR experiment: SAFFRON on exact, sketched and calibrated p-values.

    Without dropout the aggregated encoding is ``sqrt(s) N(0, 2)^l`` exactly (``s`` the exact statistic),
    so the sketched statistics come from FED-chi^2's fast path (:func:`simulate_decoded`); the calibrated
    p-value averages over the decoder's noise (:func:`noise_averaged_p_value` with
    :func:`sketch_noise_quantiles`).

    Returns
    -------
    dict
        Discovery counts, FDR and TDR per method (``central``, ``<decoder>|<l>``,
        ``<decoder>|<l>|calibrated``).
    """
    import scipy.stats  # lazily (import cost)

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
    for dec in DECODERS:
        for ell in st.fdr_l_grid:
            s_hat = simulate_decoded(s, ell, dec, rs.generator("fdr", "enc", run, dec, ell))
            out[f"{dec}|{ell}"] = summarize(scipy.stats.chi2.sf(s_hat, dof))
            q = sketch_noise_quantiles(ell, dec, points=_NOISE_POINTS)
            out[f"{dec}|{ell}|calibrated"] = summarize(noise_averaged_p_value(s_hat, dof, q))
    return out


def summarize_fdr(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Run 0's counts and the mean (and sd) of FDR and TDR over runs, per method."""
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


def clear_corpus_cache() -> None:
    """Forget the cached Reuters corpus (after the feature-selection cells)."""
    _CORPUS_CACHE.clear()
