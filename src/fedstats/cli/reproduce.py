"""``fedstats reproduce NAME``: reproductions of the papers' tables and figures, one table-driven command.

Each entry of :data:`fedstats.experiments.framework.REPRODUCTIONS` becomes a subcommand with the common
options (``--out``, ``--quick``, ``--update-committed``, ``--data-dir``, ``--json``, ``--seed``), plus
``--reps`` and ``--workers`` where the reproduction uses them and its own options; nothing is accepted that
a reproduction would ignore. Output folders follow :func:`fedstats.experiments.framework.output_folder`:
never the committed ``results/<name>/`` unless ``--update-committed`` is given for a full run.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Annotated, Any

import typer

from fedstats.cli._common import (
    DataDirOption,
    FedstatsGroup,
    JsonOption,
    SeedOption,
    emit,
    out_path,
    progress_for,
    state_from,
)
from fedstats.experiments import framework
from fedstats.experiments.framework import Reproduction

# Reproductions still served by their own command module (being moved onto the framework).
_LEGACY: dict[str, str] = {}


def _reproduce_app() -> typer.Typer:
    """A new ``reproduce`` group (one per :func:`register` call: registering never mutates shared state)."""
    return typer.Typer(
        cls=FedstatsGroup,
        help="Reproduce the papers' experiments (JSON results, PNG plots, a markdown results page).",
        no_args_is_help=True,
    )


def _command(rep: Reproduction) -> Any:
    """A typer command for ``rep`` whose signature holds exactly the options it takes."""

    def command(ctx: typer.Context, **kw: Any) -> None:
        from fedstats.experiments.framework import run_reproduction

        state = state_from(
            ctx, json_flag=kw.pop("json_flag"), seed=kw.pop("seed"), data_dir=kw.pop("data_dir")
        )
        with progress_for(state) as progress:
            run_ctx, doc = run_reproduction(
                rep.name,
                out=out_path(kw.pop("out")),
                quick=kw.pop("quick"),
                update_committed=kw.pop("update_committed"),
                seed=state.seed,
                data_dir=state.data_dir,
                progress=progress,
                **kw,
            )
        emit(
            state,
            {
                "reproduction": rep.name,
                "out": str(run_ctx.out),
                "files": [f"{run_ctx.stem}.json", f"{run_ctx.stem}.md", *doc.get("plots", [])],
                "seconds": doc.get("seconds"),
                "settings": run_ctx.settings,
                "notes": doc.get("notes", []),
                "release_note": run_ctx.randomness.release_note,
            },
        )

    def option(name: str, default: Any, annotation: Any) -> inspect.Parameter:
        return inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
        )

    params = [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        option(
            "out",
            None,
            Annotated[
                str | None,
                typer.Option(
                    "--out",
                    help=f"Output folder (default ./reproduce-{rep.name}[-quick]; never the "
                    "committed results unless --update-committed).",
                ),
            ],
        ),
        option(
            "quick",
            False,
            Annotated[bool, typer.Option("--quick", help="Small version (about a minute).")],
        ),
        option(
            "update_committed",
            False,
            Annotated[
                bool,
                typer.Option(
                    "--update-committed",
                    help="Write a full run into results/<name>/ (replacing the committed results).",
                ),
            ],
        ),
    ]
    if rep.reps:
        reps = typer.Option("--reps", min=2, help="Repetitions per point.")
        params.append(option("reps", None, Annotated[int | None, reps]))
    if rep.workers:
        workers = typer.Option("--workers", min=1, help="Processes running cells.")
        params.append(option("workers", None, Annotated[int | None, workers]))
    for opt in rep.options:
        flag = "--" + opt.name.replace("_", "-")
        ann: Any = Annotated[
            opt.kind if opt.default is not None else opt.kind | None,
            typer.Option(flag, help=opt.help, min=opt.minimum)
            if opt.kind is int
            else typer.Option(flag, help=opt.help),
        ]
        params.append(option(opt.name, opt.default, ann))
    params += [
        option("data_dir", None, DataDirOption),
        option("json_flag", False, JsonOption),
        option("seed", None, SeedOption),
    ]

    def wrapper(ctx: typer.Context, **kw: Any) -> None:
        command(ctx, **kw)

    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__doc__ = rep.summary
    wrapper.__name__ = rep.name.replace("-", "_")
    return wrapper


def register(app: typer.Typer) -> None:
    """Add the ``reproduce`` group with one subcommand per registered reproduction."""
    reproduce_app = _reproduce_app()
    for rep in framework.REPRODUCTIONS:  # read at registration (tests may replace the table)
        if rep.name in _LEGACY:
            importlib.import_module(_LEGACY[rep.name]).register_reproduce(reproduce_app)
        else:
            reproduce_app.command(rep.name)(_command(rep))
    app.add_typer(reproduce_app, name="reproduce")
