"""``fedstats client run``: a device answering an aggregation server with its own data file."""

from __future__ import annotations

import inspect
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from fedstats.client import (
    ConnectionFailed,
    Device,
    LocalBudget,
    Policy,
    ca_context,
    check_private_file,
)
from fedstats.client.vdaf_runs import Prio3Runs
from fedstats.errors import DataError
from fedstats.randomness import RandomSource

# every default below is the one of the device SDK (its policy, budget and Device.run): one home
_POLICY = Policy
_BUDGET = LocalBudget
_RUN = inspect.signature(Device.run).parameters

client_app = typer.Typer(help="The client device (SDK: fedstats.client).", no_args_is_help=True)


MinColluderFractionOption = Annotated[
    float,
    typer.Option(
        "--min-colluder-fraction",
        min=0.0,
        max=1.0,
        help="Refuse a secure session that fewer than this share of colluders could break.",
    ),
]
MaxAbortedRunsOption = Annotated[
    int,
    typer.Option(
        "--max-aborted-runs",
        min=0,
        help="Stop joining a secure task after this many of its runs aborted after the reveal.",
    ),
]
MaxExactRunsPerTaskOption = Annotated[
    int,
    typer.Option(
        "--max-exact-runs-per-task", min=0, help="Runs of one exact task to take part in."
    ),
]
MaxExactRunsPerAnalystOption = Annotated[
    int,
    typer.Option(
        "--max-exact-runs-per-analyst", min=0, help="Exact runs of one analyst to take part in."
    ),
]
PollOption = Annotated[
    float,
    typer.Option(
        "--poll", min=0.01, help="Seconds between polls with --wait 0, and before a retry."
    ),
]
WaitOption = Annotated[
    float,
    typer.Option(
        "--wait",
        min=0.0,
        max=3600.0,
        help="Long polling: the server holds each poll up to this long until there is new work "
        "(0: poll every --poll seconds).",
    ),
]
RunsOption = Annotated[
    int | None,
    typer.Option("--runs", min=1, help="Join exactly this many runs; stop once they all finished."),
]
ConnectTimeoutOption = Annotated[
    float,
    typer.Option(
        "--connect-timeout",
        min=0.1,
        help="Seconds to keep trying a server that refuses connections before giving up (exit "
        "1); a TLS failure or an unknown host fails at once.",
    ),
]
Prio3Option = Annotated[
    bool,
    typer.Option(
        "--prio3",
        help="--server is a Prio3 leader: join and answer its signed Prio3 tasks (docs/vdaf.md), "
        "long-polling GET /v1/vdaf/work; the device's first record is its report.",
    ),
]
MinSessionSizeOption = Annotated[
    int,
    typer.Option("--min-session-size", min=2, help="Smallest secure-aggregation session to join."),
]
MinBatchSizeOption = Annotated[
    int,
    typer.Option("--min-batch-size", min=1, help="Smallest Prio3 batch to contribute a report to."),
]


