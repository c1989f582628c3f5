"""The clock model (docs/reliability.md, "Clock"): real processes under libfaketime
(Debian's ``faketime``) step the wall clock ahead and back; the kernel's boot clock does not
move with it, so a stepped reading is not believed (gitstate/system/clock.py). One write made
with the clock two days ahead dates nothing two days ahead: an approval requested before
it is still approved and spent, ``can_run``, the spend and the rendered section agree, a
TTL set after it lasts its hour; a run's deadline is neither crossed by a reading ahead nor
missed by a reading behind; commit times never go back within a ref and the raw reading
is kept in ``Gitstate-Clock``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from tests.helpers import GIT, trust_remote

FAKETIME = shutil.which("faketime")
pytestmark = pytest.mark.skipif(FAKETIME is None or GIT is None or
                                not os.path.exists("/proc/uptime"),
                                reason="needs libfaketime (apt's faketime), git and Linux")

SCHEMA = """\
version: 1
unknown_keys: allow
approvals:
  refund: {writers: [runtime], ttl_hours: 1}
"""
ROOT = Path(__file__).resolve().parents[2]


def _cli(agent: Path, offset: str | None, *argv: str) -> subprocess.CompletedProcess[str]:
    """``gitstate`` as its own process, its wall clock moved by ``offset`` (faketime's
    ``-f`` syntax: "+2d", "-3h"), or the real clock for None."""
    command = [sys.executable, "-m", "gitstate", "--agent-dir", str(agent), *argv]
    if offset is not None:
        assert FAKETIME is not None
        command = [FAKETIME, "-f", offset, *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _py(agent: Path, offset: str | None, code: str) -> subprocess.CompletedProcess[str]:
    """Python code against the agent's StateRepo (``repo``), in its own process."""
    command = [sys.executable, "-c", "import sys\nfrom gitstate.api.repo import StateRepo\n"
               f"repo = StateRepo({str(agent)!r})\n" + code]
    if offset is not None:
        assert FAKETIME is not None
        command = [FAKETIME, "-f", offset, *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _log(agent: Path, ref: str, fmt: str) -> list[str]:
    assert GIT is not None
    out = subprocess.run([GIT, "-C", str(agent / "state"), "log", f"--format={fmt}", ref],
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.split("\n") if line]


def _times(agent: Path, ref: str) -> list[int]:
    return [int(t) for t in _log(agent, ref, "%ct")]


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "config.toml").write_text('[gitstate]\ntimezone = "UTC"\n')
    out = _cli(agent, None, "init")
    assert out.returncode == 0, out.stderr
    with StateRepo(agent) as repo:
        repo.set_schema(SCHEMA, "refunds need an approval")
    return agent


