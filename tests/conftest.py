"""Shared fixtures (the location of ../shared/data, seeded randomness), and how pytest-xdist groups and
orders the tests (`make test`: `-n 2 --dist loadgroup --no-loadscope-reorder`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

try:  # pytest >= 9.2: structured node ids (see pytest_collection_modifyitems)
    from _pytest.nodeid import NodeId
except ImportError:  # older pytest: pytest-xdist's own suffix takes effect
    NodeId = None

from fedstats.randomness import RandomSource

if TYPE_CHECKING:
    from service_helpers import Deployment

_REPO = Path(__file__).resolve().parents[1]


def _shared_data_dir() -> Path:
    env = os.environ.get("FEDSTATS_DATA")
    return Path(env) if env else _REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of the real datasets (``../shared/data`` or ``$FEDSTATS_DATA``); skips when absent."""
    path = _shared_data_dir()
    if not (path / "SHA256SUMS").is_file():
        pytest.skip(
            f"real datasets not found at {path} (set FEDSTATS_DATA or place ../shared/data)"
        )
    return path


@pytest.fixture()
def randomness() -> RandomSource:
    """A seeded, reproducible RandomSource for tests."""
    return RandomSource(seed=20261120)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """A started ``fedstats server`` on each store, shared by the tests of one module.

    PostgreSQL (a fresh schema) skips with the reason it is unreachable. A module that needs more than a
    started server (budgets, operators) defines ``prepare_deployment(dep)``, called once it is up; one
    whose server needs other options defines ``SERVER_ARGS`` (a tuple of ``fedstats server`` options,
    given at the start instead of a restart in ``prepare_deployment``).
    """
    from service_helpers import store_deployment

    root = tmp_path_factory.mktemp(f"{request.module.__name__}-{request.param}")
    prepare = getattr(request.module, "prepare_deployment", None)
    args = tuple(getattr(request.module, "SERVER_ARGS", ()))
    yield from store_deployment(request.param, root, prepare, args)


