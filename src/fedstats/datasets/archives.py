"""Loaders of the archived datasets (tar.gz and zip archives, read in memory).

Activity, Reuters-21578, GTSRB, the Fashion-MNIST labels, and the embedded digits.

Each verifies the SHA-256 of every file it reads, as the tabular loaders of :mod:`.loaders` do (which
re-exports them and dispatches :func:`~fedstats.datasets.loaders.load_dataset`).
"""

from __future__ import annotations

import hashlib
import html
import io
import os
import re
import tarfile
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstats._validation import check_choice
from fedstats.datasets._lookup import dataset_file
from fedstats.datasets.readers import gunzip, parse_idx
from fedstats.errors import ChecksumError, DataError

if TYPE_CHECKING:  # imported where a table is read
    import pandas as pd

__all__ = [
    "ACTIVITY_COLUMNS",
    "load_activity",
    "load_digits",
    "load_fashion_mnist_labels",
    "load_gtsrb",
    "load_reuters",
]

DataDir = str | os.PathLike[str] | None

ACTIVITY_COLUMNS: tuple[str, ...] = (
    "time",
    "acc_frontal",
    "acc_vertical",
    "acc_lateral",
    "antenna_id",
    "rssi",
    "phase",
    "frequency",
    "activity",
)


def _manifest(dataset: str, data_dir: DataDir) -> dict[str, str]:
    path = dataset_file(dataset, "MANIFEST.sha256", data_dir)
    out: dict[str, str] = {}
    for line in path.read_text("ascii").splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            out[name.strip().lstrip("*")] = digest.lower()
    return out


def _tar_members(dataset: str, archive: str, data_dir: DataDir) -> dict[str, bytes]:
    """Every regular file of a verified tar.gz, in memory, each checked against the MANIFEST."""
    manifest = _manifest(dataset, data_dir)
    path = dataset_file(dataset, archive, data_dir)
    out: dict[str, bytes] = {}
    with tarfile.open(path, mode="r:gz") as tf:
        for member in tf.getmembers():
            if not member.isfile():
                continue
            fh = tf.extractfile(member)
            if fh is None:  # pragma: no cover - regular files always have a stream
                continue
            data = fh.read()
            expected = manifest.get(member.name)
            if expected is None or hashlib.sha256(data).hexdigest() != expected:
                raise ChecksumError(
                    f"{dataset}/{archive}: member {member.name} does not match MANIFEST.sha256"
                )
            out[member.name] = data
    missing = set(manifest) - set(out)
    if missing:
        raise ChecksumError(
            f"{dataset}/{archive}: members listed in MANIFEST.sha256 are missing: "
            + ", ".join(sorted(missing)[:5])
        )
    return out


_TRIAL_RE = re.compile(r"^d([12])p(\d+)([MF])$")


