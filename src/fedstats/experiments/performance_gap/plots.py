"""Juarez & Korolova (2023) reproduction: the PNG plots of the results document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plots"]


def plots(out: Path, res: dict[str, Any]) -> list[str]:
    """Draw Figures 1-2 and Appendix C into ``out`` (PNG); return the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files: list[str] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        files.append(name)

    f1 = res["figure1"]
    eps = np.asarray(f1["epsilon"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    colors = {
        "M_R": "tab:orange",
        "M_L opt": "tab:blue",
        "M_L k=2": "tab:green",
        "M_L (": "tab:blue",
    }
    for label, s in f1["series"].items():
        ax = axes[0] if "paper" in label else axes[1]
        col = next((c for k, c in colors.items() if label.startswith(k)), "k")
        ax.fill_between(eps, s["lower"], s["upper"], alpha=0.25, color=col)
        ax.plot(eps, s["upper"], color=col, label=label)
        ax.plot(eps, s["lower"], color=col, lw=0.8)
        if "paper" in label and np.isfinite(s["true_loss"]).all():
            axes[1].plot(
                s["true_loss"], s["upper"], color=col, ls=":", label=label + " at its true loss"
            )
    for ax, title in zip(
        axes,
        ("as published (paper's budget split)", "corrected (true loss <= epsilon)"),
        strict=True,
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("epsilon")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("MSE of the gap (value units)")
    fig.suptitle("Figure 1: MSE bounds, n_G = n_Gbar = 1e4", fontsize=11)
    save(fig, "figure1.png")

    f2 = res["figure2"]
    eps = np.asarray(f2["epsilon"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, (label, panel) in zip(axes, f2["panels"].items(), strict=True):
        cmap = plt.get_cmap("viridis")
        for i, (f, s) in enumerate(panel.items()):
            c2 = cmap(i / max(len(panel) - 1, 1))
            ax.plot(eps, s["upper"], color=c2, lw=2, label=f"minority {float(f):.1%}")
            ax.plot(eps, s["plug_in_misestimated"], color=c2, ls=":", lw=1)
            ax.plot(eps, s["actual_mse_misestimated"], color=c2, ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("epsilon")
        ax.set_title(
            f"{label}: bold = true sizes, dotted = plug-in with +50% size, dashed = real MSE",
            fontsize=8,
        )
        ax.legend(fontsize=7)
    axes[0].set_ylabel("MSE upper bound")
    fig.suptitle("Figure 2: unbalanced and misestimated groups, K = 2e4", fontsize=11)
    save(fig, "figure2.png")

    ac = res["appendix_c"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for kind, col in (("R", "tab:orange"), ("L", "tab:blue")):
        ax.plot(ac["runs"], ac[kind]["empirical"], "o-", color=col, label=f"M_{kind} empirical")
        ax.axhline(ac[kind]["theoretical"], color=col, ls="--", label=f"M_{kind} theoretical")
        ax.axhline(
            ac[kind]["upper_bound"], color=col, ls=":", lw=0.8, label=f"M_{kind} upper bound"
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("runs")
    ax.set_ylabel("MSE of the gap")
    ax.set_title(
        "Appendix C: empirical vs theoretical MSE (10 clients per group, eps = 1)", fontsize=9
    )
    ax.legend(fontsize=7)
    save(fig, "appendix_c.png")
    return files
