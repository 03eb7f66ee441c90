"""What a device remembers of its runs for its :class:`~fedstats.client.Policy` (issue 40): the runs of a
secure task that aborted after its reveal, and its exact releases per task and analyst. Kept in its budget
file, given back like a reservation, refused past the policy's limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedstats.client import LocalBudget, Policy
from fedstats.client.policy import RefusedTask, is_exact
from fedstats.errors import ParameterError
from fedstats.wire.tasks import normalize_task

EXACT = normalize_task(
    {
        "analysis": "exact-mean",
        "version": 1,
        "params": {"clip": 1.0},
        "privacy": {"epsilon": None, "delta": None, "population": "p"},
        "cohort_size": 10,
        "min_clients": 5,
        "deadlines": {"checkin": 60, "round": 60},
    }
)
SECURE = normalize_task(
    {
        "analysis": "bitpushing-mean",
        "version": 1,
        "params": {"column": "value", "low": -1.0, "high": 1.0, "resolution": 1 / 64},
        "privacy": {"epsilon": 1.0, "delta": 0.0, "population": "p"},
        "cohort_size": 10,
        "min_clients": 5,
        "deadlines": {"checkin": 60, "round": 60},
        "secure_aggregation": {"max_session": 10},
    }
)


def test_exact_runs_are_counted_per_task_and_analyst_and_given_back_unless_spent(
    tmp_path: Path,
) -> None:
    assert is_exact(EXACT) and not is_exact(SECURE)
    path = tmp_path / "budget.json"
    budget, policy = LocalBudget(path), Policy(allow_non_private=True)
    policy.check_history(EXACT, "task-a", "alice", budget, "run-1")
    budget.reserve_exact("run-1", "task-a", "alice")
    policy.check_history(EXACT, "task-a", "alice", budget, "run-1")  # its own retried offer
    with pytest.raises(RefusedTask, match="max_exact_runs_per_task"):
        policy.check_history(EXACT, "task-a", "alice", budget, "run-2")
    with pytest.raises(RefusedTask, match="max_exact_runs_per_analyst"):
        policy.check_history(EXACT, "task-b", "alice", budget, "run-3")
    policy.check_history(EXACT, "task-b", "bob", budget, "run-3")
    Policy(max_exact_runs_per_task=2, max_exact_runs_per_analyst=2).check_history(
        EXACT, "task-a", "alice", budget, "run-2"
    )  # consent
    assert budget.release("run-1") and budget.exact_runs(analyst="alice") == 0  # never encoded
    budget.reserve_exact("run-4", "task-a", "alice")
    budget.spend("run-4", _inf())
    assert not budget.release("run-4")  # encoded: counted for good
    again = LocalBudget(path)  # the file keeps it
    assert again.exact_runs(task="task-a") == 1 and again.exact["run-4"]["status"] == "spent"


def test_a_device_stops_joining_a_task_after_max_aborted_runs(tmp_path: Path) -> None:
    path = tmp_path / "budget.json"
    budget, policy = LocalBudget(path), Policy()
    for run in ("run-1", "run-2"):
        policy.check_history(SECURE, "task-a", "alice", budget)
        budget.note_aborted("task-a", run)
    budget.note_aborted("task-a", "run-2")  # counted once per run
    assert budget.aborted_runs("task-a") == 2
    with pytest.raises(RefusedTask, match="max_aborted_runs is 2"):
        policy.check_history(SECURE, "task-a", "alice", LocalBudget(path))
    policy.check_history(SECURE, "task-b", "alice", budget)  # per task
    Policy(max_aborted_runs=3).check_history(SECURE, "task-a", "alice", budget)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("min_colluder_fraction", 1.5),
        ("min_colluder_fraction", -0.1),
        ("max_aborted_runs", -1),
        ("max_exact_runs_per_task", 1.5),
        ("max_exact_runs_per_analyst", True),
    ],
)
def test_out_of_range_history_limits_name_themselves(field: str, value: object) -> None:
    with pytest.raises(ParameterError, match=field):
        Policy(**{field: value})  # type: ignore[arg-type]


def test_a_malformed_history_in_the_budget_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "budget.json"
    path.write_text('{"charges": {}, "exact": {"r": {"task": "t", "analyst": "a", "status": "x"}}}')
    with pytest.raises(ParameterError, match="budget file"):
        LocalBudget(path)


def _inf() -> object:
    from fedstats.wire.registry import privacy_loss_for

    return privacy_loss_for(EXACT)
