"""Loaders for the real datasets of the registry; each verifies the SHA-256 of every file it reads.

Every loader takes ``data_dir`` (see :mod:`fedstats.datasets._lookup` for the search order) and raises
:class:`~fedstats.errors.DatasetNotFoundError` when a file is absent and
:class:`~fedstats.errors.ChecksumError` when a file differs from the registered version. Archives (zip,
tar.gz) are read in memory, never extracted to disk. Categorical values are kept as strings exactly as
the data has them (``"?"`` for Adult's missing values stays a category of its own, as in the authors'
experiments of paper 004, App. I).
"""

from __future__ import annotations

import inspect
import io
import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstats._validation import check_choice
from fedstats.datasets._catalog import dataset_info
from fedstats.datasets._lookup import dataset_file
from fedstats.datasets.archives import (
    DataDir,
    load_activity,
    load_digits,
    load_fashion_mnist_labels,
    load_gtsrb,
    load_reuters,
)
from fedstats.datasets.readers import gunzip
from fedstats.errors import DataError, ParameterError

if TYPE_CHECKING:  # imported where a table is read
    import pandas as pd

__all__ = [
    "ADULT_COLUMNS",
    "ADULT_NUMERIC_COLUMNS",
    "CENSUS_KDD_COLUMNS",
    "LYMPHOGRAPHY_COLUMNS",
    "MUSHROOM_COLUMNS",
    "load_adult",
    "load_adult_column",
    "load_census_kdd",
    "load_dataset",
    "load_lymphography",
    "load_mushroom",
]

ADULT_COLUMNS: tuple[str, ...] = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education_num",
    "marital_status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital_gain",
    "capital_loss",
    "hours_per_week",
    "native_country",
    "income",
)
ADULT_NUMERIC_COLUMNS: tuple[str, ...] = (
    "age",
    "fnlwgt",
    "education_num",
    "capital_gain",
    "capital_loss",
    "hours_per_week",
)

# The 42 columns of census-income.test, in file order, from census-income.names (attribute list).
CENSUS_KDD_COLUMNS: tuple[str, ...] = (
    "age",
    "class_of_worker",
    "detailed_industry_recode",
    "detailed_occupation_recode",
    "education",
    "wage_per_hour",
    "enroll_in_edu_inst_last_wk",
    "marital_stat",
    "major_industry_code",
    "major_occupation_code",
    "race",
    "hispanic_origin",
    "sex",
    "member_of_a_labor_union",
    "reason_for_unemployment",
    "full_or_part_time_employment_stat",
    "capital_gains",
    "capital_losses",
    "dividends_from_stocks",
    "tax_filer_stat",
    "region_of_previous_residence",
    "state_of_previous_residence",
    "detailed_household_and_family_stat",
    "detailed_household_summary_in_household",
    "instance_weight",
    "migration_code_change_in_msa",
    "migration_code_change_in_reg",
    "migration_code_move_within_reg",
    "live_in_this_house_1_year_ago",
    "migration_prev_res_in_sunbelt",
    "num_persons_worked_for_employer",
    "family_members_under_18",
    "country_of_birth_father",
    "country_of_birth_mother",
    "country_of_birth_self",
    "citizenship",
    "own_business_or_self_employed",
    "fill_inc_questionnaire_for_veterans_admin",
    "veterans_benefits",
    "weeks_worked_in_year",
    "year",
    "income",
)
_CENSUS_KDD_NUMERIC = (
    "age",
    "detailed_industry_recode",
    "detailed_occupation_recode",
    "wage_per_hour",
    "capital_gains",
    "capital_losses",
    "dividends_from_stocks",
    "instance_weight",
    "num_persons_worked_for_employer",
    "own_business_or_self_employed",
    "veterans_benefits",
    "weeks_worked_in_year",
    "year",
)

