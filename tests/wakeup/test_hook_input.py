"""The Claude Code hook against whatever its stdin holds, as a process the host starts: JSON
nested 100,000 deep, an endless stream, a pipe never closed. Each run ends well within the
host's hook timeout (seconds) and still prints the section, with the default event."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from gitstate.api.repo import StateRepo

ROOT = Path(__file__).resolve().parents[2]
HOST_BUDGET_SECONDS = 3.0  # Claude Code's hooks get seconds (hooks/claude-code: 10)


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    with StateRepo.init(tmp_path / "agent") as repo:
        repo.set("stop_loss.2317", 262, "the 09:04 rule")
    return tmp_path / "agent"


def _hook(agent: Path, stdin: int | IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "gitstate", "--agent-dir", str(agent),
                             "hook", "claude-code"], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)


def _delivered(proc: subprocess.Popen[bytes], started: float) -> tuple[str, str]:
    """The event the section was delivered for, and stderr; the run must end in time."""
    try:
        proc.wait(timeout=HOST_BUDGET_SECONDS * 4)  # its output is small: the pipes hold it
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("the hook hung on its stdin") from None
    elapsed = time.monotonic() - started
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == 0, err.decode()
    assert elapsed < HOST_BUDGET_SECONDS, f"{elapsed:.2f} s"
    payload = json.loads(out)["hookSpecificOutput"]
    assert "stop_loss.2317" in payload["additionalContext"]
    assert "Traceback" not in err.decode()
    return payload["hookEventName"], err.decode()


def _feed(proc: subprocess.Popen[bytes], data: bytes, close: bool) -> threading.Thread:
    def write() -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(data)
            proc.stdin.flush()
            if close:
                proc.stdin.close()
        except (BrokenPipeError, ValueError):
            pass  # the hook stopped reading: what it should do

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("data", [
    b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    b"[" * 100_000 + b"]" * 100_000,
    b'{"hook_event_name": "SessionStart", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
], ids=["objects", "arrays", "named-event-beside-deep-array"])
def test_deeply_nested_json_on_stdin(agent: Path, data: bytes) -> None:
    """JSON nested 100,000 deep (a RecursionError traceback and no section before)."""
    started = time.monotonic()
    proc = _hook(agent, subprocess.PIPE)
    _feed(proc, data, close=True)
    event, err = _delivered(proc, started)
    assert event == "UserPromptSubmit"
    assert "hook.input" in err and "nested deeper than 32" in err


def test_an_endless_stdin(agent: Path) -> None:
    """/dev/zero as stdin: read up to the bound, then the section."""
    with open("/dev/zero", "rb") as zero:
        started = time.monotonic()
        event, err = _delivered(_hook(agent, zero), started)
    assert event == "UserPromptSubmit" and "over 1048576 bytes" in err


def test_a_huge_stdin_written_by_the_host(agent: Path) -> None:
    """64 MiB written into the pipe: the hook stops reading at the bound."""
    started = time.monotonic()
    proc = _hook(agent, subprocess.PIPE)
    _feed(proc, b'{"hook_event_name": "SessionStart", "p": "' + b"x" * (64 << 20) + b'"}',
          close=True)
    event, err = _delivered(proc, started)
    assert event == "UserPromptSubmit" and "over 1048576 bytes" in err


def test_a_stdin_never_closed(agent: Path) -> None:
    """Half an input and a pipe the host keeps open (the hook hung past 15 s before)."""
    started = time.monotonic()
    proc = _hook(agent, subprocess.PIPE)
    _feed(proc, b'{"hook_event_name": "SessionStart"', close=False)
    try:
        event, err = _delivered(proc, started)
    finally:
        if proc.stdin:
            proc.stdin.close()
    assert event == "UserPromptSubmit" and "not closed within 1 s" in err


def test_a_well_formed_input_still_names_the_event(agent: Path) -> None:
    """The input Claude Code sends: its event is used, nothing is warned."""
    started = time.monotonic()
    proc = _hook(agent, subprocess.PIPE)
    _feed(proc, json.dumps({"session_id": "s", "hook_event_name": "SessionStart",
                            "source": "startup", "cwd": os.getcwd()}).encode(), close=True)
    event, err = _delivered(proc, started)
    assert event == "SessionStart" and err == ""
