"""Spending an approval before the call runs: ``with repo.approvals.spend(...) as call:``
enters only for the spend that won. Two real processes on one agent, and two clones of one
agent in remote-first mode with a real remote (a bare repository as a path, and behind git
daemon on loopback), race to spend each of 50 approvals: one tool body runs per approval,
the loser is refused before its body, and the state names the winner. A body that raises
leaves its outcome on main or in the run's ledger; a local-first agent with a remote spends
only when its policy allows offline spends; a decision is bound to the keys its policy
names (void_if_changed)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.audit import views as audit
from gitstate.core.errors import GitStateError, Refused
from tests.helpers import GIT, free_port, git, run_cli, trust_remote
from tests.hostile_git_server import git_daemon

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = """\
version: 1
unknown_keys: allow
approvals:
  refund: {writers: [runtime, human]}
"""
ARGS = {"ticket": "T-7", "amount": 120}
ROUNDS = int(os.environ.get("GITSTATE_RACES", "50"))
# the 50 spent approvals stay in the state (and in the section) until they expire
ROOMY = "max_keys = 256\nsection_max_bytes = 65536\ninjection_max_chars = 100000\n"


@pytest.fixture
def repo(agent_dir: Path) -> StateRepo:
    repo = StateRepo.init(agent_dir)
    repo.set_schema(SCHEMA, "refunds need an approval")
    return repo


def _record(repo: StateRepo, approval: str) -> dict[str, object]:
    """A spent approval's last record: retired from the key table by its final step, kept
    in the history (``approvals()`` lists it from there)."""
    assert f"approval.{approval}" not in repo.state().keys
    [record] = [a for a in repo.approvals.list() if a["id"] == approval]
    return record


def _approved(repo: StateRepo, args: dict[str, object]) -> str:
    approval = repo.approvals.request("refund", args, "the customer asked")
    repo.approvals.approve(approval, "within policy")
    return approval


def test_the_call_is_handed_over_once(repo: StateRepo) -> None:
    approval = _approved(repo, ARGS)
    ran: list[object] = []
    with repo.approvals.spend(approval, "refund", dict(reversed(list(ARGS.items())))) as call:
        ran.append(call)
        call.args["amount"] = 999  # a copy: the frozen call cannot be changed
    assert ran == [call]
    assert call.tool == "refund" and call.args == ARGS and call.approval_id == approval
    assert call.commit == repo.head()  # entered after the consume commit
    record = _record(repo, approval)
    assert isinstance(record, dict)
    assert record["status"] == "consumed" and record["consumed_by"] == "runtime"
    with pytest.raises(Refused) as exc, repo.approvals.spend(approval, "refund", ARGS):
        ran.append("the second body")
    assert len(ran) == 1
    assert exc.value.rule == "approval.not_runnable"
    assert exc.value.details["winner"] == call.commit and call.commit[:12] in exc.value.message
    other = _approved(repo, ARGS)
    with pytest.raises(Refused) as exc, repo.approvals.spend(other, "refund",
                                                            {**ARGS, "amount": 121}):
        ran.append("changed arguments")
    assert "args.amount: 120 approved, 121 asked" in exc.value.message and len(ran) == 1
    assert repo.can_run("refund", ARGS)  # the refused spend left the approval as it was


def test_a_body_that_raises_leaves_an_audited_outcome(repo: StateRepo, tmp_path: Path) -> None:
    approval = _approved(repo, ARGS)
    with pytest.raises(RuntimeError), repo.approvals.spend(approval, "refund", ARGS) as call:
        raise RuntimeError("provider timed out; token=ghp_abcdefghijklmnopqrstuvwxyz0123456789")
    record = _record(repo, approval)
    assert isinstance(record, dict) and record["status"] == "consumed"
    assert record["outcome"] == "failed"
    assert record["error"] == "RuntimeError: provider timed out; [withheld]"
    shown = audit.show(repo, repo.head())
    assert ["Gitstate-Approval", "outcome"] in shown["trailers"]
    assert call.commit[:12] in repo.history(1)[0]["reason"]
    with pytest.raises(Refused) as exc, repo.approvals.spend(approval, "refund", ARGS):
        pytest.fail("a consumed approval ran again")
    assert exc.value.rule == "approval.not_runnable"
    # a clone checks the outcome step like any commit from elsewhere (foreign.py)
    assert all(c.ok for c in integrity.verify(repo))
    bare = tmp_path / "remote.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    repo.store.set_remote_url(str(bare))
    repo.remote.push()
    trust_remote(tmp_path / "clone")  # the human's decision arrives as a claim
    clone = StateRepo.clone(str(bare), tmp_path / "clone")
    assert _record(clone, approval) == record
    clone.close()


def test_a_run_records_the_failure_and_is_checked_first(repo: StateRepo) -> None:
    repo.runs.start("r-1", description="refund T-7", criteria=["refunded"], reason="asked")
    approval = _approved(repo, ARGS)
    with pytest.raises(ValueError), repo.approvals.spend(approval, "refund", ARGS,
                                                        run_id="r-1", tool_call_id="call-9"):
        raise ValueError("card declined")
    view = repo.runs.read("r-1")
    assert "call-9" in view.state["tool_result_refs"]
    assert f"approval.{approval}:failed" in view.state["evidence_refs"]
    record = _record(repo, approval)
    assert isinstance(record, dict) and record["status"] == "consumed" and "outcome" not in record
    repo.runs.event("r-1", {"type": "cancelled", "reason": "the customer withdrew"}, "stop")
    again = _approved(repo, ARGS)
    with pytest.raises(GitStateError) as exc, repo.approvals.spend(again, "refund", ARGS,
                                                                  run_id="r-1"):
        pytest.fail("a stopped run's call ran")
    assert exc.value.rule == "run.stopped"
    assert repo.can_run("refund", ARGS)  # refused before the spend: still approved


def test_local_first_with_a_remote_spends_only_when_the_policy_allows(
        repo: StateRepo, tmp_path: Path) -> None:
    """A remote that cannot be reached refuses the spend whatever the sync mode, unless the
    policy accepts offline spends; a decision is refused too (no offline decisions)."""
    approval = _approved(repo, ARGS)
    other = _approved(repo, ARGS)
    repo.store.set_remote_url(f"git://127.0.0.1:{free_port()}/nothing.git")
    with pytest.raises(Refused) as exc, repo.approvals.spend(approval, "refund", ARGS):
        pytest.fail("spent without the remote")
    assert exc.value.rule == "approval.offline" and "offline_spend: true" in exc.value.message
    with pytest.raises(Refused) as exc:
        _approved(repo, {"order": "O-9"})
    assert exc.value.rule == "approval.offline" and "decision" in exc.value.message
    repo.set_schema(SCHEMA.replace("human]}", "human], offline_spend: true}")
                    .replace("version: 1", "version: 2"), "offline spends accepted")
    with repo.approvals.spend(approval, "refund", ARGS) as call:
        assert call.commit == repo.head()
    # remote-first and the remote unreachable: refused before the body, still approved
    repo.set_schema(SCHEMA.replace("version: 1", "version: 3"), "no offline spends")
    (repo.agent_dir / "config.toml").write_text('[gitstate]\nsync = "remote-first"\n')
    with StateRepo(repo.agent_dir) as rf:
        with pytest.raises(GitStateError) as err, rf.approvals.spend(other, "refund", ARGS):
            pytest.fail("spent while the remote was unreachable")
        assert err.value.rule in ("approval.offline", "remote.unreachable"), err.value
        assert rf.approvals.verdict("refund", ARGS).approval_id == other


def test_the_cli_spends_then_runs_the_command(repo: StateRepo, tmp_path: Path) -> None:
    approval = _approved(repo, ARGS)
    seen = tmp_path / "seen.json"
    script = f"printf '%s' \"$GITSTATE_ARGS_JSON\" > {seen}; exit 4"
    out = run_cli("spend", approval, "--tool", "refund", "--args-json", json.dumps(ARGS),
                  "--", "sh", "-c", script, agent_dir=repo.agent_dir, process=True)
    assert out.returncode == 4, out.stderr
    assert json.loads(seen.read_text()) == ARGS and "the failure is recorded" in out.stdout
    record = _record(repo, approval)
    assert isinstance(record, dict) and record["outcome"] == "failed"
    seen.unlink()
    again = run_cli("spend", approval, "--tool", "refund", "--args-json", json.dumps(ARGS),
                    "--", "sh", "-c", script, agent_dir=repo.agent_dir)
    assert again.returncode == 1 and "[approval.not_runnable]" in again.stderr
    assert not seen.exists()  # refused before the command started
    listed = run_cli("approvals", "--all", agent_dir=repo.agent_dir)
    assert f"{approval}  consumed  refund(" in listed.stdout
    assert "spent by human; the call failed: CallFailed: sh exited 4" in listed.stdout
    # --run: the run is checked first, and the failure goes to its ledger
    repo.runs.start("r-2", description="refund T-7", criteria=["refunded"], reason="asked")
    third = _approved(repo, ARGS)
    out = run_cli("spend", third, "--tool", "refund", "--args-json", json.dumps(ARGS),
                  "--run", "r-2", "--tool-call-id", "call-3", "--", "sh", "-c", "exit 5",
                  agent_dir=repo.agent_dir)
    assert out.returncode == 1 and "[run.writer]" in out.stderr  # checked before the spend
    assert repo.can_run("refund", ARGS)
    out = run_cli("spend", third, "--as", "runtime", "--tool", "refund", "--args-json",
                  json.dumps(ARGS), "--run", "r-2", "--tool-call-id", "call-3", "--", "sh",
                  "-c", "exit 5", agent_dir=repo.agent_dir)
    assert out.returncode == 5, out.stderr
    assert "call-3" in repo.runs.read("r-2").state["tool_result_refs"]
    missing = run_cli("spend", _approved(repo, ARGS), "--tool", "refund", "--args-json",
                      json.dumps(ARGS), "--", "no-such-command-here", agent_dir=repo.agent_dir)
    assert missing.returncode == 2 and "[usage.command]" in missing.stderr
    assert repo.can_run("refund", ARGS)  # nothing was spent for a command that cannot start


def _race(tmp_path: Path, dirs: list[Path], approve: Callable[[int], str]) -> dict[str, str]:
    """Two spender processes (tests/workers.py), one per directory, race ROUNDS approvals;
    returns approval id -> the winner's consume commit, after checking every round."""
    effects = tmp_path / "effects.txt"
    effects.touch()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.workers", "spender", str(d), name,
                               str(effects)], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
             for d, name in zip(dirs, "ab", strict=True)]
    won: dict[str, str] = {}
    both_advised = 0
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for n in range(ROUNDS):
            approval = approve(n)
            for p in procs[n % 2:] + procs[:n % 2]:  # each goes first in turn
                assert p.stdin is not None
                p.stdin.write(f"{n} {approval}\n")
                p.stdin.flush()
            outcomes = {}
            for name, p in zip("ab", procs, strict=True):
                assert p.stdout is not None
                outcomes[name] = json.loads(p.stdout.readline())
            runs = [line.split() for line in effects.read_text().splitlines()
                    if line.split()[0] == str(n)]
            assert len(runs) == 1, (n, runs, outcomes)  # exactly one tool body ran
            [(_, who, commit)] = runs
            loser = outcomes["b" if who == "a" else "a"]
            assert outcomes[who] == {"won": True, "commit": commit,
                                     "can_run": outcomes[who]["can_run"]}
            assert not loser["won"] and loser["rule"] == "approval.not_runnable", loser
            assert loser["winner"] == commit, loser  # the refusal names the winner
            both_advised += outcomes["a"]["can_run"] and outcomes["b"]["can_run"]
            won[approval] = commit
    finally:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
            p.wait(timeout=60)
    print(f"\n{ROUNDS} spend races: one body each; can_run said yes to both in "
          f"{both_advised}")
    return won


