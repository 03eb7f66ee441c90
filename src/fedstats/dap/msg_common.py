"""DAP-09 common types, upload and query messages (aggregation and collection: :mod:`.msg_flow`).

The definitions behind :mod:`fedstats.dap.messages`, which re-exports them and says what every message's
``encode``/``read``/``decode`` guarantee, what the encodings were checked against and how DAP-09 names
the batch modes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Annotated, ClassVar, Self

from fedstats.dap.codec import (
    OPAQUE16,
    OPAQUE32,
    U16,
    U64,
    Field,
    Message,
    Reader,
    Struct,
    decode_all,
    fixed,
    fixed_bytes,
    nested,
    opaque16,
    u8,
    vector16,
)
from fedstats.dap.hpke import HpkeCiphertext
from fedstats.errors import DataError

DAP_VERSION = "dap-09"
QUERY_TIME_INTERVAL = 1
QUERY_FIXED_SIZE = 2
_QUERY_TYPES = (QUERY_TIME_INTERVAL, QUERY_FIXED_SIZE)
REPORT_ID_LEN = 16
TASK_ID_LEN = 32
BATCH_ID_LEN = 32
CHECKSUM_LEN = 32
JOB_ID_LEN = 16


class _ByteEnum(enum.IntEnum):
    """A DAP enum that travels as one byte."""

    def encode(self) -> bytes:
        """One byte."""
        return u8(self.value)

    @classmethod
    def read(cls, r: Reader) -> Self:
        """Decode one byte; DataError on an unknown value."""
        code = r.u8()
        try:
            return cls(code)
        except ValueError:
            raise DataError(f"{r.what}: unknown {cls.__name__} value {code}") from None


class Role(_ByteEnum):
    """``Role`` (DAP-09 §4.1): the sender and recipient bytes of the HPKE info strings."""

    COLLECTOR = 0
    CLIENT = 1
    LEADER = 2
    HELPER = 3


class PrepareError(_ByteEnum):
    """``PrepareError`` (DAP-09 §4.5.1.3): why an aggregator rejected one report."""

    BATCH_COLLECTED = 0
    REPORT_REPLAYED = 1
    REPORT_DROPPED = 2
    HPKE_UNKNOWN_CONFIG_ID = 3
    HPKE_DECRYPT_ERROR = 4
    VDAF_PREP_ERROR = 5
    BATCH_SATURATED = 6
    TASK_EXPIRED = 7
    INVALID_MESSAGE = 8
    REPORT_TOO_EARLY = 9


def _query_type(r: Reader) -> int:
    code = r.u8()
    if code not in _QUERY_TYPES:
        raise DataError(
            f"{r.what}: unknown query type {code}, expected 1 (time_interval) or 2 (fixed_size)"
        )
    return code


def url(value: str) -> bytes:
    """Encode ``Url`` (``opaque url<1..2^16-1>``, ASCII)."""
    data = value.encode("ascii")
    if not data:
        raise DataError("a DAP Url must not be empty")
    return opaque16(data)


def read_url(r: Reader) -> str:
    """Decode ``Url``; DataError when empty or not ASCII."""
    data = r.opaque16()
    if not data or any(b > 0x7F for b in data):
        raise DataError(f"{r.what}: a Url must be 1 to 65535 ASCII bytes")
    return data.decode("ascii")


@dataclass(frozen=True)
class Interval(Struct):
    """``Interval`` (DAP-09 §4.1): ``start`` and ``duration`` in seconds since the epoch, as u64."""

    start: Annotated[int, U64]
    duration: Annotated[int, U64]

    def __post_init__(self) -> None:
        if not (
            0 <= self.start < 1 << 64
            and 0 <= self.duration < 1 << 64
            and self.start + self.duration < 1 << 64
        ):
            raise DataError(
                f"Interval(start={self.start}, duration={self.duration}) overflows a u64 time"
            )

    def contains(self, time: int) -> bool:
        """True if ``start <= time < start + duration``."""
        return self.start <= time < self.start + self.duration


@dataclass(frozen=True)
class Extension(Struct):
    """``Extension`` (DAP-09 §4.4.2): a u16 type and opaque data (unknown types are kept, not refused)."""

    extension_type: Annotated[int, U16]
    extension_data: Annotated[bytes, OPAQUE16]


@dataclass(frozen=True)
class ReportMetadata(Struct):
    """``ReportMetadata`` (DAP-09 §4.4.2): the 16-byte report id and the client's timestamp."""

    report_id: Annotated[bytes, fixed(REPORT_ID_LEN)]
    time: Annotated[int, U64]


@dataclass(frozen=True)
class PlaintextInputShare(Struct):
    """``PlaintextInputShare`` (DAP-09 §4.4.2): extensions and the VDAF input share, before sealing."""

    extensions: Annotated[tuple[Extension, ...], vector16(Extension)]
    payload: Annotated[bytes, OPAQUE32]

    @classmethod
    def decode(cls, data: bytes) -> PlaintextInputShare:
        """Decode strictly; DataError also when one extension type repeats (DAP-09 §4.5.1.4)."""
        share = decode_all(data, "PlaintextInputShare", cls.read)
        types = [e.extension_type for e in share.extensions]
        if len(set(types)) != len(types):
            raise DataError("PlaintextInputShare: an extension type appears twice")
        return share


