"""The kill matrix at the suite's count: a writer of each namespace (main, a run, a LangGraph
thread, the refusal journal) killed with SIGKILL beside live writers of every other
(bench/kill_matrix.py; its full count and figures are in docs/reliability.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import assert_fsck_clean, git

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("langgraph")


def test_killed_writers_of_each_namespace_never_fail_a_live_one(tmp_path: Path) -> None:
    """8 kills (2 per namespace, at random moments and inside the write): no live write
    fails, every acknowledged write is on its ref, fsck --strict and verify pass."""
    agent = tmp_path / "agent"
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "kill_matrix.py"), "--kills",
                          "8", "--interval", "0.02", "--keep", str(agent), "--json"],
                         capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    figures = json.loads(out.stdout)
    assert figures["kills_by_namespace"] == {"main": 2, "run": 2, "thread": 2, "journal": 2}
    assert figures["live_failures"] == 0, figures["live_errors"]
    assert figures["victim_errors"] == []
    assert figures["lost"] == 0, figures["lost_examples"]
    assert figures["acknowledged"] > 40
    assert figures["verify_failures"] == 0, figures["verify_failed"]
    assert out.returncode == 0, out.stderr
    # the independent checks, here too: git's own, and one acknowledged write of each kind
    assert_fsck_clean(agent / "state")
    assert "live 1" in git(agent / "state", "log", "--format=%s", "main").stdout.splitlines()
    assert git(agent / "state", "rev-parse", "--verify", "refs/heads/runs/live-0"
               ).returncode == 0
    journal = git(agent / "state", "log", "--format=%B", "refs/gitstate/refusals").stdout
    assert '"request_id":"live-1"' in journal