def test_one_write_two_days_ahead_dates_nothing_ahead(agent: Path) -> None:
    now = time.time()
    with StateRepo(agent) as repo:
        approval = repo.approvals.request("refund", {"order": 1}, "the customer asked")
    ahead = _cli(agent, "+2d", "set", "note", "written ahead", "--reason", "a clock ahead")
    assert ahead.returncode == 0, ahead.stderr
    [dated] = _times(agent, "main")[:1]
    assert abs(dated - now) < 120  # dated by the anchored time, not two days ahead
    [wall] = _log(agent, "main", "%(trailers:key=Gitstate-Clock,valueonly)")[:1]
    assert datetime.fromisoformat(wall).timestamp() - now > 47 * 3600  # the raw reading
    with StateRepo(agent) as repo:  # a minute later by the real clock: nothing expired
        assert repo.approvals.verdict("refund", {"order": 1}).reason == \
            f"approval {approval} is pending (waiting for a decision)"
        repo.approvals.approve(approval, "within policy")
        assert repo.can_run("refund", {"order": 1})
        with repo.approvals.spend(approval, "refund", {"order": 1}) as call:
            assert call.approval_id == approval
        ttl = repo.set("hold", "an hour", "held for an hour", ttl_hours=1)
        assert ttl.new is not None and ttl.new.expires_at is not None
        expires = datetime.fromisoformat(ttl.new.expires_at).timestamp()
        assert abs(expires - (now + 3600)) < 120  # an hour from now, not 2 days and 1 hour
        second = repo.approvals.request("refund", {"order": 2}, "asked again")
        repo.approvals.approve(second, "ok")
    # a process whose clock runs ahead, or behind, renders the same section and gives the
    # same verdict: the key and the approval are live for everyone
    for offset in ("+2h", "-2h", None):
        hook = _cli(agent, offset, "render")
        assert hook.returncode == 0, hook.stderr
        assert "hold" in hook.stdout and "an hour" in hook.stdout, (offset, hook.stdout)
        verdict = _py(agent, offset, "print(repo.can_run('refund', {'order': 2}))")
        assert verdict.stdout.strip() == "True", (offset, verdict.stderr)
    spent = _py(agent, "+3h", f"with repo.approvals.spend({second!r}, 'refund', "
                "{'order': 2}):\n    print('spent')\n")
    assert spent.stdout.strip() == "spent", spent.stderr
    # a step back: the commit is dated at its parent's time, the raw reading kept beside
    behind = _cli(agent, "-3h", "set", "note", "written behind", "--reason", "a clock behind")
    assert behind.returncode == 0, behind.stderr
    times = _times(agent, "main")
    assert times == sorted(times, reverse=True)  # never back within the ref
    verify = _cli(agent, None, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_run_deadline_is_judged_at_the_anchored_time(agent: Path) -> None:
    deadline = (datetime.now(UTC) + timedelta(seconds=4)).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = _cli(agent, None, "run", "start", "r1", "--goal", "refund", "--criterion", "done",
               "--deadline", deadline, "--reason", "asked")
    assert out.returncode == 0, out.stderr
    event = json.dumps({"type": "question_opened", "question": "amount?"})
    ahead = _cli(agent, "+2d", "run", "event", "r1", event, "--reason", "ahead", "--json")
    assert ahead.returncode == 0, ahead.stderr
    state = json.loads(ahead.stdout)["state"]
    assert state["stop_reason"] is None  # one reading ahead does not stop the run
    time.sleep(5)  # past the deadline by the real clock
    behind = _cli(agent, "-1d", "run", "event", "r1", event, "--reason", "behind", "--json")
    assert behind.returncode == 0, behind.stderr
    assert json.loads(behind.stdout)["state"]["stop_reason"] == "budget_exhausted"
    times = _times(agent, "refs/heads/runs/r1")
    assert times == sorted(times, reverse=True)
    walls = _log(agent, "refs/heads/runs/r1", "%(trailers:key=Gitstate-Clock,valueonly)")
    assert len(walls) == 2  # the raw readings ahead and behind, kept beside
    behind_wall, ahead_wall = (datetime.fromisoformat(w).timestamp() for w in walls)
    assert ahead_wall - times[1] > 47 * 3600 and times[0] - behind_wall > 23 * 3600
    verify = _cli(agent, None, "run", "verify", "r1")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # a clone re-derives every event, the raw readings included
    assert GIT is not None
    bare = agent.parent / "remote.git"
    subprocess.run([GIT, "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    with StateRepo(agent) as repo:
        repo.store.set_remote_url(str(bare))
        pushed = repo.remote.push()
    trust_remote(agent.parent / "clone")
    with StateRepo.clone(str(bare), agent.parent / "clone") as clone:
        pulled = clone.pull()
        assert "r1" in json.dumps(pulled.runs), (pushed.runs, pulled.runs)
        assert clone.runs.read("r1").state["stop_reason"] == "budget_exhausted"
        assert clone.runs.verify("r1") == []


PUT = """
import sys
from gitstate.langgraph import GitCheckpointSaver
from langgraph.checkpoint.base import empty_checkpoint
with GitCheckpointSaver(sys.argv[1], owner="one") as saver:
    cp = empty_checkpoint()
    cp["channel_values"] = {"k": sys.argv[2]}
    cp["channel_versions"] = {"k": 1}
    saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp,
              {"source": "loop", "step": 0}, {"k": 1})
"""


def test_checkpoints_are_dated_by_the_clock_model(agent: Path) -> None:
    """The checkpointer dates its commits like main: a put with the clock two days ahead
    is dated at the anchored time, and one with the clock a day behind after it does not go
    back before it."""
    pytest.importorskip("langgraph")

    def put(offset: str | None, value: str) -> int:
        command = [sys.executable, "-c", PUT, str(agent), value]
        if offset is not None:
            assert FAKETIME is not None
            command = [FAKETIME, "-f", offset, *command]
        out = subprocess.run(command, capture_output=True, text=True, timeout=120,
                             check=False, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.returncode == 0, out.stderr
        refs = subprocess.run(["git", "-C", str(agent / "state"), "for-each-ref",
                               "--format=%(committerdate:unix)", "refs/gitstate/threads/"],
                              capture_output=True, text=True, check=True).stdout.split()
        return max(int(r) for r in refs)

    _cli(agent, None, "set", "anchor", "1", "--reason", "the clock's anchor")
    start = time.time()
    ahead = put("+2d", "ahead")
    assert ahead < start + 3600, (ahead - start) / 3600  # not two days ahead
    behind = put("-1d", "behind")
    assert behind >= ahead  # never back within the thread's ref
