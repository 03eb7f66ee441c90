"""Dataset loaders: SHA-256 checks, data-dir resolution, row counts as in ../shared/data/README.md."""

from __future__ import annotations

import gzip
import hashlib
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedstats import datasets as D
from fedstats.datasets import _lookup
from fedstats.errors import ChecksumError, DatasetNotFoundError, ParameterError

# --------------------------------------------------------------------------- registry and checksums


def test_registry_hashes_equal_the_shared_sha256sums(shared_data: Path) -> None:
    sums: dict[str, str] = {}
    for line in (shared_data / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        sums[name] = digest
    registered = {
        f"{info.subdir}/{f.name}": f.sha256
        for info in D.DATASETS.values()
        if not info.embedded_only
        for f in info.files
    }
    assert registered == sums
    for info in D.DATASETS.values():
        if info.embedded_only:
            continue
        for f in info.files:
            assert (shared_data / info.subdir / f.name).stat().st_size == f.size


def test_every_dataset_is_present_and_verified(shared_data: Path) -> None:
    for name in D.dataset_names():
        status = D.dataset_status(name, shared_data)
        assert status.present and status.verified, status


def test_corrupted_copy_raises_checksum_error(shared_data: Path, tmp_path: Path) -> None:
    good = tmp_path / "good" / "mushroom"
    good.mkdir(parents=True)
    for f in ("agaricus-lepiota.data", "agaricus-lepiota.names"):
        shutil.copy(shared_data / "mushroom" / f, good / f)
    assert len(D.load_mushroom(data_dir=tmp_path / "good")) == 8124
    bad = tmp_path / "bad" / "mushroom"
    shutil.copytree(good, bad)
    data = bytearray((bad / "agaricus-lepiota.data").read_bytes())
    data[100] = ord("x") if data[100] != ord("x") else ord("y")  # one byte changed
    (bad / "agaricus-lepiota.data").write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match=r"agaricus-lepiota\.data"):
        D.load_mushroom(data_dir=tmp_path / "bad")
    status = D.dataset_status("mushroom", tmp_path / "bad")
    assert status.present and not status.verified and "checksum" in status.problem


def test_corrupted_archive_raises_checksum_error(shared_data: Path, tmp_path: Path) -> None:
    d = tmp_path / "activity-older-people"
    d.mkdir()
    shutil.copy(shared_data / d.name / "MANIFEST.sha256", d)
    raw = (shared_data / d.name / "Datasets_Healthy_Older_People.tar.gz").read_bytes()
    (d / "Datasets_Healthy_Older_People.tar.gz").write_bytes(raw[:-10])  # truncated
    with pytest.raises(ChecksumError):
        D.load_activity(data_dir=tmp_path)


def test_verification_is_cached_per_process_and_redone_when_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "x.bin"
    f.write_bytes(b"hello")
    digest = hashlib.sha256(b"hello").hexdigest()
    calls: list[Path] = []
    real = _lookup.file_sha256

    def counting(path: Path) -> str:
        calls.append(Path(path))
        return real(path)

    monkeypatch.setattr(_lookup, "file_sha256", counting)
    D.verify_file(f, digest)
    D.verify_file(f, digest)
    assert len(calls) == 1
    f.write_bytes(b"hellO")  # same size, new content and mtime
    import os

    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(ChecksumError):
        D.verify_file(f, digest)
    assert len(calls) == 2
    with pytest.raises(DatasetNotFoundError):
        D.verify_file(tmp_path / "absent.bin", digest)


# --------------------------------------------------------------------------- resolution order


def _copy_mushroom(shared: Path, root: Path) -> Path:
    d = root / "mushroom"
    d.mkdir(parents=True)
    shutil.copy(shared / "mushroom" / "agaricus-lepiota.data", d)
    return d


def test_resolution_order_argument_env_cwd(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_root = tmp_path / "env"
    _copy_mushroom(shared_data, env_root)
    cwd_root = tmp_path / "work" / "shared" / "data"
    _copy_mushroom(shared_data, cwd_root)
    arg_root = tmp_path / "arg"
    arg_ds = _copy_mushroom(shared_data, arg_root)
    (tmp_path / "work" / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "work" / "repo")
    monkeypatch.setenv(D.ENV_VAR, str(env_root))
    name = "agaricus-lepiota.data"
    assert D.locate_file("mushroom", name, arg_root) == arg_root / "mushroom" / name
    assert D.locate_file("mushroom", name, arg_ds) == arg_ds / name  # the dataset's own folder
    assert D.locate_file("mushroom", name) == env_root / "mushroom" / name
    monkeypatch.delenv(D.ENV_VAR)
    assert D.locate_file("mushroom", name).resolve() == (cwd_root / "mushroom" / name).resolve()
    monkeypatch.setattr(_lookup, "_REPO_ROOT", tmp_path / "nowhere" / "repo")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetNotFoundError) as err:
        D.locate_file("mushroom", name)
    msg = str(err.value)
    assert "mushroom/agaricus-lepiota.data" in msg and "FEDSTATS_DATA" in msg and "data_dir" in msg
    assert str(tmp_path / "nowhere" / "shared" / "data") in msg


