"""DAP-09 aggregation and collection messages (see :mod:`fedstats.dap.messages`, which re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass

from fedstats.dap.codec import Message, Reader, decode_all, opaque32, u8, u16, u64, vec32
from fedstats.dap.hpke import HpkeCiphertext
from fedstats.dap.msg_common import (
    CHECKSUM_LEN,
    REPORT_ID_LEN,
    TASK_ID_LEN,
    BatchSelector,
    Interval,
    PartialBatchSelector,
    PrepareError,
    Query,
    ReportMetadata,
    _fixed,
)
from fedstats.errors import DataError


@dataclass(frozen=True)
class CollectionReq(Message):
    """``CollectionReq`` (DAP-09 §4.6.1), media type ``application/dap-collect-req``."""

    MEDIA_TYPE = "application/dap-collect-req"
    query: Query
    aggregation_parameter: bytes = b""

    def encode(self) -> bytes:
        """Encode as ``Query; opaque agg_param<0..2^32-1>``."""
        return self.query.encode() + opaque32(self.aggregation_parameter)

    @classmethod
    def read(cls, r: Reader) -> CollectionReq:
        """Decode from a reader."""
        return cls(Query.read(r), r.opaque32())


@dataclass(frozen=True)
class Collection(Message):
    """``Collection`` (DAP-09 §4.6.1), media type ``application/dap-collection``: the collector's result."""

    MEDIA_TYPE = "application/dap-collection"
    partial_batch_selector: PartialBatchSelector
    report_count: int
    interval: Interval
    leader_encrypted_agg_share: HpkeCiphertext
    helper_encrypted_agg_share: HpkeCiphertext

    def encode(self) -> bytes:
        """Encode in field order (u64 report count)."""
        return (
            self.partial_batch_selector.encode()
            + u64(self.report_count)
            + self.interval.encode()
            + self.leader_encrypted_agg_share.encode()
            + self.helper_encrypted_agg_share.encode()
        )

    @classmethod
    def read(cls, r: Reader) -> Collection:
        """Decode from a reader."""
        return cls(
            PartialBatchSelector.read(r),
            r.u64(),
            Interval.read(r),
            HpkeCiphertext.read(r),
            HpkeCiphertext.read(r),
        )


@dataclass(frozen=True)
class AggregateShareAad(Message):
    """``AggregateShareAad`` (DAP-09 §4.6.4): associated data of a sealed aggregate share."""

    task_id: bytes
    aggregation_parameter: bytes
    batch_selector: BatchSelector

    def encode(self) -> bytes:
        """Encode as ``TaskID; opaque agg_param<0..2^32-1>; BatchSelector``."""
        return (
            _fixed("task_id", self.task_id, TASK_ID_LEN)
            + opaque32(self.aggregation_parameter)
            + self.batch_selector.encode()
        )

    @classmethod
    def read(cls, r: Reader) -> AggregateShareAad:
        """Decode from a reader."""
        return cls(r.take(TASK_ID_LEN), r.opaque32(), BatchSelector.read(r))


@dataclass(frozen=True)
class ReportShare(Message):
    """``ReportShare`` (DAP-09 §4.5.1.1): one aggregator's part of a report."""

    metadata: ReportMetadata
    public_share: bytes
    encrypted_input_share: HpkeCiphertext

    def encode(self) -> bytes:
        """Encode in field order."""
        return (
            self.metadata.encode()
            + opaque32(self.public_share)
            + self.encrypted_input_share.encode()
        )

    @classmethod
    def read(cls, r: Reader) -> ReportShare:
        """Decode from a reader."""
        return cls(ReportMetadata.read(r), r.opaque32(), HpkeCiphertext.read(r))


