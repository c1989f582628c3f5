"""push and pull pick up where a kill left them: a pull killed before its checkout is
finished by the next command (never taken for a hand edit), a push killed after the remote
moved recognises its own commits there, and a lock a killed push left in a path remote is
named with the command that removes it. Real processes, killed at sync's fault points
(gitstate/system/faults.py, SYNC_POINTS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.core.layout import STATE_FILE
from gitstate.runs.format import PREFIX
from gitstate.store import GitStore
from tests.helpers import GIT, git, run_cli, trust_remote

pytestmark = pytest.mark.skipif(GIT is None, reason="needs the git CLI for the remote")
RUN = "refund-O-104"
ROOT = Path(__file__).resolve().parents[2]


def _bare(root: Path) -> Path:
    path = root / "remote.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    return path


def _killed(agent: Path, point: str, *args: str) -> None:
    out = run_cli(*args, agent_dir=agent, process=True, env={"GITSTATE_TEST_FAULT": point})
    assert out.returncode == 137, out.stdout + out.stderr


def _remote_ref(bare: Path, ref: str) -> str:
    return git(bare, "rev-parse", ref).stdout.strip()


def _verify_ok(agent: Path) -> None:
    out = run_cli("verify", agent_dir=agent, process=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _origin(tmp_path: Path) -> tuple[Path, Path]:
    bare = _bare(tmp_path)
    a = tmp_path / "a"
    trust_remote(a)
    with StateRepo.init(a) as repo:
        repo.set("k", 1, "first")
        repo.store.set_remote_url(str(bare))
        repo.remote.push()
    return a, bare


def test_a_pull_killed_before_its_checkout_is_finished_not_adopted(tmp_path: Path) -> None:
    a, bare = _origin(tmp_path)
    b = tmp_path / "b"
    StateRepo.clone(str(bare), b).close()
    with StateRepo(a) as repo:
        for i in range(2, 6):
            repo.set("k", i, f"write {i}")
        repo.remote.push()
    _killed(b, "pull.main_moved", "pull")
    store = GitStore(b / "state")
    head = store.head()
    assert head == _remote_ref(bare, "main")
    status = store.worktree_status(head)
    store.close()
    # the file is still the pre-pull commit's: a leftover, not a hand edit
    assert status.leftover and status.hand_edited == ()
    with GitStore(b / "state").lock():  # busy: opening does not repair it now
        repo = StateRepo(b)
    checks = {c.name: c for c in integrity.verify(repo)}
    repo.close()
    assert "not a hand edit" in checks["worktree"].detail, checks["worktree"]
    assert "gitstate pull" in checks["worktree"].remedy
    adopt = run_cli("adopt", "--reason", "x", agent_dir=b, process=True)
    assert adopt.returncode != 0 and "adopt.nothing" in adopt.stdout + adopt.stderr
    assert run_cli("pull", agent_dir=b, process=True).returncode == 0
    shown = git(b / "state", "show", f"main:{STATE_FILE}").stdout
    assert (b / "state" / STATE_FILE).read_text() == shown
    assert json.loads(shown)["keys"]["k"]["value"] == 5
    assert git(b / "state", "rev-parse", "main").stdout.strip() == head  # nothing adopted
    _verify_ok(b)


def test_a_push_killed_after_the_remote_moved_recognises_its_commits(tmp_path: Path) -> None:
    a, bare = _origin(tmp_path)
    with StateRepo(a) as repo:
        repo.set("k", 2, "two")
        repo.set("k", 3, "three")
    _killed(a, "push.remote_moved", "push")
    with StateRepo(a) as repo:
        assert _remote_ref(bare, "main") == repo.head()  # the push got there; the lease did not
        result = repo.remote.push()
        assert result.refused == [] and result.kept_on is None
        assert repo.remote.status().unpushed_refs == []
        assert repo.store.ref("refs/remotes/origin/main") == repo.head()
    _verify_ok(a)


def test_a_push_killed_after_the_remote_moved_rebases_only_the_rest(tmp_path: Path) -> None:
    """Killed, then another clone pushed, then a local write: the next push re-applies only
    the local write, on top of the other clone's."""
    a, bare = _origin(tmp_path)
    with StateRepo(a) as repo:
        repo.set("k", 2, "two")
    _killed(a, "push.remote_moved", "push")
    b = tmp_path / "b"
    StateRepo.clone(str(bare), b).close()
    with StateRepo(b) as other:
        other.set("other", 1, "from b")
        other.push()
    with StateRepo(a) as repo:
        repo.set("k", 3, "three")
        result = repo.remote.push()
        assert result.refused == [] and result.rebased == 1, result
        assert repo.remote.status().unpushed_refs == []
        assert _remote_ref(bare, "main") == repo.head()
        assert {k: v.value for k, v in repo.state().keys.items()} == {"k": 3, "other": 1}
    _verify_ok(a)


