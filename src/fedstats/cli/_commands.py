"""The ``fedstats`` commands: each command's module and its one-line summary.

A table without imports, read by :mod:`fedstats.cli.app` (``fedstats --version`` and ``--help``) and by
:mod:`fedstats.cli._app` (the lazily loading group): its one home, so neither imports the other's.
"""

from __future__ import annotations

__all__ = ["COMMANDS", "SUMMARIES"]

COMMANDS: dict[str, str] = {
    "demo": "fedstats.cli.demo",
    "datasets": "fedstats.cli.datasets",
    "reproduce": "fedstats.cli.reproduce",
    "mean": "fedstats.cli.mean",
    "variance": "fedstats.cli.mean",
    "gap": "fedstats.cli.gap",
    "gap-plan": "fedstats.cli.gap",
    "plan": "fedstats.cli.plan",
    "secagg": "fedstats.cli.secagg",
    "heterogeneity": "fedstats.cli.heterogeneity",
    "calibrate": "fedstats.cli.privacy",
    "privacy": "fedstats.cli.privacy",
    "chi2": "fedstats.cli.chi2",
    "entropy": "fedstats.cli.entropy",
    "examples": "fedstats.cli.examples",
    "server": "fedstats.cli.server",
    "client": "fedstats.cli.client",
    "enroll": "fedstats.cli.enroll",
    "admin": "fedstats.cli.admin_prio3",  # fedstats.cli.admin with its Prio3 commands
    "validate": "fedstats.cli.validate",
}
"""Command name -> the module whose ``register`` adds it (imported only when the command runs)."""

SUMMARIES: dict[str, str] = {
    "demo": "Run every analysis implemented so far on embedded real data and print one table.",
    "datasets": "List the datasets fedstats can load: where they are, their source and license, "
    "and checksums.",
    "reproduce": "Reproduce the papers' experiments (JSON results, PNG plots, a markdown results "
    "page).",
    "mean": "Estimate the mean of a column by bit pushing (or a baseline), with CI and bits "
    "disclosed.",
    "variance": "Estimate the variance of a column: a mean stage, then bit pushing of "
    "(x - mean)^2.",
    "gap": "Measure the performance gap between two groups under local differential privacy.",
    "gap-plan": "Deprecated: use 'fedstats plan gap --alpha'. Smallest epsilon that bounds the gap's "
    "error by alpha.",
    "plan": "The clients, epsilon or encoding size a useful run needs (interval width, or power).",
    "secagg": "Secure aggregation (Bell et al. 2020): simulate the protocol, choose its parameters.",
    "heterogeneity": "Measure statistical heterogeneity of clients' image vectors with differential "
    "privacy.",
    "calibrate": "Calibrate noise to a privacy target.",
    "privacy": "Privacy of fedstats' mechanisms.",
    "chi2": "Secure federated chi-square (or G) test of independence of two columns (FED-chi^2).",
    "entropy": "Secure federated Shannon entropy (nats) of a categorical column (FED-H).",
    "examples": "List the example files built from Adult, or copy them into a folder with --out.",
    "server": "The aggregation server (needs the 'service' extra).",
    "client": "The client device (SDK: fedstats.client).",
    "enroll": "Enrollment authority: create it, issue device and analyst identities.",
    "admin": "Operator tools over the server's admin API: budgets, tasks, runs, devices, operators.",
    "validate": "Monte Carlo bias and 95% CI coverage of every analysis and protocol on real "
    "columns.",
}
"""Command name -> the first paragraph of its help, for ``fedstats --help`` without importing the command
modules (tests/cli/test_cli_startup.py checks it against what each module registers)."""
