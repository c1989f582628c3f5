"""gitstate's two HTTP endpoints, `serve` (the report's pages) and `mcp --http`, against raw
requests an attacker would send over a real socket: a page whose name rebinds to 127.0.0.1
(its Host), a foreign Origin, malformed and unsupported requests, a missing and a wrong token,
the OAuth discovery paths; and Claude Code's own `claude mcp list` over HTTP."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from tests.helpers import HttpServer, npm_ci

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-token-for-tests-only"
SECRET_VALUE = "262.5-the-value-a-page-must-not-read"


class Answer:
    def __init__(self, raw: bytes) -> None:
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self.text = self.body.decode("utf-8", "replace")

    def secured(self) -> bool:
        csp = self.headers.get("content-security-policy", "")
        return "default-src 'none'" in csp and \
            self.headers.get("x-content-type-options") == "nosniff"


def raw(port: int, request: bytes) -> Answer:
    """Send ``request`` as bytes on a fresh connection; the whole answer (to the close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(request)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return Answer(b"".join(chunks))


def get(port: int, path: str = "/", method: str = "GET", host: str | None = None,
        **headers: str) -> Answer:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}",
             "Connection: close", *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items())]
    return raw(port, ("\r\n".join(lines) + "\r\n\r\n").encode())


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    with StateRepo.init(tmp_path / "agent") as repo:
        repo.set("stop_loss.2317", SECRET_VALUE, "the 09:04 rule")
    return tmp_path / "agent"


def _serve(agent: Path, *args: str, env: dict[str, str] | None = None
           ) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-m", "gitstate", "--agent-dir", str(agent),
                             "serve", "--port", "0", *args], cwd=ROOT,
                            env={**os.environ, **(env or {})}, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    port = re.search(r":(\d+)/", line)
    assert port, line
    return proc, int(port.group(1))


@pytest.fixture
def pages(agent: Path) -> Iterator[int]:
    proc, port = _serve(agent)
    yield port
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)


def test_serve_refuses_a_rebinding_host_and_a_foreign_origin(pages: int) -> None:
    """A page at attacker.example whose name now resolves to 127.0.0.1 sends its own name as
    the Host: 421, nothing of the state in the answer (before: 200 and every value)."""
    ok = get(pages)
    assert ok.status == 200 and SECRET_VALUE in ok.text and ok.secured()
    for host in (f"attacker.example:{pages}", "attacker.example", f"127.0.0.1:{pages + 1}",
                 f"localhost.attacker.example:{pages}"):
        for method in ("GET", "HEAD"):
            refused = get(pages, "/", method, host=host)
            assert refused.status == 421, (host, method, refused.status)
            assert SECRET_VALUE not in refused.text and refused.secured()
    assert "[http.host]" in get(pages, host="attacker.example").text
    no_host = raw(pages, b"GET / HTTP/1.0\r\n\r\n")  # no Host at all
    assert no_host.status == 421 and SECRET_VALUE not in no_host.text
    for origin in ("http://attacker.example", "null", f"https://127.0.0.1:{pages}",
                   f"http://127.0.0.1:{pages}.attacker.example"):
        foreign = get(pages, Origin=origin)
        assert foreign.status == 403, origin
        assert SECRET_VALUE not in foreign.text and foreign.secured()
        assert "[http.origin]" in foreign.text
    assert get(pages, Origin=f"http://localhost:{pages}", host=f"localhost:{pages}"
               ).status == 200


