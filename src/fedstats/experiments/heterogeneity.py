"""Reproduction of paper 000 (Scott, Cormode & Maple): Tables 1-6 and Figure 1, with correct mathematics.

Design (paper Sec. 5): a stratified sample of the images whose labels follow one of six ratios; epsilon in
0.25..5; delta as stated (0.1) and as the authors ran it (1e-5); AGM against CGM; distributed against
central noise; EMSE (measured), TMSE (closed form, and the paper's Corollaries 4.5/4.13/4.18 evaluated on
the same noise) and CMSE (the EMSE of the central-noise run). The paper's cells use its continuous Gaussian
noise (``float_noise=True``: a simulation, never a release); the secure-aggregation section compares them
with the discrete Gaussian that fedstats releases. Data: scikit-learn's digits (embedded), and
Fashion-MNIST / CIFAR when their files are in the data directory.

Runs on the shared framework (:mod:`fedstats.experiments.framework`): every cell is checkpointed and keyed by
the run's settings, and the page is rendered from ``templates/heterogeneity.md.j2``.

``legacy=True`` adds the authors' script's behaviour (noise of standard deviation sigma^2, sensitivity over
the whole training set, delta = 1e-5, every client a copy of the same image) to show that it reproduces the
published Table 1 exactly: the dispersion EMSE is then (sensitivity * sigma)^4.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from fedstats.analyses.heterogeneity import (
    dispersion,
    dispersion_mse,
    exact_heterogeneity,
    heterogeneity,
    inverse_variance_weights,
    paper_tmse_dispersion,
    paper_tmse_i2,
    paper_tmse_q,
    weighted_mean,
)
from fedstats.analyses.heterogeneity.calibration import quiet_gaussian_sigma
from fedstats.analyses.heterogeneity.protocol import StatisticEstimate
from fedstats.experiments.framework import Cell, RunContext
from fedstats.experiments.heterogeneity_data import load_image_vectors, sample_by_label_ratio
from fedstats.experiments.heterogeneity_page import page_data
from fedstats.privacy.analysis.gaussian import PrivacyWarning
from fedstats.randomness import RandomSource

__all__ = ["NAME", "PAPER_TABLE1", "RATIOS", "legacy_dispersion_emse", "run"]

NAME = "heterogeneity"
RATIOS: tuple[tuple[str, str], ...] = (
    ("10 labels equal", "1:1:1:1:1:1:1:1:1:1"),
    ("10 labels 91:1", "91:1:1:1:1:1:1:1:1:1"),
    ("5 labels equal", "1:1:1:1:1"),
    ("5 labels 96:1", "96:1:1:1:1"),
    ("2 labels equal", "1:1"),
    ("2 labels 99:1", "99:1"),
)
EPSILONS = tuple(round(0.25 * k, 2) for k in range(1, 21))
DELTAS = (0.1, 1e-5)  # as stated in the text; as the authors' script ran it
# Published Table 1 (dispersion), AGM and CGM EMSE at epsilon = 0.25.
PAPER_TABLE1: dict[str, dict[str, float]] = {
    "CIFAR-10": {"AGM": 4.6654e-8, "CGM": 2.1043e-7, "d": 3072, "n_train": 50000},
    "CIFAR-100": {"AGM": 4.6806e-8, "CGM": 2.1779e-7, "d": 3072, "n_train": 50000},
    "Fashion-MNIST": {"AGM": 1.4472e-9, "CGM": 6.7639e-9, "d": 784, "n_train": 60000},
}
# The secure-aggregation comparison: the paper's float designs against the discrete Gaussian releases.
SECURE_ROUTES: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "distributed discrete Gaussian (secure arithmetic)",
        {"noise": "distributed", "secure": True, "accounting": "zcdp"},
    ),
    ("central discrete Gaussian (zCDP accounting)", {"noise": "central", "accounting": "zcdp"}),
    ("distributed continuous Gaussian (AGM)", {"noise": "distributed", "float_noise": True}),
    ("central Gaussian (AGM)", {"noise": "central", "float_noise": True}),
    (
        "central Gaussian (zCDP accounting)",
        {"noise": "central", "accounting": "zcdp", "float_noise": True},
    ),
)


def _datasets(data_dir: Path | None, quick: bool) -> list[tuple[str, np.ndarray, np.ndarray]]:
    x, y, _ = load_image_vectors("digits")
    assert y is not None
    out = [("digits", x, y)]
    if quick or data_dir is None:
        return out
    for name, rel in (
        ("Fashion-MNIST", "fashion-mnist/train-images-idx3-ubyte.gz"),
        ("Fashion-MNIST", "fashion-mnist/train-images-idx3-ubyte"),
        ("CIFAR-10", "cifar-10-batches-py"),
        ("CIFAR-100", "cifar-100-python"),
    ):
        p = Path(data_dir) / rel
        if p.exists() and all(n != name for n, _, _ in out):
            xi, yi, _ = load_image_vectors(str(p))
            if yi is not None:
                out.append((name, xi, yi))
    return out


def _plugin(st: StatisticEstimate) -> tuple[float, float]:
    """Paper 000's plug-in estimate of a statistic and its closed-form MSE (from ``st.details``)."""
    est = float(st.details.get("plugin_estimate", st.estimate))
    mse = st.details.get("plugin_mse_theory", st.mse_theory)
    return est, float(mse) if mse is not None else math.nan


