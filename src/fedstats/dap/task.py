"""A DAP-09 task's parameters and the derivations every role shares (ids, HPKE info strings, checksums).

A DAP task is what the leader, the helper, the clients and the collector agree on out of band (DAP-09
§4.2): the task id (32 bytes, base64url without padding in URLs), the two aggregators' URLs, the query
type, the VDAF, the time precision, the minimum batch size and the collector's HPKE configuration. The
VDAF here is Prio3 of VDAF draft 20, whose functions take an application context; DAP-09 predates it
(it names VDAF-08, without a context), so fedstats binds each report to its task with
``ctx = b"dap-09" || task_id`` (:func:`vdaf_ctx`), as later DAP drafts do with their own prefix.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any

from fedstats.dap.messages import DAP_VERSION, Role
from fedstats.errors import DataError, ParameterError
from fedstats.vdaf import Prio3, Prio3Count, Prio3Histogram, Prio3Sum, Prio3SumVec

__all__ = [
    "AUTH_HEADER",
    "FEDSTATS_TASK_EXTENSION",
    "agg_share_info",
    "b64decode",
    "b64decode_bytes",
    "b64encode",
    "input_share_info",
    "report_id_checksum",
    "vdaf_ctx",
    "vdaf_from_interop",
    "vdaf_spec_from_interop",
]

AUTH_HEADER = (
    "DAP-Auth-Token"  # DAP-09 §3.1's token header (Janus also accepts "Authorization: Bearer")
)
FEDSTATS_TASK_EXTENSION = 0xFF17
"""Report extension type carrying fedstats' analyst-signed task (a private-use code next to taskprov's
0xFF00): a fedstats device puts the task's signed envelope id in it so that the aggregators can check that
the device derived its VDAF from the task the analyst signed."""


def b64encode(data: bytes) -> str:
    """Base64url without padding, as DAP's URLs carry ids."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64decode(text: str, name: str, size: int) -> bytes:
    """Decode a base64url id of ``size`` bytes; DataError naming ``name`` otherwise."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != size or b64encode(raw) != text:
        raise DataError(
            f"{name}={text!r:.80} is invalid: expected {size} bytes in unpadded base64url"
        )
    return raw


def b64decode_bytes(text: str, name: str) -> bytes:
    """Decode unpadded base64url of any length; DataError naming ``name`` otherwise."""
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise DataError(f"{name}: not unpadded base64url") from None


def vdaf_ctx(task_id: bytes) -> bytes:
    """The VDAF-20 application context of a DAP-09 task: ``b"dap-09" || task_id``."""
    return DAP_VERSION.encode() + task_id


def input_share_info(recipient: Role) -> bytes:
    """HPKE info of an input share (DAP-09 §4.4.2): ``"dap-09 input share" || client || recipient``."""
    return b"dap-09 input share" + Role.CLIENT.encode() + recipient.encode()


def agg_share_info(sender: Role) -> bytes:
    """HPKE info of an aggregate share (DAP-09 §4.6.4): ``"dap-09 aggregate share" || sender || collector``."""
    return b"dap-09 aggregate share" + sender.encode() + Role.COLLECTOR.encode()


def report_id_checksum(report_ids: list[bytes]) -> bytes:
    """The batch checksum (DAP-09 §4.5.1.1): XOR of ``SHA-256(report_id)`` over the batch's reports."""
    acc = 0
    for rid in report_ids:
        acc ^= int.from_bytes(hashlib.sha256(rid).digest(), "big")
    return acc.to_bytes(32, "big")


def vdaf_spec_from_interop(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Fedstats' VDAF description of an interop ``vdaf`` object (``{"type": "Prio3Sum", "bits": "8"}``).

    Numbers may be JSON numbers or decimal strings, as the interop test design sends them. Prio3Sum's
    ``bits`` (VDAF-08) becomes ``max_measurement = 2^bits - 1`` (VDAF-20).

    Raises
    ------
    ParameterError
        If the type is not Prio3Count, Prio3Sum, Prio3SumVec or Prio3Histogram, or a number is malformed.
    """

    def num(key: str) -> int:
        v = obj.get(key)
        try:
            return int(str(v))
        except ValueError:
            raise ParameterError(
                f"vdaf.{key}", v, "an integer (number or decimal string)"
            ) from None

    kind = obj.get("type")
    if kind == "Prio3Count":
        return {"type": "count"}
    if kind == "Prio3Sum":
        return {"type": "sum", "max_measurement": 2 ** num("bits") - 1}
    if kind == "Prio3SumVec":
        return {
            "type": "sumvec",
            "length": num("length"),
            "max_measurement": 2 ** num("bits") - 1,
            "chunk_length": num("chunk_length"),
        }
    if kind == "Prio3Histogram":
        return {"type": "histogram", "length": num("length"), "chunk_length": num("chunk_length")}
    raise ParameterError(
        "vdaf.type", kind, "one of Prio3Count, Prio3Sum, Prio3SumVec, Prio3Histogram"
    )


_PRIO3: dict[str, Any] = {
    "count": Prio3Count,
    "sum": Prio3Sum,
    "sumvec": Prio3SumVec,
    "histogram": Prio3Histogram,
}


def vdaf_from_interop(obj: Mapping[str, Any]) -> Prio3:
    """The Prio3 (two aggregators) of an interop ``vdaf`` object, e.g. ``{"type": "Prio3Count"}``.

    Raises
    ------
    ParameterError
        If the object is not one of :func:`vdaf_spec_from_interop`'s or its parameters are out of range.
    """
    if not isinstance(obj, Mapping):
        raise ParameterError("vdaf", obj, 'an object such as {"type": "Prio3Count"}')
    spec = vdaf_spec_from_interop(obj)
    return _PRIO3[spec.pop("type")](**spec)  # type: ignore[no-any-return]
