"""The benchmarks run (a smoke test: it checks that they run, not how fast)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *extra: str) -> str:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--quick", *extra],
                         capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_write_and_render_bench_quick() -> None:
    """bench.py --quick prints the durable-set and whole-process tables with ratios."""
    text = _run("bench.py", "--only", "writes") + _run("bench.py", "--only", "process")
    assert "plain JSON + JSONL, fsync" in text and "gitstate set" in text
    assert 'python -c "import json"' in text and "x" in text


def test_structured_bench_quick() -> None:
    """structured.py --quick compares a 2 KB structured value with a scalar."""
    text = _run("structured.py")
    assert "2 KB structure (plan)" in text and "wake-up" in text


def test_history_bench_quick() -> None:
    """history.py --quick prints get / render / log medians per history length."""
    text = _run("history.py")
    assert "log --key -n 20" in text and "ratio" in text


def test_mcp_roundtrip_bench_quick() -> None:
    """mcp_roundtrip.py --quick compares a set over MCP with the same set in-process."""
    text = _run("mcp_roundtrip.py")
    assert "MCP client over stdio" in text and "in-process" in text


@pytest.mark.slow
def test_concurrency_bench_quick() -> None:
    """concurrency.py --quick measures 1, 2, 4 and 8 writers."""
    text = _run("concurrency.py")
    assert "writers" in text and len([line for line in text.splitlines()
                                      if line.strip()[:1].isdigit()]) == 4


def test_remote_bench_quick() -> None:
    """remote.py --quick measures push, pull and fleet on loopback."""
    text = _run("remote.py")
    assert "push (with lease)" in text and "gitstate fleet" in text


def test_spend_bench_quick() -> None:
    """spend.py --quick puts a local spend beside one linearized through git daemon."""
    text = _run("spend.py")
    assert "spend_approval, local" in text and "remote-first via git daemon" in text


def test_fleet_bench_quick() -> None:
    """fleet.py --quick times `gitstate fleet` at three nested fleet sizes."""
    text = _run("fleet.py")
    assert "fleet() ms/agent" in text and len([line for line in text.splitlines()
                                               if line.strip()[:1].isdigit()]) == 3


def test_wire_memory_bench_quick() -> None:
    """wire_memory.py --quick prints each pull's peak memory against the baseline's."""
    text = _run("wire_memory.py")
    assert "x baseline" in text and text.count("remote.object_too_large") == 2


def test_lock_wait_bench_quick() -> None:
    """lock_wait.py --quick compares gitstate's lock wait with a polling wait."""
    text = _run("lock_wait.py")
    assert "gitstate (blocking flock)" in text and "polling" in text


@pytest.mark.slow
def test_mcp_load_bench_quick(node_modules: Path) -> None:
    """mcp_load.py --quick runs MCP Inspector's load test over stdio and HTTP."""
    text = _run("mcp_load.py")
    assert "http/stdio" in text and text.count("working_state_set") == 2


def test_runs_bench_quick() -> None:
    """runs.py --quick prints the event commit beside the plain store and git, run list."""
    text = _run("runs.py")
    assert "gitstate run event" in text and "run list with" in text and "<state> block" in text


def test_refusal_storm_bench_quick() -> None:
    """refusal_storm.py --quick compares main writes alone, beside a storm, with and
    without the journal, and counts the journal."""
    text = _run("refusal_storm.py")
    assert "journal's cost" in text and "journal holds 40 distinct, 40 records" in text


def test_checkpointer_bench_quick() -> None:
    """checkpointer.py --quick runs every scenario with each saver beside SqliteSaver."""
    pytest.importorskip("langgraph.checkpoint.sqlite")
    text = _run("checkpointer.py")
    for scenario in ("3-node graph", "chat graph, step 100", "threads x", "list(None",
                     "disk, chat thread of 100 steps", "growth 100 ->"):
        assert scenario in text, text
    assert "gitstate" in text and "sqlite" in text and "memory" in text


def test_signing_bench_quick() -> None:
    """signing.py --quick prints a decision unsigned, signed, and the receiver's check."""
    text = _run("signing.py")
    assert "approve, signed (ssh-keygen)" in text and "check one signed claim" in text


def test_mcp_rss_bench_quick() -> None:
    """mcp_rss.py --quick drives the stdio server through 200 sets and prints its RSS."""
    text = _run("mcp_rss.py")
    assert "RSS MiB" in text and "\n     200" in text


def test_mixed_load_quick() -> None:
    """mixed_load.py --quick: every worker beside forced maintenance for a few seconds; no
    acknowledged update lost, fsck --strict clean, verify ok (the script exits 1 otherwise)."""
    text = _run("mixed_load.py")
    assert "lost updates: 0" in text and "git fsck --strict: clean" in text
    assert "gitstate verify: ok" in text
    ops = {line.split()[0] for line in text.splitlines()[2:] if line[:1].isalpha()}
    assert {"mcp_set", "run_event", "section"} <= ops, text
