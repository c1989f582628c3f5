"""gitstate benchmarks: medians and ratios, measured side by side in one run.

    python bench/bench.py            # every table (about 15 minutes: it builds 100,000 commits)
    python bench/bench.py --quick    # a smoke run for CI: checks that it runs, not how fast
    python bench/bench.py --only writes   # writes | process | history | concurrency

Every figure is a median over repeated runs on the same machine in the same process run,
next to its baseline:

* durable set, in-process: gitstate's ``StateRepo.set`` against a plain JSON-file store that
  does the same write durably (rewrite + fsync + rename, then a JSONL line appended + fsync)
  and against the git CLI making the same commit through plumbing (hash-object, mktree,
  commit-tree, update-ref with the old value);
* the render command as a whole process on a 32-key state, against ``python -c "import json"``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gitstate.api.repo import StateRepo

sys.path.insert(0, str(Path(__file__).parent))
import concurrency
import history


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


class PlainJsonStore:
    """The floor: what a non-versioned durable store pays per write."""

    def __init__(self, root: Path) -> None:
        self.path = root / "state.json"
        self.log = root / "history.jsonl"
        self.data: dict[str, object] = {}

    def set(self, key: str, value: object, reason: str) -> None:
        self.data[key] = {"value": value, "reason": reason, "set_at": time.time()}
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            json.dump(self.data, f, ensure_ascii=False, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        with self.log.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, "value": value, "reason": reason}) + "\n")
            f.flush()
            os.fsync(f.fileno())


class GitCliStore:
    """The same commit made with the git CLI's plumbing, one subprocess per step."""

    def __init__(self, root: Path, fsync: str = "all") -> None:
        self.root = root
        self.env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
                    "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
        root.mkdir(parents=True, exist_ok=True)
        self._git("init", "-q", "-b", "main")
        self._git("config", "core.fsync", fsync)
        self.data: dict[str, object] = {}
        self.head: str | None = None

    def _git(self, *args: str, input: bytes | None = None) -> str:
        out = subprocess.run(["git", "-C", str(self.root), *args], input=input,
                             capture_output=True, check=True, env=self.env)
        return out.stdout.decode().strip()

    def set(self, key: str, value: object, reason: str) -> None:
        self.data[key] = {"value": value, "reason": reason}
        blob = self._git("hash-object", "-w", "--stdin",
                         input=json.dumps(self.data, indent=2, sort_keys=True).encode())
        tree = self._git("mktree", input=f"100644 blob {blob}\tworking_state.json\n".encode())
        parent = ["-p", self.head] if self.head else []
        commit = self._git("commit-tree", tree, *parent, "-m", reason)
        self._git("update-ref", "refs/heads/main", commit, self.head or "0" * 40)
        self.head = commit


def time_writes(write: Callable[[int], None], n: int) -> list[float]:
    samples = []
    for i in range(n):
        start = time.perf_counter()
        write(i)
        samples.append(time.perf_counter() - start)
    return samples


