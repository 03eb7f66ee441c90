"""Defaults once (issue 41): the CLI reads each default from its one home, and its help still shows it.

``fedstats server`` takes its defaults from :class:`~fedstats.service.http.settings.ServerSettings`;
``fedstats client run`` from :class:`~fedstats.client.Policy`, :class:`~fedstats.client.LocalBudget` and
:meth:`~fedstats.client.Device.run`; a secure task's smallest session from :mod:`fedstats.wire.tasks`.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import typer
from typer.testing import CliRunner

from fedstats.cli.app import app
from fedstats.cli.client import client_app
from fedstats.cli.server import cohort_tree_option, server_app
from fedstats.client import Device, LocalBudget, Policy
from fedstats.service.http.settings import ServerSettings
from fedstats.wire.tasks import default_min_session_size, min_session_size, normalize_task

# settings fields the server's CLI takes in another form: a file (the settings hold its content or path
# as text), or a name derived from the port when not given
_OTHER_FORM = {"server_id", "vdaf_peer_ca", "request_key_secret"}


def _options(app: typer.Typer) -> dict[str, Any]:
    command: Any = typer.main.get_command(app)
    return {p.name: p.default for p in command.params}


def test_every_server_setting_is_an_option_with_the_settings_default() -> None:
    options = _options(server_app)
    exposed = [f for f in dataclasses.fields(ServerSettings) if f.name in options]
    assert len(exposed) == 21, [f.name for f in exposed]
    for f in exposed:
        if f.name == "cohort_tree_above":  # text (a count or "none"); absent: the settings' default
            assert cohort_tree_option(options[f.name]) == f.default
            continue
        expected = None if f.name in _OTHER_FORM else f.default
        assert options[f.name] == expected, f.name


def test_every_client_policy_budget_and_run_default_is_the_sdks() -> None:
    options = _options(client_app)
    policy = {f.name: f.default for f in dataclasses.fields(Policy)}
    assert policy.pop("allowed_analyses") is None and options["allow"] is None
    budget = {"budget_" + f.name: f.default for f in dataclasses.fields(LocalBudget)}
    budget = {k: v for k, v in budget.items() if k in ("budget_epsilon", "budget_delta")}
    run = {
        name: p.default
        for name, p in inspect.signature(Device.run).parameters.items()
        if name in ("poll", "wait", "connect_timeout", "max_seconds", "runs")
    }
    for name, default in {**policy, **budget, **run}.items():
        assert options[name] == default, name


def test_the_help_still_shows_the_defaults() -> None:
    out = CliRunner().invoke(app, ["server", "--help"], terminal_width=200).output
    assert f"[default: {ServerSettings.rate}; x>=0.1]" in out
    assert f"[default: {ServerSettings.work_cache_seconds};" in out
    out = CliRunner().invoke(app, ["client", "run", "--help"], terminal_width=200).output
    assert f"[default: {Policy.max_epsilon}; x>=0.0]" in out


def test_the_smallest_session_has_one_home_read_alike_by_server_and_device() -> None:
    """A task that does not name ``min_session_size`` normalizes to the same value the server and a
    device read from it: min(10, max_session)."""
    for m in (2, 5, 10, 11, 1000):
        task = normalize_task(
            {
                "analysis": "exact-mean",
                "version": 1,
                "params": {"clip": 1.0},
                "privacy": {"epsilon": None, "delta": None, "population": "p"},
                "cohort_size": 1000,  # at least every session floor (tasks are checked against it)
                "secure_aggregation": {"max_session": m},
            }
        )
        secure = task["secure_aggregation"]
        assert secure["min_session_size"] == min(10, m) == default_min_session_size(m)
        assert min_session_size(secure) == min_session_size({"max_session": m}) == min(10, m)
    assert min_session_size({"max_session": 100, "min_session_size": 3}) == 3


def _defaults(fn: Any) -> dict[str, Any]:
    return {n: p.default for n, p in inspect.signature(fn).parameters.items()}


def test_the_analyses_api_and_cli_defaults_are_their_configs() -> None:
    """Bit pushing, FED-chi^2 and FED-H: the library call's defaults are read from the config, and the
    command's (written out there so that ``--help`` loads no numpy, tests/cli/test_cli_startup.py) equal
    them: a default changed in the config fails here until the command follows."""
    from fedstats.analyses.bitpushing import api as bp
    from fedstats.analyses.bitpushing.config import BitPushingMeanConfig, BitPushingVarianceConfig
    from fedstats.analyses.chi2.api import fed_chi2
    from fedstats.analyses.chi2.config import FedChi2Config
    from fedstats.analyses.entropy.api import fed_entropy, fed_g_test
    from fedstats.analyses.entropy.config import FedEntropyConfig, GTestConfig
    from fedstats.cli import chi2 as chi2_cli
    from fedstats.cli import entropy as entropy_cli
    from fedstats.cli import mean as mean_cli

    pairs: list[tuple[Any, Any, tuple[str, ...]]] = [
        (bp.mean, BitPushingMeanConfig, ("method",)),
        (bp.variance, BitPushingVarianceConfig, ("method", "mean_fraction")),
        (
            fed_chi2,
            FedChi2Config,
            ("encoding_size", "decoder", "level", "confidence", "drop_empty"),
        ),
        (fed_entropy, FedEntropyConfig, ("encoding_size", "fd_step", "coupling", "confidence")),
        (
            fed_g_test,
            GTestConfig,
            ("encoding_size", "fd_step", "coupling", "confidence", "level", "drop_empty"),
        ),
        (mean_cli.mean, BitPushingMeanConfig, ("method",)),
        (mean_cli.variance, BitPushingVarianceConfig, ("method", "mean_fraction")),
        (chi2_cli.chi2, FedChi2Config, ("encoding_size", "decoder", "level", "confidence")),
        (
            entropy_cli.entropy,
            FedEntropyConfig,
            ("encoding_size", "fd_step", "coupling", "confidence"),
        ),
    ]
    read_at_run_time = {(mean_cli.mean, "method"), (mean_cli.variance, "method")}
    for fn, config, names in pairs:
        got = _defaults(fn)
        fields = {f.name: f.default for f in dataclasses.fields(config)}
        for name in names:
            if (fn, name) in read_at_run_time and got[name] is None:
                continue  # --protocol unset: the command reads the config's default when it runs
            assert got[name] == fields[name], (fn.__qualname__, name, got[name], fields[name])
