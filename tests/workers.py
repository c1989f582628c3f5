"""Worker processes for the concurrency and crash tests (run as ``python -m tests.workers``)."""

from __future__ import annotations

import sys

from gitstate.errors import CasMismatch
from gitstate.repo import StateRepo


def increment(agent_dir: str, count: int, worker: str) -> None:
    """Read-modify-write ``counter`` ``count`` times with compare-and-swap, retrying."""
    retries = 0
    with StateRepo(agent_dir, actor=f"worker-{worker}") as repo:
        done = 0
        while done < count:
            current = repo.state().keys["counter"].value
            assert isinstance(current, int)
            try:
                repo.set("counter", current + 1, f"increment by {worker}", expected=current)
            except CasMismatch:
                retries += 1
                continue
            done += 1
    print(f"retries {retries}", flush=True)


def write_forever(agent_dir: str, start: int) -> None:
    """Set, clear and hand off in a loop, printing each acknowledged write."""
    with StateRepo(agent_dir, actor="crasher") as repo:
        print("ready", flush=True)
        i = start
        while True:
            if i % 7 == 3:
                repo.handoff(f"handoff {i}")
            else:
                repo.set("counter", i, f"write {i}")
                if i % 5 == 0:
                    repo.set(f"extra{i % 3}", i, f"write {i} extra")
            print(i, flush=True)
            i += 1


if __name__ == "__main__":
    name, *args = sys.argv[1:]
    if name == "increment":
        increment(args[0], int(args[1]), args[2])
    elif name == "write_forever":
        write_forever(args[0], int(args[1]))
    else:
        raise SystemExit(f"unknown worker {name}")
