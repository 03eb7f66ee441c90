"""DAP-09 messages byte for byte against Janus's ``janus_messages`` tests (tests/dap_vectors/README.md).

The Rust test files of Janus 0.7.135 (the release implementing DAP-09) are committed unchanged; this module
reads every ``roundtrip_encoding`` case out of them (the message type and its hex), decodes the hex with
:mod:`fedstats.dap.messages` and re-encodes it, which must give the same bytes with nothing left over.
Because a round trip alone would not notice two fields of equal width swapped, the decoded values of one
case of each composite message are also compared with the Rust values, transcribed below. Hypothesis
checks round trips of random messages and that garbage never raises anything but a FedstatsError.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstats.dap import messages as m
from fedstats.dap.codec import Reader, decode_all
from fedstats.errors import DataError, FedstatsError

RS_DIR = Path(__file__).resolve().parents[1] / "dap_vectors" / "janus_messages"


def _close(text: str, i: int) -> int:
    """Index just after the bracket closing ``text[i]``, skipping strings and ``//`` comments."""
    closing = {"(": ")", "[": "]", "{": "}"}
    stack, j = [closing[text[i]]], i + 1
    while stack:
        c = text[j]
        if c == '"':
            j = text.index('"', j + 1)
        elif text.startswith("//", j):
            j = text.index("\n", j)
        elif c in closing:
            stack.append(closing[c])
        elif c == stack[-1]:
            stack.pop()
        j += 1
    return j


def _split(body: str) -> list[str]:
    """Split at top-level commas."""
    parts, depth, start, j = [], 0, 0, 0
    while j < len(body):
        c = body[j]
        if c == '"':
            j = body.index('"', j + 1)
        elif body.startswith("//", j):
            j = body.index("\n", j)
            continue
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(body[start:j])
            start = j + 1
        j += 1
    parts.append(body[start:])
    code = [re.sub(r"//[^\n]*", "", p).strip() for p in parts]
    return [p for p in code if p]


def janus_cases() -> list[tuple[str, str, str]]:
    """``(file, Rust type, hex)`` for every ``roundtrip_encoding`` case with a literal hex encoding."""
    out = []
    for path in sorted(RS_DIR.glob("*.rs")):
        text = path.read_text()
        for match in re.finditer(r"roundtrip_encoding\(&\[", text):
            start = match.end() - 1
            for case in _split(text[start + 1 : _close(text, start) - 1]):
                value, encoding = _split(case[1 : _close(case, 0) - 1])
                if (
                    "hex::encode" in encoding
                ):  # the Url cases compute their hex; tested by hand below
                    continue
                code = re.sub(r"//[^\n]*", "", encoding)
                hexstr = "".join(re.findall(r'"([0-9A-Fa-f]*)"', code)).lower()
                kind = re.match(r"[A-Za-z_:]+", value.replace("::<", "<")).group(0)  # type: ignore[union-attr]
                out.append((path.name, kind, hexstr))
    return out


def _scalar(read: Callable[[Reader], Any]) -> Callable[[bytes], bytes]:
    """A codec for a scalar type: decode strictly, re-encode as the bytes read."""

    def codec(data: bytes) -> bytes:
        r = Reader(data, "scalar")
        read(r)
        r.done()
        return data[: r.pos]

    return codec


def _message(cls: Any) -> Callable[[bytes], bytes]:
    return lambda data: cls.decode(data).encode()


def _code(r: Reader) -> int:
    code = r.u8()
    if code > 2:
        raise DataError("query type")
    return code


