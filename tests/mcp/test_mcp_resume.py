"""Resumable streams over Streamable HTTP: an SSE answer carries event ids, opens with a
priming event holding a ``retry`` field, and a client that reconnects with
``Last-Event-ID`` gets what followed that event on its stream (gitstate/mcp/events.py)."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from tests.helpers import HttpServer

PROTOCOL = "2025-11-25"  # priming events come with this revision of the protocol
ACCEPT = {"Accept": "application/json, text/event-stream",
          "Content-Type": "application/json", "MCP-Protocol-Version": PROTOCOL}


def _post(port: int, body: dict[str, object], session: str | None = None,
          extra: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/mcp", body=json.dumps(body).encode(), headers={
            **ACCEPT, **({"mcp-session-id": session} if session else {}), **(extra or {})})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
    finally:
        conn.close()


def _events(text: str) -> list[dict[str, str]]:
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(":")
            fields[name] = fields.get(name, "") + value.strip()
        if fields:
            out.append(fields)
    return out


@pytest.fixture
def server(tmp_path: Path) -> HttpServer:
    with StateRepo.init(tmp_path / "agent") as repo:
        repo.set("stop_loss.2317", 262, "the 09:04 rule")
    srv = HttpServer(tmp_path / "agent")
    yield srv  # type: ignore[misc]
    srv.stop()


def test_sse_answers_carry_ids_a_retry_and_replay_after_a_lost_connection(
        server: HttpServer) -> None:
    status, headers, text = _post(server.port, {
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "resume-test", "version": "1"}}})
    assert status == 200, text
    session = headers["mcp-session-id"]
    _post(server.port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    status, headers, text = _post(server.port, {"jsonrpc": "2.0", "id": 2,
                                                "method": "tools/list"}, session)
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), text
    events = _events(text)
    assert all(e.get("id") for e in events), events
    assert any("retry" in e for e in events), events  # the priming event
    priming = next(e for e in events if "retry" in e)
    assert int(priming["retry"]) > 0
    answer = next(e for e in events if "data" in e and e["data"].startswith("{"))
    assert json.loads(answer["data"])["id"] == 2
    # reconnect as after a cut: Last-Event-ID of the priming event replays the answer
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", "/mcp", headers={**ACCEPT, "mcp-session-id": session,
                                             "Last-Event-ID": priming["id"]})
        resp = conn.getresponse()
        assert resp.status == 200
        line = b""
        while b"\"id\":2" not in line.replace(b" ", b""):
            chunk = resp.fp.readline()
            assert chunk, "the stream ended without the replayed answer"
            line += chunk
    finally:
        conn.close()


def test_event_ids_are_unguessable_tokens(server: HttpServer) -> None:
    """One store serves every session, and the SDK names the standalone stream alike in
    each: an event id is what keeps one session's events from another's, so ids are random
    128-bit tokens (a counter let a second session replay the first's answers)."""
    ids: list[str] = []
    for n in range(2):
        status, headers, text = _post(server.port, {
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": PROTOCOL, "capabilities": {},
                "clientInfo": {"name": f"session-{n}", "version": "1"}}})
        assert status == 200, text
        session = headers["mcp-session-id"]
        _post(server.port, {"jsonrpc": "2.0", "method": "notifications/initialized"},
              session)
        _, _, text = _post(server.port, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                           session)
        ids += [e["id"] for e in _events(text) if e.get("id")]
    assert len(ids) >= 4 and len(set(ids)) == len(ids), ids
    assert all(len(i) >= 22 and not i.isdigit() for i in ids), ids  # 16 random bytes
