"""Build the example files shipped in ``fedstats/datasets/example_files/`` from the embedded UCI Adult data.

Run from a source checkout to regenerate them (the output is deterministic: no randomness is used)::

    python -m fedstats.datasets._build_examples            # writes into the package folder
    python -m fedstats.datasets._build_examples --out DIR  # writes somewhere else

then update the SHA-256 sums and sizes in :data:`fedstats.datasets.examples.EXAMPLES` (the command prints
them). What each file holds and how it is made:

``predictions.csv``
    The 16,281 people of Adult's test split, one row per client, in file order: ``sex``, ``race``,
    ``correct`` (1 when a logistic regression fitted on the 32,561 rows of the train split predicts the
    person's income class right, else 0) and ``confidence`` (the probability the model gives to the
    person's true class, 4 decimals). The model: an intercept, the standardized numeric columns ``age``,
    ``education_num``, ``log1p(capital_gain)``, ``log1p(capital_loss)``, ``hours_per_week`` (means and
    standard deviations of the train split) and one-hot ``workclass``, ``marital_status``, ``occupation``,
    ``relationship``, ``race``, ``sex`` (categories of the train split, sorted), fitted by Newton's method
    (iteratively reweighted least squares) with an L2 penalty of 1 on every weight but the intercept.
``client_tables.csv``
    All 48,842 Adult rows (train then test) held by 50 clients, row ``i`` by client ``i mod 50``, as a
    count table: one row per client and observed combination of ``education``, ``sex`` and ``income``,
    with its ``count`` (what ``fedstats chi2``/``entropy`` read with ``--client-column client
    --count-column count``).
``client_vectors.csv``
    Every 8th person of the test split (rows 0, 8, 16, ...: 2,036 clients), one vector per client with
    entries in [0, 1]: ``age`` ((age - 17) / 73), ``education_num`` ((years - 1) / 15),
    ``hours_per_week`` ((hours - 1) / 98), ``male`` (0/1), and ``label`` (1 for income >50K), what
    ``fedstats heterogeneity`` reads from a CSV. The scales are Adult's documented ranges, not the sample's.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from fedstats._io import atomic_write_text
from fedstats.datasets.loaders import load_adult

__all__ = [
    "CATEGORICAL",
    "NUMERIC",
    "build_client_tables",
    "build_client_vectors",
    "build_predictions",
    "design_matrix",
    "fit_logistic",
    "main",
    "write_examples",
]

NUMERIC = ("age", "education_num", "capital_gain", "capital_loss", "hours_per_week")
"""Numeric features of the model (capital gains and losses through ``log1p``)."""

CATEGORICAL = ("workclass", "marital_status", "occupation", "relationship", "race", "sex")
"""Categorical features of the model (one-hot, categories of the train split)."""

N_TABLE_CLIENTS = 50
"""Clients of ``client_tables.csv`` (row ``i`` belongs to client ``i mod 50``)."""

VECTOR_STRIDE = 8
"""``client_vectors.csv`` keeps every 8th row of the test split."""

_PACKAGE_DIR = Path(__file__).resolve().parent / "example_files"


def _numeric(df: pd.DataFrame) -> np.ndarray:
    cols = []
    for c in NUMERIC:
        v = df[c].to_numpy(dtype=np.float64)
        cols.append(np.log1p(v) if c.startswith("capital") else v)
    return np.column_stack(cols)


def design_matrix(df: pd.DataFrame, reference: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Model matrix of ``df`` with the scales and categories of ``reference`` (the train split).

    Parameters
    ----------
    df : pandas.DataFrame
        Adult rows (columns of :data:`fedstats.datasets.ADULT_COLUMNS`).
    reference : pandas.DataFrame
        The rows whose means, standard deviations and categories define the features.

    Returns
    -------
    (numpy.ndarray, list of str)
        ``(n, 1 + 5 + n_categories)`` float64 matrix (intercept first, then standardized numerics, then
        one-hot columns; a category absent from ``reference`` gets all zeros) and the column names.
    """
    ref = _numeric(reference)
    mu, sd = ref.mean(axis=0), ref.std(axis=0)
    parts = [np.ones((df.shape[0], 1)), (_numeric(df) - mu) / sd]
    names = ["intercept", *NUMERIC]
    for c in CATEGORICAL:
        levels = sorted(reference[c].unique())
        values = df[c].to_numpy()
        parts.append(np.column_stack([(values == lv).astype(np.float64) for lv in levels]))
        names.extend(f"{c}={lv}" for lv in levels)
    return np.hstack(parts), names


