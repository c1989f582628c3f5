"""Specification of the write lock: timeouts, release by the kernel, no starvation.

The holders are real processes, since a flock is between open file descriptions and the
property that matters is between writer processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitstate.core.errors import LockTimeout
from gitstate.system import locking

ROOT = Path(__file__).resolve().parents[2]

# a writer in a loop, reduced to its lock (a plain blocking flock, not the code under test)
HOLDER = ROOT / "bench" / "lock_holder.py"


@pytest.fixture
def lock_path(tmp_path: Path) -> Path:
    return tmp_path / "gitstate.lock"


def _holder(path: Path, hold: float, gap: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(HOLDER), str(path), str(hold), str(gap)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def _free_within(path: Path, seconds: float) -> bool:
    """Whether another description can take the lock at some moment within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with locking.attempt(path) as taken:
            if taken:
                return True
        time.sleep(0.01)
    return False


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_held_lock_times_out_with_its_path(lock_path: Path,
                                             holders: list[subprocess.Popen[str]]) -> None:
    holders.append(_holder(lock_path, hold=3600, gap=0))
    start = time.monotonic()
    with pytest.raises(LockTimeout) as err, locking.exclusive(lock_path, timeout=0.3):
        pass
    assert time.monotonic() - start >= 0.3
    assert str(lock_path) in err.value.message
    assert err.value.rule == "store.lock_timeout"


def test_the_kernel_releases_the_lock_of_a_killed_holder(
        lock_path: Path, holders: list[subprocess.Popen[str]]) -> None:
    holder = _holder(lock_path, hold=3600, gap=0)
    holders.append(holder)
    with locking.attempt(lock_path) as taken:
        assert not taken
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with locking.exclusive(lock_path, timeout=5), locking.attempt(lock_path) as taken:
        assert not taken  # ours now: a second description cannot take it


def test_a_waiter_that_timed_out_does_not_keep_the_lock(
        lock_path: Path, holders: list[subprocess.Popen[str]]) -> None:
    """The abandoned wait gets the lock when the holder goes, and must hand it on."""
    holder = _holder(lock_path, hold=3600, gap=0)
    holders.append(holder)
    with pytest.raises(LockTimeout), locking.exclusive(lock_path, timeout=0.2):
        pass
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert _free_within(lock_path, 5), "the abandoned wait kept the lock"


def test_a_waiter_is_not_starved_by_a_holder_that_takes_the_lock_again_at_once(
        lock_path: Path, holders: list[subprocess.Popen[str]]) -> None:
    """The holder is free for 0.3 ms out of every 10: a waiter that slept between tries
    would almost never see it free. A waiter blocked in the kernel is woken at the
    release and takes it before the holder comes back."""
    holders.append(_holder(lock_path, hold=0.01, gap=0.0003))
    waits = []
    for _ in range(20):
        start = time.monotonic()
        with locking.exclusive(lock_path, timeout=30):
            waits.append(time.monotonic() - start)
            time.sleep(0.002)
    waits.sort()
    assert waits[len(waits) // 2] < 0.1, waits  # typically one hold: 10 ms
    assert waits[-1] < 2, waits


INTERRUPTED = """
import signal, sys, time
from pathlib import Path
from gitstate.system import locking

def interrupt(*_):
    raise KeyboardInterrupt

signal.signal(signal.SIGALRM, interrupt)
signal.setitimer(signal.ITIMER_REAL, 0.2)
try:
    with locking.exclusive(Path(sys.argv[1]), timeout=60):
        print("took", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
time.sleep(60)
"""


def test_an_interrupted_wait_does_not_keep_the_lock(
        lock_path: Path, holders: list[subprocess.Popen[str]]) -> None:
    """Ctrl-C while waiting, in a process that goes on running: once the holder goes, the
    lock must be free for others, not kept by the wait nobody is listening to."""
    holder = _holder(lock_path, hold=3600, gap=0)
    holders.append(holder)
    waiter = subprocess.Popen([sys.executable, "-c", INTERRUPTED, str(lock_path)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    holders.append(waiter)
    assert waiter.stdout is not None and waiter.stdout.readline().strip() == "interrupted"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert _free_within(lock_path, 5), "the interrupted wait kept the lock"
    assert waiter.poll() is None  # still running: the kernel did not free it on exit
