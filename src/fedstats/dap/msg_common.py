"""DAP-09 common types, upload and query messages (aggregation and collection: :mod:`.msg_flow`).

The definitions behind :mod:`fedstats.dap.messages`, which re-exports them and says what every message's
``encode``/``read``/``decode`` guarantee, what the encodings were checked against and how DAP-09 names
the batch modes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeVar

from fedstats.dap.codec import Message, Reader, decode_all, opaque16, opaque32, u8, u16, u64, vec16
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


class Role(enum.IntEnum):
    """``Role`` (DAP-09 §4.1): the sender and recipient bytes of the HPKE info strings."""

    COLLECTOR = 0
    CLIENT = 1
    LEADER = 2
    HELPER = 3

    def encode(self) -> bytes:
        """One byte."""
        return u8(self.value)

    @classmethod
    def read(cls, r: Reader) -> Role:
        """Decode one byte; DataError on an unknown role."""
        return _enum(cls, r.u8(), r)


class PrepareError(enum.IntEnum):
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

    def encode(self) -> bytes:
        """One byte."""
        return u8(self.value)

    @classmethod
    def read(cls, r: Reader) -> PrepareError:
        """Decode one byte; DataError on an unknown value."""
        return _enum(cls, r.u8(), r)


E = TypeVar("E", bound=enum.IntEnum)


def _enum(cls: type[E], value: int, r: Reader) -> E:
    try:
        return cls(value)
    except ValueError:
        raise DataError(f"{r.what}: unknown {cls.__name__} value {value}") from None


def _fixed(name: str, value: bytes, size: int) -> bytes:
    if not isinstance(value, bytes) or len(value) != size:
        raise DataError(f"{name} must be {size} bytes, got {value!r:.60}")
    return value


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
class Interval(Message):
    """``Interval`` (DAP-09 §4.1): ``start`` and ``duration`` in seconds since the epoch, as u64."""

    start: int
    duration: int

    def __post_init__(self) -> None:
        if not (
            0 <= self.start < 1 << 64
            and 0 <= self.duration < 1 << 64
            and self.start + self.duration < 1 << 64
        ):
            raise DataError(
                f"Interval(start={self.start}, duration={self.duration}) overflows a u64 time"
            )

    def encode(self) -> bytes:
        """Encode as two u64."""
        return u64(self.start) + u64(self.duration)

    @classmethod
    def read(cls, r: Reader) -> Interval:
        """Decode two u64."""
        return cls(r.u64(), r.u64())

    def contains(self, time: int) -> bool:
        """True if ``start <= time < start + duration``."""
        return self.start <= time < self.start + self.duration


@dataclass(frozen=True)
class Extension(Message):
    """``Extension`` (DAP-09 §4.4.2): a u16 type and opaque data (unknown types are kept, not refused)."""

    extension_type: int
    extension_data: bytes

    def encode(self) -> bytes:
        """Encode as ``u16 type; opaque data<0..2^16-1>``."""
        return u16(self.extension_type) + opaque16(self.extension_data)

    @classmethod
    def read(cls, r: Reader) -> Extension:
        """Decode from a reader."""
        return cls(r.u16(), r.opaque16())


@dataclass(frozen=True)
class ReportMetadata(Message):
    """``ReportMetadata`` (DAP-09 §4.4.2): the 16-byte report id and the client's timestamp."""

    report_id: bytes
    time: int

    def encode(self) -> bytes:
        """Encode as ``ReportID id; Time time``."""
        return _fixed("report_id", self.report_id, REPORT_ID_LEN) + u64(self.time)

    @classmethod
    def read(cls, r: Reader) -> ReportMetadata:
        """Decode from a reader."""
        return cls(r.take(REPORT_ID_LEN), r.u64())


@dataclass(frozen=True)
class PlaintextInputShare:
    """``PlaintextInputShare`` (DAP-09 §4.4.2): extensions and the VDAF input share, before sealing."""

    extensions: tuple[Extension, ...]
    payload: bytes

    def encode(self) -> bytes:
        """Encode as ``Extension extensions<0..2^16-1>; opaque payload<0..2^32-1>``."""
        return vec16(e.encode() for e in self.extensions) + opaque32(self.payload)

    @classmethod
    def read(cls, r: Reader) -> PlaintextInputShare:
        """Decode from a reader."""
        return cls(tuple(r.vec16(Extension.read)), r.opaque32())

    @classmethod
    def decode(cls, data: bytes) -> PlaintextInputShare:
        """Decode strictly; DataError also when one extension type repeats (DAP-09 §4.5.1.4)."""
        share = decode_all(data, "PlaintextInputShare", cls.read)
        types = [e.extension_type for e in share.extensions]
        if len(set(types)) != len(types):
            raise DataError("PlaintextInputShare: an extension type appears twice")
        return share