def test_missing_file_under_explicit_dir_names_the_dir(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match=str(tmp_path)):
        D.load_lymphography(data_dir=tmp_path)
    with pytest.raises(DatasetNotFoundError):  # no silent embedded fallback for an explicit dir
        D.load_adult(data_dir=tmp_path)


def test_adult_works_with_no_data_dir_from_the_embedded_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(D.ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_lookup, "_REPO_ROOT", tmp_path / "nowhere" / "repo")
    path = D.locate_file("adult", "adult.data.gz")
    assert path == D.embedded_path("adult.data.gz")
    assert "fedstats" in str(path) and "embedded" in str(path)
    D.clear_verification_cache()
    train = D.load_adult()
    test = D.load_adult("test")
    assert (len(train), len(test)) == (32561, 16281)
    both = D.load_adult("all")
    assert len(both) == 48842
    pd.testing.assert_frame_equal(both.iloc[32561:].reset_index(drop=True), test)


def test_embedded_adult_equals_the_shared_copy(shared_data: Path) -> None:
    for name in ("adult.data.gz", "adult.test.gz"):
        emb = D.embedded_path(name)
        assert emb is not None
        assert emb.read_bytes() == (shared_data / "adult" / name).read_bytes()
        # the uncompressed content has the SHA-256 the data README lists
    readme_sha = {
        "adult.data.gz": "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
        "adult.test.gz": "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
    }
    for name, sha in readme_sha.items():
        emb = D.embedded_path(name)
        assert emb is not None
        assert hashlib.sha256(gzip.decompress(emb.read_bytes())).hexdigest() == sha
    pd.testing.assert_frame_equal(D.load_adult(data_dir=shared_data), D.load_adult())


@pytest.mark.parametrize("split", ["train", "test", "all"])
def test_adult_column_reads_what_load_adult_holds_without_pandas(split: str) -> None:
    frame = D.load_adult(split)
    for column in D.ADULT_NUMERIC_COLUMNS:
        got = D.load_adult_column(column, split)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, frame[column].to_numpy())
    assert set(D.ADULT_NUMERIC_COLUMNS) == {
        c for c in D.ADULT_COLUMNS if frame[c].dtype == np.int64
    }
    with pytest.raises(ParameterError, match="column"):
        D.load_adult_column("income")
    with pytest.raises(ParameterError, match="split"):
        D.load_adult_column("age", "validation")


def test_adult_column_names_a_malformed_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedstats.datasets import loaders
    from fedstats.errors import DataError

    monkeypatch.setattr(loaders, "_adult_text", lambda name, data_dir: "|junk\n39, x\n\nabc, y\n")
    with pytest.raises(DataError, match="line 4"):
        D.load_adult_column("age")


def test_importing_the_datasets_package_loads_no_table_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys, fedstats.datasets as d\n"
        "d.dataset_names(); d.load_adult_column('age')\n"
        "print(sorted(m for m in ('pandas', 'pyarrow', 'scipy') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


def test_unknown_dataset_lists_the_known_names() -> None:
    with pytest.raises(ParameterError) as err:
        D.load_dataset("adults")
    for name in D.dataset_names():
        assert name in str(err.value)
    with pytest.raises(ParameterError, match="split"):
        D.load_dataset("adult", split="validation")
    with pytest.raises(ParameterError, match="sep"):
        D.load_dataset("mushroom", sep=";")
    with pytest.raises(ParameterError):
        D.load_census_kdd(split="train")


# --------------------------------------------------------------------------- row counts (data README)


def test_adult_counts_and_quirks(shared_data: Path) -> None:
    train = D.load_adult("train", shared_data)
    test = D.load_adult("test", shared_data)
    assert list(train.columns) == list(D.ADULT_COLUMNS)
    assert (len(train), len(test)) == (32561, 16281)
    assert int((train["occupation"] == "?").sum()) == 1843
    assert int((train["native_country"] == "?").sum()) == 583
    assert train["occupation"].nunique() == 15 and train["native_country"].nunique() == 42
    assert (train["age"].min(), train["age"].max()) == (17, 90)
    assert set(train["income"]) == set(test["income"]) == {"<=50K", ">50K"}
    assert train["age"].dtype == np.int64 and train["hours_per_week"].dtype == np.int64
    assert not train["workclass"].str.startswith(" ").any()  # ", " separator stripped
    assert not test.isna().any().any()


