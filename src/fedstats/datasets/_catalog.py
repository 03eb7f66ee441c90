"""The registered datasets: what each one is, its provenance, license, files and their SHA-256 sums.

Every dataset fedstats can load is described by a :class:`Dataset` record in :data:`DATASETS`, with the
SHA-256 of each stored file (copied from ``../shared/data/SHA256SUMS``; the hashes are part of the code, so a
replaced SUMS file cannot make a substituted data file pass). Where the files are found and how they are
verified is :mod:`fedstats.datasets._lookup`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fedstats.errors import ParameterError

__all__ = ["DATASETS", "DataFile", "Dataset", "dataset_info", "dataset_names"]


@dataclass(frozen=True)
class DataFile:
    """One stored file of a dataset.

    Attributes
    ----------
    name : str
        File name inside the dataset's directory.
    sha256 : str
        SHA-256 (hex) of the stored bytes, as listed in ``SHA256SUMS``.
    size : int
        Size of the stored file in bytes.
    embedded : bool
        True when a byte-identical copy ships inside the package.
    required : bool
        False for documentation files (``.names``) the loaders do not read.
    """

    name: str
    sha256: str
    size: int
    embedded: bool = False
    required: bool = True


@dataclass(frozen=True)
class Dataset:
    """Description of one dataset: what it is, where it comes from, its license and its files.

    Attributes
    ----------
    name : str
        Registry name (``"adult"``, ``"census-income-kdd"``, ...), also the sub-directory of the data root.
    description : str
        One line on what the data is.
    source : str
        Where the stored bytes were taken from (repository and commit, or package).
    original_source : str
        The original publisher of the data.
    license : str
        The license as stated by the original publisher.
    citation : str
        What to cite.
    files : tuple of DataFile
        The stored files with their SHA-256 sums.
    loader : str
        Name of the loader function in :mod:`fedstats.datasets`.
    shape : str
        What the loader returns, in words (rows and columns).
    license_short : str
        The license in a few words (for tables).
    origin : str
        The original publisher in a few words (for tables).
    embedded_only : bool
        True when the dataset exists only inside the package (never looked up in a data directory).
    """

    name: str
    description: str
    source: str
    original_source: str
    license: str
    citation: str
    files: tuple[DataFile, ...]
    loader: str
    shape: str
    license_short: str = ""
    origin: str = ""
    embedded_only: bool = False
    directory: str = field(default="")

    @property
    def subdir(self) -> str:
        """Sub-directory of the data root that holds the files."""
        return self.directory or self.name

    @property
    def has_embedded_copy(self) -> bool:
        """True when every file the loader needs by default ships inside the package."""
        return any(f.embedded for f in self.files)

    def file(self, name: str) -> DataFile:
        """The :class:`DataFile` called ``name``.

        Raises
        ------
        ParameterError
            If the dataset has no such file.
        """
        for f in self.files:
            if f.name == name:
                return f
        raise ParameterError("file", name, "one of " + ", ".join(f.name for f in self.files))


_UCI_LICENSE = "CC BY 4.0 (as listed by the UCI Machine Learning Repository)"

DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset(
            name="adult",
            description="UCI Adult (1994 US census extract): 14 attributes and an income label",
            source="GitHub aefuente/dm_prac @ 2abe7055235a700962c8a34d4746afb1996052cb (gzip -n -9)",
            original_source="UCI Machine Learning Repository, dataset 2 'Adult' (Kohavi & Becker, 1996)",
            license=_UCI_LICENSE,
            citation="Kohavi, R. (1996). Scaling up the accuracy of naive-Bayes classifiers. KDD-96.",
            files=(
                DataFile(
                    "adult.data.gz",
                    "c7a2b4716a97f930123e0baf879188d701e798172631a654fc703d4b082907f3",
                    408_969,
                    embedded=True,
                ),
                DataFile(
                    "adult.test.gz",
                    "8a2c1bffa6e7ce5abfa43881ae5e87c4311ebc2b3cd526c9c40a43f19f06f799",
                    205_254,
                    embedded=True,
                ),
                DataFile(
                    "adult.names",
                    "c248284c0b5de30c9e1958d6cdd168a34a654758b620e68f46aefa83fc0a576a",
                    5_229,
                    required=False,
                ),
            ),
            loader="load_adult",
            shape="train 32,561 x 15, test 16,281 x 15",
            license_short="CC BY 4.0",
            origin="UCI #2",
        ),
        Dataset(
            name="census-income-kdd",
            description="UCI Census-Income (KDD), 1994/95 CPS, test split only (ages 0-90)",
            source="GitHub vagnerasilva/stremlit_teste @ cf94e4622e5dcb6545bf4df856d77daa5ab32395",
            original_source="UCI Machine Learning Repository 'Census-Income (KDD)' (Lane & Kohavi)",
            license=_UCI_LICENSE,
            citation="Lane, T. & Kohavi, R. Census-Income (KDD). UCI Machine Learning Repository.",
            files=(
                DataFile(
                    "census-income.zip",
                    "20d177e1ec7712b72553c5187f19778fd30ee939838a7a079d92fef6d50da4ea",
                    3_879_140,
                ),
                DataFile(
                    "census-income.names",
                    "d6fea52977f68504ab3149351980458e09bfc3116808da8986646710d254ef98",
                    14_892,
                    required=False,
                ),
            ),
            loader="load_census_kdd",
            shape="test 99,762 x 42 (the training split was not obtainable)",
            license_short="CC BY 4.0",
            origin="UCI #117",
        ),
        Dataset(
            name="mushroom",
            description="UCI Mushroom: 22 categorical attributes of 8,124 gilled mushrooms, edible/poisonous",
            source="GitHub robintux/Datasets4StackOverFlowQuestions @ a576ea1d (data), 2e3e3c4f (names)",
            original_source="UCI Machine Learning Repository 'Mushroom' (Schlimmer, 1987)",
            license=_UCI_LICENSE,
            citation="Schlimmer, J. (1987). Mushroom. UCI Machine Learning Repository.",
            files=(
                DataFile(
                    "agaricus-lepiota.data",
                    "e65d082030501a3ebcbcd7c9f7c71aa9d28fdfff463bf4cf4716a3fe13ac360e",
                    373_704,
                ),
                DataFile(
                    "agaricus-lepiota.names",
                    "79e440566900901a5900febc1f3c9659e3746e306a5fa1aed4d084a1e4da76fd",
                    6_816,
                    required=False,
                ),
            ),
            loader="load_mushroom",
            shape="8,124 x 23",
            license_short="CC BY 4.0",
            origin="UCI #73",
        ),
        Dataset(
            name="lymphography",
            description="UCI Lymphography: 18 coded attributes of 148 patients, 4 diagnoses",
            source="GitHub Noot-tooN/MasinskoUcenje @ 5ebdb8c57523aaf3538cdc859c8e9d8335606569",
            original_source=(
                "UCI Machine Learning Repository 'Lymphography' (Institute of Oncology, Ljubljana; "
                "Kononenko & Cestnik, 1988)"
            ),
            license=_UCI_LICENSE,
            citation="Zwitter, M. & Soklic, M. Lymphography. UCI Machine Learning Repository.",
            files=(
                DataFile(
                    "lymphography.data",
                    "1d56052d55faa2c315d1c2457482bc864739d8ecb05a31e0e0187af40b9b37ff",
                    5_904,
                ),
                DataFile(
                    "lymphography.names",
                    "65befbda99542348bb42f698fcb7bd4c24c8cd499bb542ce3ffa8db0f5691ac4",
                    3_236,
                    required=False,
                ),
            ),
            loader="load_lymphography",
            shape="148 x 19 (an added header line is skipped)",
            license_short="CC BY 4.0",
            origin="UCI #63",
        ),
        Dataset(
            name="activity-older-people",
            description=(
                "Activity recognition of healthy older people with a batteryless wearable sensor "
                "(RFID): 87 trials, sex from the file name"
            ),
            source=(
                "GitHub DefKd911/Activity-recognition-with-healthy-older-people-using-a-batteryless-"
                "wearable-sensor @ 4006e420 (trials), samruddhichitnis02/Activity_recognition (READMEs)"
            ),
            original_source=(
                "UCI Machine Learning Repository dataset 427 (Torres, Visvanathan & Ranasinghe, 2016), "
                "doi:10.24432/C5GG6B"
            ),
            license="CC BY 4.0",
            citation=(
                "Torres, R. L. S., Visvanathan, R., Abbott, D., Hill, K. D. & Ranasinghe, D. C. (2016). "
                "A battery-less and wireless wearable sensor system for identifying bed and chair exits "
                "in a pilot trial in hospitalized older people."
            ),
            files=(
                DataFile(
                    "Datasets_Healthy_Older_People.tar.gz",
                    "37a74da982d1d5f1c5aa1def9c3784b0e15289439c5776e571a8c449bd1f7f8f",
                    642_903,
                ),
                DataFile(
                    "MANIFEST.sha256",
                    "bea48603caac3d3ad4c587d57a5fefd05f4679d2a8ec7ee43935f293ceadea06",
                    10_154,
                ),
            ),
            loader="load_activity",
            shape="75,128 x 13 (S1 52,482 rows in 60 trials, S2 22,646 rows in 27 trials)",
            license_short="CC BY 4.0",
            origin="UCI #427",
        ),
        Dataset(
            name="reuters21578",
            description="Reuters-21578 Distribution 1.0 newswire collection (SGML), 21,578 documents",
            source="GitHub kchopra456/Reuters-21578 @ 85802cb1835ad4aafa2cbae3e7baa99ca0414a7d",
            original_source="David D. Lewis; UCI KDD Archive 'Reuters-21578 Text Categorization Collection'",
            license=(
                "free distribution for research purposes only (Reuters Ltd. and Carnegie Group, Inc.); "
                "acknowledge as 'Reuters-21578, Distribution 1.0'"
            ),
            citation="Lewis, D. D. Reuters-21578 text categorization test collection, Distribution 1.0.",
            files=(
                DataFile(
                    "reuters21578.tar.gz",
                    "f714370af96c9b68094786f60c2311bfef1fcdea92c845ca160e53acbbc343e3",
                    8_092_787,
                ),
                DataFile(
                    "MANIFEST.sha256",
                    "3020885d00754d5d767e1a05302a893f972d53501bee7d1e74025fdbaebe443a",
                    2_569,
                ),
            ),
            loader="load_reuters",
            shape="21,578 documents (LEWISSPLIT TRAIN 14,668, TEST 6,188, NOT-USED 722)",
            license_short="research use only",
            origin="UCI KDD / D. Lewis",
        ),
        Dataset(
            name="gtsrb",
            description="GTSRB traffic-sign annotation CSVs (Kaggle layout): sizes, ROI boxes, classes",
            source="GitHub bazylhorsey/gtsrb @ 90339adc92e013e053a7f5903f5c4af954266dc7",
            original_source=(
                "INI Bochum GTSRB (Stallkamp et al., 2011), Kaggle repackaging "
                "'GTSRB - German Traffic Sign Recognition Benchmark'"
            ),
            license="not stated by the source (Kaggle listing commonly given as CC0 1.0, unverified)",
            citation=(
                "Stallkamp, J., Schlipsing, M., Salmen, J. & Igel, C. (2011). The German Traffic Sign "
                "Recognition Benchmark: a multi-class classification competition. IJCNN."
            ),
            files=(
                DataFile(
                    "Train.csv.gz",
                    "bb169559f35313a3c8faf06230e3c9a8ac44f18fd04ef4b957499a9f432452d4",
                    286_551,
                ),
                DataFile(
                    "Test.csv",
                    "7d67912235e4570d19fb6bc96e9b227b4d89e4cd2ed47e14b8e8d976e1eb82b1",
                    427_897,
                ),
                DataFile(
                    "Meta.csv",
                    "50b90aed8f9d4f071f841c3f2a92e4fc0378275fb6c7770849ec9f5937fc9cce",
                    1_033,
                ),
            ),
            loader="load_gtsrb",
            shape="train 39,209 x 8, test 12,630 x 8, meta 43 x 5 (no images)",
            license_short="unstated (CC0?)",
            origin="INI Bochum via Kaggle",
        ),
        Dataset(
            name="fashion-mnist",
            description="Fashion-MNIST labels only (IDX1): 10 clothing classes, 6,000/1,000 per class",
            source="GitHub zalandoresearch/fashion-mnist @ b2617bb6d3ffa2e429640350f613e3291e10b141",
            original_source="Zalando Research (Xiao, Rasul & Vollgraf, 2017)",
            license="MIT (Copyright 2017 Zalando SE)",
            citation=(
                "Xiao, H., Rasul, K. & Vollgraf, R. (2017). Fashion-MNIST: a novel image dataset for "
                "benchmarking machine learning algorithms. arXiv:1708.07747."
            ),
            files=(
                DataFile(
                    "train-labels-idx1-ubyte.gz",
                    "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
                    29_515,
                ),
                DataFile(
                    "t10k-labels-idx1-ubyte.gz",
                    "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
                    5_148,
                ),
            ),
            loader="load_fashion_mnist_labels",
            shape="train 60,000 labels, test 10,000 labels (images not available offline)",
            license_short="MIT",
            origin="Zalando Research",
        ),
        Dataset(
            name="digits",
            description="Optical recognition of handwritten digits: 1,797 8x8 images, 10 classes",
            source="scikit-learn 1.9.1, sklearn/datasets/data/digits.csv.gz (embedded in fedstats)",
            original_source=(
                "UCI Machine Learning Repository 'Optical Recognition of Handwritten Digits' "
                "(Alpaydin & Kaynak, 1998), test set"
            ),
            license="BSD-3-Clause (scikit-learn); original data CC BY 4.0 (UCI)",
            citation="Alpaydin, E. & Kaynak, C. (1998). Cascading classifiers. Kybernetika 34(4).",
            files=(
                DataFile(
                    "digits.csv.gz",
                    "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22",
                    57_523,
                    embedded=True,
                ),
            ),
            loader="load_digits",
            shape="1,797 images of 64 pixels in [0, 1], labels 0-9",
            license_short="BSD-3-Clause (data CC BY 4.0)",
            origin="scikit-learn / UCI #80",
            embedded_only=True,
        ),
    )
}


def dataset_names() -> tuple[str, ...]:
    """Names of every registered dataset, in registry order."""
    return tuple(DATASETS)


def dataset_info(name: str) -> Dataset:
    """The :class:`Dataset` record called ``name``.

    Raises
    ------
    ParameterError
        If ``name`` is not a registered dataset; the message lists the known names.
    """
    if not isinstance(name, str) or name not in DATASETS:
        raise ParameterError("dataset", name, "one of " + ", ".join(DATASETS))
    return DATASETS[name]