def test_a_run_push_killed_before_its_tracking_ref_is_resumed(tmp_path: Path) -> None:
    a, bare = _origin(tmp_path)
    with StateRepo(a) as repo:
        repo.runs.start(RUN, description="refund", criteria=["refund issued"], reason="asked")
    _killed(a, "push.runs_sent", "push")
    with StateRepo(a) as repo:
        assert _remote_ref(bare, PREFIX + RUN) == repo.store.ref(PREFIX + RUN)
        repo.runs.event(RUN, {"type": "question_opened", "question": "amount?"}, "ask")
        result = repo.remote.push()
        assert result.runs == {"pushed": [RUN], "refused": {}}, result.runs
        assert _remote_ref(bare, PREFIX + RUN) == repo.store.ref(PREFIX + RUN)
    _verify_ok(a)


@pytest.mark.parametrize("ref", ["refs/heads/main", PREFIX + RUN])
def test_a_stale_lock_in_a_path_remote_is_named_with_its_fix(tmp_path: Path, ref: str) -> None:
    a, bare = _origin(tmp_path)
    with StateRepo(a) as repo:
        repo.runs.start(RUN, description="refund", criteria=["refund issued"], reason="asked")
        repo.remote.push()
        repo.set("k", 2, "two")
        repo.runs.event(RUN, {"type": "question_opened", "question": "amount?"}, "ask")
    lock = bare / f"{ref}.lock"
    lock.write_text("0" * 40 + "\n")  # what git's receive-pack leaves when it is killed
    out = run_cli("push", agent_dir=a, process=True)
    text = out.stdout + out.stderr
    assert out.returncode == 3 and "remote.locked" in text and "Traceback" not in text, text
    assert f"rm '{lock}'" in text
    os.utime(lock, (time.time() - 120, time.time() - 120))  # no push has run for a while
    out = run_cli("verify", agent_dir=a, process=True)
    assert out.returncode == 1 and "remote-locks" in out.stdout, out.stdout + out.stderr
    assert f"rm '{lock}'" in out.stdout
    lock.unlink()
    out = run_cli("push", agent_dir=a, process=True)
    assert out.returncode == 0, out.stdout + out.stderr
    with StateRepo(a) as repo:
        assert _remote_ref(bare, "main") == repo.head()
        assert _remote_ref(bare, PREFIX + RUN) == repo.store.ref(PREFIX + RUN)
    _verify_ok(a)


def test_a_lock_held_for_a_moment_is_waited_through(tmp_path: Path) -> None:
    """A concurrent push's lock lives milliseconds: the push is sent again, not refused."""
    a, bare = _origin(tmp_path)
    lock = bare / "refs" / "heads" / "main.lock"
    lock.write_text("0" * 40 + "\n")
    release = threading.Timer(0.3, lock.unlink)
    release.start()
    with StateRepo(a) as repo:
        repo.set("k", 2, "two")
        result = repo.remote.push()
        release.join()
        assert result.pushed == 1 and _remote_ref(bare, "main") == repo.head()


def test_a_push_killed_mid_rebase_leaves_no_rewrite_behind(tmp_path: Path) -> None:
    """Killed after the rebase moved local main, before the projection followed: the
    replaced local commits are not taken for a history rewritten outside gitstate."""
    a, bare = _origin(tmp_path)
    b = tmp_path / "b"
    StateRepo.clone(str(bare), b).close()
    with StateRepo(b) as other:
        other.set("other", 1, "from b")
        other.push()
    with StateRepo(a) as repo:
        repo.set("k", 2, "two")
    _killed(a, "push.rebased", "push")
    with StateRepo(a) as repo:
        repo.set("k", 3, "three")  # the next write works
        result = repo.remote.push()
        assert result.refused == [] and _remote_ref(bare, "main") == repo.head()
        assert {k: v.value for k, v in repo.state().keys.items()} == {"k": 3, "other": 1}
    _verify_ok(a)


@pytest.mark.parametrize("transport", ["path", "daemon"])
def test_push_and_pull_killed_at_each_phase_lose_nothing(transport: str) -> None:
    """bench/remote_kills.py at its reduced count (every sync fault point and two random
    SIGKILLs, real processes): nothing acknowledged lost, verify passes after each
    recovery. The full count is the bench's (figures in docs/reliability.md)."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "remote_kills.py"), "--quick",
                          "--transport", transport, "--seed", "0"], capture_output=True,
                         text=True, timeout=300, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    row = out.stdout.splitlines()[1].split()
    assert row[:2] == [transport, "8"] and row[5:7] == ["0", "0"], out.stdout