def _names_the_winners(repo: StateRepo, won: dict[str, str]) -> None:
    spent = {rec["key"]: rec["commit"] for rec in repo.full_history()
             if rec["key"] in {f"approval.{a}" for a in won}
             and isinstance(rec["new"], dict) and rec["new"]["status"] == "consumed"}
    assert spent == {f"approval.{a}": c for a, c in won.items()}
    for approval, commit in won.items():
        record = _record(repo, approval)
        assert isinstance(record, dict)
        assert record["consumed_by"] == repo.store.commit_info(commit).message.decode() \
            .split("Gitstate-Actor: ")[1].split("\n")[0]
        assert record["consumed_by"] in ("gateway-a", "gateway-b")
    assert all(c.ok for c in integrity.verify(repo))


@pytest.mark.slow
def test_two_processes_on_one_agent_race_to_spend(agent_dir: Path, tmp_path: Path) -> None:
    (agent_dir / "config.toml").write_text("[gitstate]\n" + ROOMY)
    repo = StateRepo.init(agent_dir)
    repo.set_schema(SCHEMA, "refunds need an approval")
    won = _race(tmp_path, [repo.agent_dir, repo.agent_dir],
                lambda n: _approved(repo, {"round": n}))
    _names_the_winners(repo, won)
    repo.close()


