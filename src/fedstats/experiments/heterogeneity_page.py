"""The numbers of paper 000's reproduction page (:mod:`fedstats.experiments.heterogeneity`).

The page itself is the Jinja2 template ``templates/heterogeneity.md.j2``; this module only arranges the
results into rows and computes the findings' numbers (z-scores, ratios, coverage ranges).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["findings", "page_data"]


def page_data(doc: dict[str, Any], eps_grid: tuple[float, ...]) -> dict[str, Any]:
    """Arrange the numbers the results page shows into rows (``heterogeneity.md.j2`` only formats them).

    Parameters
    ----------
    doc : dict
        The reproduction's document (``tables``, ``figure``, ``samples``).
    eps_grid : tuple of float
        The figure's epsilons.

    Returns
    -------
    dict
        ``tables`` (Tables 1-3, 5), ``changes`` (Table 6) and ``findings`` (:func:`findings`).
    """
    tables = []
    for ds, design, delta in sorted({tuple(k.split("|")[:3]) for k in doc["tables"]}):
        rows = []
        for stat in ("dispersion", "q", "i2"):
            for qname, noise, field in (
                ("EMSE (distributed)", "distributed", f"{stat}_se"),
                ("TMSE (closed form)", "distributed", f"{stat}_tmse"),
                ("TMSE (paper's corollary)", "distributed", f"{stat}_paper_tmse"),
                ("CMSE (central noise)", "central", f"{stat}_se"),
                ("coverage of our 95% CI", "distributed", f"{stat}_cover"),
                ("coverage of paper's CI", "distributed", f"{stat}_paper_cover"),
            ):
                a = doc["tables"][f"{ds}|{design}|{delta}|analytic|{noise}"]
                c = doc["tables"][f"{ds}|{design}|{delta}|classical|{noise}"]
                ratio = a[field] / c[field] if c[field] != 0.0 and "cover" not in field else None
                rows.append(
                    {
                        "stat": stat,
                        "quantity": qname,
                        "agm": a[field],
                        "cgm": c[field],
                        "agm_sd": a[field + "_sd"],
                        "cgm_sd": c[field + "_sd"],
                        "ratio": ratio,
                    }
                )
        tables.append(
            {
                "ds": ds,
                "design": design,
                "delta": delta,
                "sample": doc["samples"][f"{ds}|{design}|10 labels equal"],
                "rows": rows,
            }
        )
    changes = []
    for ds, design, delta in sorted({tuple(k.split("|")[:3]) for k in doc["figure"]}):

        def emse(
            label: str, stat: str, ds: str = ds, design: str = design, delta: str = delta
        ) -> float:
            return float(
                np.mean(
                    [
                        doc["figure"][f"{ds}|{design}|{delta}|{label}|{e}"][f"{stat}_se"]
                        for e in eps_grid
                    ]
                )
            )

        rows = []
        for a, b in (
            ("10 labels equal", "10 labels 91:1"),  # (a) non-SH vs SH sample, same labels
            ("5 labels equal", "5 labels 96:1"),
            ("2 labels equal", "2 labels 99:1"),
            ("10 labels 91:1", "5 labels 96:1"),  # (b) fewer labels, SH kept
            ("5 labels 96:1", "2 labels 99:1"),
            ("10 labels equal", "5 labels equal"),  # (b) fewer labels, non-SH
            ("5 labels equal", "2 labels equal"),
        ):
            vals = [
                100.0 * (emse(b, s) - emse(a, s)) / emse(a, s) for s in ("dispersion", "q", "i2")
            ]
            rows.append({"from": a, "to": b, "change": vals})
        changes.append({"ds": ds, "design": design, "delta": delta, "rows": rows})
    return {"tables": tables, "changes": changes, "findings": findings(doc)}


def _z(a: dict[str, Any], b: dict[str, Any], field: str) -> float:
    """z-score of the difference of two cell means (independent repetitions)."""
    se = math.sqrt(a[field + "_sd"] ** 2 / a["reps"] + b[field + "_sd"] ** 2 / b["reps"])
    return (a[field] - b[field]) / se if se > 0 else 0.0


def findings(doc: dict[str, Any]) -> dict[str, Any]:
    """Compute the numbers behind the page's findings, from Tables 1-3 and 5.

    Parameters
    ----------
    doc : dict
        The reproduction's document; only its ``tables`` are read (cells keyed
        ``"{dataset}|{design}|{delta}|{analytic or classical}|{distributed or central}"``).

    Returns
    -------
    dict
        ``cells`` and ``max_z`` (distributed against central EMSE), ``agm_cgm`` (EMSE ratio range per
        statistic), ``theory`` (measured / theoretical dispersion MSE per cell, with its z-score),
        ``cover`` and ``paper_cover`` (coverage ranges of our and the paper's intervals).
    """
    tabs = doc["tables"]
    zs: list[float] = []
    cover: list[float] = []
    pcover: list[float] = []
    theory: list[dict[str, Any]] = []
    ratios: dict[str, list[float]] = {}
    for ds, design, delta in sorted({tuple(k.split("|")[:3]) for k in tabs}):
        for mech in ("analytic", "classical"):
            dist = tabs[f"{ds}|{design}|{delta}|{mech}|distributed"]
            cen = tabs[f"{ds}|{design}|{delta}|{mech}|central"]
            for st in ("dispersion", "q", "i2"):
                zs.append(abs(_z(dist, cen, f"{st}_se")))
                cover.append(dist[f"{st}_cover"])
                pcover.append(dist[f"{st}_paper_cover"])
            if dist["dispersion_tmse"] > 0:
                se = max(dist["dispersion_se_sd"] / math.sqrt(dist["reps"]), 1e-300)
                theory.append(
                    {
                        "label": f"{design}, delta {delta}, {mech}",
                        "ratio": dist["dispersion_se"] / dist["dispersion_tmse"],
                        "z": (dist["dispersion_se"] - dist["dispersion_tmse"]) / se,
                    }
                )
        for st in ("dispersion", "q", "i2"):
            a = tabs[f"{ds}|{design}|{delta}|analytic|distributed"][f"{st}_se"]
            c = tabs[f"{ds}|{design}|{delta}|classical|distributed"][f"{st}_se"]
            ratios.setdefault(st, []).append(a / c if c > 0 else math.nan)
    return {
        "cells": len(zs),
        "max_z": max(zs),
        "agm_cgm": {st: [min(rs), max(rs)] for st, rs in ratios.items()},
        "theory": theory,
        "cover": [min(cover), max(cover)],
        "paper_cover": [min(pcover), max(pcover)],
    }
