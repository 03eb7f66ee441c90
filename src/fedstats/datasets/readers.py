"""Readers for the file formats users bring: IDX (MNIST, Fashion-MNIST), CIFAR-10/100 pickles, CSV, Parquet.

All readers raise :class:`~fedstats.errors.DatasetNotFoundError` for a missing path and
:class:`~fedstats.errors.DataError` for a malformed file, naming the file and what was wrong.

CIFAR batches are Python pickles; unpickling an untrusted file can run arbitrary code, so
:func:`read_cifar` uses a restricted unpickler that only rebuilds numpy arrays, lists, dicts, strings and
numbers, and refuses anything else with :class:`~fedstats.errors.SecurityError`.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import importlib
import io
import lzma
import os
import pickle
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstats._validation import check_choice
from fedstats.errors import DataError, DatasetNotFoundError, ParameterError, SecurityError

if TYPE_CHECKING:  # imported where a table is read
    import pandas as pd

__all__ = [
    "MAX_CSV_COLUMNS",
    "CifarData",
    "check_finite_columns",
    "csv_header_columns",
    "gunzip",
    "load_table",
    "numeric_column",
    "read_cifar",
    "read_csv",
    "read_idx",
    "read_parquet",
]

PathLike = str | os.PathLike[str]

_IDX_DTYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def gunzip(data: bytes, label: str) -> bytes:
    """Decompress a gzip stream read from a dataset file.

    Raises
    ------
    DataError
        If the stream is corrupt (named by ``label``).
    """
    try:
        return gzip.decompress(data)
    except (OSError, EOFError) as exc:
        raise DataError(f"{label}: corrupt gzip stream ({exc})") from exc


def _existing(path: PathLike, what: str = "file") -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise DatasetNotFoundError(f"{what} not found: {p}")
    return p


def _read_maybe_gzip(p: Path) -> bytes:
    """The bytes of ``p``, gunzipped when the file starts with the gzip magic (whatever its suffix)."""
    raw = p.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        return gunzip(raw, str(p))
    return raw


def parse_idx(data: bytes, *, source: str = "IDX data") -> np.ndarray:
    """Decode IDX bytes (LeCun's MNIST format) into a numpy array.

    Parameters
    ----------
    data : bytes
        Uncompressed IDX content: two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16,
        0x0C int32, 0x0D float32, 0x0E float64), the number of dimensions, then each dimension as a
        big-endian uint32, then the values in C order, big-endian.
    source : str, optional
        How to name the data in error messages.

    Returns
    -------
    numpy.ndarray
        Shape as in the header (``(n,)`` for idx1 labels, ``(n, rows, cols)`` for idx3 images), in the
        native-endian version of the stored dtype (uint8 for MNIST).

    Raises
    ------
    DataError
        If the header is malformed or the payload size does not match the header.
    """
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DataError(f"{source}: not an IDX file (the first two bytes must be zero)")
    code, ndim = data[2], data[3]
    if code not in _IDX_DTYPES:
        raise DataError(
            f"{source}: unknown IDX type code 0x{code:02x} (accepted: 0x08, 0x09, 0x0b, 0x0c, 0x0d, 0x0e)"
        )
    if ndim == 0:
        raise DataError(f"{source}: IDX header gives 0 dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{source}: truncated IDX header")
    shape = tuple(int(x) for x in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - header != expected:
        raise DataError(
            f"{source}: IDX header says shape {shape} ({expected} bytes) but the payload has "
            f"{len(data) - header} bytes"
        )
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return arr.astype(dtype.newbyteorder("="), copy=True)


def read_idx(path: PathLike) -> np.ndarray:
    """Read an IDX file (``*-idx1-ubyte``, ``*-idx3-ubyte``), gzip-compressed or not.

    Compression is detected from the content (gzip magic), not the suffix.

    Parameters
    ----------
    path : str or path-like
        The IDX file.

    Returns
    -------
    numpy.ndarray
        ``(n,)`` uint8 labels for idx1, ``(n, rows, cols)`` uint8 images for idx3 (other type codes give
        the matching dtype).

    Raises
    ------
    DatasetNotFoundError
        If ``path`` does not exist.
    DataError
        If the file is not valid IDX.

    References
    ----------
    Y. LeCun, C. Cortes, C. J. C. Burges, "The MNIST database of handwritten digits" (file format section).
    """
    p = _existing(path, "IDX file")
    return parse_idx(_read_maybe_gzip(p), source=str(p))


# ---------------------------------------------------------------------------------------------- CIFAR

_ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
        ("builtins", "bytearray"),
        ("__builtin__", "bytearray"),
    }
)


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that rebuilds numpy arrays and plain containers only (no arbitrary callables)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise SecurityError(
                f"refusing to unpickle {module}.{name}: CIFAR batches hold only numpy arrays, lists "
                "and dicts (a pickle that asks for anything else may run code)"
            )
        if module.startswith("numpy.core") and int(np.__version__.split(".")[0]) >= 2:
            module = "numpy._core" + module[len("numpy.core") :]
        if module == "__builtin__":
            module = "builtins"
        return getattr(importlib.import_module(module), name)


def _safe_unpickle(data: bytes, source: str) -> Any:
    try:
        return _RestrictedUnpickler(io.BytesIO(data), encoding="bytes").load()
    except SecurityError:
        raise
    except Exception as exc:  # any unpickling failure means a malformed file
        raise DataError(f"{source}: not a readable pickle ({type(exc).__name__}: {exc})") from exc


def _key(d: dict[Any, Any], name: str) -> Any:
    for k in (name, name.encode()):
        if k in d:
            return d[k]
    raise KeyError(name)


@dataclass(frozen=True)
class CifarData:
    """Images and labels read from CIFAR-10 or CIFAR-100 python batches.

    Attributes
    ----------
    images : numpy.ndarray
        ``(n, 32, 32, 3)`` uint8, channels last (RGB), values 0-255.
    labels : numpy.ndarray
        ``(n,)`` int64 labels (0-9 for CIFAR-10; 0-99 fine or 0-19 coarse for CIFAR-100).
    label_names : tuple of str
        Names of the labels when a ``batches.meta`` / ``meta`` file was found, else empty.
    """

    images: np.ndarray
    labels: np.ndarray
    label_names: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def _cifar_batch(p: Path, label: str) -> tuple[np.ndarray, np.ndarray]:
    obj = _safe_unpickle(_read_maybe_gzip(p), str(p))
    if not isinstance(obj, dict):
        raise DataError(f"{p}: a CIFAR batch must unpickle to a dict, got {type(obj).__name__}")
    try:
        data = np.asarray(_key(obj, "data"))
    except KeyError as exc:
        raise DataError(f"{p}: CIFAR batch has no 'data' entry") from exc
    names: tuple[str, ...] = ("labels", "fine_labels") if label == "fine" else ("coarse_labels",)
    labels = None
    for nm in names:
        try:
            labels = np.asarray(_key(obj, nm), dtype=np.int64)
            break
        except KeyError:
            continue
    if labels is None:
        raise DataError(f"{p}: CIFAR batch has no {' or '.join(repr(n) for n in names)} entry")
    if data.ndim != 2 or data.shape[1] != 3072 or data.shape[0] != labels.shape[0]:
        raise DataError(
            f"{p}: CIFAR 'data' must have shape (n, 3072) with n = {labels.shape[0]} labels, "
            f"got {data.shape}"
        )
    images = data.astype(np.uint8, copy=False).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def _cifar_label_names(directory: Path, label: str) -> tuple[str, ...]:
    for meta_name in ("batches.meta", "meta"):
        mp = directory / meta_name
        if not mp.is_file():
            continue
        obj = _safe_unpickle(_read_maybe_gzip(mp), str(mp))
        if not isinstance(obj, dict):
            return ()
        for key in (("label_names",) if meta_name == "batches.meta" else ()) + (
            ("fine_label_names",) if label == "fine" else ("coarse_label_names",)
        ):
            try:
                names = _key(obj, key)
            except KeyError:
                continue
            return tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)
    return ()


def read_cifar(path: PathLike, *, split: str = "train", label: str = "fine") -> CifarData:
    """Read CIFAR-10 or CIFAR-100 from the python-pickle distribution.

    Parameters
    ----------
    path : str or path-like
        A single batch file (``data_batch_1``, ``test_batch``, CIFAR-100's ``train`` / ``test``), or the
        extracted directory (``cifar-10-batches-py`` or ``cifar-100-python``).
    split : {"train", "test"}, optional
        For a directory: ``"train"`` reads ``data_batch_1`` ... ``data_batch_5`` (CIFAR-10) or ``train``
        (CIFAR-100); ``"test"`` reads ``test_batch`` or ``test``. Ignored for a single file.
    label : {"fine", "coarse"}, optional
        CIFAR-100 only: the 100 fine or 20 coarse labels (CIFAR-10 always gives its 10 labels).

    Returns
    -------
    CifarData
        ``images`` ``(n, 32, 32, 3)`` uint8, ``labels`` ``(n,)`` int64, ``label_names``.

    Raises
    ------
    ParameterError
        If ``split`` or ``label`` is not an accepted value.
    DatasetNotFoundError
        If the path or the batches of the split do not exist.
    DataError
        If a batch is malformed.
    SecurityError
        If a pickle asks to build anything other than numpy arrays and plain containers.

    References
    ----------
    A. Krizhevsky (2009), "Learning multiple layers of features from tiny images" (CIFAR pages).
    """
    check_choice("split", split, ("train", "test"))
    check_choice("label", label, ("fine", "coarse"))
    p = _existing(path, "CIFAR path")
    if p.is_file():
        images, labels = _cifar_batch(p, label)
        return CifarData(images, labels, _cifar_label_names(p.parent, label))
    if split == "train":
        files = sorted(p.glob("data_batch_*")) or [p / "train"]
    else:
        files = [p / "test_batch"] if (p / "test_batch").is_file() else [p / "test"]
    files = [f for f in files if f.is_file()]
    if not files:
        raise DatasetNotFoundError(
            f"no CIFAR {split} batches in {p} (expected data_batch_1..5 / test_batch for CIFAR-10, "
            "train / test for CIFAR-100)"
        )
    parts = [_cifar_batch(f, label) for f in files]
    images = np.concatenate([a for a, _ in parts])
    labels = np.concatenate([b for _, b in parts])
    return CifarData(images, labels, _cifar_label_names(p, label))


# ------------------------------------------------------------------------------------- tables


MAX_CSV_COLUMNS = 20_000
"""Most columns a CSV/TSV table may have (a 64 x 64 RGB image is 12,288), checked on its header line
before pandas parses anything: pandas took 96 s and 3.7 GB for a 3-row CSV of 10^6 columns."""

_MAX_HEADER_BYTES = (
    64 << 20
)  # a header line longer than this is refused unread (about 3,000 per column)


def _open_text(p: Path) -> Any:
    """``p`` opened as text, decompressed by suffix (.gz, .bz2, .xz, .zip), or None (.zst)."""
    name = p.name.lower()
    if name.endswith(".gz"):
        return gzip.open(p, "rt", encoding="utf-8", errors="replace", newline="")
    if name.endswith(".bz2"):
        return bz2.open(p, "rt", encoding="utf-8", errors="replace", newline="")
    if name.endswith(".xz"):
        return lzma.open(p, "rt", encoding="utf-8", errors="replace", newline="")
    if name.endswith(".zip"):
        archive = zipfile.ZipFile(p)
        names = archive.namelist()
        if not names:
            return None
        return io.TextIOWrapper(archive.open(names[0]), encoding="utf-8", errors="replace")
    if name.endswith(".zst"):
        return None  # pandas' own reader (zstandard) reads it; no header check
    return open(p, encoding="utf-8", errors="replace", newline="")


def csv_header_columns(path: PathLike, sep: str = ",") -> int:
    r"""Number of columns of a CSV file's first line, read alone (the whole file is never parsed).

    Parameters
    ----------
    path : str or path-like
        A CSV/TSV file, plain or compressed (.gz, .bz2, .xz, .zip; .zst is not checked: 0).
    sep : str
        The one-character field separator (``","``; ``"\t"`` for TSV).

    Returns
    -------
    int
        Fields of the first line (quotes honoured; 0 for an empty line or a .zst file).

    Raises
    ------
    DataError
        If the first line is longer than 64 MiB.
    """
    p = _existing(path)
    handle = _open_text(p)
    if handle is None:
        return 0
    with handle:
        line = handle.readline(_MAX_HEADER_BYTES + 1)
    if len(line) > _MAX_HEADER_BYTES:
        raise DataError(
            f"{p}: the header line is longer than {_MAX_HEADER_BYTES >> 20} MiB: at most "
            f"{MAX_CSV_COLUMNS:,} columns are read"
        )
    if not line.strip():
        return 0
    fields = next(csv.reader([line.rstrip("\r\n")], delimiter=sep))
    return len(fields)


def read_csv(path: PathLike, **kwargs: Any) -> pd.DataFrame:
    """Read a CSV file (plain or compressed by suffix: .gz, .bz2, .zip, .xz, .zst) into a DataFrame.

    Parameters
    ----------
    path : str or path-like
        The file.
    **kwargs
        Passed to :func:`pandas.read_csv` (``sep``, ``header``, ``names``, ...).

    Raises
    ------
    DatasetNotFoundError
        If ``path`` does not exist.
    DataError
        If the header line has more than :data:`MAX_CSV_COLUMNS` columns (checked before parsing),
        or pandas cannot parse the file, or it has no rows.
    """
    import pandas as pd

    p = _existing(path)
    sep = kwargs.get("sep", kwargs.get("delimiter", ","))
    if isinstance(sep, str) and len(sep) == 1:
        n_columns = csv_header_columns(p, sep)
        if n_columns > MAX_CSV_COLUMNS:
            raise DataError(
                f"{p}: more than {MAX_CSV_COLUMNS:,} columns in its first line: a CSV table holds at "
                f"most {MAX_CSV_COLUMNS:,} (use Parquet and read the columns you need)"
            )
    try:
        df: pd.DataFrame = pd.read_csv(p, **kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"{p}: cannot parse as CSV ({exc})") from exc
    if df.shape[0] == 0:
        raise DataError(f"{p}: the table has no rows")
    return df


def read_parquet(path: PathLike, *, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Read a Parquet file (through pyarrow) into a DataFrame.

    Parameters
    ----------
    path : str or path-like
        The file (or a directory of Parquet parts).
    columns : sequence of str, optional
        Only these columns.

    Raises
    ------
    DatasetNotFoundError
        If ``path`` does not exist.
    DataError
        If the file is not valid Parquet, a requested column is missing, or it has no rows.
    """
    import pandas as pd

    p = _existing(path)
    try:
        df = pd.read_parquet(p, columns=list(columns) if columns is not None else None)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError family
        raise DataError(f"{p}: cannot read as Parquet ({type(exc).__name__}: {exc})") from exc
    if df.shape[0] == 0:
        raise DataError(f"{p}: the table has no rows")
    return df


_CSV_SUFFIXES = (".csv", ".tsv", ".txt")
_COMPRESSION = (".gz", ".bz2", ".zip", ".xz", ".zst")
_PARQUET_SUFFIXES = (".parquet", ".pq")
_IDX_MARKERS = ("-ubyte", ".idx1", ".idx3", ".idx")


def load_table(path: PathLike, **kwargs: Any) -> pd.DataFrame:
    """Read a user's table, dispatching on the file suffix.

    ``.csv`` / ``.txt`` (comma-separated) and ``.tsv`` (tab-separated), each optionally
    compressed (``.gz``, ``.bz2``, ``.zip``, ``.xz``, ``.zst``), go to :func:`read_csv`; ``.parquet`` /
    ``.pq`` to :func:`read_parquet`; IDX files (``*-ubyte``, ``.idx*``, optionally ``.gz``) to
    :func:`read_idx`, giving one column ``label`` for idx1 and columns ``pixel_0`` ... for images.

    Parameters
    ----------
    path : str or path-like
        The file.
    **kwargs
        Passed to the CSV or Parquet reader.

    Returns
    -------
    pandas.DataFrame

    Raises
    ------
    ParameterError
        If the suffix is none of the accepted ones (``path`` is named with the accepted list).
    DatasetNotFoundError
        If the file does not exist.
    DataError
        If the file cannot be parsed.
    """
    import pandas as pd

    p = _existing(path)
    name = p.name.lower()
    base = name
    for comp in _COMPRESSION:
        if base.endswith(comp):
            base = base[: -len(comp)]
            break
    if any(m in base for m in _IDX_MARKERS):
        arr = read_idx(p)
        if arr.ndim == 1:
            return pd.DataFrame({"label": arr})
        flat = arr.reshape(arr.shape[0], -1)
        return pd.DataFrame(flat, columns=[f"pixel_{i}" for i in range(flat.shape[1])])
    if p.is_dir() or base.endswith(_PARQUET_SUFFIXES):
        return read_parquet(p, **kwargs)
    if base.endswith(".tsv"):
        return read_csv(p, **({"sep": "\t"} | kwargs))
    if base.endswith(_CSV_SUFFIXES):
        return read_csv(p, **kwargs)
    accepted = ", ".join((*_CSV_SUFFIXES, *_PARQUET_SUFFIXES, "IDX (*-ubyte)")) + (
        " (CSV and IDX optionally compressed: " + ", ".join(_COMPRESSION) + ")"
    )
    raise ParameterError("path", str(path), f"a file ending in {accepted}")


def _not_numeric(dtype: Any) -> str | None:
    """What a column of ``dtype`` holds when it is not numbers (booleans, times, text), else None."""
    import pandas as pd

    if pd.api.types.is_bool_dtype(dtype):
        return "booleans"
    if (
        pd.api.types.is_datetime64_any_dtype(dtype)
        or pd.api.types.is_timedelta64_dtype(dtype)
        or isinstance(dtype, pd.PeriodDtype)
    ):
        return "dates or times"
    if isinstance(dtype, pd.CategoricalDtype):
        return "categories"
    if not pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_complex_dtype(dtype):
        return "text" if pd.api.types.is_string_dtype(dtype) else "values that are not numbers"
    return None


def numeric_column(df: pd.DataFrame, column: str, *, option: str | None = None) -> np.ndarray:
    """The values of a numeric column as float64, refusing booleans, dates, times and text.

    numpy would read a boolean as 0/1, a timestamp as nanoseconds since 1970 and a string such as
    ``"1.5"`` as a number: a column of another type than numbers is refused instead (missing values
    come back as NaN, for the caller to refuse or drop).

    Parameters
    ----------
    df : pandas.DataFrame
        The table.
    column : str
        A column of ``df``.
    option : str, optional
        The option that named the column (``"--column"``): the error then names it.

    Returns
    -------
    numpy.ndarray, shape (len(df),), float64

    Raises
    ------
    ParameterError
        Naming ``option``, the column and its type, if ``option`` is given and the column is not numbers.
    DataError
        Naming the column and its type, if ``option`` is None and the column is not numbers.
    """
    dtype = df[column].dtype
    held = _not_numeric(dtype)
    if held is not None:
        why = f"a numeric column ({column!r} holds {held}: type {dtype})"
        if option is not None:
            raise ParameterError(option, column, why)
        raise DataError(
            f"column {column!r} holds {held} (type {dtype}): a numeric column is needed"
        )
    values: np.ndarray = df[column].to_numpy(dtype=np.float64, na_value=np.nan)
    return values


def check_finite_columns(df: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Check that numeric columns hold no NaN or infinite value.

    Parameters
    ----------
    df : pandas.DataFrame
        The table.
    columns : sequence of str, optional
        Columns to check (they must exist and be numeric); default every numeric column.

    Returns
    -------
    pandas.DataFrame
        ``df`` unchanged, for chaining.

    Raises
    ------
    DataError
        If a column is missing or not numeric, or holds NaN or inf; the message names the column, the
        number of bad values and the first bad row label.
    """
    if columns is None:
        cols = [c for c in df.columns if _not_numeric(df[c].dtype) is None]
    else:
        cols = list(columns)
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise DataError(
                f"missing column(s) {', '.join(map(repr, missing))}; available: "
                + ", ".join(map(str, df.columns))
            )
        not_num = [c for c in cols if _not_numeric(df[c].dtype) is not None]
        if not_num:
            raise DataError(f"column(s) {', '.join(map(repr, not_num))} are not numeric")
    for c in cols:
        values = df[c].to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(values)
        if bad.any():
            first = df.index[int(np.flatnonzero(bad)[0])]
            raise DataError(
                f"column {c!r} has {int(bad.sum())} NaN or infinite value(s) (first at row {first!r}); "
                "drop or impute them first"
            )
    return df
