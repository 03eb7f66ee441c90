"""Appendix D of Juarez & Korolova (2023): per-client TPR and FPR of an activity model, by sex.

Recipe (``PAPER_NOTES.md``, 003, from the paper and the authors' code):

* data: the UCI "activity recognition with healthy older people" RFID trials
  (:func:`fedstats.datasets.load_activity`); each trial file is one client, its sex is the file name's last
  letter;
* label: lying (activity 3) is the positive class;
* clients kept: at least 50 rows and at least 6 rows of each class (25 male, 49 female trials remain);
* features: all 8 sensor columns, each row L2-normalised;
* model: elastic-net logistic regression (``saga``, ``l1_ratio=0.99``, balanced class weights), trained on a
  70/30 split stratified by client;
* performance: each client's true positive rate and false positive rate on its test rows at threshold 0.5.

The authors' run was unseeded, so the published means (TPR 89.01% male / 71.77% female, FPR 15.26% /
24.90%) can be matched statistically, not exactly.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fedstats.datasets import load_activity
from fedstats.datasets.archives import ACTIVITY_COLUMNS
from fedstats.errors import DataError

__all__ = ["ActivityPerformance", "activity_performance", "select_clients"]

LYING = 3
FEATURES: tuple[str, ...] = tuple(c for c in ACTIVITY_COLUMNS if c != "activity")


@dataclass(frozen=True)
class ActivityPerformance:
    """Per-client performance of the global model.

    Attributes
    ----------
    clients : pandas.DataFrame
        One row per kept client: ``trial``, ``sex``, ``tpr``, ``fpr``, ``n_test``.
    accuracy, tpr, fpr : float
        The global model's pooled test metrics.
    seed : int
        Seed of the split and the solver.
    """

    clients: pd.DataFrame
    accuracy: float
    tpr: float
    fpr: float
    seed: int

    def group_means(self, metric: str) -> dict[str, float]:
        """Mean of ``metric`` (``"tpr"`` or ``"fpr"``) per sex."""
        return {str(k): float(v) for k, v in self.clients.groupby("sex")[metric].mean().items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (group sizes and means; not the per-client rows)."""
        sizes = self.clients["sex"].value_counts().to_dict()
        return {
            "n_clients": {str(k): int(v) for k, v in sizes.items()},
            "accuracy": self.accuracy,
            "tpr": self.tpr,
            "fpr": self.fpr,
            "mean_tpr": self.group_means("tpr"),
            "mean_fpr": self.group_means("fpr"),
            "seed": self.seed,
        }


def select_clients(df: pd.DataFrame, *, min_rows: int = 50, min_per_class: int = 6) -> pd.DataFrame:
    """Keep trials with at least ``min_rows`` rows and ``min_per_class`` rows of each class.

    Raises
    ------
    DataError
        If no trial is left.
    """
    y = (df["activity"] == LYING).astype(np.int64)
    stats = pd.DataFrame({"trial": df["trial"], "y": y}).groupby("trial")["y"].agg(["size", "sum"])
    ok = stats[
        (stats["size"] >= min_rows)
        & (stats["sum"] >= min_per_class)
        & (stats["size"] - stats["sum"] >= min_per_class)
    ].index
    out = df[df["trial"].isin(ok)].reset_index(drop=True)
    if out.empty:
        raise DataError("no activity trial satisfies the row and class minimums")
    return out


def activity_performance(data_dir: Any = None, *, seed: int = 0) -> ActivityPerformance:
    """Train the Appendix D model and measure each client's TPR and FPR.

    Parameters
    ----------
    data_dir : path-like, optional
        Data root holding ``activity-older-people/`` (default: the shared data folder).
    seed : int, default 0
        Seed of the stratified split and the solver.

    Returns
    -------
    ActivityPerformance

    Raises
    ------
    DatasetNotFoundError, ChecksumError
        If the data is missing or altered.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import Normalizer

    df = select_clients(load_activity(data_dir))
    x = Normalizer(norm="l2").fit_transform(df[list(FEATURES)].to_numpy(dtype=np.float64))
    y = (df["activity"] == LYING).to_numpy(dtype=np.int64)
    trial = df["trial"].to_numpy()
    idx_train, idx_test = train_test_split(
        np.arange(len(df)), test_size=0.3, stratify=trial, random_state=seed
    )
    model = LogisticRegression(
        solver="saga",
        penalty="elasticnet",
        l1_ratio=0.99,
        class_weight="balanced",
        max_iter=200,
        random_state=seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", FutureWarning)
        model.fit(x[idx_train], y[idx_train])
    pred = (model.predict_proba(x[idx_test])[:, 1] >= 0.5).astype(np.int64)
    yt = y[idx_test]
    test = pd.DataFrame(
        {"trial": trial[idx_test], "sex": df["sex"].to_numpy()[idx_test], "y": yt, "p": pred}
    )
    test["tp"] = (test["y"] == 1) & (test["p"] == 1)
    test["fp"] = (test["y"] == 0) & (test["p"] == 1)
    agg = test.groupby("trial").agg(
        sex=("sex", "first"),
        pos=("y", "sum"),
        n_test=("y", "size"),
        tp=("tp", "sum"),
        fp=("fp", "sum"),
    )
    agg["neg"] = agg["n_test"] - agg["pos"]
    agg["tpr"] = agg["tp"] / agg["pos"]
    agg["fpr"] = agg["fp"] / agg["neg"]
    clients = agg.reset_index()[["trial", "sex", "tpr", "fpr", "n_test"]]
    return ActivityPerformance(
        clients=clients,
        accuracy=float((pred == yt).mean()),
        tpr=float(pred[yt == 1].mean()),
        fpr=float(pred[yt == 0].mean()),
        seed=seed,
    )
