"""End to end: ``fedstats reproduce bit-pushing --quick`` writes its JSON, plots and results page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedstats.cli.app import app
from fedstats.experiments.bit_pushing import nrmse
from golden_helpers import check_golden

runner = CliRunner()


def test_nrmse_and_its_standard_error() -> None:
    import numpy as np

    est = np.array([11.0, 9.0, 10.0, 10.0])
    r = nrmse(est, np.full(4, 10.0))
    assert r["nrmse"] == np.sqrt(0.5) / 10 and r["bias"] == 0.0 and r["se"] > 0


@pytest.mark.slow
def test_reproduce_quick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "bp"
    res = runner.invoke(
        app, ["-q", "reproduce", "bit-pushing", "--quick", "--out", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    for f in payload["files"]:
        assert (out / f).is_file(), f
    doc = json.loads((out / "bit-pushing-quick.json").read_text())
    check_golden("reproduce-bit-pushing-quick", doc)  # the same numbers as the recorded run
    figs = doc["figures"]
    for key in ("1a", "1b", "1c-adult", "1d-adult", "2", "3a", "3b", "3c"):
        assert key in figs
    # adaptive bit pushing without DP: NRMSE of a few percent at most on every 1a point
    assert all(p["nrmse"] < 0.05 for p in figs["1a"]["adaptive"])
    page = (out / "bit-pushing-quick.md").read_text()
    assert "The paper's statements against our numbers" in page and "![fig1a.png]" in page
    # a rerun resumes from the checkpoint (every cell already done) and gives the same figures; it
    # draws no plots (the first run's are checked above): they were half of this test's time, and the
    # cells are the rerun's point
    import fedstats.experiments.bit_pushing as bit_pushing

    monkeypatch.setattr(bit_pushing, "_plots", lambda *a, **k: [])
    res2 = runner.invoke(
        app, ["-q", "reproduce", "bit-pushing", "--quick", "--out", str(out), "--json"]
    )
    assert res2.exit_code == 0
    assert json.loads(res2.stdout)["seconds"] < payload["seconds"] + 5
    again = json.loads((out / "bit-pushing-quick.json").read_text())
    total = doc["cells"]["total"]
    assert total > 0 and again["cells"] == {"total": total, "from_checkpoint": total}
    assert again["figures"] == doc["figures"]
