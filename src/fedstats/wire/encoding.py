"""Canonical JSON for everything that crosses the wire or is hashed: task configs, round parameters, sums.

Round parameters are "plain serializable values" (``fedstats.engine.rounds.Round``) but may hold numpy
arrays and numpy scalars; JSON has neither, nor non-finite floats. The canonical encoding is:

* a numpy array becomes ``{"$ndarray": {"dtype": "<dtype>", "shape": [...], "data": [...flat...]}}`` with
  the data as Python ints or floats (floats print with ``repr``, which round-trips every double exactly);
* a numpy scalar becomes the Python int, float or bool it holds; a tuple becomes a list;
* a non-finite float becomes ``{"$float": "nan" | "inf" | "-inf"}`` (inside arrays too);
* objects are written with sorted keys, no whitespace, UTF-8 (``canonical_bytes``), so equal values have
  equal bytes and :func:`digest` (SHA-256, hex) identifies them.

:func:`decode` inverts :func:`encode` exactly: arrays come back with their dtype and shape.

Examples
--------
>>> import numpy as np
>>> v = {"p": np.array([0.25, 0.75]), "b": 3}
>>> canonical_bytes(v)
b'{"b":3,"p":{"$ndarray":{"data":[0.25,0.75],"dtype":"float64","shape":[2]}}}'
>>> bool((decode(encode(v))["p"] == v["p"]).all())
True
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedstats.errors import DataError

__all__ = [
    "DuplicateKeyError",
    "canonical_bytes",
    "decode",
    "digest",
    "dumps",
    "encode",
    "loads",
    "unique_keys",
]

_ARRAY = "$ndarray"
_FLOAT = "$float"
_ALLOWED_DTYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float32",
        "float64",
        "object",
    }
)


def _float(x: float) -> Any:
    if math.isfinite(x):
        return x
    return {_FLOAT: "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def _item(x: Any) -> Any:
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return _float(x)
    raise DataError(f"cannot encode array element of type {type(x).__name__}")


def encode(value: Any) -> Any:
    """Turn ``value`` into plain JSON values (see the module docstring).

    Raises
    ------
    DataError
        If a value has a type that has no canonical form (sets, arbitrary objects, complex numbers).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _float(float(value))
    if isinstance(value, np.ndarray):
        dtype = str(value.dtype)
        if dtype not in _ALLOWED_DTYPES:
            raise DataError(f"cannot encode arrays of dtype {dtype}")
        data = [
            encode(v) if isinstance(v, (list, dict)) else _item(v) for v in value.ravel().tolist()
        ]
        return {_ARRAY: {"dtype": dtype, "shape": list(value.shape), "data": data}}
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise DataError(f"cannot encode a mapping key of type {type(k).__name__}")
            out[k] = encode(v)
        return out
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    raise DataError(f"cannot encode a value of type {type(value).__name__}")


def _unfloat(x: Any) -> Any:
    if isinstance(x, dict) and set(x) == {_FLOAT}:
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[x[_FLOAT]]
    return x


def decode(value: Any) -> Any:
    """Inverse of :func:`encode`: arrays and non-finite floats come back.

    Raises
    ------
    DataError
        If an array description is malformed (unknown dtype, data not matching the shape).
    """
    if isinstance(value, dict):
        if set(value) == {_FLOAT}:
            if value[_FLOAT] not in ("nan", "inf", "-inf"):
                raise DataError(f"bad float marker {value[_FLOAT]!r}")
            return _unfloat(value)
        if set(value) == {_ARRAY}:
            spec = value[_ARRAY]
            try:
                dtype, shape, data = (
                    str(spec["dtype"]),
                    [int(s) for s in spec["shape"]],
                    spec["data"],
                )
            except (KeyError, TypeError, ValueError):
                raise DataError("malformed array: needs dtype, shape and data") from None
            if dtype not in _ALLOWED_DTYPES or not isinstance(data, list):
                raise DataError(f"malformed array of dtype {dtype!r}")
            if any(s < 0 for s in shape) or math.prod(shape) != len(data):
                raise DataError(f"array data of length {len(data)} does not fill shape {shape}")
            flat = [_unfloat(d) for d in data]
            if dtype == "object":
                arr = np.empty(len(flat), dtype=object)
                arr[:] = flat
            else:
                try:
                    arr = np.asarray(flat, dtype=dtype)
                except (TypeError, ValueError, OverflowError):
                    raise DataError(f"array data does not fit dtype {dtype}") from None
            return arr.reshape(shape)
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


_FLAT_TYPES = (str, int, float, bool, type(None))


def canonical_bytes(value: Any) -> bytes:
    """The canonical UTF-8 JSON bytes of ``value`` (sorted keys, no whitespace).

    A flat object (a ``dict`` of string keys and values of exactly ``str``, ``int``, ``float``,
    ``bool`` or ``None``, or lists of exactly ``int``: a certificate's body, a report) is its own
    :func:`encode`: it is serialized without the encoder's walk (the same bytes; a non-finite float
    still takes the encoder's marker).
    """
    if type(value) is dict and all(
        type(k) is str
        and (type(v) in _FLAT_TYPES or (type(v) is list and all(type(x) is int for x in v)))
        for k, v in value.items()
    ):
        try:
            return json.dumps(
                value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
            ).encode()
        except ValueError:  # a non-finite float: the encoder's marker below
            pass
    return json.dumps(
        encode(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def digest(value: Any) -> str:
    """SHA-256 (hex) of :func:`canonical_bytes` of ``value``."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


def dumps(value: Any) -> str:
    """Canonical JSON text of ``value``."""
    return canonical_bytes(value).decode()


def loads(text: str | bytes) -> Any:
    """Parse canonical JSON and :func:`decode` it.

    Raises
    ------
    DataError
        If the text is not JSON or holds a malformed array.
    """
    try:
        raw = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"not valid JSON: {exc}") from None
    return decode(raw)


class DuplicateKeyError(ValueError):
    """A JSON object names a key twice (:func:`unique_keys`)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads` that refuses a key given twice.

    ``json.loads`` keeps the last of two equal keys silently: ``{"epsilon": 1, "epsilon": 9}`` would
    read as epsilon 9 while a reviewer (or another parser) sees 1. Used by the CLI's task reader and the
    server's JSON bodies.

    Raises
    ------
    DuplicateKeyError
        Naming the first key given twice.

    Examples
    --------
    >>> json.loads('{"a": 1, "b": 2}', object_pairs_hook=unique_keys)
    {'a': 1, 'b': 2}
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(f"duplicate key {key[:64]!r} (each key may appear once)")
        out[key] = value
    return out
