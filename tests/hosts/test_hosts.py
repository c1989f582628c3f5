"""Real agent hosts start gitstate's MCP server from the configurations in examples/ and
connect, without a model or a login: Claude Code (`claude mcp list`, after the approval a
project's .mcp.json needs), Gemini CLI (`gemini mcp list`, in a trusted folder) and Codex CLI
(its app-server, which `codex mcp list` never starts). Claude Code and Gemini CLI then run a
whole turn against a scripted model on their own API (tests/fake_model.py): what the hooks
inject and what a refusal looks like are read where the model reads them. The facts
docs/mcp.md reports."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from tests.helpers import npm_ci

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ROOT / "tests" / "js" / "hosts"
pytest.importorskip("mcp")
TOOLS = ("working_state_set", "working_state_clear", "working_state_handoff",
         "working_state_get", "run_get", "run_propose")


@pytest.fixture(scope="session")
def hosts() -> Path:
    problem = npm_ci(HOSTS)
    if problem:
        pytest.skip(f"the agent hosts could not be installed: {problem}")
    return HOSTS / "node_modules" / ".bin"


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A project with an agent directory at .agent and a HOME of its own; gitstate first
    on PATH, as an installed console script would be."""
    proj = tmp_path / "proj"
    with StateRepo.init(proj / ".agent") as repo:
        repo.set("stop_loss.2317", 262, "the rule")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home),
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    env.pop("GITSTATE_AGENT_DIR", None)
    return proj, env


def _run(argv: list[str], cwd: Path, env: dict[str, str],
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                          timeout=180, check=False)


@pytest.mark.slow
def test_claude_code_connects_once_approved(hosts: Path,
                                            project: tuple[Path, dict[str, str]]) -> None:
    """examples/claude-code/.mcp.json: pending approval until the folder is trusted and the
    server enabled; then connected. Started in a subdirectory, the relative .agent breaks."""
    proj, env = project
    subprocess.run(["git", "init", "-q", str(proj)], check=True)  # a project is a repository
    shutil.copy(ROOT / "examples" / "claude-code" / ".mcp.json", proj / ".mcp.json")
    claude = [str(hosts / "claude"), "mcp", "list"]
    assert "Pending approval" in _run(claude, proj, env).stdout
    (proj / ".claude").mkdir()
    (proj / ".claude" / "settings.local.json").write_text(
        json.dumps({"enabledMcpjsonServers": ["gitstate"]}))
    state = Path(env["HOME"]) / ".claude.json"
    data = json.loads(state.read_text()) if state.exists() else {}
    data["projects"] = {str(proj): {"hasTrustDialogAccepted": True}}
    state.write_text(json.dumps(data))
    out = _run(claude, proj, env)
    assert "Connected" in out.stdout, out.stdout + out.stderr
    (proj / "sub").mkdir()
    assert "Failed to connect" in _run(claude, proj / "sub", env).stdout
    env_abs = {**env, "GITSTATE_AGENT_DIR": str(proj / ".agent")}
    assert "Connected" in _run(claude, proj / "sub", env_abs).stdout


@pytest.mark.slow
def test_gemini_connects_only_in_a_trusted_folder(hosts: Path,
                                                  project: tuple[Path, dict[str, str]]) -> None:
    """examples/gemini/settings.json: disabled in an untrusted folder, connected once
    ~/.gemini/trustedFolders.json trusts it."""
    proj, env = project
    (proj / ".gemini").mkdir()
    text = (ROOT / "examples" / "gemini" / "settings.json").read_text()
    (proj / ".gemini" / "settings.json").write_text(
        text.replace("/srv/agents/trader", str(proj / ".agent")))
    gemini = [str(hosts / "gemini"), "mcp", "list"]
    untrusted = _run(gemini, proj, env)
    assert "Disabled" in untrusted.stdout + untrusted.stderr
    trusted = Path(env["HOME"]) / ".gemini"
    trusted.mkdir(exist_ok=True)
    (trusted / "trustedFolders.json").write_text(json.dumps({str(proj): "TRUST_FOLDER"}))
    out = _run(gemini, proj, env)  # (it prints the list on stderr)
    assert "Connected" in out.stdout + out.stderr, out.stdout + out.stderr


