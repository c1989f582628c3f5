"""How reads scale with history: get, render and a per-key log at several history lengths,
and the time to rebuild the JSONL projection from git.

    python bench/history.py                    # 100 and 20,000 commits
    python bench/history.py --sizes 100 10000 100000
    python bench/history.py --quick            # smoke run for CI

Histories are built through ``StateRepo.set`` (ten keys in rotation, as an agent's day would
look), then each read is timed in-process, many times, and the median is reported next to
the smallest history's (the ratio shows whether a read grows with history).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gitstate import audit
from gitstate.repo import StateRepo

KEYS = [f"rule.{i}" for i in range(9)] + ["stop_loss.2317"]


def build(agent: Path, commits: int) -> float:
    start = time.perf_counter()
    with StateRepo.init(agent) as repo:
        for i in range(commits - 1):
            repo.set(KEYS[i % len(KEYS)], i, f"change {i}")
            if sys.stderr.isatty() and i % 1000 == 0:
                print(f"\r  building {commits}: {i}", end="", file=sys.stderr)
    if sys.stderr.isatty():
        print("\r" + " " * 40 + "\r", end="", file=sys.stderr)
    return time.perf_counter() - start


def timed(fn: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def measure(agent: Path, runs: int) -> dict[str, float]:
    with StateRepo(agent) as repo:
        return {
            "get": timed(lambda: repo.get(), runs),
            "render": timed(lambda: repo.render(), runs),
            "log --key -n 20": timed(
                lambda: list(audit.log(repo, key="stop_loss.2317", limit=20)), runs),
            "rebuild (ms)": timed(repo.rebuild_history, 3),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 20000])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes, runs = ([20, 200], 5) if args.quick else (sorted(args.sizes), args.runs)
    root = Path(tempfile.mkdtemp(prefix="gitstate-history-"))
    try:
        results = {}
        for size in sizes:
            built = build(root / str(size), size)
            results[size] = measure(root / str(size), runs)
            print(f"built {size} commits in {built:.1f}s ({built / size * 1000:.2f} ms/commit)")
        base = results[sizes[0]]
        header = "".join(f"{s:>14,}" for s in sizes)
        print(f"\nmedian ms over {runs} runs     {header}   ratio {sizes[-1]:,}/{sizes[0]:,}")
        for name in base:
            row = "".join(f"{results[s][name]:>14.3f}" for s in sizes)
            print(f"  {name:<26}{row}{results[sizes[-1]][name] / base[name]:>10.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
