"""The server's memory per connection and per run (issue 40): what it keeps, and for how long.

* **Answers in pieces** (:func:`fedstats.service.http.edge.send_in_pieces`): a body larger than
  :data:`~fedstats.service.http.edge.BODY_PIECE` reaches the server's transport in pieces of at most that
  size, the same bytes in order, over a real app (a large answer through :class:`EdgeMiddleware` arrives
  whole at the client); a small body is sent unchanged.
* **A stage's messages served from the bytes journaled** (:func:`~fedstats.service.domain.secure_devices.publish_downs`)
  and **released once their session ended** (:func:`~fedstats.service.domain.secure_devices.forget_sessions`,
  :func:`~fedstats.service.domain.secure_devices.forget_run`).
* **Bounded statements** (:mod:`fedstats.service.store.secure`): a stage's messages are read in keyset
  pages and written in parts of about ``BATCH_BYTES``, every message once and in order.
* **The allocator** (:mod:`fedstats.service.http.heap`): trimming answers, a bad arena count is refused.
* **A held stage message without its body** (:func:`~fedstats.service.http.deps.release_body`): once
  journaled, the request (held for the next stage's message) no longer references the uploaded bytes.
* **A closing stage's messages let go** (:func:`~fedstats.service.domain.secure_devices.forget_stage`,
  ``secure._store_down``): the closing stage's cached messages before the next stage's are computed,
  and each next-stage message object once serialized.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.testclient import TestClient

from fedstats.errors import ParameterError
from fedstats.service.domain import secure, secure_devices
from fedstats.service.domain.changes import Changes, Wakeup
from fedstats.service.http import heap
from fedstats.service.http.deps import release_body
from fedstats.service.http.edge import BODY_PIECE, EdgeMiddleware, send_in_pieces
from fedstats.service.http.secure import SecureRoutes
from fedstats.service.store import open_store
from fedstats.service.store import secure as store_secure


def _sent(body: bytes, more: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        out.append(message)

    asyncio.run(
        send_in_pieces(send, {"type": "http.response.body", "body": body, "more_body": more})
    )
    return out


@pytest.mark.parametrize("size", [0, 1, BODY_PIECE, BODY_PIECE + 1, 3 * BODY_PIECE, 250_000])
def test_a_body_is_sent_in_pieces_of_at_most_one_piece_with_the_same_bytes(size: int) -> None:
    body = bytes(i % 251 for i in range(size))
    got = _sent(body)
    assert b"".join(m["body"] for m in got) == body
    assert all(len(m["body"]) <= BODY_PIECE for m in got)
    assert len(got) == max(1, -(-size // BODY_PIECE))
    assert [m.get("more_body", False) for m in got] == [True] * (len(got) - 1) + [False]


def test_a_streamed_body_stays_open_after_its_last_piece() -> None:
    got = _sent(b"x" * (2 * BODY_PIECE + 5), more=True)
    assert len(got) == 3 and all(m["more_body"] for m in got)


def test_a_large_answer_through_the_edge_arrives_whole() -> None:
    app = FastAPI()
    body = bytes(range(256)) * 1000  # 256 kB

    @app.get("/big")
    async def big() -> Response:
        return Response(body, media_type="application/octet-stream")

    counters: defaultdict[str, float] = defaultdict(float)
    edge = EdgeMiddleware(app, max_body=1000, rate=1000.0, burst=1000.0, counters=counters)
    with TestClient(edge) as client:
        r = client.get("/big")
    assert r.status_code == 200
    assert r.content == body
    assert int(r.headers["content-length"]) == len(body)
    assert counters['http_responses_total{status="200"}'] == 1


def test_published_stage_messages_are_served_from_memory_until_their_session_ends() -> None:
    run = "memtest-run"
    key = (run, 0, 0)
    secure_devices._MEMBERS[key] = {"a": 0, "b": 1}
    try:
        secure_devices.publish_downs([((run, 0, 0, 1), {0: b"to-a", 1: b"to-b"})])
        assert secure_devices.cached_down(run, 0, 0, 1, "a") == b"to-a"
        assert secure_devices.cached_down(run, 0, 0, 1, "b") == b"to-b"
        assert secure_devices.cached_down(run, 0, 0, 1, "c") is None  # not a member
        # the next stage replaces the earlier one (a closed stage is not kept beside it)
        secure_devices.publish_downs([((run, 0, 0, 2), {0: b"next"})])
        assert secure_devices.cached_down(run, 0, 0, 1, "a") is None
        assert secure_devices.cached_down(run, 0, 0, 2, "a") == b"next"
        assert secure_devices.stage_known(run, 0, 0, 2) is False  # no size limit known yet
        secure_devices.forget_sessions([key])
        assert secure_devices.cached_down(run, 0, 0, 2, "a") is None
        assert key not in secure_devices._MEMBERS
        # a run that is over: nothing of it is kept
        secure_devices._MEMBERS[key] = {"a": 0}
        secure_devices.publish_downs([((run, 0, 0, 3), {0: b"last"})])
        secure_devices._COHORTS[run] = frozenset({"a"})
        secure_devices.forget_run(run)
        assert secure_devices.cached_down(run, 0, 0, 3, "a") is None
        assert not secure_devices.cached_member(run, "a")
        assert not any(k[0] == run for k in secure_devices._DOWNS)
    finally:
        secure_devices.forget_run(run)


def test_the_allocator_can_be_trimmed_and_its_arenas_limited() -> None:
    assert isinstance(heap.trim(), bool)
    trimmer = heap.Trimmer(3600.0)
    assert trimmer.due() is True
    assert trimmer() is True
    assert trimmer.due() is False
    assert trimmer() is False  # within the interval: not again
    with pytest.raises(ParameterError, match="count"):
        heap.limit_arenas(0)
    # where glibc is loaded (Linux here) the limit is set; elsewhere it is a no-op that says so
    assert heap.limit_arenas(heap.ARENAS) is (heap._glibc() is not None)


def test_a_stages_messages_are_read_and_written_in_bounded_statements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keyset pages of ``BATCH_ROWS`` give every message once, in order; writes are cut by size."""
    monkeypatch.setattr(store_secure, "BATCH_ROWS", 4)
    # the five down messages below: one statement each
    monkeypatch.setattr(store_secure, "BATCH_BYTES", 1000)
    store = open_store(f"sqlite:///{tmp_path / 'paging.db'}")
    try:
        with store.transaction() as tx:
            for i in (0, 2, 3, 5, 6, 7, 8, 11, 12):  # nine senders, gaps: pages of 4, 4, 1
                tx.add_up_message("r", 0, 0, 1, i, bytes([i]) * 3, f"d{i}", 1.0)
            tx.add_up_message("r", 0, 0, 2, 1, b"other stage", "x", 1.0)
            tx.add_down_messages("r", 0, 0, 2, [(i, b"y" * 700, f"e{i}") for i in range(5)], 1.0)
        with store.transaction(read_only=True) as tx:
            got = tx.up_messages("r", 0, 0, 1)
            assert [(m.client_index, m.payload) for m in got] == [
                (i, bytes([i]) * 3) for i in (0, 2, 3, 5, 6, 7, 8, 11, 12)
            ]
            assert [m.client_index for m in tx.up_messages("r", 0, 0, 2)] == [1]
            assert tx.down_payloads("r", 0, 0, 2) == {i: b"y" * 700 for i in range(5)}
    finally:
        store.close()
    rows = [{"payload": b"z" * n} for n in (600, 600, 300, 2000, 10)]
    parts = store_secure._by_size(rows, limit=1000)
    assert [[len(r["payload"]) for r in p] for p in parts] == [[600], [600, 300], [2000], [10]]


