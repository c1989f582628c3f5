"""The checkpointer's git layout: one commit per super-step, pending writes in a flushed
journal until the next checkpoint's commit carries them (a SIGKILLed writer's included),
the checkpoint index (rebuilt when missing, re-read when a ref moved under it), retention,
and threads written by the earlier layout read and continued."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph

from gitstate.core import layout
from gitstate.core.trailers import encode_json
from gitstate.langgraph import PREFIX, GitCheckpointSaver, enc
from gitstate.store.trees import BlobRef, Change
from gitstate.threads import sync as lgsync
from gitstate.threads import wal as lgwal
from gitstate.threads.format import typed
from tests.helpers import GIT, assert_fsck_clean, git

ROOT = Path(__file__).resolve().parents[2]


class Loop(TypedDict):
    count: int
    log: list[str]


def _step(state: Loop) -> dict[str, Any]:
    return {"count": state["count"] + 1, "log": [*state["log"], f"step {state['count']}"]}


def _app(saver: GitCheckpointSaver) -> Any:
    graph = StateGraph(Loop)
    graph.add_node("a", _step)
    graph.add_node("b", _step)
    graph.add_edge(START, "a")
    graph.add_edge("a", "b")
    graph.add_edge("b", END)
    return graph.compile(checkpointer=saver)


def _conf(thread: str, cid: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if cid is not None:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_one_commit_per_super_step_and_no_writes_ref(tmp_path: Path, durability: str) -> None:
    with GitCheckpointSaver(tmp_path / "agent") as saver:
        app = _app(saver)
        out = app.invoke({"count": 0, "log": []}, _conf("t"), durability=durability)
        assert out["log"] == ["step 0", "step 1"]
        checkpoints = list(saver.list(_conf("t")))
        refs = saver.store.refs_under(PREFIX)
        assert list(refs) == [f"{enc('t')}/%/checkpoints"]  # no writes ref any more
        commits = list(saver.store.walk(refs[f"{enc('t')}/%/checkpoints"]))
        assert len(commits) == len(checkpoints) == (4 if durability != "exit" else 1)
        assert saver.get_tuple(_conf("t")).checkpoint["channel_values"]["log"] == out["log"]
        if GIT is not None:
            ref = f"{PREFIX}{enc('t')}/%/checkpoints"
            names = git(saver.repo.state_dir, "ls-tree", "--name-only", ref).stdout.split()
            assert {"checkpoint", "metadata", "channel.log", "channel.count"} <= set(names)
            # the writes of the last step ride on its checkpoint; with durability="async"
            # LangGraph hands writes and the next checkpoint over from a background task, in
            # either order, so they may ride on a later commit
            if durability == "sync":
                assert "pending-writes" in git(saver.repo.state_dir, "show", "--stat",
                                               f"{ref}~1").stdout
            assert_fsck_clean(saver.repo.state_dir)


KILLED = """
import sys, os, time
from gitstate.langgraph import GitCheckpointSaver
from langgraph.checkpoint.base import empty_checkpoint
saver = GitCheckpointSaver(sys.argv[1])
conf = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
stored = saver.put(conf, empty_checkpoint(), {"source": "input", "step": -1}, {})
saver.put_writes(stored, [("log", "done by task 1"), ("__interrupt__", "ask")], "task-1")
print(stored["configurable"]["checkpoint_id"], flush=True)
time.sleep(120)
"""


def test_pending_writes_of_a_killed_writer_are_read_and_then_committed(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    GitCheckpointSaver(agent).close()
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(agent)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    cid = proc.stdout.readline().strip()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    with GitCheckpointSaver(agent) as saver:
        tup = saver.get_tuple(_conf("t"))
        assert tup is not None and tup.config["configurable"]["checkpoint_id"] == cid
        assert sorted(tup.pending_writes or []) == [
            ("task-1", "__interrupt__", "ask"), ("task-1", "log", "done by task 1")]
        ref = f"{PREFIX}{enc('t')}/%/checkpoints"
        head = saver.store.ref(ref)
        # a retry of the task writes again: its regular write is kept as first written
        saver.put_writes(tup.config, [("log", "a retry")], "task-1")
        assert ("task-1", "log", "done by task 1") in (saver.get_tuple(_conf("t"))
                                                       .pending_writes or [])
        commits = saver.commit_pending_writes("t")  # what a push would need
        assert len(commits) == 1 and saver.store.parents(commits[0]) == (head,)
        assert not lgsync.pending(saver.store, "t")  # folded: nothing pending any more
        again = saver.get_tuple(_conf("t", cid))
        assert again is not None and sorted(again.pending_writes or []) == sorted(
            tup.pending_writes or [])
        if GIT is not None:
            assert_fsck_clean(saver.repo.state_dir)


def _put(saver: GitCheckpointSaver, thread: str, parent: str | None, i: int) -> str:
    cp = empty_checkpoint()
    cp["channel_values"] = {"k": f"{thread}-{i}"}
    cp["channel_versions"] = {"k": i + 1}
    stored = saver.put(_conf(thread, parent), cp, {"source": "loop", "step": i,
                                                   "kind": "even" if i % 2 == 0 else "odd"},
                       {"k": i + 1})
    return str(stored["configurable"]["checkpoint_id"])


def test_list_across_threads_from_the_index_rebuilt_when_missing(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    made: list[str] = []
    with GitCheckpointSaver(agent) as saver:
        for i in range(4):
            for t in ("a", "b", "c"):
                made.append(_put(saver, t, None if i == 0 else
                                 saver.get_tuple(_conf(t)).config["configurable"]
                                 ["checkpoint_id"], i))
        newest = [t.config["configurable"]["checkpoint_id"] for t in saver.list(None, limit=5)]
        assert newest == sorted(made, reverse=True)[:5]
        odd = list(saver.list(None, filter={"kind": "odd"}, limit=3))
        assert len(odd) == 3 and all(t.metadata["kind"] == "odd" for t in odd)
    (agent / "state" / ".git" / layout.THREAD_INDEX_FILE).unlink()
    with GitCheckpointSaver(agent) as saver:
        again = [t.config["configurable"]["checkpoint_id"] for t in saver.list(None, limit=5)]
        assert again == newest
        assert len(list(saver.list(_conf("b")))) == 4
        if GIT is None:
            return
        # a ref moved by git behind the index's back: read from git again
        ref = f"{PREFIX}{enc('b')}/%/checkpoints"
        git(saver.repo.state_dir, "update-ref", ref, f"{ref}~2")
        assert len(list(saver.list(_conf("b")))) == 2
        assert saver.get_tuple(_conf("b")).checkpoint["channel_values"]["k"] == "b-1"


def test_retention_keeps_the_newest_and_tombstones_the_rest(tmp_path: Path) -> None:
    with GitCheckpointSaver(tmp_path / "agent") as saver:
        parent = None
        for i in range(6):
            parent = _put(saver, "t", parent, i)
        saver.prune(["t"], keep=2)
        listed = [t.checkpoint["channel_values"]["k"] for t in saver.list(_conf("t"))]
        assert listed == ["t-5", "t-4"]
        head = saver.store.ref(f"{PREFIX}{enc('t')}/%/checkpoints")
        assert head is not None
        assert len(list(saver.store.walk(head))) == 7  # the pruned ones stay in history
        _put(saver, "t", parent, 6)
        assert len(list(saver.list(_conf("t")))) == 3


def _old_put(saver: GitCheckpointSaver, thread: str, parent: str | None, cid: str,
             values: dict[str, Any], versions: dict[str, int], new: dict[str, int],
             step: int) -> None:
    """A checkpoint as the earlier layout wrote it: ``blobs/<channel>/<version>`` trees."""
    store, serde = saver.store, saver.serde
    ref = saver.ref_name(thread, "", "checkpoints")
    head = store.ref(ref)
    cp = {**empty_checkpoint(), "id": cid, "channel_versions": versions}
    cp.pop("channel_values")
    changes: dict[str, Change] = {
        "checkpoint": typed(serde.dumps_typed(cp)),
        "metadata": typed(serde.dumps_typed({"source": "loop", "step": step})), "blobs": None}
    for ch, v in versions.items():
        path = f"blobs/{enc(ch)}/{enc(str(v))}"
        if ch in new:
            changes[path] = typed(serde.dumps_typed(values[ch]))
        else:
            changes[path] = BlobRef(store.tree_paths(head, [path])[path]) if head else None
    message = (f"checkpoint {cid}: step {step} (loop)\n\nGitstate-Checkpoint: "
               f"{encode_json(cid)}\nGitstate-Parent-Checkpoint: {encode_json(parent)}\n"
               f"Gitstate-Source: \"loop\"\nGitstate-Step: {step}\n"
               f"Gitstate-Latest: {encode_json(cid)}\n")
    assert store.tree_commit(ref, head, changes, message.encode(), saver.identity, 1) is not None


def test_a_thread_of_the_earlier_layout_is_read_and_continued(tmp_path: Path) -> None:
    with GitCheckpointSaver(tmp_path / "agent") as saver:
        _old_put(saver, "old", None, "1ef-01", {"a": 1, "b": "kept"}, {"a": 1, "b": 1},
                 {"a": 1, "b": 1}, 0)
        _old_put(saver, "old", "1ef-01", "1ef-02", {"a": 2}, {"a": 2, "b": 1}, {"a": 2}, 1)
        header = json.dumps({"task_id": "t1", "channel": "a", "idx": 0, "task_path": ""})
        writes = saver.ref_name("old", "", "writes")
        assert saver.store.tree_commit(writes, None, {f"{enc('1ef-02')}/t1/0": header.encode()
                                       + b"\n" + typed(saver.serde.dumps_typed(3))},
                                       b"writes\n", saver.identity, 1) is not None
        tup = saver.get_tuple(_conf("old"))
        assert tup is not None and tup.checkpoint["channel_values"] == {"a": 2, "b": "kept"}
        assert tup.pending_writes == [("t1", "a", 3)]
        assert [t.config["configurable"]["checkpoint_id"] for t in
                saver.list(_conf("old"))] == ["1ef-02", "1ef-01"]
        cp = {**empty_checkpoint(), "id": "1ef-03", "channel_versions": {"a": 3, "b": 1},
              "channel_values": {"a": 3, "b": "kept"}}
        saver.put(_conf("old", "1ef-02"), cp, {"source": "loop", "step": 2}, {"a": 3})
        now = saver.get_tuple(_conf("old"))
        assert now is not None and now.checkpoint["channel_values"] == {"a": 3, "b": "kept"}
        assert saver.get_tuple(_conf("old", "1ef-01")).checkpoint["channel_values"] == {
            "a": 1, "b": "kept"}
        head = saver.store.ref(saver.ref_name("old", "", "checkpoints"))
        assert head is not None and "blobs" not in saver.store.file_ids(head)
        if GIT is not None:
            assert_fsck_clean(saver.repo.state_dir)


def _logs(saver: GitCheckpointSaver, thread: str) -> list[Path]:
    shard = lgwal.shard_of(hashlib.sha256(thread.encode()).hexdigest()[:24])
    return [saver.store.git_dir / lgwal.LOG_FILE.format(shard=shard, half=h) for h in (0, 1)]


def test_the_log_is_written_in_place_and_a_torn_record_ends_it(tmp_path: Path) -> None:
    with GitCheckpointSaver(tmp_path / "agent") as saver:
        parent = None
        for i in range(30):
            parent = _put(saver, "t", parent, i)
            saver.put_writes(_conf("t", parent), [("k", f"w{i}"), ("x", i)], f"task-{i}")
        first, second = _logs(saver, "t")
        assert first.stat().st_size == lgwal.PREALLOC  # written in place, never grown
        assert not second.exists()  # no checkpoint yet: 30 commits
        tup = saver.get_tuple(_conf("t"))
        assert tup is not None and sorted(tup.pending_writes or []) == [
            ("task-29", "k", "w29"), ("task-29", "x", 29)]
    # closing checkpointed the log: the second file took over with the pending writes
    data = bytearray(second.read_bytes())
    at = data.rindex(b'"channel":"x"')  # the last put_writes' second record
    data[at + 2] ^= 0xFF
    second.write_bytes(bytes(data))
    with GitCheckpointSaver(tmp_path / "agent") as saver:
        left = saver.get_tuple(_conf("t")).pending_writes or []
        assert left == [("task-29", "k", "w29")]  # the torn record and nothing after it
        saver.put_writes(_conf("t", parent), [("k", "after")], "task-30")
        assert len(saver.get_tuple(_conf("t")).pending_writes or []) == 2
        assert len(list(saver.list(_conf("t")))) == 30


def test_the_windowed_secret_scan_finds_what_the_whole_scan_finds() -> None:
    from gitstate.core import secretscan
    from gitstate.threads.format import WINDOW, scan_windows

    token = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
    assert secretscan.scan_bytes(token.encode()) is not None
    filler = b"turn 12: refund order customer ledger approve check amount policy " * 1200
    assert scan_windows(filler) is None and scan_windows(filler) is None  # cached clean
    for secret in (token.encode(), token.encode().hex().encode()):
        for at in (WINDOW - 20, WINDOW - 3, WINDOW + 1, 2 * WINDOW - len(secret) // 2,
                   len(filler) - 10):
            data = filler[:at] + secret + filler[at:]
            assert scan_windows(data) is not None, (len(secret), at)
    long_run = b"ab" * 30000  # one token of 60 kB: a window holds it whole
    hidden = b"x " * 9000 + long_run[:31111] + token.encode().hex().encode() + long_run
    assert (scan_windows(hidden) is None) == (secretscan.scan_bytes(hidden) is None)