CODECS: dict[str, Callable[[bytes], bytes]] = {
    "ReportShare": _message(m.ReportShare),
    "PrepareInit": _message(m.PrepareInit),
    "PrepareResp": _message(m.PrepareResp),
    "PrepareError": lambda d: decode_all(d, "PrepareError", m.PrepareError.read).encode(),
    "AggregationJobInitializeReq": _message(m.AggregationJobInitReq),
    "AggregationJobContinueReq": _message(m.AggregationJobContinueReq),
    "AggregationJobResp": _message(m.AggregationJobResp),
    "CollectionReq": _message(m.CollectionReq),
    "PartialBatchSelector": _message(m.PartialBatchSelector),
    "Collection": _message(m.Collection),
    "BatchSelector": _message(m.BatchSelector),
    "AggregateShareReq": _message(m.AggregateShareReq),
    "AggregateShare": _message(m.AggregateShare),
    "AggregateShareAad": _message(m.AggregateShareAad),
    "Duration": _scalar(Reader.u64),
    "Time": _scalar(Reader.u64),
    "Interval": _message(m.Interval),
    "Role": lambda d: decode_all(d, "Role", m.Role.read).encode(),
    "TaskId": _scalar(lambda r: r.take(32)),
    "HpkeConfigId": _scalar(Reader.u8),
    "HpkeKemId": _scalar(Reader.u16),
    "HpkeKdfId": _scalar(Reader.u16),
    "HpkeAeadId": _scalar(Reader.u16),
    "HpkeCiphertext": _message(m.HpkeCiphertext),
    "HpkePublicKey": _scalar(Reader.opaque16),
    "HpkeConfig": _message(m.HpkeConfig),
    "HpkeConfigList": _message(m.HpkeConfigList),
    "BatchId": _scalar(lambda r: r.take(32)),
    "FixedSizeQuery": _message(m.FixedSizeQuery),
    "Query": _message(m.Query),
    "query_type": _scalar(_code),
    "ReportId": _scalar(lambda r: r.take(16)),
    "Extension": _message(m.Extension),
    "ExtensionType": _scalar(Reader.u16),
    "ReportMetadata": _message(m.ReportMetadata),
    "PlaintextInputShare": _message(m.PlaintextInputShare),
    "Report": _message(m.Report),
    "InputShareAad": _message(m.InputShareAad),
}
CASES = janus_cases()


def _codec(kind: str) -> Callable[[bytes], bytes]:
    return CODECS[re.split(r"::|<", kind)[0]]


def test_every_janus_case_is_read() -> None:
    # 106 literal cases in the six files; the Url loop's computed one is tested by hand below
    assert len(CASES) == 105
    kinds = {re.split(r"::|<", k)[0] for _, k, _ in CASES}
    assert kinds == set(CODECS)


@pytest.mark.parametrize(
    ("file", "kind", "hexstr"), CASES, ids=[f"{f}:{k}:{i}" for i, (f, k, _) in enumerate(CASES)]
)
def test_janus_encoding_round_trips_byte_exact(file: str, kind: str, hexstr: str) -> None:
    data = bytes.fromhex(hexstr)
    assert _codec(kind)(data) == data
    if data:  # strict: one byte short or one byte over is refused
        with pytest.raises(DataError):
            _codec(kind)(data[:-1])
    with pytest.raises(DataError):
        _codec(kind)(data + b"\x00")


def _hex(kind: str, index: int = 0) -> bytes:
    return bytes.fromhex([h for _, k, h in CASES if re.split(r"::|<", k)[0] == kind][index])


RID = bytes(range(1, 17))
RID_REV = bytes(range(16, 0, -1))
CT_42 = m.HpkeCiphertext(42, b"012345", b"543210")
CT_13 = m.HpkeCiphertext(13, b"abce", b"abfd")


