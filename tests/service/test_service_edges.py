"""The server's HTTP edge: bad input is a 4xx naming what is wrong, and every response is counted and logged.

In-process (Starlette's test client over the real app and a SQLite store) except the last test, which starts
``fedstats server`` and reads its "listening on" line and its JSON log lines.
"""

from __future__ import annotations

import json
import logging
import math
import re
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient

from fedstats._validation import control_character
from fedstats.errors import SecurityError
from fedstats.service.domain.operators import add_operator, trust_authority
from fedstats.service.http import edge
from fedstats.service.http.app import ServerSettings, create_app
from fedstats.service.http.edge import MAX_DEPTH, BadJSON, JsonLogFormatter, strict_loads
from fedstats.service.http.schemas import MAX_INDEX
from fedstats.service.store import open_store
from fedstats.wire import auth
from service_helpers import FEDSTATS, free_port


class Server:
    """The app over a fresh SQLite store, an operator token and one enrolled device."""

    def __init__(self, root: Path, **settings: Any) -> None:
        self.store = open_store(f"sqlite:///{root / 'edges.db'}")
        self.token = add_operator(self.store, "ops")
        authority = Ed25519PrivateKey.generate()
        trust_authority(self.store, auth.public_key_hex(authority))
        self.app = create_app(self.store, ServerSettings(**settings), run_driver=False)
        self.http = TestClient(self.app, raise_server_exceptions=False)
        self.key = Ed25519PrivateKey.generate()
        self.cid = "device-1"
        cert = auth.issue_certificate(
            authority,
            client_id=self.cid,
            public_key=auth.public_key_hex(self.key),
            population="default",
        )
        got = self.signed("POST", "/v1/client/register", {"certificate": cert.as_dict()})
        assert got.status_code == 200, got.text

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}

    def signed(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None, **over: str
    ) -> Any:
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        headers = auth.sign_request(self.key, self.cid, method, path, data)
        headers.update(over)
        headers["content-type"] = "application/json"
        return self.http.request(method, path, content=data, headers=headers)

    def metrics(self) -> dict[int, float]:
        text = self.http.get("/metrics").text
        return {
            int(m.group(1)): float(m.group(2))
            for m in re.finditer(
                r'^fedstats_http_responses_total\{status="(\d+)"\} (\S+)$', text, re.M
            )
        }


@pytest.fixture
def server() -> Iterator[Server]:
    with tempfile.TemporaryDirectory(prefix="fedstats-edges-") as root:
        srv = Server(Path(root))
        yield srv
        srv.store.close()


# -- strict JSON ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400", "-1e999"])
@pytest.mark.parametrize("field", ["epsilon", "delta"])
def test_non_finite_numbers_in_a_budget_are_a_422_naming_the_field(
    server: Server, token: str, field: str
) -> None:
    body = {"epsilon": "1.0", "delta": "1e-6"}
    body[field] = token
    text = "{" + ", ".join(f'"{k}": {v}' for k, v in body.items()) + "}"
    got = server.http.put("/v1/admin/budgets/analyst/ann", content=text, headers=server.admin)
    assert got.status_code == 422, got.text
    assert f"body.{field}" in got.json()["detail"] and "finite" in got.json()["detail"]
    # the same body with finite numbers is accepted: the refusal is about the number alone
    body[field] = "0.5"
    text = "{" + ", ".join(f'"{k}": {v}' for k, v in body.items()) + "}"
    ok = server.http.put("/v1/admin/budgets/analyst/ann", content=text, headers=server.admin)
    assert ok.status_code == 200, ok.text


def test_non_finite_numbers_deep_in_a_task_name_their_path(server: Server) -> None:
    text = '{"task": {"privacy": {"epsilon": NaN}}, "certificate": {}, "signature": "00"}'
    got = server.http.post("/v1/admin/tasks", content=text, headers=server.admin)
    assert got.status_code == 422
    assert got.json()["detail"].startswith("body.task.privacy.epsilon: NaN")


