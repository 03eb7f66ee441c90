"""What the results page shows: the numbers of the document arranged for ``templates/fed_chi2.md.j2``.

The template holds the text and the tables' layout; this module only selects and averages (means over
datasets, the rows of each table in order), so the page has no arithmetic of its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedstats.experiments.synthetic_tables import GENERATORS

__all__ = ["page_context"]


def _avg(
    fig1: dict[str, Any], dec: str, field: str, d: float, ell: int, names: list[str] | None = None
) -> float:
    keys = names if names is not None else list(fig1)
    return float(np.mean([fig1[n]["cells"][f"drop={d}|l={ell}"][dec][field] for n in keys]))


def page_context(doc: dict[str, Any]) -> dict[str, Any]:
    """Arrange the values the page template reads from the results document.

    Parameters
    ----------
    doc : dict
        The document built by :func:`fedstats.experiments.fed_chi2.run` (``config``, ``fig1``, ``fig5``,
        ``feature_selection``, ``fdr``, ``paper_numbers``).

    Returns
    -------
    dict
        ``ell50`` (the ``l`` of the headline table), ``d0``/``d_hi``/``ell_hi``, ``fig1_rows`` (per dataset
        at ``ell50`` without dropout), ``error_grid`` (mean error per dropout and ``l``, both decoders),
        ``avg`` (the averages quoted in the text), ``independent`` (the independent generator's rates, or
        None), ``fig5_l`` and ``fig5_rows``, ``fs_rows`` (sorted by l, dropout, decoder), ``fdr_rows``
        (Table 3 with the paper's counts) and ``fdr_mos`` (mean-of-squares FDRs).
    """
    st = doc["config"]
    ls = list(st["l_grid"])
    drops = list(st["dropouts"])
    fig1 = doc["fig1"]
    ell50 = 50 if 50 in ls else ls[len(ls) // 2]
    d0, d_hi, ell_hi = drops[0], drops[-1], ls[-1]
    ctx: dict[str, Any] = {"ell50": ell50, "d0": d0, "d_hi": d_hi, "ell_hi": ell_hi}
    ctx["fig1_rows"] = [
        {"name": name, "shape": entry["shape"], **entry["cells"][f"drop={d0}|l={ell50}"]}
        for name, entry in fig1.items()
    ]
    ctx["error_grid"] = [
        {
            "dropout": d,
            "cells": [
                {
                    "geometric": _avg(fig1, "geometric", "mult_error_mean", d, ell),
                    "mean-of-squares": _avg(fig1, "mean-of-squares", "mult_error_mean", d, ell),
                }
                for ell in ls
            ],
        }
        for d in drops
    ]
    ctx["avg"] = {
        "geo_err": _avg(fig1, "geometric", "mult_error_mean", d0, ell50),
        "mos_err": _avg(fig1, "mean-of-squares", "mult_error_mean", d0, ell50),
        "mos_cov": _avg(fig1, "mean-of-squares", "ci_coverage", d0, ell50),
        "mos_err_hi_drop": _avg(fig1, "mean-of-squares", "mult_error_mean", d_hi, ell_hi),
        "mos_err_hi_nodrop": _avg(fig1, "mean-of-squares", "mult_error_mean", d0, ell_hi),
        "mos_cov_hi_drop": _avg(fig1, "mean-of-squares", "ci_coverage", d_hi, ell_hi),
        "shrink_hi_drop": 1 - (1 - d_hi) ** 2,
    }
    ind = [n for n in fig1 if n == "synthetic: independent"]
    ctx["independent"] = (
        {
            "central": fig1[ind[0]]["cells"][f"drop={d0}|l={ell50}"]["central_power"],
            "central_authors": fig1[ind[0]]["cells"][f"drop={d0}|l={ell50}"][
                "central_power_authors_dof"
            ],
            "geo": _avg(fig1, "geometric", "power", d0, ell50, ind),
            "mos": _avg(fig1, "mean-of-squares", "power", d0, ell50, ind),
            "geo_authors": _avg(fig1, "geometric", "power_authors_dof", d0, ell50, ind),
        }
        if ind
        else None
    )
    f5 = doc["fig5"]
    ctx["fig5_l"] = [int(k) for k in f5[GENERATORS[0]]["by_l"]]
    ctx["fig5_rows"] = [
        {
            "kind": kind,
            "truth": f5[kind]["truth"],
            "errors": [f5[kind]["by_l"][str(v)]["additive_error_mean"] for v in ctx["fig5_l"]],
            "floor": f5[kind]["finite_difference_error"],
        }
        for kind in GENERATORS
    ]
    fs = doc["feature_selection"]
    ctx["fs_rows"] = sorted(
        (v for k, v in fs.items() if k != "fs|exact"),
        key=lambda v: (v["l"], v["dropout"], v["decoder"]),
    )
    table3 = doc["paper_numbers"]["table3"]
    fdr = doc["fdr"]
    rows = []
    for ell in st["fdr_l_grid"]:
        p = table3.get(str(ell))
        rows.append(
            {
                "method": "FED-chi^2",
                "l": ell,
                "counts": fdr["run0"][f"geometric|{ell}"],
                "mean": fdr["mean"][f"geometric|{ell}"],
                "calibrated": fdr["mean"][f"geometric|{ell}|calibrated"],
                "paper": p,
                "paper_fdr": p[3] / (p[2] + p[3]) if p else None,
            }
        )
    p = table3["central"]
    rows.append(
        {
            "method": "centralized",
            "l": None,
            "counts": fdr["run0"]["central"],
            "mean": fdr["mean"]["central"],
            "calibrated": None,
            "paper": p,
            "paper_fdr": p[3] / (p[2] + p[3]),
        }
    )
    ctx["fdr_rows"] = rows
    ctx["fdr_mos"] = [
        {
            "l": ell,
            "fdr": fdr["mean"][f"mean-of-squares|{ell}"]["fdr"],
            "calibrated": fdr["mean"][f"mean-of-squares|{ell}|calibrated"]["fdr"],
        }
        for ell in st["fdr_l_grid"]
    ]
    return ctx
