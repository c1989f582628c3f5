"""How reads scale with history: get, render and a per-key log at several history lengths,
and the time to rebuild the JSONL projection from git.

    python bench/history.py                    # 100, 10,000 and 100,000 commits
    python bench/history.py --sizes 100 20000
    python bench/history.py --quick            # smoke run for CI

Histories are built through ``StateRepo.set`` (ten keys in rotation, as an agent's day would
look), then each read is timed in-process, many times, and the median is reported next to
the smallest history's (the ratio shows whether a read grows with history).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gitstate.api.repo import StateRepo
from gitstate.audit import views as audit

KEYS = [f"rule.{i}" for i in range(9)]
MEASURED = "stop_loss.2317"  # changed by every other commit, so every size has 20 to return


def build(agent: Path, commits: int) -> float:
    """A history of ``commits`` commits through StateRepo.set. fsync is switched off while
    building (only the build: nothing measured runs without it) to keep 100,000 commits to
    minutes; auto-gc is off so the as-written figures are the raw ones (packs are still
    folded after each write, as they always are)."""
    agent.mkdir(parents=True, exist_ok=True)
    (agent / "config.toml").write_text("[gitstate]\nauto_gc = false\n")
    real_fsync = os.fsync
    os.fsync = lambda fd: None  # build only
    start = time.perf_counter()
    try:
        with StateRepo.init(agent) as repo:
            for i in range(commits - 1):
                key = MEASURED if i % 2 else KEYS[(i // 2) % len(KEYS)]
                repo.set(key, i, f"change {i}")
                if sys.stderr.isatty() and i % 1000 == 0:
                    print(f"\r  building {commits}: {i}", end="", file=sys.stderr)
    finally:
        os.fsync = real_fsync
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
    from gitstate.wakeup.fastpath import section
    from gitstate.write.maintenance import run_gc

    with StateRepo(agent) as repo:
        commits = len(repo.full_history())
        out = {
            "get": timed(lambda: repo.get(), runs),
            "render (API)": timed(lambda: repo.render(), runs),
            "render (wake-up path)": timed(lambda: section(agent), runs),
            "log --key -n 20": timed(
                lambda: list(audit.log(repo, key=MEASURED, limit=20)), runs),
            "rebuild projection (ms)": timed(repo.rebuild_history, 1),
            "bytes/commit, as written": repo.store.disk_usage() / commits,
            "packs, as written": repo.store.pack_count(),
        }
        gc_start = time.perf_counter()
        run_gc(repo.reader)
        out["gc (ms)"] = (time.perf_counter() - gc_start) * 1000
        out["bytes/commit, packed"] = repo.store.disk_usage() / commits
        out["packs after gc"] = repo.store.pack_count()
        out["get after gc"] = timed(lambda: repo.get(), runs)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10000, 100000])
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
        print(f"\nmedian ms over {runs} runs       {header}   ratio {sizes[-1]:,}/{sizes[0]:,}")
        for name in base:
            row = "".join(f"{results[s][name]:>14.3f}" for s in sizes)
            print(f"  {name:<28}{row}{results[sizes[-1]][name] / base[name]:>10.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