# agaricus-lepiota.names, section 7 (class first, then the 22 attributes in file order).
MUSHROOM_COLUMNS: tuple[str, ...] = (
    "class",
    "cap-shape",
    "cap-surface",
    "cap-color",
    "bruises",
    "odor",
    "gill-attachment",
    "gill-spacing",
    "gill-size",
    "gill-color",
    "stalk-shape",
    "stalk-root",
    "stalk-surface-above-ring",
    "stalk-surface-below-ring",
    "stalk-color-above-ring",
    "stalk-color-below-ring",
    "veil-type",
    "veil-color",
    "ring-number",
    "ring-type",
    "spore-print-color",
    "population",
    "habitat",
)

# lymphography.names, section 7 (class first, then the 18 attributes in file order).
LYMPHOGRAPHY_COLUMNS: tuple[str, ...] = (
    "class",
    "lymphatics",
    "block_of_affere",
    "block_of_lymph_c",
    "block_of_lymph_s",
    "by_pass",
    "extravasates",
    "regeneration_of",
    "early_uptake_in",
    "lym_nodes_dimin",
    "lym_nodes_enlar",
    "changes_in_lym",
    "defect_in_node",
    "changes_in_node",
    "changes_in_stru",
    "special_forms",
    "dislocation_of",
    "exclusion_of_no",
    "no_of_nodes_in",
)


def _adult_text(name: str, data_dir: DataDir) -> str:
    """The verified, decompressed text of one Adult file."""
    path = dataset_file("adult", name, data_dir)
    return gunzip(path.read_bytes(), name).decode("ascii")


def _read_adult_file(name: str, data_dir: DataDir) -> pd.DataFrame:
    import pandas as pd

    text = _adult_text(name, data_dir)
    # adult.test starts with the junk line "|1x3 Cross validator"; skip comment lines and blanks.
    df = pd.read_csv(
        io.StringIO(text),
        header=None,
        names=list(ADULT_COLUMNS),
        sep=",",
        skipinitialspace=True,
        comment="|",
        skip_blank_lines=True,
        keep_default_na=False,
        na_filter=False,
        dtype={c: np.int64 for c in ADULT_NUMERIC_COLUMNS},
    )
    # Test labels carry a trailing period ("<=50K."); train labels do not.
    df["income"] = df["income"].str.rstrip(".")
    return df


def _adult_file_column(name: str, index: int, data_dir: DataDir) -> np.ndarray:
    """Field ``index`` of every row of one Adult file as int64, parsed as :func:`_read_adult_file` does.

    Text after ``|`` is a comment and lines left blank are skipped (pandas' ``comment="|"`` and
    ``skip_blank_lines``); ``int`` ignores the blank after each comma (``skipinitialspace``).
    """
    out: list[int] = []
    for number, line in enumerate(_adult_text(name, data_dir).splitlines(), start=1):
        if "|" in line:
            line = line.partition("|")[0]
        if not line.strip():
            continue
        try:
            out.append(int(line.split(",", index + 1)[index]))
        except (IndexError, ValueError):
            raise DataError(
                f"{name}, line {number}: no integer in field {index + 1} ({ADULT_COLUMNS[index]})"
            ) from None
    return np.asarray(out, dtype=np.int64)


def load_adult_column(column: str, split: str = "train", data_dir: DataDir = None) -> np.ndarray:
    """One numeric column of UCI Adult, read without pandas: ``load_adult(split)[column]`` as an array.

    For a command that needs one column (``fedstats mean adult --column age``): the same values as
    :func:`load_adult`, without the 0.2 s of importing pandas.

    Parameters
    ----------
    column : str
        One of :data:`ADULT_NUMERIC_COLUMNS`: ``age``, ``fnlwgt``, ``education_num``, ``capital_gain``,
        ``capital_loss``, ``hours_per_week``.
    split : {"train", "test", "all"}, optional
        As for :func:`load_adult` (``"all"``: train rows first).
    data_dir : str or path-like, optional
        As for :func:`load_adult`.

    Returns
    -------
    numpy.ndarray
        int64, shape ``(rows,)``: 32,561 (train), 16,281 (test) or 48,842 (all).

    Raises
    ------
    ParameterError
        If ``column`` is not a numeric Adult column or ``split`` not one of the accepted values.
    DatasetNotFoundError, ChecksumError
        As for :func:`load_adult`.
    DataError
        If a row has no integer in the column's field.
    """
    check_choice("column", column, ADULT_NUMERIC_COLUMNS)
    check_choice("split", split, ("train", "test", "all"))
    index = ADULT_COLUMNS.index(column)
    names = {"train": ["adult.data.gz"], "test": ["adult.test.gz"]}.get(
        split, ["adult.data.gz", "adult.test.gz"]
    )
    return np.concatenate([_adult_file_column(n, index, data_dir) for n in names])


