"""One writer per LangGraph thread (gitstate/langgraph/fence.py): an owner claims a thread, a
second writer resuming it supersedes the first, and the first's later writes are refused
with ``thread.superseded`` and never become durable — in one process, with real processes,
with the first writer stopped (SIGSTOP) while the second takes over, and with two
processes resuming one interrupted graph."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import empty_checkpoint

from gitstate.core.errors import ThreadSuperseded
from gitstate.langgraph import GitCheckpointSaver
from gitstate.threads import sync as lgsync
from tests.helpers import GIT, assert_fsck_clean, git

ROOT = Path(__file__).resolve().parents[2]
CONF: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def _put(saver: GitCheckpointSaver, value: str, parent: str | None = None) -> str:
    cp = empty_checkpoint()
    cp["channel_values"] = {"k": value}
    cp["channel_versions"] = {"k": 1}
    conf = {"configurable": {**CONF["configurable"], "checkpoint_id": parent}}
    return str(saver.put(conf, cp, {"source": "loop", "step": 0}, {"k": 1})  # type: ignore[arg-type]
               ["configurable"]["checkpoint_id"])


def _head(saver: GitCheckpointSaver) -> str | None:
    return saver.store.ref(saver.ref_name("t", "", "checkpoints"))


def test_a_superseded_saver_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    with GitCheckpointSaver(agent) as first, GitCheckpointSaver(agent) as second:
        mine = _put(first, "first-1")  # the first write claims the thread
        assert first.fence.holder("t")["owner"] == first.fence.owner  # type: ignore[index]
        _put(second, "second-1", mine)  # a second writer resuming it takes it over
        head = _head(first)
        with pytest.raises(ThreadSuperseded) as refused:
            _put(first, "first-2", mine)
        assert refused.value.rule == "thread.superseded"
        assert refused.value.details["claimed_by"] == second.fence.owner
        with pytest.raises(ThreadSuperseded):  # every later write too, put_writes as well
            first.put_writes({"configurable": {**CONF["configurable"],
                                               "checkpoint_id": mine}}, [("k", "x")], "task")
        assert _head(first) == head
        assert not lgsync.pending(first.store, "t")
        values = [t.checkpoint["channel_values"]["k"] for t in first.list(CONF)]
        assert values == ["second-1", "first-1"]
        number = first.claim("t")  # taking it back is explicit
        assert number == 3
        _put(first, "first-3", mine)
        with pytest.raises(ThreadSuperseded):
            _put(second, "second-2", mine)


def test_a_superseded_saver_cannot_delete_prune_or_copy_over_the_thread(
        tmp_path: Path) -> None:
    """Deletes, prunes and copies onto a thread are fenced like its writes: the superseded
    saver's are refused and leave the thread as its new writer has it; a saver that never
    wrote the thread (an operator's pruning process) may prune it without taking it."""
    agent = tmp_path / "agent"
    with GitCheckpointSaver(agent) as first, GitCheckpointSaver(agent) as second:
        mine = _put(first, "first-1")
        theirs = _put(second, "second-1", mine)
        _put(second, "second-2", theirs)
        head = _head(second)
        for attempt in (lambda: first.delete_thread("t"), lambda: first.prune(["t"]),
                        lambda: first.prune(["t"], strategy="delete"),
                        lambda: first.copy_thread("other", "t")):
            with pytest.raises(ThreadSuperseded):
                attempt()
            assert _head(second) == head
        assert second.get_tuple(CONF) is not None
    with GitCheckpointSaver(agent) as operator:
        operator.prune(["t"], keep=1)  # never wrote it: prunes without a claim
        assert operator.fence.holder("t")["owner"] == second.fence.owner  # type: ignore[index]


def test_savers_naming_one_owner_share_the_claim(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    with GitCheckpointSaver(agent, owner="pool-1") as a, \
            GitCheckpointSaver(agent, owner="pool-1") as b:
        one = _put(a, "a")
        two = _put(b, "b", one)
        _put(a, "a-again", two)
        assert len(list(a.list(CONF))) == 3


def test_a_torn_claim_record_names_no_one(tmp_path: Path) -> None:
    """A record a crash tore (or anyone wrote) is no claim: the holder is superseded, the
    next writer claims."""
    agent = tmp_path / "agent"
    with GitCheckpointSaver(agent) as first, GitCheckpointSaver(agent) as second:
        _put(first, "first-1")
        first._lock_path("t").write_bytes(b'{"claim": 9, "own')
        with pytest.raises(ThreadSuperseded):
            _put(first, "first-2")
        _put(second, "second-1")
        assert second.fence.holder("t")["claim"] == 1  # type: ignore[index]


def _lines(proc: subprocess.Popen[str], until: str) -> list[dict[str, Any]]:
    assert proc.stdout is not None
    out = []
    for line in proc.stdout:
        out.append(json.loads(line))
        if until in out[-1]:
            return out
    raise AssertionError(f"the writer ended before {until!r}: {out}")


def _writer(agent: Path, name: str, n: int, pause: float) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.lg_fence_writer", str(agent), "t",
                             name, str(n), str(pause)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_stopped_writer_is_superseded_and_refused_when_it_runs_again(
        tmp_path: Path) -> None:
    """The first writer is stopped (SIGSTOP) between two puts; a second process resumes
    the thread and writes; the first continues (SIGCONT) and its next put is refused with
    thread.superseded, so nothing it writes after the takeover is in the thread."""
    agent = tmp_path / "agent"
    GitCheckpointSaver(agent).close()
    first = _writer(agent, "A", 20, 0.5)
    try:
        before = _lines(first, "idle")  # A put one checkpoint and sleeps
        os.kill(first.pid, signal.SIGSTOP)
        second = _writer(agent, "B", 2, 0)
        out, err = second.communicate(timeout=120)
        assert second.returncode == 0, err[-2000:]
        b_ids = [line["id"] for line in map(json.loads, out.splitlines()) if "put" in line]
        assert len(b_ids) == 2
        os.kill(first.pid, signal.SIGCONT)
        rest = _lines(first, "refused")
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGCONT)
            first.kill()
    a_ids = [line["id"] for line in before + rest if "put" in line]
    refused = rest[-1]
    assert refused["refused"] == "thread.superseded" and "claimed by another" in \
        refused["message"]
    assert not any("put" in line for line in rest)  # A wrote nothing after the takeover
    with GitCheckpointSaver(agent) as saver:
        listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(CONF)]
        assert listed == sorted(a_ids + b_ids, reverse=True)
        assert refused["id"] not in listed
        latest = saver.get_tuple(CONF)
        assert latest is not None and latest.checkpoint["channel_values"]["k"] == "B-1"
    if GIT is not None:
        ref = "refs/gitstate/threads/t/%/checkpoints"
        assert git(agent / "state", "rev-list", "--count", ref).stdout.strip() == \
            str(len(a_ids) + len(b_ids))
        assert_fsck_clean(agent / "state")