def _rep_errors(x: np.ndarray, rs: RandomSource, kw: dict[str, Any]) -> dict[str, float]:
    """Squared errors, theory and coverage of one private run of the three statistics."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        # the paper's design splits the budget between the rounds ("basic"); zCDP rows say so in kw
        r = heterogeneity(x, randomness=rs, **{"accounting": "basic", **kw})
    assert r.dispersion is not None and r.q is not None and r.i2 is not None
    assert r.mean is not None and r.weighted_mean is not None
    n = x.shape[0]
    mu = x.mean(axis=0)
    w = inverse_variance_weights(x, min_variance=r.min_variance)
    mu_w = weighted_mean(x, w)
    # paper 000's plug-ins (D'', Q'' and I^2 from Q''), not the debiased releases: this reproduces the paper
    plug = {st.name: _plugin(st) for st in (r.dispersion, r.q, r.i2)}
    y2 = plug["dispersion"][0] - dispersion(x, center=r.mean)
    diff = x - r.weighted_mean
    z2 = plug["q"][0] - float(w @ np.einsum("ij,ij->i", diff, diff))
    out: dict[str, float] = {}
    for st in (r.dispersion, r.q, r.i2):
        est, tmse = plug[st.name]
        out[f"{st.name}_se"] = (est - float(st.truth or 0.0)) ** 2
        out[f"{st.name}_tmse"] = tmse
        out[f"{st.name}_cover"] = float(bool(st.covers()))
        lo, hi = st.paper_interval if st.paper_interval else (math.nan, math.nan)
        out[f"{st.name}_paper_cover"] = float(lo <= float(st.truth or 0.0) <= hi)
    # theoretical MSE with the exact mean (clipping accounted for exactly)
    out["dispersion_tmse"] = dispersion_mse(
        dim=x.shape[1],
        mean_sd=float(r.details["mean_noise_sd"]),
        dispersion_sd=float(r.dispersion.noise_sd or 0.0),
        centre=mu,
    )
    out["dispersion_paper_tmse"] = paper_tmse_dispersion(x, mu, r.mean - mu, y2)
    out["q_paper_tmse"] = paper_tmse_q(x, w, mu_w, r.weighted_mean - mu_w, z2)
    out["i2_paper_tmse"] = paper_tmse_i2(n, plug["q"][0], float(r.q.truth or 0.0))
    out["epsilon_achieved"] = float(r.details.get("epsilon_achieved", math.nan))
    return out


def cell_errors(x: np.ndarray, reps: int, rs: RandomSource, kw: dict[str, Any]) -> dict[str, Any]:
    """One table cell: mean and standard deviation over ``reps`` runs of every error measure.

    Parameters
    ----------
    x : numpy.ndarray, shape (n, d)
        The sample's vectors.
    reps : int
        Repetitions, >= 1.
    rs : RandomSource
        The cell's randomness (repetition i uses ``rs.child("rep", i)``).
    kw : dict
        Keyword options of :func:`~fedstats.analyses.heterogeneity.heterogeneity`.

    Returns
    -------
    dict
        ``reps``, ``n_clients`` and, per measure, its mean and ``<measure>_sd``.
    """
    rows = [_rep_errors(x, rs.child("rep", i), kw) for i in range(reps)]
    out: dict[str, Any] = {"reps": reps, "n_clients": int(x.shape[0])}
    for k in rows[0]:
        v = np.array([r[k] for r in rows])
        out[k] = float(np.mean(v))
        out[k + "_sd"] = float(np.std(v))
    return out


def secure_identity(x: np.ndarray, reps: int, rs: RandomSource) -> dict[str, Any]:
    """Run the discrete-share protocol on the real secure-aggregation route and on the plain route.

    Parameters
    ----------
    x : numpy.ndarray, shape (n, d)
    reps : int
        Runs, >= 1.
    rs : RandomSource
        Run i uses ``rs.child("rep", i)`` on both routes.

    Returns
    -------
    dict
        ``{"identical": runs with equal estimates, "reps": reps}``.
    """
    from fedstats.engine import Engine, SerialBackend
    from fedstats.engine.secure import SecureAggregationBackend

    same = 0
    for i in range(reps):
        est = []
        for backend in (SerialBackend(), SecureAggregationBackend(cohort_size=x.shape[0])):
            rsi = rs.child("rep", i)
            r = heterogeneity(
                x,
                epsilon=1.0,
                delta=1e-5,
                noise="distributed",
                secure=True,
                engine=Engine(backend, rsi),
                randomness=rsi,
            )
            assert r.dispersion is not None and r.q is not None
            est.append((r.dispersion.estimate, r.q.estimate))
        same += int(est[0] == est[1])
    return {"identical": same, "reps": reps}


def legacy_table(randomness: RandomSource) -> dict[str, Any]:
    """Emulate the authors' script for every dataset of the published Table 1 (see module docstring).

    Parameters
    ----------
    randomness : RandomSource
        Source of the simulated noise (``randomness.generator("legacy")``).

    Returns
    -------
    dict
        ``{dataset: {"AGM"|"CGM": {"published", "legacy_simulated", "formula"}}}``.
    """
    rng = randomness.generator("legacy")
    leg: dict[str, Any] = {}
    for ds, pub in PAPER_TABLE1.items():
        row = {}
        for mech, col in (("analytic", "AGM"), ("classical", "CGM")):
            c = quiet_gaussian_sigma(mech, epsilon=0.25, delta=1e-5, sensitivity=1.0)
            formula = (math.sqrt(pub["d"]) / pub["n_train"] * c) ** 4
            sim = legacy_dispersion_emse(
                dim=int(pub["d"]),
                n_train=int(pub["n_train"]),
                epsilon=0.25,
                delta=1e-5,
                mechanism=mech,
                reps=10,
                rng=rng,
            )
            row[col] = {"published": pub[col], "legacy_simulated": sim, "formula": formula}
        leg[ds] = row
    return leg


def legacy_dispersion_emse(
    *, dim: int, n_train: int, epsilon: float, delta: float, mechanism: str, reps: int, rng: Any
) -> float:
    r"""EMSE of the dispersion as the authors' script computes it (to reproduce the published Table 1).

    Every client is a copy of one image (a counter is never incremented), so the true dispersion is 0;
    the sensitivity is :math:`\sqrt d / N_{\text{train}}`; the noise is drawn with standard deviation
    :math:`s = (\Delta\sigma_1)^2` (``normal(0, sigma**2)``); the per-client squared errors are averaged over
    the 2% sample and the repetitions. The published numbers equal the round-2 noise term alone,
    :math:`E[Y_2^2] = s^2 = (\Delta\sigma_1)^4` (within 2% for all six AGM/CGM entries of Table 1), so that is
    what is simulated here.
    """
    c = quiet_gaussian_sigma(mechanism, epsilon=epsilon, delta=delta, sensitivity=1.0)
    s = (math.sqrt(dim) / n_train * c) ** 2
    clients = int(0.02 * n_train)
    vals = []
    for _ in range(reps):
        y2 = rng.normal(0.0, s, size=clients)
        vals.append(float(np.mean(y2 * y2)))
    return float(np.mean(vals))


def run(ctx: RunContext) -> dict[str, Any]:
    """Run the reproduction on the framework: cells, plots, ``heterogeneity[-quick].json`` and its page.

    Parameters
    ----------
    ctx : RunContext
        ``ctx.reps`` repetitions per table cell (default 100, 6 quick; figure cells a third, 3 quick),
        ``ctx.options["legacy"]`` adds the authors' script's Table 1, ``ctx.data_dir`` the real data.

    Returns
    -------
    dict
        The JSON document written.
    """
    quick = ctx.quick
    randomness = ctx.randomness
    r_tab = ctx.reps or (6 if quick else 100)
    r_fig = max(2, r_tab // 3) if not quick else 3
    eps_grid = (0.25, 1.0, 5.0) if quick else EPSILONS
    designs = (("2%", 0.02),) if quick else (("2%", 0.02), ("max", None))
    doc: dict[str, Any] = {
        "name": NAME,
        "repetitions": {"tables": r_tab, "figure": r_fig},
        "epsilons": list(eps_grid),
        "deltas": list(DELTAS),
        "samples": {},
        "tables": {},
        "figure": {},
        "notes": [
            "min_variance = 0.05 (weights <= 20); round1_fraction = 0.5; p = 2; standard weighted mean",
            "classical Gaussian at epsilon >= 1 is outside its theorem (reproduced as the paper did)",
            "the paper's cells use floating-point Gaussian noise (a simulation, not for release)",
        ],
    }
    cells: list[Cell] = []
    samples: dict[str, np.ndarray] = {}
    for ds, x_all, y_all in _datasets(ctx.data_dir, quick):
        for design, frac in designs:
            for label, ratio in RATIOS:
                key = f"{ds}|{design}|{label}"
                idx = sample_by_label_ratio(
                    y_all,
                    ratio,
                    fraction=frac,
                    rng=randomness.generator("sample", ds, design, ratio),
                )
                xs = x_all[idx]
                xs = xs[np.ptp(xs, axis=1) > 0]  # Q needs non-constant vectors
                samples[key] = xs
                w = inverse_variance_weights(xs, min_variance=0.05)
                ex = exact_heterogeneity(xs, min_variance=0.05)
                doc["samples"][key] = {
                    "n_clients": int(xs.shape[0]),
                    "dim": int(xs.shape[1]),
                    "labels": np.bincount(y_all[idx], minlength=10).tolist(),
                    "dispersion": ex.dispersion,
                    "q": ex.q,
                    "i2": ex.i2,
                    "weight_range": [float(w.min()), float(w.max())],
                }
            # Tables 1-3, 5: equal labels, epsilon 0.25, AGM/CGM x distributed/central x both deltas
            xs = samples[f"{ds}|{design}|10 labels equal"]
            for delta in DELTAS:
                for mech in ("analytic", "classical"):
                    for noise in ("distributed", "central"):
                        kw = {"epsilon": 0.25, "delta": delta, "mechanism": mech, "noise": noise}
                        rs = randomness.child("table", ds, design, str(delta), mech, noise)
                        cells.append(
                            Cell(
                                f"table|{ds}|{design}|{delta}|{mech}|{noise}",
                                cell_errors,
                                (xs, r_tab, rs, {**kw, "float_noise": True}),
                            )
                        )
            # Figure 1 and Table 6: AGM, distributed, every ratio and epsilon, both deltas
            for delta in DELTAS:
                for label, _ in RATIOS:
                    for eps in eps_grid:
                        kw = {"epsilon": eps, "delta": delta, "noise": "distributed"}
                        rs = randomness.child("figure", ds, design, str(delta), label, str(eps))
                        cells.append(
                            Cell(
                                f"figure|{ds}|{design}|{delta}|{label}|{eps}",
                                cell_errors,
                                (
                                    samples[f"{ds}|{design}|{label}"],
                                    r_fig,
                                    rs,
                                    {**kw, "float_noise": True},
                                ),
                            )
                        )
    # Secure aggregation: distributed discrete Gaussian vs the float designs (digits)
    xs_sec = samples[f"digits|{'2%' if quick else 'max'}|10 labels equal"]
    for route, kw in SECURE_ROUTES:
        rs = randomness.child("secure", route)
        cells.append(
            Cell(
                f"secure|{route}",
                cell_errors,
                (xs_sec, r_tab, rs, {"epsilon": 1.0, "delta": 1e-5, **kw}),
            )
        )
    cells.append(
        Cell(
            "secure-identity",
            secure_identity,
            (samples["digits|2%|10 labels equal"], 2 if quick else 5, randomness.child("identity")),
        )
    )
    results = ctx.cells(cells, task="heterogeneity cells")
    sec: dict[str, Any] = {
        "n_clients": int(xs_sec.shape[0]),
        "epsilon": 1.0,
        "delta": 1e-5,
        "reps": r_tab,
        "routes": {},
        "paths": {
            route: "float (simulation only)" if kw.get("float_noise") else "discrete grid (release)"
            for route, kw in SECURE_ROUTES
        },
    }
    for k, v in results.items():
        part, rest = k.split("|", 1) if "|" in k else (k, "")
        if part == "secure":
            sec["routes"][rest] = v
        elif part == "secure-identity":
            sec["identical"], sec["reps_secure"] = v["identical"], v["reps"]
        elif part == "table":
            doc["tables"][rest] = v
        else:  # keep the figure cells small: EMSE, its SD, the theory and the coverage
            doc["figure"][rest] = {
                f: v[f]
                for f in v
                if f in ("reps", "n_clients", "epsilon_achieved")
                or f.endswith(("_se", "_se_sd", "_tmse", "_cover"))
            }
    doc["secure"] = sec
    if ctx.options.get("legacy"):
        doc["legacy"] = legacy_table(randomness)
    doc["page"] = page_data(doc, eps_grid)
    plots = _plots(ctx.out, ctx.stem, doc, eps_grid)
    ctx.finish(doc, plots=plots)
    return doc


def _plots(out: Path, name: str, doc: dict[str, Any], eps_grid: tuple[float, ...]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    combos = sorted({tuple(k.split("|")[:3]) for k in doc["figure"]})
    for ds, design, delta in combos:
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
        for ax, stat in zip(axes, ("dispersion", "q", "i2"), strict=True):
            for label, _ in RATIOS:
                ys = [
                    doc["figure"][f"{ds}|{design}|{delta}|{label}|{e}"][f"{stat}_se"]
                    for e in eps_grid
                ]
                n_lab = doc["samples"][f"{ds}|{design}|{label}"]["n_clients"]
                ax.plot(
                    eps_grid,
                    ys,
                    marker="o" if "equal" in label else "x",
                    label=f"{label} (n={n_lab})",
                )
            ax.set_yscale("log")
            ax.set_xlabel("epsilon")
            ax.set_ylabel(f"EMSE of {stat}")
            ax.set_title(f"{ds} ({design}), delta={delta}")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fn = f"{name}-figure1-{ds}-{design.replace('%', 'pct')}-delta{delta}.png"
        fig.savefig(out / fn, dpi=72)
        plt.close(fig)
        files.append(fn)
    return files