def load_adult(split: str = "train", data_dir: DataDir = None) -> pd.DataFrame:
    """UCI Adult (census income), train, test or both, with SHA-256 verification.

    Works with no data directory at all: the package embeds byte-identical copies of ``adult.data.gz``
    and ``adult.test.gz``.

    Parameters
    ----------
    split : {"train", "test", "all"}, optional
        ``"train"`` (32,561 rows), ``"test"`` (16,281 rows) or ``"all"`` (48,842 rows, train first).
    data_dir : str or path-like, optional
        Data root or the ``adult/`` directory; default: search, then the embedded copy.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`ADULT_COLUMNS`: ``age``, ``fnlwgt``, ``education_num``, ``capital_gain``,
        ``capital_loss``, ``hours_per_week`` as int64; the others as strings. Missing values stay as the
        category ``"?"`` (train: 1,843 in occupation, 583 in native_country). ``income`` is ``"<=50K"`` or
        ``">50K"`` in both splits (the test file's trailing periods are removed).

    Raises
    ------
    ParameterError
        If ``split`` is not one of the accepted values.
    DatasetNotFoundError
        If ``data_dir`` is given and holds no Adult files.
    ChecksumError
        If a file differs from the registered version.
    """
    import pandas as pd

    check_choice("split", split, ("train", "test", "all"))
    if split == "train":
        return _read_adult_file("adult.data.gz", data_dir)
    if split == "test":
        return _read_adult_file("adult.test.gz", data_dir)
    both = [_read_adult_file(n, data_dir) for n in ("adult.data.gz", "adult.test.gz")]
    return pd.concat(both, ignore_index=True)


def load_census_kdd(split: str = "test", data_dir: DataDir = None) -> pd.DataFrame:
    """UCI Census-Income (KDD) from the 1994/95 Current Population Surveys (test split only).

    The zip is read in memory (no extraction). Column 1 is ``age`` (0-90, children included), column 25
    the CPS ``instance_weight`` (not a feature), the last column the label.

    Parameters
    ----------
    split : {"test"}, optional
        Only the 99,762-row test split is available offline (the training split exceeds the size limit
        of the offline copy).
    data_dir : str or path-like, optional
        Data root or the ``census-income-kdd/`` directory.

    Returns
    -------
    pandas.DataFrame
        99,762 rows x 42 columns named :data:`CENSUS_KDD_COLUMNS`; numeric columns as int64 (``age``,
        recodes, amounts, ``year``) or float64 (``instance_weight``), the rest strings;
        ``income`` is ``"- 50000."`` or ``"50000+."`` as in the file.

    Raises
    ------
    ParameterError
        If ``split`` is not ``"test"``.
    DatasetNotFoundError, ChecksumError
        As for every loader.
    """
    import pandas as pd

    check_choice("split", split, ("test",))
    path = dataset_file("census-income-kdd", "census-income.zip", data_dir)
    with zipfile.ZipFile(path) as zf:
        raw = zf.read("census-income.test")
    dtypes: dict[str, Any] = {c: np.int64 for c in _CENSUS_KDD_NUMERIC}
    dtypes["instance_weight"] = np.float64
    df = pd.read_csv(
        io.BytesIO(raw),
        header=None,
        names=list(CENSUS_KDD_COLUMNS),
        sep=",",
        skipinitialspace=True,
        keep_default_na=False,
        na_filter=False,
        dtype=dtypes,
        encoding="latin-1",
    )
    return df


