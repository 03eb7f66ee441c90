"""Small example files built from the embedded UCI Adult data, shipped inside the package.

They are what a user's own files look like for the commands that read a table (``gap``, ``chi2``,
``entropy``, ``heterogeneity``); ``fedstats examples --out DIR`` copies them out. How each was made is in
:mod:`fedstats.datasets._build_examples` (deterministic; ``python -m fedstats.datasets._build_examples``
rebuilds them) and ``example_files/PROVENANCE.md``. Adult is CC BY 4.0 (Becker & Kohavi 1996, UCI).

>>> from fedstats.datasets import example
>>> example("predictions").name
'predictions.csv'
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from fedstats.datasets._lookup import verify_file
from fedstats.errors import DatasetNotFoundError, ParameterError

__all__ = ["EXAMPLES", "ExampleFile", "example", "example_names"]


@dataclass(frozen=True)
class ExampleFile:
    """One shipped example file.

    Attributes
    ----------
    name : str
        File name (``"predictions.csv"``).
    description : str
        What one row is and what the columns hold.
    sha256 : str
        SHA-256 (hex) of the shipped bytes, checked by :func:`example`.
    size : int
        Size in bytes.
    command : str
        A command that reads the file from the current directory.
    """

    name: str
    description: str
    sha256: str
    size: int
    command: str


EXAMPLES: dict[str, ExampleFile] = {
    e.name: e
    for e in (
        ExampleFile(
            "predictions.csv",
            "16,281 Adult test-split people, one row per client: sex, race, correct (0/1, a logistic "
            "regression fitted on the train split predicts the income class right), confidence "
            "(probability the model gives the true class)",
            "e13ba349e6bb2d7b3616a65c25ca3863c4045f69a552bc52e5e4e1b583b045b5",
            343_022,
            "fedstats gap predictions.csv --group-column sex --value-column correct --epsilon 2",
        ),
        ExampleFile(
            "client_tables.csv",
            "all 48,842 Adult rows held by 50 clients (row i at client i mod 50) as counts: client, "
            "education, sex, income, count",
            "479fceabac85a64911275114ae9cf235f40a031d98014657728efdc8162734f5",
            62_601,
            "fedstats chi2 client_tables.csv --x education --y income --client-column client "
            "--count-column count",
        ),
        ExampleFile(
            "client_vectors.csv",
            "every 8th Adult test-split person (2,036 clients), one vector in [0, 1]^4 per client: "
            "age, education_num, hours_per_week, male, and label (1 for income >50K)",
            "aa08a08e71e0b280a560281bd02825c305d9930090ca139fd3e923cc6f9227b3",
            46_050,
            "fedstats heterogeneity client_vectors.csv --label-ratio 3:1 --epsilon 4 --delta 1e-5",
        ),
    )
}
"""The shipped example files by name, with their SHA-256 sums."""


def example_names() -> tuple[str, ...]:
    """Names of the shipped example files, in a fixed order."""
    return tuple(EXAMPLES)


def _resolve(name: str) -> ExampleFile:
    if name in EXAMPLES:
        return EXAMPLES[name]
    if f"{name}.csv" in EXAMPLES:
        return EXAMPLES[f"{name}.csv"]
    raise ParameterError(
        "name", name, "one of " + ", ".join(example_names()) + " (the .csv may be left off)"
    )


def example(name: str) -> Path:
    """Path of a shipped example file, after checking its SHA-256.

    Parameters
    ----------
    name : str
        One of :func:`example_names` (``"predictions.csv"``, ``"client_tables.csv"``,
        ``"client_vectors.csv"``); the ``.csv`` suffix may be left off.

    Returns
    -------
    pathlib.Path
        The file inside the installed package (read it, do not write to it; ``fedstats examples --out
        DIR`` makes copies).

    Raises
    ------
    ParameterError
        If ``name`` is not an example file.
    DatasetNotFoundError
        If the package was installed without its data files.
    ChecksumError
        If the file differs from the shipped version.
    """
    info = _resolve(name)
    path = Path(str(resources.files("fedstats.datasets").joinpath("example_files", info.name)))
    if not path.is_file():
        raise DatasetNotFoundError(
            f"example file {info.name} is missing from the installed package ({path}); reinstall fedstats"
        )
    return verify_file(path, info.sha256, label=f"example {info.name}")
