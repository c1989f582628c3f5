"""The durable write per durability mode and file system, side by side in one run.

    python bench/write_path.py               # 2,000 writes per cell (about 10 minutes)
    python bench/write_path.py --quick       # a smoke run for CI
    python bench/write_path.py --writes 500 --fs disk

For each file system (this machine's disk; and, when run as root with mkfs, a loop-mounted
journaled ext4 image and an XFS image) and each mode (strict, fast, and the one ``auto``
picks there), the median ms of ``StateRepo.set`` next to the plain JSON store (rewrite +
fsync + rename, JSONL append + fsync) and the git CLI's plumbing with ``core.fsync=all``, on
the same file system, interleaved in blocks so that all see the same noise. Then the system
calls of one write (``strace -c`` over 200 writes in a child process, per write): fsyncs
(fsync and fdatasync; sync_file_range, "sfr", starts and waits apart), opens, renames.
Last, per file system, what replacing one re-derivable 3 KB file costs: a temporary file
renamed over it (``atomic_write``) against the spare exchanged with it (``swap_write``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench import GitCliStore, PlainJsonStore, median_ms, time_writes
from gitstate.api.repo import StateRepo
from gitstate.store import durability
from gitstate.store.fs import atomic_write, swap_write

IMAGES = {"ext4": ("mkfs.ext4", ["-q", "-F"], "256M"), "xfs": ("mkfs.xfs", ["-q", "-f"], "512M")}
STRACE_WRITES = 200


@contextlib.contextmanager
def file_system(kind: str) -> Iterator[Path | None]:
    base = Path(tempfile.mkdtemp(prefix=f"gitstate-fs-{kind}-"))
    try:
        if kind == "disk":
            yield base
            return
        mkfs, args, size = IMAGES[kind]
        if os.geteuid() != 0 or not shutil.which(mkfs):
            yield None
            return
        image, mnt = base / "fs.img", base / "mnt"
        mnt.mkdir()
        subprocess.run(["truncate", "-s", size, str(image)], check=True)
        ok = subprocess.run([mkfs, *args, str(image)], capture_output=True).returncode == 0 \
            and subprocess.run(["mount", "-o", "loop", str(image), str(mnt)],
                               capture_output=True).returncode == 0
        try:
            yield mnt if ok else None
        finally:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def agent(root: Path, name: str, mode: str) -> StateRepo:
    path = root / name
    path.mkdir()
    (path / "config.toml").write_text(f'[gitstate]\nauto_gc = false\ndurability = "{mode}"\n')
    repo = StateRepo.init(path)
    for i in range(20):  # a realistic table, as the plain store gets
        repo.set(f"key{i}", i, "warm-up")
    return repo


def measure(root: Path, modes: list[str], n: int, n_cli: int) -> dict[str, float]:
    repos = {mode: agent(root, f"agent-{mode}", mode) for mode in modes}
    plain = PlainJsonStore(root)
    for i in range(20):
        plain.set(f"key{i}", i, "warm-up")
    samples: dict[str, list[float]] = {m: [] for m in modes}
    samples["plain"] = []
    block = max(n // 10, 1)
    for start in range(0, n, block):
        for mode, repo in repos.items():
            samples[mode] += time_writes(
                lambda i, s=start, r=repo: r.set("stop_loss.2317", s + i, "bench"), block)
        samples["plain"] += time_writes(
            lambda i, s=start: plain.set("stop_loss.2317", s + i, "bench"), block)
    for repo in repos.values():
        repo.close()
    cli = GitCliStore(root / "cli", fsync="all")
    samples["git_cli"] = time_writes(lambda i: cli.set("stop_loss.2317", i, "bench"), n_cli)
    return {k: median_ms(v) for k, v in samples.items()}


def syscalls(root: Path, mode: str) -> dict[str, float] | None:
    """fsyncs, opens and renames per write, from strace -c over a child's writes."""
    if not shutil.which("strace"):
        return None
    path = root / f"strace-{mode}"
    code = ("import sys\nfrom gitstate.api.repo import StateRepo\n"
            "r = StateRepo(sys.argv[1])\nfor i in range(int(sys.argv[2])): "
            "r.set('stop_loss.2317', i, 'bench')\n")
    agent(root, path.name, mode).close()
    out = subprocess.run(["strace", "-f", "-c", "-o", str(root / "strace.txt"),
                          sys.executable, "-c", code, str(path), str(STRACE_WRITES)],
                         capture_output=True, text=True)
    baseline = subprocess.run(["strace", "-f", "-c", "-o", str(root / "strace0.txt"),
                               sys.executable, "-c", code, str(path), "0"],
                              capture_output=True, text=True)
    if out.returncode or baseline.returncode:
        return None
    calls, base = _counts(root / "strace.txt"), _counts(root / "strace0.txt")

    def per_write(*names: str) -> float:
        return sum(calls.get(n, 0) - base.get(n, 0) for n in names) / STRACE_WRITES

    return {"fsyncs": per_write("fsync", "fdatasync"), "sfr": per_write("sync_file_range"),
            "opens": per_write("openat", "open"),
            "renames": per_write("rename", "renameat", "renameat2")}