def test_serve_secures_every_error(agent: Path, pages: int) -> None:
    """400, 404, 405, 501 and 500 carry the CSP and nosniff (before: none of them did)."""
    for line in (b"GET / extra HTTP/1.1", b"GET / HTTP/1.1 extra words", b"GET / HTTP/x"):
        bad = raw(pages, line + b"\r\nHost: x\r\n\r\n")  # malformed request lines
        assert bad.status == 400 and bad.secured(), line
    assert raw(pages, b"GET /\r\n\r\n").status == 421  # HTTP/0.9's form: no Host, headers all the same
    missing = get(pages, "/keys/nothing.html")
    assert missing.status == 404 and missing.secured()
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        wrote = get(pages, "/", method, Content_Length="0")
        assert wrote.status == 405 and wrote.secured(), method
        assert wrote.headers["allow"] == "GET, HEAD" and "[http.method]" in wrote.text
    brew = get(pages, "/", "BREW")
    assert brew.status == 501 and brew.secured()
    (agent / "state" / ".git" / "refs" / "heads" / "main").write_text("not a commit\n")
    broken = get(pages)
    assert broken.status == 500 and broken.secured()
    assert "Traceback" not in broken.text


def test_serve_with_a_token_tells_missing_from_wrong(agent: Path) -> None:
    proc, port = _serve(agent, "--host", "0.0.0.0", env={"GITSTATE_REPORT_TOKEN": TOKEN})
    try:
        _auth_signals(port, "/")
        assert get(port, "/", host=f"attacker.example:{port}",
                   Authorization=f"Bearer {TOKEN}").status == 421
        ok = get(port, "/", Authorization=f"Bearer {TOKEN}")
        assert ok.status == 200 and SECRET_VALUE in ok.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_serve_closes_stalled_requests(agent: Path) -> None:
    """200 connections, half sending part of a request head and half nothing, each holding
    a thread of the server: all closed, unanswered, after --request-timeout (1 s here);
    honest requests are served meanwhile and after, and stderr holds no traceback."""
    proc, port = _serve(agent, "--request-timeout", "1")
    try:
        conns = []
        started = time.monotonic()
        for i in range(200):
            conn = socket.create_connection(("127.0.0.1", port), timeout=30)
            if i % 2:
                conn.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAcc".encode())
            conns.append(conn)
        assert get(port).status == 200
        for conn in conns:
            conn.settimeout(max(started + 1 + 8 - time.monotonic(), 0.1))
            try:
                assert conn.recv(65536) == b"", "a stalled request was answered"
            except TimeoutError:
                raise AssertionError("a stalled connection still open") from None
            except ConnectionResetError:
                pass
            finally:
                conn.close()
        assert get(port).status == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        assert proc.stderr is not None
        log = proc.stderr.read()
        proc.stderr.close()
    assert "Traceback" not in log, log


def _auth_signals(port: int, path: str) -> None:
    """What hosts expect: a missing token and a wrong one each get 401 with their own message,
    the wrong one with error="invalid_token"; the OAuth paths are 404 before the token."""
    missing = get(port, path)
    assert missing.status == 401 and missing.secured()
    assert missing.headers["www-authenticate"] == 'Bearer realm="gitstate"'
    assert "[http.token_missing]" in missing.text and SECRET_VALUE not in missing.text
    for wrong in ("Bearer wrong-token-of-some-length", "bearer wrong-token-of-some-length"):
        refused = get(port, path, Authorization=wrong)
        assert refused.status == 401 and refused.secured()
        assert 'error="invalid_token"' in refused.headers["www-authenticate"]
        assert "[http.token_invalid]" in refused.text and refused.text != missing.text
    for no_bearer in ("Basic dXNlcjpwYXNz", "Bearer", "Bearer   "):  # no bearer token sent
        refused = get(port, path, Authorization=no_bearer)
        assert refused.status == 401 and "[http.token_missing]" in refused.text
        assert refused.headers["www-authenticate"] == 'Bearer realm="gitstate"'
    for scheme in ("bearer", "BEARER"):  # the scheme is case-insensitive (RFC 7235)
        assert get(port, path, Authorization=f"{scheme} {TOKEN}").status != 401
    for well_known in ("/.well-known/oauth-protected-resource",
                       "/.well-known/oauth-protected-resource/mcp",
                       "/.well-known/oauth-authorization-server",
                       "/.well-known/oauth-authorization-server/mcp",
                       "/.well-known/openid-configuration", "/register",
                       "/mcp/.well-known/openid-configuration",
                       "/.well-known/OAUTH-PROTECTED-RESOURCE", "/.WELL-KNOWN/anything"):
        for method in ("GET", "POST"):
            answer = get(port, well_known, method, Content_Length="0")
            assert answer.status == 404, (well_known, method, answer.status)
            assert "[http.no_oauth]" in answer.text and answer.secured()


