"""gitstate's MCP server against clients written by others that validate what they receive:
the TypeScript SDK 1.x client (what most hosts bundle; it checks error results against the
output schema too) and the MCP Inspector CLI 2.12. Every refusal rule the tools can return,
and a success of every tool, must reach them as a readable tool result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gitstate.api.repo import StateRepo
from tests.helpers import HttpServer

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "tests" / "js"
pytest.importorskip("mcp")


def _server(agent: Path) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", "gitstate", "--agent-dir", str(agent),
                                               "mcp"],
            "env": {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", ""),
                    "GIT_CONFIG_NOSYSTEM": "1", "TZ": "UTC"}}


def run_ts_client(plan: dict[str, Any], tmp: Path) -> dict[str, Any]:
    path = tmp / f"plan-{os.urandom(4).hex()}.json"
    path.write_text(json.dumps(plan))
    out = subprocess.run(["node", str(JS / "mcp_client.mjs"), str(path)], capture_output=True,
                         text=True, timeout=180, check=False, cwd=JS)
    assert out.returncode == 0, out.stderr[-2000:]
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def run_inspector(target: Path | str, tool: str,
                  args: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """One tools/call through the Inspector CLI, to a server it starts on stdio for an
    agent directory, or to an HTTP endpoint's URL; returns (exit status, its JSON output)."""
    inspector = JS / "node_modules" / ".bin" / "mcp-inspector"
    argv = [str(inspector), "--cli"]
    if isinstance(target, Path):
        server = _server(target)
        for name, value in server["env"].items():
            argv += ["-e", f"{name}={value}"]
        argv += [server["command"], *server["args"]]
    else:
        argv.append(target)
    argv += ["--method", "tools/call", "--tool-name", tool, "--tool-args-json",
             json.dumps(args)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    text = out.stdout.strip()
    data: dict[str, Any] = json.loads(text) if text.startswith("{") else {"raw": text}
    return out.returncode, data


def run_inspector_batch(url: str, calls: list[Call], tmp: Path) -> list[tuple[int, dict[str, Any]]]:
    """Many tools/call runs of the Inspector's own CLI function (``runCli``, what its binary
    calls) in one Node process (tests/js/inspector_batch.mjs); (exit status, JSON) each."""
    path = tmp / f"inspector-{os.urandom(4).hex()}.json"
    path.write_text(json.dumps({"url": url, "calls": [{"tool": c[0], "arguments": c[1]}
                                                      for c in calls]}))
    out = subprocess.run(["node", str(JS / "inspector_batch.mjs"), str(path)],
                         capture_output=True, text=True, timeout=300, check=False, cwd=JS)
    assert out.returncode == 0, out.stderr[-2000:]
    results = []
    for entry in json.loads(out.stdout):
        text = entry["output"].strip()
        results.append((entry["code"], json.loads(text) if text.startswith("{")
                        else {"raw": text}))
    return results


def _fill(repo: StateRepo, n: int) -> None:
    for i in range(n):
        repo.set(f"k{i:02d}", i, f"filler {i}")


# (tool, arguments, expected rule or None for a success, text the result must carry)
Call = tuple[str, dict[str, Any], "str | None", tuple[str, ...]]
AT_CAP: list[Call] = [
    ("working_state_set", {"key": "stop_loss.2317", "value": 254, "reason": "patrol",
                           "expected_value": 250}, "cas.mismatch",
     ("262", "the 09:04 rule", "set 2026-")),
    ("working_state_set", {"key": "stop_loss.2317", "value": 1, "reason": "r",
                           "expect_absent": True}, "cas.mismatch", ("262",)),
    ("working_state_set", {"key": "new_key", "value": 1, "reason": "r"}, "keys.cap",
     ("stop_loss.2317", "k00", "next: retire a key", "working_state_clear")),
    ("working_state_set", {"key": "bad key!", "value": 1, "reason": "r"}, "key.charset", ()),
    ("working_state_set", {"key": "STOP_LOSS.2317", "value": 1, "reason": "r"}, "key.case",
     ("stop_loss.2317",)),
    ("working_state_set", {"key": "stop_l0ss.2317", "value": 1, "reason": "r"},
     "key.confusable", ("stop_loss.2317",)),
    ("working_state_set", {"key": "k01", "value": "262\u202e001", "reason": "r"},
     "value.invisible", ()),
    ("working_state_set", {"key": "k01", "value": " ", "reason": "r"}, "value.empty", ()),
    ("working_state_set", {"key": "k01", "value": 1, "reason": "  "}, "reason.empty", ()),
    ("working_state_set", {"key": "k01", "value": 1, "reason": "x" * 3500},
     "section.max_bytes", ("section_max_bytes",)),
    ("working_state_clear", {"key": "absent_key", "reason": "r"}, "clear.absent", ()),
    ("working_state_clear", {"key": "stop_loss.2317", "reason": "r", "expected_value": 1},
     "cas.mismatch", ("262",)),
    ("working_state_handoff", {"note": "done", "status": "complete"}, "handoff.complete", ()),
    ("working_state_handoff", {"note": "n", "status": "continue"}, "handoff.continue", ()),
    ("working_state_handoff", {"note": "n", "status": "blocked"}, "handoff.blocked", ()),
    ("working_state_handoff", {"next_steps": "go"}, "handoff.status_required", ()),
    ("working_state_handoff", {"note": "n", "status": "complete", "evidence": "e" * 20_000},
     "handoff.max_bytes", ("16384",)),
    ("working_state_handoff", {"note": "   "}, "handoff.empty", ()),
    ("working_state_set", {"key": "k01", "value": "x" * 1001, "reason": "r"},
     "value.too_long", ()),
    ("working_state_set", {"key": "k01", "value": "a\x1b[2J", "reason": "r"},
     "value.control", ()),
    ("working_state_set", {"key": "k01", "value": "2\u03366\u03362\u0336", "reason": "r"},
     "value.combining", ()),
    ("working_state_set", {"key": "k" * 120 + "..x", "value": 1, "reason": "r"}, "key.dots",
     ()),
    ("working_state_set", {"key": "k01", "value": 1, "reason": "a\n--- b"},
     "reason.divider", ()),
    ("working_state_set", {"key": "k01", "value": 1, "reason": "ok\u202e"},
     "reason.invisible", ()),
    ("working_state_set", {"key": "k01", "value": 1, "reason": "ok \x07"}, "reason.control",
     ()),
    ("working_state_handoff", {"note": "n", "status": "blocked", "blocker": "b" * 9000},
     "injection.max_chars", ("Shorten the handoff",)),
]
SCHEMA = """\
version: 1
unknown_keys: reject
keys:
  mode: {type: enum, values: [calm, alert], writers: [agent], nullable: false}
  ticket: {type: string, pattern: "^T-[0-9]+$", writers: [agent]}
  level: {type: integer, min: 0, max: 10, writers: [agent]}
  owner: {type: string, writers: [runtime]}
"""
TYPED: list[Call] = [
    ("working_state_set", {"key": "mode", "value": "panic", "reason": "r"}, "schema.enum",
     ("calm",)),
    ("working_state_set", {"key": "ticket", "value": "X-1", "reason": "r"}, "schema.pattern",
     ()),
    ("working_state_set", {"key": "level", "value": 11, "reason": "r"}, "schema.range", ()),
    ("working_state_set", {"key": "level", "value": "3", "reason": "r"}, "schema.type", ()),
    ("working_state_set", {"key": "owner", "value": "me", "reason": "r"}, "schema.writer", ()),
    ("working_state_set", {"key": "nobody_declared", "value": 1, "reason": "r"},
     "schema.unknown_key", ()),
    ("working_state_clear", {"key": "mode", "reason": "r"}, "schema.not_nullable", ()),
]
SUCCESSES: list[Call] = [
    ("working_state_get", {}, None, ("stop_loss.2317",)),
    ("working_state_set", {"key": "stop_loss.2317", "value": 254, "reason": "patrol",
                           "expected_value": 262, "request_id": "r-1"}, None, ("254",)),
    ("working_state_set", {"key": "stop_loss.2317", "value": 254, "reason": "patrol",
                           "expected_value": 262, "request_id": "r-1"}, None, ("replayed",)),
    ("working_state_clear", {"key": "k00", "reason": "no longer needed"}, None, ()),
    ("working_state_handoff", {"note": "watch the open"}, None, ()),
    ("working_state_handoff", {"note": "n", "status": "continue",
                               "next_steps": "re-check at 09:30"}, None, ()),
]


@pytest.fixture
def at_cap(tmp_path: Path) -> Path:
    """32 live keys, stop_loss.2317 = 262 among them."""
    agent = tmp_path / "agent"
    with StateRepo.init(agent) as repo:
        repo.set("stop_loss.2317", 262, "the 09:04 rule")
        _fill(repo, 31)
    return agent


@pytest.fixture
def typed(tmp_path: Path) -> Path:
    """A schema with an agent-writable enum (not nullable), pattern and range keys, and a
    runtime-only key."""
    agent = tmp_path / "agent3"
    with StateRepo.init(agent) as repo:
        repo.set_schema(SCHEMA, "typed state for the client tests")
    with StateRepo(agent, writer="agent") as repo:
        repo.set("mode", "calm", "start calm")
    return agent


@pytest.fixture
def stored_cap(tmp_path: Path) -> Path:
    """Expired keys fill the stored-key limit (36) below the live cap."""
    agent = tmp_path / "agent2"
    (agent).mkdir()
    (agent / "config.toml").write_text("[gitstate]\nmax_stored_keys = 36\n")
    past = datetime.now(UTC) - timedelta(days=2)
    with StateRepo.init(agent, clock=lambda: past) as repo:
        for i in range(6):
            repo.set(f"old{i}", i, "expired long ago", ttl_hours=1)
    with StateRepo(agent) as repo:
        _fill(repo, 30)
    return agent


def _check(result: dict[str, Any], rule: str | None, texts: tuple[str, ...],
           what: str) -> None:
    assert not result["threw"], f"{what}: the client threw: {result.get('error')}"
    structured = result["structuredContent"]
    if rule is None:
        assert not result["isError"], (what, result["text"])
        assert structured["ok"] is True
    else:
        assert result["isError"], what
        assert structured["ok"] is False and structured["error"] == rule, (what, structured)
        assert result["text"].startswith(f"[{rule}] "), result["text"]
    for text in texts:
        assert text in result["text"], (what, text, result["text"])


@pytest.mark.slow
def test_typescript_sdk_reads_every_refusal_and_success(node_modules: Path, at_cap: Path,
                                                        stored_cap: Path, typed: Path,
                                                        tmp_path: Path) -> None:
    """TypeScript SDK 1.x: every refusal and every tool's success is a readable result."""
    calls = AT_CAP + SUCCESSES
    out = run_ts_client({**_server(at_cap), "calls": [{"tool": t, "arguments": a}
                                                        for t, a, _, _ in calls]}, tmp_path)
    assert out["server"]["name"] == "gitstate" and out["server"]["version"]
    assert {t["name"] for t in out["tools"]} == {"working_state_set", "working_state_clear",
                                                "working_state_handoff", "working_state_get",
                                                "run_get", "run_propose"}
    for (tool, args, rule, texts), result in zip(calls, out["results"], strict=True):
        _check(result, rule, texts, f"{tool} {args}")
    stored = run_ts_client({**_server(stored_cap), "calls": [
        {"tool": "working_state_set", "arguments": {"key": "brand_new", "value": 1,
                                                   "reason": "r"}}]}, tmp_path)
    _check(stored["results"][0], "keys.stored_cap", ("old0",), "stored cap")
    schema = run_ts_client({**_server(typed), "calls": [{"tool": t, "arguments": a}
                                                        for t, a, _, _ in TYPED]}, tmp_path)
    for (tool, args, rule, texts), result in zip(TYPED, schema["results"], strict=True):
        _check(result, rule, texts, f"{tool} {args}")


def test_typescript_sdk_gets_input_errors_as_results(node_modules: Path, at_cap: Path,
                                                     tmp_path: Path) -> None:
    """Arguments the schema refuses (a ttl past 366 days, a status outside the enum) come
    back as tool errors without structured content, which validating clients accept."""
    out = run_ts_client({**_server(at_cap), "calls": [
        {"tool": "working_state_set", "arguments": {"key": "k01", "value": 1, "reason": "r",
                                                   "ttl_hours": 100000}},
        {"tool": "working_state_handoff", "arguments": {"note": "n", "status": "done"}},
    ]}, tmp_path)
    for result in out["results"]:
        assert not result["threw"] and result["isError"], result


def test_inspector_reads_every_refusal_and_success(node_modules: Path, at_cap: Path,
                                                   stored_cap: Path, typed: Path,
                                                   tmp_path: Path) -> None:
    """MCP Inspector CLI 2.12: the same calls. The issue's own command runs over stdio (the
    binary, a server per call); the rest go to one HTTP server per state through the same
    CLI code run in one Node process (a Node start per call costs about 1.5 s here).
    Inspector exits 5 for a tool error it could read, and 1 when a result broke the output
    schema."""
    stdio_code, stdio = run_inspector(at_cap, *AT_CAP[0][:2])
    results: list[tuple[Call, int, dict[str, Any]]] = [(AT_CAP[0], stdio_code, stdio)]
    for agent, calls in ((at_cap, AT_CAP[1:] + SUCCESSES), (typed, TYPED), (stored_cap, [
            ("working_state_set", {"key": "brand_new", "value": 1, "reason": "r"},
             "keys.stored_cap", ("old0",))])):
        server = HttpServer(agent)
        try:
            # refusals write nothing, so they go first; the successes follow in order
            ordered = [c for c in calls if c[2] is not None] + [c for c in calls
                                                                  if c[2] is None]
            results += [(c, *r) for c, r in zip(ordered, run_inspector_batch(
                server.url, ordered, tmp_path), strict=True)]
        finally:
            server.stop()
    for (tool, args, rule, texts), code, data in results:
        what = f"{tool} {args}"
        assert "structuredContent" in data, (what, code, data)
        text = "\n".join(c["text"] for c in data["content"] if c["type"] == "text")
        if rule is None:
            assert code == 0 and data["structuredContent"]["ok"] is True, (what, data)
        else:
            assert code == 5 and data["isError"] is True, (what, code, data)
            assert data["structuredContent"]["error"] == rule, (what, data)
        for snippet in texts:
            assert snippet in text, (what, snippet, text)


def test_inspector_strict_lint_accepts_the_tool_schemas(node_modules: Path,
                                                        at_cap: Path) -> None:
    """Inspector's --strict portability lint passes on tools/list without one warning."""
    inspector = node_modules / ".bin" / "mcp-inspector"
    server = _server(at_cap)
    argv = [str(inspector), "--cli", "--strict"]
    for name, value in server["env"].items():
        argv += ["-e", f"{name}={value}"]
    out = subprocess.run([*argv, server["command"], *server["args"], "--method",
                          "tools/list"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Warning" not in out.stderr and "Issue:" not in out.stderr, out.stderr[-3000:]


def test_typescript_sdk_takes_structured_values(node_modules: Path, tmp_path: Path) -> None:
    """Arrays and objects as JSON text in `value_json` and `expected_json`: the TypeScript
    SDK validates every result against the output schema, the structured compare-and-swap
    refusal (carrying the expected structure and the current one) included."""
    agent = tmp_path / "agent"
    StateRepo.init(agent).close()
    facts = {"window_ok": True, "sources": ["帳務", "風控"], "n": 262}
    out = run_ts_client({**_server(agent), "calls": [
        {"tool": "working_state_set", "arguments": {"key": "facts",
                                                   "value_json": json.dumps(facts),
                                                   "reason": "checked"}},
        {"tool": "working_state_set", "arguments": {
            "key": "facts", "value_json": '{"window_ok": false}', "reason": "swap",
            "expected_json": json.dumps({"n": 262.0, "sources": ["帳務", "風控"],
                                         "window_ok": True})}},
        {"tool": "working_state_set", "arguments": {
            "key": "facts", "value_json": "[1]", "reason": "stale",
            "expected_json": json.dumps(facts)}},
        {"tool": "working_state_set", "arguments": {"key": "plan",
                                                   "value_json": "[[[[[[[[[1]]]]]]]]]",
                                                   "reason": "too deep"}},
        {"tool": "working_state_get", "arguments": {}},
    ]}, tmp_path)
    first, swapped, stale, deep, got = out["results"]
    _check(first, None, (), "set a structure")
    _check(swapped, None, (), "structural compare-and-swap")
    _check(stale, "cas.mismatch", ('{"window_ok":false}',), "stale structure")
    assert stale["structuredContent"]["current"]["value"] == {"window_ok": False}
    _check(deep, "value.depth", ("plan[0]",), "too deep")
    assert got["structuredContent"]["keys"]["facts"]["value"] == {"window_ok": False}


def test_typescript_sdk_reads_and_proposes_run_events(node_modules: Path, tmp_path: Path) -> None:
    """run_get and run_propose: the agent reads a run and proposes events; the runtime's rules
    answer, and every result (refusals included) passes the SDK's output-schema check."""
    agent = tmp_path / "agent"
    with StateRepo.init(agent) as repo:
        repo.runs.start("refund-O-104", description="refund order O-104",
                        criteria=["refund issued"], risk="high", reason="customer asked")
    out = run_ts_client({**_server(agent), "calls": [
        {"tool": "run_get", "arguments": {"run_id": "refund-O-104"}},
        {"tool": "run_propose", "arguments": {"run_id": "refund-O-104", "reason": "ask", "event": {
            "type": "question_opened", "question": "which account?"}}},
        {"tool": "run_propose", "arguments": {"run_id": "refund-O-104", "reason": "done?",
                                             "event": {"type": "completed", "result_ref": "x",
                                                       "criteria_evidence": [{
                                                           "criterion": "refund issued",
                                                           "evidence_ref": "pay:1"}]}}},
        {"tool": "run_propose", "arguments": {"run_id": "refund-O-104", "reason": "spend",
                                             "event": {"type": "budget_spent", "tokens": 5}}},
        {"tool": "run_get", "arguments": {"run_id": "no-such-run"}},
    ]}, tmp_path)
    names = {t["name"] for t in out["tools"]}
    assert {"run_get", "run_propose"} <= names
    got, asked, done, spend, missing = out["results"]
    _check(got, None, (), "run_get")
    assert got["structuredContent"]["goal"]["risk_class"] == "high"
    _check(asked, None, (), "question_opened")
    assert asked["structuredContent"]["state"]["open_questions"] == ["which account?"]
    _check(done, "run.criteria_unmet", ("refund issued",), "completed without evidence")
    _check(spend, "input.invalid", ("budget_spent", "question_opened"),
           "budget_spent by the agent: not an event the schema offers")
    _check(missing, "run.unknown", (), "unknown run")
