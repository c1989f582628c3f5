"""`gitstate mcp --http` against a client that holds what it opens, over real sockets: 300
requests sent halfway (and connections that send nothing), sessions opened past the cap,
sessions left idle, and the server's stderr read for the session ids (each one a bearer
credential for its session)."""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from tests.helpers import HttpServer

pytest.importorskip("mcp")

INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"}}})
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    with StateRepo.init(tmp_path / "agent") as repo:
        repo.set("stop_loss.2317", 262, "the 09:04 rule")
    return tmp_path / "agent"


def call(port: int, body: str, session: str | None = None, method: str = "POST"
         ) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, "/mcp", body=body.encode() if body else None, headers={
            **HEADERS, **({"mcp-session-id": session} if session else {})})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
    finally:
        conn.close()


def open_session(port: int) -> str:
    status, headers, text = call(port, INIT)
    assert status == 200, (status, text)
    session = headers["mcp-session-id"]
    assert call(port, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                session)[0] == 202
    return session


def tools_list(port: int, session: str) -> int:
    return call(port, json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
                session)[0]


@pytest.fixture
def limited(agent: Path) -> Iterator[HttpServer]:
    srv = HttpServer(agent, "--request-timeout", "1", "--max-sessions", "5",
                     "--session-idle", "2")
    yield srv
    srv.stop()


def _closed_within(conn: socket.socket, deadline: float) -> bytes | None:
    """What the server sent before it closed ``conn``; None if still open at ``deadline``."""
    got = b""
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([conn], [], [], left)[0]:
            return None
        try:
            chunk = conn.recv(65536)
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk
    return None


def test_stalled_requests_are_closed_after_the_timeout(limited: HttpServer) -> None:
    """300 connections: 100 with half a request head, 100 with a whole head and half the
    body it announces, 100 that send nothing. All are closed by the server after the
    request timeout (1 s here), the two halves with a 408 that names the setting; before,
    all 300 were still open after 10 s. Meanwhile and after, honest calls are served."""
    port = limited.port
    head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n")
    halves = {"head": head.encode()[:-20],
              "body": (head + "Content-Length: 1000\r\n\r\n").encode() + INIT.encode()[:40],
              "silent": b""}
    conns: list[tuple[str, socket.socket]] = []
    started = time.monotonic()
    for kind, data in halves.items():
        for _ in range(100):
            conn = socket.create_connection(("127.0.0.1", port), timeout=30)
            if data:
                conn.sendall(data)
            conns.append((kind, conn))
    assert open_session(port)  # served while 300 connections stall
    try:
        deadline = started + 1 + 8  # the timeout, and time for a loaded machine
        for kind, conn in conns:
            got = _closed_within(conn, deadline)
            assert got is not None, f"a {kind} connection still open after {deadline - started:.0f} s"
            if kind != "silent":
                assert got.startswith(b"HTTP/1.1 408"), (kind, got[:80])
                assert b"--request-timeout" in got and b"http.request_timeout" in got
        assert time.monotonic() - started < 1 + 8
    finally:
        for _, conn in conns:
            conn.close()
    assert open_session(port)


def test_a_slow_request_within_the_timeout_is_served(limited: HttpServer) -> None:
    """The deadline is per request, not per read: a body sent in three parts within the
    second arrives; so do keep-alive requests one after another on one connection."""
    body = INIT.encode()
    with socket.create_connection(("127.0.0.1", limited.port), timeout=30) as conn:
        conn.sendall((f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{limited.port}\r\n"
                      "Content-Type: application/json\r\n"
                      "Accept: application/json, text/event-stream\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n").encode())
        for part in (body[:20], body[20:60], body[60:]):
            time.sleep(0.2)
            conn.sendall(part)
        assert conn.recv(65536).startswith(b"HTTP/1.1 200")
    keep = http.client.HTTPConnection("127.0.0.1", limited.port, timeout=30)
    try:
        for _ in range(3):
            keep.request("POST", "/mcp", body=INIT.encode(), headers=HEADERS)
            response = keep.getresponse()
            response.read()
            assert response.status == 200
            time.sleep(0.6)  # idle between requests: uvicorn's keep-alive, not the deadline
    finally:
        keep.close()


def test_sessions_are_capped_and_expire(limited: HttpServer) -> None:
    """--max-sessions 5: the sixth initialize is refused with a message that names the
    setting; the five still work; DELETE frees a place at once; --session-idle 2 ends the
    idle ones (their ids then answer 404) and new sessions open. No session id reaches
    stderr, whatever happened to the session."""
    port = limited.port
    sessions = [open_session(port) for _ in range(5)]
    status, _, text = call(port, INIT)
    assert status == 503, (status, text)
    error = json.loads(text)["error"]
    assert "--max-sessions 5" in error["message"] and error["data"]["rule"] == \
        "mcp.sessions_full"
    assert all(tools_list(port, s) == 200 for s in sessions)
    assert call(port, "", sessions[0], "DELETE")[0] == 200
    sessions.append(open_session(port))  # the place DELETE freed
    assert call(port, "", "0" * 32)[0] in (400, 404)  # an id the server never gave
    time.sleep(4)  # every session idle past --session-idle 2
    for session in sessions[1:]:
        assert tools_list(port, session) == 404
    fresh = [open_session(port) for _ in range(5)]
    assert all(tools_list(port, s) == 200 for s in fresh)
    limited.stop()
    log = limited.log
    assert "gitstate: MCP over Streamable HTTP" in log
    for session in [*sessions, *fresh]:
        assert session not in log, log


def test_the_log_format_withholds_session_ids() -> None:
    """The server's stderr handler (mcp_http.RedactingFormatter), fed the SDK's own loggers
    at every level it logs ids (info: created, idle; error: crashed, with a traceback):
    no id survives, in either form the SDK prints (uuid4 hex, or dashed)."""
    import io
    import logging
    import uuid

    from gitstate.mcp.http import RedactingFormatter

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(RedactingFormatter("%(levelname)s: %(name)s: %(message)s"))
    logger = logging.getLogger("mcp.server.streamable_http_manager")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    ids = [uuid.uuid4().hex, uuid.uuid4().hex, str(uuid.uuid4())]
    try:
        logger.info(f"Created new transport with session ID: {ids[0]}")
        logger.info(f"Session {ids[1]} idle timeout")
        try:
            raise RuntimeError(f"session {ids[2]} broke")
        except RuntimeError:
            logger.exception(f"Session {ids[2]} crashed")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    text = out.getvalue()
    assert text.count("<session id>") == 4 and "Traceback" in text  # 2 infos, 2 in the error
    assert not any(i in text for i in ids), text
