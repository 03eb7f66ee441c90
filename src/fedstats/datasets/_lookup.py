"""Where a registered dataset's files are found, and the check of their SHA-256 sums.

Files are looked up, in order, in

1. the ``data_dir`` argument (when given, it is the only place looked at);
2. the directory named by the environment variable ``FEDSTATS_DATA``;
3. ``../shared/data`` relative to the current working directory;
4. ``../shared/data`` relative to the repository root (when running from a source checkout);
5. the copies embedded in the package (``fedstats/datasets/embedded``), for the datasets that have one
   (Adult, digits).

Inside a data root a dataset lives in its own sub-directory (``adult/``, ``mushroom/``, ...); a
``data_dir`` that points straight at that sub-directory is accepted too. A file is hashed once per process
(keyed by its resolved path, size and modification time) and :class:`~fedstats.errors.ChecksumError` is
raised when the hash differs from the one recorded in :mod:`fedstats.datasets._catalog`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from fedstats.datasets._catalog import dataset_info
from fedstats.errors import ChecksumError, DatasetNotFoundError

__all__ = [
    "ENV_VAR",
    "DatasetStatus",
    "candidate_roots",
    "clear_verification_cache",
    "dataset_file",
    "dataset_status",
    "embedded_path",
    "file_sha256",
    "locate_file",
    "verify_file",
]

ENV_VAR = "FEDSTATS_DATA"
"""Environment variable naming the data root (the directory that holds ``adult/``, ``mushroom/``, ...)."""

_REPO_ROOT = Path(__file__).resolve().parents[3]
_CHUNK = 1 << 20


def embedded_path(file_name: str) -> Path | None:
    """Path of an embedded copy of ``file_name`` inside the package, or ``None`` if there is none."""
    res = resources.files("fedstats.datasets").joinpath("embedded", file_name)
    path = Path(str(res))
    return path if path.is_file() else None


def candidate_roots(data_dir: str | os.PathLike[str] | None = None) -> list[tuple[Path, str]]:
    """Data roots to search, in order, each with a short description of where it came from.

    Parameters
    ----------
    data_dir : str or path-like, optional
        Explicit data root (or a dataset's own directory). When given it is the only root returned.

    Returns
    -------
    list of (Path, str)
        Candidate roots and their origin (``"data_dir argument"``, ``"$FEDSTATS_DATA"``, ...).
    """
    if data_dir is not None:
        return [(Path(data_dir).expanduser(), "data_dir argument")]
    roots: list[tuple[Path, str]] = []
    env = os.environ.get(ENV_VAR)
    if env:
        roots.append((Path(env).expanduser(), f"${ENV_VAR}"))
    roots.append(
        (Path.cwd().parent / "shared" / "data", "../shared/data from the working directory")
    )
    roots.append((_REPO_ROOT.parent / "shared" / "data", "../shared/data from the repository root"))
    return roots


def locate_file(
    dataset: str, file_name: str, data_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Find a dataset's file on disk (see the module docstring for the search order).

    Parameters
    ----------
    dataset : str
        Registry name of the dataset.
    file_name : str
        One of the dataset's files.
    data_dir : str or path-like, optional
        Explicit data root, or the dataset's own directory.

    Returns
    -------
    Path
        The file's path (not yet verified; see :func:`verify_file`).

    Raises
    ------
    ParameterError
        If ``dataset`` or ``file_name`` is unknown.
    DatasetNotFoundError
        If the file is in none of the places looked at; the message lists them and how to set the path.
    """
    info = dataset_info(dataset)
    df = info.file(file_name)
    if info.embedded_only:
        emb = embedded_path(df.name)
        if emb is None:
            raise DatasetNotFoundError(
                f"dataset {dataset!r}: the package's embedded file {df.name} is missing "
                "(reinstall fedstats with its package data)"
            )
        return emb
    looked: list[str] = []
    for root, origin in candidate_roots(data_dir):
        for cand in (root / info.subdir / df.name, root / df.name):
            if cand.is_file():
                return cand
        looked.append(f"{root / info.subdir} ({origin})")
    if data_dir is None and df.embedded:
        emb = embedded_path(df.name)
        if emb is not None:
            return emb
        looked.append("the package's embedded copies")
    raise DatasetNotFoundError(
        f"dataset {dataset!r}: file {info.subdir}/{df.name} not found; looked in "
        + "; ".join(looked)
        + f". Pass data_dir=... (CLI: --data-dir), or set ${ENV_VAR} to the directory that holds "
        f"{info.subdir}/"
    )


_verified: dict[tuple[str, int, int, str], bool] = {}
_verified_lock = threading.Lock()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verify_file(path: str | os.PathLike[str], expected_sha256: str, *, label: str = "") -> Path:
    """Check a file's SHA-256 against ``expected_sha256``; the result is cached for this process.

    The cache key is (resolved path, size, modification time in ns, expected hash), so a file that is
    replaced or rewritten is hashed again.

    Parameters
    ----------
    path : str or path-like
        File to check.
    expected_sha256 : str
        Expected SHA-256 in hex.
    label : str, optional
        How to name the file in the error message (defaults to the path).

    Returns
    -------
    Path
        ``path`` as a :class:`~pathlib.Path`.

    Raises
    ------
    DatasetNotFoundError
        If the file does not exist.
    ChecksumError
        If the hash differs (the file is corrupt, truncated or substituted).
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError as exc:
        raise DatasetNotFoundError(f"file not found: {p}") from exc
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns, expected_sha256.lower())
    with _verified_lock:
        if key in _verified:
            return p
    actual = file_sha256(p)
    if actual != expected_sha256.lower():
        raise ChecksumError(
            f"{label or p}: SHA-256 is {actual}, expected {expected_sha256} "
            f"(file {p} is corrupt or not the registered version; replace it with the original)"
        )
    with _verified_lock:
        _verified[key] = True
    return p


def clear_verification_cache() -> None:
    """Forget which files were verified, so the next load hashes them again."""
    with _verified_lock:
        _verified.clear()


def dataset_file(
    dataset: str, file_name: str, data_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Locate a dataset's file and verify its SHA-256 (cached per process).

    Raises
    ------
    ParameterError
        If ``dataset`` or ``file_name`` is unknown.
    DatasetNotFoundError
        If the file cannot be found.
    ChecksumError
        If its SHA-256 differs from the registered one.
    """
    info = dataset_info(dataset)
    df = info.file(file_name)
    path = locate_file(dataset, file_name, data_dir)
    return verify_file(path, df.sha256, label=f"{info.subdir}/{df.name}")


@dataclass(frozen=True)
class DatasetStatus:
    """Where a dataset was found and whether its files verified.

    Attributes
    ----------
    name : str
        Registry name.
    location : str or None
        Directory of the first file found (or ``"embedded"``), ``None`` if absent.
    present : bool
        True when every file was found.
    verified : bool
        True when every file was found and its SHA-256 matched.
    problem : str
        Why it is absent or unverified (empty when fine).
    """

    name: str
    location: str | None
    present: bool
    verified: bool
    problem: str = ""


def dataset_status(
    name: str, data_dir: str | os.PathLike[str] | None = None, *, verify: bool = True
) -> DatasetStatus:
    """Look for every file of dataset ``name`` and (optionally) verify their SHA-256 sums.

    Never raises for a missing or corrupt file: the problem is reported in the returned status.

    Raises
    ------
    ParameterError
        If ``name`` is not a registered dataset.
    """
    info = dataset_info(name)
    location: str | None = None
    problems: list[str] = []
    present = True
    verified = verify
    for df in info.files:
        try:
            path = locate_file(name, df.name, data_dir)
        except DatasetNotFoundError:
            if not df.required:
                continue
            present = False
            verified = False
            problems.append(f"{df.name} missing")
            continue
        if location is None:
            emb = embedded_path(df.name)
            is_emb = emb is not None and path.resolve() == emb.resolve()
            location = "embedded (package)" if is_emb else str(path.parent)
        if verify:
            try:
                verify_file(path, df.sha256)
            except ChecksumError:
                verified = False
                problems.append(f"{df.name} checksum mismatch")
    return DatasetStatus(name, location, present, verified and present, "; ".join(problems))
