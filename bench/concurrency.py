"""Write throughput with 1, 2, 4 and 8 writer processes on one repository.

    python bench/concurrency.py [--seconds 10] [--quick]

Each writer does compare-and-swap increments of its own key (so retries come from the lock,
not from conflicts) for the same wall-clock window; the table gives commits per second in
total and per writer.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gitstate.api.repo import StateRepo

WORKER = """
import sys, time
from gitstate.api.repo import StateRepo
agent, seconds, name = sys.argv[1], float(sys.argv[2]), sys.argv[3]
n = 0
with StateRepo(agent) as repo:
    start = float(sys.argv[4])
    while time.time() < start:
        time.sleep(0.001)
    deadline = start + seconds
    while time.time() < deadline:
        repo.set(f"counter.{name}", n, "bench", expected=n - 1 if n else None)
        n += 1
print(n)
"""


def run(writers: int, seconds: float) -> float:
    root = Path(tempfile.mkdtemp(prefix="gitstate-conc-"))
    try:
        (root / "config.toml").write_text("[gitstate]\nauto_gc = false\n")
        StateRepo.init(root).close()
        start = time.time() + 1.5  # all writers start together, imports done
        procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(root), str(seconds),
                                   str(i), str(start)], stdout=subprocess.PIPE, text=True)
                 for i in range(writers)]
        total = sum(int(p.communicate(timeout=seconds + 120)[0]) for p in procs)
        return total / seconds
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    seconds = 0.5 if args.quick else args.seconds
    print(f"durable writes per second, {seconds:g} s per run")
    print(f"  {'writers':<10}{'total/s':>10}{'per writer/s':>14}")
    for writers in (1, 2, 4, 8):
        rate = run(writers, seconds)
        print(f"  {writers:<10}{rate:>10.1f}{rate / writers:>14.1f}")


if __name__ == "__main__":
    main()
