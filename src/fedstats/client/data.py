"""A device's data: its file read into columns, read again when it changed, and checked against a task.

* :func:`load_data` reads a CSV or Parquet file into columns (a CSV of decimal integers without pandas).
* :class:`DeviceData` holds a device's columns and, for a file, reads it again before each run the
  device accepts if the file changed since (its size or modification time): a fixed file is picked up
  at the next run without restarting the device. A run keeps the columns it was accepted with (its slots
  refer to those records) even if the file changes while it runs.
* :func:`check_data` encodes the first round of an accepted task's plan on the device's first records
  (nothing leaves the device): data that cannot fit the task (a missing column, text where category codes
  are needed, codes out of range) is refused before the device checks in, with a message naming the
  user's column.

Data columns: a CSV column ``name`` is a value per record; columns ``name[0]``, ``name[1]``, ... are
stacked into a 2-D column ``name`` (a vector per record, e.g. heterogeneity's ``x``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedstats.engine.rounds import ClientBatch
from fedstats.errors import DataError
from fedstats.wire.registry import plan_for

__all__ = ["DeviceData", "check_data", "column_sums", "load_data"]

_VECTOR = re.compile(r"^(.+)\[(\d+)\]$")
_DECIMAL = re.compile(r"-?[0-9]{1,18}")  # a decimal integer that fits int64 (at most 18 digits)
_PLAIN_CSV_BYTES = 1 << 18  # above this pandas' parser, not Python's, is the cheaper way


def _integer_csv(p: Path) -> dict[str, np.ndarray] | None:
    """The columns of a plain CSV file of decimal integers, as ``int64``; None for any other file.

    pandas' ``read_csv`` gives the same columns for such a file (unique, non-empty names in the header, as
    many fields in every row, at least one row, every field a decimal integer of at most 18 digits), and
    importing pandas is a quarter of a device process's start-up: a ``fedstats client run`` reading a
    small table of category codes does without it. Anything else (floats, empty fields, blank lines,
    names with surrounding spaces, a byte-order mark, a file over 256 KiB) returns None: pandas reads it.
    """
    import csv

    try:
        if p.stat().st_size > _PLAIN_CSV_BYTES:
            return None
        with open(p, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if len(rows) < 2:
        return None
    header, body = rows[0], rows[1:]
    if (
        not header
        or len(set(header)) != len(header)
        or any(not name or name != name.strip() or name.startswith("\ufeff") for name in header)
    ):
        return None
    width = len(header)
    if any(len(row) != width for row in body):
        return None
    if not all(_DECIMAL.fullmatch(field) for row in body for field in row):
        return None
    values = np.array([[int(field) for field in row] for row in body], dtype=np.int64)
    return {name: values[:, j].copy() for j, name in enumerate(header)}


def load_data(path: Path | str) -> dict[str, np.ndarray]:
    """Read a device's data file (CSV or Parquet) into columns (see the module docstring).

    A ``.csv`` file of decimal integers only is read without pandas (:func:`_integer_csv`: the same
    ``int64`` columns); any other file with pandas.

    Raises
    ------
    DataError
        If the file cannot be read, is empty, or has an unknown extension (naming the file).
    """
    p = Path(path)
    plain = _integer_csv(p) if p.suffix.lower() == ".csv" else None
    if plain is not None:
        return _columns(plain)
    import pandas as pd  # lazily: the SDK must import without pandas

    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            df = pd.read_parquet(p)
        elif p.suffix.lower() in (".csv", ".gz", ".txt"):
            df = pd.read_csv(p)
        else:
            raise DataError(f"data file {p.name} must be .csv or .parquet")
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read data file {p.name}: {exc}") from None
    if len(df) == 0:
        raise DataError(f"data file {p.name} has no rows")
    return _columns({str(name): df[name].to_numpy() for name in df.columns})


def _columns(table: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A file's columns by name, with ``name[0]``, ``name[1]``, ... stacked into a 2-D column ``name``."""
    cols: dict[str, np.ndarray] = {}
    vectors: dict[str, dict[int, np.ndarray]] = {}
    for name, column in table.items():
        m = _VECTOR.match(name)
        if m:
            vectors.setdefault(m.group(1), {})[int(m.group(2))] = column
        else:
            cols[name] = column
    for name, parts in vectors.items():
        if sorted(parts) != list(range(len(parts))):
            raise DataError(
                f"vector column {name!r} needs columns {name}[0] .. {name}[{len(parts) - 1}]"
            )
        cols[name] = np.stack([parts[i] for i in range(len(parts))], axis=1).astype(np.float64)
    return cols


