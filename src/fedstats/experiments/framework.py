"""The run framework every reproduction shares: output folder, settings-keyed cells, workers, pages.

A reproduction is one entry of :data:`REPRODUCTIONS` (a :class:`Reproduction`: its command name, its module
and its own options; the table is in :mod:`fedstats.experiments.reproductions`) and one module-level
function ``run(ctx: RunContext) -> dict`` in that module. The framework does everything else the same way
for all of them:

* **Where results go** (:func:`output_folder`): ``--out DIR`` if given, else ``./reproduce-<name>[-quick]``
  under the current directory. A folder that holds a *full* run's results (``<name>.json`` with
  ``"quick": false``, such as the committed ``results/<name>/``) is replaced only with
  ``update_committed=True`` (``--update-committed``), and never by a quick run. A folder that cannot be
  written (a file, ``/dev/null``, read-only) is refused before any work starts.
* **Cells** (:meth:`RunContext.cells`): each cell is computed once and saved at once
  (:class:`~fedstats.experiments.checkpoint.CheckpointStore`), keyed by *every setting that changes it*
  (quick, seed, repetitions and the reproduction's own options, :attr:`RunContext.settings`), so a rerun with
  other settings recomputes instead of reusing old cells under new labels. With ``workers > 1`` cells run in
  a process pool (their functions must then be module-level, with picklable arguments).
* **Files**: ``<stem>.json`` (the document), ``<stem>.md`` (the page, rendered from the Jinja2 template
  ``templates/<module name>.md.j2``, which extends ``_base.md.j2``: quick runs say so at the top), and PNG
  plots, where ``<stem>`` is ``<name>`` or ``<name>-quick``. Every file is written atomically.

Example
-------
A reproduction module::

    def run(ctx: RunContext) -> dict[str, Any]:
        grid = (0.5, 1.0) if ctx.quick else (0.25, 0.5, 1.0, 2.0)
        cells = [Cell(f"eps={e}", one_cell, (e, ctx.reps)) for e in grid]
        values = ctx.cells(cells)
        doc = {"cells": values}
        ctx.finish(doc, plots=[])
        return doc
"""

from __future__ import annotations

import concurrent.futures
import importlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedstats.errors import ParameterError
from fedstats.experiments.checkpoint import CheckpointStore, write_json_atomic, write_text_atomic
from fedstats.experiments.pages import render
from fedstats.experiments.reproductions import REPRODUCTIONS, Option, Reproduction
from fedstats.progress import NullProgress, Progress
from fedstats.randomness import RandomSource
from fedstats.results import to_jsonable

__all__ = [
    "REPRODUCTIONS",
    "Cell",
    "Option",
    "Reproduction",
    "RunContext",
    "output_folder",
    "render",
    "reproduction",
    "run_reproduction",
]


def reproduction(name: str) -> Reproduction:
    """The registered reproduction called ``name``.

    Raises
    ------
    ParameterError
        If there is none.
    """
    for r in REPRODUCTIONS:  # this module's name: substituting framework.REPRODUCTIONS takes effect
        if r.name == name:
            return r
    raise ParameterError("name", name, "one of " + ", ".join(r.name for r in REPRODUCTIONS))


@dataclass(frozen=True)
class Cell:
    """One unit of work: a key, a function and its arguments.

    Attributes
    ----------
    key : str
        Unique within the run (the settings are added to it by the checkpoint).
    fn : callable
        Computes a JSON-ready value from ``*args``; module-level when run with workers.
    args : tuple
        Positional arguments.
    """

    key: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


def _call(cell: Cell) -> tuple[str, Any]:
    return cell.key, to_jsonable(cell.fn(*cell.args))


def _check_writable(folder: Path) -> None:
    """Refuse an output folder that is a file, a device, or not writable, before any work starts."""
    if folder.exists() and not folder.is_dir():
        raise ParameterError("out", str(folder), "a folder (this path is a file or a device)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ParameterError(
            "out", str(folder), f"a folder that can be created and written ({exc.strerror})"
        ) from None


