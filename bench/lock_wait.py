"""How long a writer waits for the write lock beside a writer that takes it again at once.

    python bench/lock_wait.py [--waits 20] [--gap-ms 0.3] [--hold-ms 10] [--quick]

A holder process takes the lock (a plain blocking flock), holds it for ``--hold-ms``, and
takes it again after ``--gap-ms`` of busy work, as a writer in a loop does. This process then
takes the lock ``--waits`` times, two ways side by side: gitstate's wait (``locking.exclusive``:
a blocking flock, woken at the release) and, for comparison, non-blocking tries with sleeps
doubling from 0.5 to 20 ms in between (the usual polling wait). The table gives the median and
the longest wait of each; a polling wait is given up after 120 s (2 s with --quick).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gitstate.system import locking

HOLDER = Path(__file__).resolve().parent / "lock_holder.py"


def polling(path: Path, cap: float) -> bool:
    """Take the lock by non-blocking tries with growing sleeps, giving up after ``cap``
    seconds; release it at once. Returns whether it was taken."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    delay = 0.0005
    deadline = time.perf_counter() + cap
    try:
        while time.perf_counter() < deadline:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                time.sleep(delay)
                delay = min(delay * 2, 0.02)
        return False
    finally:
        time.sleep(0.002)
        os.close(fd)


def blocking(path: Path, cap: float) -> bool:
    with locking.exclusive(path, timeout=cap):
        time.sleep(0.002)
    return True


def waits(take: Callable[[Path, float], bool], path: Path, count: int,
          cap: float) -> tuple[list[float], int]:
    """Each wait's seconds (a wait given up counts as ``cap``) and how many were given up."""
    out, given_up = [], 0
    for _ in range(count):
        start = time.perf_counter()
        if not take(path, cap):
            given_up += 1
        out.append(time.perf_counter() - start - 0.002)
    return out, given_up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waits", type=int, default=20)
    parser.add_argument("--gap-ms", type=float, default=0.3)
    parser.add_argument("--hold-ms", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="3 waits each (a smoke run)")
    args = parser.parse_args()
    count = 3 if args.quick else args.waits
    cap = 2.0 if args.quick else 120.0  # a polling wait is given up after this long
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gitstate.lock"
        holder = subprocess.Popen([sys.executable, str(HOLDER), str(path),
                                   str(args.hold_ms / 1000), str(args.gap_ms / 1000)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            rows = [("gitstate (blocking flock)", waits(blocking, path, count, cap)),
                    ("polling, sleeps 0.5-20 ms", waits(polling, path, count, cap))]
        finally:
            holder.kill()
            holder.wait()
    print(f"lock wait beside a holder free {args.gap_ms} ms out of every "
          f"{args.hold_ms + args.gap_ms:g} ms, {count} waits each")
    print(f"  {'wait':28} {'median ms':>10} {'longest ms':>11}  given up")
    for name, (values, given_up) in rows:
        print(f"  {name:28} {statistics.median(values) * 1000:10.1f} "
              f"{max(values) * 1000:11.1f}  {given_up} (after {cap:g} s)")


if __name__ == "__main__":
    main()
