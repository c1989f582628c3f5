"""Specification of long-lived processes: a process that keeps a repository open (an MCP
server, a checkpointer, a pull loop) reads what other processes wrote after it opened it,
through packs folded and repacked away meanwhile, and never calls an object missing that a
fresh process finds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from tests.helpers import GIT, assert_fsck_clean, git

ROOT = Path(__file__).resolve().parents[2]


def _gitstate(agent_dir: Path, *args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "gitstate", "--agent-dir", str(agent_dir),
                          *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_process_that_stays_open_reads_through_another_process_gc(tmp_path: Path) -> None:
    """The open process has read every object (dulwich's packs and the header reader's
    indexes listed); another process writes and runs `gitstate gc`, which deletes every
    pack the open one knew. Object sizes (old objects now in the new pack, new ones), the
    state and a run's check all read through, as in a fresh process."""
    agent = tmp_path / "agent"
    with StateRepo.init(agent) as repo:
        repo.set("k", 1, "one")
        repo.runs.start("r1", description="d", criteria=["c"], reason="start")
    with StateRepo(agent) as repo:
        store = repo.store
        old_blob = next(iter(store.file_ids(store.head() or "").values()))
        size = store.object_size(old_blob)
        assert repo.runs.read("r1").state["version"] == 1
        _gitstate(agent, "set", "k", "2", "--reason", "from elsewhere")
        _gitstate(agent, "run", "event", "r1", '{"type": "question_opened", "question": "q"}',
                  "--reason", "from elsewhere")
        _gitstate(agent, "gc")
        _gitstate(agent, "set", "k", "3", "--reason", "after the gc")
        assert store.object_size(old_blob) == size
        head = store.head() or ""
        assert store.object_size(next(iter(store.file_ids(head).values()))) > 0
        assert repo.state().keys["k"].value == 3
        assert repo.runs.read("r1").state["version"] == 2
        assert all(c.ok for c in integrity.verify(repo)), [
            (c.name, c.detail) for c in integrity.verify(repo) if not c.ok]


def test_a_pull_loop_beside_a_pusher_on_a_path_remote(tmp_path: Path) -> None:
    """One process pulls again and again while another pushes sets and run events to the
    same path remote, and maintenance repacks the puller's repository between pulls: every
    pull succeeds, and the last one leaves main and the run as the pusher left them."""
    remote = tmp_path / "remote.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(remote)],
                   check=True)
    with StateRepo.init(tmp_path / "a") as a:
        a.set("k", -1, "start")
        a.runs.start("r1", description="d", criteria=["c"], reason="start")
        a.store.set_remote_url(str(remote))
        a.push()
    StateRepo.clone(str(remote), tmp_path / "b").close()
    with (tmp_path / "b" / "config.toml").open("a", encoding="utf-8") as config:
        config.write("\n[trust]\ntrust_remote = true\n")  # the runtime's events travel
    rounds = 8
    pusher = subprocess.Popen([sys.executable, "-m", "tests.workers", "pusher",
                               str(tmp_path / "a"), str(rounds)], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    failures: list[str] = []
    with StateRepo(tmp_path / "b") as puller:
        pulls = 0
        while pusher.poll() is None or pulls < 3:
            try:
                puller.pull()
            except Exception as exc:  # every failure is the test's finding
                failures.append(f"{type(exc).__name__} {getattr(exc, 'rule', '')}: {exc}")
            pulls += 1
            if pulls % 3 == 0:
                _gitstate(tmp_path / "b", "gc")
        _, err = pusher.communicate(timeout=120)
        assert pusher.returncode == 0, err[-2000:]
        puller.pull()
        assert failures == []
        assert puller.state().keys["k"].value == rounds - 1
        assert puller.runs.read("r1").state["version"] == rounds + 1
    assert git(tmp_path / "b" / "state", "rev-parse", "main").stdout == \
        git(remote, "rev-parse", "main").stdout
    assert_fsck_clean(tmp_path / "b" / "state")
