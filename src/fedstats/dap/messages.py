"""DAP messages of draft-ietf-ppm-dap-09 with strict binary encodings.

Every message the client, the leader, the helper and the collector exchange (DAP-09 §4), each a frozen
dataclass with ``encode() -> bytes``, ``read(reader)`` and ``decode(data)``; ``decode`` raises
:class:`~fedstats.errors.DataError` on truncated, overlong or malformed input (unknown enum values, a
query type that is neither time-interval nor fixed-size, an interval that overflows). The encodings are
checked byte for byte against the hex in the ``janus_messages`` tests of Janus 0.7.135, the release that
implements DAP-09 (``tests/dap_vectors/``). The definitions live in :mod:`fedstats.dap.msg_common`
(common types, upload, queries) and :mod:`fedstats.dap.msg_flow` (aggregation and collection).

DAP-09 calls the two batch modes *query types*: ``time_interval`` (1) and ``fixed_size`` (2); later drafts
renamed them *batch modes* and ``fixed_size`` became ``leader_selected``. The VDAF preparation messages
travel inside the ping-pong framing of VDAF-08 §5.8 (:class:`PingPongMessage`).

Examples
--------
>>> md = ReportMetadata(bytes(range(16)), 1_700_000_000)
>>> ReportMetadata.decode(md.encode()) == md
True
"""

from __future__ import annotations

from fedstats.dap.hpke import HpkeCiphertext, HpkeConfig, HpkeConfigList
from fedstats.dap.msg_common import (
    DAP_VERSION,
    QUERY_FIXED_SIZE,
    QUERY_TIME_INTERVAL,
    BatchSelector,
    Extension,
    FixedSizeQuery,
    InputShareAad,
    Interval,
    PartialBatchSelector,
    PlaintextInputShare,
    PrepareError,
    Query,
    Report,
    ReportMetadata,
    Role,
    read_url,
    url,
)
from fedstats.dap.msg_flow import (
    AggregateShare,
    AggregateShareAad,
    AggregateShareReq,
    AggregationJobContinueReq,
    AggregationJobInitReq,
    AggregationJobResp,
    Collection,
    CollectionReq,
    PingPongMessage,
    PrepareContinue,
    PrepareInit,
    PrepareResp,
    ReportShare,
)

__all__ = [
    "DAP_VERSION",
    "QUERY_FIXED_SIZE",
    "QUERY_TIME_INTERVAL",
    "AggregateShare",
    "AggregateShareAad",
    "AggregateShareReq",
    "AggregationJobContinueReq",
    "AggregationJobInitReq",
    "AggregationJobResp",
    "BatchSelector",
    "Collection",
    "CollectionReq",
    "Extension",
    "FixedSizeQuery",
    "HpkeCiphertext",
    "HpkeConfig",
    "HpkeConfigList",
    "InputShareAad",
    "Interval",
    "PartialBatchSelector",
    "PingPongMessage",
    "PlaintextInputShare",
    "PrepareContinue",
    "PrepareError",
    "PrepareInit",
    "PrepareResp",
    "Query",
    "Report",
    "ReportMetadata",
    "ReportShare",
    "Role",
    "read_url",
    "url",
]
