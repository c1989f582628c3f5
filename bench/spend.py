"""Spending an approval: ``spend_approval`` (the consume commit, then an empty body) on one
machine, next to the same spend in remote-first mode, linearized through git daemon on
loopback, with a plain local set as the yardstick. Medians, side by side in one run.
With ``--cycles N``: N request/approve/spend cycles on one agent with the default caps (32
live keys, 256 stored): every one must pass (finished approvals leave the key table), and
the cycle time of the last hundred is set beside the first hundred's.

    python bench/spend.py [--quick] [--cycles 10000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

from remote import git_daemon

from gitstate.api.repo import StateRepo

SCHEMA = "version: 1\nunknown_keys: allow\napprovals:\n  refund: {writers: [runtime]}\n"
ROOMY = "max_keys = 256\nsection_max_bytes = 65536\ninjection_max_chars = 100000\n"


def spends(repo: StateRepo, rounds: int) -> list[float]:
    """Milliseconds of each spend (request and approval beforehand, not timed)."""
    out = []
    for n in range(rounds):
        args = {"round": n}
        approval = repo.approvals.request("refund", args, "bench")
        repo.approvals.approve(approval, "bench")
        start = time.perf_counter()
        with repo.approvals.spend(approval, "refund", args):
            pass
        out.append((time.perf_counter() - start) * 1000)
    return out


def cycles(count: int) -> None:
    """``count`` full cycles on one agent with the default caps; medians per hundred."""
    root = Path(tempfile.mkdtemp(prefix="gitstate-cycles-bench-"))
    try:
        repo = StateRepo.init(root)
        repo.set_schema(SCHEMA, "bench")
        ms: list[float] = []
        started = time.perf_counter()
        for n in range(count):
            start = time.perf_counter()
            approval = repo.approvals.request("refund", {"round": n}, "bench")
            repo.approvals.approve(approval, "bench")
            with repo.approvals.spend(approval, "refund", {"round": n}):
                pass
            ms.append((time.perf_counter() - start) * 1000)
        total = time.perf_counter() - started
        keys = repo.state().keys
        first, last = statistics.median(ms[:100]), statistics.median(ms[-100:])
        print(f"{count} request/approve/spend cycles, default caps: all passed in {total:.0f} s")
        print(f"  cycle median ms, first 100 {first:.2f}, last 100 {last:.2f} "
              f"({last / first:.2f}x); keys left in the table: {len(keys)} "
              f"(approval records: {sum(k.startswith('approval.') for k in keys)})")
        repo.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cycles", type=int, default=0)
    options = parser.parse_args()
    if options.cycles:
        cycles(options.cycles)
        return
    rounds = 5 if options.quick else 50
    root = Path(tempfile.mkdtemp(prefix="gitstate-spend-bench-"))
    port, daemon = git_daemon(root)
    try:
        for name in ("local", "linked"):
            (root / name).mkdir()
            (root / name / "config.toml").write_text("[gitstate]\n" + ROOMY)
        local = StateRepo.init(root / "local")
        local.set_schema(SCHEMA, "bench")
        set_ms = []
        for n in range(rounds):
            start = time.perf_counter()
            local.set("k", n, "bench")
            set_ms.append((time.perf_counter() - start) * 1000)
        local_ms = spends(local, rounds)
        with StateRepo.init(root / "linked") as seed:
            seed.set_schema(SCHEMA, "bench")
            seed.store.set_remote_url(f"git://127.0.0.1:{port}/r.git")
            seed.push()
        (root / "linked" / "config.toml").write_text(
            '[gitstate]\nsync = "remote-first"\n' + ROOMY)
        with StateRepo(root / "linked") as linked:
            remote_ms = spends(linked, rounds)
        base = statistics.median(set_ms)
        print(f"spend latency, {rounds} rounds                          median ms   x set")
        for label, values in (("set, local (the yardstick)", set_ms),
                              ("spend_approval, local", local_ms),
                              ("spend_approval, remote-first via git daemon", remote_ms)):
            median = statistics.median(values)
            print(f"  {label:<46}{median:>9.2f}{median / base:>7.1f}x")
        local.close()
    finally:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
