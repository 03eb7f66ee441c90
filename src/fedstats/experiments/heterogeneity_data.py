"""Image data for the heterogeneity analyses: embedded digits, IDX (Fashion-MNIST), CIFAR pickles, CSV, Parquet.

Every loader returns ``(vectors (n, d) float64 in [0, 1], labels (n,) int64 or None, name)``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedstats.datasets import (
    label_ratio_sample,
    load_digits,
    parse_label_ratios,
    read_cifar,
    read_csv,
    read_idx,
    read_parquet,
)
from fedstats.errors import DataError, DatasetNotFoundError
from fedstats.randomness import RNG

__all__ = ["load_image_vectors", "sample_by_label_ratio"]


def _idx_labels_path(images: Path) -> Path | None:
    name = images.name.replace("images-idx3", "labels-idx1").replace("images.idx3", "labels.idx1")
    cand = images.with_name(name)
    return cand if cand != images and cand.exists() else None


def load_image_vectors(
    data: str, *, pixel_max: float | None = None
) -> tuple[np.ndarray, np.ndarray | None, str]:
    """Load images as flattened vectors in [0, 1] with their labels.

    Parameters
    ----------
    data : str
        ``"digits"`` (scikit-learn's 1797 8x8 digits, embedded); an IDX images file
        (``*-images-idx3-ubyte[.gz]``, labels read from the matching ``*-labels-idx1-ubyte`` beside it); a
        CIFAR-10/100 python batch file or extracted directory (CIFAR-100: the 20 coarse labels merged
        into 10 buckets ``label // 2``, as paper 000 does); or a CSV or Parquet (``.parquet``, ``.pq``)
        file (one image per row; a column named ``label`` is used as the labels).
    pixel_max : float, optional
        Divide the pixels by this (default 255 for IDX and CIFAR, 1 for CSV and Parquet).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray or None, str)
        Vectors ``(n, d)`` float64, labels ``(n,)`` int64 or None, and a display name.

    Raises
    ------
    DatasetNotFoundError
        If the path does not exist.
    DataError
        If the file cannot be read as images.
    """
    if data == "digits":
        x, y = load_digits()
        return x, y.astype(np.int64), "digits"
    path = Path(data)
    if not path.exists():
        raise DatasetNotFoundError(
            f"{data}: no such file or directory (use 'digits', an IDX images file, a CIFAR batch, a CSV "
            "or a Parquet file)"
        )
    name = path.name
    if path.is_dir() or name.startswith(("data_batch", "test_batch")) or name in ("train", "test"):
        labels: np.ndarray | None
        cif = read_cifar(path, split="train", label="coarse")
        x = cif.images.reshape(len(cif), -1).astype(np.float64) / (pixel_max or 255.0)
        labels = cif.labels.astype(np.int64)
        if labels.max() >= 10:  # CIFAR-100 coarse: 20 labels -> 10 buckets (paper 000, Sec. 5.1)
            labels = labels // 2
        return x, labels, name
    if "idx" in name or name.endswith("ubyte") or name.endswith("ubyte.gz"):
        imgs = read_idx(path)
        if imgs.ndim < 2:
            raise DataError(f"{path}: an IDX label file; give the images file (idx3)")
        x = imgs.reshape(imgs.shape[0], -1).astype(np.float64) / (pixel_max or 255.0)
        lp = _idx_labels_path(path)
        labels = read_idx(lp).astype(np.int64) if lp is not None else None
        if labels is not None and labels.shape[0] != x.shape[0]:
            raise DataError(f"{lp}: {labels.shape[0]} labels for {x.shape[0]} images")
        return x, labels, name
    df = read_parquet(path) if path.suffix.lower() in (".parquet", ".pq") else read_csv(path)
    labels = None
    if "label" in df.columns:
        labels = df.pop("label").to_numpy(dtype=np.int64)
    try:
        x = df.to_numpy(dtype=np.float64) / (pixel_max or 1.0)
    except ValueError as exc:
        raise DataError(f"{path}: every column except 'label' must be numeric") from exc
    return x, labels, name


def sample_by_label_ratio(
    labels: np.ndarray, ratios: str, *, fraction: float | None, rng: RNG
) -> np.ndarray:
    """Rows of a stratified sample whose label counts follow ``ratios`` (paper 000, Sec. 5.2).

    The k ratios apply to the labels ``0 .. k-1`` (the paper's "5 labels" cases use the first five). With
    ``fraction=None`` the sample is the largest one the data allows (each label has enough rows).

    Parameters
    ----------
    labels : numpy.ndarray of int, shape (n,)
        One label per row.
    ratios : str
        Colon-separated ratios, e.g. ``"91:1:1:1:1:1:1:1:1:1"``.
    fraction : float or None
        Sample size as a fraction of the rows, in (0, 1]; None: the largest sample the ratio allows.
    rng : RNG
        Randomness of the sample (a public, server-side choice).

    Returns
    -------
    numpy.ndarray
        int64 row indices of the sample.

    Raises
    ------
    DataError
        If there are no labels, or a label has too few rows.
    """
    r = parse_label_ratios(ratios)
    uniq, counts = np.unique(labels, return_counts=True)
    if r.size > uniq.size:
        raise DataError(f"the ratio {ratios!r} has {r.size} labels but the data has {uniq.size}")
    order = uniq[: r.size]
    share = r / r.sum()
    if fraction is None:
        avail = counts[: r.size]
        with np.errstate(divide="ignore"):
            cap = np.where(share > 0, avail / np.where(share > 0, share, 1.0), np.inf)
        size = int(np.floor(cap.min()))
        return label_ratio_sample(
            labels, r.tolist(), size=size, label_order=order.tolist(), rng=rng
        )
    size = max(1, round(fraction * labels.shape[0]))
    return label_ratio_sample(labels, r.tolist(), size=size, label_order=order.tolist(), rng=rng)
