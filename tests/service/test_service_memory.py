"""The server's memory per connection and per run (issue 40): what it keeps, and for how long.

* **Answers in pieces** (:func:`fedstats.service.http.edge.send_in_pieces`): a body larger than
  :data:`~fedstats.service.http.edge.BODY_PIECE` reaches the server's transport in pieces of at most that
  size, the same bytes in order, over a real app (a large answer through :class:`EdgeMiddleware` arrives
  whole at the client); a small body is sent unchanged.
* **A stage's messages served from the bytes journaled** (:func:`~fedstats.service.domain.secure_devices.publish_downs`)
  and **released once their session ended** (:func:`~fedstats.service.domain.secure_devices.forget_sessions`,
  :func:`~fedstats.service.domain.secure_devices.forget_run`).
* **The allocator** (:mod:`fedstats.service.http.heap`): trimming answers, a bad arena count is refused.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import Response
from fastapi.testclient import TestClient

from fedstats.errors import ParameterError
from fedstats.service.domain import secure_devices
from fedstats.service.http import heap
from fedstats.service.http.edge import BODY_PIECE, EdgeMiddleware, send_in_pieces


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
    assert trimmer() is True
    assert trimmer() is False  # within the interval: not again
    with pytest.raises(ParameterError, match="count"):
        heap.limit_arenas(0)
