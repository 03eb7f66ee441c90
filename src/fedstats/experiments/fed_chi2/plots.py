"""The PNG figures of the FED-chi^2 / FED-H reproduction (matplotlib, Agg backend)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedstats.experiments.fed_chi2.settings import DECODERS, PAPER
from fedstats.experiments.synthetic_tables import GENERATORS

__all__ = ["write_plots"]

_DROP_STYLES = ("-", "--", "-.", ":")
_DEC_COLORS = {"geometric": "tab:blue", "mean-of-squares": "tab:orange"}


def _fig1_series(
    entry: dict[str, Any], drop: float, dec: str, field: str, ls: list[int]
) -> list[float]:
    return [float(entry["cells"][f"drop={drop}|l={ell}"][dec][field]) for ell in ls]


def write_plots(out: Path, doc: dict[str, Any], title: Callable[[str], str] = str) -> list[str]:
    """Draw the PNG figures of the reproduction (matplotlib, Agg) and return their file names.

    Parameters
    ----------
    out : pathlib.Path
        Folder the files are written into (atomically).
    doc : dict
        The results document (``config``, ``fig1``, ``fig2``, ``fig5``, ``feature_selection``, ``fdr``).
    title : callable, optional
        Maps a figure title to the one shown (the framework's ``plot_title`` marks quick runs).

    Returns
    -------
    list of str
        File names written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[str] = []

    def save(fig: Any, name: str) -> None:
        import io

        from fedstats._io import atomic_write_bytes

        mark = str(title("")).strip(" ()")
        if mark:  # a quick run says so on every figure
            fig.text(0.005, 0.995, mark, fontsize=7, va="top", color="tab:red")
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90)
        plt.close(fig)
        atomic_write_bytes(out / name, buf.getvalue())
        written.append(name)

    _plot_fig1(plt, doc, save)
    _plot_fig2(plt, doc, save)
    _plot_fig5(plt, doc, save)
    _plot_fig8(plt, doc, save)
    _plot_fig4(plt, doc, save)
    return written


def _finish(
    fig: Any, ax: Any, labels: tuple[str, str], save: Callable[[Any, str], None], name: str
) -> None:
    """Label a one-panel figure's axes (x, y), add its legend, lay it out and save it as ``name``."""
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, name)