@pytest.mark.slow
@pytest.mark.skipif(GIT is None, reason="needs the git CLI for the remote")
@pytest.mark.parametrize("transport", ["path", "git daemon"])
def test_two_clones_race_through_the_remote(tmp_path: Path, transport: str) -> None:
    """The remote is a bare repository: as a path, or served by git daemon on loopback."""
    (tmp_path / "srv").mkdir()
    bare = tmp_path / "srv" / "remote.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    with contextlib.ExitStack() as stack:
        url = str(bare) if transport == "path" else \
            f"git://127.0.0.1:{stack.enter_context(git_daemon(tmp_path / 'srv'))}/remote.git"
        _race_clones(tmp_path, url)


def _race_clones(tmp_path: Path, url: str) -> None:
    (tmp_path / "desk").mkdir()
    (tmp_path / "desk" / "config.toml").write_text("[gitstate]\n" + ROOMY)
    with StateRepo.init(tmp_path / "desk") as desk:
        desk.set_schema(SCHEMA, "refunds need an approval")
        desk.store.set_remote_url(url)
        desk.push()
    for name in ("desk", "x", "y"):  # the clones take each other's decisions as claims
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "config.toml").write_text(
            '[gitstate]\nsync = "remote-first"\n' + ROOMY + "\n[trust]\ntrust_remote = true\n")
    for name in ("x", "y"):
        StateRepo.clone(url, tmp_path / name).close()
    with StateRepo(tmp_path / "desk") as desk:
        won = _race(tmp_path, [tmp_path / "x", tmp_path / "y"],
                    lambda n: _approved(desk, {"round": n}))
        desk.remote.pull()
        _names_the_winners(desk, won)


