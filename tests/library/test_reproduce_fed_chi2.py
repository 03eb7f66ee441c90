"""``fedstats reproduce fed-chi2 --quick`` end to end through the CLI, and its data fallbacks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from typer.testing import CliRunner

from fedstats.analyses.chi2 import noise_averaged_p_value as calibrated_p_values
from fedstats.analyses.chi2 import sketch_noise_quantiles
from fedstats.cli.app import app
from fedstats.experiments.fed_chi2 import real_tables, shared_data_present
from golden_helpers import check_golden


@pytest.mark.slow
def test_quick_reproduction_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "fed-chi2"
    res = CliRunner().invoke(
        app, ["--quiet", "reproduce", "fed-chi2", "--quick", "--out", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout.strip().splitlines()[-1])
    for name in payload["files"]:
        assert (out / name).is_file(), name
    assert not list(out.glob(".*.tmp")), "a temporary file was left behind"
    doc = json.loads((out / "fed-chi2-quick.json").read_text())
    assert doc["quick"] is True
    if shared_data_present(None):  # the recorded run had the shared data (real tables, Reuters)
        check_golden("reproduce-fed-chi2-quick", doc)
    for png in doc["plots"]:
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {"fig1_error.png", "fig1_power.png", "fig2_encoding.png", "fig4_fdr.png"} <= set(
        doc["plots"]
    )
    # Figure 1: every dataset and setting present; errors shrink with l; MoS beats geometric on average
    ls = doc["config"]["l_grid"]
    errs = {dec: [] for dec in ("geometric", "mean-of-squares")}
    for entry in doc["fig1"].values():
        for dec in errs:
            cells = [entry["cells"][f"drop=0.0|l={ell}"][dec]["mult_error_mean"] for ell in ls]
            errs[dec].append(cells)
            assert all(0.0 <= c < 5.0 for c in cells)
    for dec, rows in errs.items():
        mean_by_l = np.mean(rows, axis=0)
        assert mean_by_l[-1] < mean_by_l[0], dec
    assert np.mean(errs["mean-of-squares"]) < np.mean(errs["geometric"])
    assert (
        "synthetic: logistic" in doc["fig1"] and "adult: occupation x native-country" in doc["fig1"]
    )
    # FDR: counts add up to the number of hypotheses
    r0 = doc["fdr"]["run0"]["central"]
    n_h = doc["config"]["fdr_times"] * doc["config"]["fdr_hypotheses"]
    assert r0["should_reject"] + r0["should_accept"] == n_h
    md = (out / "fed-chi2-quick.md").read_text()
    for heading in ("## Figure 1", "## Figure 2", "## Figure 5", "## Section 4.2: online FDR"):
        assert heading in md
    if doc["feature_selection"]:
        assert "overlap 95.03% (38,012 terms)" in md  # the paper's number beside ours
    else:
        assert "Feature selection skipped" in " ".join(doc["notes"])
    assert "Figure 5 (FED-H) skipped" not in md
    assert md.startswith("# FED-chi^2 / FED-H reproduction (quick run)")
    assert "**Quick run**" in md
    # resumable: a rerun reuses every checkpointed cell and rewrites identical Figure 1 results
    cells = (out / "fed-chi2-quick.fig1.cells.jsonl").read_text().count("\n")
    assert cells >= len(doc["fig1"]) * len(ls)
    # the rerun draws no plots (checked above): they were most of its time, and the cells are its point
    import fedstats.experiments.fed_chi2 as fed_chi2_reproduction

    monkeypatch.setattr(fed_chi2_reproduction, "write_plots", lambda *a, **k: [])
    again = CliRunner().invoke(
        app, ["--quiet", "reproduce", "fed-chi2", "--quick", "--out", str(out), "--json"]
    )
    assert again.exit_code == 0, again.output
    redo = json.loads((out / "fed-chi2-quick.json").read_text())
    assert redo["fig1"] == doc["fig1"] and redo["fdr"] == doc["fdr"]
    assert redo["timings"]["fig1_s"] < doc["timings"]["fig1_s"]


def test_without_shared_data_only_synthetic_and_embedded_adult(tmp_path: Path) -> None:
    tables, notes = real_tables(tmp_path, which="quick")
    assert list(tables) == ["adult: occupation x native-country"]
    assert tables["adult: occupation x native-country"].shape == (15, 42)
    assert any("Mushroom skipped" in n for n in notes)
    assert not shared_data_present(tmp_path)


def test_calibrated_p_values_uniform_under_independence() -> None:
    """s ~ chi2_dof times the mean-of-squares noise chi2_l / l: calibrated p-values are uniform."""
    rng = np.random.default_rng(4)
    dof, ell, n = 16, 10, 4000
    s_hat = rng.chisquare(dof, n) * rng.chisquare(ell, n) / ell
    q = sketch_noise_quantiles(ell, "mean-of-squares", points=400)
    p = calibrated_p_values(s_hat, dof, q)
    assert scipy.stats.kstest(p, "uniform").pvalue > 1e-6
    naive = scipy.stats.chi2.sf(s_hat, dof)
    assert (naive < 0.05).mean() > 0.05 + 6 * math.sqrt(
        0.05 * 0.95 / n
    )  # naive is anti-conservative