def _plot_fig1(plt: Any, doc: dict[str, Any], save: Callable[[Any, str], None]) -> None:
    """Figure 1: multiplicative error and power of FED-chi^2 against ``l``, one panel a table, per dropout and decoder."""
    st = doc["config"]
    ls = list(st["l_grid"])
    drops = list(st["dropouts"])
    fig1 = doc["fig1"]
    names = list(fig1)
    ncol = 4
    nrow = max(1, math.ceil(len(names) / ncol))
    for field, fname, ylabel in (
        ("mult_error_mean", "fig1_error.png", "multiplicative error"),
        ("power", "fig1_power.png", "power (p < 0.05)"),
    ):
        fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3 * nrow), squeeze=False)
        for ax, name in zip(axes.ravel(), names, strict=False):
            entry = fig1[name]
            for i, d in enumerate(drops):
                for dec in DECODERS:
                    y = _fig1_series(entry, d, dec, field, ls)
                    if field == "mult_error_mean":
                        sd = _fig1_series(entry, d, dec, "mult_error_sd", ls)
                        ax.errorbar(
                            ls,
                            y,
                            yerr=sd,
                            color=_DEC_COLORS[dec],
                            ls=_DROP_STYLES[i % 4],
                            capsize=2,
                            lw=1,
                            label=f"{dec}, {int(100 * d)}% dropout",
                        )
                    else:
                        ax.plot(
                            ls,
                            y,
                            color=_DEC_COLORS[dec],
                            ls=_DROP_STYLES[i % 4],
                            lw=1,
                            label=f"{dec}, {int(100 * d)}% dropout",
                        )
            if field == "power":
                c0 = entry["cells"][f"drop={drops[0]}|l={ls[0]}"]
                ax.axhline(c0["central_power"], color="k", lw=1, ls="--", label="centralized")
                ya = _fig1_series(entry, drops[0], "geometric", "power_authors_dof", ls)
                ax.plot(ls, ya, color="tab:red", lw=1, ls=":", label="geometric, dof m_x m_y - 1")
                ax.set_ylim(-0.05, 1.05)
            ax.set_title(name, fontsize=8)
            ax.set_xlabel("encoding size l", fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.tick_params(labelsize=7)
        for ax in axes.ravel()[len(names) :]:
            ax.axis("off")
        handles, labels = axes.ravel()[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        save(fig, fname)


def _plot_fig2(plt: Any, doc: dict[str, Any], save: Callable[[Any, str], None]) -> None:
    """Figure 2: the client's encoding time against ``m`` (kept projection, sparse on demand, generation)."""
    fig2 = doc["fig2"]
    if fig2:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        ms = [r["m"] for r in fig2]
        ax.errorbar(
            ms,
            [r["encoding_ms_mean"] for r in fig2],
            yerr=[r["encoding_ms_sd"] for r in fig2],
            marker="o",
            label="encoding (P kept in memory)",
        )
        ax.plot(
            ms,
            [r["sparse_on_demand_ms_mean"] for r in fig2],
            marker="s",
            label="sparse client, 1% cells, columns on demand",
        )
        ax.plot(
            ms,
            [1e3 * r["projection_generation_s_mean"] for r in fig2],
            marker="^",
            label="generating the whole l x m projection",
        )
        ax.set_yscale("log")
        _finish(fig, ax, ("m (table m x m), l = 50", "milliseconds"), save, "fig2_encoding.png")


def _plot_fig5(plt: Any, doc: dict[str, Any], save: Callable[[Any, str], None]) -> None:
    """Figure 5: FED-H's additive error against ``l``, one line a table generator."""
    st = doc["config"]
    fig5 = doc["fig5"]
    if fig5:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for kind in GENERATORS:
            if kind not in fig5:
                continue
            by_l = fig5[kind]["by_l"]
            lx = [int(k) for k in by_l]
            ax.errorbar(
                lx,
                [by_l[str(v)]["additive_error_mean"] for v in lx],
                yerr=[by_l[str(v)]["additive_error_sd"] for v in lx],
                marker="o",
                capsize=2,
                label=kind,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"FED-H, m_x = {st['fedh_m']:,}", fontsize=9)
        labels = ("encoding size l", "additive error |H_hat - H| (nats)")
        _finish(fig, ax, labels, save, "fig5_fedh.png")


def _plot_fig8(plt: Any, doc: dict[str, Any], save: Callable[[Any, str], None]) -> None:
    """Figure 8: overlap of the feature selection with the exact one against ``l``, per decoder."""
    fs = doc["feature_selection"]
    if fs:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for dec in DECODERS:
            pts = sorted(
                (v["l"], v["overlap_mean"])
                for k, v in fs.items()
                if k != "fs|exact" and v["decoder"] == dec and v["dropout"] == 0.0
            )
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker="o",
                label=dec,
                color=_DEC_COLORS[dec],
            )
        ax.axhline(PAPER["fs_overlap"], color="k", ls="--", lw=1, label="paper, l = 50")
        labels = ("encoding size l", "overlap with exact selection")
        _finish(fig, ax, labels, save, "fig8_overlap.png")


def _plot_fig4(plt: Any, doc: dict[str, Any], save: Callable[[Any, str], None]) -> None:
    """Figure 4 (Table 3): FDR and TDR of the multiple tests against ``l``, with calibrated p-values."""
    st = doc["config"]
    fdr = doc["fdr"]
    if fdr:
        mean = fdr["mean"]
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        for metric, ax in zip(("fdr", "tdr"), axes, strict=True):
            for dec in DECODERS:
                for cal, ls_ in (("", "-"), ("|calibrated", "--")):
                    lx = list(st["fdr_l_grid"])
                    ax.plot(
                        lx,
                        [mean[f"{dec}|{v}{cal}"][metric] for v in lx],
                        marker="o",
                        ls=ls_,
                        color=_DEC_COLORS[dec],
                        label=f"{dec}{' calibrated p' if cal else ''}",
                    )
            ax.axhline(mean["central"][metric], color="k", lw=1, label="centralized")
            if metric == "fdr":
                ax.axhline(0.05, color="grey", lw=0.8, ls=":", label="target 0.05")
                pl = [int(k) for k in PAPER["table3"] if k != "central"]
                ax.plot(
                    pl,
                    [
                        PAPER["table3"][str(v)][3]
                        / (PAPER["table3"][str(v)][2] + PAPER["table3"][str(v)][3])
                        for v in pl
                    ],
                    color="tab:red",
                    ls=":",
                    marker="x",
                    label="paper (Table 3)",
                )
            ax.set_xlabel("encoding size l")
            ax.set_ylabel(metric.upper())
        axes[0].legend(fontsize=6)
        fig.tight_layout()
        save(fig, "fig4_fdr.png")
