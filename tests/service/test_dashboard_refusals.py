"""The dashboard shows how many devices refused a run and why (issue 42, items 4 and 6).

On the memory state, the page rendered by the app's dashboard routes in this process: a run that every
device refused (two reasons, one message holding markup) shows in the runs table's *refused* column with
the count and each message, escaped; a run nobody refused shows 0.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from fedstats.service.domain import operators, refusals
from fedstats.service.domain.driver import Driver
from fedstats.service.http.dashboard import COOKIE, add_dashboard
from fedstats.service.store.memory import MemoryStore
from test_service_domain import N, _started


def _refused_cell(page: str, run_id: str) -> str:
    row = re.search(rf'<tr class="run"[^>]*data-run-id="{run_id}".*?</tr>', page, flags=re.S)
    assert row, page
    cell = re.search(r'<td class="refused">(.*?)</td>', row.group(0), flags=re.S)
    assert cell, row.group(0)
    return cell.group(1)


def test_the_dashboard_shows_refusal_counts_and_messages(tmp_path: Path) -> None:
    store = MemoryStore()
    refused = _started(store, tmp_path, "refused run")
    (tmp_path / "b").mkdir()
    quiet = _started(store, tmp_path / "b", "nobody refused")
    with store.transaction() as tx:
        for i in range(N):
            if i < N - 1:
                reason, message = "data_invalid", "category column <colour> must hold integer codes"
            else:
                reason, message = "policy_refused", "epsilon 1 above --max-epsilon 0.5"
            assert refusals.record_refusal(tx, refused, f"dev-{i}", "default", reason, message)
        token = operators.add(tx, "alice", actor="t")
    drv = Driver(store, owner="server-a")
    for _ in range(3):
        drv.tick()

    app = FastAPI()
    add_dashboard(app, store)
    with TestClient(app) as client:
        client.cookies.set(COOKIE, token, path="/dashboard")
        page = client.get("/dashboard")
    assert page.status_code == 200, page.text

    cell = _refused_cell(page.text, refused)
    assert cell.split("<", 1)[0].strip() == str(N), cell
    assert (
        f'data-reason="data_invalid">data_invalid: category column &lt;colour&gt; must hold '
        f"integer codes ({N - 1})" in cell
    ), cell
    assert (
        'data-reason="policy_refused">policy_refused: epsilon 1 above --max-epsilon 0.5 (1)' in cell
    )
    assert "<colour>" not in page.text  # the device's message is data, escaped
    assert f"{N} of {N} devices refused" in page.text  # the abort message, in the run's error
    assert _refused_cell(page.text, quiet).strip() == "0"