def replace_costs(root: Path, n: int) -> tuple[float, float]:
    """Median ms of replacing a 3 KB file: atomic_write (no fsync), then swap_write."""
    import time

    target, spare = root / "replace-target.json", root / "replace-spare"
    target.write_bytes(b"{}")
    data = [bytes([48 + i % 10]) * 3000 for i in range(n)]
    out = []
    for write in (lambda d: atomic_write(target, d, fsync=False),
                  lambda d: swap_write(target, d, spare)):
        times = []
        for d in data:
            start = time.perf_counter()
            write(d)
            times.append(time.perf_counter() - start)
        assert target.read_bytes() == data[-1]
        out.append(sorted(times)[len(times) // 2] * 1000)
    return out[0], out[1]


def _counts(path: Path) -> dict[str, int]:
    counts = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[-1].isidentifier() and parts[3].isdigit():
            counts[parts[-1]] = int(parts[3])
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (CI)")
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--fs", nargs="+", default=["disk", "ext4", "xfs"])
    args = parser.parse_args()
    n, n_cli = (30, 5) if args.quick else (args.writes, max(args.writes // 10, 20))
    print(f"durable set, median ms of {n} writes (git CLI: {n_cli}); "
          "x = ratio to the plain store, and how many times faster than the git CLI")
    print(f"  {'file system':<20}{'mode':<14}{'ms':>8}{'vs plain':>10}{'vs git CLI':>12}"
          f"{'fsyncs':>8}{'sfr':>6}{'opens':>7}{'renames':>9}")
    replacing = []
    for kind in args.fs:
        with file_system(kind) as root:
            if root is None:
                print(f"  {kind:<20}(skipped: needs root, mkfs and a loop device)")
                continue
            auto = durability.detect(root)
            described = durability.describe(root)
            figures = measure(root, ["strict", "fast"], n, n_cli)
            print(f"  {described:<20}{'plain store':<14}{figures['plain']:>8.3f}{1:>9.2f}x")
            print(f"  {described:<20}{'git CLI':<14}{figures['git_cli']:>8.3f}"
                  f"{figures['git_cli'] / figures['plain']:>9.2f}x{1:>11.2f}x")
            for mode in ("strict", "fast"):
                calls = syscalls(root, mode) if not args.quick else None
                label = mode + (" (auto)" if mode == auto else "")
                tail = (f"{calls['fsyncs']:>8.1f}{calls['sfr']:>6.1f}{calls['opens']:>7.1f}"
                        f"{calls['renames']:>9.1f}") if calls else ""
                print(f"  {described:<20}{label:<14}{figures[mode]:>8.3f}"
                      f"{figures[mode] / figures['plain']:>9.2f}x"
                      f"{figures['git_cli'] / figures[mode]:>11.2f}x{tail}")
            replacing.append((described, *replace_costs(root, 50 if args.quick else 500)))
    print("replacing a re-derivable 3 KB file, median ms")
    print(f"  {'file system':<20}{'temp + rename':>14}{'spare exchange':>16}{'ratio':>8}")
    for described, renamed, swapped in replacing:
        print(f"  {described:<20}{renamed:>14.3f}{swapped:>16.3f}{renamed / swapped:>7.1f}x")


if __name__ == "__main__":
    main()