@pytest.fixture
def mcp_server(agent: Path) -> Iterator[HttpServer]:
    pytest.importorskip("mcp")
    srv = HttpServer(agent, env={"GITSTATE_MCP_TOKEN": TOKEN})
    yield srv
    srv.stop()


INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"}}})


def _post_init(port: int, host: str | None = None, **headers: str) -> Answer:
    body = INIT.encode()
    lines = ["POST /mcp HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}", "Connection: close",
             "Content-Type: application/json", "Accept: application/json, text/event-stream",
             f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
    return raw(port, ("\r\n".join(lines) + "\r\n\r\n").encode() + body)


def test_mcp_http_auth_signals(mcp_server: HttpServer) -> None:
    """Before, a missing and a wrong token got the same 401 with a bare `Bearer`, and the
    OAuth paths answered 401 (Claude Code then tried dynamic client registration)."""
    _auth_signals(mcp_server.port, "/mcp")
    ok = _post_init(mcp_server.port, Authorization=f"Bearer {TOKEN}")
    assert ok.status == 200 and ok.secured()
    rebound = _post_init(mcp_server.port, Authorization=f"Bearer {TOKEN}",
                         host=f"attacker.example:{mcp_server.port}")
    assert rebound.status == 421 and rebound.secured()


@pytest.mark.slow
def test_claude_code_over_http_with_and_without_the_header(mcp_server: HttpServer,
                                                           tmp_path: Path) -> None:
    """`claude mcp list` (Claude Code 2.1, tests/js/hosts) in a HOME of its own: Connected
    with `--header "Authorization: Bearer ..."`; without it, a failure that names the
    missing header (before: "Dynamic Client Registration rejected (HTTP 401)")."""
    problem = npm_ci(ROOT / "tests" / "js" / "hosts")
    claude = ROOT / "tests" / "js" / "hosts" / "node_modules" / ".bin" / "claude"
    if problem or not claude.exists():
        pytest.skip(f"Claude Code could not be installed: {problem}")
    home, proj = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    proj.mkdir()
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE"))}
    env["HOME"] = str(home)

    def run(*args: str) -> str:
        out = subprocess.run([str(claude), "mcp", *args], cwd=proj, env=env,
                             capture_output=True, text=True, timeout=180, check=False)
        return out.stdout + out.stderr

    try:
        version = subprocess.run([str(claude), "--version"], env=env, capture_output=True,
                                 text=True, timeout=60, check=False)
    except OSError as exc:
        pytest.skip(f"claude cannot run here: {exc}")
    if version.returncode != 0:
        pytest.skip(f"claude cannot run here: {(version.stdout + version.stderr)[-300:]}")
    run("add", "--transport", "http", "bare", mcp_server.url)
    run("add", "--transport", "http", "wrong", mcp_server.url,
        "--header", "Authorization: Bearer wrong-token-of-some-length")
    run("add", "--transport", "http", "good", mcp_server.url,
        "--header", f"Authorization: Bearer {TOKEN}")
    listing = {line.split(":", 1)[0]: line for line in run("list").splitlines()
               if line.startswith(("bare:", "wrong:", "good:"))}
    assert "Connected" in listing["good"], listing
    assert "Failed to connect" in listing["bare"] and "http.no_oauth" in listing["bare"], \
        listing
    assert "HTTP 401" not in listing["bare"], listing
    assert "Connected" not in listing["wrong"] and "http.token_invalid" in listing["wrong"], \
        listing