def fit_logistic(
    x: np.ndarray, y: np.ndarray, *, penalty: float = 1.0, tol: float = 1e-10, max_iter: int = 100
) -> np.ndarray:
    r"""L2-penalised logistic regression by Newton's method (IRLS); deterministic.

    Minimises :math:`-\\sum_i [y_i \\log p_i + (1 - y_i) \\log(1 - p_i)] + \\frac{\\lambda}{2}
    \\sum_{j \\ge 1} w_j^2` with :math:`p = \\sigma(Xw)` (the intercept, column 0, is not penalised).

    Parameters
    ----------
    x : numpy.ndarray, shape (n, k)
        Model matrix, intercept in column 0.
    y : numpy.ndarray, shape (n,)
        Labels in {0, 1}.
    penalty : float
        :math:`\\lambda \\ge 0`.
    tol : float
        Stop when the largest Newton step is below this.
    max_iter : int
        At most this many Newton steps.

    Returns
    -------
    numpy.ndarray, shape (k,)
        The weights.
    """
    k = x.shape[1]
    reg = np.full(k, penalty)
    reg[0] = 0.0
    w = np.zeros(k)
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        grad = x.T @ (y - p) - reg * w
        hess = (x * (p * (1.0 - p))[:, None]).T @ x + np.diag(reg)
        step = np.linalg.solve(hess, grad)
        w = w + step
        if float(np.max(np.abs(step))) < tol:
            break
    return w


def _income(df: pd.DataFrame) -> np.ndarray:
    return np.asarray(df["income"].to_numpy() == ">50K", dtype=np.int64)


def build_predictions(train: pd.DataFrame, test: pd.DataFrame) -> pd.DataFrame:
    """``predictions.csv``: one row per test person with the group, correctness and confidence.

    Returns
    -------
    pandas.DataFrame
        Columns ``sex``, ``race`` (str), ``correct`` (int64 in {0, 1}), ``confidence`` (float64 in [0, 1],
        rounded to 4 decimals), one row per row of ``test`` in its order.
    """
    x_train, _ = design_matrix(train, train)
    w = fit_logistic(x_train, _income(train).astype(np.float64))
    x_test, _ = design_matrix(test, train)
    p = 1.0 / (1.0 + np.exp(-(x_test @ w)))
    y = _income(test)
    correct = ((p >= 0.5).astype(np.int64) == y).astype(np.int64)
    confidence = np.round(np.where(y == 1, p, 1.0 - p), 4)
    return pd.DataFrame(
        {
            "sex": test["sex"].to_numpy(),
            "race": test["race"].to_numpy(),
            "correct": correct,
            "confidence": confidence,
        }
    )


def build_client_tables(adult: pd.DataFrame) -> pd.DataFrame:
    """``client_tables.csv``: counts of (education, sex, income) per client, row ``i`` at client ``i mod 50``.

    Returns
    -------
    pandas.DataFrame
        Columns ``client`` (int64 in [0, 50)), ``education``, ``sex``, ``income`` (str) and ``count``
        (int64 >= 1), sorted by client then the categories; the counts sum to ``adult.shape[0]``.
    """
    cols = ["education", "sex", "income"]
    frame = adult[cols].copy()
    frame.insert(0, "client", np.arange(adult.shape[0], dtype=np.int64) % N_TABLE_CLIENTS)
    out = frame.groupby(["client", *cols], sort=True).size().reset_index(name="count")
    out["count"] = out["count"].astype(np.int64)
    return out


def build_client_vectors(test: pd.DataFrame) -> pd.DataFrame:
    """``client_vectors.csv``: every 8th test person as a vector in [0, 1]^4 with the income label.

    Returns
    -------
    pandas.DataFrame
        Columns ``age``, ``education_num``, ``hours_per_week`` (float64 in [0, 1], 4 decimals), ``male``
        (int64 0/1) and ``label`` (int64, 1 for >50K).
    """
    rows = test.iloc[::VECTOR_STRIDE]
    return pd.DataFrame(
        {
            "age": np.round((rows["age"].to_numpy() - 17) / 73.0, 4),
            "education_num": np.round((rows["education_num"].to_numpy() - 1) / 15.0, 4),
            "hours_per_week": np.round((rows["hours_per_week"].to_numpy() - 1) / 98.0, 4),
            "male": (rows["sex"].to_numpy() == "Male").astype(np.int64),
            "label": _income(rows),
        }
    )


def _csv(df: pd.DataFrame) -> str:
    return str(df.to_csv(index=False, lineterminator="\n"))


def write_examples(out: Path | str = _PACKAGE_DIR) -> dict[str, tuple[int, str]]:
    """Build every example file from the embedded Adult data and write them atomically into ``out``.

    Parameters
    ----------
    out : path-like
        Target folder (created if needed); default the package's ``example_files/``.

    Returns
    -------
    dict
        File name -> (size in bytes, SHA-256 hex) of what was written.
    """
    train, test = load_adult("train"), load_adult("test")
    texts = {
        "predictions.csv": _csv(build_predictions(train, test)),
        "client_tables.csv": _csv(build_client_tables(pd.concat([train, test], ignore_index=True))),
        "client_vectors.csv": _csv(build_client_vectors(test)),
    }
    written = {}
    for name, text in texts.items():
        data = text.encode("utf-8")
        atomic_write_text(Path(out) / name, text)
        written[name] = (len(data), hashlib.sha256(data).hexdigest())
    return written


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m fedstats.datasets._build_examples [--out DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=_PACKAGE_DIR, help="target folder")
    args = parser.parse_args(argv)
    for name, (size, sha) in write_examples(args.out).items():
        print(f"{name}\t{size}\t{sha}")


if __name__ == "__main__":
    main()
