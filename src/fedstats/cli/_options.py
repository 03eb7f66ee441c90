"""Typer options that several commands declare alike: one declaration each (flag, type and help).

Options shared by every analysis command (engine route, output, seed) are in :mod:`fedstats.cli._common`,
those of the table commands in :mod:`fedstats.cli._tables`. The four route options come together: a
command declares one parameter ``engine_options: EngineOptions`` and :func:`route_options` gives typer
``--backend``, ``--workers``, ``--scheduler`` and ``--shard-size`` in its place.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fedstats.cli._common import (
    BackendOption,
    CliState,
    SchedulerOption,
    ShardSizeOption,
    WorkersOption,
    engine_session,
)

if TYPE_CHECKING:
    from fedstats.engine import Engine

__all__ = [
    "ConfidenceOption",
    "DataArgument",
    "EngineOptions",
    "FdStepOption",
    "FractionsOption",
    "LevelOption",
    "LowOption",
    "MeanFractionOption",
    "PopulationFilterOption",
    "ResolutionOption",
    "SplitOption",
    "drop_option",
    "route_options",
]

ConfidenceOption = Annotated[
    float, typer.Option("--confidence", help="Level of the interval, in (0, 1).")
]
DataArgument = Annotated[
    str,
    typer.Argument(help="A dataset name (e.g. adult, census-income-kdd) or a CSV/Parquet file."),
]
FdStepOption = Annotated[
    float, typer.Option("--fd-step", help="Finite-difference step D in (0, 0.5].")
]
FractionsOption = Annotated[
    str | None,
    typer.Option("--fractions", help="Group fractions 'f1,f2,...' (default two equal groups)."),
]
LevelOption = Annotated[float, typer.Option("--level", help="Significance level.")]
LowOption = Annotated[float, typer.Option("--low", help="Declared lower bound of the values.")]
SplitOption = Annotated[
    str | None,
    typer.Option("--split", help="Split of a registered dataset (e.g. train, test, all)."),
]
MeanFractionOption = Annotated[
    float, typer.Option("--mean-fraction", help="Share of the clients in the mean stage.")
]
ResolutionOption = Annotated[
    float, typer.Option("--resolution", help="Fixed-point step (> 0; 1 for integers).")
]
PopulationFilterOption = Annotated[
    str | None, typer.Option("--population", help="Only this population.")
]


@dataclass(frozen=True)
class EngineOptions:
    """The route options of a command: the engine's backend and how it runs (``--backend`` ...).

    Attributes
    ----------
    backend : str
        ``--backend``: the engine route (serial, process, dask, aggregate, secure).
    workers : int or None
        ``--workers`` (process and dask routes).
    scheduler : str or None
        ``--scheduler`` (dask route).
    shard_size : int
        ``--shard-size``: clients per shard, >= 1 (routes that work in shards).
    """

    backend: str
    workers: int | None = None
    scheduler: str | None = None
    shard_size: int = 1 << 20

    @contextmanager
    def session(self, state: CliState, **extra: Any) -> Iterator[Engine]:
        """:func:`~fedstats.cli._common.engine_session` on these options (``extra``: the route's own)."""
        with engine_session(state, **dataclasses.asdict(self), **extra) as engine:
            yield engine


_ROUTE_FIELDS = tuple(f.name for f in dataclasses.fields(EngineOptions))


def route_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command the four route options in place of its parameter ``engine_options``.

    Parameters
    ----------
    command : callable
        A typer command with a parameter ``engine_options: EngineOptions = EngineOptions(backend)``:
        the default gives the default of ``--backend``.

    Returns
    -------
    callable
        The command as typer sees it: ``--backend``, ``--workers``, ``--scheduler`` and
        ``--shard-size`` where ``command`` declares ``engine_options``; it calls ``command`` with one
        :class:`EngineOptions` (``ctx.params`` keeps the four, for
        :func:`~fedstats.cli._common.check_applies`).
    """
    signature = inspect.signature(command, eval_str=True)
    default = signature.parameters["engine_options"].default
    annotations = (BackendOption, WorkersOption, SchedulerOption, ShardSizeOption)
    params: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if param.name != "engine_options":
            params.append(param)
            continue
        for name, annotation in zip(_ROUTE_FIELDS, annotations, strict=True):
            params.append(
                param.replace(name=name, default=getattr(default, name), annotation=annotation)
            )

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        options = EngineOptions(**{name: kwargs.pop(name) for name in _ROUTE_FIELDS})
        command(*args, engine_options=options, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return wrapper


def drop_option(command: Callable[..., None], name: str) -> Callable[..., None]:
    """The command without its option ``name`` (which then takes the Python default when it runs).

    For two commands that differ by one option (``mean`` and ``variance``'s ``--mean-fraction``).

    Parameters
    ----------
    command : callable
        A typer command function.
    name : str
        The Python name of one of its parameters that has a default.

    Returns
    -------
    callable
        The command as typer sees it, without that option; calling it calls ``command``.
    """
    signature = inspect.signature(command, eval_str=True)
    kept = [param for param in signature.parameters.values() if param.name != name]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        command(*args, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=kept)  # type: ignore[attr-defined]
    return wrapper
