r"""Demo rows of issue 7: a private accuracy gap between sexes on embedded Adult (Juarez & Korolova 2023).

A scikit-learn logistic regression is trained on the Adult train split (numeric features, standardized);
each of the 16,281 test records is one client holding its group (sex) and its performance value (1 if the
model classifies its record correctly, else 0). The clients report through :math:`\mathcal M_R` and
:math:`\mathcal M_L` with a total budget of 2 (split optimally under the true privacy loss) and the server
estimates the accuracy gap female - male.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedstats.analyses.performance_gap import measure_performance_gap
from fedstats.datasets import load_adult
from fedstats.engine import Engine
from fedstats.randomness import RandomSource

__all__ = ["run_demo"]

_FEATURES = ("age", "education_num", "capital_gain", "capital_loss", "hours_per_week")
EPSILON = 2.0


def _correct_predictions() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    train, test = load_adult("train"), load_adult("test")
    cols = list(_FEATURES)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
    model.fit(train[cols].to_numpy(np.float64), (train["income"] == ">50K").to_numpy())
    pred = model.predict(test[cols].to_numpy(np.float64))
    correct = (pred == (test["income"] == ">50K").to_numpy()).astype(np.float64)
    return test["sex"].to_numpy().astype(str), correct


def run_demo(randomness: RandomSource) -> list[dict[str, Any]]:
    """Two rows: the accuracy gap (Female - Male) measured with M_R and with M_L at epsilon 2."""
    sex, correct = _correct_predictions()
    rows = []
    for i, mech in enumerate(("R", "L")):
        res = measure_performance_gap(
            sex,
            correct,
            mechanism=mech,
            epsilon=EPSILON,
            pair=("Female", "Male"),
            engine=Engine(randomness=randomness.child("performance-gap", i)),
        )
        rows.append(
            {
                "name": f"accuracy gap F-M (M_{mech}, LDP)",
                "dataset": f"adult test, logistic regression, {res.n_clients} clients",
                "estimate": res.gap,
                "truth": res.truth,
                "error": res.error,
                "epsilon": res.true_loss,
                "delta": 0.0,
                "ci": res.ci,
                "allocation": res.allocation,
            }
        )
    return rows