def test_nesting_is_bounded_on_admin_and_device_endpoints(server: Server) -> None:
    deep = ("[" * 100_000 + "]" * 100_000).encode()  # past Python's recursion limit
    got = server.http.put("/v1/admin/budgets/analyst/ann", content=deep, headers=server.admin)
    assert got.status_code == 422 and "nested deeper" in got.json()["detail"]
    got = server.signed("POST", "/v1/client/runs/r/checkin", raw=deep)
    assert got.status_code == 422 and "nested deeper" in got.json()["detail"]
    shallow = {"records": 1, "x": json.loads("[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1))}
    got = server.signed("POST", "/v1/client/runs/r/checkin", shallow)
    assert got.status_code == 404, got.text  # parsed; the run does not exist


def test_strict_loads() -> None:
    assert strict_loads(b'{"a": [1, 2.5, -3e10]}') == {"a": [1, 2.5, -3e10]}
    nested = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert strict_loads(nested) is not None
    for bad, where in [
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested deeper"),
        ('{"a": [1, {"b": NaN}]}', "body.a[1].b: NaN"),
        ('{"a": 1e309}', "body.a: 1e309 overflows"),
        ("9" * 5000, "not JSON"),
        (b'"\xff"', "not UTF-8"),
        ("{", "not JSON"),
    ]:
        with pytest.raises(BadJSON, match=re.escape(where)):
            strict_loads(bad if isinstance(bad, bytes) else bad.encode())


def test_a_query_is_parsed_for_control_characters_unless_it_cannot_decode_to_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every ``%`` escape, alone or after a device's ``%2C`` list, is refused exactly when it decodes to a
    control character; the list itself (printable escapes only) is not parsed at all."""

    def refused(query: bytes) -> bool:
        scope = {"path": "/v1/client/work", "query_string": query, "headers": []}
        return edge.control_field(scope) is not None

    def decodes_to_control(query: bytes) -> bool:
        pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
        return any(control_character(name) or control_character(value) for name, value in pairs)

    for prefix in (b"m=%", b"m=1%2C2%2C%", b"m=%%2C", b"m=%2C%2"):
        for a in range(256):
            for b in (0x00, 0x30, 0x43, 0x46, 0x66, 0x7F, 0x85, 0xFF):
                query = prefix + bytes([a, b])
                assert refused(query) is decodes_to_control(query), query
    members = b"wait=25&members=" + b"%2C".join(str(i).encode() for i in range(900))
    monkeypatch.setattr(edge, "parse_qsl", None)  # parsing it would raise: it is not parsed
    assert not refused(members) and not refused(b"wait=1&x=%20%7E%41+")


def test_a_non_json_content_type_says_how_to_send_json(server: Server) -> None:
    headers = dict(server.admin, **{"Content-Type": "application/x-www-form-urlencoded"})
    got = server.http.put("/v1/admin/budgets/analyst/ann", content=b"epsilon=1", headers=headers)
    assert got.status_code == 422
    assert "Content-Type: application/json" in got.json()["detail"]


# -- bounds --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v1/client/runs/r/rounds/{big}/report",
        "/v1/client/runs/r/rounds/{big}/secure/0/1",
        "/v1/client/runs/r/rounds/0/secure/{big}/1",
        "/v1/client/runs/r/rounds/0/secure/0/{big}",
        "/v1/client/runs/r/rounds/-1/report",
        "/v1/client/runs/{long}/checkin",
    ],
)
def test_path_numbers_and_ids_are_bounded(server: Server, path: str) -> None:
    path = path.format(big=10**30, long="r" * 129)
    got = server.signed("POST", path, {"records": 1, "vector": [], "count": 1})
    assert got.status_code == 422, got.text
    # one past the bound is refused, the bound itself is not (it reaches the handler: 404)
    edge = (
        path.replace(str(10**30), str(MAX_INDEX)).replace("-1", "0").replace("r" * 129, "r" * 128)
    )
    assert server.signed("POST", edge, {"records": 1, "vector": [], "count": 1}).status_code in (
        401,
        404,
        409,
        422,
    )
    assert server.signed("POST", edge, {"records": 1, "vector": [], "count": 1}).status_code < 500


def test_budget_and_run_ids_are_bounded(server: Server) -> None:
    assert server.http.get("/v1/admin/runs/" + "x" * 129, headers=server.admin).status_code == 422
    assert server.http.get("/v1/admin/runs/" + "x" * 128, headers=server.admin).status_code == 404


@pytest.mark.parametrize("records", [0, 10**9 + 1, 10**40, 1.5, True, "1"])
def test_checkin_records_are_bounded(server: Server, records: Any) -> None:
    got = server.signed("POST", "/v1/client/runs/r/checkin", {"records": records})
    assert got.status_code == 422 and "records" in got.json()["detail"]


# -- headers and signed timestamps ---------------------------------------------------------------------


def test_undecodable_headers_are_refused_not_crashed(server: Server) -> None:
    raw = [(b"authorization", b"Bearer \xff\xfe\x80"), (b"content-type", b"application/json")]
    assert server.http.get("/v1/admin/runs/x", headers=raw).status_code == 401
    for header in (
        auth.HEADER_CLIENT,
        auth.HEADER_SIGNATURE,
        auth.HEADER_NONCE,
        auth.HEADER_TIMESTAMP,
    ):
        data = b"{}"
        signed = auth.sign_request(server.key, server.cid, "GET", "/v1/client/work", data)
        headers = [(k.encode(), v.encode()) for k, v in signed.items() if k != header]
        headers.append((header.encode(), b"\xff\xfe" + b"\x80" * 10))
        got = server.http.get("/v1/client/work", headers=headers)
        if header == auth.HEADER_CLIENT:  # read as Latin-1, \x80 is a C1 control: refused by name
            assert got.status_code == 422, (header, got.status_code, got.text)
            assert got.json()["detail"].startswith(f"header.{header}:"), got.text
        else:
            assert got.status_code == 401, (header, got.status_code, got.text)


@pytest.mark.parametrize("ts", ["nan", "NaN", "-nan", "inf", "-inf", "1e999", "0x10", "", "1" * 40])
def test_a_signed_timestamp_must_be_finite(server: Server, ts: str) -> None:
    signed = auth.sign_request(server.key, server.cid, "GET", "/v1/client/work", b"")
    payload = auth.signing_payload("GET", "/v1/client/work", ts, signed[auth.HEADER_NONCE], b"")
    signed[auth.HEADER_TIMESTAMP] = ts
    signed[auth.HEADER_SIGNATURE] = server.key.sign(payload).hex()  # a valid signature over it
    got = server.http.get("/v1/client/work", headers=signed)
    assert got.status_code == 401, (ts, got.text)
    # and the same request with the current time passes: the device and signature are good
    ok = server.signed("GET", "/v1/client/work")
    assert ok.status_code == 200, ok.text


def test_check_timestamp() -> None:
    now = 1_700_000_000.0
    assert auth.check_timestamp(str(now - 10), 300, now=now) == now - 10
    for bad in ("nan", "inf", "-inf", "1e999", "abc", str(now - 301), str(now + 301), "٣"):
        with pytest.raises(SecurityError):
            auth.check_timestamp(bad, 300, now=now)
    assert math.isfinite(auth.check_timestamp(str(int(now)), 0.5, now=now))


# -- every response counted, 5xx visible, logs ---------------------------------------------------------


def test_every_response_is_counted_by_status(server: Server) -> None:
    before = server.metrics()
    statuses: Counter[int] = Counter()
    for call in (
        lambda: server.http.get("/healthz"),
        lambda: server.http.get("/v1/admin/runs/x", headers=server.admin),
        lambda: server.http.get("/v1/admin/runs/x"),
        lambda: server.http.get("/nowhere"),
        lambda: server.http.put("/v1/admin/budgets/analyst/a", content="{", headers=server.admin),
        lambda: server.http.post("/v1/admin/runs", content=b"x" * (2 << 20), headers=server.admin),
        lambda: server.signed("GET", "/v1/client/work"),
    ):
        statuses[call().status_code] += 1
    statuses[200] += 1  # the first /metrics read itself is counted in the second
    after = server.metrics()
    delta = {s: after.get(s, 0) - before.get(s, 0) for s in set(after) | set(before)}
    assert {s: d for s, d in delta.items() if d} == dict(statuses)
    assert {200, 401, 404, 413, 422} <= set(statuses)


def test_an_unhandled_error_is_a_json_500_with_an_id_logged_and_counted(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    @server.app.get("/v1/boom/{thing}")
    def boom(thing: str) -> None:
        raise RuntimeError(f"boom {thing}")

    before = server.metrics().get(500, 0)
    with caplog.at_level(logging.INFO, logger="fedstats.service"):
        got = server.http.get("/v1/boom/secret-id")
    assert got.status_code == 500
    body = got.json()
    assert body["detail"] == "internal server error" and re.fullmatch(
        r"[0-9a-f]{16}", body["error_id"]
    )
    assert "boom" not in got.text  # no internals in the answer
    events = [json.loads(r.getMessage()) for r in caplog.records if r.name == "fedstats.service"]
    error = next(e for e in events if e.get("event") == "unhandled_error")
    assert (
        error["error_id"] == body["error_id"]
        and "RuntimeError: boom secret-id" in error["traceback"]
    )
    request = next(e for e in events if e.get("event") == "request")
    assert request["status"] == 500 and request["error_id"] == body["error_id"]
    assert request["path"] == "/v1/boom/{thing}"  # the template, not the id
    assert server.metrics().get(500, 0) == before + 1


def test_the_dashboard_shows_this_process_5xx_count(server: Server) -> None:
    @server.app.get("/v1/boom")
    def boom() -> None:
        raise RuntimeError("boom")

    def panel() -> str:
        server.http.cookies.set("fedstats_operator", server.token)
        got = server.http.get("/dashboard")
        assert got.status_code == 200, got.text
        return got.text.split('<table id="process">', 1)[1].split("</table>", 1)[0]

    before = server.metrics()
    for _ in range(3):
        assert server.http.get("/v1/boom").status_code == 500
    server.http.get("/v1/admin/runs/x", headers=server.admin)  # a 404
    text = panel()
    n5 = sum(v for s, v in server.metrics().items() if s >= 500)
    assert n5 == sum(v for s, v in before.items() if s >= 500) + 3
    assert f'<strong class="aborted server-errors">{n5:g}</strong>' in text
    n4 = sum(v for s, v in server.metrics().items() if 400 <= s < 500)
    assert f'data-class="4xx">4xx: {n4:g}</span>' in text
    assert "500: " in text and "404: " in text


def test_request_log_lines_carry_no_secrets(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="fedstats.service"):
        server.http.put(
            "/v1/admin/budgets/analyst/ann",
            content='{"epsilon": 1.5, "delta": 0.0}',
            headers=server.admin,
        )
    text = "\n".join(r.getMessage() for r in caplog.records)
    line = json.loads(next(r.getMessage() for r in caplog.records if '"request"' in r.getMessage()))
    assert line["path"] == "/v1/admin/budgets/{scope}/{name}" and line["method"] == "PUT"
    assert line["status"] == 200 and line["ms"] >= 0
    assert server.token not in text and "1.5" not in text and "ann" not in text


def test_json_log_formatter() -> None:
    fmt = JsonLogFormatter()
    rec = logging.LogRecord(
        "fedstats.service", logging.INFO, __file__, 1, '{"event": "x", "n": 1}', None, None
    )
    out = json.loads(fmt.format(rec))
    assert out["event"] == "x" and out["n"] == 1 and out["level"] == "info"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", out["ts"])
    try:
        raise ValueError("bad")
    except ValueError:
        import sys

        rec = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "plain %s", ("text",), sys.exc_info()
        )
    out = json.loads(fmt.format(rec))
    assert out["message"] == "plain text" and "ValueError: bad" in out["traceback"]


def test_log_stamps_and_records_are_those_of_the_standard_path() -> None:
    """:func:`utc_stamp` writes what ``datetime`` writes (rounding at the millisecond and second
    boundaries included); :func:`log_line` makes the record ``Logger.log`` makes (the caller's file,
    line and function), and the formatter's line is the same whichever made it."""
    import datetime as dt

    import numpy as np

    from fedstats.service.http.logline import JsonLine, log_line, utc_stamp

    def reference(t: float) -> str:
        text = dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="milliseconds")
        return text.replace("+00:00", "Z")

    rng = np.random.default_rng(40)
    base = 1_796_000_000.0  # 2026
    stamps = [base + float(x) for x in rng.uniform(0, 10**6, 2000)]
    stamps += [base + k + f for k in range(3) for f in (0.0, 0.0004995, 0.0005, 0.9994999, 0.9995)]
    stamps += [
        base + 0.9999994,
        base + 0.9999995,
        base + 0.9999996,
        base + 1.0 - 2e-7,
        0.0,
        59.9999999,
    ]
    stamps += [float(np.nextafter(base + 1.0, 0.0)), 1e9 + 0.123456, 4102444799.9999996]
    assert [utc_stamp(t) for t in stamps] == [reference(t) for t in stamps]
    assert [utc_stamp(t) for t in reversed(stamps)] == [reference(t) for t in reversed(stamps)]

    logger = logging.getLogger("fedstats.test_log_line")
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    keep = Keep()
    logger.addHandler(keep)
    logger.setLevel(logging.INFO)
    try:
        line = JsonLine({"event": "request", "path": "/livez", "status": 200})

        def both() -> None:
            logger.log(logging.INFO, line)
            log_line(logger, logging.INFO, line)

        both()
        logger.setLevel(logging.WARNING)  # a filtered logger: the caller checks isEnabledFor
        logger.log(logging.INFO, line)
    finally:
        logger.removeHandler(keep)
    standard, fast = seen
    for field in ("name", "levelno", "pathname", "filename", "module", "funcName", "msg", "args"):
        assert getattr(fast, field) == getattr(standard, field), field
    assert fast.lineno == standard.lineno + 1 and fast.funcName == "both"
    fmt = JsonLogFormatter()
    fast.created, fast.msecs = standard.created, standard.msecs
    assert fmt.format(fast) == fmt.format(standard)
    out = json.loads(fmt.format(standard))
    assert list(out) == ["ts", "level", "logger", "event", "path", "status"]
    assert out["ts"] == reference(standard.created)


def test_the_server_says_where_it_listens_and_logs_json(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [*FEDSTATS, "server", "--db", f"sqlite:///{tmp_path / 's.db'}", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "listening on" in line:
                break
        assert any(f"listening on http://127.0.0.1:{port}" in x for x in lines), lines
        assert any("plain HTTP" in x for x in lines)
        import httpx

        assert (
            httpx.get(f"http://127.0.0.1:{port}/v1/admin/runs/abc", timeout=10).status_code == 401
        )
    finally:
        proc.terminate()
        out = proc.communicate(timeout=20)[1]
    logged = [json.loads(x) for x in (lines + out.splitlines()) if x.startswith("{")]
    request = next(e for e in logged if e.get("event") == "request")
    assert request["path"] == "/v1/admin/runs/{run_id}" and request["status"] == 401
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", e["ts"]) for e in logged)


def test_a_streamed_body_past_the_limit_is_a_413_on_admin_and_device_endpoints(
    server: Server,
) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the size is learnt while reading
        yield b'{"task_id": "'
        for _ in range(40):
            yield b"a" * 65536
        yield b'"}'

    before = server.metrics().get(413, 0)
    got = server.http.post("/v1/admin/runs", content=chunks(), headers=server.admin)
    assert got.status_code == 413, got.text
    got = server.http.post("/v1/client/runs/r/checkin", content=chunks())
    assert got.status_code == 413, got.text
    assert server.metrics().get(413, 0) == before + 2
