"""Recovery per namespace: what a killed writer leaves is removed by a holder of that
writer's kernel lock only (gitstate/store/recovery.py); real processes, real kills."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from tests.helpers import assert_fsck_clean, git
from tests.ns_workers import JOURNAL_REFS, RUN_EVENTS, refs_to_search

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("langgraph")


def _ns_worker(agent: Path, ns: str, tag: str, pause: str | None = None,
               start: int = 1) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.ns_workers", str(agent), ns, tag,
                             str(start), *(["--pause", pause] if pause else [])], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _ref(ns: str, tag: str, n: int) -> str:
    """The ref write ``n`` of writer ``tag`` of ``ns`` moves (tests/ns_workers.py)."""
    return {"run": f"refs/heads/runs/{tag}-{n // RUN_EVENTS}",
            "thread": f"refs/gitstate/threads/{tag}/%/checkpoints",
            "journal": JOURNAL_REFS[0]}[ns]


def _killed_main_writer(agent: Path) -> None:
    """A main writer killed with its ref lock taken and written: what a SIGKILL leaves."""
    out = subprocess.run([sys.executable, "-m", "tests.workers", "fault_write", str(agent),
                          "set"], cwd=ROOT, env={**os.environ, "GITSTATE_TEST_FAULT": "ref.written"},
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 137, out.stderr


def test_mains_crash_sweep_leaves_the_live_locks_of_every_other_namespace(
        tmp_path: Path) -> None:
    """A run, a thread and the journal each hold their ref's lock (paused inside a write,
    alive); main's next write finds a killed main writer's marker and lock: it removes
    main's lock only, and each paused write then completes."""
    agent = tmp_path / "agent"
    StateRepo.init(agent).close()
    git_dir = agent / "state" / ".git"
    for ns in ("run", "thread"):  # their refs exist already: the pause is on a second write
        first = _ns_worker(agent, ns, f"{ns}1")
        assert first.stdout is not None and first.stdout.readline() == "ready\n"
        assert first.stdout.readline().startswith("1 ")
        first.kill()
        first.communicate(timeout=30)
    paused = {ns: _ns_worker(agent, ns, f"{ns}1", "ref.locked", start=1000)
              for ns in ("run", "thread", "journal")}
    for ns, proc in paused.items():
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n", proc.stderr.read() if proc.stderr else ""
        assert proc.stdout.readline() == "paused\n", ns
    live = {ns: git_dir / (_ref(ns, f"{ns}1", 1000) + ".lock") for ns in paused}
    assert all(lock.exists() for lock in live.values()), live
    _killed_main_writer(agent)
    assert (git_dir / "refs" / "heads" / "main.lock").exists()
    assert (git_dir / "gitstate.lock").read_bytes()[:1] == b"1"  # the crash marker

    with StateRepo(agent) as repo:
        repo.set("after", 1, "the write after the crash")  # sweeps main's leftovers
    assert not (git_dir / "refs" / "heads" / "main.lock").exists()
    assert all(lock.exists() for lock in live.values()), "a live lock was removed"

    for ns, proc in paused.items():
        out, err = proc.communicate("go\n", timeout=60)
        assert proc.returncode == 0, (ns, out, err)
        _n, ref, token = out.splitlines()[-1].split(" ", 2)
        log = "".join(git(agent / "state", "log", "--format=%B", name).stdout
                      for name in refs_to_search(ref))
        assert token in log, (ns, token)
    with StateRepo(agent) as repo:
        assert all(c.ok for c in integrity.verify(repo)), [c for c in integrity.verify(repo)
                                                       if not c.ok]
    assert_fsck_clean(agent / "state")


@pytest.mark.parametrize("ns", ["run", "thread", "journal"])
def test_each_namespace_recovers_its_own_killed_writers_lock(tmp_path: Path, ns: str) -> None:
    """A writer of ``ns`` killed holding its ref's lock: that lock blocks nobody, main's
    writes leave it alone, and the namespace's next writer replaces it and writes."""
    agent = tmp_path / "agent"
    StateRepo.init(agent).close()
    git_dir = agent / "state" / ".git"
    proc = _ns_worker(agent, ns, "t1", "ref.locked", start=1000)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    assert proc.stdout.readline() == "paused\n"
    proc.kill()
    proc.communicate(timeout=30)
    lock = git_dir / (_ref(ns, "t1", 1000) + ".lock")
    assert lock.exists()
    _killed_main_writer(agent)
    with StateRepo(agent) as repo:
        repo.set("after", 1, "main's write after both kills")
    assert lock.exists()  # not main's to remove
    again = _ns_worker(agent, ns, "t1", start=1000)
    assert again.stdout is not None and again.stdout.readline() == "ready\n"
    line = again.stdout.readline()
    again.kill()
    again.communicate(timeout=30)
    assert line.startswith("1000 "), line
    assert_fsck_clean(agent / "state")