def test_decoded_values_match_the_rust_values() -> None:
    """One case of each composite message, field by field, as the Rust test writes it."""
    assert m.Report.decode(_hex("Report", 0)) == m.Report(
        m.ReportMetadata(RID, 12345), b"", CT_42, CT_13
    )
    assert m.Report.decode(_hex("Report", 1)) == m.Report(
        m.ReportMetadata(RID_REV, 54321), b"3210", CT_42, CT_13
    )
    assert m.InputShareAad.decode(_hex("InputShareAad")) == m.InputShareAad(
        bytes([12] * 32), m.ReportMetadata(RID, 54321), b"0123"
    )
    assert m.ReportShare.decode(_hex("ReportShare", 1)) == m.ReportShare(
        m.ReportMetadata(RID_REV, 73542), b"0123", CT_13.__class__(13, b"abce", b"abfd")
    )
    assert m.PrepareInit.decode(_hex("PrepareInit", 0)) == m.PrepareInit(
        m.ReportShare(m.ReportMetadata(RID, 54321), b"", CT_42),
        m.PingPongMessage(0, prep_share=b"012345"),
    )
    assert m.PrepareResp.decode(_hex("PrepareResp", 0)) == m.PrepareResp(
        RID, 0, message=m.PingPongMessage(1, prep_msg=b"012345", prep_share=b"6789")
    )
    assert m.PrepareResp.decode(_hex("PrepareResp", 1)) == m.PrepareResp(RID_REV, 1)
    assert m.PrepareResp.decode(_hex("PrepareResp", 2)) == m.PrepareResp(
        bytes([255] * 16), 2, error=m.PrepareError.VDAF_PREP_ERROR
    )
    req = m.AggregationJobInitReq.decode(_hex("AggregationJobInitializeReq", 1))
    assert req.aggregation_parameter == b"012345"
    assert req.partial_batch_selector == m.PartialBatchSelector(m.QUERY_FIXED_SIZE, bytes([2] * 32))
    assert req.prepare_inits[0].report_share == m.ReportShare(
        m.ReportMetadata(RID, 54321), b"", CT_42
    )
    cont = m.AggregationJobContinueReq.decode(_hex("AggregationJobContinueReq"))
    assert cont.step == 42405
    assert [p.report_id for p in cont.prepare_continues] == [RID, RID_REV]
    assert m.Collection.decode(_hex("Collection", 0)) == m.Collection(
        m.PartialBatchSelector(m.QUERY_TIME_INTERVAL),
        0,
        m.Interval(54321, 12345),
        m.HpkeCiphertext(10, b"0123", b"4567"),
        m.HpkeCiphertext(12, b"01234", b"567"),
    )
    assert m.AggregateShareReq.decode(_hex("AggregateShareReq", 0)) == m.AggregateShareReq(
        m.BatchSelector(m.QUERY_TIME_INTERVAL, batch_interval=m.Interval(54321, 12345)),
        b"",
        439,
        bytes(32),
    )
    assert [m.PrepareError.read(Reader(_hex("PrepareError", i), "e")) for i in range(10)] == list(
        m.PrepareError
    )


@pytest.mark.parametrize(
    "text", ["https://example.com/", "https://example.com", "http://" + "h" * 65527 + "/"]
)
def test_url_as_in_janus(text: str) -> None:
    data = len(text).to_bytes(2, "big") + text.encode()
    assert m.url(text) == data
    assert decode_all(data, "Url", m.read_url) == text


@pytest.mark.parametrize("bad", ["0000", "0001ff"])
def test_url_refuses_empty_and_non_ascii(bad: str) -> None:
    with pytest.raises(DataError):
        decode_all(bytes.fromhex(bad), "Url", m.read_url)


# --- property tests -------------------------------------------------------------------------------------