def load_mushroom(data_dir: DataDir = None) -> pd.DataFrame:
    """UCI Mushroom: 8,124 mushrooms, class (``e``/``p``) and 22 categorical attributes.

    Parameters
    ----------
    data_dir : str or path-like, optional
        Data root or the ``mushroom/`` directory.

    Returns
    -------
    pandas.DataFrame
        8,124 rows x 23 string columns named :data:`MUSHROOM_COLUMNS` (one-letter codes as in the
        ``.names`` file; ``stalk-root`` has 2,480 ``"?"``, kept as a category).

    Raises
    ------
    DatasetNotFoundError, ChecksumError
        As for every loader.
    """
    import pandas as pd

    path = dataset_file("mushroom", "agaricus-lepiota.data", data_dir)
    return pd.read_csv(
        path,
        header=None,
        names=list(MUSHROOM_COLUMNS),
        dtype=str,
        keep_default_na=False,
        na_filter=False,
    )


def load_lymphography(data_dir: DataDir = None) -> pd.DataFrame:
    """UCI Lymphography: 148 patients, class (1-4) and 18 integer-coded attributes.

    The stored file has a header line added by its source repository; it is skipped and the columns are
    named from the ``.names`` file instead.

    Parameters
    ----------
    data_dir : str or path-like, optional
        Data root or the ``lymphography/`` directory.

    Returns
    -------
    pandas.DataFrame
        148 rows x 19 int64 columns named :data:`LYMPHOGRAPHY_COLUMNS`; ``class`` is 1 normal find,
        2 metastases, 3 malign lymph, 4 fibrosis (2, 81, 61 and 4 patients).

    Raises
    ------
    DatasetNotFoundError, ChecksumError
        As for every loader.
    """
    import pandas as pd

    path = dataset_file("lymphography", "lymphography.data", data_dir)
    return pd.read_csv(
        path, header=None, skiprows=1, names=list(LYMPHOGRAPHY_COLUMNS), dtype=np.int64
    )


_LOADERS: dict[str, Any] = {
    "adult": load_adult,
    "census-income-kdd": load_census_kdd,
    "mushroom": load_mushroom,
    "lymphography": load_lymphography,
    "activity-older-people": load_activity,
    "reuters21578": load_reuters,
    "gtsrb": load_gtsrb,
    "fashion-mnist": load_fashion_mnist_labels,
}


def load_dataset(name: str, data_dir: DataDir = None, **kwargs: Any) -> Any:
    """Load a registered dataset by name.

    Parameters
    ----------
    name : str
        One of :func:`~fedstats.datasets.dataset_names` (``"adult"``, ``"census-income-kdd"``,
        ``"mushroom"``, ``"lymphography"``, ``"activity-older-people"``, ``"reuters21578"``, ``"gtsrb"``,
        ``"fashion-mnist"``, ``"digits"``).
    data_dir : str or path-like, optional
        Data root (ignored for the embedded-only ``"digits"``).
    **kwargs
        Passed to the dataset's loader (e.g. ``split="test"``).

    Returns
    -------
    pandas.DataFrame, numpy.ndarray or tuple
        Whatever the dataset's loader returns.

    Raises
    ------
    ParameterError
        If ``name`` is unknown (the message lists the known names) or a keyword is not accepted.
    DatasetNotFoundError, ChecksumError
        As for every loader.
    """
    info = dataset_info(name)
    if info.name == "digits":
        if kwargs:
            raise ParameterError(", ".join(kwargs), kwargs, "no options for 'digits'")
        return load_digits()
    loader = _LOADERS[info.name]
    accepted = [p for p in inspect.signature(loader).parameters if p != "data_dir"]
    unknown = [k for k in kwargs if k not in accepted]
    if unknown:
        raise ParameterError(
            unknown[0], kwargs[unknown[0]], f"an option of {info.loader}: {', '.join(accepted)}"
        )
    return loader(data_dir=data_dir, **kwargs)
