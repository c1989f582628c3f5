"""Spending an approval: ``spend_approval`` (the consume commit, then an empty body) on one
machine, next to the same spend in remote-first mode, linearized through git daemon on
loopback, with a plain local set as the yardstick. Medians, side by side in one run.

    python bench/spend.py [--quick]
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

from gitstate.repo import StateRepo

SCHEMA = "version: 1\nunknown_keys: allow\napprovals:\n  refund: {writers: [runtime]}\n"
ROOMY = "max_keys = 256\nsection_max_bytes = 65536\ninjection_max_chars = 100000\n"


def spends(repo: StateRepo, rounds: int) -> list[float]:
    """Milliseconds of each spend (request and approval beforehand, not timed)."""
    out = []
    for n in range(rounds):
        args = {"round": n}
        approval = repo.request_approval("refund", args, "bench")
        repo.approve(approval, "bench")
        start = time.perf_counter()
        with repo.spend_approval(approval, "refund", args):
            pass
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    rounds = 5 if parser.parse_args().quick else 50
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
