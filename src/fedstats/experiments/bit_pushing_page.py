"""The numbers behind the bit-pushing results page: the paper's statements checked, and the tables.

:func:`claims` turns the reproduction's figures into the values each statement of Cormode & Markov (2021)
is checked on, with a verdict (``"holds"``, ``"partly holds"``, ``"does not hold"``); :func:`tables` lays
out every figure's NRMSE series as rows. The words are in the template
``templates/bit_pushing.md.j2``; nothing here builds Markdown.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["claims", "tables", "verdict"]


def verdict(ok: bool, partly: bool = False) -> str:
    """Name the verdict: ``"holds"``, ``"partly holds"`` or ``"does not hold"``.

    Parameters
    ----------
    ok : bool
        The statement holds.
    partly : bool
        It holds in part (used when ``ok`` is false).

    Returns
    -------
    str
    """
    if ok:
        return "holds"
    return "partly holds" if partly else "does not hold"


def _at(series: dict[str, Any], label: str, x: Any) -> float:
    for p in series.get(label, []):
        if p["x"] == x:
            return float(p["nrmse"])
    return float("nan")


def _fig1a(s1a: dict[str, Any]) -> dict[str, Any] | None:
    if not s1a.get("adaptive"):
        return None
    ad = [p["nrmse"] for p in s1a["adaptive"]]
    best = sum(
        1
        for i, p in enumerate(s1a["adaptive"])
        if all(p["nrmse"] <= s1a[lab][i]["nrmse"] for lab in s1a if s1a[lab])
    )
    spikes = [
        p["x"]
        for i, p in enumerate(s1a["adaptive"])
        if 0 < i < len(ad) - 1 and p["nrmse"] > 1.5 * (ad[i - 1] + ad[i + 1]) / 2
    ]
    w5 = [p["nrmse"] for p in s1a["weighted a=0.5"]]
    w1 = [p["nrmse"] for p in s1a["weighted a=1.0"]]
    k = sum(a < b for a, b in zip(w5, w1, strict=False))
    median = float(np.median(ad))
    return {
        "best": best,
        "points": len(ad),
        "least_verdict": verdict(best >= 0.8 * len(ad), best >= 0.5 * len(ad)),
        "spikes": spikes,
        "min": min(ad),
        "max": max(ad),
        "median": median,
        "level_verdict": verdict(median <= 0.02),
        "half_better": k,
        "half_points": len(w5),
        "half_verdict": verdict(k >= 0.6 * len(w5)),
    }


def _fig1b(s1b: dict[str, Any]) -> dict[str, Any] | None:
    if not (s1b.get("adaptive") and len(s1b["adaptive"]) >= 2):
        return None

    def growth(label: str) -> float:
        pts = s1b[label]
        return float(pts[-1]["nrmse"] / pts[0]["nrmse"])

    a, w1, w5 = growth("adaptive"), growth("weighted a=1.0"), growth("weighted a=0.5")
    return {
        "b0": s1b["adaptive"][0]["x"],
        "b1": s1b["adaptive"][-1]["x"],
        "weighted1": w1,
        "weighted05": w5,
        "adaptive": a,
        "verdict": verdict(w1 > w5 > a and a < 2),
    }


def _fig1cd(ds: str, sc: dict[str, Any], sd: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"dataset": ds}
    if sc.get("adaptive") and len(sc["adaptive"]) >= 2:
        p0, p1 = sc["adaptive"][0], sc["adaptive"][-1]
        slope = math.log(p1["nrmse"] / p0["nrmse"]) / math.log(p1["x"] / p0["x"])
        out["slope"] = slope
        out["slope_verdict"] = verdict(-0.7 < slope < -0.3)
    if sd.get("adaptive"):
        n5 = [p for p in sd["adaptive"] if p["x"] >= 100_000]
        dith = sd.get("dithering", [])
        ratios = [d["nrmse"] / a["nrmse"] for d, a in zip(dith, sd["adaptive"], strict=False)]
        ratio = float(np.median(ratios)) if ratios else float("nan")
        best_all = all(
            p["nrmse"] <= min(q[i]["nrmse"] for q in sd.values() if q)
            for i, p in enumerate(sd["adaptive"])
        )
        if n5:
            out["variance_at"] = {
                "n": n5[0]["x"],
                "nrmse": n5[0]["nrmse"],
                "verdict": verdict(n5[0]["nrmse"] <= 0.02),
            }
        out["dithering_ratio"] = ratio
        out["dithering_verdict"] = verdict(ratio >= 10, ratio >= 2)
        out["best_verdict"] = verdict(best_all)
    return out


def _fig2(f: dict[str, Any], dataset: str) -> dict[str, Any] | None:
    s2 = f.get("2", {})
    if not s2.get("weighted a=1.0"):
        return None
    xs = [p["x"] for p in s2["weighted a=1.0"]]
    bitp = ["adaptive", "adaptive+squash", "weighted a=0.5", "weighted a=1.0"]
    wins = sum(
        1 for x in xs if _at(s2, "weighted a=1.0", x) <= min(_at(s2, lab, x) for lab in bitp)
    )
    pw_better = [x for x in xs if _at(s2, "piecewise", x) < min(_at(s2, lab, x) for lab in bitp)]
    floor = f.get(f"1c-{dataset}", {}).get("adaptive", [])
    return {
        "wins": wins,
        "points": len(xs),
        "wins_verdict": verdict(wins >= 0.6 * len(xs)),
        "piecewise_better": pw_better,
        "piecewise_verdict": verdict(all(x > 5 for x in pw_better)),
        "one_bit_floor": next((p["nrmse"] for p in floor if p["x"] == 10_000), None),
    }


def _fig3(f: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    s3a = f.get("3a", {}).get("adaptive", [])
    if s3a:
        base = next((p["nrmse"] for p in s3a if p["x"] == 0), float("nan"))
        best = min(s3a, key=lambda p: p["nrmse"])
        band = [p["nrmse"] for p in s3a if 0.1 <= p["x"] <= 0.2]
        gain = base / min(band) if band else float("nan")
        out["a"] = {
            "base": base,
            "best": best["nrmse"],
            "best_at": best["x"],
            "gain": gain,
            "verdict": verdict(gain >= 30),
        }
    b3 = f.get("3b")
    if b3:
        pooled = np.array(b3["pooled"])
        r1 = np.array(b3["round1"])
        out_of = float(((r1 < 0) | (r1 > 1)).mean())
        top = max(j for j, t in enumerate(b3["true"]) if t > 0)
        out["b"] = {
            "outside": out_of,
            "top_bit": top,
            "verdict": verdict(out_of > 0 and top == 10),
            "noise_sd": float(pooled[:, 11:].std()),
        }
    s3c = f.get("3c", {})
    if s3c.get("adaptive+squash") and len(s3c["adaptive+squash"]) >= 2:
        sq = s3c["adaptive+squash"]
        growth = {
            lab: pts[-1]["nrmse"] / pts[0]["nrmse"] for lab, pts in s3c.items() if len(pts) >= 2
        }
        others = [v for k, v in growth.items() if k != "adaptive+squash"]
        g = growth["adaptive+squash"]
        out["c"] = {
            "b0": sq[0]["x"],
            "b1": sq[-1]["x"],
            "growth": growth,
            "verdict": verdict(g < 2 and min(others) > 2, g < 0.1 * min(others)),
        }
    return out


def claims(doc: dict[str, Any]) -> dict[str, Any]:
    """Compute the values each of the paper's statements is checked on, with verdicts.

    Parameters
    ----------
    doc : dict
        The reproduction's document (``figures``, ``datasets``, ``figure2_dataset``).

    Returns
    -------
    dict
        ``fig1a``, ``fig1b``, ``fig2`` (None when the figure has no data), ``fig1cd`` (one entry per
        dataset) and ``fig3`` (``a``, ``b``, ``c`` where present).
    """
    f = doc["figures"]
    return {
        "fig1a": _fig1a(f["1a"]),
        "fig1b": _fig1b(f["1b"]),
        "fig1cd": [
            _fig1cd(ds, f.get(f"1c-{ds}", {}), f.get(f"1d-{ds}", {})) for ds in doc["datasets"]
        ],
        "fig2": _fig2(f, doc["figure2_dataset"]),
        "fig3": _fig3(f),
    }


def tables(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every figure's series as a table: title, x name, curve labels, rows of (nrmse, se) or None.

    Parameters
    ----------
    doc : dict
        The reproduction's document; its ``figures`` (series by figure key, then by curve label),
        ``datasets`` and ``figure2_dataset`` are read.

    Returns
    -------
    list of dict
        ``{"title", "x_name", "integer_x", "labels", "rows": [{"x", "cells": [[nrmse, se] | None]}]}``.
    """
    f = doc["figures"]
    sections = [
        ("1a", "Figure 1a: mean against mu (Normal, sigma = 100, N = 10^4)", "mu"),
        ("1b", "Figure 1b: mean against bit depth (Normal(1000, 100), N = 10^4)", "b"),
    ]
    for ds in doc["datasets"]:
        sections.append((f"1c-{ds}", f"Figure 1c: mean age against N ({ds})", "N"))
        sections.append((f"1d-{ds}", f"Figure 1d: variance of age against N ({ds})", "N"))
    sections += [
        ("2", f"Figure 2: mean age against epsilon ({doc['figure2_dataset']}, N = 10^4)", "epsilon"),
        ("3a", "Figure 3a: adaptive, squash threshold (x per-report DP noise sd), eps = 3, b = 20",
         "threshold"),
        ("3c", "Figure 3c: against bit depth, eps = 3 (Normal(1000, 100), N = 10^4)", "b"),
    ]  # fmt: skip
    out = []
    for key, title, x_name in sections:
        series = f.get(key)
        if not series:
            continue
        labels = [lab for lab, pts in series.items() if pts]
        rows = []
        if labels:
            for x in [p["x"] for p in series[labels[0]]]:
                cells = []
                for lab in labels:
                    p = next((q for q in series[lab] if q["x"] == x), None)
                    cells.append(None if p is None else [p["nrmse"], p["se"]])
                rows.append({"x": x, "cells": cells})
        out.append({"title": title, "x_name": x_name, "labels": labels, "rows": rows})
    return out