@pytest.fixture(scope="module")
def production(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """One started server on the production store (PostgreSQL when reachable, else SQLite), per module:
    for end-to-end, fault and load tests that do not test the store's own behaviour (that is the parity
    class's, tests/service/test_service_state.py, on the memory state, SQLite and PostgreSQL). The
    module's ``SERVER_ARGS`` and ``prepare_deployment(dep)``, if any, as for ``deployment``."""
    from service_helpers import production_deployment

    yield from production_deployment(
        tmp_path_factory.mktemp(f"{request.module.__name__}-production"),
        getattr(request.module, "prepare_deployment", None),
        tuple(getattr(request.module, "SERVER_ARGS", ())),
    )


# Tests that take tens of seconds on their own (``--durations``, 2-core machine): handed out first, so that
# none of them starts last and leaves the other workers idle at the end. Substrings of node ids.
SLOW_FIRST = (
    "test_service_malicious.py::",
    "test_deploy_walkthrough.py::test_the_walkthrough_runs_on_",
    "test_reproduce_performance_gap.py::test_rerun_reuses_the_cells",
    "test_aggregate_route.py::test_bit_pushing_aggregate_form_matches_its_encoder[exact-1]",
    "test_cli_admin.py::test_an_operator_runs_a_task_from_the_cli",
    "test_reproduce_fed_chi2.py::test_quick_reproduction_cli",
    "test_prio3_service.py::test_network_demo_two_aggregator_processes",
    "test_aggregate_route.py::test_bit_pushing_aggregate_form_matches_its_encoder[exact-2]",
    "test_reproduce_performance_gap.py::test_reproduce_performance_gap_quick",
)


# The 70-process Adult test (test_service_secure_adult.py) slows every process beside it for as long as it
# runs: a service test beside it (its own server and client processes, deadlines, process start-ups) took
# up to 6 times as long (test_two_servers_one_killed_mid_run_the_other_takes_over[postgresql]: 142 s beside
# it, 24 s not), and its deadlines ran short. So it runs first in its group, i.e. at the start of the
# suite, and the other workers meanwhile run BESIDE_LEAD: in-process, CPU-bound tests (no server, no
# subprocess, no deadline or timing assertion), slowed just as much (test_rerun_reuses_the_cells...: 127 s
# beside it, 19 s not) but with nothing that can time out. Substrings of node ids.
LEAD = "test_service_secure_adult.py::test_fed_chi2_on_adult_with_70_client_processes"
BESIDE_LEAD = (
    "test_reproduce_performance_gap.py::",
    "test_aggregate_route.py::test_bit_pushing_aggregate_form_matches_its_encoder",
    "test_prio3_heterogeneity.py::",
    "test_chi2_privacy.py::",
    "test_reproduce_fed_chi2.py::test_quick_reproduction_cli",
)


def _group(item: pytest.Item) -> str | None:
    """The item's ``xdist_group``: its marks' names (joined as pytest-xdist joins them), else its module.

    A test that uses a module-scoped fixture (a server deployment, a Monte Carlo run shared by several
    tests) is grouped with the rest of its module: set up once, on one worker, instead
    of once on each worker that happens to run one of its tests.
    """
    names = {
        str(m.args[0] if m.args else m.kwargs.get("name", "default"))
        for m in item.iter_markers("xdist_group")
    }
    if names:
        return "_".join(sorted(names))
    module = item.nodeid.split("::", 1)[0]
    info = getattr(item, "_fixtureinfo", None)
    for defs in getattr(info, "name2fixturedefs", {}).values():
        # a module-scoped fixture is set up once per module, wherever it is defined (its module or a
        # conftest: the ``deployment`` and ``production`` servers)
        if any(d.scope == "module" for d in defs):
            return module.rsplit("/", 1)[-1].removesuffix(".py")
    return None


def _slow_rank(item: pytest.Item) -> int:
    """The index of the item in :data:`SLOW_FIRST`, or its length."""
    for i, part in enumerate(SLOW_FIRST):
        if part in item.nodeid:
            return i
    return len(SLOW_FIRST)


LAYERS = ("library", "wire", "cli", "service", "client", "e2e")
# the layers (marks) whose tests run in the pytest process: no server or device process, no real deadline.
# They are handed out right after BESIDE_LEAD, so that the other workers spend the 70-process Adult test's
# time on them and the tests that wait on deadlines come after it (one of them, SIGKILLing its server in
# each round, took 132 s beside it and 18-25 s alone)
IN_PROCESS = ("library", "wire", "memory_state")
# the values of a store parameter that need no database and no server process
MEMORY_STATES = {"memory", "memory://"}
OTHER_STATES = {"sqlite", "postgresql", "postgres"}


def _mark_layer(item: pytest.Item) -> None:
    """Mark ``item`` with its layer (the folder under tests/) and, in the service layer, ``memory_state``
    when it runs in this process on the memory state: a store parameter of ``memory`` and none of a
    database (or the ``memory`` fixture of test_service_domain.py), or an explicit mark (a module's
    ``pytestmark``). ``make test-fast`` selects ``library``, ``wire``, ``cli`` and
    ``memory_state``."""
    parts = Path(str(item.path)).parts
    layer = next((p for p in reversed(parts[:-1]) if p in LAYERS), None)
    if layer is None:
        return
    item.add_marker(getattr(pytest.mark, layer))
    if layer != "service" or item.get_closest_marker("memory_state") is not None:
        return
    callspec = getattr(item, "callspec", None)
    values = {str(v) for v in callspec.params.values()} if callspec is not None else set()
    in_memory = values & MEMORY_STATES or "memory" in getattr(item, "fixturenames", ())
    if in_memory and not values & OTHER_STATES:
        item.add_marker(pytest.mark.memory_state)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its layer (:func:`_mark_layer`); group and order the tests for ``--dist loadgroup``, and make pytest-xdist see the groups.

    Under ``--dist loadgroup`` a group runs on one worker, one test after the other, and with
    ``--no-loadscope-reorder`` (``make test``) the groups and tests are handed out in this order: the
    group of :data:`LEAD` (the ``machine-load`` group, the 70-process Adult test and the tests whose
    deadlines must not run beside it, starts at once, :data:`LEAD` first, and overlaps the rest of the
    suite on the other workers instead of trailing it), then the tests of :data:`BESIDE_LEAD` (the other
    workers' first tests: they run beside :data:`LEAD`), then the ungrouped tests of the
    :data:`IN_PROCESS` layers, then the other marked groups, then the module groups, then the other tests,
    each part with the tests of :data:`SLOW_FIRST` first (stable order otherwise).

    pytest-xdist (3.8) tells the scheduler a test's group by appending ``@group`` to its node id through
    ``item._nodeid``; since pytest 9.2 the id lives in ``item._id`` (a ``NodeId``) and that write has no
    effect: every group was silently spread over both workers (pytest-xdist issue #1386). On a worker
    of a ``loadgroup`` run, every grouped test's id gets its suffix here, through the structured id.
    """
    for item in items:
        _mark_layer(item)
    groups = {id(it): _group(it) for it in items}
    lead = {groups[id(it)] for it in items if LEAD in it.nodeid} - {None}

    def in_process(item: pytest.Item) -> bool:
        return any(item.get_closest_marker(m) is not None for m in IN_PROCESS)

    def order(item: pytest.Item) -> tuple[int, int]:
        marked = item.get_closest_marker("xdist_group") is not None
        if groups[id(item)] in lead:
            part = 0
        elif any(sub in item.nodeid for sub in BESIDE_LEAD):
            part = 1
        elif in_process(item) and not marked:
            part = 2
        else:
            part = 3 if marked else 4 if groups[id(item)] is not None else 5
        return part, (-1 if LEAD in item.nodeid else _slow_rank(item))

    items.sort(key=order)
    if not getattr(config.option, "loadgroup", False) or NodeId is None:
        return
    for item in items:
        group = groups[id(item)]
        if group is None or not hasattr(item, "_id"):
            continue
        suffix = f"@{group}"
        if not item.nodeid.endswith(suffix):  # a pytest-xdist that sets it itself
            item._id = NodeId.parse(item.nodeid + suffix)