@dataclass(frozen=True)
class PingPongMessage(Message):
    """VDAF ping-pong message (VDAF-08 §5.8): ``initialize`` (0), ``continue`` (1) or ``finish`` (2).

    ``initialize`` carries a prep share, ``finish`` a prep message, ``continue`` both.
    """

    INITIALIZE = 0
    CONTINUE = 1
    FINISH = 2
    type: int
    prep_msg: bytes | None = None
    prep_share: bytes | None = None

    def __post_init__(self) -> None:
        want = {0: (False, True), 1: (True, True), 2: (True, False)}.get(self.type)
        if want is None or want != (self.prep_msg is not None, self.prep_share is not None):
            raise DataError(f"PingPongMessage of type {self.type}: wrong fields for that type")

    def encode(self) -> bytes:
        """The type byte, then ``prep_msg`` and/or ``prep_share`` as ``opaque<0..2^32-1>``."""
        out = u8(self.type)
        if self.prep_msg is not None:
            out += opaque32(self.prep_msg)
        if self.prep_share is not None:
            out += opaque32(self.prep_share)
        return out

    @classmethod
    def read(cls, r: Reader) -> PingPongMessage:
        """Decode from a reader."""
        kind = r.u8()
        if kind == cls.INITIALIZE:
            return cls(kind, prep_share=r.opaque32())
        if kind == cls.CONTINUE:
            return cls(kind, prep_msg=r.opaque32(), prep_share=r.opaque32())
        if kind == cls.FINISH:
            return cls(kind, prep_msg=r.opaque32())
        raise DataError(f"{r.what}: unknown ping-pong message type {kind}")


def _read_ping_pong(r: Reader) -> PingPongMessage:
    return decode_all(r.opaque32(), r.what, PingPongMessage.read)


@dataclass(frozen=True)
class PrepareInit(Message):
    """``PrepareInit`` (DAP-09 §4.5.1.1): a report share and the leader's first ping-pong message."""

    report_share: ReportShare
    message: PingPongMessage

    def encode(self) -> bytes:
        """Encode as ``ReportShare; opaque message<0..2^32-1>``."""
        return self.report_share.encode() + opaque32(self.message.encode())

    @classmethod
    def read(cls, r: Reader) -> PrepareInit:
        """Decode from a reader."""
        return cls(ReportShare.read(r), _read_ping_pong(r))


@dataclass(frozen=True)
class PrepareResp(Message):
    """``PrepareResp`` (DAP-09 §4.5.1.2): one report's result of a preparation step.

    ``continue`` (0) with a message, ``finished`` (1) or ``reject`` (2) with a :class:`PrepareError`.
    """

    CONTINUE = 0
    FINISHED = 1
    REJECT = 2
    report_id: bytes
    result: int
    message: PingPongMessage | None = None
    error: PrepareError | None = None

    def __post_init__(self) -> None:
        ok = (
            (self.result == 0 and self.message is not None and self.error is None)
            or (self.result == 1 and self.message is None and self.error is None)
            or (self.result == 2 and self.message is None and self.error is not None)
        )
        if not ok:
            raise DataError(f"PrepareResp with result {self.result}: wrong fields for that result")

    def encode(self) -> bytes:
        """Encode as ``ReportID; PrepareStepResult``."""
        out = _fixed("report_id", self.report_id, REPORT_ID_LEN) + u8(self.result)
        if self.message is not None:
            out += opaque32(self.message.encode())
        if self.error is not None:
            out += self.error.encode()
        return out

    @classmethod
    def read(cls, r: Reader) -> PrepareResp:
        """Decode from a reader."""
        rid, result = r.take(REPORT_ID_LEN), r.u8()
        if result == cls.CONTINUE:
            return cls(rid, result, message=_read_ping_pong(r))
        if result == cls.FINISHED:
            return cls(rid, result)
        if result == cls.REJECT:
            return cls(rid, result, error=PrepareError.read(r))
        raise DataError(f"{r.what}: unknown PrepareStepResult {result}")


@dataclass(frozen=True)
class PrepareContinue(Message):
    """``PrepareContinue`` (DAP-09 §4.5.2.1): the leader's next ping-pong message for one report."""

    report_id: bytes
    message: PingPongMessage

    def encode(self) -> bytes:
        """Encode as ``ReportID; opaque message<0..2^32-1>``."""
        return _fixed("report_id", self.report_id, REPORT_ID_LEN) + opaque32(self.message.encode())

    @classmethod
    def read(cls, r: Reader) -> PrepareContinue:
        """Decode from a reader."""
        return cls(r.take(REPORT_ID_LEN), _read_ping_pong(r))


