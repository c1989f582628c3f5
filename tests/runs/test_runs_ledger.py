"""Run ledgers on their own refs: one commit per event on refs/heads/runs/<id>, never on
main; replay reproduces run.json; retries are idempotent; a new process resumes a run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.runs.format import PREFIX
from gitstate.runs.validate import RunRefused
from tests.helpers import GIT, assert_fsck_clean, git

ROOT = Path(__file__).resolve().parents[2]


def _start(repo: StateRepo, run_id: str = "refund-O-104", risk: str = "high") -> None:
    repo.runs.start(run_id, description="refund order O-104",
                    criteria=["refund issued"], risk=risk, reason="the customer asked",
                    budget={"max_iterations": 5})


def test_each_event_is_one_commit_on_the_run_ref_never_on_main(repo: StateRepo) -> None:
    head = repo.head()
    _start(repo)
    ledger = repo.runs
    ledger.event("refund-O-104", {"type": "steps_planned", "steps": [
        {"step_id": "lookup"}, {"step_id": "pay", "side_effect": True}]}, "plan it")
    ledger.event("refund-O-104", {"type": "step_started", "step_id": "lookup",
                                  "description": "read the order"}, "start",
                 writer="agent")
    view = ledger.event("refund-O-104", {
        "type": "tool_result_recorded", "tool_call_id": "c1", "evidence_ref": "order:O-104",
        "observed_at": "2026-12-01T00:00:00Z"}, "the order was read")
    assert view.state["evidence_refs"] == ["order:O-104"] and view.state["version"] == 4
    assert repo.head() == head  # main untouched
    if GIT is not None:
        log = git(repo.state_dir, "log", "--format=%s", "runs/refund-O-104").stdout.split("\n")
        assert log[:4] == ["the order was read", "start", "plan it", "the customer asked"]
        trailers = git(repo.state_dir, "log", "-1", "--format=%(trailers:only)",
                       "runs/refund-O-104").stdout
        assert "Gitstate-Writer: runtime" in trailers and '"type":"tool_result_recorded"' \
            in trailers
        files = git(repo.state_dir, "ls-tree", "--name-only", "runs/refund-O-104").stdout
        assert files.split() == ["run.json"]
    assert ledger.verify("refund-O-104") == []
    assert_fsck_clean(repo.state_dir)


def test_refusals_record_nothing_and_retries_are_idempotent(repo: StateRepo) -> None:
    _start(repo)
    ledger = repo.runs
    before = repo.store.ref(PREFIX + "refund-O-104")
    with pytest.raises(RunRefused) as exc:
        ledger.event("refund-O-104", {"type": "budget_spent", "tokens": 5}, "x",
                     writer="agent")
    assert exc.value.rule == "run.writer"
    assert repo.store.ref(PREFIX + "refund-O-104") == before
    first = ledger.event("refund-O-104", {"type": "question_opened", "question": "amount?"},
                         "ask", request_id="q-1")
    again = ledger.event("refund-O-104", {"type": "question_opened", "question": "amount?"},
                         "ask", request_id="q-1")
    assert again.replayed and again.head == first.head
    with pytest.raises(RunRefused) as exc:
        _start(repo)
    assert exc.value.rule == "run.exists"


def test_a_tampered_run_json_fails_verify(repo: StateRepo) -> None:
    """A commit made with plain git whose run.json does not fold from its events."""
    if GIT is None:
        pytest.skip("git CLI not installed")
    _start(repo)
    view = repo.runs.read("refund-O-104")
    forged = {"format": 1, "goal": view.goal.to_dict(), "state": {**view.state, "stop_reason": "success"}}
    blob = git(repo.state_dir, "hash-object", "-w", "--stdin",
               input=json.dumps(forged)).stdout.strip()
    tree = git(repo.state_dir, "mktree", input=f"100644 blob {blob}\trun.json\n").stdout.strip()
    msg = ("done\n\nGitstate-Run: refund-O-104\nGitstate-Event: "
           '{"type":"question_opened","question":"q"}\nGitstate-Writer: agent\n')
    commit = git(repo.state_dir, "-c", "user.name=x", "-c", "user.email=x@x", "commit-tree",
                 tree, "-p", view.head, "-m", msg).stdout.strip()
    git(repo.state_dir, "update-ref", "refs/heads/runs/refund-O-104", commit)
    problems = repo.runs.verify("refund-O-104")
    assert problems and "differs from the replay" in problems[0]


APPROVALS = "version: 1\nunknown_keys: allow\napprovals:\n  refund: {writers: [human]}\n"


def test_a_new_process_resumes_the_run(repo: StateRepo) -> None:
    """Pending approvals, questions and budgets live in the ref: another process goes on
    (and records the key table's decision, which a run cannot make up)."""
    repo.set_schema(APPROVALS, "refunds need a human")
    approval = repo.approvals.request("refund", {"order": "O-104", "cents": 12000},
                                     "refund O-104")
    _start(repo)
    repo.runs.event("refund-O-104", {"type": "step_started", "step_id": "pay",
                                     "description": "pay 120", "side_effect": True},
                    "start paying", writer="agent")
    code = ("import sys, json\nfrom gitstate.api.repo import StateRepo\n"
            "r = StateRepo(sys.argv[1], writer='human')\n"
            "v = r.runs.read('refund-O-104')\n"
            "assert v.next['action'] == 'ask_approval', v.next\n"
            "a = sys.argv[2]\n"
            "e = {'type': 'approval_recorded', 'approval_id': a, 'decision': 'approved'}\n"
            "try:\n    r.runs.event('refund-O-104', e, 'approved by phone')\n"
            "except Exception as exc:\n    assert exc.rule == 'run.approval_mismatch', exc\n"
            "r.approvals.approve(a, 'checked the order')\n"
            "v = r.runs.event('refund-O-104', e, 'approved by phone')\n"
            "print(json.dumps(v.to_dict()))\n")
    out = subprocess.run([sys.executable, "-c", code, str(repo.agent_dir), approval],
                         cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["goal"]["status"] == "active"
    view = repo.runs.read("refund-O-104")
    assert view.state["approval_refs"] == [approval] and view.next["action"] == "continue"
    assert repo.runs.verify("refund-O-104") == []
    with pytest.raises(RunRefused) as exc:  # a made-up approval is no approval
        repo.runs.event("refund-O-104", {"type": "approval_recorded", "approval_id": "a-x",
                                         "decision": "approved"}, "trust me")
    assert exc.value.rule == "run.approval_unknown"


def test_listing_many_runs(repo: StateRepo) -> None:
    for i in range(12):
        _start(repo, f"run-{i:03d}", risk="low")
    repo.runs.event("run-003", {"type": "cancelled", "reason": "not needed"}, "cancel")
    listed = repo.runs.listing()
    assert [r["run_id"] for r in listed] == [f"run-{i:03d}" for i in range(12)]
    assert {r["run_id"]: r["status"] for r in listed}["run-003"] == "cancelled"


def test_the_run_commands(repo: StateRepo) -> None:
    from tests.helpers import run_cli

    d = repo.agent_dir
    out = run_cli("run", "start", "r1", "--goal", "refund O-104", "--criterion",
                  "refund issued", "--risk", "high", "--max-tokens", "100", "--reason", "go",
                  "--json", agent_dir=d)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["goal"]["risk_class"] == "high"
    refused = run_cli("run", "event", "r1", '{"type": "budget_spent", "tokens": 150}',
                      "--reason", "spent", agent_dir=d)
    assert refused.returncode == 1 and "[run.writer]" in refused.stderr  # a human
    spent = run_cli("run", "event", "r1", '{"type": "budget_spent", "tokens": 150}',
                    "--reason", "spent", "--as", "runtime", "--json", agent_dir=d)
    assert json.loads(spent.stdout)["state"]["stop_reason"] == "budget_exhausted"
    nxt = run_cli("run", "next", "r1", "--json", agent_dir=d)
    assert json.loads(nxt.stdout) == {"action": "stop", "reason": "budget_exhausted"}
    assert run_cli("run", "verify", "r1", agent_dir=d).returncode == 0
    listed = json.loads(run_cli("run", "list", "--json", agent_dir=d).stdout)["runs"]
    assert [(r["run_id"], r["stop_reason"]) for r in listed] == [("r1", "budget_exhausted")]
    bad = run_cli("run", "event", "r1", "[1]", "--reason", "x", agent_dir=d)
    assert bad.returncode == 2 and "[usage.json]" in bad.stderr
    unknown = run_cli("run", "show", "nope", agent_dir=d)
    assert unknown.returncode == 1 and "[run.unknown]" in unknown.stderr
