"""``fedstats datasets [NAME]``: what data is available, where, its source and license, and its checksums."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from fedstats.cli._common import DataDirOption, JsonOption, emit, state_from
from fedstats.datasets import DATASETS, candidate_roots, dataset_info, dataset_status
from fedstats.errors import ChecksumError, DatasetNotFoundError


def _entry(name: str, data_dir: Path | None, verify: bool) -> dict[str, Any]:
    info = DATASETS[name]
    status = dataset_status(name, data_dir, verify=verify)
    return {
        "name": name,
        "description": info.description,
        "present": status.present,
        "verified": status.verified if verify else None,
        "location": status.location,
        "problem": status.problem,
        "shape": info.shape,
        "loader": f"fedstats.datasets.{info.loader}",
        "source": info.source,
        "original_source": info.original_source,
        "license": info.license,
        "license_short": info.license_short,
        "origin": info.origin,
        "citation": info.citation,
        "files": [asdict(f) for f in info.files],
    }


def _state_word(entry: dict[str, Any]) -> str:
    if not entry["present"]:
        return "[red]missing[/red]"
    if entry["verified"] is None:
        return "present"
    return "[green]verified[/green]" if entry["verified"] else "[red]CHECKSUM MISMATCH[/red]"


def datasets(
    ctx: typer.Context,
    name: Annotated[
        str | None, typer.Argument(help="Show one dataset in detail (files and SHA-256 sums).")
    ] = None,
    json_flag: JsonOption = False,
    data_dir: DataDirOption = None,
    verify: Annotated[
        bool, typer.Option("--verify/--no-verify", help="Check every file's SHA-256 (default on).")
    ] = True,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Exit with code 2 if a listed dataset is missing or corrupt."
        ),
    ] = False,
) -> None:
    """List the datasets fedstats can load: where they are, their source and license, and checksums."""
    state = state_from(ctx, json_flag=json_flag, data_dir=data_dir)
    names = [dataset_info(name).name] if name is not None else list(DATASETS)
    entries = [_entry(n, state.data_dir, verify) for n in names]
    roots = [f"{p} ({origin})" for p, origin in candidate_roots(state.data_dir)]
    if state.data_dir is None:
        roots.append("embedded copies in the package (adult, digits)")
    payload: dict[str, Any] = {"datasets": entries, "search_order": roots}

    def render(console: Console) -> None:
        if name is None:
            table = Table(title="fedstats datasets", show_lines=False)
            for col in ("name", "status", "location", "license", "source"):
                table.add_column(col, overflow="fold")
            for e in entries:
                table.add_row(
                    e["name"],
                    _state_word(e),
                    e["location"] or "-",
                    e["license_short"],
                    e["origin"],
                )
            console.print(table)
            console.print("searched: " + "; ".join(roots), style="dim")
            console.print("details, files and SHA-256 sums: fedstats datasets NAME", style="dim")
            return
        e = entries[0]
        info = Table(show_header=False, box=None, title=f"dataset {e['name']}")
        for key in ("description", "location", "shape", "loader", "source", "original_source"):
            info.add_row(key, str(e[key] if e[key] is not None else "-"))
        info.add_row("license", e["license"])
        info.add_row("citation", e["citation"])
        info.add_row("status", _state_word(e) + (f" ({e['problem']})" if e["problem"] else ""))
        console.print(info)
        files = Table(title="files")
        for col in ("file", "bytes", "sha256", "embedded", "required"):
            files.add_column(col, overflow="fold")
        for f in e["files"]:
            files.add_row(
                f["name"], f"{f['size']:,}", f["sha256"], str(f["embedded"]), str(f["required"])
            )
        console.print(files)

    emit(state, payload, render)
    if strict:
        bad = [e for e in entries if not e["present"] or e["verified"] is False]
        if bad:
            listing = ", ".join(f"{e['name']} ({e['problem']})" for e in bad)
            if any(not e["present"] for e in bad):
                raise DatasetNotFoundError(
                    f"datasets missing or corrupt: {listing}; searched " + "; ".join(roots)
                )
            raise ChecksumError(f"datasets failing their SHA-256 check: {listing}")


def register(app: typer.Typer) -> None:
    """Add ``datasets`` to the app."""
    app.command("datasets")(datasets)