def test_a_decision_is_bound_to_the_state_it_was_made_on(repo: StateRepo) -> None:
    """``void_if_changed``: the approval records main's commit at the decision; a named key
    (or pattern) that changed by the spend voids it, naming the key and the commit."""
    repo.set_schema(SCHEMA.replace("version: 1", "version: 2").replace(
        "human]}", "human], void_if_changed: [limit, 'fx.*']}"), "bind to limit and fx")
    repo.set("limit", 500, "the refund limit")
    repo.set("note", "x", "not named")
    approval = repo.approvals.request("refund", ARGS, "asked")
    seen = repo.head()
    repo.approvals.approve(approval, "within the limit of 500")
    record = repo.state().keys[f"approval.{approval}"].value
    assert isinstance(record, dict) and record["decided_on"] == seen
    repo.set("note", "y", "an unnamed key may change")
    changed = repo.set("limit", 50, "the limit was cut").commit
    repo.set("note", "z", "and again")
    with pytest.raises(Refused) as exc, repo.approvals.spend(approval, "refund", ARGS):
        pytest.fail("a void approval ran")
    assert exc.value.rule == "approval.void" and exc.value.details["key"] == "limit"
    assert exc.value.details["changed_in"] == changed
    assert f"limit changed in {changed[:12]} since the decision was made on {seen[:12]}" \
        in exc.value.message
    with pytest.raises(Refused):  # the low-level consume refuses it too
        repo.approvals.consume(approval, "refund", ARGS)
    repo.set("limit", 500, "the limit is back")  # the value the decider saw: valid again
    with repo.approvals.spend(approval, "refund", ARGS) as call:
        assert call.commit == repo.head()
    other = _approved(repo, ARGS)
    repo.set("fx.usd", 31, "a pattern counts too")
    with pytest.raises(Refused) as exc, repo.approvals.spend(other, "refund", ARGS):
        pytest.fail("a void approval ran")
    assert exc.value.details["key"] == "fx.usd"
    assert all(c.ok for c in integrity.verify(repo))


@pytest.mark.skipif(GIT is None, reason="needs the git CLI for the bare remote")
def test_a_decision_is_linearized_through_the_remote(repo: StateRepo,
                                                    tmp_path: Path) -> None:
    """A decision made while the remote moved on first takes the remote's main, so
    ``decided_on`` names the state it was really made on, and is pushed before approve
    returns (local-first mode too): the other clone pulls it, nothing is left to push."""
    bare = tmp_path / "remote.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    repo.store.set_remote_url(str(bare))
    approval = repo.approvals.request("refund", ARGS, "asked")
    repo.remote.push()
    trust_remote(tmp_path / "other")
    with StateRepo.clone(str(bare), tmp_path / "other") as other:
        other.set("note", "meanwhile", "the remote moves on")
        other.push()
        moved = other.head()
        decided = repo.approvals.approve(approval, "checked")
        assert git(bare, "rev-parse", "main").stdout.strip() == decided.commit
        assert repo.remote.push().pushed == 0
        other.pull()
        record = other.state().keys[f"approval.{approval}"].value
        assert isinstance(record, dict) and record["decided_on"] == moved
        assert record["status"] == "approved" and other.head() == repo.head()
