"""Push and pull killed at every phase, and at random moments, over a path remote and over
git daemon: nothing acknowledged is lost, the next ordinary push or pull finishes what the
killed one left, and verify passes after it.

    python bench/remote_kills.py [--kills N] [--transport path|daemon|both] [--quick]

Each round, agent A makes acknowledged writes (a main key, a run event) and a `gitstate
push` process is killed; then agent B's `gitstate pull` process is killed. Every other
round B first writes and pushes a key of its own, so A's push has to re-apply on a remote
that moved on (the rebase phases). A kill is a fault point of gitstate/system/faults.py
(SYNC_POINTS, in turn) or, every fourth round, a SIGKILL of the process group (gitstate and
its git receive-pack child on a path remote) at a random moment of the push or pull.
After each kill the recovery is the next ordinary command, in process: A pushes (or B
pulls) once, then verify (git fsck included) must pass, every write A acknowledged must be
on the remote's main and in B's (by its reason, `git log`), every acknowledged run event on
both run refs, and B's working file must be HEAD's. A lock the kill left in a path remote
must be refused as `remote.locked` naming its file: it is removed with the command the
error gives and counted. Exit 1 on any loss, verify failure or unexpected refusal.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from remote import git_daemon

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.core.errors import StoreError
from gitstate.core.layout import STATE_FILE
from gitstate.runs.format import PREFIX
from gitstate.system.faults import SYNC_POINTS

RUN = "refund-O-104"
PUSH_POINTS = [p for p in SYNC_POINTS if p.startswith("push.")]  # rebased: B pushes first
PULL_POINTS = [p for p in SYNC_POINTS if p.startswith("pull.")]


@dataclass
class Tally:
    kills: int = 0
    at_points: int = 0
    random: int = 0
    acknowledged: int = 0
    lost: int = 0
    verify_failures: int = 0
    unexpected: list[str] = field(default_factory=list)
    remote_locks: int = 0  # named by push as remote.locked, removed with the given command


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          check=True).stdout


def killed(agent: Path, command: str, point: str | None, seconds: float) -> None:
    """`gitstate COMMAND` in its own process group: killed at ``point``, or by SIGKILL of
    the group after a random part of ``seconds`` (the command's usual duration)."""
    env = {**os.environ, **({"GITSTATE_TEST_FAULT": point} if point else {})}
    proc = subprocess.Popen([sys.executable, "-m", "gitstate", "--agent-dir", str(agent),
                             command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    if point is None:
        time.sleep(random.uniform(0.2, 1.0) * seconds)
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if point is not None and proc.returncode != 137:
        raise SystemExit(f"{command} at {point} was not killed (exit {proc.returncode})")


def recover(agent: Path, action: str, tally: Tally) -> None:
    """The next ordinary push or pull; a lock a kill left in the remote is removed with the
    command the refusal names, then the push is made again."""
    for _ in range(5):
        try:
            with StateRepo(agent) as repo:
                result = repo.remote.push() if action == "push" else repo.remote.pull()
        except StoreError as exc:
            fix = exc.details.get("fix", "")
            if exc.rule != "remote.locked" or not fix.startswith("rm '"):
                raise
            tally.remote_locks += 1
            Path(fix[4:-1]).unlink()
            continue
        problems = result.refused or result.runs.get("refused") or \
            result.runs.get("diverged")
        if problems:
            tally.unexpected.append(f"{action}: {problems}")
        return
    raise SystemExit(f"{action} kept finding locks")


def check(agent: Path, tally: Tally) -> None:
    with StateRepo(agent) as repo:
        failed = [f"{c.name}: {c.detail}" for c in integrity.verify(repo) if not c.ok]
        head_file = git(repo.state_dir, "show", f"main:{STATE_FILE}")
        if (repo.state_dir / STATE_FILE).read_text() != head_file:
            failed.append("worktree: not HEAD's file")
    if failed:
        failed += [p.name for p in (agent / "state").glob(".*.tmp")]
        tally.verify_failures += 1
        tally.unexpected.append(f"verify {agent.name}: {failed}")


def missing(where: Path, ref: str, reasons: list[str]) -> int:
    logged = set(git(where, "log", "--format=%s", ref).splitlines())
    return sum(1 for r in reasons if r not in logged)


def pick(points: list[str], n: int) -> str | None:
    """Round ``n``'s kill: each fault point in turn, and every fourth a random moment."""
    i = n - 1
    return None if i % 4 == 3 else points[(i - i // 4) % len(points)]


def matrix(transport: str, kills: int, root: Path) -> Tally:
    daemon = None
    if transport == "daemon":
        port, daemon = git_daemon(root)
        url, bare = f"git://127.0.0.1:{port}/r.git", root / "srv" / "r.git"
    else:
        bare = root / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
        url = str(bare)
    tally = Tally()
    a, b = root / "a", root / "b"
    try:
        for agent in (a, b):  # run events come back from the other clone unsigned
            agent.mkdir()
            (agent / "config.toml").write_text("[trust]\ntrust_remote = true\n")
        with StateRepo.init(a) as repo:
            repo.set("a.0", 0, "a write 0")
            repo.store.set_remote_url(url)
            repo.runs.start(RUN, description="refund", criteria=["refund issued"],
                            reason="run start")
            repo.remote.push()
        StateRepo.clone(url, b).close()
        writes, events = ["a write 0"], ["run start"]
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "gitstate", "--agent-dir", str(b), "pull"],
                       capture_output=True, check=True)
        seconds = time.monotonic() - start  # a whole `gitstate pull` process
        n = 0
        while tally.kills < kills:
            n += 1
            with StateRepo(a) as repo:
                repo.set(f"a.{n % 5}", n, f"a write {n}")
                event = {"type": "question_opened", "question": f"q{n}?"}
                repo.runs.event(RUN, event, f"event {n}")
            writes.append(f"a write {n}")
            events.append(f"event {n}")
            tally.acknowledged += 2
            push_point = pick(PUSH_POINTS, n)
            if n % 2 == 0 or push_point == "push.rebased":  # the remote moves on
                with StateRepo(b) as other:
                    other.set("b.x", n, f"b write {n}")
                    other.push()
                writes.append(f"b write {n}")
                tally.acknowledged += 1
            for agent, action in ((a, "push"), (b, "pull")):
                if tally.kills >= kills:
                    break
                point = push_point if action == "push" else pick(PULL_POINTS, n)
                killed(agent, action, point, seconds)
                tally.kills += 1
                if point:
                    tally.at_points += 1
                else:
                    tally.random += 1
                recover(agent, action, tally)
                if action == "pull":  # B holds the remote's main and run, exactly
                    for ref in ("main", PREFIX + RUN):
                        if git(bare, "rev-parse", ref) != git(b / "state", "rev-parse", ref):
                            tally.unexpected.append(f"pull after {point}: {ref} differs")
                check(agent, tally)
        recover(a, "push", tally)
        recover(b, "pull", tally)
        for where in (bare, b / "state"):
            tally.lost += missing(where, "main", writes) + missing(where, PREFIX + RUN,
                                                                 events)
        check(a, tally)
        check(b, tally)
    finally:
        if daemon is not None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=200, help="kills per transport")
    parser.add_argument("--transport", choices=("path", "daemon", "both"), default="both")
    parser.add_argument("--quick", action="store_true",
                        help="8 kills per transport: each fault point, and 2 at random")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    random.seed(args.seed)
    kills = 8 if args.quick else args.kills
    bad = False
    print("transport  kills  at points  random  acknowledged  lost  verify failures  "
          "remote locks named  seconds")
    for transport in ("path", "daemon") if args.transport == "both" else (args.transport,):
        root = Path(tempfile.mkdtemp(prefix=f"gitstate-remote-kills-{transport}-"))
        start = time.monotonic()
        try:
            t = matrix(transport, kills, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"{transport:<9}  {t.kills:>5}  {t.at_points:>9}  {t.random:>6}  "
              f"{t.acknowledged:>12}  {t.lost:>4}  {t.verify_failures:>15}  "
              f"{t.remote_locks:>18}  {time.monotonic() - start:>7.1f}")
        for problem in t.unexpected[:10]:
            print(f"  unexpected: {problem}")
        bad = bad or bool(t.lost or t.verify_failures or t.unexpected)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
