"""The kill matrix: a writer of each namespace killed with SIGKILL beside live writers of
every other, on one agent directory, then every acknowledged write looked for by git.

    python bench/kill_matrix.py --kills 400          # the full count (docs/reliability.md)
    python bench/kill_matrix.py --kills 8 --json     # the suite's (tests/write/test_kill_matrix.py)

One live writer per namespace (main, a run, a LangGraph thread, the refusal journal;
tests/ns_workers.py) writes all along, one write every ``--interval`` seconds. Kill ``i``
starts a victim writer of namespace ``i mod 4`` (main's victims write main, the run's share
a run among 25 victims, the thread's a thread, the journal's the journal) and kills it with
SIGKILL: at a random moment (0-150 ms after it is ready), or stopped inside its write at one
of the write path's points (its ``<ref>.lock`` taken, written, its objects durable, its pack
half written), where a kill leaves the most behind. At the end the live writers stop
(SIGTERM: after the write in flight) and the figures are taken:

- live failures: a live writer that printed an error or died (must be 0);
- lost: acknowledged writes (live and victims) whose token is on no commit of their ref
  (``git log`` of each ref; the journal's previous generation included) (must be 0);
- ``git fsck --strict`` and ``gitstate verify`` on the result (must pass).

A new kind of victim (a push, a pull) is a namespace of tests/ns_workers.py and an entry
of ``--namespaces``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.ns_workers import NAMESPACES, refs_to_search  # noqa: E402

POINTS = (None, None, "ref.locked", "ref.written", "objects", "pack.tmp_pack")  # None: random
VICTIM_STRIDE = 50  # numbers per victim: never two victims' writes with one number
_CAPTURED = re.compile(r'"request_id":"([^"]*)"|Gitstate-Checkpoint: "([^"]*)"')


class Writer:
    """A tests/ns_workers.py process and what it printed (read on a thread)."""

    def __init__(self, agent: Path, ns: str, tag: str, start: int, *extra: str) -> None:
        self.ns = ns
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.ns_workers", str(agent), ns, tag, str(start),
             *extra], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        self.acked: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.seen: dict[str, threading.Event] = {"ready": threading.Event(),
                                                 "paused": threading.Event()}
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if line in self.seen:
                self.seen[line].set()
            elif line.startswith("ERROR"):
                self.errors.append(line)
            elif line:
                _n, ref, token = line.split(" ", 2)
                self.acked.append((ref, token))

    def wait_for(self, what: str, timeout: float = 120) -> bool:
        return self.seen[what].wait(timeout)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.finish()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.finish()

    def finish(self) -> None:
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(30)
        if self.proc.stderr is not None:
            err = self.proc.stderr.read()
            if "Traceback" in err and not self.errors:
                self.errors.append(err.strip().splitlines()[-1])


def logged(state_dir: Path, ref: str) -> set[str]:
    """Every token on the commits of ``ref``: subjects, request ids, checkpoint ids."""
    out = subprocess.run(["git", "-C", str(state_dir), "log", "--format=%x00%B", ref, "--"],
                         capture_output=True, text=True, check=False)
    found: set[str] = set()
    for body in out.stdout.split("\0")[1:]:
        found.add(body.split("\n", 1)[0])
        found.update(a or b for a, b in _CAPTURED.findall(body))
    return found


def run(agent: Path, kills: int, seed: int, interval: float,
        namespaces: tuple[str, ...] = NAMESPACES) -> dict[str, object]:
    from gitstate.api.repo import StateRepo

    StateRepo.init(agent).close()
    rng = random.Random(seed)
    live = {ns: Writer(agent, ns, "live", 1, "--interval", str(interval)) for ns in namespaces}
    for writer in live.values():
        if not writer.wait_for("ready"):
            raise SystemExit(f"the live {writer.ns} writer did not start")
    victims: list[Writer] = []
    by_point: Counter[str] = Counter()
    started = time.monotonic()
    for i in range(kills):
        ns, point = namespaces[i % len(namespaces)], rng.choice(POINTS)
        start = 1_000_000 + i * VICTIM_STRIDE
        victim = Writer(agent, ns, "victims", start, *(["--pause", point] if point else []))
        if point is not None:
            victim.wait_for("paused")  # inside its write: the kill lands there
        elif victim.wait_for("ready"):
            time.sleep(rng.uniform(0.0, 0.15))
        victim.kill()
        by_point[point or "random"] += 1
        victims.append(victim)
    for writer in live.values():  # one more write each after the last kill, then stop
        after = len(writer.acked)
        deadline = time.monotonic() + 60
        while len(writer.acked) == after and writer.proc.poll() is None and \
                time.monotonic() < deadline:
            time.sleep(0.02)
        writer.stop()
    seconds = time.monotonic() - started
    state_dir = agent / "state"
    logs: dict[str, set[str]] = {}
    acked: Counter[str] = Counter()
    lost: list[str] = []
    for writer in [*live.values(), *victims]:
        for ref, token in writer.acked:
            acked[writer.ns] += 1
            found = False
            for name in refs_to_search(ref):
                if name not in logs:
                    logs[name] = logged(state_dir, name)
                found = found or token in logs[name]
            if not found:
                lost.append(f"{writer.ns} {ref} {token}")
    fsck = subprocess.run(["git", "-C", str(state_dir), "fsck", "--strict", "--no-dangling"],
                          capture_output=True, text=True, check=False)
    verify = subprocess.run([sys.executable, "-m", "gitstate", "--agent-dir", str(agent),
                             "verify", "--json"], capture_output=True, text=True,
                            check=False, cwd=ROOT)
    try:
        checks = json.loads(verify.stdout)["checks"]
    except (ValueError, KeyError):
        checks = [{"name": "verify", "ok": False, "detail": verify.stderr[-300:]}]
    failed_checks = [f"{c['name']}: {c.get('detail', '')}" for c in checks if not c["ok"]]
    git_dir = state_dir / ".git"
    left = sorted(str(p.relative_to(git_dir)) for p in git_dir.rglob("*.lock")
                  if p.name != "gitstate.lock")
    return {
        "kills": kills, "kills_by_namespace": dict(Counter(v.ns for v in victims)),
        "kills_by_point": dict(by_point), "seconds": round(seconds, 1),
        "acknowledged": sum(acked.values()), "acknowledged_by_namespace": dict(acked),
        "acknowledged_by_victims": sum(len(v.acked) for v in victims),
        "lost": len(lost), "lost_examples": lost[:10],
        "live_failures": sum(len(w.errors) + (w.proc.returncode not in (0, -signal.SIGTERM))
                             for w in live.values()),
        "live_errors": [e for w in live.values() for e in w.errors][:10],
        "victim_errors": [e for v in victims for e in v.errors][:10],
        "fsck_ok": fsck.returncode == 0 and "error" not in fsck.stderr.lower(),
        "fsck_output": (fsck.stdout + fsck.stderr)[-500:],
        "verify_failures": len(failed_checks), "verify_failed": failed_checks[:10],
        "ref_locks_left": len(left), "ref_locks_left_examples": left[:5],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=400)
    parser.add_argument("--interval", type=float, default=0.05,
                        help="seconds between two writes of a live writer")
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--namespaces", default=",".join(NAMESPACES))
    parser.add_argument("--keep", type=Path, help="the agent directory to use and keep")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    base = None if args.keep else Path(tempfile.mkdtemp(prefix="gitstate-kill-matrix-"))
    agent: Path = args.keep if base is None else base / "agent"
    try:
        figures = run(agent, args.kills, args.seed, args.interval,
                      tuple(args.namespaces.split(",")))
    finally:
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for name, value in figures.items():
            print(f"{name}: {value}")
    ok = figures["lost"] == 0 and figures["live_failures"] == 0 and \
        figures["verify_failures"] == 0 and figures["fsck_ok"] and not figures["victim_errors"]
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    main()
