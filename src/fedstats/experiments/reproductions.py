"""The reproductions ``fedstats reproduce`` offers: each one's command name, module and own options.

One :class:`Reproduction` per reproduced paper in :data:`REPRODUCTIONS`, in help order; its module defines
``run(ctx: RunContext) -> dict`` and the run framework (:mod:`fedstats.experiments.framework`) does the rest.
Adding a reproduction is adding an entry here (options it takes beyond the shared ones are
:class:`Option` records).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["REPRODUCTIONS", "Option", "Reproduction"]


@dataclass(frozen=True)
class Option:
    """A reproduction's own command-line option.

    Attributes
    ----------
    name : str
        Python name, passed to the run in :attr:`RunContext.options` (``"legacy"``).
    kind : type
        ``bool`` (a flag) or ``int``.
    default : object
        Default value (``False`` for flags; ``None`` means "the reproduction's default").
    help : str
        One-line help.
    minimum : int or None
        Smallest accepted value for ``int`` options.
    """

    name: str
    kind: type
    default: Any
    help: str
    minimum: int | None = None


@dataclass(frozen=True)
class Reproduction:
    """One reproduction of a paper's experiments.

    Attributes
    ----------
    name : str
        Command name and file stem (``"fed-chi2"``).
    summary : str
        One line for ``fedstats reproduce --help``.
    module : str
        Module defining ``run(ctx: RunContext) -> dict``; its last component names the template.
    default_seed : int
        Seed of the published (committed) run, used when the user gives none.
    reps : bool
        Whether ``--reps`` applies.
    workers : bool
        Whether ``--workers`` applies (cells run in a process pool).
    options : tuple of Option
        Further options of this reproduction only.
    """

    name: str
    summary: str
    module: str
    default_seed: int
    reps: bool = False
    workers: bool = False
    options: tuple[Option, ...] = ()


REPRODUCTIONS: tuple[Reproduction, ...] = (
    Reproduction(
        "fed-chi2",
        "Pang et al. (ICML 2023): Figures 1, 2, 5, feature selection and online FDR (Table 3).",
        "fedstats.experiments.fed_chi2",
        2023,
        workers=True,
    ),
    Reproduction(
        "bit-pushing",
        "Cormode & Markov: bit pushing's Figures 1-3 on real ages.",
        "fedstats.experiments.bit_pushing",
        2021,
        reps=True,
    ),
    Reproduction(
        "performance-gap",
        "Juarez & Korolova: Table 1, Figures 1-2, Appendix C and Table 2 (corrected privacy).",
        "fedstats.experiments.performance_gap",
        0,
        reps=True,
        options=(
            Option(
                "table2_clients",
                int,
                None,
                "Table 2's simulated clients K (default 1e7, quick 1e5).",
                minimum=2,
            ),
            Option(
                "aggregate",
                bool,
                False,
                "Run Table 2 on the aggregate route (equal in distribution, cost independent of K).",
            ),
        ),
    ),
    Reproduction(
        "heterogeneity",
        "Scott, Cormode & Maple: Tables 1-6 and Figure 1 with correct mathematics.",
        "fedstats.experiments.heterogeneity",
        2024,
        reps=True,
        options=(
            Option("legacy", bool, False, "Also emulate the authors' script (published Table 1)."),
        ),
    ),
)
"""Every reproduction ``fedstats reproduce`` offers, in help order."""
