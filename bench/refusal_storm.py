"""A refusal storm beside main's writers: does recording refusals slow the writes that land?

    python bench/refusal_storm.py            # 1,000 refused writes from 4 processes
    python bench/refusal_storm.py --quick    # a smoke run for CI

One process writes main (200 sets) alone, then again while 4 processes each make 250
writes that a compare-and-swap refuses (each refusal one commit on refs/gitstate/refusals,
under the journal's own lock, after main's lock is released). Printed: the main writer's
median and 90th percentile both ways, the ratio, the storm's refusals per second, and that
the journal holds every refusal once.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gitstate.api.repo import StateRepo
from gitstate.history import refusals

ROOT = Path(__file__).resolve().parent.parent

STORM = """
import sys
from gitstate.api.repo import StateRepo
from gitstate.core.errors import GitStateError
repo = StateRepo(sys.argv[1], writer="agent")
for i in range(int(sys.argv[3])):
    try:
        repo.set("stop_loss.2317", 254, "patrol", expected=250, request_id=f"{sys.argv[2]}-{i}")
    except GitStateError:
        pass
"""
WRITER = """
import json, sys, time
from gitstate.api.repo import StateRepo
repo = StateRepo(sys.argv[1])
out = []
for i in range(int(sys.argv[2])):
    t = time.perf_counter()
    repo.set("counter", i, "main write")
    out.append(time.perf_counter() - t)
print(json.dumps(out))
"""


def _writer(agent: Path, n: int) -> list[float]:
    import json

    out = subprocess.run([sys.executable, "-c", WRITER, str(agent), str(n)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return [float(x) for x in json.loads(out.stdout)]


def _storm(agent: Path, writes: int, per_proc: int, *,
           journal: bool) -> tuple[list[float], float]:
    import os

    env = {**os.environ}
    if not journal:
        env["GITSTATE_BENCH_NO_REFUSAL_JOURNAL"] = "1"
    start = time.perf_counter()
    storm = [subprocess.Popen([sys.executable, "-c", STORM, str(agent), f"p{n}-{journal}",
                               str(per_proc)], cwd=ROOT, env=env) for n in range(4)]
    beside = _writer(agent, writes)
    for p in storm:
        p.wait()
    return beside, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    writes, per_proc = (20, 10) if args.quick else (200, 250)
    root = Path(tempfile.mkdtemp(prefix="gitstate-bench-"))
    try:
        agent = root / "agent"
        agent.mkdir()
        (agent / "config.toml").write_text("[gitstate]\nauto_gc = false\n")
        with StateRepo.init(agent) as repo:
            repo.set("stop_loss.2317", 262, "rule")
        alone = _writer(agent, writes)
        # the same storm without the journal: what refused attempts cost by themselves
        # (each takes main's lock to compare against HEAD)
        baseline, _ = _storm(agent, writes, per_proc, journal=False)
        beside, took = _storm(agent, writes, per_proc, journal=True)
        with StateRepo(agent) as repo:
            ids = [e["request_id"] for e in refusals.entries(repo.store)
                   if e["request_id"].endswith(tuple(f"-{i}" for i in range(per_proc)))
                   and "-True-" in e["request_id"]]
        total = 4 * per_proc

        def q(samples: list[float], p: float) -> float:
            return sorted(samples)[int(p * (len(samples) - 1))] * 1000

        print(f"main writes ({writes}), ms{'median':>29}{'p90':>8}")
        print(f"  {'alone':<38}{statistics.median(alone) * 1000:>7.2f}{q(alone, 0.9):>8.2f}")
        for label, samples in ((f"beside {total:,} refusals, no journal", baseline),
                               (f"beside {total:,} refusals, journal", beside)):
            print(f"  {label:<38}{statistics.median(samples) * 1000:>7.2f}"
                  f"{q(samples, 0.9):>8.2f}")
        print(f"  journal's cost (median, journal / no journal) "
              f"{statistics.median(beside) / statistics.median(baseline):.2f}x")
        print(f"storm: {total:,} refusals from 4 processes in {took:.1f} s "
              f"({total / took:.0f}/s); journal holds {len(set(ids)):,} distinct, "
              f"{len(ids):,} records")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