@dataclass(frozen=True)
class Report(Struct):
    """``Report`` (DAP-09 §4.4.2), media type ``application/dap-report``: what a client uploads."""

    MEDIA_TYPE = "application/dap-report"
    metadata: ReportMetadata
    public_share: Annotated[bytes, OPAQUE32]
    leader_encrypted_input_share: HpkeCiphertext
    helper_encrypted_input_share: HpkeCiphertext


@dataclass(frozen=True)
class InputShareAad(Struct):
    """``InputShareAad`` (DAP-09 §4.4.2): the associated data that binds an input share to its report."""

    task_id: Annotated[bytes, fixed(TASK_ID_LEN)]
    metadata: ReportMetadata
    public_share: Annotated[bytes, OPAQUE32]


@dataclass(frozen=True)
class FixedSizeQuery(Message):
    """``FixedSizeQuery`` (DAP-09 §4.2.1): a batch by id (``batch_id``) or the current batch (None)."""

    batch_id: bytes | None = None

    def encode(self) -> bytes:
        """``by_batch_id`` (0) with the id, or ``current_batch`` (1)."""
        if self.batch_id is None:
            return u8(1)
        return u8(0) + fixed_bytes("batch_id", self.batch_id, BATCH_ID_LEN)

    @classmethod
    def read(cls, r: Reader) -> FixedSizeQuery:
        """Decode from a reader."""
        kind = r.u8()
        if kind == 0:
            return cls(r.take(BATCH_ID_LEN))
        if kind == 1:
            return cls(None)
        raise DataError(f"{r.what}: unknown FixedSizeQueryType {kind}, expected 0 or 1")


@dataclass(frozen=True)
class _IntervalOrFixed(Message):
    """A query type byte, then the batch interval (time-interval) or the fixed-size body.

    A subclass is a dataclass of three fields: ``query_type``, ``batch_interval`` and the fixed-size body,
    which :attr:`_FIXED` names with its codec; :attr:`_KIND` is what error messages call the message.
    """

    _KIND: ClassVar[str]
    _FIXED: ClassVar[tuple[str, Field]]
    query_type: int
    batch_interval: Interval | None

    def __post_init__(self) -> None:
        name = self._FIXED[0]
        ti = self.query_type == QUERY_TIME_INTERVAL
        if (
            self.query_type not in _QUERY_TYPES
            or ti != (self.batch_interval is not None)
            or ti == (getattr(self, name) is not None)
        ):
            raise DataError(
                f"{type(self).__name__}: a time-interval {self._KIND} carries batch_interval, "
                f"a fixed-size one {name}"
            )

    def encode(self) -> bytes:
        """The query type byte, then the interval or the fixed-size body."""
        if self.batch_interval is not None:
            return u8(self.query_type) + self.batch_interval.encode()
        name, body = self._FIXED
        return u8(self.query_type) + body.encoder(name)(getattr(self, name))

    @classmethod
    def read(cls, r: Reader) -> Self:
        """Decode from a reader."""
        qt = _query_type(r)
        if qt == QUERY_TIME_INTERVAL:
            return cls(qt, Interval.read(r))
        return cls(qt, None, cls._FIXED[1].take(r))  # type: ignore[call-arg]


@dataclass(frozen=True)
class Query(_IntervalOrFixed):
    """``Query`` (DAP-09 §4.2.1): a batch interval (time-interval) or a :class:`FixedSizeQuery`."""

    _KIND = "query"
    _FIXED = ("fixed_size_query", nested(FixedSizeQuery))
    query_type: int
    batch_interval: Interval | None = None
    fixed_size_query: FixedSizeQuery | None = None


@dataclass(frozen=True)
class PartialBatchSelector(Message):
    """``PartialBatchSelector`` (DAP-09 §4.5.1.1): nothing for time-interval, the batch id for fixed-size."""

    query_type: int
    batch_id: bytes | None = None

    def __post_init__(self) -> None:
        if self.query_type not in _QUERY_TYPES or (self.query_type == QUERY_FIXED_SIZE) != (
            self.batch_id is not None
        ):
            raise DataError(
                "PartialBatchSelector: a fixed-size selector carries batch_id, a time-interval one none"
            )

    def encode(self) -> bytes:
        """The query type byte, then the batch id for fixed-size."""
        if self.batch_id is None:
            return u8(self.query_type)
        return u8(self.query_type) + fixed_bytes("batch_id", self.batch_id, BATCH_ID_LEN)

    @classmethod
    def read(cls, r: Reader) -> PartialBatchSelector:
        """Decode from a reader."""
        qt = _query_type(r)
        return cls(qt, r.take(BATCH_ID_LEN) if qt == QUERY_FIXED_SIZE else None)


@dataclass(frozen=True)
class BatchSelector(_IntervalOrFixed):
    """``BatchSelector`` (DAP-09 §4.6.1): the batch interval (time-interval) or the batch id (fixed-size)."""

    _KIND = "selector"
    _FIXED = ("batch_id", fixed(BATCH_ID_LEN))
    query_type: int
    batch_interval: Interval | None = None
    batch_id: bytes | None = None
