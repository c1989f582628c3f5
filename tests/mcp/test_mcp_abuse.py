"""MCP abuse over raw JSON-RPC on stdio: malformed messages, wrong and missing arguments,
oversized payloads and many concurrent calls each get an answer; the server stays up and the
state stays consistent."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from tests.helpers import commit_count

pytest.importorskip("mcp")


class RawServer:
    def __init__(self, agent: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gitstate", "--agent-dir", str(agent), "mcp"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=dict(os.environ), bufsize=0)
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.replies.put(json.loads(line))
            except ValueError:
                self.replies.put({"unparseable": line.decode(errors="replace")})

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def wait(self, ids: set[int], timeout: float = 60) -> dict[int, dict[str, Any]]:
        got: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        while ids - got.keys():
            reply = self.replies.get(timeout=max(0.1, deadline - time.monotonic()))
            if isinstance(reply.get("id"), int):
                got[reply["id"]] = reply
        return got

    def call(self, id_: int, tool: str, args: Any) -> dict[str, Any]:
        self.send({"jsonrpc": "2.0", "id": id_, "method": "tools/call",
                   "params": {"name": tool, "arguments": args}})
        return self.wait({id_})[id_]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _is_error(reply: dict[str, Any]) -> bool:
    return "error" in reply or bool(reply.get("result", {}).get("isError"))


def test_abuse_is_answered_and_survived(tmp_path: Path) -> None:
    """Every bad message is an error answer; good calls still work; state stays valid."""
    agent = tmp_path / "agent"
    StateRepo.init(agent).close()
    server = RawServer(agent)
    try:
        server.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "abuse", "version": "1"}}})
        assert "result" in server.wait({1})[1]
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

        server.send_raw(b"{this is not json\n")
        server.send_raw(b"[1, 2, 3]\n")
        server.send_raw(b'{"jsonrpc": "2.0", "id": 2, "method": "no/such/method"}\n')
        assert _is_error(server.wait({2})[2])

        bad_calls: list[tuple[str, Any]] = [
            ("working_state_set", {"key": "k"}),                                  # missing
            ("working_state_set", {"key": 1, "value": 1, "reason": "r"}),          # wrong type
            ("working_state_set", {"key": "k", "reason": "r",  # nested too deep
                                   "value": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {
                                       "h": [1]}}}}}}}}}),
            ("working_state_set", {"key": "k", "value": 1, "reason": "r", "ttl_hours": "x"}),
            ("working_state_set", {"key": "k", "value": "v" * 5_000_000, "reason": "r"}),
            ("working_state_set", {"key": "k", "value": 1, "reason": "r" * 2_000_000}),
            ("working_state_handoff", {"note": "x" * 3_000_000, "status": "continue",
                                       "next_steps": "n"}),
            ("working_state_clear", {"key": "k", "reason": "r", "surprise": True}),
            ("no_such_tool", {}),
            ("working_state_get", "not an object"),
        ]
        for n, (tool, args) in enumerate(bad_calls, start=10):
            reply = server.call(n, tool, args)
            assert _is_error(reply), (tool, str(args)[:80], reply)
            assert "Traceback" not in json.dumps(reply)

        # A lone surrogate is not valid JSON text for the SDK's parser: the message is
        # dropped without an answer, and the server goes on serving.
        server.send({"jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": {
            "name": "working_state_set",
            "arguments": {"key": "k", "value": "\ud800", "reason": "r"}}})
        assert not _is_error(server.call(51, "working_state_get", {}))

        # many concurrent calls: 60 pipelined writes, every one answered
        for n in range(100, 160):
            server.send({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                "name": "working_state_set",
                "arguments": {"key": f"k{n % 20}", "value": n, "reason": f"call {n}"}}})
        replies = server.wait(set(range(100, 160)), timeout=120)
        assert all(not _is_error(r) for r in replies.values())
        ok = server.call(200, "working_state_get", {})
        assert not _is_error(ok)
        assert ok["result"]["structuredContent"]["live_keys"] == 20
    finally:
        server.close()
    assert commit_count(agent / "state") == 61
    with StateRepo(agent) as repo:
        assert all(c.ok for c in integrity.verify(repo))


def test_a_line_that_is_no_message_gets_a_json_rpc_error(tmp_path: Path) -> None:
    """The SDK drops a line it cannot read as a message without a word, so the client waits
    forever; each gets its JSON-RPC error: -32700 for a line that is not JSON, -32600 with
    the request's id for JSON that is no valid message; the server goes on."""
    agent = tmp_path / "agent"
    StateRepo.init(agent).close()
    server = RawServer(agent)
    try:
        server.send_raw(b"{this is not json\n")
        parse = server.replies.get(timeout=20)
        assert parse["error"]["code"] == -32700 and parse.get("id") is None, parse
        server.send_raw(b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": "x"}\n')
        server.send_raw(b'{"jsonrpc": "1.0", "id": 8, "method": "ping"}\n')
        got = server.wait({7, 8}, timeout=20)
        assert {got[7]["error"]["code"], got[8]["error"]["code"]} == {-32600}, got
        server.send({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "after", "version": "1"}}})
        assert "result" in server.wait({9})[9]
    finally:
        server.close()
