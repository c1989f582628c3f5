"""How long `gitstate report --html` takes: one agent with a long history, and a fleet.

    python bench/report.py                          # 100,000 commits; 100 agents
    python bench/report.py --commits 20000 --agents 20
    python bench/report.py --quick                  # a smoke run for CI

The long history is ten keys in rotation through ``StateRepo.set`` (as bench/history.py
builds it), with a refused write every 100 commits and a wake-up receipt every 50; each
fleet agent has 50 commits. Printed: build time of the history (not the report's), the
report's wall time, its page count and total bytes, and the largest page.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gitstate.api.repo import StateRepo
from gitstate.core.errors import GitStateError
from gitstate.history import receipts
from gitstate.report.build import write_fleet, write_report


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=30)
        return self.now


def agent(path: Path, commits: int, progress: bool = False) -> None:
    path.mkdir(parents=True)
    (path / "config.toml").write_text("[gitstate]\nauto_gc = false\n")
    clock = Clock()
    with StateRepo.init(path, clock=clock) as repo:
        for i in range(commits):
            repo.set(f"rule.{i % 10}", i, f"change {i}")
            if i % 100 == 99:
                with contextlib.suppress(GitStateError):
                    repo.set("rule.0", -1, "a stale patrol", expected=-2)
            if i % 50 == 49:
                receipts.record(str(repo.state_dir / ".git"), repo.render().encode(),
                                now=clock.now, head=repo.head(), runtime="plain", event="",
                                locale="en", tz=None, max_chars=None, run_id=None,
                                run_head=None)
            if progress and i % 10_000 == 9_999:
                print(f"  built {i + 1:,} commits", file=sys.stderr, flush=True)


def size(site: Path) -> tuple[int, int, int]:
    files = [p for p in site.rglob("*.html")]
    sizes = [p.stat().st_size for p in files]
    return len(files), sum(sizes), max(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--commits", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=100)
    args = parser.parse_args()
    commits, agents = (300, 3) if args.quick else (args.commits, args.agents)
    root = Path(tempfile.mkdtemp(prefix="gitstate-bench-"))
    try:
        start = time.perf_counter()
        agent(root / "long", commits, progress=not args.quick)
        built = time.perf_counter() - start
        start = time.perf_counter()
        with StateRepo(root / "long") as repo:
            write_report(repo, root / "site-long", "long")
        took = time.perf_counter() - start
        pages, total, largest = size(root / "site-long")
        print(f"one agent, {commits:,} commits (built in {built:.0f} s): report in "
              f"{took:.2f} s, {pages} pages, {total / 1e6:.2f} MB, largest page "
              f"{largest / 1e3:.0f} kB")
        for n in range(agents):
            agent(root / "fleet" / f"agent-{n:03d}", 50)
        start = time.perf_counter()
        write_fleet(root / "fleet", root / "site-fleet")
        took = time.perf_counter() - start
        pages, total, largest = size(root / "site-fleet")
        print(f"fleet of {agents} agents (50 commits each): report in {took:.2f} s "
              f"({took / agents * 1000:.0f} ms per agent), {pages} pages, "
              f"{total / 1e6:.2f} MB")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