def _posted(body: bytes) -> Request:
    """A POST request whose body is ``body`` (not read yet)."""
    sent = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return sent.pop(0) if sent else {"type": "http.disconnect"}

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    return Request(scope, receive)


def test_a_released_request_no_longer_holds_its_body() -> None:
    async def go() -> None:
        request = _posted(b"s" * 20_000)
        body = await request.body()
        assert any(v is body for v in vars(request).values())  # Starlette keeps it once read
        release_body(request)
        assert not any(v is body for v in vars(request).values())
        with pytest.raises(RuntimeError):  # it cannot be read again
            await request.body()

    asyncio.run(go())


def test_a_journaled_stage_message_is_not_kept_by_its_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``store_up`` lets the request drop its body once stored: a held request does not keep it."""
    stored: list[bytes] = []

    def submit(
        tx: Any, run: str, index: int, number: int, stage: int, cid: str, body: bytes
    ) -> Any:
        stored.append(body)
        return True, True

    monkeypatch.setattr(secure_devices, "submit_up_at", submit)

    class _Store:
        @contextlib.contextmanager
        def transaction(self, **_: Any) -> Iterator[object]:
            yield object()

    async def signed(request: Request) -> tuple[str, bytes, Any]:
        return "dev-1", await request.body(), None  # no nonce: written by itself (not batched)

    async def offload(fn: Any) -> Any:
        return fn()

    async def population_of(cid: str) -> str:
        return "default"

    async def go() -> None:
        routes = SecureRoutes(
            _Store(),  # type: ignore[arg-type]
            signed,
            lambda tx, nonce: None,
            lambda body: None,
            defaultdict(float),
            Wakeup(),
            changes=Changes(),
            population_of=population_of,
            max_wait=30.0,
            offload=offload,
        )
        request = _posted(b"u" * 14_500)
        got = await routes.store_up("run-1", 0, 0, 1, request, 5.0)
        assert got[:3] == ("dev-1", True, True)
        assert stored == [b"u" * 14_500]
        assert not any(v is stored[0] for v in vars(request).values())

    asyncio.run(go())


def test_a_closing_stage_s_messages_are_let_go() -> None:
    run = "memtest-close"
    try:
        secure_devices.publish_downs([((run, 0, 0, 1), {0: b"to-a"}), ((run, 0, 1, 1), {0: b"x"})])
        secure_devices.forget_stage((run, 0, 0, 1))
        assert (run, 0, 0, 1) not in secure_devices._DOWNS
        assert (run, 0, 1, 1) in secure_devices._DOWNS  # another session's stage is kept
    finally:
        secure_devices.forget_run(run)


def test_a_stage_s_messages_are_journaled_and_let_go_one_by_one() -> None:
    """``_store_down`` empties the messages it was given as it serializes them (not held twice)."""

    class _Message:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def to_bytes(self) -> bytes:
            return self.data

    written: list[Any] = []

    class _Tx:
        def add_down_messages(self, *args: Any) -> None:
            written.append(args)

    class _Row:
        run_id, round_index, number = "r", 0, 0

    out: dict[int, Any] = {i: _Message(bytes([i]) * 10) for i in (2, 0, 1)}
    cache = secure.SessionCache()
    secure._store_down(_Tx(), _Row(), 2, out, cache)  # type: ignore[arg-type]
    assert out == {}
    (args,) = written
    assert args[:4] == ("r", 0, 0, 2)
    assert [(i, d) for i, d, _ in args[4]] == [(i, bytes([i]) * 10) for i in (2, 0, 1)]
    assert cache.take_journaled() == [(("r", 0, 0, 2), {i: bytes([i]) * 10 for i in (2, 0, 1)})]
