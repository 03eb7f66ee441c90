"""Datasets: verified loaders for the real data, readers for users' files, and partitioners to clients.

* Registry and lookup: :data:`DATASETS`, :func:`dataset_names`, :func:`dataset_info`,
  :func:`dataset_status`; files are found via ``data_dir``, ``$FEDSTATS_DATA``, ``../shared/data`` or the
  package's embedded copies, and every file's SHA-256 is verified on load.
* Loaders: :func:`load_adult` (embedded, works offline with no data directory), :func:`load_census_kdd`,
  :func:`load_mushroom`, :func:`load_lymphography`, :func:`load_activity`, :func:`load_reuters`,
  :func:`load_gtsrb`, :func:`load_fashion_mnist_labels`, :func:`load_digits` (embedded), and
  :func:`load_dataset` by name.
* Readers: :func:`read_idx`, :func:`read_cifar`, :func:`read_csv`, :func:`read_parquet`,
  :func:`load_table`, :func:`check_finite_columns`.
* Example files (:mod:`fedstats.datasets.examples`): :func:`example` gives the path of a small shipped
  file built from Adult (``predictions.csv``, ``client_tables.csv``, ``client_vectors.csv``).
* Partitioners (:mod:`fedstats.datasets.partition`): one row per client, IID, label-ratio skew,
  Dirichlet, and a contingency table split across clients.
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
from fedstats.datasets.examples import EXAMPLES, ExampleFile, example, example_names
from fedstats.datasets.loaders import (
    ACTIVITY_COLUMNS,
    ADULT_COLUMNS,
    CENSUS_KDD_COLUMNS,
    LYMPHOGRAPHY_COLUMNS,
    MUSHROOM_COLUMNS,
    load_activity,
    load_adult,
    load_census_kdd,
    load_dataset,
    load_digits,
    load_fashion_mnist_labels,
    load_gtsrb,
    load_lymphography,
    load_mushroom,
    load_reuters,
)
from fedstats.datasets.partition import (
    allocate_counts,
    client_indices,
    dirichlet_partition,
    dirichlet_proportions,
    iid_partition,
    label_ratio_sample,
    one_per_client,
    parse_label_ratios,
)
from fedstats.datasets.readers import (
    CifarData,
    check_finite_columns,
    load_table,
    parse_idx,
    read_cifar,
    read_csv,
    read_idx,
    read_parquet,
)
from fedstats.datasets.tables import (
    ContingencyTable,
    contingency_table,
    contingency_tables_by_client,
    split_contingency_table,
)

__all__ = [
    "ACTIVITY_COLUMNS",
    "ADULT_COLUMNS",
    "CENSUS_KDD_COLUMNS",
    "DATASETS",
    "ENV_VAR",
    "EXAMPLES",
    "LYMPHOGRAPHY_COLUMNS",
    "MUSHROOM_COLUMNS",
    "CifarData",
    "ContingencyTable",
    "DataFile",
    "Dataset",
    "DatasetStatus",
    "ExampleFile",
    "allocate_counts",
    "candidate_roots",
    "check_finite_columns",
    "clear_verification_cache",
    "client_indices",
    "contingency_table",
    "contingency_tables_by_client",
    "dataset_file",
    "dataset_info",
    "dataset_names",
    "dataset_status",
    "dirichlet_partition",
    "dirichlet_proportions",
    "embedded_path",
    "example",
    "example_names",
    "file_sha256",
    "iid_partition",
    "label_ratio_sample",
    "load_activity",
    "load_adult",
    "load_census_kdd",
    "load_dataset",
    "load_digits",
    "load_fashion_mnist_labels",
    "load_gtsrb",
    "load_lymphography",
    "load_mushroom",
    "load_reuters",
    "load_table",
    "locate_file",
    "one_per_client",
    "parse_idx",
    "parse_label_ratios",
    "read_cifar",
    "read_csv",
    "read_idx",
    "read_parquet",
    "split_contingency_table",
    "verify_file",
]
