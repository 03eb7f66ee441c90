"""FED-chi^2 with rare categories: name them, merge them, and the test's power at a stated effect (ours).

Under central DP the round-2 noise is calibrated to ``c = max_j ||P_j|| / sqrt(vbar_j)``
(:mod:`fedstats.analyses.chi2.privacy`), so its variance grows as ``1 / min_j vbar_j``: one rare category
(``vbar_xy = v_x v_y / v`` is small in its whole row) multiplies the noise of the released statistic by
the ratio of the next-smallest marginal to its own. On a strongly dependent census table (Pearson 2,732 on
126 dof) one 16-person category drives the power to 0-2.5% at epsilon 1; merging the categories under 500
people gives 0.85 (issue 43).

* :func:`rare_categories` names the categories whose released marginal is below :data:`RARE_RATIO` times
  the median of their variable's marginals, with the factor by which each multiplies the noise variance;
* :func:`merge_groups` pools the categories of one variable below ``merge_below`` people into one category
  (after round 1, from the marginals the server released: with DP the noisy ones, so the choice is
  post-processing and costs no budget; without DP the exact ones, which the server learns anyway). Merging
  keeps the null: if ``X`` and ``Y`` are independent so are ``f(X)`` and ``Y``. The test is then about the
  merged table (its dof, its statistic), which the result reports;
* :func:`effect_probabilities` is the alternative at Cohen's effect size ``w`` (Cohen 1988, Sec. 7.2:
  ``w^2 = sum (p1 - p0)^2 / p0``; 0.1 is "small") with the released margins, behind the power the
  protocol reports (:func:`fedstats.analyses.chi2.null.simulate_null`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedstats._validation import check_int, check_real

__all__ = [
    "POWER_EFFECT_W",
    "POWER_WARN",
    "RARE_RATIO",
    "effect_probabilities",
    "merge_groups",
    "merge_tables",
    "merged_details",
    "power_warning",
    "rare_categories",
    "rare_warnings",
]

RARE_RATIO = 0.1
"""A category is rare when its released marginal is below this fraction of its variable's median one."""

POWER_EFFECT_W = 0.1
"""The stated effect of the power the DP test reports: Cohen's ``w = 0.1`` (a "small" effect)."""

POWER_WARN = 0.5
"""A result warns when its test's power at :data:`POWER_EFFECT_W` is below this."""


def rare_categories(marginals: Any, ratio: float = RARE_RATIO) -> list[tuple[int, float, float]]:
    """The rare categories of one variable: released marginal below ``ratio`` times the median.

    Parameters
    ----------
    marginals : array_like of float, shape (m,)
        One variable's released marginals (> 0).
    ratio : float
        In (0, 1].

    Returns
    -------
    list of (int, float, float)
        ``(index, count, factor)`` in increasing count: ``factor`` is the smallest non-rare marginal over
        ``count``, about how much the category multiplies the round-2 noise variance (1 / min vbar).
    """
    r = check_real("ratio", ratio, low=0.0, high=1.0, low_open=True)
    v = np.asarray(marginals, dtype=np.float64)
    cut = r * float(np.median(v))
    rare = np.flatnonzero(v < cut)
    if rare.size == 0 or rare.size == v.size:
        return []
    floor = float(v[v >= cut].min())
    order = rare[np.argsort(v[rare], kind="stable")]
    return [(int(i), float(v[i]), floor / max(float(v[i]), 1.0)) for i in order]


def merge_groups(marginals: Any, merge_below: int) -> np.ndarray:
    """Map one variable's categories to merged ones: those under ``merge_below`` people pooled into one.

    The pooled category comes last; if its total is still under ``merge_below`` (a single rare category,
    say) it absorbs the smallest remaining category, and so on. Nothing is merged when fewer than two
    categories would remain.

    Parameters
    ----------
    marginals : array_like of float, shape (m,)
        Released marginals of one variable (noisy under DP).
    merge_below : int
        Threshold in people (records), >= 0; 0 merges nothing.

    Returns
    -------
    numpy.ndarray
        int64 ``(m,)``: the merged index of each category, in ``[0, g)``; the identity when nothing merges.
    """
    thr = check_int("merge_below", merge_below, low=0)
    v = np.asarray(marginals, dtype=np.float64)
    m = v.size
    ident = np.arange(m, dtype=np.int64)
    pool = [int(i) for i in np.flatnonzero(v < thr)]
    if thr == 0 or not pool:
        return ident
    rest = sorted((int(i) for i in np.flatnonzero(v >= thr)), key=lambda i: (v[i], i))
    while rest and float(v[pool].sum()) < thr:
        pool.append(rest.pop(0))
    if len(pool) < 2 or len(rest) < 1:
        return ident
    kept = sorted(rest)
    out = np.empty(m, dtype=np.int64)
    out[kept] = np.arange(len(kept))
    out[pool] = len(kept)
    return out