def bench_durable_set(n: int, n_cli: int) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="gitstate-bench-"))
    try:
        (root / "agent").mkdir()
        # background packing would share the two cores with the timed writes: measured apart
        (root / "agent" / "config.toml").write_text("[gitstate]\nauto_gc = false\n")
        repo = StateRepo.init(root / "agent")
        plain = PlainJsonStore(root)
        for i in range(20):  # a realistic table, so every store rewrites the same amount
            repo.set(f"key{i}", i, "warm-up")
            plain.set(f"key{i}", i, "warm-up")
        g_samples: list[float] = []
        p_samples: list[float] = []
        # Interleave in blocks so both stores see the same machine noise.
        block = max(n // 10, 1)
        for start in range(0, n, block):
            g_samples += time_writes(
                lambda i, s=start: repo.set("stop_loss.2317", s + i, "bench write"), block)
            p_samples += time_writes(
                lambda i, s=start: plain.set("stop_loss.2317", s + i, "bench write"), block)
        repo.close()
        c_samples: list[float] = []
        if shutil.which("git"):
            cli = GitCliStore(root / "cli")
            c_samples = time_writes(lambda i: cli.set("stop_loss.2317", i, "bench write"),
                                    n_cli)
        return {
            "gitstate": median_ms(g_samples),
            "plain": median_ms(p_samples),
            "git_cli": median_ms(c_samples) if c_samples else float("nan"),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_render_process(n: int) -> dict[str, float]:
    # bytecode as an install leaves it: with PYTHONDONTWRITEBYTECODE set, an edited module
    # would otherwise be compiled again on every run and counted as the wake-up's cost
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "gitstate"), quiet=1)
    root = Path(tempfile.mkdtemp(prefix="gitstate-bench-"))
    try:
        with StateRepo.init(root) as repo:
            for i in range(32):
                repo.set(f"rule.{i:02d}", 100 + i, f"reason {i}")
        gitstate = shutil.which("gitstate")
        entry = [gitstate] if gitstate else [sys.executable, "-m", "gitstate"]
        commands = {
            "render": [*entry, "--agent-dir", str(root), "render"],
            # the hook also writes its wake-up receipt (gitstate/history/receipts.py)
            "hook": [*entry, "--agent-dir", str(root), "hook", "claude-code", "--event",
                     "UserPromptSubmit"],
            "import_json": [sys.executable, "-c", "import json"],
        }
        samples: dict[str, list[float]] = {k: [] for k in commands if commands[k]}
        for _ in range(n):
            for name in samples:
                start = time.perf_counter()
                subprocess.run(commands[name], capture_output=True, check=True)
                samples[name].append(time.perf_counter() - start)
        return {k: median_ms(v) for k, v in samples.items()}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (CI)")
    parser.add_argument("--only", choices=["writes", "process", "history", "concurrency"])
    args = parser.parse_args()
    n_writes, n_cli, n_proc = (30, 5, 3) if args.quick else (2000, 200, 40)

    print(f"machine: {platform.platform()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    if args.only in (None, "writes"):
        print_writes(n_writes, n_cli)
    if args.only in (None, "process"):
        print_process(n_proc)
    if args.only in (None, "history"):
        sys.argv = [sys.argv[0], *(["--quick"] if args.quick else [])]
        history.main()
    if args.only in (None, "concurrency"):
        sys.argv = [sys.argv[0], *(["--quick"] if args.quick else [])]
        concurrency.main()


def print_writes(n_writes: int, n_cli: int) -> None:
    print(f"durable set, in-process: {n_writes} writes each (git CLI: {n_cli})")
    w = bench_durable_set(n_writes, n_cli)
    print(f"  {'store':<28}{'median ms':>10}{'vs plain':>10}{'vs git CLI':>12}")
    for name, label in (("plain", "plain JSON + JSONL, fsync"), ("gitstate", "gitstate set"),
                        ("git_cli", "git CLI, core.fsync=all")):
        print(f"  {label:<28}{w[name]:>10.3f}{w[name] / w['plain']:>9.2f}x"
              f"{w[name] / w['git_cli']:>11.2f}x")
    print(f"  gitstate: {w['gitstate'] / w['plain']:.2f}x the plain store, "
          f"{w['git_cli'] / w['gitstate']:.2f}x faster than the git CLI")


def print_process(n_proc: int) -> None:
    print(f"\nwhole process, 32-key state: {n_proc} runs each")
    r = bench_render_process(n_proc)
    print(f"  {'command':<36}{'median ms':>10}{'vs import json':>16}")
    for name, label in (("import_json", 'python -c "import json"'),
                        ("render", "gitstate render"),
                        ("hook", "gitstate hook claude-code")):
        if name in r:
            print(f"  {label:<36}{r[name]:>10.1f}{r[name] / r['import_json']:>15.2f}x")


if __name__ == "__main__":
    main()
