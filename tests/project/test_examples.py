"""Every example and hook file is exercised: configs parse and start the real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.remote.githooks import PRE_COMMIT
from tests.helpers import git

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _server_specs() -> list[tuple[str, str, list[str]]]:
    specs = []
    for name, path in [("claude-code", EXAMPLES / "claude-code" / ".mcp.json"),
                       ("gemini", EXAMPLES / "gemini" / "settings.json"),
                       ("cursor", EXAMPLES / "cursor" / ".cursor" / "mcp.json")]:
        server = json.loads(path.read_text())["mcpServers"]["gitstate"]
        specs.append((name, server["command"], server["args"]))
    codex = tomllib.loads((EXAMPLES / "codex" / "config.toml").read_text())
    server = codex["mcp_servers"]["gitstate"]
    specs.append(("codex", server["command"], server["args"]))
    return specs


@pytest.mark.parametrize(("name", "command", "args"), _server_specs(),
                         ids=[s[0] for s in _server_specs()])
def test_mcp_client_configs_start_the_server(tmp_path: Path, name: str, command: str,
                                             args: list[str]) -> None:
    """Each runtime's config names `gitstate ... mcp`, and that command answers initialize."""
    assert command == "gitstate" and args[-1] == "mcp" and args[0] == "--agent-dir"
    agent = tmp_path / "agent"
    StateRepo.init(agent).close()
    argv = [sys.executable, "-m", "gitstate", "--agent-dir", str(agent), *args[2:]]
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": name, "version": "1"}}}
    out = subprocess.run(argv, input=json.dumps(init) + "\n", capture_output=True, text=True,
                         timeout=60, check=False)
    reply = json.loads(out.stdout.splitlines()[0])
    assert reply["result"]["serverInfo"]["name"] == "gitstate", out.stderr


def test_claude_code_settings_snippet_runs_the_hook(tmp_path: Path) -> None:
    """The settings snippet's command, run through a shell, prints the hook JSON."""
    settings = json.loads((ROOT / "hooks" / "claude-code" / "settings.json").read_text())
    command = settings["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    assert settings["hooks"]["SessionStart"][0]["matcher"] == "startup|resume|clear|compact"
    project = tmp_path / "project"
    with StateRepo.init(project / ".agent") as repo:
        repo.set("k", 1, "r")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "gitstate"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m gitstate \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
           "CLAUDE_PROJECT_DIR": str(project)}
    env.pop("GITSTATE_AGENT_DIR", None)
    out = subprocess.run(["sh", "-c", command], input='{"hook_event_name":"UserPromptSubmit"}',
                         capture_output=True, text=True, env=env, timeout=60, check=False)
    payload = json.loads(out.stdout)["hookSpecificOutput"]
    assert payload["hookEventName"] == "UserPromptSubmit"
    assert "- k = 1" in payload["additionalContext"]
    gateway = subprocess.run([str(ROOT / "hooks" / "gateway" / "gitstate-section"), "--locale",
                              "en"], capture_output=True, text=True, timeout=60, check=False,
                             env={**env, "GITSTATE_AGENT_DIR": str(project / ".agent")})
    assert gateway.returncode == 0 and gateway.stdout.startswith("## Working state")


def test_pre_commit_hook_is_installed_and_refuses_git_commits(repo: StateRepo) -> None:
    """init installs hooks/git/pre-commit; a git CLI commit is refused; gitstate still writes."""
    assert (ROOT / "hooks" / "git" / "pre-commit").read_text() == PRE_COMMIT
    installed = repo.state_dir / ".git" / "hooks" / "pre-commit"
    assert installed.read_text() == PRE_COMMIT and os.access(installed, os.X_OK)
    (repo.state_dir / "working_state.json").write_text("{}\n")
    git(repo.state_dir, "add", "working_state.json")
    out = git(repo.state_dir, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-m", "x")
    assert out.returncode != 0 and "refusing a commit made outside gitstate" in out.stderr
    git(repo.state_dir, "checkout", "--", ".")
    git(repo.state_dir, "reset", "-q")
    repo.set("k", 1, "gitstate's own commits run no hooks")


def test_gateway_loop_example(tmp_path: Path) -> None:
    """The gateway loop puts the section last and the stale patrol write is refused."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import gateway_loop
    finally:
        sys.path.remove(str(EXAMPLES))
    log = gateway_loop.run(tmp_path / "agent")
    assert log[0] == "wake 0: working_state_set ok"
    assert "wake 2: working_state_set refused [cas.mismatch]" in log
    from datetime import UTC, datetime

    prompt = gateway_loop.build_prompt(tmp_path / "agent", datetime(2026, 8, 13, 3, tzinfo=UTC))
    assert prompt.index("journal 08-12") < prompt.index("## 工作狀態")
    assert "- stop_loss.2317 = 262" in prompt


def test_agents_md_snippet_has_the_conventions() -> None:
    """The AGENTS.md snippet teaches the seed's conventions."""
    text = (EXAMPLES / "AGENTS.md").read_text()
    for phrase in ("working_state_set", "ttl_hours", "never re-derive", "working_state_handoff",
                   "expected_value"):
        assert phrase in text
