"""The cells of the validation table and how one cell's seeded Monte Carlo runs are computed.

A cell is one (analysis, method, data, epsilon, n) setting; each of its runs draws its own clients and its
own protocol randomness from ``RandomSource(seed).child("validation", cell.id, run)``, so a cell's numbers
depend only on the seed, the cell and the number of runs (not on the worker, the order or the other cells).
Every run calls the public one-call API (``fedstats.mean``, ``fedstats.variance``,
``fedstats.measure_performance_gap``, ``fedstats.heterogeneity``, ``fedstats.fed_chi2``) with an explicit
privacy choice and reads the result's fields defensively, so the table measures whatever the library
currently releases.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedstats.randomness import RandomSource

__all__ = [
    "ADULT_RANGES",
    "CHI2_API_CLIENTS",
    "CHI2_DELTA",
    "CHI2_TABLE",
    "EPSILONS",
    "HET_DELTA",
    "HET_RATIO",
    "Cell",
    "bitpushing_methods",
    "cell_grid",
    "run_cell",
]

EPSILONS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
"""The privacy levels of every analysis in the full table."""

ADULT_RANGES: dict[str, tuple[float, float]] = {
    "age": (0.0, 127.0),
    "education_num": (0.0, 31.0),
    "hours_per_week": (0.0, 127.0),
    "capital_gain": (0.0, 131071.0),
    "capital_loss": (0.0, 8191.0),
}
"""Declared ranges of the Adult columns: ``[0, 2^b - 1]`` for the fewest bits ``b`` that hold the column's
documented maximum (age 90, education_num 16, hours_per_week 99, capital_gain 99999, capital_loss 4356),
what ``fedstats mean adult -c COLUMN --bit-depth b`` declares. The data never leaves the range."""

ADULT_SIZES: tuple[int | None, ...] = (300, 1000, None)
"""Clients per bit-pushing run; None is the whole of Adult (train + test, 48,842 rows)."""

GAP_SIZES: tuple[int | None, ...] = (1000, None)
"""Clients per performance-gap run; None is every row of ``predictions.csv`` (16,281)."""

HET_RATIO = "4:1:1:1:1:1:1:1:1:1"
"""Label ratio of the heterogeneity clients (digits 0..9): the largest sample the ratio allows, drawn
afresh each run (about 580 of the 1,797 digits)."""
HET_DELTA = 1e-5
"""Delta of the heterogeneity runs (the CLI requires one with ``--epsilon``)."""

CHI2_TABLE = ("sex", "race")
"""Adult columns of the chi-square table (2 x 5)."""
CHI2_CLIENTS: tuple[int | None, ...] = (100, None)
"""Clients holding the Adult rows in the chi-square runs: 100 (the CLI's default, about 490 records each,
declared ``max_records = ceil(rows / 100)``) and None, one record per client (``max_records = 1``)."""
CHI2_NULL_REPLICATES = 199
"""Null replicates of each run's simulated p-value (the library's default is 999; 199 keeps 400 runs per
cell cheap, and the (1 + #) / (B + 1) p-value stays valid at any B)."""
CHI2_DELTA = 1e-6
"""Delta of the chi-square runs (``fedstats chi2 --epsilon E --delta 1e-6``)."""

CHI2_API_CLIENTS: tuple[int | None, ...] = (100, None)
"""Clients of the chi-square cells run through the public API (``fedstats.fed_chi2``, the engine and the
protocol with per-client tables): 100 (the CLI's default) at every epsilon, and one record per client
(48,842 clients) at epsilon 1 only (about 2 s a run: the engine's two rounds and the null simulation)."""
CHI2_API_ALL_RUNS = (100, 50)
"""Runs of the one-record-per-client API cells (independence, dependence)."""

FULL_RUNS = 400
QUICK_RUNS = 100


@dataclass(frozen=True)
class Cell:
    """One setting of the validation table.

    Attributes
    ----------
    id : str
        Unique, stable name (keys the cell's randomness).
    analysis : str
        ``"mean"``, ``"variance"``, ``"performance_gap"``, ``"heterogeneity"``, ``"chi2"`` (the release
        code through the fast path) or ``"chi2_api"`` (through ``fedstats.fed_chi2``).
    method : str
        The protocol or mechanism (``"adaptive"``, ``"basic"``, ``"R"``, ``"L"``, ...); for
        heterogeneity the noise (``"central"`` or ``"distributed"``, the demo's); for chi-square
        ``"independence"`` (one column permuted each run) or ``"dependence"`` (the real table).
    data : str
        The column or data set.
    epsilon : float
    n : int or None
        Clients per run; None for the whole data set.
    runs : int
        Monte Carlo runs.
    """

    id: str
    analysis: str
    method: str
    data: str
    epsilon: float
    n: int | None
    runs: int


def bitpushing_methods() -> tuple[str, str]:
    """The bit-pushing protocols of the table: the library's default first, then the other candidate.

    The default is :class:`~fedstats.analyses.bitpushing.config.BitPushingMeanConfig`'s (what the CLI,
    the API and the service run when no protocol is named); its runs name no method, so the report
    judges exactly what a user gets.
    """
    from fedstats.analyses.bitpushing.config import BitPushingMeanConfig

    default = BitPushingMeanConfig.method
    return default, "adaptive" if default != "adaptive" else "basic"


def _cid(*parts: Any) -> str:
    return "/".join(str(p) for p in parts)


def cell_grid(*, quick: bool, runs: int | None = None) -> list[Cell]:
    """The cells of the full table, or of the ``--quick`` slice.

    Parameters
    ----------
    quick : bool
        The slice run by ``make test`` (about a minute on one core), else the full table.
    runs : int, optional
        Runs per cell, >= 2 (default 400 full, 100 quick; heterogeneity and the chi-square power use
        fewer in the quick slice).

    Returns
    -------
    list of Cell
    """
    cells: list[Cell] = []

    def r(default: int) -> int:
        return runs if runs is not None else default

    if quick:
        for col, kind in (
            ("age", "mean"),
            ("capital_gain", "mean"),
            ("hours_per_week", "variance"),
        ):
            for method in bitpushing_methods():
                cells.append(
                    Cell(
                        _cid(kind, method, col, 1.0, 1000),
                        kind,
                        method,
                        col,
                        1.0,
                        1000,
                        r(QUICK_RUNS),
                    )
                )
        for mech in ("R", "L"):
            cells.append(
                Cell(
                    _cid("gap", mech, "predictions", 1.0, 1000),
                    "performance_gap",
                    mech,
                    "predictions",
                    1.0,
                    1000,
                    r(QUICK_RUNS),
                )
            )
        cells.append(
            Cell(
                _cid("het", "central", "digits", 1.0),
                "heterogeneity",
                "central",
                "digits",
                1.0,
                None,
                r(40),
            )
        )
        for method, runs_q in (("independence", QUICK_RUNS), ("dependence", 30)):
            cells.append(
                Cell(
                    _cid("chi2", method, "adult", 1.0, "all"),
                    "chi2",
                    method,
                    "adult:sex x race",
                    1.0,
                    None,
                    r(runs_q),
                )
            )
        cells += _default_cells(quick=True, runs=runs)
        return cells
    for kind in ("mean", "variance"):
        for col in ADULT_RANGES:
            for method in bitpushing_methods():
                for eps in EPSILONS:
                    for n in ADULT_SIZES:
                        cells.append(
                            Cell(
                                _cid(kind, method, col, eps, n or "all"),
                                kind,
                                method,
                                col,
                                eps,
                                n,
                                r(FULL_RUNS),
                            )
                        )
    for mech in ("R", "L"):
        for eps in EPSILONS:
            for n in GAP_SIZES:
                cells.append(
                    Cell(
                        _cid("gap", mech, "predictions", eps, n or "all"),
                        "performance_gap",
                        mech,
                        "predictions",
                        eps,
                        n,
                        r(FULL_RUNS),
                    )
                )
    for eps in EPSILONS:
        cells.append(
            Cell(
                _cid("het", "central", "digits", eps),
                "heterogeneity",
                "central",
                "digits",
                eps,
                None,
                r(FULL_RUNS),
            )
        )
    for eps in EPSILONS:
        for n in CHI2_CLIENTS:
            for method, runs_f in (("independence", FULL_RUNS), ("dependence", FULL_RUNS // 2)):
                cells.append(
                    Cell(
                        _cid("chi2", method, "adult", eps, n or "all"),
                        "chi2",
                        method,
                        "adult:sex x race",
                        eps,
                        n,
                        r(runs_f),
                    )
                )
    cells += _default_cells(quick=False, runs=runs)
    return cells


def _default_cells(*, quick: bool, runs: int | None) -> list[Cell]:
    """The cells of the defaults the report covers since issue 43, after the other cells.

    Heterogeneity with distributed noise (the demo's) and the chi-square through the public API
    (``fedstats.fed_chi2``).
    """

    def r(default: int) -> int:
        return runs if runs is not None else default

    eps_grid = (1.0,) if quick else EPSILONS
    cells = [
        Cell(
            _cid("het", "distributed", "digits", eps),
            "heterogeneity",
            "distributed",
            "digits",
            eps,
            None,
            r(40 if quick else FULL_RUNS),
        )
        for eps in eps_grid
    ]
    for eps in eps_grid:
        for method, runs_f, runs_q in (
            ("independence", FULL_RUNS, QUICK_RUNS // 2),
            ("dependence", FULL_RUNS // 2, 30),
        ):
            cells.append(
                Cell(
                    _cid("chi2-api", method, "adult", eps, 100),
                    "chi2_api",
                    method,
                    "adult:sex x race",
                    eps,
                    100,
                    r(runs_q if quick else runs_f),
                )
            )
    if not quick:
        for method, runs_f in zip(("independence", "dependence"), CHI2_API_ALL_RUNS, strict=True):
            cells.append(
                Cell(
                    _cid("chi2-api", method, "adult", 1.0, "all"),
                    "chi2_api",
                    method,
                    "adult:sex x race",
                    1.0,
                    None,
                    r(runs_f),
                )
            )
    return cells


# -- data (loaded once per process) ----------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def _adult(data_dir: str | None) -> Any:
    from fedstats.datasets.loaders import load_adult

    return load_adult("all", data_dir=data_dir)


@functools.lru_cache(maxsize=8)
def _adult_column(data_dir: str | None, column: str) -> np.ndarray:
    return np.asarray(_adult(data_dir)[column].to_numpy(), dtype=np.float64)


@functools.lru_cache(maxsize=2)
def _adult_codes(data_dir: str | None) -> tuple[np.ndarray, int, np.ndarray, int]:
    import pandas as pd

    df = _adult(data_dir)
    cx, ux = pd.factorize(df[CHI2_TABLE[0]], sort=True)
    cy, uy = pd.factorize(df[CHI2_TABLE[1]], sort=True)
    return np.asarray(cx, np.int64), len(ux), np.asarray(cy, np.int64), len(uy)


@functools.lru_cache(maxsize=1)
def _predictions() -> tuple[np.ndarray, np.ndarray]:
    import pandas as pd

    from fedstats.datasets.examples import example

    df = pd.read_csv(example("predictions"))
    return df["sex"].to_numpy(dtype=str), df["correct"].to_numpy(dtype=np.float64)


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from fedstats.experiments.heterogeneity_data import load_image_vectors

    x, y, _ = load_image_vectors("digits")
    assert y is not None
    return x, y


# -- one run's record --------------------------------------------------------------------------------


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v


def _record(
    est: Any, ci: Any, truth: Any, details: Any = None, unclipped: Any = None
) -> dict[str, Any]:
    """What a run contributes: released estimate, unclipped estimate (if reported), interval, truth.

    Bit pushing releases its unbiased estimate and reports no ``unclipped_estimate`` (its clipped
    value is ``details["clipped_estimate"]``), so its bias is judged on the released estimate.
    """
    if unclipped is None and isinstance(details, dict):
        unclipped = details.get("unclipped_estimate")
    lo = hi = None
    if ci is not None:
        try:
            lo, hi = (_num(ci[0]), _num(ci[1]))
        except (TypeError, IndexError):
            lo = hi = None
    return {
        "estimate": _num(est),
        "unclipped": _num(unclipped),
        "lo": lo,
        "hi": hi,
        "truth": _num(truth),
    }


def _sample(rs: RandomSource, size: int, n: int | None) -> np.ndarray:
    """Rows of one run: ``n`` drawn without replacement (all rows, shuffled, when n is None)."""
    rng = rs.generator("validation", "sample")
    if n is None or n >= size:
        return np.asarray(rng.permutation(size), dtype=np.int64)
    # a third of a bit-pushing run's time went into permuting all 48,842 rows to keep 300
    return np.asarray(rng.choice(size, size=n, replace=False), dtype=np.int64)


# -- runners -----------------------------------------------------------------------------------------

Records = dict[str, list[dict[str, Any]]]


def _bitpushing(cell: Cell, rs: RandomSource, data_dir: str | None) -> dict[str, dict[str, Any]]:
    import fedstats

    col = _adult_column(data_dir, cell.data)
    lo, hi = ADULT_RANGES[cell.data]
    enc = fedstats.BitEncoding(lo, hi)
    x = col[_sample(rs, col.size, cell.n)]
    fn = fedstats.mean if cell.analysis == "mean" else fedstats.variance
    # the default protocol's runs name no method: they run whatever the library's default is
    named = {} if cell.method == bitpushing_methods()[0] else {"method": cell.method}
    res = fn(x, enc, epsilon=cell.epsilon, truth=False, shuffle=False, randomness=rs, **named)
    truth = float(np.mean(x)) if cell.analysis == "mean" else float(np.var(x))
    return {cell.analysis: _record(res.estimate, res.ci, truth, res.details)}


def _gap(cell: Cell, rs: RandomSource, data_dir: str | None) -> dict[str, dict[str, Any]]:  # noqa: ARG001
    import fedstats

    g, v = _predictions()
    rows = _sample(rs, g.size, cell.n)
    res = fedstats.measure_performance_gap(
        g[rows],
        v[rows],
        mechanism=cell.method,
        epsilon=cell.epsilon,
        estimate_sizes=True,
        randomness=rs,
    )
    return {"gap": _record(res.estimate, res.ci, res.truth, res.details)}


def _het(cell: Cell, rs: RandomSource, data_dir: str | None) -> dict[str, dict[str, Any]]:  # noqa: ARG001
    import fedstats
    from fedstats.experiments.heterogeneity_data import sample_by_label_ratio

    x, y = _digits()
    rows = sample_by_label_ratio(
        y, HET_RATIO, fraction=None, rng=rs.generator("validation", "sample")
    )
    res = fedstats.heterogeneity(
        x[rows], epsilon=cell.epsilon, delta=HET_DELTA, noise=cell.method, randomness=rs
    )
    out: dict[str, dict[str, Any]] = {}
    for name in ("dispersion", "q", "i2"):
        st = getattr(res, name, None)
        if st is None:
            continue
        ci = getattr(st, "interval", None) or getattr(st, "ci", None)
        unclipped = getattr(st, "unclipped_estimate", None)
        if unclipped is None and isinstance(getattr(res, "details", None), dict):
            unclipped = res.details.get(f"{name}_unclipped_estimate")
        out[name] = _record(st.estimate, ci, st.truth, getattr(st, "details", None), unclipped)
        out[name]["n"] = float(len(rows))
    return out


def _chi2(cell: Cell, rs: RandomSource, data_dir: str | None) -> dict[str, dict[str, Any]]:
    """One FED-chi^2 run with central DP through the fast path (the same release code as ``fed_chi2``).

    :func:`~fedstats.analyses.chi2.simulate.simulate_fed_chi2` runs both rounds' discrete Gaussian noise,
    the sketch, the decoder and the simulated null p-value exactly as the protocol does, on the summed
    table (the split of records over clients matters only with dropout, and there is none here).
    """
    from fedstats.analyses.chi2.simulate import simulate_fed_chi2

    cx, mx, cy, my = _adult_codes(data_dir)
    rows = cx.size
    if cell.method == "independence":  # the real margins, the dependence removed
        cy = cy[np.asarray(rs.generator("validation", "permute").permutation(rows), dtype=np.int64)]
    table = np.bincount(cx * my + cy, minlength=mx * my).reshape(mx, my)
    res = simulate_fed_chi2(
        table,
        cell.n or rows,
        epsilon=cell.epsilon,
        delta=CHI2_DELTA,
        null_replicates=CHI2_NULL_REPLICATES,
        randomness=rs,
    )
    truth = getattr(res, "truth", None)
    if truth is None:
        truth = getattr(res, "exact_statistic", None)
    rec = _record(res.estimate, res.ci, truth, res.details)
    rec.update(
        p_value=_num(getattr(res, "p_value", None)),
        p_value_sketch=_num(getattr(res, "p_value_sketch", None)),
        rejected=bool(getattr(res, "rejected", False)),
        exact_p_value=_num(getattr(res, "exact_p_value", None)),
    )
    return {"statistic": rec}


def _chi2_api(cell: Cell, rs: RandomSource, data_dir: str | None) -> dict[str, dict[str, Any]]:
    """One FED-chi^2 run with central DP through the public API, ``fedstats.fed_chi2``.

    The Adult rows (one column permuted under independence) are dealt to ``cell.n`` clients at random
    (about 490 records each at 100 clients, declared ``max_records = ceil(rows / n)``), or one record per
    client; the engine runs both rounds over the clients' tables. The projection seed is drawn from the
    run's randomness (the commit-then-reveal agreement among 48,842 clients takes 15 s and does not change
    the statistics).
    """
    import fedstats
    from fedstats.analyses.chi2.client import record_tables

    cx, mx, cy, my = _adult_codes(data_dir)
    rows = cx.size
    if cell.method == "independence":
        cy = cy[np.asarray(rs.generator("validation", "permute").permutation(rows), dtype=np.int64)]
    if cell.n is None:
        tables, cap = record_tables(cx, cy, (mx, my)), 1
    else:
        who = np.asarray(rs.generator("validation", "deal").permutation(rows), dtype=np.int64)
        tables = np.zeros((cell.n, mx, my), dtype=np.int64)
        np.add.at(tables, (who % cell.n, cx, cy), 1)
        cap = math.ceil(rows / cell.n)
    seed = int(rs.generator("validation", "projection").integers(0, 2**62))
    res = fedstats.fed_chi2(
        tables,
        epsilon=cell.epsilon,
        delta=CHI2_DELTA,
        max_records=cap,
        null_replicates=CHI2_NULL_REPLICATES,
        projection_seed=seed,
        randomness=rs,
    )
    rec = _record(res.estimate, res.ci, getattr(res, "exact_statistic", None), res.details)
    rec.update(
        p_value=_num(getattr(res, "p_value", None)),
        p_value_sketch=_num(getattr(res, "p_value_sketch", None)),
        rejected=bool(getattr(res, "rejected", False)),
        exact_p_value=_num(getattr(res, "exact_p_value", None)),
        power=_num((res.details.get("power") or {}).get("power")),
    )
    return {"statistic": rec}


_RUNNERS: dict[str, Callable[[Cell, RandomSource, str | None], dict[str, dict[str, Any]]]] = {
    "mean": _bitpushing,
    "variance": _bitpushing,
    "performance_gap": _gap,
    "heterogeneity": _het,
    "chi2": _chi2,
    "chi2_api": _chi2_api,
}


def run_cell(cell: Cell, seed: int, data_dir: str | Path | None = None) -> Records:
    """Run one cell's Monte Carlo: every run's record, per estimated quantity (target).

    Parameters
    ----------
    cell : Cell
    seed : int
        The table's seed; run ``r`` uses ``RandomSource(seed).child("validation", cell.id, r)``.
    data_dir : str or path-like, optional
        Where the real data sets are (default: the usual search, then the embedded copies).

    Returns
    -------
    dict of str to list of dict
        Target name (``"mean"``, ``"gap"``, ``"dispersion"``, ``"statistic"``, ...) to one record per run.
    """
    runner = _RUNNERS[cell.analysis]
    dd = None if data_dir is None else str(data_dir)
    base = RandomSource(seed=seed)
    out: Records = {}
    for run in range(cell.runs):
        recs = runner(cell, base.child("validation", cell.id, run), dd)
        for target, rec in recs.items():
            out.setdefault(target, []).append(rec)
    return out


def finite(xs: list[float | None]) -> np.ndarray:
    """The finite values of ``xs`` as an array."""
    a = np.array([x for x in xs if x is not None and math.isfinite(x)], dtype=np.float64)
    return a