@client_app.command("run")
def run(
    server: Annotated[
        str, typer.Option("--server", help="Server base URL, e.g. https://127.0.0.1:8443.")
    ],
    identity: Annotated[
        Path, typer.Option("--identity", help="Identity file from 'fedstats enroll client'.")
    ],
    data: Annotated[Path, typer.Option("--data", help="The device's data: CSV or Parquet.")],
    ca: Annotated[
        Path | None, typer.Option("--ca", help="CA certificate of the server (PEM).")
    ] = None,
    budget_file: Annotated[
        Path | None,
        typer.Option(
            "--budget-file", help="Local privacy budget file (default: beside the identity)."
        ),
    ] = None,
    budget_epsilon: Annotated[
        float, typer.Option("--budget-epsilon", min=0.0, help="Total local epsilon.")
    ] = _BUDGET.epsilon,
    budget_delta: Annotated[
        float, typer.Option("--budget-delta", min=0.0, max=1.0, help="Total local delta.")
    ] = _BUDGET.delta,
    max_epsilon: Annotated[
        float, typer.Option("--max-epsilon", min=0.0, help="Largest epsilon per task.")
    ] = _POLICY.max_epsilon,
    max_delta: Annotated[
        float, typer.Option("--max-delta", min=0.0, max=1.0, help="Largest delta per task.")
    ] = _POLICY.max_delta,
    max_bits: Annotated[
        float | None, typer.Option("--max-bits", min=0.0, help="Largest private bits per record.")
    ] = _POLICY.max_bits,
    allow: Annotated[
        list[str] | None,
        typer.Option("--allow", help="Allowed analysis (repeatable; default all)."),
    ] = None,
    allow_non_private: Annotated[
        bool, typer.Option("--allow-non-private", help="Take part in exact analyses.")
    ] = _POLICY.allow_non_private,
    min_session_size: MinSessionSizeOption = _POLICY.min_session_size,
    min_batch_size: MinBatchSizeOption = _POLICY.min_batch_size,
    min_colluder_fraction: MinColluderFractionOption = _POLICY.min_colluder_fraction,
    max_aborted_runs: MaxAbortedRunsOption = _POLICY.max_aborted_runs,
    max_exact_runs_per_task: MaxExactRunsPerTaskOption = _POLICY.max_exact_runs_per_task,
    max_exact_runs_per_analyst: MaxExactRunsPerAnalystOption = _POLICY.max_exact_runs_per_analyst,
    poll: PollOption = _RUN["poll"].default,
    wait: WaitOption = _RUN["wait"].default,
    runs: RunsOption = None,
    connect_timeout: ConnectTimeoutOption = _RUN["connect_timeout"].default,
    max_seconds: Annotated[
        float | None, typer.Option("--max-seconds", min=0.1, help="Stop after this long.")
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option("--seed", min=0, help="Seeded device randomness (not for release)."),
    ] = None,
    prio3: Prio3Option = False,
) -> None:
    """Poll the server, check each task against the local policy and budget, answer its rounds.

    Exits 1 with one line saying why (TLS failure, unknown host, connection refused) if the server
    never answered, 2 on a refused request (for example a revoked device: HTTP 403).
    """
    policy = Policy(
        allowed_analyses=tuple(allow) if allow else None,
        max_epsilon=max_epsilon,
        max_delta=max_delta,
        max_bits=max_bits,
        allow_non_private=allow_non_private,
        min_session_size=min_session_size,
        min_batch_size=min_batch_size,
        min_colluder_fraction=min_colluder_fraction,
        max_aborted_runs=max_aborted_runs,
        max_exact_runs_per_task=max_exact_runs_per_task,
        max_exact_runs_per_analyst=max_exact_runs_per_analyst,
    )
    # checked before anything connects: each a one-line error (exit 2)
    check_private_file(identity, "--identity")
    if ca is not None:
        ca_context(ca, "--ca")
    path = budget_file or identity.with_suffix(".budget.json")
    budget = LocalBudget(path, epsilon=budget_epsilon, delta=budget_delta)
    dev = Device(
        server,
        identity,
        data,
        policy=policy,
        budget=budget,
        ca=ca,
        randomness=RandomSource(seed),
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )

    try:
        if (
            prio3
        ):  # the same identity, policy, budget, randomness and log, on the leader's Prio3 tasks
            _run_prio3(dev, identity, ca, poll, wait, runs, max_seconds, connect_timeout)
        else:
            dev.run(
                poll=poll,
                wait=wait,
                runs=runs,
                max_seconds=max_seconds,
                connect_timeout=connect_timeout,
            )
    except ConnectionFailed as exc:  # never reached the server: say why, exit 1
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise typer.Exit(1) from None
    finally:
        dev.close()


def _run_prio3(
    dev: Device,
    identity: Path,
    ca: Path | None,
    poll: float,
    wait: float,
    runs: int | None,
    max_seconds: float | None,
    connect_timeout: float,
) -> None:
    """``client run --prio3``: the device's signed Prio3 tasks on its server (the leader)."""
    dev._probe(time.monotonic(), poll, connect_timeout, max_seconds)  # reachable, else exit 1
    loop = Prio3Runs.for_device(dev, identity, ca=ca)
    try:
        loop.run(wait=wait, poll=poll, runs=runs, max_seconds=max_seconds)
    except DataError as exc:  # a refused request (a revoked device: 401/403)
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise typer.Exit(2) from None
    finally:
        dev.log(
            f"prio3: {loop.requests} requests ({loop.polls} polls), "
            f"{sum(a.value == 'sent' for a in loop.answers.values())} reports sent"
        )
        loop.close()


def register(app: typer.Typer) -> None:
    """Add ``client`` to the app."""
    app.add_typer(client_app, name="client")