def test_codex_app_server_lists_the_tools(hosts: Path,
                                          project: tuple[Path, dict[str, str]]) -> None:
    """examples/codex/config.toml: `codex mcp list` only parses it; the app-server starts
    the server and reports its six tools and version."""
    proj, env = project
    codex_home = Path(env["HOME"]) / ".codex"
    codex_home.mkdir()
    text = (ROOT / "examples" / "codex" / "config.toml").read_text()
    (codex_home / "config.toml").write_text(text.replace("/srv/agents/trader",
                                                         str(proj / ".agent")))
    env = {**env, "CODEX_HOME": str(codex_home)}
    listed = _run([str(hosts / "codex"), "mcp", "list"], proj, env)
    assert "gitstate" in listed.stdout and "enabled" in listed.stdout, listed.stdout
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"clientInfo": {"name": "gitstate-tests", "title": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "mcpServerStatus/list", "params": {}},
    ]
    proc = subprocess.Popen([str(hosts / "codex"), "app-server"], cwd=proj, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for request in requests:
            proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        status = None
        for line in proc.stdout:
            message = json.loads(line)
            if message.get("id") == 2:
                status = message
                break
    finally:
        proc.kill()
        proc.wait()
    assert status is not None and "result" in status, status
    server = next(s for s in status["result"]["data"] if s["name"] == "gitstate")
    assert server["serverInfo"]["name"] == "gitstate" and server["serverInfo"]["version"]
    assert set(server["tools"]) == set(TOOLS)


def _gemini_env(env: dict[str, str], url: str) -> dict[str, str]:
    """Gemini CLI against the scripted model: an API key it never checks, the model's
    address, the workspace trusted (its headless form of the trust dialog)."""
    home = Path(env["HOME"]) / ".gemini"
    home.mkdir(exist_ok=True)
    (home / "settings.json").write_text(json.dumps(
        {"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    return {**env, "GEMINI_API_KEY": "not-a-key", "GOOGLE_GEMINI_BASE_URL": url,
            "GEMINI_CLI_TRUST_WORKSPACE": "true", "NO_COLOR": "1"}


STALE = {"key": "stop_loss.2317", "value": 250, "reason": "tighten the stop",
         "expected_value": 999}
SCRIPT = [{"call": "working_state_set", "args": STALE},
          {"call": "working_state_set", "args": {**STALE, "expected_value": 262}},
          {"text": "stop tightened to 250"}]
"""One scripted turn for every host: a compare-and-swap against a stale value (refused),
the retry against what HEAD holds (written), a closing text."""


def _install(host: str, proj: Path, env: dict[str, str]) -> None:
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    out = _run([sys.executable, "-m", "gitstate", "--agent-dir", ".agent", "install", host],
               proj, env)
    assert out.returncode == 0, out.stderr


def _assert_the_turn(proj: Path, first: str, refused: str, done: str) -> None:
    """What the model saw at each step, and what the state holds after."""
    assert "stop_loss.2317 = 262" in first  # the section, put there by the hooks
    for part in ("cas.mismatch", "HEAD holds 262", "next:", "expected_value set to the "
                 "current value (262)"):  # the refusal as the model read it
        assert part in refused, refused
    assert re.search(r'"ok":\s*true', done.replace('\\"', '"'))  # the success it read
    with StateRepo(proj / ".agent") as repo:
        entry = repo.state().keys["stop_loss.2317"]
    assert (entry.value, entry.actor, entry.reason) == (250, "agent", "tighten the stop")
    log = subprocess.run(["git", "-C", str(proj / ".agent" / "state"), "log", "-1",
                          "--format=%B"], capture_output=True, text=True, check=True)
    assert "tighten the stop" in log.stdout  # the commit message is the reason


@pytest.mark.slow
def test_claude_code_turn_injects_the_section_and_reads_the_refusal(
        hosts: Path, project: tuple[Path, dict[str, str]]) -> None:
    """`gitstate install claude-code` in a trusted folder; a whole `claude -p` turn against
    a scripted Messages API: the SessionStart and UserPromptSubmit hooks put the section in
    front of the model, Claude Code's own MCP client hands the refusal back as a tool result
    the model can act on, and the retry commits as the agent."""
    from tests.fake_model import FakeAnthropic

    proj, env = project
    _install("claude-code", proj, env)
    state = Path(env["HOME"]) / ".claude.json"
    data = json.loads(state.read_text()) if state.exists() else {}
    data["projects"] = {str(proj): {"hasTrustDialogAccepted": True}}
    state.write_text(json.dumps(data))
    with FakeAnthropic(SCRIPT) as model:
        out = _run([str(hosts / "claude"), "-p", "tighten my stop loss", "--allowedTools",
                    "mcp__gitstate__working_state_set"], proj,
                   {**env, "ANTHROPIC_API_KEY": "sk-ant-not-a-key",
                    "ANTHROPIC_BASE_URL": model.url, "DISABLE_AUTOUPDATER": "1",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                    "ENABLE_TOOL_SEARCH": "false"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "stop tightened to 250" in out.stdout
    assert len(model.turns) == 3, [json.dumps(t)[-300:] for t in model.turns]
    first, refused, done = (json.dumps(t, ensure_ascii=False) for t in model.turns)
    _assert_the_turn(proj, first, refused, done)
    declared = {t["name"] for t in model.turns[0]["tools"]}
    assert {f"mcp__gitstate__{n}" for n in TOOLS} <= declared


@pytest.mark.slow
def test_gemini_turn_injects_the_section_and_reads_the_refusal(
        hosts: Path, project: tuple[Path, dict[str, str]]) -> None:
    """`gitstate install gemini` wires the server and the hooks; a whole Gemini CLI turn
    against a scripted model: the hooks put the section in front of the model, a stale
    compare-and-swap comes back to the model as a refusal it can act on (the rule, what HEAD
    holds, what to do next), and the retried call commits as the agent."""
    from tests.fake_model import FakeGemini, short, text_of

    proj, env = project
    _install("gemini", proj, env)
    with FakeGemini(SCRIPT) as model:
        out = _run([str(hosts / "gemini"), "-p", "tighten my stop loss", "--yolo"], proj,
                   _gemini_env(env, model.url))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "stop tightened to 250" in out.stdout
    first, refused, done = (text_of(t) for t in model.turns[:3])
    _assert_the_turn(proj, first, refused, done)
    assert set(TOOLS) <= {short(n) for n in FakeGemini.declared(model.turns[0])}
