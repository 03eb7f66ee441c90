"""DAP-09 aggregation and collection messages (see :mod:`fedstats.dap.messages`, which re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fedstats.dap.codec import (
    OPAQUE32,
    U16,
    U64,
    Message,
    Reader,
    Struct,
    fixed,
    fixed_bytes,
    opaque32,
    u8,
    vector32,
    wrapped32,
)
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
)
from fedstats.errors import DataError


@dataclass(frozen=True)
class CollectionReq(Struct):
    """``CollectionReq`` (DAP-09 §4.6.1), media type ``application/dap-collect-req``."""

    MEDIA_TYPE = "application/dap-collect-req"
    query: Query
    aggregation_parameter: Annotated[bytes, OPAQUE32] = b""


@dataclass(frozen=True)
class Collection(Struct):
    """``Collection`` (DAP-09 §4.6.1), media type ``application/dap-collection``: the collector's result."""

    MEDIA_TYPE = "application/dap-collection"
    partial_batch_selector: PartialBatchSelector
    report_count: Annotated[int, U64]
    interval: Interval
    leader_encrypted_agg_share: HpkeCiphertext
    helper_encrypted_agg_share: HpkeCiphertext


@dataclass(frozen=True)
class AggregateShareAad(Struct):
    """``AggregateShareAad`` (DAP-09 §4.6.4): associated data of a sealed aggregate share."""

    task_id: Annotated[bytes, fixed(TASK_ID_LEN)]
    aggregation_parameter: Annotated[bytes, OPAQUE32]
    batch_selector: BatchSelector


@dataclass(frozen=True)
class ReportShare(Struct):
    """``ReportShare`` (DAP-09 §4.5.1.1): one aggregator's part of a report."""

    metadata: ReportMetadata
    public_share: Annotated[bytes, OPAQUE32]
    encrypted_input_share: HpkeCiphertext


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


_PING_PONG = wrapped32(PingPongMessage)
"""A ping-pong message inside ``opaque message<0..2^32-1>``."""


@dataclass(frozen=True)
class PrepareInit(Struct):
    """``PrepareInit`` (DAP-09 §4.5.1.1): a report share and the leader's first ping-pong message."""

    report_share: ReportShare
    message: Annotated[PingPongMessage, _PING_PONG]


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
        out = fixed_bytes("report_id", self.report_id, REPORT_ID_LEN) + u8(self.result)
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
            return cls(rid, result, message=_PING_PONG.take(r))
        if result == cls.FINISHED:
            return cls(rid, result)
        if result == cls.REJECT:
            return cls(rid, result, error=PrepareError.read(r))
        raise DataError(f"{r.what}: unknown PrepareStepResult {result}")


@dataclass(frozen=True)
class PrepareContinue(Struct):
    """``PrepareContinue`` (DAP-09 §4.5.2.1): the leader's next ping-pong message for one report."""

    report_id: Annotated[bytes, fixed(REPORT_ID_LEN)]
    message: Annotated[PingPongMessage, _PING_PONG]


@dataclass(frozen=True)
class AggregationJobInitReq(Struct):
    """``AggregationJobInitReq`` (DAP-09 §4.5.1.1), media type ``application/dap-aggregation-job-init-req``."""

    MEDIA_TYPE = "application/dap-aggregation-job-init-req"
    aggregation_parameter: Annotated[bytes, OPAQUE32]
    partial_batch_selector: PartialBatchSelector
    prepare_inits: Annotated[tuple[PrepareInit, ...], vector32(PrepareInit)]


@dataclass(frozen=True)
class AggregationJobContinueReq(Struct):
    """``AggregationJobContinueReq`` (DAP-09 §4.5.2.1), ``application/dap-aggregation-job-continue-req``."""

    MEDIA_TYPE = "application/dap-aggregation-job-continue-req"
    step: Annotated[int, U16]
    prepare_continues: Annotated[tuple[PrepareContinue, ...], vector32(PrepareContinue)]


@dataclass(frozen=True)
class AggregationJobResp(Struct):
    """``AggregationJobResp`` (DAP-09 §4.5.1.2), media type ``application/dap-aggregation-job-resp``."""

    MEDIA_TYPE = "application/dap-aggregation-job-resp"
    prepare_resps: Annotated[tuple[PrepareResp, ...], vector32(PrepareResp)]


@dataclass(frozen=True)
class AggregateShareReq(Struct):
    """``AggregateShareReq`` (DAP-09 §4.6.3), media type ``application/dap-aggregate-share-req``.

    ``checksum`` is the XOR of the SHA-256 of every report id in the batch (32 bytes).
    """

    MEDIA_TYPE = "application/dap-aggregate-share-req"
    batch_selector: BatchSelector
    aggregation_parameter: Annotated[bytes, OPAQUE32]
    report_count: Annotated[int, U64]
    checksum: Annotated[bytes, fixed(CHECKSUM_LEN)]


@dataclass(frozen=True)
class AggregateShare(Struct):
    """``AggregateShare`` (DAP-09 §4.6.3), media type ``application/dap-aggregate-share``."""

    MEDIA_TYPE = "application/dap-aggregate-share"
    encrypted_aggregate_share: HpkeCiphertext
