"""Readers for users' files: IDX, CIFAR pickles, CSV, Parquet, load_table and the NaN/inf check."""

from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fedstats import datasets as D
from fedstats.errors import DataError, DatasetNotFoundError, ParameterError, SecurityError

# --------------------------------------------------------------------------- IDX


def _idx_bytes(arr: np.ndarray, code: int, big: str) -> bytes:
    header = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return header + arr.astype(big).tobytes()


@pytest.mark.parametrize("compress", [False, True])
def test_idx_round_trip_labels_and_images(tmp_path: Path, compress: bool) -> None:
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 10, size=37).astype(np.uint8)
    images = rng.integers(0, 256, size=(5, 28, 28)).astype(np.uint8)
    for name, arr in (("train-labels-idx1-ubyte", labels), ("train-images-idx3-ubyte", images)):
        raw = _idx_bytes(arr, 0x08, "u1")
        path = tmp_path / (name + (".gz" if compress else ""))
        path.write_bytes(gzip.compress(raw) if compress else raw)
        out = D.read_idx(path)
        assert out.dtype == np.uint8 and out.shape == arr.shape
        np.testing.assert_array_equal(out, arr)
    # magic numbers of the MNIST files: 2049 (idx1) and 2051 (idx3)
    assert struct.unpack(">I", _idx_bytes(labels, 0x08, "u1")[:4])[0] == 2049
    assert struct.unpack(">I", _idx_bytes(images, 0x08, "u1")[:4])[0] == 2051


def test_idx_other_dtypes_are_big_endian(tmp_path: Path) -> None:
    arr16 = np.array([[1, -2, 300], [-32768, 32767, 0]], dtype=np.int16)
    arr32f = np.array([1.5, -2.25, 1e30], dtype=np.float32)
    (tmp_path / "a.idx2").write_bytes(_idx_bytes(arr16, 0x0B, ">i2"))
    (tmp_path / "b.idx1").write_bytes(_idx_bytes(arr32f, 0x0D, ">f4"))
    np.testing.assert_array_equal(D.read_idx(tmp_path / "a.idx2"), arr16)
    np.testing.assert_array_equal(D.read_idx(tmp_path / "b.idx1"), arr32f)


def test_idx_malformed_files(tmp_path: Path) -> None:
    good = _idx_bytes(np.arange(10, dtype=np.uint8), 0x08, "u1")
    cases = {
        "truncated": good[:-1],
        "magic": b"\x01" + good[1:],
        "typecode": good[:2] + b"\x07" + good[3:],
        "extra": good + b"\x00",
    }
    for name, raw in cases.items():
        (tmp_path / name).write_bytes(raw)
        with pytest.raises(DataError):
            D.read_idx(tmp_path / name)
    with pytest.raises(DatasetNotFoundError):
        D.read_idx(tmp_path / "absent-idx1-ubyte")


# --------------------------------------------------------------------------- CIFAR


def _cifar10_dir(tmp_path: Path, rng: np.random.Generator) -> tuple[Path, np.ndarray, np.ndarray]:
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    all_data, all_labels = [], []
    for i in (1, 2):
        data = rng.integers(0, 256, size=(4, 3072)).astype(np.uint8)
        labels = rng.integers(0, 10, size=4).tolist()
        batch = {b"batch_label": b"training batch", b"labels": labels, b"data": data}
        (d / f"data_batch_{i}").write_bytes(pickle.dumps(batch, protocol=2))
        all_data.append(data)
        all_labels += labels
    test = {b"labels": [3, 1], b"data": rng.integers(0, 256, size=(2, 3072)).astype(np.uint8)}
    (d / "test_batch").write_bytes(pickle.dumps(test, protocol=2))
    names = [f"class{i}".encode() for i in range(10)]
    (d / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}, protocol=2))
    return d, np.concatenate(all_data), np.array(all_labels)