def test_a_second_process_resuming_an_interrupted_graph_supersedes_the_first(
        tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    GitCheckpointSaver(agent).close()
    first = subprocess.Popen([sys.executable, "-m", "tests.lg_fence_writer", str(agent), "t",
                              "graph"], cwd=ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert first.stdin is not None
    try:
        first.stdin.write("start\n")
        first.stdin.flush()
        started = _lines(first, "interrupted")[-1]
        assert started["interrupted"] is True and started["log"] == ["looked up"]
        second = subprocess.run([sys.executable, "-m", "tests.lg_fence_writer", str(agent),
                                 "t", "graph"], cwd=ROOT, input="approve\n",
                                capture_output=True, text=True, timeout=120, check=False)
        assert second.returncode == 0, second.stderr[-2000:]
        assert json.loads(second.stdout.splitlines()[-1])["log"] == [
            "looked up", "human: approve", "paid"]
        first.stdin.write("deny\n")  # the first writer resumes too: refused
        first.stdin.flush()
        answer = _lines(first, "refused")[-1]
        assert answer["refused"] == "thread.superseded"
        first.stdin.close()
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    with GitCheckpointSaver(agent) as saver:
        latest = saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert latest is not None
        assert latest.checkpoint["channel_values"]["log"] == ["looked up", "human: approve",
                                                              "paid"]
        assert not any("deny" in str(t.checkpoint["channel_values"])
                       for t in saver.list({"configurable": {"thread_id": "t"}}))


@pytest.mark.parametrize("edit", ["forged", "unsigned", "restored"])
def test_a_hand_edited_claim_gives_the_thread_to_no_one(tmp_path: Path, edit: str) -> None:
    """Two real processes: A writes, is stopped (SIGSTOP), B resumes the thread and writes;
    then the claim record is edited by hand to name A again — a record made up with A's
    owner and a higher number (a wrong signature, or none), or A's own earlier record
    restored byte for byte. A continues (SIGCONT) and its next put
    is refused: nothing A attempted after the takeover is in the thread (git rev-list
    counts), and a new writer claims the thread and writes."""
    agent = tmp_path / "agent"
    GitCheckpointSaver(agent).close()
    lock = GitCheckpointSaver(agent)
    path = lock._lock_path("t")
    lock.close()
    first = _writer(agent, "A", 20, 0.5)
    try:
        before = _lines(first, "idle")
        os.kill(first.pid, signal.SIGSTOP)
        a_record = path.read_bytes()
        a = json.loads(a_record)
        second = _writer(agent, "B", 2, 0)
        out, err = second.communicate(timeout=120)
        assert second.returncode == 0, err[-2000:]
        b_ids = [line["id"] for line in map(json.loads, out.splitlines()) if "put" in line]
        b = json.loads(path.read_bytes())
        assert b["owner"] != a["owner"] and b["claim"] == a["claim"] + 1
        if edit == "restored":
            path.write_bytes(a_record)
        else:
            forged = {**a, "claim": b["claim"] + 1}
            if edit == "forged":
                forged["mac"] = "0" * 64
            else:
                del forged["mac"]
            path.write_bytes(json.dumps(forged).encode() + b"\n")
        os.kill(first.pid, signal.SIGCONT)
        rest = _lines(first, "refused")
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGCONT)
            first.kill()
    refused = rest[-1]
    assert refused["refused"] == "thread.superseded", refused
    assert not any("put" in line for line in rest)
    a_ids = [line["id"] for line in before if "put" in line]
    ref = "refs/gitstate/threads/t/%/checkpoints"
    if GIT is not None:
        assert git(agent / "state", "rev-list", "--count", ref).stdout.strip() == \
            str(len(a_ids) + len(b_ids))
    third = _writer(agent, "C", 1, 0)
    out, err = third.communicate(timeout=120)
    assert third.returncode == 0 and '"done"' in out, err[-2000:]
    with GitCheckpointSaver(agent) as saver:
        holder = saver.fence.holder("t")
        assert holder is not None and holder["owner"] not in (a["owner"], b["owner"])
        latest = saver.get_tuple(CONF)
        assert latest is not None and latest.checkpoint["channel_values"]["k"] == "C-0"
        assert refused["id"] not in [t.config["configurable"]["checkpoint_id"]
                                     for t in saver.list(CONF)]
    if GIT is not None:
        assert git(agent / "state", "rev-list", "--count", ref).stdout.strip() == \
            str(len(a_ids) + len(b_ids) + 1)
        assert_fsck_clean(agent / "state")


def test_a_claim_copied_from_another_thread_names_no_one(tmp_path: Path) -> None:
    """A record is signed for its thread: x's valid claim of thread t2 copied over t's
    record does not give t back to x (the signature covers the thread id)."""
    agent = tmp_path / "agent"
    with GitCheckpointSaver(agent, owner="x") as x, GitCheckpointSaver(agent, owner="y") as y:
        mine = _put(x, "x-1")
        x.claim("t2")
        theirs = _put(y, "y-1", mine)
        x._lock_path("t").write_bytes(x._lock_path("t2").read_bytes())
        with pytest.raises(ThreadSuperseded) as refused:
            _put(x, "x-2", mine)
        assert "names no one" in refused.value.message
        assert _head(y) is not None and [t.checkpoint["channel_values"]["k"]
                                         for t in y.list(CONF)] == ["y-1", "x-1"]
        assert y.get_tuple(CONF).config["configurable"]["checkpoint_id"] == theirs  # type: ignore[union-attr]