b16 = st.binary(min_size=16, max_size=16)
b32 = st.binary(min_size=32, max_size=32)
u64s = st.integers(0, 2**64 - 1)
small = st.binary(max_size=40)
cts = st.builds(m.HpkeCiphertext, st.integers(0, 255), small, small)
metadata = st.builds(m.ReportMetadata, b16, u64s)
intervals = st.integers(0, 2**63).flatmap(
    lambda s: st.builds(m.Interval, st.just(s), st.integers(0, 2**63 - 1))
)
pings = st.one_of(
    st.builds(m.PingPongMessage, st.just(0), st.none(), small),
    st.builds(m.PingPongMessage, st.just(1), small, small),
    st.builds(m.PingPongMessage, st.just(2), small, st.none()),
)
pbs = st.one_of(
    st.just(m.PartialBatchSelector(1)), st.builds(m.PartialBatchSelector, st.just(2), b32)
)
selectors = st.one_of(
    st.builds(m.BatchSelector, st.just(1), intervals, st.none()),
    st.builds(m.BatchSelector, st.just(2), st.none(), b32),
)
queries = st.one_of(
    st.builds(m.Query, st.just(1), intervals, st.none()),
    st.builds(
        m.Query, st.just(2), st.none(), st.builds(m.FixedSizeQuery, st.one_of(st.none(), b32))
    ),
)
report_shares = st.builds(m.ReportShare, metadata, small, cts)
resps = st.one_of(
    st.builds(m.PrepareResp, b16, st.just(0), pings, st.none()),
    st.builds(m.PrepareResp, b16, st.just(1), st.none(), st.none()),
    st.builds(m.PrepareResp, b16, st.just(2), st.none(), st.sampled_from(list(m.PrepareError))),
)
MESSAGES = st.one_of(
    st.builds(m.Report, metadata, small, cts, cts),
    st.builds(
        m.PlaintextInputShare,
        st.lists(
            st.builds(m.Extension, st.integers(0, 65535), small),
            max_size=3,
            unique_by=lambda e: e.extension_type,
        ).map(tuple),
        small,
    ),
    st.builds(
        m.AggregationJobInitReq,
        small,
        pbs,
        st.lists(st.builds(m.PrepareInit, report_shares, pings), max_size=3).map(tuple),
    ),
    st.builds(
        m.AggregationJobContinueReq,
        st.integers(0, 65535),
        st.lists(st.builds(m.PrepareContinue, b16, pings), max_size=3).map(tuple),
    ),
    st.builds(m.AggregationJobResp, st.lists(resps, max_size=3).map(tuple)),
    st.builds(m.CollectionReq, queries, small),
    st.builds(m.Collection, pbs, u64s, intervals, cts, cts),
    st.builds(m.AggregateShareReq, selectors, small, u64s, b32),
    st.builds(m.AggregateShare, cts),
    st.builds(m.AggregateShareAad, b32, small, selectors),
)
TYPES = [
    m.Report,
    m.PlaintextInputShare,
    m.AggregationJobInitReq,
    m.AggregationJobContinueReq,
    m.AggregationJobResp,
    m.CollectionReq,
    m.Collection,
    m.AggregateShareReq,
    m.AggregateShare,
    m.AggregateShareAad,
    m.HpkeConfigList,
    m.PrepareResp,
    m.Query,
]


@settings(max_examples=60, deadline=None)
@given(MESSAGES)
def test_round_trip(msg: Any) -> None:
    data = msg.encode()
    assert type(msg).decode(data) == msg
    with pytest.raises(DataError):
        type(msg).decode(data + b"\x01")


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(TYPES), st.binary(max_size=120))
def test_garbage_raises_only_fedstats_errors(cls: Any, data: bytes) -> None:
    try:
        decoded = cls.decode(data)
    except FedstatsError:
        return
    assert decoded.encode() == data  # what decodes is exactly what it re-encodes


@settings(max_examples=100, deadline=None)
@given(
    MESSAGES, st.integers(0, 10**6), st.integers(0, 255), st.sampled_from(["flip", "cut", "insert"])
)
def test_mutated_messages_raise_only_fedstats_errors(
    msg: Any, where: int, byte: int, how: str
) -> None:
    data = bytearray(msg.encode())
    i = where % (len(data) + 1)
    if how == "flip" and data:
        data[i % len(data)] ^= byte or 1
    elif how == "cut":
        del data[i:]
    else:
        data.insert(i, byte)
    try:
        decoded = type(msg).decode(bytes(data))
    except FedstatsError:
        return
    assert decoded.encode() == bytes(data)
