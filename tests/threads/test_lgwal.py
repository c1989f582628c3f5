"""The checkpointer's write-ahead log (gitstate/lgwal.py) in real processes: every put
acknowledged before a SIGKILL is there after reopening; so is every put after a simulated
power cut that drops what git held unflushed (packs, indexes, refs), the log's replay
putting it back; a writer killed between its log record and its git files has its commit
put back too; and git fsck --strict stays clean."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from gitstate.langgraph import GitCheckpointSaver
from gitstate.threads import wal as lgwal
from tests.helpers import GIT, assert_fsck_clean, git

ROOT = Path(__file__).resolve().parents[2]

WRITER = """
import sys
from langgraph.checkpoint.base import empty_checkpoint
from gitstate.langgraph import GitCheckpointSaver
saver = GitCheckpointSaver(sys.argv[1])
threads, start = sys.argv[2].split(","), int(sys.argv[3])
parents = {t: None for t in threads}
for i in range(start, start + 100000):
    t = threads[i % len(threads)]
    cp = empty_checkpoint()
    cp["channel_values"] = {"k": f"{t}-{i}", "big": "x" * (i % 7) * 3000}
    cp["channel_versions"] = {"k": i, "big": i}
    conf = {"configurable": {"thread_id": t, "checkpoint_ns": ""}}
    if parents[t]:
        conf["configurable"]["checkpoint_id"] = parents[t]
    stored = saver.put(conf, cp, {"source": "loop", "step": i}, {"k": i, "big": i})
    saver.put_writes(stored, [("k", f"w{i}")], f"task-{i}")
    parents[t] = stored["configurable"]["checkpoint_id"]
    print(t, parents[t], flush=True)  # acknowledged: put and put_writes returned
"""


def _conf(thread: str, cid: str | None = None) -> dict[str, dict[str, str]]:
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if cid:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


def _run_and_kill(agent: Path, threads: list[str], start: int, after: int,
                  env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """A writer process, SIGKILLed once it acknowledged ``after`` puts (at a random
    moment of the next ones); the (thread, checkpoint id) it acknowledged."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(agent), ",".join(threads),
                             str(start)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    acked = []
    for line in proc.stdout:
        thread, cid = line.split()
        acked.append((thread, cid))
        if len(acked) >= after:
            time.sleep(random.uniform(0, 0.01))
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    acked += [tuple(line.split()) for line in proc.stdout.read().splitlines()
              if len(line.split()) == 2]  # type: ignore[misc]
    return acked


def _assert_all_there(agent: Path, acked: list[tuple[str, str]]) -> None:
    with GitCheckpointSaver(agent) as saver:
        for thread, cid in acked:
            tup = saver.get_tuple(_conf(thread, cid))
            assert tup is not None, (thread, cid)
            assert ("task-" + tup.checkpoint["channel_values"]["k"].split("-")[-1],
                    "k", "w" + tup.checkpoint["channel_values"]["k"].split("-")[-1]) \
                in (tup.pending_writes or [])
        for thread in {t for t, _ in acked}:  # the newest acknowledged is the head
            newest = [c for t, c in acked if t == thread][-1]
            latest = saver.get_tuple(_conf(thread))
            assert latest is not None and latest.config["configurable"]["checkpoint_id"] \
                >= newest
    if GIT is not None:
        assert_fsck_clean(agent / "state")


