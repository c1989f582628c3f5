"""gitstate as a LangGraph checkpointer: LangGraph's own conformance suite, a real graph
interrupted for a human and resumed in another process, time travel, git reading the
thread refs, and writers in separate processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate

from gitstate.langgraph import PREFIX, GitCheckpointSaver, enc
from tests.helpers import GIT, assert_fsck_clean, git

ROOT = Path(__file__).resolve().parents[2]


def test_langgraph_conformance_suite_passes_every_capability(tmp_path: Path) -> None:
    made: list[GitCheckpointSaver] = []

    @checkpointer_test(name="GitCheckpointSaver")
    async def factory() -> Any:
        saver = GitCheckpointSaver(tmp_path / f"agent-{len(made)}")
        made.append(saver)
        yield saver
        saver.close()

    report = asyncio.run(validate(factory))
    summary = {cap: (r.detected, r.passed, r.tests_passed, r.tests_failed)
               for cap, r in report.results.items()}
    print(json.dumps(summary, indent=1))
    assert set(summary) == {"put", "put_writes", "get_tuple", "list", "delete_thread",
                            "delete_for_runs", "copy_thread", "prune"}
    failures = {cap: r.failures for cap, r in report.results.items() if not r.passed}
    assert not failures, failures
    assert all(d and p and n > 0 and f == 0 for d, p, n, f in summary.values())
    if GIT is not None:
        for saver in made:
            assert_fsck_clean(saver.repo.state_dir)


def _graph(agent: Path, thread: str, phase: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "tests.lg_graph", str(agent), thread, phase],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_graph_interrupted_for_a_human_resumes_in_a_new_process(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    first = _graph(agent, "refund-O-104", "start")
    assert first["interrupted"] and first["result"]["log"] == ["looked up"]
    done = _graph(agent, "refund-O-104", "approve")  # another process, same ref
    assert not done["interrupted"]
    assert done["result"]["log"] == ["looked up", "human: approve", "paid"]
    with GitCheckpointSaver(agent) as saver:
        from tests.lg_graph import build

        app = build(saver)
        config = {"configurable": {"thread_id": "refund-O-104"}}
        history = list(app.get_state_history(config))
        assert [h.metadata["step"] for h in history] == [3, 2, 1, 0, -1]
        # time travel: fork from the state before the human answered, and deny
        before = next(h for h in history if h.next == ("ask_human",))
        forked = app.update_state(before.config, {"log": ["looked up", "re-checked"]})
        after = app.invoke(None, forked)
        assert after["log"][:2] == ["looked up", "re-checked"]
        again = list(app.get_state_history(config))
        assert len(again) > len(history)
        assert again[0].parent_config is not None
        ref = f"{PREFIX}{enc('refund-O-104')}/{enc('')}/checkpoints"
        if GIT is None:
            return
        log = git(saver.repo.state_dir, "log", "--format=%s", ref).stdout.split("\n")
        steps = [line for line in log if line.startswith("checkpoint ")]
        assert len(steps) == len(again)  # one commit per checkpoint, newest first
        assert steps[-1].endswith("step -1 (input)")
        forked_id = forked["configurable"]["checkpoint_id"]
        trailers = git(saver.repo.state_dir, "log", "--format=%(trailers:only)", ref).stdout
        assert f'Gitstate-Checkpoint: "{forked_id}"' in trailers
        assert f'Gitstate-Parent-Checkpoint: "{before.config["configurable"]["checkpoint_id"]}"' \
            in trailers
        show = git(saver.repo.state_dir, "show", "--stat", "--format=%s", ref).stdout
        assert "channel.log" in show  # the channels that changed, by name
        assert saver.repo.head() == git(saver.repo.state_dir, "rev-parse", "main").stdout.strip()
        assert_fsck_clean(saver.repo.state_dir)


def test_delete_archives_the_thread_and_keeps_its_history(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    _graph(agent, "t-del", "start")
    with GitCheckpointSaver(agent) as saver:
        config = {"configurable": {"thread_id": "t-del"}}
        assert saver.get_tuple(config) is not None
        saver.commit_pending_writes("t-del")  # what delete_thread commits first, if any
        before = len(list(saver.store.walk(saver.store.ref(
            saver.ref_name("t-del", "", "checkpoints")))))
        saver.delete_thread("t-del")
        assert saver.get_tuple(config) is None and list(saver.list(config)) == []
        archived = saver.store.refs_under("refs/gitstate/archive/threads/")
        assert any(name.endswith("/checkpoints") for name in archived)
        head = next(h for n, h in archived.items() if n.endswith("/checkpoints"))
        assert len(list(saver.store.walk(head))) == before  # every checkpoint is still there


WRITER = """
import sys, time, json
from gitstate.langgraph import GitCheckpointSaver
from langgraph.checkpoint.base import empty_checkpoint
saver = GitCheckpointSaver(sys.argv[1], owner=sys.argv[5] if len(sys.argv) > 5 else None)
thread, n = sys.argv[2], int(sys.argv[3])
parent = None
waits = []
for i in range(n):
    cp = empty_checkpoint()
    cp["channel_values"] = {"k": f"{sys.argv[4]}-{i}"}
    cp["channel_versions"] = {"k": i + 1}
    conf = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent:
        conf["configurable"]["checkpoint_id"] = parent
    t = time.perf_counter()
    stored = saver.put(conf, cp, {"source": "loop", "step": i, "writer": sys.argv[4]},
                       {"k": i + 1})
    waits.append(time.perf_counter() - t)
    parent = stored["configurable"]["checkpoint_id"]