def test_cifar10_directory_and_single_batch(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    d, data, labels = _cifar10_dir(tmp_path, rng)
    out = D.read_cifar(d)
    assert out.images.shape == (8, 32, 32, 3) and out.images.dtype == np.uint8
    np.testing.assert_array_equal(out.labels, labels)
    # CIFAR layout: 1024 red, then 1024 green, then 1024 blue values, each row-major 32 x 32
    i, r, c = 5, 7, 30
    for ch in range(3):
        assert out.images[i, r, c, ch] == data[i, ch * 1024 + r * 32 + c]
    assert out.label_names[:2] == ("class0", "class1") and len(out) == 8
    test = D.read_cifar(d, split="test")
    assert test.labels.tolist() == [3, 1]
    one = D.read_cifar(d / "data_batch_2")
    np.testing.assert_array_equal(one.labels, labels[4:])


def test_cifar100_fine_and_coarse(tmp_path: Path) -> None:
    d = tmp_path / "cifar-100-python"
    d.mkdir()
    data = np.zeros((3, 3072), dtype=np.uint8)
    train = {b"fine_labels": [99, 0, 42], b"coarse_labels": [19, 0, 7], b"data": data}
    (d / "train").write_bytes(pickle.dumps(train, protocol=2))
    assert D.read_cifar(d).labels.tolist() == [99, 0, 42]
    assert D.read_cifar(d, label="coarse").labels.tolist() == [19, 0, 7]
    with pytest.raises(DatasetNotFoundError):
        D.read_cifar(d, split="test")
    with pytest.raises(ParameterError):
        D.read_cifar(d, label="medium")


class _Evil:
    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.target,))


def test_cifar_reader_refuses_pickles_that_call_code(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps({b"data": _Evil(str(target))}, protocol=2))
    with pytest.raises(SecurityError):
        D.read_cifar(tmp_path / "data_batch_1")
    assert not target.exists()
    (tmp_path / "junk").write_bytes(b"not a pickle")
    with pytest.raises(DataError):
        D.read_cifar(tmp_path / "junk")
    (tmp_path / "shape").write_bytes(
        pickle.dumps({b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]})
    )
    with pytest.raises(DataError, match="3072"):
        D.read_cifar(tmp_path / "shape")


# --------------------------------------------------------------------------- tables


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"a": [1, 2, 3], "b": [0.5, -1.0, 2.0], "c": ["x", "y", "z"]})


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz", "t.tsv", "t.parquet", "t.pq"])
def test_load_table_round_trip(tmp_path: Path, name: str) -> None:
    df = _frame()
    path = tmp_path / name
    if "parquet" in name or name.endswith(".pq"):
        df.to_parquet(path)
    else:
        df.to_csv(path, index=False, sep="\t" if ".tsv" in name else ",")
    out = D.load_table(path)
    assert out["a"].tolist() == [1, 2, 3]
    assert out["b"].tolist() == [0.5, -1.0, 2.0]
    assert out["c"].tolist() == ["x", "y", "z"]


def test_load_table_idx_and_errors(tmp_path: Path) -> None:
    raw = _idx_bytes(np.arange(6, dtype=np.uint8).reshape(2, 3), 0x08, "u1")
    (tmp_path / "img-idx3-ubyte.gz").write_bytes(gzip.compress(raw))
    out = D.load_table(tmp_path / "img-idx3-ubyte.gz")
    assert list(out.columns) == ["pixel_0", "pixel_1", "pixel_2"] and out.shape == (2, 3)
    (tmp_path / "x.xlsx").write_bytes(b"")
    with pytest.raises(ParameterError, match="csv"):
        D.load_table(tmp_path / "x.xlsx")
    with pytest.raises(DatasetNotFoundError):
        D.load_table(tmp_path / "absent.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError):
        D.load_table(tmp_path / "empty.csv")
    (tmp_path / "header.csv").write_text("a,b\n")
    with pytest.raises(DataError, match="no rows"):
        D.read_csv(tmp_path / "header.csv")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 garbage")
    with pytest.raises(DataError):
        D.read_parquet(tmp_path / "bad.parquet")


def test_check_finite_columns_names_the_column() -> None:
    df = _frame()
    assert D.check_finite_columns(df) is df
    bad = df.assign(b=[0.5, np.nan, 1.0])
    with pytest.raises(DataError, match="'b'"):
        D.check_finite_columns(bad)
    with pytest.raises(DataError, match="'a'"):
        D.check_finite_columns(df.assign(a=[1.0, np.inf, 2.0]))
    D.check_finite_columns(bad, ["a"])  # only the named columns are checked
    with pytest.raises(DataError, match="missing column"):
        D.check_finite_columns(df, ["nope"])
    with pytest.raises(DataError, match="not numeric"):
        D.check_finite_columns(df, ["c"])
    nullable = pd.DataFrame({"n": pd.array([1, None, 3], dtype="Int64")})
    with pytest.raises(DataError, match="'n'"):
        D.check_finite_columns(nullable)
