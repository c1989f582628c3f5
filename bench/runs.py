"""Run ledgers: the cost of one event commit, `run list` over many runs, the <state> block.

    python bench/runs.py                 # 1,000 events; run list with 1,000 runs
    python bench/runs.py --quick         # a smoke run for CI

One event is one commit on the run's ref (run.json in its tree, the event in trailers),
beside the plain JSON store writing the same run.json (rewrite + fsync, JSONL append +
fsync) and the git CLI making the same commit (one subprocess per plumbing step). `run
list` reads one run.json per run ref; the block is rendered from the ledger's cache, as the
wake-up hook does.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench import GitCliStore, PlainJsonStore, median_ms, time_writes
from gitstate.api.repo import StateRepo
from gitstate.system.config import load_config
from gitstate.wakeup.slowpath import run_block


def event(i: int) -> dict[str, object]:
    return {"type": "tool_result_recorded", "tool_call_id": f"call-{i}",
            "evidence_ref": f"ticket:T-{i % 50}", "observed_at": "2026-12-01T09:00:00Z"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, runs_n, git_n = (30, 20, 5) if args.quick else (1000, 1000, 100)
    root = Path(tempfile.mkdtemp(prefix="gitstate-bench-"))
    try:
        agent = root / "agent"
        agent.mkdir()
        (agent / "config.toml").write_text("[gitstate]\nauto_gc = false\n")
        repo = StateRepo.init(agent)
        repo.runs.start("bench", description="a long run", criteria=["done"],
                        reason="bench")
        plain, cli = PlainJsonStore(root), GitCliStore(root / "cli")
        run_json = json.dumps(repo.runs.read("bench").state)
        samples: dict[str, list[float]] = {"event": [], "plain": [], "git": []}
        block = max(n // 10, 1)
        for start in range(0, n, block):
            samples["event"] += time_writes(
                lambda i, s=start: repo.runs.event("bench", event(s + i), "bench"), block)
            samples["plain"] += time_writes(
                lambda i, s=start: plain.set("run", run_json, "bench"), block)
        samples["git"] = time_writes(lambda i: cli.set("run", run_json, "bench"), git_n)
        size = len(repo.store.read_file(repo.store.ref("refs/heads/runs/bench") or "",
                                        "run.json") or b"")
        ms = {k: median_ms(v) for k, v in samples.items()}
        print(f"one event commit, median ms of {n} events (run.json of {size:,} bytes at the "
              "end)")
        print(f"  {'store':<40}{'ms':>8}{'vs plain':>10}")
        for label, key in (("gitstate run event", "event"),
                           ("plain JSON + JSONL, fsync", "plain"),
                           (f"git CLI plumbing ({git_n} commits)", "git")):
            print(f"  {label:<40}{ms[key]:>8.2f}{ms[key] / ms['plain']:>9.2f}x")

        for i in range(runs_n):
            repo.runs.start(f"run-{i:04d}", description=f"run {i}", criteria=["done"],
                            reason="bench")
        timings = []
        for _ in range(3 if args.quick else 7):
            start = time.perf_counter()
            listed = repo.runs.listing()
            timings.append(time.perf_counter() - start)
        assert len(listed) == runs_n + 1
        print(f"run list with {runs_n + 1:,} runs: median {statistics.median(timings) * 1000:.1f}"
              f" ms of {len(timings)} ({statistics.median(timings) * 1e6 / len(listed):.0f} µs "
              "per run)")
        config = load_config(agent)
        now = datetime.now(UTC)
        renders = time_writes(lambda i: run_block(agent, "bench", locale="en", now=now,
                                                  config=config), 50 if args.quick else 300)
        print(f"<state> block from the cache: median {median_ms(renders):.3f} ms")
        repo.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