def load_activity(data_dir: DataDir = None) -> pd.DataFrame:
    """Activity recognition with healthy older people (batteryless RFID wearable), all 87 trials.

    The tar.gz is read in memory and every member is checked against ``MANIFEST.sha256``. Each file is
    one anonymised participant trial named ``d<dataset>p<number><sex>`` (``d1p01M``): room setting S1
    (60 trials) or S2 (27), and the participant's sex as the last letter.

    Parameters
    ----------
    data_dir : str or path-like, optional
        Data root or the ``activity-older-people/`` directory.

    Returns
    -------
    pandas.DataFrame
        75,128 rows (S1 52,482, S2 22,646), in file order, with columns :data:`ACTIVITY_COLUMNS`
        (``time`` in s, accelerations in G, ``antenna_id``, ``rssi``, ``phase``, ``frequency``,
        ``activity`` 1 sit on bed, 2 sit on chair, 3 lying, 4 ambulating) then ``trial`` (file name,
        e.g. ``"d1p01M"``), ``dataset`` (``"S1"``/``"S2"``), ``subject`` (``"d1p01"``: the anonymised
        participant code of the file; the data do not say which trials share a person) and ``sex``
        (``"M"``/``"F"``; 25 male and 62 female trials).

    Raises
    ------
    DatasetNotFoundError, ChecksumError
        As for every loader.
    DataError
        If a trial file name does not follow the ``dNpNN[MF]`` pattern.

    References
    ----------
    Torres, Visvanathan & Ranasinghe (2016), UCI dataset 427, doi:10.24432/C5GG6B.
    """
    import pandas as pd

    members = _tar_members(
        "activity-older-people", "Datasets_Healthy_Older_People.tar.gz", data_dir
    )
    frames: list[pd.DataFrame] = []
    meta: list[tuple[str, str, str, str, int]] = []
    for name in sorted(members):
        base = name.rsplit("/", 1)[-1]
        if base == "README.txt":
            continue
        m = _TRIAL_RE.match(base)
        if m is None:
            raise DataError(f"activity archive: unexpected trial file name {name!r}")
        df = pd.read_csv(
            io.BytesIO(members[name]),
            header=None,
            names=list(ACTIVITY_COLUMNS),
            dtype={"antenna_id": np.int64, "activity": np.int64},
        )
        frames.append(df)
        meta.append((base, f"S{m.group(1)}", base[:-1], m.group(3), len(df)))
    out = pd.concat(frames, ignore_index=True)
    counts = np.array([k[4] for k in meta])
    out["trial"] = np.repeat([k[0] for k in meta], counts)
    out["dataset"] = np.repeat([k[1] for k in meta], counts)
    out["subject"] = np.repeat([k[2] for k in meta], counts)
    out["sex"] = np.repeat([k[3] for k in meta], counts)
    return out


_REUTERS_DOC = re.compile(r"<REUTERS(?P<attrs>[^>]*)>(?P<body>.*?)</REUTERS>", re.S)
_ATTR = re.compile(r'(\w+)="([^"]*)"')
_D = re.compile(r"<D>(.*?)</D>", re.S)
_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_TAG = re.compile(r"<[^>]+>")


def _element(body: str, tag: str) -> str | None:
    m = re.search(rf"<{tag}(?:\s[^>]*)?>(.*?)</{tag}>", body, re.S)
    return m.group(1) if m else None


def _clean(text: str | None) -> str:
    if text is None:
        return ""
    return _CTRL.sub("", html.unescape(text)).strip()


def load_reuters(data_dir: DataDir = None) -> pd.DataFrame:
    """Reuters-21578, Distribution 1.0: the 21,578 documents of the 22 SGML files.

    The archive is read in memory, each member checked against ``MANIFEST.sha256``, and the SGML decoded
    as Latin-1 (``reut2-017.sgm`` has one byte that is not valid UTF-8). Entities are unescaped and
    control characters (``&#3;`` etc.) removed.

    Parameters
    ----------
    data_dir : str or path-like, optional
        Data root or the ``reuters21578/`` directory.

    Returns
    -------
    pandas.DataFrame
        One row per ``<REUTERS>`` element, in file order, with columns ``newid`` and ``oldid`` (int64),
        ``lewissplit`` (``"TRAIN"`` 14,668, ``"TEST"`` 6,188, ``"NOT-USED"`` 722), ``cgisplit``,
        ``has_topics`` (the ``TOPICS`` attribute == ``"YES"``), ``topics`` and ``places`` (lists of str),
        ``date``, ``title`` and ``body`` (str; for ``TYPE="UNPROC"`` documents without ``<BODY>``, the
        text of ``<TEXT>``).

    Raises
    ------
    DatasetNotFoundError, ChecksumError
        As for every loader.
    """
    import pandas as pd

    members = _tar_members("reuters21578", "reuters21578.tar.gz", data_dir)
    rows: list[dict[str, Any]] = []
    for name in sorted(n for n in members if n.endswith(".sgm")):
        text = members[name].decode("latin-1")
        for m in _REUTERS_DOC.finditer(text):
            attrs = dict(_ATTR.findall(m.group("attrs")))
            body = m.group("body")
            topics = _element(body, "TOPICS") or ""
            places = _element(body, "PLACES") or ""
            text_el = _element(body, "TEXT") or ""
            main = _element(text_el, "BODY")
            if main is None and _element(text_el, "TITLE") is None:
                main = _TAG.sub("", text_el)
            rows.append(
                {
                    "newid": int(attrs["NEWID"]),
                    "oldid": int(attrs["OLDID"]),
                    "lewissplit": attrs.get("LEWISSPLIT", ""),
                    "cgisplit": attrs.get("CGISPLIT", ""),
                    "has_topics": attrs.get("TOPICS", "") == "YES",
                    "topics": [_clean(t) for t in _D.findall(topics)],
                    "places": [_clean(t) for t in _D.findall(places)],
                    "date": _clean(_element(body, "DATE")),
                    "title": _clean(_element(text_el, "TITLE")),
                    "body": _clean(main),
                }
            )
    return pd.DataFrame(rows)


