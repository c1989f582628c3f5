"""``gitstate install HOST --check``: the host's own listing says whether it starts this
gitstate's server (``claude mcp list``, ``gemini mcp list``, Codex's app-server,
``cursor-agent mcp list``), and what to do when it does not."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from ..core.errors import GitStateError
from .settings import SERVER

CHECK_SECONDS = 120.0


class NotConnected(GitStateError):
    """``--check``: the host's own listing does not show the server connected."""

    exit_code = 1
    rule = "install.not_connected"


def _binary(name: str, host: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise GitStateError(f"{host} is not installed here (no `{name}` on PATH): nothing "
                            "to check; the configuration is written for when it is",
                            rule="install.host_missing")
    return found


def _run(argv: list[str], cwd: Path, stdin: str | None = None,
         env: dict[str, str] | None = None, stderr: bool = True) -> str:
    """What ``argv`` printed (stdout, then stderr unless ``stderr`` is False)."""
    try:
        out = subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, text=True,
                             timeout=CHECK_SECONDS, check=False, env=env)
    except subprocess.TimeoutExpired:
        raise NotConnected(f"`{shlex.join(argv)}` did not answer within "
                           f"{CHECK_SECONDS:.0f} s") from None
    except OSError as exc:
        raise NotConnected(f"`{shlex.join(argv)}` could not start: {exc}") from None
    return out.stdout + (out.stderr if stderr else "")


def _listed(output: str, command: str) -> str:
    """The listing's line about the server, or why there is none."""
    line = next((raw.strip() for raw in output.splitlines()
                 if re.match(rf"^\W*{SERVER}:", raw.strip())), None)
    if line is None:
        raise NotConnected(f"`{command}` does not list {SERVER}: {output.strip()[-400:]}")
    return line


def check(host: str, scope: str, project: Path, home: Path) -> str:
    """Run the host's own listing; the line that says Connected, else NotConnected naming
    what the host said and what to do."""
    if host == "claude-code":
        claude = _binary("claude", "Claude Code")
        line = _listed(_run([claude, "mcp", "list"], project), "claude mcp list")
        if "Connected" in line:
            return f"claude mcp list: {line}"
        hint = ""
        if "Pending approval" in line:
            hint = (f"; the folder {project} is not trusted yet: start `claude` there once "
                    "and accept the trust dialog")
        raise NotConnected(f"claude mcp list: {line}{hint}")
    if host == "gemini":
        gemini = _binary("gemini", "Gemini CLI")
        line = _listed(_run([gemini, "mcp", "list"], project), "gemini mcp list")
        if "Connected" in line:
            return f"gemini mcp list: {line}"
        hint = (f"; trust {project} in Gemini CLI (its trust prompt, or "
                "~/.gemini/trustedFolders.json)") if "Disabled" in line else ""
        raise NotConnected(f"gemini mcp list: {line}{hint}")
    if host == "codex":
        codex = _binary("codex", "Codex CLI")
        if scope == "project":
            return _check_codex_project(codex, project)
        return _check_codex(codex, project)
    agent = _binary("cursor-agent", "Cursor's CLI")
    line = _listed(_run([agent, "mcp", "list"], project), "cursor-agent mcp list")
    if "ready" in line.lower() or "connected" in line.lower():
        return f"cursor-agent mcp list: {line}"
    raise NotConnected(f"cursor-agent mcp list: {line}")


def _check_codex(codex: str, project: Path) -> str:
    """Codex's app-server (what its TUI and IDE extensions use) starts the configured
    servers; ``mcpServerStatus/list`` reports each one's tools and server info."""
    requests: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"clientInfo": {"name": "gitstate-install", "title": "gitstate install",
                                   "version": "1"}}},
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "mcpServerStatus/list", "params": {}},
    ]
    status = _exchange([codex, "app-server"], project, requests)
    if status is None or not isinstance(status.get("result"), dict):
        raise NotConnected(f"codex app-server gave no server status: {status}")
    servers = status["result"].get("data") or []
    server = next((s for s in servers if isinstance(s, dict) and s.get("name") == SERVER),
                  None)
    if server is None:
        raise NotConnected("codex app-server does not list gitstate (is it in "
                           "$CODEX_HOME/config.toml?)")
    tools = server.get("tools") or {}
    if not tools:
        raise NotConnected(f"codex app-server lists gitstate without tools: {server}")
    info = server.get("serverInfo") or {}
    return (f"codex app-server: gitstate Connected ({info.get('name')} "
            f"{info.get('version')}, {len(tools)} tools)")


def _check_codex_project(codex: str, project: Path) -> str:
    """A project's .codex/config.toml: Codex's app-server starts only $CODEX_HOME's
    servers, so ``codex mcp list --json`` in the project says whether Codex reads the file
    (only in a trusted project), and the server is then started by the command Codex would
    run and asked for its tools (the MCP handshake over stdio)."""
    output = _run([codex, "mcp", "list", "--json"], project, stderr=False)
    try:
        listed = json.loads(output)
    except ValueError:
        raise NotConnected(f"`codex mcp list --json` printed no JSON: {output[-400:]}"
                           ) from None
    listed = listed if isinstance(listed, list) else []
    entry = next((s for s in listed if isinstance(s, dict) and s.get("name") == SERVER),
                 None)
    if entry is None:
        raise NotConnected(f"`codex mcp list` in {project} does not list {SERVER}: Codex "
                           "reads a project's .codex/config.toml only in a trusted project; "
                           "trust it (the prompt at the first `codex` there, or "
                           f'[projects."{project}"] trust_level = "trusted" in '
                           "~/.codex/config.toml)")
    if not entry.get("enabled"):
        raise NotConnected(f"codex mcp list: {SERVER} is disabled "
                           f"({entry.get('disabled_reason')})")
    transport = entry.get("transport") or {}
    argv = [str(transport.get("command")), *map(str, transport.get("args") or [])]
    tools = _stdio_tools(argv, project)
    return (f"codex mcp list: {SERVER} enabled in {project}/.codex/config.toml; its "
            f"command answers with {len(tools)} tools")


def _stdio_tools(argv: list[str], cwd: Path) -> list[str]:
    """The tool names an MCP server started as ``argv`` lists (initialize, then
    tools/list, raw JSON-RPC over its stdio)."""
    requests: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "gitstate-install", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    answer = _exchange(argv, cwd, requests)
    if answer is not None:
        tools = (answer.get("result") or {}).get("tools") or []
        return [str(t.get("name")) for t in tools if isinstance(t, dict)]
    raise NotConnected(f"`{shlex.join(argv)}` did not answer tools/list")


def _exchange(argv: list[str], cwd: Path, requests: list[dict[str, Any]]
              ) -> dict[str, Any] | None:
    """Start ``argv``, write ``requests`` as JSON-RPC lines on its stdin and return the
    answer to the last one (its id), or None when it ends or CHECK_SECONDS pass first."""
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
    except OSError as exc:
        raise NotConnected(f"`{shlex.join(argv)}` could not start: {exc}") from None
    assert proc.stdin is not None and proc.stdout is not None
    timer = threading.Timer(CHECK_SECONDS, proc.kill)
    timer.start()
    try:
        proc.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
        proc.stdin.flush()
        for raw in proc.stdout:
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("id") == requests[-1]["id"]:
                return message
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
    return None
