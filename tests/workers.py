"""Worker processes for the concurrency and crash tests (run as ``python -m tests.workers``)."""

from __future__ import annotations

import sys

from gitstate.api.repo import StateRepo
from gitstate.core.errors import CasMismatch, Refused


def increment(agent_dir: str, count: int, worker: str) -> None:
    """Read-modify-write ``counter`` ``count`` times with compare-and-swap, retrying."""
    retries = 0
    with StateRepo(agent_dir, actor=f"worker-{worker}") as repo:
        done = 0
        while done < count:
            current = repo.state().keys["counter"].value
            assert isinstance(current, int)
            try:
                repo.set("counter", current + 1, f"increment by {worker}", expected=current)
            except CasMismatch:
                retries += 1
                continue
            done += 1
    print(f"retries {retries}", flush=True)


def write_forever(agent_dir: str, start: int) -> None:
    """Set, clear and hand off in a loop, printing each acknowledged write."""
    with StateRepo(agent_dir, actor="crasher") as repo:
        print("ready", flush=True)
        i = start
        while True:
            if i % 7 == 3:
                repo.handoff(f"handoff {i}")
            else:
                repo.set("counter", i, f"write {i}")
                if i % 5 == 0:
                    repo.set(f"extra{i % 3}", i, f"write {i} extra")
            print(i, flush=True)
            i += 1


def fault_write(agent_dir: str, op: str) -> None:
    """One write, run with GITSTATE_TEST_FAULT armed: the process dies mid-write."""
    with StateRepo(agent_dir, actor="faulty") as repo:
        if op == "set":
            repo.set("k", 2, "the write that dies")
        elif op == "clear":
            repo.clear("k", "the clear that dies")
        else:
            repo.handoff("the handoff that dies")
    print("returned", flush=True)


def paused_write(agent_dir: str, namespace: str) -> None:
    """One write of ``namespace`` (main, run, thread, journal), run with GITSTATE_TEST_PAUSE
    armed: the process stops at the point, the test runs maintenance, then lets it go on.
    Prints what the write acknowledged: the ref and the commit it names."""
    import contextlib

    with StateRepo(agent_dir, actor="paused") as repo:
        if namespace == "main":
            repo.set("k", 2, "the paused write")
            ref = "refs/heads/main"
        elif namespace == "run":
            repo.runs.event("r1", {"type": "question_opened", "question": "q2"}, "paused")
            ref = "refs/heads/runs/r1"
        elif namespace == "journal":
            with contextlib.suppress(CasMismatch):  # refused: the journal's record is the write
                repo.set("k", 3, "a stale compare-and-swap", expected=999)
            ref = "refs/gitstate/refusals"
        else:
            from tests.lg_graph import main as graph

            sys.argv = ["lg_graph", agent_dir, "t1", "start"]
            graph()
            ref = ""
        print(ref, repo.store.ref(ref) if ref else "", flush=True)


def pusher(agent_dir: str, rounds: int) -> None:
    """A long-lived pusher: per round a set on main and an event on run r1, then a push;
    prints the round once the push returned."""
    with StateRepo(agent_dir, actor="pusher") as repo:
        for i in range(rounds):
            repo.set("k", i, f"round {i}")
            repo.runs.event("r1", {"type": "question_opened", "question": f"q{i}"}, "ask")
            repo.remote.push()
            print(i, flush=True)


def load_writer(agent_dir: str, seconds: float, worker: str) -> None:
    """CAS increments of ``counter`` until the deadline; prints successes and retries."""
    import time

    done = retries = 0
    latencies = []  # of each acknowledged increment, lock wait included
    deadline = time.monotonic() + seconds
    with StateRepo(agent_dir, actor=f"w{worker}") as repo:
        while time.monotonic() < deadline:
            current = repo.state().keys["counter"].value
            assert isinstance(current, int)
            start = time.perf_counter()
            try:
                repo.set("counter", current + 1, f"increment by {worker}", expected=current)
            except CasMismatch:
                retries += 1
                continue
            latencies.append(time.perf_counter() - start)
            done += 1
            if done % 10 == 0:
                repo.set(f"side.{worker}", done, "side write")
    latencies.sort()
    ms = [latencies[int(len(latencies) * q)] * 1000 for q in (0.5, 0.99)] + [latencies[-1] * 1000]
    print(f"{done} {retries} " + " ".join(f"{v:.1f}" for v in ms), flush=True)


def load_reader(agent_dir: str, seconds: float) -> None:
    """Render in a loop: every section must parse, and the counter must never go back."""
    import re
    import time
    from datetime import UTC, datetime

    from gitstate.wakeup.fastpath import section

    latencies = []
    last = -1
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.perf_counter()
        text, _ = section(agent_dir, locale="en", now=datetime.now(UTC))
        latencies.append(time.perf_counter() - start)
        match = re.search(r"^- counter = (\d+) \(", text, re.MULTILINE)
        assert match is not None, text
        value = int(match.group(1))
        assert value >= last, (value, last)
        last = value
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[int(len(latencies) * 0.99)] * 1000
    print(f"{len(latencies)} {p50:.3f} {p99:.3f} {last}", flush=True)


def gc_loop(agent_dir: str, seconds: float) -> None:
    """Run maintenance again and again (as a separate process) until the deadline."""
    import time

    from gitstate.write.maintenance import run_gc

    runs = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with StateRepo(agent_dir) as repo:
            try:
                run_gc(repo.reader)
            except Refused:  # an automatic run holds the repository: go round again
                time.sleep(0.05)
                continue
        runs += 1
    print(runs, flush=True)


def spender(agent_dir: str, name: str, effects: str) -> None:
    """Per stdin line ``<round> <approval id>``: spend it and, inside the spend only, append
    ``<round> <name> <consume commit>`` to ``effects`` (the tool's side effect); print the
    outcome as one JSON line. One opening of the repository for every round."""
    import json

    from gitstate.approvals.steps import Spend

    with StateRepo(agent_dir, actor=f"gateway-{name}") as repo:
        print("ready", flush=True)
        for line in sys.stdin:
            n, approval = line.split()
            advisory = repo.can_run("refund", {"round": int(n)})
            call: Spend | None = None
            try:
                # the file opens only once the spend was won (left to right)
                with repo.approvals.spend(approval, "refund", {"round": int(n)}) as call, \
                        open(effects, "a", encoding="utf-8") as out:
                    out.write(f"{n} {name} {call.commit}\n")
            except Refused as exc:
                print(json.dumps({"won": False, "rule": exc.rule, "can_run": advisory,
                                  "winner": exc.details.get("winner"),
                                  "message": exc.message}), flush=True)
                continue
            print(json.dumps({"won": True, "commit": call.commit, "can_run": advisory}),
                  flush=True)


if __name__ == "__main__":
    name, *args = sys.argv[1:]
    if name == "increment":
        increment(args[0], int(args[1]), args[2])
    elif name == "write_forever":
        write_forever(args[0], int(args[1]))
    elif name == "fault_write":
        fault_write(args[0], args[1])
    elif name == "paused_write":
        paused_write(args[0], args[1])
    elif name == "pusher":
        pusher(args[0], int(args[1]))
    elif name == "load_writer":
        load_writer(args[0], float(args[1]), args[2])
    elif name == "gc_loop":
        gc_loop(args[0], float(args[1]))
    elif name == "load_reader":
        load_reader(args[0], float(args[1]))
    elif name == "spender":
        spender(args[0], args[1], args[2])
    else:
        raise SystemExit(f"unknown worker {name}")