print(json.dumps({"max": max(waits), "median": sorted(waits)[len(waits) // 2]}))
"""


def _writers(agent: Path, threads: list[str], n: int,
             owner: str | None = None) -> list[dict[str, float]]:
    GitCheckpointSaver(agent).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(agent), t, str(n), f"w{i}",
                               *([owner] if owner else [])],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
             for i, t in enumerate(threads)]
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_writers_of_different_threads_do_not_wait_for_each_other(tmp_path: Path) -> None:
    """Two processes, two threads: no put waits for the other writer (the slowest put is
    a few writes long at most, on a 2-core machine under the suite's load)."""
    agent = tmp_path / "agent"
    start = time.perf_counter()
    timings = _writers(agent, ["thread-a", "thread-b"], 60)
    took = time.perf_counter() - start
    with GitCheckpointSaver(agent) as saver:
        for t in ("thread-a", "thread-b"):
            assert len(list(saver.list({"configurable": {"thread_id": t}}))) == 60
    for t in timings:
        assert t["max"] < 40 * t["median"] + 0.5, timings  # never queued behind a thread
    assert took < 120


def test_writers_of_one_thread_lose_no_checkpoint(tmp_path: Path) -> None:
    """Two processes that name one owner (a pool acting as the thread's one writer, so
    the fence lets both write) interleave their puts: compare-and-swap loses none."""
    agent = tmp_path / "agent"
    _writers(agent, ["shared", "shared"], 40, owner="pool-1")
    with GitCheckpointSaver(agent) as saver:
        listed = list(saver.list({"configurable": {"thread_id": "shared"}}))
        assert len(listed) == 80
        assert {t.metadata["writer"] for t in listed} == {"w0", "w1"}
        assert sorted(t.checkpoint["channel_values"]["k"] for t in listed) == sorted(
            f"w{w}-{i}" for w in range(2) for i in range(40))


def test_gitstate_log_show_and_diff_read_thread_refs(tmp_path: Path) -> None:
    from tests.helpers import run_cli

    agent = tmp_path / "agent"
    _graph(agent, "t-cli", "start")
    _graph(agent, "t-cli", "approve")
    log = run_cli("log", "--thread", "t-cli", agent_dir=agent)
    assert log.returncode == 0, log.stderr
    lines = log.stdout.splitlines()
    assert len(lines) == 5 and "step 3 (loop)" in lines[0] and "step -1 (input)" in lines[-1]
    rows = [json.loads(x) for x in run_cli("log", "--thread", "t-cli", "--jsonl",
                                           agent_dir=agent).stdout.splitlines()]
    assert rows[0]["parent_checkpoint"] == rows[1]["checkpoint"]
    shown = json.loads(run_cli("show", "--thread", "t-cli", "--json", agent_dir=agent).stdout)
    assert shown["channels"]["log"] == ["looked up", "human: approve", "paid"]
    assert "log" in shown["changed_channels"] and shown["checkpoint"] == rows[0]["checkpoint"]
    by_commit = json.loads(run_cli("show", rows[2]["commit"][:10], "--thread", "t-cli",
                                   "--json", agent_dir=agent).stdout)
    assert by_commit["checkpoint"] == rows[2]["checkpoint"]
    diff = json.loads(run_cli("diff", rows[2]["checkpoint"], "--thread", "t-cli", "--json",
                              agent_dir=agent).stdout)
    assert diff["channels"]["approved"] == {"old": None, "new": True}
    missing = run_cli("log", "--thread", "nope", agent_dir=agent)
    assert missing.returncode == 2 and "[usage.thread]" in missing.stderr


@pytest.mark.skipif(GIT is None, reason="needs the git CLI to forge a commit")
def test_a_forged_thread_commit_is_named_not_a_traceback(tmp_path: Path) -> None:
    from tests.helpers import run_cli

    agent = tmp_path / "agent"
    _graph(agent, "t-bad", "start")
    state = agent / "state"
    ref = f"{PREFIX}{enc('t-bad')}/{enc('')}/checkpoints"
    tree = git(state, "rev-parse", f"{ref}^{{tree}}").stdout.strip()
    forged = git(state, "-c", "user.name=x", "-c", "user.email=x@x", "commit-tree", tree,
                 "-p", ref, "-m", "x\n\nGitstate-Checkpoint: {not json\n").stdout.strip()
    git(state, "update-ref", ref, forged)
    out = run_cli("log", "--thread", "t-bad", agent_dir=agent)
    assert out.returncode == 3 and "[thread.damaged]" in out.stderr
    with GitCheckpointSaver(agent) as saver:
        from gitstate.core.errors import StoreError

        with pytest.raises(StoreError):
            saver.get_tuple({"configurable": {"thread_id": "t-bad"}})


def test_without_the_extra_the_import_error_names_it() -> None:
    code = ("import sys\nsys.modules['langchain_core'] = None\n"
            "try:\n    import gitstate.langgraph\nexcept ImportError as exc:\n"
            "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=False)
    assert "pip install 'gitstate[langgraph]'" in out.stdout, out.stdout + out.stderr
