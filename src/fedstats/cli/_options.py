"""Typer options that several commands declare alike: one declaration each (flag, type and help).

Options shared by every analysis command (engine route, output, seed) are in :mod:`fedstats.cli._common`,
those of the table commands in :mod:`fedstats.cli._tables`.
"""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["IntervalLevelOption", "LevelOption", "LowOption", "PopulationFilterOption"]

IntervalLevelOption = Annotated[
    float, typer.Option("--confidence", help="Level of the interval, in (0, 1).")
]
LevelOption = Annotated[float, typer.Option("--level", help="Significance level.")]
LowOption = Annotated[float, typer.Option("--low", help="Declared lower bound of the values.")]
PopulationFilterOption = Annotated[
    str | None, typer.Option("--population", help="Only this population.")
]