def _records(columns: Mapping[str, np.ndarray]) -> int:
    lengths = {int(v.shape[0]) for v in columns.values()}
    if len(lengths) != 1:
        raise DataError("every data column must have one entry per record")
    return lengths.pop()


def _stamp(path: Path) -> tuple[int, int] | None:
    """``(size, modification time in ns)`` of a file, or None if it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return int(st.st_size), int(st.st_mtime_ns)


class DeviceData:
    """A device's columns, read again from its file when the file changed (see the module).

    Parameters
    ----------
    data : path or mapping
        A data file (CSV or Parquet), or columns already in memory (one row per record; never reread).

    Attributes
    ----------
    columns : dict of str to numpy.ndarray
        The columns as last read.
    n_records : int
        Records in them.

    Raises
    ------
    DataError
        If the file cannot be read or its columns differ in length.
    """

    def __init__(self, data: Path | str | Mapping[str, Any]) -> None:
        self.path: Path | None = None
        self._stamp: tuple[int, int] | None = None
        if isinstance(data, Mapping):
            self.columns = {k: np.asarray(v) for k, v in data.items()}
        else:
            self.path = Path(data)
            self._stamp = _stamp(self.path)
            self.columns = load_data(self.path)
        self.n_records = _records(self.columns)

    def refresh(self) -> bool:
        """Read the file again if it changed since it was last read; return whether it was read.

        Raises
        ------
        DataError
            If the changed file cannot be read (the columns read before are kept; the next call tries
            again).
        """
        if self.path is None:
            return False
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        columns = load_data(self.path)
        n = _records(columns)
        self.columns, self.n_records, self._stamp = columns, n, stamp
        return True


def check_data(
    task: Mapping[str, Any],
    columns: Mapping[str, np.ndarray],
    n_records: int,
    rng: np.random.Generator,
) -> None:
    """Encode the first round of ``task``'s plan on the device's first records; raise if they cannot.

    The round is derived with a placeholder public seed and the task's largest cohort; its output is
    discarded (nothing is sent, nothing is charged: the encoding only checks that the columns exist and
    hold what the task needs). Only the first round is tried: a later round's columns are checked when
    it comes.

    Parameters
    ----------
    task : mapping
        The accepted (verified) task.
    columns : mapping of str to numpy.ndarray
        The device's columns.
    n_records : int
        Records in them (>= 1).
    rng : numpy.random.Generator
        The device's randomness for the discarded encoding.

    Raises
    ------
    DataError
        If the data cannot be encoded for the task (naming the user's column).
    """
    count = max(1, min(int(n_records), int(task.get("max_records_per_client", 1))))
    n = int(task["cohort_size"]) * int(task.get("max_records_per_client", 1))
    try:
        rnd = next(plan_for(task, n_clients=n, public_seed=bytes(32)))
    except Exception:
        return
    batch = ClientBatch({k: v[:count] for k, v in columns.items()}, start=0, total=n)
    try:
        rnd.encode(batch, rnd.params, rng)
    except DataError:  # the encoder's own words, naming the column
        raise
    except (TypeError, ValueError) as exc:  # e.g. arithmetic on text: the encoder's own message
        raise DataError(
            f"the data's columns ({', '.join(sorted(columns))[:120]}) do not fit the task's "
            f"first round {rnd.name!r}: {type(exc).__name__}: {exc}"
        ) from None


def column_sums(reports: np.ndarray) -> list[int]:
    """The exact column sums of a device's reports, as Python integers (its summed report).

    ``[int(x) for x in reports.sum(axis=0, dtype=object)]``: summed as Python integers, so no sum
    can overflow. Integer reports whose rows cannot overflow ``int64`` together (the largest
    magnitude times the rows below ``2**63``, as every round's bounded reports of a device's few
    records are) are summed in ``int64`` at once instead, the same integers.

    Parameters
    ----------
    reports : numpy.ndarray
        Shape ``(records, dim)``: one report per record (:meth:`fedstats.engine.rounds.Round.encode_checked`).

    Returns
    -------
    list of int
        ``dim`` column sums.
    """
    if isinstance(reports, np.ndarray) and reports.ndim == 2 and reports.dtype.kind in "iu":
        if reports.size == 0:
            return [0] * reports.shape[1]
        top = max(int(reports.max()), -int(reports.min()))
        if top * reports.shape[0] < 2**63:
            sums: list[int] = reports.sum(axis=0, dtype=np.int64).tolist()  # Python ints
            return sums
    return [int(x) for x in reports.sum(axis=0, dtype=object)]