@dataclass(frozen=True)
class Report(Message):
    """``Report`` (DAP-09 §4.4.2), media type ``application/dap-report``: what a client uploads."""

    MEDIA_TYPE = "application/dap-report"
    metadata: ReportMetadata
    public_share: bytes
    leader_encrypted_input_share: HpkeCiphertext
    helper_encrypted_input_share: HpkeCiphertext

    def encode(self) -> bytes:
        """Encode as metadata, ``opaque public_share<0..2^32-1>`` and the two ciphertexts."""
        return (
            self.metadata.encode()
            + opaque32(self.public_share)
            + self.leader_encrypted_input_share.encode()
            + self.helper_encrypted_input_share.encode()
        )

    @classmethod
    def read(cls, r: Reader) -> Report:
        """Decode from a reader."""
        return cls(
            ReportMetadata.read(r), r.opaque32(), HpkeCiphertext.read(r), HpkeCiphertext.read(r)
        )


@dataclass(frozen=True)
class InputShareAad(Message):
    """``InputShareAad`` (DAP-09 §4.4.2): the associated data that binds an input share to its report."""

    task_id: bytes
    metadata: ReportMetadata
    public_share: bytes

    def encode(self) -> bytes:
        """Encode as ``TaskID; ReportMetadata; opaque public_share<0..2^32-1>``."""
        return (
            _fixed("task_id", self.task_id, TASK_ID_LEN)
            + self.metadata.encode()
            + opaque32(self.public_share)
        )

    @classmethod
    def read(cls, r: Reader) -> InputShareAad:
        """Decode from a reader."""
        return cls(r.take(TASK_ID_LEN), ReportMetadata.read(r), r.opaque32())


@dataclass(frozen=True)
class FixedSizeQuery(Message):
    """``FixedSizeQuery`` (DAP-09 §4.2.1): a batch by id (``batch_id``) or the current batch (None)."""

    batch_id: bytes | None = None

    def encode(self) -> bytes:
        """``by_batch_id`` (0) with the id, or ``current_batch`` (1)."""
        if self.batch_id is None:
            return u8(1)
        return u8(0) + _fixed("batch_id", self.batch_id, BATCH_ID_LEN)

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
class Query(Message):
    """``Query`` (DAP-09 §4.2.1): a batch interval (time-interval) or a :class:`FixedSizeQuery`."""

    query_type: int
    batch_interval: Interval | None = None
    fixed_size_query: FixedSizeQuery | None = None

    def __post_init__(self) -> None:
        ti = self.query_type == QUERY_TIME_INTERVAL
        if (
            self.query_type not in _QUERY_TYPES
            or ti != (self.batch_interval is not None)
            or ti == (self.fixed_size_query is not None)
        ):
            raise DataError(
                "Query: a time-interval query carries batch_interval, a fixed-size one fixed_size_query"
            )

    def encode(self) -> bytes:
        """The query type byte, then its body."""
        body = self.batch_interval if self.batch_interval is not None else self.fixed_size_query
        assert body is not None
        return u8(self.query_type) + body.encode()

    @classmethod
    def read(cls, r: Reader) -> Query:
        """Decode from a reader."""
        qt = _query_type(r)
        if qt == QUERY_TIME_INTERVAL:
            return cls(qt, batch_interval=Interval.read(r))
        return cls(qt, fixed_size_query=FixedSizeQuery.read(r))


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
        return u8(self.query_type) + _fixed("batch_id", self.batch_id, BATCH_ID_LEN)

    @classmethod
    def read(cls, r: Reader) -> PartialBatchSelector:
        """Decode from a reader."""
        qt = _query_type(r)
        return cls(qt, r.take(BATCH_ID_LEN) if qt == QUERY_FIXED_SIZE else None)


@dataclass(frozen=True)
class BatchSelector(Message):
    """``BatchSelector`` (DAP-09 §4.6.1): the batch interval (time-interval) or the batch id (fixed-size)."""

    query_type: int
    batch_interval: Interval | None = None
    batch_id: bytes | None = None

    def __post_init__(self) -> None:
        ti = self.query_type == QUERY_TIME_INTERVAL
        if (
            self.query_type not in _QUERY_TYPES
            or ti != (self.batch_interval is not None)
            or ti == (self.batch_id is not None)
        ):
            raise DataError(
                "BatchSelector: a time-interval selector carries batch_interval, a fixed-size one batch_id"
            )

    def encode(self) -> bytes:
        """The query type byte, then the interval or the batch id."""
        if self.batch_interval is not None:
            return u8(self.query_type) + self.batch_interval.encode()
        assert self.batch_id is not None
        return u8(self.query_type) + _fixed("batch_id", self.batch_id, BATCH_ID_LEN)

    @classmethod
    def read(cls, r: Reader) -> BatchSelector:
        """Decode from a reader."""
        qt = _query_type(r)
        if qt == QUERY_TIME_INTERVAL:
            return cls(qt, batch_interval=Interval.read(r))
        return cls(qt, batch_id=r.take(BATCH_ID_LEN))