def load_gtsrb(split: str = "train", data_dir: DataDir = None) -> pd.DataFrame:
    """GTSRB traffic-sign annotations (Kaggle layout; no images).

    Parameters
    ----------
    split : {"train", "test", "meta"}, optional
        ``Train.csv.gz`` (39,209 rows), ``Test.csv`` (12,630 rows) or ``Meta.csv`` (one row per class).
    data_dir : str or path-like, optional
        Data root or the ``gtsrb/`` directory.

    Returns
    -------
    pandas.DataFrame
        Train and Test: ``Width``, ``Height``, ``Roi.X1``, ``Roi.Y1``, ``Roi.X2``, ``Roi.Y2``, ``ClassId``
        (0-42, int64) and ``Path``. Meta: ``Path``, ``ClassId``, ``ShapeId``, ``ColorId``, ``SignId``.

    Raises
    ------
    ParameterError
        If ``split`` is not an accepted value.
    DatasetNotFoundError, ChecksumError
        As for every loader.
    """
    import pandas as pd

    check_choice("split", split, ("train", "test", "meta"))
    name = {"train": "Train.csv.gz", "test": "Test.csv", "meta": "Meta.csv"}[split]
    path = dataset_file("gtsrb", name, data_dir)
    return pd.read_csv(
        path, dtype={"Path": str, "SignId": str} if split == "meta" else {"Path": str}
    )


def load_fashion_mnist_labels(split: str = "train", data_dir: DataDir = None) -> np.ndarray:
    """Fashion-MNIST labels (the images are not available offline).

    Parameters
    ----------
    split : {"train", "test"}, optional
        60,000 training or 10,000 test labels.
    data_dir : str or path-like, optional
        Data root or the ``fashion-mnist/`` directory.

    Returns
    -------
    numpy.ndarray
        ``(n,)`` uint8 labels 0-9 (each class 6,000 times in train, 1,000 in test).

    Raises
    ------
    ParameterError
        If ``split`` is not an accepted value.
    DatasetNotFoundError, ChecksumError
        As for every loader.
    DataError
        If the IDX content is malformed.
    """
    check_choice("split", split, ("train", "test"))
    name = "train-labels-idx1-ubyte.gz" if split == "train" else "t10k-labels-idx1-ubyte.gz"
    path = dataset_file("fashion-mnist", name, data_dir)
    labels = parse_idx(gunzip(path.read_bytes(), name), source=name)
    if labels.ndim != 1:  # pragma: no cover - the checksum pins the file
        raise DataError(f"{name}: expected an idx1 label file, got shape {labels.shape}")
    return labels


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The optical-recognition handwritten digits embedded in the package (scikit-learn's copy).

    Needs neither scikit-learn nor a data directory.

    Returns
    -------
    images : numpy.ndarray
        ``(1797, 64)`` float64 in [0, 1]: the 8x8 pixel counts 0-16 divided by 16, row-major.
    labels : numpy.ndarray
        ``(1797,)`` int64 digits 0-9.

    Raises
    ------
    ChecksumError
        If the embedded file was altered.
    DatasetNotFoundError
        If the package was installed without its data files.
    """
    path = dataset_file("digits", "digits.csv.gz")
    raw = np.loadtxt(
        io.StringIO(gunzip(path.read_bytes(), "digits.csv.gz").decode("ascii")),
        delimiter=",",
        dtype=np.int64,
    )
    if raw.shape != (1797, 65):  # pragma: no cover - the checksum pins the file
        raise DataError(f"digits.csv.gz: expected shape (1797, 65), got {raw.shape}")
    return raw[:, :64].astype(np.float64) / 16.0, raw[:, 64].copy()