def test_a_ref_deletion_replaces_its_own_stale_lock_and_never_a_shared_one(
        tmp_path: Path) -> None:
    """Deleting a thread (its refs archived) under the thread's lock: the ref's own stale
    `<ref>.lock` is replaced; a `packed-refs.lock`, which any namespace's writer may hold,
    is waited for and then named (store.contention), never removed."""
    from gitstate.core.errors import StoreError
    from gitstate.langgraph import GitCheckpointSaver

    agent = tmp_path / "agent"
    for thread in ("t1", "t2"):
        writer = _ns_worker(agent if agent.exists() else _init(agent), "thread", thread)
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        assert writer.stdout.readline().startswith("1 ")
        writer.kill()
        writer.communicate(timeout=30)
    git_dir = agent / "state" / ".git"
    # a killed writer's last put may be in the write-ahead log only: a saver's open
    # replays it into git, so that every thread ref is there before it is packed
    GitCheckpointSaver(agent).close()
    git(agent / "state", "pack-refs", "--all")  # the refs now in packed-refs too
    own = git_dir / "refs/gitstate/threads/t1/%/checkpoints.lock"
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text("a killed writer's\n")
    with GitCheckpointSaver(agent) as saver:
        saver.delete_thread("t1")
        assert saver.get_tuple({"configurable": {"thread_id": "t1"}}) is None
        assert not own.exists()
        shared = git_dir / "packed-refs.lock"
        shared.write_text("a live git's\n")
        with pytest.raises(StoreError) as exc:
            saver.delete_thread("t2")
        assert exc.value.rule == "store.contention" and "packed-refs.lock" in exc.value.message
        assert shared.exists()
        shared.unlink()
        saver.delete_thread("t2")
    assert_fsck_clean(agent / "state")


def _init(agent: Path) -> Path:
    StateRepo.init(agent).close()
    return agent


_COMPACTOR = """
import sys
from pathlib import Path
from gitstate.langgraph.index import CheckpointIndex, Entry, RefEntries
index = CheckpointIndex(Path(sys.argv[1]))
for i in range(60000):
    r = RefEntries(f"t{i}", "", "%040x" % i)
    r.add([Entry("c" * 36, "%040x" % i, None, None, {"step": i, "pad": "x" * 200})])
    index.refs[f"refs/gitstate/threads/t{i}/%/checkpoints"] = r
print("ready", flush=True)
while True:
    index._compact()
    index.refs = dict(index.refs)  # compact again, whatever refresh read
"""


def _killed_compaction(git_dir: Path) -> list[Path]:
    """SIGKILL a process compacting the checkpoint index while its temporary file exists;
    the temporaries it left."""
    index = git_dir / "gitstate-threads.idx"
    for _attempt in range(20):
        child = subprocess.Popen([sys.executable, "-c", _COMPACTOR, str(index)], cwd=ROOT,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(n.startswith(".gitstate-threads.idx.") for n in os.listdir(git_dir)):
                child.send_signal(signal.SIGKILL)
                break
        child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL
        left = sorted(git_dir.glob(".gitstate-threads.idx.*.tmp"))
        if left:
            return left
    raise AssertionError("no kill landed inside a compaction in 20 attempts")


def test_a_killed_index_compaction_leaves_no_temporary_for_good(tmp_path: Path) -> None:
    """A saver killed while it rewrites the checkpoint index leaves its temporary file;
    the next gc (`gitstate gc`, or the maintenance a checkpointer starts) removes it once it
    is a minute old (a younger one may be a live compaction's and is kept), and so does
    main's crash sweep; the threads read as before."""
    from gitstate.langgraph import GitCheckpointSaver
    from tests.helpers import run_cli
    from tests.lg_graph import build

    agent = tmp_path / "agent"
    with GitCheckpointSaver(agent) as saver:
        build(saver).invoke({"order": "O-1", "log": []},
                            {"configurable": {"thread_id": "after-the-kill"}})
    git_dir = agent / "state" / ".git"
    (git_dir / "gitstate-threads.idx").rename(tmp_path / "idx")
    left = _killed_compaction(git_dir)
    (tmp_path / "idx").rename(git_dir / "gitstate-threads.idx")  # its own, not the fake one
    fresh = git_dir / ".gitstate-threads.idx.0123456789abcdef.tmp"
    fresh.write_bytes(b"a live compaction's")
    old = time.time() - 120
    for path in left:
        os.utime(path, (old, old))
    done = run_cli("gc", agent_dir=agent)
    assert done.returncode == 0, done.stderr
    assert not any(p.exists() for p in left), left
    assert fresh.exists()
    os.utime(fresh, (old, old))
    with StateRepo(agent) as repo:
        assert fresh in repo.store.sweep_stale_locks()
    assert not fresh.exists()
    with GitCheckpointSaver(agent) as saver:
        found = saver.get_tuple({"configurable": {"thread_id": "after-the-kill"}})
        assert found is not None and found.checkpoint["channel_values"]["log"] == [
            "looked up"]
    assert git(agent / "state", "for-each-ref", "--format=%(refname)",
               "refs/gitstate/threads/").stdout.split() == [
        "refs/gitstate/threads/after-the-kill/%/checkpoints"]
    assert_fsck_clean(agent / "state")