def _holds_full_run(folder: Path, name: str) -> bool:
    doc = folder / f"{name}.json"
    if not doc.is_file():
        return False
    try:
        data = json.loads(doc.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and data.get("quick") is False


def output_folder(
    name: str,
    out: Path | None,
    *,
    quick: bool,
    update_committed: bool = False,
    cwd: Path | None = None,
) -> Path:
    """Where a run writes, by the policy in the module docstring.

    Parameters
    ----------
    name : str
        The reproduction's name.
    out : pathlib.Path or None
        The folder the user asked for; None for the default under ``cwd``.
    quick : bool
        Whether this is a quick run.
    update_committed : bool, default False
        Allow replacing a full run's results (the committed ``results/<name>/``).
    cwd : pathlib.Path, optional
        The current directory (default :func:`pathlib.Path.cwd`).

    Returns
    -------
    pathlib.Path
        An existing, writable folder.

    Raises
    ------
    ParameterError
        If the folder cannot be written, or would replace a full run's results without
        ``update_committed`` (or with a quick run).
    """
    base = cwd if cwd is not None else Path.cwd()
    if update_committed and quick:
        raise ParameterError("update_committed", True, "a full run (not with quick)")
    if out is None:
        folder = base / "results" / name if update_committed else base / f"reproduce-{name}"
        if quick:
            folder = base / f"reproduce-{name}-quick"
    else:
        folder = Path(out)
    if _holds_full_run(folder, name) and not update_committed:
        raise ParameterError(
            "out",
            str(folder),
            "a folder without a full run's results (it holds them; pass update_committed=True, "
            "--update-committed, to replace them with a full run)",
        )
    _check_writable(folder)
    return folder


@dataclass
class RunContext:
    """Everything a reproduction's ``run`` needs, and the framework's services.

    Attributes
    ----------
    name : str
        The reproduction's name (file stem without ``-quick``).
    out : pathlib.Path
        Output folder (exists, writable).
    quick : bool
        Small version.
    randomness : RandomSource
        The run's root source; cells derive theirs with ``randomness.child(...)``.
    reps : int or None
        Repetitions asked for (None: the reproduction's default).
    workers : int
        Processes for cells, >= 1.
    data_dir : pathlib.Path or None
        Folder of the real datasets.
    options : dict
        The reproduction's own options (:class:`Option`).
    progress : Progress
        Progress receiver.
    seed : int or None
        The seed the run was started with (part of the settings).
    template : str
        The page template (``<module>.md.j2``).
    """

    name: str
    out: Path
    quick: bool
    randomness: RandomSource
    reps: int | None = None
    workers: int = 1
    data_dir: Path | None = None
    options: dict[str, Any] = field(default_factory=dict)
    progress: Progress = field(default_factory=NullProgress)
    seed: int | None = None
    template: str = ""
    started: float = field(default_factory=time.perf_counter)

    @property
    def stem(self) -> str:
        """File stem: ``<name>`` or ``<name>-quick``."""
        return f"{self.name}-quick" if self.quick else self.name

    @property
    def settings(self) -> dict[str, Any]:
        """Every setting that changes a cell's value (the checkpoint key includes them all)."""
        return {
            "quick": self.quick,
            "seed": self.seed,
            "reps": self.reps,
            **{k: v for k, v in sorted(self.options.items())},
        }

    def store(self, part: str = "cells") -> CheckpointStore:
        """The checkpoint of one part of the run, keyed by :attr:`settings`."""
        name = self.stem if part == "cells" else f"{self.stem}.{part}"
        return CheckpointStore(self.out, name, settings=self.settings)

    def cells(
        self, cells: Sequence[Cell], *, part: str = "cells", task: str | None = None
    ) -> dict[str, Any]:
        """Compute the cells not yet saved (in a process pool when ``workers > 1``); all values by key.

        Parameters
        ----------
        cells : sequence of Cell
            Unique keys.
        part : str, default "cells"
            Which checkpoint file (one per part of a reproduction).
        task : str, optional
            Progress label (default ``"<name> <part>"``).

        Returns
        -------
        dict
            ``{key: value}`` in the order of ``cells`` (JSON-ready values, as saved).

        Raises
        ------
        ParameterError
            If two cells share a key.
        """
        keys = [c.key for c in cells]
        if len(set(keys)) != len(keys):
            raise ParameterError("cells", "duplicate keys", "unique cell keys")
        store = self.store(part)
        label = task or f"{self.name} {part}"
        todo = [c for c in cells if c.key not in store]
        self.progress.start(label, len(cells))
        self.progress.advance(label, len(cells) - len(todo))
        if self.workers <= 1 or len(todo) <= 1:
            for c in todo:
                store.put(*_call(c))
                self.progress.advance(label)
        else:
            with concurrent.futures.ProcessPoolExecutor(max_workers=self.workers) as pool:
                for key, value in pool.map(_call, todo, chunksize=1):
                    store.put(key, value)
                    self.progress.advance(label)
        self.progress.finish(label)
        return {k: store.get(k) for k in keys}

    def plot_title(self, title: str) -> str:
        """A plot title that says "quick run" on quick runs."""
        return f"{title} (quick run: small grid, not the paper's settings)" if self.quick else title

    def finish(self, doc: dict[str, Any], *, plots: Sequence[str] = ()) -> Path:
        """Write ``<stem>.json`` and the page ``<stem>.md`` rendered from the module's template.

        Parameters
        ----------
        doc : dict
            The results document; ``quick``, ``settings``, ``plots`` and ``seconds`` are added.
        plots : sequence of str
            File names of the plots written into :attr:`out`.

        Returns
        -------
        pathlib.Path
            The page's path.
        """
        doc["quick"] = self.quick
        doc["settings"] = self.settings
        doc["plots"] = list(plots)
        doc["seconds"] = round(time.perf_counter() - self.started, 1)
        write_json_atomic(self.out / f"{self.stem}.json", doc)
        page = self.out / f"{self.stem}.md"
        write_text_atomic(page, render(self.template, doc=doc, quick=self.quick, stem=self.stem))
        return page


def run_reproduction(
    name: str,
    *,
    out: Path | None = None,
    quick: bool = False,
    seed: int | None = None,
    reps: int | None = None,
    workers: int | None = None,
    data_dir: Path | None = None,
    update_committed: bool = False,
    progress: Progress | None = None,
    **options: Any,
) -> tuple[RunContext, dict[str, Any]]:
    """Run the reproduction ``name`` under the framework's policies.

    Parameters
    ----------
    name : str
        A registered reproduction (:data:`REPRODUCTIONS`).
    out : pathlib.Path or None
        Output folder (see :func:`output_folder`).
    quick : bool
        Small version.
    seed : int or None
        Seed (default: the reproduction's published seed). Results are always marked with the seed.
    reps : int or None
        Repetitions; only for reproductions with ``reps``.
    workers : int or None
        Processes; only for reproductions with ``workers``.
    data_dir : pathlib.Path or None
        Folder of the real datasets.
    update_committed : bool
        Allow replacing a full run's results.
    progress : Progress, optional
        Progress receiver.
    **options
        The reproduction's own options.

    Returns
    -------
    (RunContext, dict)
        The context (output folder, settings) and the results document.

    Raises
    ------
    ParameterError
        For an unknown reproduction, an option it does not take, or an output folder refused by
        :func:`output_folder`.
    """
    rep = reproduction(name)
    if reps is not None and not rep.reps:
        raise ParameterError("reps", reps, f"no value: {name} has no repetitions option")
    if workers is not None and not rep.workers:
        raise ParameterError("workers", workers, f"no value: {name} does not run cells in parallel")
    known = {o.name: o for o in rep.options}
    for key in options:
        if key not in known:
            raise ParameterError(
                key, options[key], f"one of the options of {name}: {sorted(known)}"
            )
    opts = {o.name: options.get(o.name, o.default) for o in rep.options}
    folder = output_folder(name, out, quick=quick, update_committed=update_committed)
    s = rep.default_seed if seed is None else seed
    ctx = RunContext(
        name=name,
        out=folder,
        quick=quick,
        randomness=RandomSource(s),
        reps=reps,
        workers=max(1, workers or 1),
        data_dir=data_dir,
        options=opts,
        progress=progress or NullProgress(),
        seed=s,
        template=f"{rep.module.rsplit('.', 1)[-1]}.md.j2",
    )
    doc: dict[str, Any] = importlib.import_module(rep.module).run(ctx)
    return ctx, doc