def test_every_acknowledged_put_survives_sigkill(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    acked: list[tuple[str, str]] = []
    for round_ in range(4):
        acked += _run_and_kill(agent, ["a", "b", "c"], round_ * 1000,
                               random.randint(20, 90))
        _assert_all_there(agent, acked)


def _drop_unflushed(agent: Path) -> int:
    """What a power cut may take from git on a file system that keeps no order (ext4
    without a journal): every pack, index and ref a commit in a log's active file wrote,
    never flushed — packs removed or torn, refs put back to the log's first value for them
    or torn. Returns how many commits the active files held."""
    git_dir = agent / "state" / ".git"
    held = 0
    for n in range(lgwal.SHARDS):
        if not (git_dir / lgwal.LOG_FILE.format(shard=n, half=0)).exists():
            continue
        shard = lgwal.Shard(git_dir, n)
        try:
            shard.refresh()
            first: dict[str, str | None] = {}
            for i, c in enumerate(shard.commits):
                held += 1
                first.setdefault(c.ref, c.old)
                for suffix in (".pack", ".idx"):
                    path = git_dir / "objects" / "pack" / (c.pack + suffix)
                    if i % 3 == 0 and path.exists():
                        path.write_bytes(path.read_bytes()[:40])  # torn
                    else:
                        path.unlink(missing_ok=True)
            for i, (ref, old) in enumerate(sorted(first.items())):
                path = git_dir / ref
                if i % 2 or old is None:
                    path.write_bytes(b"")  # torn: a name with no id in it
                else:
                    path.write_text(old + "\n")
        finally:
            shard.close()
    return held


def test_replay_restores_what_a_power_cut_drops(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    acked = _run_and_kill(agent, ["a", "b"], 0, 40)
    assert _drop_unflushed(agent) > 0
    if GIT is not None:  # what plain git sees before gitstate reopens: damage
        broken = git(agent / "state", "fsck", "--strict", "--no-dangling")
        assert broken.returncode != 0
    _assert_all_there(agent, acked)
    acked += _run_and_kill(agent, ["a", "b"], 1000, 30)  # and the threads go on
    _assert_all_there(agent, acked)


@pytest.mark.parametrize("point", ["pack.tmp_pack", "pack.idx_renamed", "objects"])
def test_a_commit_logged_before_its_writer_died_is_put_back(tmp_path: Path,
                                                            point: str) -> None:
    """Killed after its record was flushed and before its ref moved: the put never
    returned, but its record is durable, so it counts (as a database's committed
    transaction whose caller died): the next opener, or the next put of the thread,
    puts it into git."""
    agent = tmp_path / "agent"
    acked = _run_and_kill(agent, ["t"], 0, 5)
    proc = subprocess.run([sys.executable, "-c", WRITER, str(agent), "t", "500"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "GITSTATE_TEST_FAULT": point})
    assert proc.stdout == ""  # died in its first put
    ref = git(agent / "state", "rev-parse", "refs/gitstate/threads/t/%/checkpoints")
    before = ref.stdout.strip()
    _assert_all_there(agent, acked)
    with GitCheckpointSaver(agent) as saver:
        tup = saver.get_tuple(_conf("t"))
        assert tup is not None and tup.metadata["step"] == 500  # the logged one
        assert saver.store.ref("refs/gitstate/threads/t/%/checkpoints") != before


def test_a_log_shard_is_a_fixed_pair_of_files(tmp_path: Path) -> None:
    """100 threads share the shards' files: no file is made per thread."""
    from langgraph.checkpoint.base import empty_checkpoint

    with GitCheckpointSaver(tmp_path / "agent") as saver:
        for i in range(100):
            stored = saver.put(_conf(f"th-{i}"), empty_checkpoint(),
                               {"source": "input", "step": -1}, {})
            saver.put_writes(stored, [("k", i)], "task")
        logs = sorted(p.name for p in saver.store.git_dir.glob("gitstate-wal-*"))
        assert len(logs) <= 2 * lgwal.SHARDS
        assert not list(saver.store.git_dir.glob("gitstate-thread-*.pending"))
        digest = hashlib.sha256(b"th-7").hexdigest()[:24]
        assert f"gitstate-wal-{lgwal.shard_of(digest)}-0.log" in logs


def test_a_forked_child_waits_for_the_shard_lock_its_parent_holds(tmp_path: Path) -> None:
    """The shard keeps its -0.log open and takes the lock on that descriptor; a child
    forked while the parent holds it shares that open file, so it must open its own and
    wait (a real fork, timed through a pipe)."""
    shard = lgwal.Shard(tmp_path, 0)
    with shard.locked():
        pass  # the first lock opened and kept the descriptor
    assert shard.fds[0] is not None
    read_end, write_end = os.pipe()
    with shard.locked():
        pid = os.fork()
        if pid == 0:  # the child
            try:
                with shard.locked():
                    os.write(write_end, b"%f" % time.monotonic())
            finally:
                os._exit(0)
        time.sleep(0.5)
        released = time.monotonic()
    os.close(write_end)
    got = os.read(read_end, 64)
    os.waitpid(pid, 0)
    assert got and float(got) >= released
    with shard.locked():  # the parent's own descriptor still takes it
        pass
