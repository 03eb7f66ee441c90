"""``fedstats examples``: list the example files shipped in the package, or copy them into a folder.

The files (built from the embedded UCI Adult data, see :mod:`fedstats.datasets.examples`) have the shape
of a user's own data for ``gap``, ``chi2``/``entropy`` and ``heterogeneity``. ``--out DIR`` copies every
one into ``DIR`` (created if needed), each through a temporary file and a rename; it refuses to replace an
existing file unless ``--force`` is given, and checks that before writing anything.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from fedstats._io import atomic_write_bytes
from fedstats.cli._common import JsonOption, emit, out_path, state_from
from fedstats.errors import ParameterError

__all__ = ["copy_examples", "register"]


def copy_examples(out: Path, *, force: bool = False) -> list[dict[str, Any]]:
    """Copy every shipped example file into ``out``; all or nothing when no file existed before.

    Parameters
    ----------
    out : pathlib.Path
        Target folder, created if needed.
    force : bool
        Replace files of the same names already in ``out``.

    Returns
    -------
    list of dict
        Per file: ``name``, ``path``, ``bytes``, ``sha256``, ``replaced`` (an existing file was replaced),
        ``description`` and ``command``.

    Raises
    ------
    ParameterError
        ``--out`` is not a folder or cannot be written; ``--force`` is needed because files of the same
        names exist.
    """
    from fedstats.datasets.examples import EXAMPLES, example

    if out.exists() and not out.is_dir():
        raise ParameterError("--out", str(out), "a folder (this path exists and is not a folder)")
    targets = {name: out / name for name in EXAMPLES}
    existing = sorted(name for name, path in targets.items() if path.exists())
    if existing and not force:
        raise ParameterError(
            "--out",
            str(out),
            f"a folder without {', '.join(existing)} (they exist: pass --force to overwrite them)",
        )
    for name in existing:
        if not targets[name].is_file():
            raise ParameterError(
                "--out", str(out), f"a folder in which {name} is a plain file (here it is not)"
            )
    sources = {name: example(name).read_bytes() for name in EXAMPLES}
    written: list[Path] = []
    rows: list[dict[str, Any]] = []
    try:
        for name, data in sources.items():
            atomic_write_bytes(targets[name], data)
            if name not in existing:
                written.append(targets[name])
            info = EXAMPLES[name]
            rows.append(
                {
                    "name": name,
                    "path": str(targets[name]),
                    "bytes": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "replaced": name in existing,
                    "description": info.description,
                    "command": info.command,
                }
            )
    except OSError as exc:
        for path in written:  # leave nothing behind that was not there before
            path.unlink(missing_ok=True)
        reason = exc.strerror or type(exc).__name__
        raise ParameterError(
            "--out", str(out), f"a folder that can be written ({reason})"
        ) from None
    return rows


def examples(
    ctx: typer.Context,
    out_text: Annotated[
        str | None,
        typer.Option("--out", help="Copy the example files into this folder (created if needed)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite example files already in --out.")
    ] = False,
    json_flag: JsonOption = False,
) -> None:
    """List the example files built from Adult, or copy them into a folder with --out."""
    from fedstats.datasets.examples import EXAMPLES, example

    state = state_from(ctx, json_flag=json_flag)
    out = out_path(out_text)
    if force and out is None:
        raise ParameterError("--force", True, "only together with --out")
    if out is None:
        files = [
            {
                "name": e.name,
                "path": str(example(e.name)),
                "bytes": e.size,
                "sha256": e.sha256,
                "description": e.description,
                "command": e.command,
            }
            for e in EXAMPLES.values()
        ]
        payload: dict[str, Any] = {"out": None, "files": files}
    else:
        payload = {"out": str(out), "files": copy_examples(out, force=force)}

    def render(console: Console) -> None:
        where = f"copied to {out}" if out is not None else "in the package (copy with --out DIR)"
        console.print(f"example files built from UCI Adult (CC BY 4.0), {where}:")
        for f in payload["files"]:
            console.print(
                f"\n{f['name']} ({f['bytes']:,} bytes): {f['description']}", soft_wrap=True
            )
            console.print(f"  try: {f['command']}", soft_wrap=True)

    emit(state, payload, render)


def register(app: typer.Typer) -> None:
    """Add ``examples`` to the app."""
    app.command("examples")(examples)
