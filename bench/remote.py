"""Sync on loopback: push and pull latency for one change through git daemon, and the time
of `gitstate fleet` over 100 agent directories.

    python bench/remote.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from gitstate.api.repo import StateRepo
from gitstate.audit.fleet import fleet


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, what: str, seconds: float) -> None:
    """Until something listens on 127.0.0.1:``port``; exits the benchmark after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start")
        time.sleep(0.05)


def git_daemon(root: Path) -> tuple[int, subprocess.Popen[bytes]]:
    """A bare repository ``root/srv/r.git`` served by ``git daemon`` on a free loopback port
    (receive-pack on), waited for; stop it with ``os.killpg(proc.pid, SIGKILL)``. Its own
    session and no inherited pipes: git daemon forks a child per connection, and a lingering
    child must neither keep a caller's pipe open nor survive the benchmark."""
    port = free_port()
    (root / "srv").mkdir()
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(root / "srv" / "r.git")],
                   check=True)
    daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all",
                               "--enable=receive-pack", f"--base-path={root / 'srv'}",
                               "--listen=127.0.0.1", f"--port={port}", str(root / "srv")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    wait_for_port(port, "git daemon", 10)
    return port, daemon


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds, agents = (5, 5) if args.quick else (100, 100)
    root = Path(tempfile.mkdtemp(prefix="gitstate-remote-bench-"))
    port, daemon = git_daemon(root)
    try:
        url = f"git://127.0.0.1:{port}/r.git"
        a = StateRepo.init(root / "a")
        a.set("stop_loss.2317", 262, "rule")
        a.store.set_remote_url(url)
        a.push()
        b = StateRepo.clone(url, root / "b")
        push_ms, pull_ms = [], []
        for i in range(rounds):
            a.set("stop_loss.2317", 300 + i, f"change {i}")
            start = time.perf_counter()
            a.push()
            push_ms.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            b.pull()
            pull_ms.append((time.perf_counter() - start) * 1000)
        print(f"loopback git daemon, one change, {rounds} rounds     median ms")
        print(f"  push (with lease)                         {statistics.median(push_ms):>8.2f}")
        print(f"  pull (fetch + fast-forward)               {statistics.median(pull_ms):>8.2f}")
        fleet_root = root / "fleet"
        for n in range(agents):
            with StateRepo.init(fleet_root / f"agent{n:03d}") as repo:
                for k in range(5):
                    repo.set(f"rule.{k}", k, "r", ttl_hours=k + 1)
        start = time.perf_counter()
        rows = fleet(fleet_root)
        seconds = time.perf_counter() - start
        print(f"  gitstate fleet, {len(rows)} agents (in-process)      {seconds * 1000:>8.0f}")
    finally:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
