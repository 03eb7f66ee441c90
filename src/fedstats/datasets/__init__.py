"""Datasets: verified loaders for the real data, readers for users' files, and partitioners to clients.

* Registry and lookup: :data:`DATASETS`, :func:`dataset_names`, :func:`dataset_info`,
  :func:`dataset_status`; files are found via ``data_dir``, ``$FEDSTATS_DATA``, ``../shared/data`` or the
  package's embedded copies, and every file's SHA-256 is verified on load.
* Loaders: :func:`load_adult` (embedded, works offline with no data directory; one numeric column
  without pandas: :func:`load_adult_column`), :func:`load_census_kdd`,
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

from typing import TYPE_CHECKING

from fedstats._lazy import lazy_exports

if TYPE_CHECKING:
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
    from fedstats.datasets.archives import (
        ACTIVITY_COLUMNS,
        load_activity,
        load_digits,
        load_fashion_mnist_labels,
        load_gtsrb,
        load_reuters,
    )
    from fedstats.datasets.examples import EXAMPLES, ExampleFile, example, example_names
    from fedstats.datasets.loaders import (
        ADULT_COLUMNS,
        ADULT_NUMERIC_COLUMNS,
        CENSUS_KDD_COLUMNS,
        LYMPHOGRAPHY_COLUMNS,
        MUSHROOM_COLUMNS,
        load_adult,
        load_adult_column,
        load_census_kdd,
        load_dataset,
        load_lymphography,
        load_mushroom,
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

_EXPORTS: dict[str, str] = {
    "DATASETS": "_catalog",
    "DataFile": "_catalog",
    "Dataset": "_catalog",
    "dataset_info": "_catalog",
    "dataset_names": "_catalog",
    "DatasetStatus": "_lookup",
    "ENV_VAR": "_lookup",
    "candidate_roots": "_lookup",
    "clear_verification_cache": "_lookup",
    "dataset_file": "_lookup",
    "dataset_status": "_lookup",
    "embedded_path": "_lookup",
    "file_sha256": "_lookup",
    "locate_file": "_lookup",
    "verify_file": "_lookup",
    "EXAMPLES": "examples",
    "ExampleFile": "examples",
    "example": "examples",
    "example_names": "examples",
    "ACTIVITY_COLUMNS": "archives",
    "load_activity": "archives",
    "load_digits": "archives",
    "load_fashion_mnist_labels": "archives",
    "load_gtsrb": "archives",
    "load_reuters": "archives",
    "ADULT_COLUMNS": "loaders",
    "ADULT_NUMERIC_COLUMNS": "loaders",
    "CENSUS_KDD_COLUMNS": "loaders",
    "LYMPHOGRAPHY_COLUMNS": "loaders",
    "MUSHROOM_COLUMNS": "loaders",
    "load_adult": "loaders",
    "load_adult_column": "loaders",
    "load_census_kdd": "loaders",
    "load_dataset": "loaders",
    "load_lymphography": "loaders",
    "load_mushroom": "loaders",
    "allocate_counts": "partition",
    "client_indices": "partition",
    "dirichlet_partition": "partition",
    "dirichlet_proportions": "partition",
    "iid_partition": "partition",
    "label_ratio_sample": "partition",
    "one_per_client": "partition",
    "parse_label_ratios": "partition",
    "CifarData": "readers",
    "check_finite_columns": "readers",
    "load_table": "readers",
    "parse_idx": "readers",
    "read_cifar": "readers",
    "read_csv": "readers",
    "read_idx": "readers",
    "read_parquet": "readers",
    "ContingencyTable": "tables",
    "contingency_table": "tables",
    "contingency_tables_by_client": "tables",
    "split_contingency_table": "tables",
}
"""Public name -> the submodule defining it, imported on first use (PEP 562): ``import fedstats.datasets``
loads neither numpy nor pandas, and reading a registry entry (``dataset_names``) loads the registry only;
pandas is imported when a table is read."""

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "ACTIVITY_COLUMNS",
    "ADULT_COLUMNS",
    "ADULT_NUMERIC_COLUMNS",
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
    "load_adult_column",
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