def merge_tables(tables: np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray:
    """Sum the cells of ``(n, m_x, m_y)`` tables into the merged categories ``groups = (gx, gy)``.

    Parameters
    ----------
    tables : numpy.ndarray
        Integer ``(n, m_x, m_y)`` (or ``(m_x, m_y)``).
    groups : (sequence of int, sequence of int)
        Merged index of each row and of each column (:func:`merge_groups`).

    Returns
    -------
    numpy.ndarray
        int64 ``(n, g_x, g_y)`` (or ``(g_x, g_y)``).
    """
    t = np.asarray(tables, dtype=np.int64)
    gx, gy = (np.asarray(g, dtype=np.int64) for g in groups)
    one = (
        np.eye(int(gx.max()) + 1, dtype=np.int64)[gx],
        np.eye(int(gy.max()) + 1, dtype=np.int64)[gy],
    )
    return np.asarray(np.einsum("...ij,ia,jb->...ab", t, one[0], one[1]), dtype=np.int64)


def effect_probabilities(vx: Any, vy: Any, w: float = POWER_EFFECT_W) -> tuple[np.ndarray, float]:
    """Cell probabilities with the margins of ``vx``, ``vy`` and Cohen's effect ``w`` of dependence.

    ``p1 = p0 (1 + kappa a_x b_y)`` with ``p0 = p_x p_y``, ``a`` and ``b`` centred and scaled under the
    margins (``sum p_x a = 0``, ``sum p_x a^2 = 1``; ``a`` the centred category index), so the margins are
    kept and ``w = kappa``; cells that would go negative are set to 0 and ``w`` is recomputed.

    Parameters
    ----------
    vx, vy : array_like of float
        Row and column marginals (> 0), shapes ``(m_x,)`` and ``(m_y,)``.
    w : float
        Cohen's effect size, in (0, 1].

    Returns
    -------
    (numpy.ndarray, float)
        float64 ``(m_x * m_y,)`` probabilities (row-major) and the effect size they have.
    """
    ww = check_real("w", w, low=0.0, high=1.0, low_open=True)
    px = np.asarray(vx, dtype=np.float64) / float(np.sum(vx))
    py = np.asarray(vy, dtype=np.float64) / float(np.sum(vy))

    def score(p: np.ndarray) -> np.ndarray:
        a = np.arange(p.size, dtype=np.float64)
        a -= float(p @ a)
        return np.asarray(a / np.sqrt(float(p @ (a * a))))

    p0 = np.outer(px, py)
    p1 = np.maximum(p0 * (1.0 + ww * np.outer(score(px), score(py))), 0.0)
    p1 /= p1.sum()
    got = float(np.sqrt(((p1 - p0) ** 2 / p0).sum()))
    return p1.ravel(), got


def _name(labels: Sequence[Sequence[Any]] | None, axis: int, index: int) -> str:
    if labels is not None and index < len(labels[axis]):
        return str(labels[axis][index])
    return f"#{index}"


def rare_warnings(
    vx: Any,
    vy: Any,
    labels: Sequence[Sequence[Any]] | None = None,
    merged: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[str]:
    """One warning per variable with rare categories (:func:`rare_categories`), naming them.

    Parameters
    ----------
    vx, vy : array_like of float
        Released row and column marginals.
    labels : (sequence, sequence), optional
        Category names (default ``#index``).
    merged : (numpy.ndarray, numpy.ndarray), optional
        :func:`merge_groups` of the rows and the columns: categories merged with others are not named.

    Returns
    -------
    list of str
    """
    out = []
    for axis, (var, v) in enumerate((("x", vx), ("y", vy))):
        rare = rare_categories(v)
        if merged is not None:
            g = np.asarray(merged[axis])
            rare = [r for r in rare if int((g == g[r[0]]).sum()) == 1]
        if not rare:
            continue
        names = ", ".join(
            f"{_name(labels, axis, i)!r} (released count {count:.0f}, noise variance x{factor:.3g})"
            for i, count, factor in rare
        )
        out.append(
            f"rare categories of {var}: {names}: the DP test's round-2 noise grows as 1/sqrt of the "
            "smallest expected count, so they cost it power; merge them (merge_below, --merge-below N)"
        )
    return out


def merged_details(
    groups: tuple[np.ndarray, np.ndarray], labels: Sequence[Sequence[Any]] | None = None
) -> dict[str, list[list[str]]]:
    """The merged categories: per variable, each merged category of more than one original.

    Parameters
    ----------
    groups : (numpy.ndarray, numpy.ndarray)
        :func:`merge_groups` of the rows and of the columns.
    labels : (sequence, sequence), optional
        Category names (default ``#index``).

    Returns
    -------
    dict
        ``{"x": [[name, ...], ...], "y": [...]}``.
    """
    out: dict[str, list[list[str]]] = {}
    for axis, (var, g) in enumerate((("x", groups[0]), ("y", groups[1]))):
        g = np.asarray(g)
        out[var] = [
            [_name(labels, axis, int(i)) for i in np.flatnonzero(g == k)]
            for k in range(int(g.max()) + 1)
            if int((g == k).sum()) > 1
        ]
    return out


def power_warning(
    power: tuple[float, float], replicates: int, level: float, details: dict[str, Any]
) -> list[str]:
    """Record the test's power in ``details["power"]``; a warning when it is below :data:`POWER_WARN`.

    Parameters
    ----------
    power : (float, float)
        ``(w, power)`` from the null simulation.
    replicates : int
        ``B`` (the power's Monte Carlo error is ``sqrt(p (1 - p) / B)``).
    level : float
        The test's level.
    details : dict
        The result's details (written).

    Returns
    -------
    list of str
        Empty, or one warning.
    """
    w, p = power
    details["power"] = {
        "effect_w": w,
        "power": p,
        "level": level,
        "replicates": replicates,
        "mc_error": float(np.sqrt(p * (1.0 - p) / replicates)),
    }
    if p >= POWER_WARN:
        return []
    return [
        f"the test's power is {p:.2f} at a small effect (Cohen's w = {w:.2g}, level {level:g}): below "
        f"{POWER_WARN}, so not rejecting independence says little; more clients (fewer records each, "
        "max_records), a larger epsilon or merging rare categories (merge_below) raise it"
    ]
