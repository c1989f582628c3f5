"""Specification of concurrency and crash safety, with real processes and SIGKILL."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.core.model import STATE_FILE, State
from gitstate.core.render import render
from gitstate.core.results import to_json
from gitstate.system.config import resolve_tz
from gitstate.wakeup.fastpath import section
from tests.helpers import assert_fsck_clean, git

ROOT = Path(__file__).resolve().parents[2]


def _worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.workers", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_four_processes_increment_to_exactly_400(agent_dir: Path) -> None:
    """4 × 100 CAS increments with retries end at 400, with 400 increment commits."""
    with StateRepo.init(agent_dir) as repo:
        repo.set("counter", 0, "start")
    procs = [_worker("increment", str(agent_dir), "100", str(n)) for n in range(4)]
    for proc in procs:
        _out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    with StateRepo(agent_dir) as repo:
        assert repo.state().keys["counter"].value == 400
        state_dir = repo.state_dir
    log = git(state_dir, "log", "--format=%s").stdout.splitlines()
    assert sum(1 for line in log if line.startswith("increment by")) == 400
    values = [json.loads(line.split(": ", 1)[1]) for line in git(
        state_dir, "log", "--format=%(trailers:key=Gitstate-New,valueonly=false)").stdout.split("\n")
        if line.startswith("Gitstate-New")]
    assert sorted(values) == list(range(401))  # every value exactly once: no lost update
    assert_fsck_clean(state_dir)


def _acked(stdout: str) -> list[int]:
    return [int(line) for line in stdout.split("\n")[:-1] if line.isdigit()]


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_nothing(agent_dir: Path) -> None:
    """50+ SIGKILLs mid-write: acknowledged writes survive, fsck is clean, reads see HEAD."""
    with StateRepo.init(agent_dir) as repo:
        state_dir = repo.state_dir
    rng = random.Random(20260813)
    acked: list[int] = []
    next_i = 1
    kills = 0
    # at least 55 kills and 51 acknowledged writes: on a loaded machine (parallel test
    # workers) a worker acknowledges fewer writes per kill, so it takes more kills
    while (kills < 55 or len(acked) <= 50) and kills < 300:
        proc = _worker("write_forever", str(agent_dir), str(next_i))
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.0, 0.08))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        kills += 1
        got = _acked(out)
        acked += got
        next_i = (got[-1] if got else next_i) + 100  # never reuse a number

        # The next read sees exactly HEAD, never the leftovers of the killed write.
        head_blob = git(state_dir, "show", f"main:{STATE_FILE}").stdout.encode()
        head_state = State.from_bytes(head_blob)
        with StateRepo(agent_dir) as repo:
            assert repo.state() == head_state
            now = repo.now()
            expected = render(head_state, now, "en", resolve_tz(repo.config.timezone))
            assert repo.render(now=now, locale="en") == expected
            assert section(agent_dir, locale="en", now=now)[0] == expected
        if got:
            assert head_state.keys["counter"].value >= got[-1] or head_state.handoff

    messages = set(git(state_dir, "log", "--format=%s").stdout.splitlines())
    missing = [i for i in acked if f"write {i}" not in messages and f"Handoff: handoff {i}"
               not in messages]
    assert not missing, missing[:10]
    assert_fsck_clean(state_dir)
    # A final write repairs whatever the last kill left and leaves a clean tree.
    with StateRepo(agent_dir) as repo:
        repo.set("after", 1, "after the kills")
    assert git(state_dir, "status", "--porcelain").stdout == ""
    stale = [p for p in (state_dir / ".git").rglob("*.lock") if p.name != "gitstate.lock"]
    assert not stale
    assert len(acked) > 50


def _chain(records: list[dict[str, object]]) -> None:
    """Oldest-first records form one unbroken first-parent chain, each commit once."""
    for older, newer in itertools.pairwise(records):
        assert newer["parent"] == older["commit"], (older, newer)


@pytest.mark.slow
def test_readers_beside_writers_never_see_a_rewrite_or_a_hand_edit(agent_dir: Path) -> None:
    """Readers take no lock: a write landing between their reads of HEAD, the history file
    and the working tree must not look like a rewritten branch, a hand edit or a gap."""
    from gitstate.audit import integrity

    with StateRepo.init(agent_dir) as repo:
        repo.set("counter", 0, "start")
    writers = [_worker("write_forever", str(agent_dir), str(n * 100_000)) for n in (1, 2)]
    try:
        for proc in writers:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 6
        rounds = verified = 0
        while time.monotonic() < deadline:
            with StateRepo(agent_dir) as repo:  # each open may repair, beside the writers
                got = to_json(repo.get())
                assert got["warnings"] == [], got["warnings"]
                assert got["history"][0]["commit"] == got["head"]
                _chain(list(reversed(got["history"])))
                _chain(repo.full_history())
                newest = [rec for rec, _ in zip(repo.history_iter(), range(30), strict=False)]
                _chain(list(reversed(newest)))
                if rounds % 10 == 0:
                    failed = [c.to_dict() for c in integrity.verify(repo, use_git=False)
                              if not c.ok]
                    assert failed == []
                    verified += 1
            rounds += 1
        print(f"\nreaders beside writers: {rounds} rounds, {verified} verifies")
        assert rounds > 20 and verified > 2
    finally:
        for proc in writers:
            proc.kill()
            proc.wait()
    with StateRepo(agent_dir) as repo:
        assert all(c.ok for c in integrity.verify(repo))
    assert_fsck_clean(agent_dir / "state")
