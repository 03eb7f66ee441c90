"""``fedstats admin`` output a person reads (issue 42, item 6): results, progress, times and order.

The server side (a live ``runs wait``, ``devices list``) is in tests/e2e/test_cli_admin.py; the dashboard's
released estimate in tests/e2e/test_dashboard_browser.py. These check the formatting on its own.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from fedstats.cli.admin import _cell, _page_view, _run_view, natural_key, run_progress
from fedstats.results import AnalysisResult, released_summary

RESULT = AnalysisResult(
    analysis="bitpushing-mean",
    estimate=2.71828,
    ci=(2.5, 2.93),
    standard_error=0.11,
    epsilon=1.0,
    delta=None,
    n_clients=3,
    warnings=("the interval covers most of [0, 8]",),
)


def _printed(show: Any, payload: dict[str, Any]) -> str:
    console = Console(record=True, width=200)
    show(console, payload)
    return console.export_text()


def test_a_released_result_reads_estimate_interval_privacy_not_json() -> None:
    payload = {**RESULT.to_dict(), "n_devices": 3, "n_records": 3}
    line = released_summary(payload)
    assert line == "2.718 [2.5, 2.93] (privacy spent: epsilon 1), 3 devices"
    assert released_summary({**payload, "confidence": 0.9}).startswith("2.718 [2.5, 2.93] 90%")
    assert "none (exact)" in released_summary({"estimate": 4, "epsilon": None})
    assert released_summary(None) == "-"
    run = {"run_id": "r1", "status": "done", "result": payload, "rounds": []}
    text = _printed(_run_view, run)
    assert line in text and "warning: the interval covers most of [0, 8]" in text
    assert '"standard_error"' not in text and "{" not in text  # no JSON blob in a cell


def test_progress_names_the_status_and_the_open_round() -> None:
    rounds = [
        {"index": 0, "name": "sum", "status": "closed", "records_expected": 5, "records_summed": 5},
        {"index": 1, "name": "sum2", "status": "open", "records_expected": 5, "records_summed": 2},
    ]
    running = {"run_id": "r1", "status": "running", "rounds": rounds}
    assert run_progress(running) == "run r1: running, round 2 of 2 (sum2), 2 of 5 records"
    assert run_progress({"run_id": "r1", "status": "checkin", "rounds": []}) == "run r1: checkin"
    assert run_progress({"run_id": "r1", "status": "done", "rounds": rounds}) == "run r1: done"


def test_lists_show_iso_dates_and_sort_naturally() -> None:
    for column, t in (("not_after", 1827440000.0), ("enrolled_at", 0), ("revoked_at", 1.7e9)):
        shown = _cell(column, t)  # ISO 8601, UTC, to the second: parses back to the time
        back = dt.datetime.strptime(shown, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
        assert back.timestamp() == t, shown
    assert _cell("status", "active") == "active"
    page = {
        "items": [
            {"client_id": f"device-{i}", "not_after": 1827440000.0, "status": "active"}
            for i in (10, 2, 1, 33)
        ],
        "total": 4,
    }
    text = _printed(_page_view(["client_id", "not_after"], "devices", sort_by=("client_id",)), page)
    order = [int(m) for m in re.findall(r"device-(\d+)", text)]
    assert order == [1, 2, 10, 33]
    assert "e+09" not in text and _cell("not_after", 1827440000.0) in text


@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=30))
def test_natural_order_is_numeric_order_of_the_numbered_names(numbers: list[int]) -> None:
    names = sorted((f"device-{n}" for n in numbers), key=natural_key)
    assert [int(n.split("-")[1]) for n in names] == sorted(numbers)


def test_a_value_result_is_compact_json() -> None:
    assert json.loads(released_summary({"value": {"b": 1, "a": [1, 2]}})) == {"a": [1, 2], "b": 1}
