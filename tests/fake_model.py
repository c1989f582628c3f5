"""A scripted model behind a host's own API, so a real host (Gemini CLI, Claude Code) runs
whole turns in the suite without a login: it sends its requests, the host's hooks and MCP
client do their real work, and the test reads what reached the model.

Each step of a script is a ``{"call": NAME, "args": {...}}`` (a call of the MCP tool NAME,
by the name the host declared it under) or a ``{"text": ...}``. FakeGemini speaks the part
of the Gemini API the CLI uses (``generateContent`` and ``streamGenerateContent?alt=sse``
under ``/v1beta/models/``; requests that ask for JSON, the CLI's model router, get a fixed
classification); FakeAnthropic the Messages API (``/v1/messages``, streamed).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Scripted:
    """A local HTTP server answering POSTs with ``respond`` (the subclass's API), one
    scripted step at a time; ``turns`` are the scripted requests' bodies, in order."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script = list(script)
        self.turns: list[dict[str, Any]] = []
        self.other: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                ctype, data = fake.respond(self.path, json.loads(body or b"{}"))
                self.send_response(200)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self.send_response(404)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def respond(self, path: str, request: dict[str, Any]) -> tuple[str, bytes]:
        raise NotImplementedError

    def step(self, request: dict[str, Any]) -> dict[str, Any]:
        """The script's next step, ``request`` recorded as a turn."""
        with self.lock:
            self.turns.append(request)
            return self.script.pop(0) if self.script else {"text": "done"}

    def __enter__(self) -> Any:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeGemini(_Scripted):
    """``with FakeGemini(script) as model:`` serves on ``model.url`` until the block ends;
    ``model.turns`` holds the body of every scripted request, in order."""

    def respond(self, path: str, request: dict[str, Any]) -> tuple[str, bytes]:
        answer = self.answer(request)
        if "alt=sse" in path:
            return "text/event-stream", f"data: {json.dumps(answer)}\r\n\r\n".encode()
        return "application/json", json.dumps(answer).encode()

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        config = request.get("generationConfig") or {}
        if config.get("responseMimeType") == "application/json":  # the router's question
            part: dict[str, Any] = {"text": json.dumps(
                {"complexity_reasoning": "a short scripted turn", "complexity_score": 1})}
        else:
            step = self.step(request)
            if "call" in step:
                part = {"functionCall": {"name": self.tool_name(request, step["call"]),
                                         "args": step["args"]}}
            else:
                part = {"text": step["text"]}
        return {"candidates": [{"content": {"role": "model", "parts": [part]},
                                "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1,
                                  "totalTokenCount": 2}}

    @staticmethod
    def declared(request: dict[str, Any]) -> list[str]:
        """The function names the host declared in ``request``."""
        return [d["name"] for tool in request.get("tools") or []
                for d in tool.get("functionDeclarations") or []]

    def tool_name(self, request: dict[str, Any], name: str) -> str:
        """The declared name of MCP tool ``name`` (``name`` itself when none matches: the
        host then reports an unknown tool, which the test sees)."""
        names = [n for n in self.declared(request) if short(n) == name]
        return names[0] if names else name

def short(declared: str) -> str:
    """An MCP tool's own name from the name a host declares it under (Gemini CLI:
    ``mcp_gitstate_working_state_set``)."""
    prefix = "mcp_gitstate_"
    return declared[len(prefix):] if declared.startswith(prefix) else declared


def text_of(request: dict[str, Any]) -> str:
    """Everything a request shows the model, as one string (prompt, injected context,
    function responses)."""
    return json.dumps(request.get("contents") or [], ensure_ascii=False)


class FakeAnthropic(_Scripted):
    """The Messages API as Claude Code calls it (``POST /v1/messages``, streamed). Requests
    that declare gitstate's tools take the script's next step; a turn that began before the
    server connected calls Claude Code's WaitForMcpServers first, as a model would; the
    host's side requests (titles, quota probes) get a plain text."""

    def respond(self, path: str, request: dict[str, Any]) -> tuple[str, bytes]:
        blocks = self.answer(request)
        if request.get("stream"):
            return "text/event-stream", b"".join(_sse(kind, payload)
                                                 for kind, payload in _events(blocks))
        return "application/json", json.dumps(_message(blocks)).encode()

    def answer(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        names = [t.get("name", "") for t in request.get("tools") or []]
        if not any(n.startswith("mcp__gitstate__") for n in names):
            with self.lock:
                self.other.append(request)
            if "WaitForMcpServers" in names:  # the turn began before the server connected
                return [{"type": "tool_use", "id": f"toolu_wait{len(self.other)}",
                         "name": "WaitForMcpServers", "input": {"servers": ["gitstate"]}}]
            return [{"type": "text", "text": "ok"}]
        step = self.step(request)
        if "call" in step:
            return [{"type": "tool_use", "id": f"toolu_{len(self.turns)}",
                     "name": f"mcp__gitstate__{step['call']}", "input": step["args"]}]
        return [{"type": "text", "text": step["text"]}]

def _message(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": "fake",
            "content": blocks, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1}}


def _events(blocks: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """A message as the stream of events the Messages API sends."""
    message = _message(blocks)
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start",
                           "message": {**message, "content": [], "stop_reason": None}})]
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [("content_block_start",
                    {"type": "content_block_start", "index": i, "content_block": start}),
                   ("content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": delta}),
                   ("content_block_stop", {"type": "content_block_stop", "index": i})]
    events += [("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": message["stop_reason"],
                                            "stop_sequence": None},
                                  "usage": {"output_tokens": 1}}),
               ("message_stop", {"type": "message_stop"})]
    return events


def _sse(kind: str, payload: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(payload)}\n\n".encode()
