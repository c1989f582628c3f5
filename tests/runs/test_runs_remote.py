"""Run ledgers travel with push and pull: fast-forward only, each replayed before it is
taken; a forged or rewritten ledger is refused by pull and by the pre-receive hook."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.core.errors import GitStateError
from gitstate.runs.format import PREFIX
from tests.helpers import GIT, git, install_pre_receive, trust_remote

pytestmark = pytest.mark.skipif(GIT is None, reason="needs the git CLI for the remote")
RUN = "refund-O-104"
ID = ["-c", "user.name=x", "-c", "user.email=x@x"]


def _bare(root: Path) -> Path:
    path = root / "remote.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    return path


def _pair(tmp_path: Path) -> tuple[StateRepo, StateRepo, Path]:
    bare = _bare(tmp_path)
    trust_remote(tmp_path / "a")  # runtime events come back from b unsigned
    a = StateRepo.init(tmp_path / "a")
    a.set("stop_loss.2317", 262, "rule")
    a.store.set_remote_url(str(bare))
    a.runs.start(RUN, description="refund order O-104", criteria=["refund issued"],
                 reason="the customer asked")
    a.runs.event(RUN, {"type": "question_opened", "question": "amount?"}, "ask")
    pushed = a.push()
    assert pushed.runs == {"pushed": [RUN], "refused": {}}
    StateRepo.clone(str(bare), tmp_path / "b").close()
    trust_remote(tmp_path / "b")
    b = StateRepo(tmp_path / "b")
    return a, b, bare


def _forge(bare: Path, run: str, parent: str | None, run_json: str, event: str) -> str:
    blob = git(bare, "hash-object", "-w", "--stdin", input=run_json).stdout.strip()
    tree = git(bare, "mktree", input=f"100644 blob {blob}\trun.json\n").stdout.strip()
    msg = f"forged\n\nGitstate-Run: {run}\nGitstate-Event: {event}\nGitstate-Writer: runtime\n" \
          "Gitstate-Process: forger:1:abcdef\n"
    args = ["commit-tree", tree, "-m", msg] + (["-p", parent] if parent else [])
    return git(bare, *ID, *args).stdout.strip()


def test_a_run_resumes_on_another_machine_and_comes_back(tmp_path: Path) -> None:
    a, b, _ = _pair(tmp_path)
    pulled = b.pull()
    assert pulled.runs["pulled"] == [RUN]
    view = b.runs.read(RUN)
    assert view.state["open_questions"] == ["amount?"] and b.runs.verify(RUN) == []
    b.runs.event(RUN, {"type": "question_answered", "question": "amount?",
                       "evidence_ref": "order:O-104"}, "the order says 120.00")
    assert b.push().runs["pushed"] == [RUN]
    back = a.pull()
    assert back.runs["pulled"] == [RUN]
    assert a.runs.read(RUN).state["open_questions"] == []
    assert a.runs.stats()["resumes"] == 1
    assert git(a.state_dir, "log", "--format=%s", "runs/" + RUN).stdout.split("\n")[:3] == [
        "the order says 120.00", "ask", "the customer asked"]
    a.close()
    b.close()


def test_events_on_both_sides_are_reported_never_overwritten(tmp_path: Path) -> None:
    a, b, _ = _pair(tmp_path)
    b.pull()
    a.runs.event(RUN, {"type": "question_opened", "question": "card?"}, "a asks")
    b.runs.event(RUN, {"type": "question_opened", "question": "address?"}, "b asks")
    a.push()
    mine = b.store.ref(PREFIX + RUN)
    pushed = b.push()
    assert RUN in pushed.runs["refused"] and "pull first" in pushed.runs["refused"][RUN]
    assert b.pull().runs["diverged"] == [RUN]
    assert b.store.ref(PREFIX + RUN) == mine
    a.close()
    b.close()


@pytest.mark.parametrize("attack", ["edited-run-json", "extra-file", "bad-first-commit",
                                    "writer-not-allowed", "merge", "huge-blob", "symlink"])
def test_pull_refuses_a_forged_ledger_and_takes_none_of_it(tmp_path: Path, attack: str) -> None:
    a, b, bare = _pair(tmp_path)
    head = git(bare, "rev-parse", "refs/heads/runs/" + RUN).stdout.strip()
    run_json = git(bare, "show", f"{head}:run.json").stdout
    q = '{"question":"card?","type":"question_opened"}'
    if attack == "edited-run-json":
        forged = _forge(bare, RUN, head, run_json.replace('"risk_class": "low"',
                                                          '"risk_class": "critical"'), q)
    elif attack == "extra-file":
        blob = git(bare, "hash-object", "-w", "--stdin", input=run_json).stdout.strip()
        tree = git(bare, "mktree", input=f"100644 blob {blob}\trun.json\n"
                   f"100755 blob {blob}\tpost-checkout\n").stdout.strip()
        forged = git(bare, *ID, "commit-tree", tree, "-p", head, "-m",
                     f"x\n\nGitstate-Run: {RUN}\nGitstate-Event: {q}\n"
                     "Gitstate-Writer: runtime\n").stdout.strip()
    elif attack == "bad-first-commit":
        forged = _forge(bare, RUN, None, run_json, q)
    elif attack == "merge":  # a second parent hides events from the first-parent replay
        side = _forge(bare, RUN, None, run_json, q)
        blob = git(bare, "hash-object", "-w", "--stdin", input=run_json).stdout.strip()
        tree = git(bare, "mktree", input=f"100644 blob {blob}\trun.json\n").stdout.strip()
        forged = git(bare, *ID, "commit-tree", tree, "-p", head, "-p", side, "-m",
                     f"x\n\nGitstate-Run: {RUN}\nGitstate-Event: {q}\n"
                     "Gitstate-Writer: runtime\n").stdout.strip()
    elif attack == "huge-blob":  # past the size a run.json may have: not even read
        forged = _forge(bare, RUN, head, run_json + " " * (1 << 20), q)
    elif attack == "symlink":  # run.json as a symlink entry
        blob = git(bare, "hash-object", "-w", "--stdin", input="/etc/passwd").stdout.strip()
        tree = git(bare, "mktree", input=f"120000 blob {blob}\trun.json\n").stdout.strip()
        forged = git(bare, *ID, "commit-tree", tree, "-p", head, "-m",
                     f"x\n\nGitstate-Run: {RUN}\nGitstate-Event: {q}\n"
                     "Gitstate-Writer: runtime\n").stdout.strip()
    else:  # the agent records a tool result: only the runtime may
        forged = _forge(bare, RUN, head, run_json, '{"evidence_ref":"e","observed_at":'
                        '"2026-01-01T00:00:00Z","tool_call_id":"c","type":'
                        '"tool_result_recorded"}').replace("", "")
        msg = git(bare, "cat-file", "commit", forged).stdout.replace(
            "Gitstate-Writer: runtime", "Gitstate-Writer: agent")
        forged = git(bare, "hash-object", "-t", "commit", "-w", "--stdin",
                     input=msg).stdout.strip()
    git(bare, "update-ref", "refs/heads/runs/evil-" + attack, forged)
    git(bare, "update-ref", "refs/heads/runs/" + RUN, forged)
    b_before = b.store.ref(PREFIX + RUN)
    with pytest.raises(GitStateError) as exc:
        b.pull()
    assert exc.value.rule == "remote.run_invalid"
    assert b.store.ref(PREFIX + RUN) == b_before
    assert b.store.ref(PREFIX + "evil-" + attack) is None
    assert subprocess.run([GIT or "git", "-C", str(b.state_dir), "cat-file", "-e", forged],
                          capture_output=True, check=False).returncode != 0  # not taken
    a.close()
    b.close()


def test_the_pre_receive_hook_replays_pushed_runs(tmp_path: Path) -> None:
    bare = _bare(tmp_path)
    install_pre_receive(bare, tmp_path)
    a = StateRepo.init(tmp_path / "a")
    a.set("k", 1, "rule")
    a.runs.start(RUN, description="refund order O-104", criteria=["refund issued"],
                 reason="the customer asked")
    a.runs.event(RUN, {"type": "question_opened", "question": "amount?"}, "ask")
    work = a.state_dir
    good = git(work, "push", str(bare), "main", f"runs/{RUN}")
    assert good.returncode == 0, good.stderr
    head = git(work, "rev-parse", "runs/" + RUN).stdout.strip()
    parent = git(work, "rev-parse", f"runs/{RUN}~1").stdout.strip()
    # rewritten: the ledger's last event dropped
    dropped = git(work, "push", "--force", str(bare), f"{parent}:refs/heads/runs/{RUN}")
    assert dropped.returncode != 0 and "a run only grows" in dropped.stderr
    # deleted
    deleted = git(work, "push", str(bare), f":refs/heads/runs/{RUN}")
    assert deleted.returncode != 0 and "a run's ledger is kept" in deleted.stderr
    # a commit whose run.json is not the replay of its event
    run_json = git(work, "show", f"{head}:run.json").stdout.replace('"low"', '"critical"')
    forged = _forge(work, RUN, head, run_json, '{"question":"q","type":"question_opened"}')
    refused = git(work, "push", str(bare), f"{forged}:refs/heads/runs/{RUN}")
    assert refused.returncode != 0 and "differs from the replay" in refused.stderr
    # a ref outside main and the runs
    other = git(work, "push", str(bare), f"{head}:refs/heads/notes")
    assert other.returncode != 0 and "run ledgers" in other.stderr
    assert git(bare, "rev-parse", "refs/heads/runs/" + RUN).stdout.strip() == head
    a.close()