@dataclass(frozen=True)
class AggregationJobInitReq(Message):
    """``AggregationJobInitReq`` (DAP-09 §4.5.1.1), media type ``application/dap-aggregation-job-init-req``."""

    MEDIA_TYPE = "application/dap-aggregation-job-init-req"
    aggregation_parameter: bytes
    partial_batch_selector: PartialBatchSelector
    prepare_inits: tuple[PrepareInit, ...]

    def encode(self) -> bytes:
        """Encode as ``opaque agg_param<0..2^32-1>; PartialBatchSelector; PrepareInit inits<0..2^32-1>``."""
        return (
            opaque32(self.aggregation_parameter)
            + self.partial_batch_selector.encode()
            + vec32(p.encode() for p in self.prepare_inits)
        )

    @classmethod
    def read(cls, r: Reader) -> AggregationJobInitReq:
        """Decode from a reader."""
        return cls(r.opaque32(), PartialBatchSelector.read(r), tuple(r.vec32(PrepareInit.read)))


@dataclass(frozen=True)
class AggregationJobContinueReq(Message):
    """``AggregationJobContinueReq`` (DAP-09 §4.5.2.1), ``application/dap-aggregation-job-continue-req``."""

    MEDIA_TYPE = "application/dap-aggregation-job-continue-req"
    step: int
    prepare_continues: tuple[PrepareContinue, ...]

    def encode(self) -> bytes:
        """Encode as ``u16 step; PrepareContinue continues<0..2^32-1>``."""
        return u16(self.step) + vec32(p.encode() for p in self.prepare_continues)

    @classmethod
    def read(cls, r: Reader) -> AggregationJobContinueReq:
        """Decode from a reader."""
        return cls(r.u16(), tuple(r.vec32(PrepareContinue.read)))


@dataclass(frozen=True)
class AggregationJobResp(Message):
    """``AggregationJobResp`` (DAP-09 §4.5.1.2), media type ``application/dap-aggregation-job-resp``."""

    MEDIA_TYPE = "application/dap-aggregation-job-resp"
    prepare_resps: tuple[PrepareResp, ...]

    def encode(self) -> bytes:
        """Encode as ``PrepareResp resps<0..2^32-1>``."""
        return vec32(p.encode() for p in self.prepare_resps)

    @classmethod
    def read(cls, r: Reader) -> AggregationJobResp:
        """Decode from a reader."""
        return cls(tuple(r.vec32(PrepareResp.read)))


@dataclass(frozen=True)
class AggregateShareReq(Message):
    """``AggregateShareReq`` (DAP-09 §4.6.3), media type ``application/dap-aggregate-share-req``.

    ``checksum`` is the XOR of the SHA-256 of every report id in the batch (32 bytes).
    """

    MEDIA_TYPE = "application/dap-aggregate-share-req"
    batch_selector: BatchSelector
    aggregation_parameter: bytes
    report_count: int
    checksum: bytes

    def encode(self) -> bytes:
        """Encode in field order (u64 report count, 32-byte checksum)."""
        return (
            self.batch_selector.encode()
            + opaque32(self.aggregation_parameter)
            + u64(self.report_count)
            + _fixed("checksum", self.checksum, CHECKSUM_LEN)
        )

    @classmethod
    def read(cls, r: Reader) -> AggregateShareReq:
        """Decode from a reader."""
        return cls(BatchSelector.read(r), r.opaque32(), r.u64(), r.take(CHECKSUM_LEN))


@dataclass(frozen=True)
class AggregateShare(Message):
    """``AggregateShare`` (DAP-09 §4.6.3), media type ``application/dap-aggregate-share``."""

    MEDIA_TYPE = "application/dap-aggregate-share"
    encrypted_aggregate_share: HpkeCiphertext

    def encode(self) -> bytes:
        """Encode the ciphertext."""
        return self.encrypted_aggregate_share.encode()

    @classmethod
    def read(cls, r: Reader) -> AggregateShare:
        """Decode from a reader."""
        return cls(HpkeCiphertext.read(r))
