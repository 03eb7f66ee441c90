"""The dataset registry: names, provenance, licenses, files, SHA-256 sums, and where the files are found.

Every dataset fedstats can load is described by a :class:`Dataset` record with the SHA-256 of each stored
file (copied from ``../shared/data/SHA256SUMS``; the hashes are part of the code, so a replaced SUMS file
cannot make a substituted data file pass). Files are looked up, in order, in

1. the ``data_dir`` argument (when given, it is the only place looked at);
2. the directory named by the environment variable ``FEDSTATS_DATA``;
3. ``../shared/data`` relative to the current working directory;
4. ``../shared/data`` relative to the repository root (when running from a source checkout);
5. the copies embedded in the package (``fedstats/datasets/embedded``), for the datasets that have one
   (Adult, digits).

Inside a data root a dataset lives in its own sub-directory (``adult/``, ``mushroom/``, ...); a
``data_dir`` that points straight at that sub-directory is accepted too. A file is hashed once per process
(keyed by its resolved path, size and modification time) and :class:`~fedstats.errors.ChecksumError` is
raised when the hash differs from the recorded one.

The records are in :mod:`fedstats.datasets._catalog`, the lookup and verification of files in
:mod:`fedstats.datasets._lookup`; this module re-exports the public names of both.
"""

from __future__ import annotations

from fedstats.datasets._catalog import DATASETS, DataFile, Dataset, dataset_info, dataset_names
from fedstats.datasets._lookup import (
    ENV_VAR,
    DatasetStatus,
    candidate_roots,
    clear_verification_cache,
    dataset_file,
    dataset_status,
    embedded_path,
    file_sha256,
    locate_file,
    verify_file,
)

__all__ = [
    "DATASETS",
    "ENV_VAR",
    "DataFile",
    "Dataset",
    "DatasetStatus",
    "candidate_roots",
    "clear_verification_cache",
    "dataset_file",
    "dataset_info",
    "dataset_names",
    "dataset_status",
    "embedded_path",
    "file_sha256",
    "locate_file",
    "verify_file",
]
