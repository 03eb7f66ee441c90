"""Settings of the FED-chi^2 / FED-H reproduction, the paper's numbers, and the real tables (App. I)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedstats.errors import DatasetNotFoundError, FedstatsError

__all__ = ["DECODERS", "NAME", "PAPER", "Settings", "real_tables", "settings_for"]

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
    """Sizes of every part of the reproduction (see :func:`settings_for`).

    Attributes
    ----------
    quick : bool
        The small version.
    n_clients, runs : int
        Clients and runs per point of Figure 1.
    l_grid, dropouts : tuple
        Encoding sizes and round-2 dropout fractions of Figure 1.
    level : float
        Significance level of the tests.
    fig2_sizes, fig2_reps, fig2_gen_reps
        Figure 2's table sizes and timing repetitions.
    fedh_m, fedh_l_grid, fedh_runs, fedh_validate_l
        Figure 5's histogram size, encoding sizes, runs and the bounded-memory check's ``l``.
    fs_k, fs_l, fs_l_grid, fs_dropouts, fs_reps, fs_max_documents, fs_ngram_max, fs_lr_grid
        Feature selection (Section 4.2) on Reuters-21578.
    fdr_times, fdr_hypotheses, fdr_samples, fdr_bins, fdr_clients, fdr_l_grid, fdr_runs
        Online FDR (Table 3).
    real_tables : str
        ``"all"`` or ``"quick"`` (see :func:`real_tables`).
    """

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
    real_tables: str


_FULL = Settings(
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
"""The full reproduction's settings (about 15 minutes on 2 cores)."""

_QUICK = replace(
    _FULL,
    quick=True,
    runs=10,
    l_grid=(10, 50, 200),
    dropouts=(0.0, 0.1),
    fig2_sizes=(10, 50, 100),
    fig2_reps=5,
    fig2_gen_reps=1,
    fedh_m=10_000,
    fedh_l_grid=(100, 1000),
    fedh_runs=5,
    fedh_validate_l=50,
    fs_k=2000,
    fs_l_grid=(10, 50),
    fs_dropouts=(0.0, 0.2),
    fs_reps=1,
    fs_max_documents=1500,
    fs_ngram_max=1,
    fs_lr_grid=False,
    fdr_times=10,
    fdr_hypotheses=50,
    fdr_l_grid=(10, 50, 300),
    fdr_runs=1,
    real_tables="quick",
)
"""The quick version: the full settings with fewer points, runs and documents (same clients and level)."""


def settings_for(quick: bool) -> Settings:
    """Return the full reproduction's settings (about 15 minutes on 2 cores) or the quick one's."""
    return _QUICK if quick else _FULL


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
    """Load the real contingency tables of App. I that are available, with notes on the missing ones.

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
