"""`gitstate fleet` at 10, 100 and 1,000 agents: total and per-agent time, side by side.

    python bench/fleet.py            # 10 / 100 / 1,000 agents
    python bench/fleet.py --quick    # 2 / 5 / 10, a smoke run for CI

The agents are built once through the API (``StateRepo.init`` and three sets each, fsync off
while building only), nested so that each larger fleet holds the smaller one: the 1,000
directory holds 900 agents and the 100 directory, which holds 90 and the 10 directory. Each
fleet is then timed as a user runs it, `gitstate fleet ROOT --json` in a fresh process (the
best of three; about 0.25 s of it is starting Python and importing), and in this process,
``fleet.fleet`` alone, whose per-agent figure is the one to compare: flat means discovery
and the per-agent work do not grow with the fleet.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gitstate.api.repo import StateRepo
from gitstate.audit.fleet import fleet


def build(root: Path, sizes: list[int]) -> list[Path]:
    """Nested fleet roots, smallest first: roots[i] holds sizes[i] agents in all."""
    roots, made = [], 0
    real_fsync = os.fsync
    os.fsync = lambda fd: None  # build only: nothing measured runs without it
    try:
        depth = [root / ("/".join(["more"] * (len(sizes) - 1 - i)) or ".")
                 for i in range(len(sizes))]
        for size, where in zip(sizes, depth, strict=True):
            for n in range(made, size):
                agent = where / f"agent{n:04d}"
                agent.mkdir(parents=True)
                (agent / "config.toml").write_text("[gitstate]\nauto_gc = false\n")
                with StateRepo.init(agent) as repo:
                    for k in range(3):
                        repo.set(f"rule.{k}", k, f"rule {k}", ttl_hours=k + 1)
            made = size
            roots.append(where)
    finally:
        os.fsync = real_fsync
    return roots


def timed_fleet(root: Path, expected: int) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "gitstate", "fleet", str(root), "--json"],
                             capture_output=True, text=True, check=False)
        best = min(best, time.perf_counter() - start)
        if out.returncode != 0:
            raise SystemExit(f"fleet failed: {out.stderr}")
        if out.stdout.count('"agent"') != expected:
            raise SystemExit(f"fleet listed {out.stdout.count(chr(34) + 'agent')} agents, "
                             f"not {expected}")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = [2, 5, 10] if args.quick else [10, 100, 1000]
    tmp = Path(tempfile.mkdtemp(prefix="gitstate-fleet-bench-"))
    try:
        start = time.perf_counter()
        roots = build(tmp / "fleet", sizes)
        print(f"built {sizes[-1]} agents in {time.perf_counter() - start:.1f} s")
        fleet(roots[0], full=False)  # imports, once
        print(f"{'agents':>8} {'gitstate fleet s':>17} {'fleet() ms/agent':>17}")
        for size, root in zip(sizes, roots, strict=True):
            total = timed_fleet(root, size)
            start = time.perf_counter()
            rows = fleet(root, full=False)
            inner = time.perf_counter() - start
            assert len(rows) == size and all(r["verify"] == "ok" for r in rows), rows[:2]
            print(f"{size:>8} {total:>17.2f} {inner * 1000 / size:>17.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
