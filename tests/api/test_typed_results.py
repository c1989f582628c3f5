"""The Python API's listings are typed records (history entries, run summaries, a run's
goal and next action, a requested approval, a refusal's current entry), dict access to
them still answers with a DeprecationWarning, and the section's tool names can be
configured (docs/python-api.md)."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pytest

import gitstate
from gitstate import CasMismatch, ConfigError, StateRepo, refusal, to_json
from gitstate.core.records import ApprovalRequest, HistoryEntry, NextAction, RunGoal, RunSummary
from gitstate.core.results import KeyState
from tests.helpers import git, run_cli

SCHEMA = """version: 1
keys:
  k: {type: number}
approvals:
  refund: {writers: [human]}
"""


def _projection_lines(repo: StateRepo) -> list[dict[str, object]]:
    path = repo.state_dir / "working_state_history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_history_entries_are_typed_and_keep_the_projection_form(tmp_path: Path) -> None:
    with StateRepo.init(tmp_path / "a") as repo:
        repo.set("k", 1, "first", ttl_hours=2)
        repo.handoff("next: watch k")
        entries = repo.history(10)
        assert all(isinstance(e, HistoryEntry) for e in entries)
        assert dataclasses.is_dataclass(entries[0])
        assert [e.op for e in entries] == ["handoff", "set", "init"]
        assert entries[1].key == "k" and entries[1].new == 1 and entries[1].reason == "first"
        with pytest.raises(dataclasses.FrozenInstanceError):
            entries[0].op = "set"  # type: ignore[misc]
        # to_dict() is the projection's own line, field for field (and what --json prints)
        assert [e.to_dict() for e in reversed(entries)] == _projection_lines(repo)
        assert to_json(repo.get())["history"] == [e.to_dict() for e in entries]
        assert isinstance(repo.get().history[0], HistoryEntry)
        assert all(isinstance(e, HistoryEntry) for e in repo.full_history())
        assert all(isinstance(e, HistoryEntry) for e in repo.history_iter())
        logged = list(gitstate.log(repo, key="k"))
        assert [type(e) for e in logged] == [HistoryEntry] and logged[0].commit == \
            entries[1].commit
        # the CLI's log --json is unchanged: the projection's lines, newest first
        out = run_cli("log", "--json", agent_dir=tmp_path / "a")
        rows = json.loads(out.stdout)["changes"]
        assert rows == [e.to_dict() for e in entries]


def test_dict_access_still_answers_with_a_deprecation_warning(tmp_path: Path) -> None:
    with StateRepo.init(tmp_path / "a") as repo:
        repo.set("k", 1, "first")
        entry = repo.history(1)[0]
        with pytest.warns(DeprecationWarning, match=r"use \.reason"):
            assert entry["reason"] == "first"
        with pytest.warns(DeprecationWarning):
            assert entry.get("observation") is None
        with pytest.warns(DeprecationWarning):
            assert dict(entry) == entry.to_dict()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert entry.reason == "first" and entry.to_dict()["op"] == "set"


def test_runs_are_typed(tmp_path: Path) -> None:
    with StateRepo.init(tmp_path / "a") as repo:
        repo.runs.start("r1", description="refund O-104", criteria=["refund issued"],
                        reason="asked")
        view = repo.runs.read("r1")
        assert isinstance(view.goal, RunGoal) and isinstance(view.next, NextAction)
        assert view.goal.status == "active" and view.goal.success_criteria == ["refund issued"]
        assert view.next.action == "continue" and "refund issued" in view.next.reason
        with pytest.warns(DeprecationWarning):
            assert view.next == {"action": "continue", "reason": view.next.reason}
        listing = repo.runs.listing()
        assert listing == [RunSummary("r1", view.head, "active", None, view.goal.updated_at)]
        assert to_json(listing) == [{"run_id": "r1", "head": view.head, "status": "active",
                                     "stop_reason": None,
                                     "updated_at": view.goal.updated_at}]
        assert to_json(view)["goal"] == view.goal.to_dict()
        out = json.loads(run_cli("run", "next", "r1", "--json",
                                 agent_dir=tmp_path / "a").stdout)
        assert out == view.next.to_dict()


def test_request_approval_returns_a_typed_request_that_is_still_the_id(tmp_path: Path) -> None:
    with StateRepo.init(tmp_path / "a", writer="human") as repo:
        repo.set_schema(SCHEMA, "refunds need a human")
        args = {"ticket": "T-1", "amount": 120}
        request = repo.approvals.request("refund", args, "asked")
        assert isinstance(request, ApprovalRequest) and isinstance(request, str)
        assert (request.tool, request.args, request.reason) == ("refund", args, "asked")
        assert request == request.approval_id and request.commit == repo.head()
        # the real git CLI sees the commit the request names
        assert git(repo.state_dir, "cat-file", "-t", request.commit).stdout.strip() == "commit"
        with pytest.raises(AttributeError):
            request.tool = "wire"  # type: ignore[misc]
        repo.approvals.approve(request, "checked")
        assert any(a["id"] == request.approval_id and a["status"] == "approved"
                   for a in repo.approvals.list())


def test_a_refusals_current_entry_is_a_key_state(tmp_path: Path) -> None:
    with StateRepo.init(tmp_path / "a") as repo:
        repo.set("k", 262, "first")
        with pytest.raises(CasMismatch) as caught:
            repo.set("k", 254, "stale", expected=250)
        e = caught.value
        assert e.rule == "cas.mismatch" and e.details["current"]["value"] == 262
        typed = refusal(e)
        assert isinstance(typed.current, KeyState) and typed.current.value == 262
        assert typed.current.reason == "first" and typed.expected == 250
        assert to_json(typed)["current"] == {**repo.state().keys["k"].to_dict(),
                                             "expired": False}


def test_the_sections_tool_names_are_configurable(tmp_path: Path) -> None:
    agent = tmp_path / "a"
    with StateRepo.init(agent) as repo:
        repo.set("k", 1, "first")
        default = repo.render(locale="en")
        assert "maintained by you with working_state_set" in default
        named = repo.render(locale="en", set_tool="update_memory")
        assert "working_state_set" not in named and "with update_memory)" in named
        assert named.count("update_memory") == 2
    (agent / "config.toml").write_text('[gitstate]\nset_tool = "memory.set"\n'
                                       'get_tool = "memory.get"\nlocale = "en"\n')
    with StateRepo(agent) as repo:
        assert "call memory.set with a reason" in repo.render()
        long_note = "x" * 900
        repo.handoff(long_note)
        fitted = repo.render(max_chars=len(repo.render()) - 100)
        assert "read it with memory.get" in fitted and long_note not in fitted
    text, _ = gitstate.section(agent)
    assert "memory.set" in text and "working_state_set" not in text
    cli = run_cli("render", agent_dir=agent)
    assert "memory.set" in cli.stdout
    (agent / "config.toml").write_text('[gitstate]\nset_tool = "two words"\n')
    with pytest.raises(ConfigError) as bad:
        StateRepo(agent)
    assert bad.value.rule == "config.tool_name"


def test_python_api_doc_names_rule_details_and_the_handoff() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "python-api.md").read_text()
    for phrase in ("e.rule", "e.details", "repo.handoff(", "HistoryEntry", "RunSummary",
                   "ApprovalRequest", "set_tool"):
        assert phrase in text, phrase
