"""Specification of the command line: forms, exit codes, output (in-process through the entry
point; `run_cli(..., process=True)` where the process itself is tested)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import commit_count, run_cli


def test_agent_dir_resolution(tmp_path: Path) -> None:
    """--agent-dir, then GITSTATE_AGENT_DIR, then the current directory."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli("init", agent_dir=a).returncode == 0
    assert run_cli("init", env={"GITSTATE_AGENT_DIR": str(b)}).returncode == 0
    assert (a / "state" / ".git").is_dir() and (b / "state" / ".git").is_dir()
    run_cli("set", "k", "1", "--reason", "r", env={"GITSTATE_AGENT_DIR": str(b)})
    out = run_cli("get", "--json", agent_dir=b)
    assert json.loads(out.stdout)["keys"]["k"]["value"] == 1


def test_uninitialised_directory_exit_2_and_says_init(tmp_path: Path) -> None:
    """Commands on a directory without a repository fail clearly."""
    for args in (["get"], ["set", "k", "1", "-r", "r"], ["render"], ["clear", "k", "-r", "r"]):
        out = run_cli(*args, agent_dir=tmp_path)
        assert out.returncode == 2, args
        assert "gitstate init" in out.stderr


def test_set_get_clear_round_trip(tmp_path: Path) -> None:
    """The CLI contract forms work end to end, with --json shapes as documented."""
    run_cli("init", agent_dir=tmp_path)
    out = run_cli("set", "stop_loss.2317", "262", "--reason", "跌破即出場", "--ttl-hours", "4.5",
                  "--json", agent_dir=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["new"]["value"] == 262 and result["new"]["expires_at"]
    run_cli("set", "position_cap", "96%", "-r", "cap", agent_dir=tmp_path)
    run_cli("set", "label", "262", "--string", "-r", "text", agent_dir=tmp_path)
    data = json.loads(run_cli("get", "--json", agent_dir=tmp_path).stdout)
    assert set(data) >= {"head", "keys", "handoff", "history"}
    assert data["keys"]["position_cap"]["value"] == "96%"
    assert data["keys"]["label"]["value"] == "262"
    for entry in data["keys"].values():
        assert set(entry) >= {"value", "reason", "set_at", "expires_at", "expired"}
    assert data["history"][0]["key"] == "label"
    assert run_cli("clear", "label", "-r", "gone", "--expect", "262",
                   agent_dir=tmp_path).returncode == 0
    assert commit_count(tmp_path / "state") == 5


def test_refusals_exit_1_and_name_the_rule(tmp_path: Path) -> None:
    """A rule refusal exits 1; stderr names the rule; CAS shows the current value."""
    run_cli("init", agent_dir=tmp_path)
    run_cli("set", "k", "262", "-r", "first", agent_dir=tmp_path)
    out = run_cli("set", "k", "254", "-r", "stale", "--expect", "250", agent_dir=tmp_path)
    assert out.returncode == 1
    assert "cas.mismatch" in out.stderr and "262" in out.stderr and "first" in out.stderr
    out = run_cli("set", "k", "1", "-r", "x", "--expect-absent", "--json", agent_dir=tmp_path)
    assert out.returncode == 1 and json.loads(out.stdout)["current"]["value"] == 262
    out = run_cli("set", "../k", "1", "-r", "x", agent_dir=tmp_path)
    assert out.returncode == 1 and "key.charset" in out.stderr
    out = run_cli("handoff", "--status", "complete", agent_dir=tmp_path)
    assert out.returncode == 1 and "handoff.complete" in out.stderr
    assert commit_count(tmp_path / "state") == 2


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    """Missing arguments, bad choices and bad --now are usage errors."""
    run_cli("init", agent_dir=tmp_path)
    assert run_cli("set", "k", agent_dir=tmp_path).returncode == 2
    assert run_cli("set", "k", "1", agent_dir=tmp_path).returncode == 2  # no --reason
    assert run_cli("handoff", "--status", "paused", agent_dir=tmp_path).returncode == 2
    assert run_cli("render", "--locale", "fr", agent_dir=tmp_path).returncode == 2
    assert run_cli("get", "--now", "yesterday", agent_dir=tmp_path).returncode == 2
    assert run_cli("render", "--now", "yesterday", agent_dir=tmp_path).returncode == 2
    assert run_cli("set", "k", "1", "-r", "r", "--expect", "1", "--expect-absent",
                   agent_dir=tmp_path).returncode == 2


def test_render_prints_the_section_and_nothing_else(tmp_path: Path) -> None:
    """render: empty state prints zero bytes; --now evaluates expiry at that time."""
    run_cli("init", agent_dir=tmp_path)
    out = run_cli("render", agent_dir=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
    run_cli("set", "k", "1", "-r", "r", "--ttl-hours", "1", agent_dir=tmp_path)
    out = run_cli("render", "--locale", "en", agent_dir=tmp_path)
    assert out.stdout.startswith("## Working state") and "- k = 1 (set " in out.stdout
    assert out.stderr == ""
    later = run_cli("render", "--now", "2999-01-01T00:00:00Z", agent_dir=tmp_path)
    assert later.stdout == ""


def test_handoff_cli_forms(tmp_path: Path) -> None:
    """Plain and structured handoffs; the caller is told when a note was cut."""
    run_cli("init", agent_dir=tmp_path)
    out = run_cli("handoff", "word " * 1000, agent_dir=tmp_path)
    assert out.returncode == 0 and "cut" in out.stderr
    out = run_cli("handoff", "checking", "--status", "continue", "--next-steps", "report",
                  "--json", agent_dir=tmp_path)
    assert json.loads(out.stdout)["handoff"]["next_steps"] == "report"


def test_help_teaches(tmp_path: Path) -> None:
    """--help lists the commands and shows examples for set."""
    out = run_cli("--help")
    assert out.returncode == 0
    for command in ("init", "set", "clear", "handoff", "get", "render", "demo"):
        assert command in out.stdout
    assert "--expect" in run_cli("set", "--help").stdout


def test_demo_runs_and_tells_the_story() -> None:
    """gitstate demo replays the seed's day in seconds."""
    out = run_cli("demo", "--no-keep")
    assert out.returncode == 0, out.stderr
    assert "cas.mismatch" in out.stdout
    assert "- stop_loss.2317 = 262（08-13 09:04 設；理由：跌破即出場不猶豫；有效至 08-13 13:30）" in out.stdout
    assert "跌破即出場不猶豫" in out.stdout.split("git log")[-1]