def test_census_kdd_test_split(shared_data: Path) -> None:
    df = D.load_census_kdd(data_dir=shared_data)
    assert df.shape == (99762, 42)
    assert df.columns[0] == "age" and df.columns[24] == "instance_weight"
    assert df["age"].between(0, 90).all() and df["age"].min() == 0 and df["age"].max() == 90
    assert set(df["income"]) == {"- 50000.", "50000+."}


def test_mushroom(shared_data: Path) -> None:
    df = D.load_mushroom(shared_data)
    assert df.shape == (8124, 23)
    assert Counter(df["class"]) == {"e": 4208, "p": 3916}
    assert int((df["stalk-root"] == "?").sum()) == 2480
    assert (df == "?").sum().sum() == 2480  # attribute 11 only


def test_mushroom_column_names_follow_the_names_file(shared_data: Path) -> None:
    text = (shared_data / "mushroom" / "agaricus-lepiota.names").read_text()
    import re

    names = re.findall(r"^\s+\d+\.\s+([a-z?-]+):", text.split("7. Attribute Information")[1], re.M)
    assert [n.rstrip("?") for n in names] == list(D.MUSHROOM_COLUMNS[1:])


def test_lymphography(shared_data: Path) -> None:
    df = D.load_lymphography(shared_data)
    assert df.shape == (148, 19)
    assert df["class"].value_counts().sort_index().tolist() == [2, 81, 61, 4]
    assert df.columns[-1] == "no_of_nodes_in" and df.dtypes.eq(np.int64).all()


def test_activity(shared_data: Path) -> None:
    df = D.load_activity(shared_data)
    assert len(df) == 75128
    assert list(df.columns[:9]) == list(D.ACTIVITY_COLUMNS)
    assert df.groupby("dataset").size().to_dict() == {"S1": 52482, "S2": 22646}
    assert df["activity"].value_counts().sort_index().tolist() == [16406, 4911, 51520, 2291]
    trials = df.drop_duplicates("trial")
    assert len(trials) == 87
    by = trials.groupby(["dataset", "sex"]).size().to_dict()
    assert by == {("S1", "M"): 20, ("S1", "F"): 40, ("S2", "M"): 5, ("S2", "F"): 22}
    assert (trials["sex"] == trials["trial"].str[-1]).all()
    assert df.loc[0, "trial"] == "d1p01M" and df.loc[0, "subject"] == "d1p01"


def test_reuters(shared_data: Path) -> None:
    df = D.load_reuters(shared_data)
    assert len(df) == 21578
    assert df["lewissplit"].value_counts().to_dict() == {
        "TRAIN": 14668,
        "TEST": 6188,
        "NOT-USED": 722,
    }
    assert df["newid"].is_unique and sorted(df["newid"]) == list(range(1, 21579))
    first = df.set_index("newid").loc[1]
    assert first["topics"] == ["cocoa"] and first["title"] == "BAHIA COCOA REVIEW"
    assert first["body"].startswith("Showers continued throughout the week")
    assert "\x03" not in "".join(df["body"])  # &#3; control entities removed


def test_gtsrb(shared_data: Path) -> None:
    train = D.load_gtsrb("train", shared_data)
    test = D.load_gtsrb("test", shared_data)
    meta = D.load_gtsrb("meta", shared_data)
    assert (len(train), len(test)) == (39209, 12630)
    cols = ["Width", "Height", "Roi.X1", "Roi.Y1", "Roi.X2", "Roi.Y2", "ClassId", "Path"]
    assert list(train.columns) == cols and list(test.columns) == cols
    assert set(train["ClassId"]) == set(test["ClassId"]) == set(range(43))
    assert list(meta.columns) == ["Path", "ClassId", "ShapeId", "ColorId", "SignId"]


def test_fashion_mnist_labels(shared_data: Path) -> None:
    train = D.load_fashion_mnist_labels("train", shared_data)
    test = D.load_fashion_mnist_labels("test", shared_data)
    assert train.shape == (60000,) and test.shape == (10000,) and train.dtype == np.uint8
    assert np.bincount(train).tolist() == [6000] * 10
    assert np.bincount(test).tolist() == [1000] * 10
    np.testing.assert_array_equal(
        D.read_idx(shared_data / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz"), test
    )


def test_digits_match_scikit_learn() -> None:
    images, labels = D.load_digits()
    assert images.shape == (1797, 64) and labels.shape == (1797,)
    assert images.dtype == np.float64 and images.min() == 0.0 and images.max() == 1.0
    assert set(labels.tolist()) == set(range(10))
    sk = pytest.importorskip("sklearn.datasets")
    ref = sk.load_digits()
    np.testing.assert_array_equal(images * 16, ref.data)
    np.testing.assert_array_equal(labels, ref.target)


def test_load_dataset_dispatches(shared_data: Path) -> None:
    assert len(D.load_dataset("lymphography", shared_data)) == 148
    assert len(D.load_dataset("gtsrb", shared_data, split="meta")) == 43
    images, _ = D.load_dataset("digits")
    assert images.shape == (1797, 64)
