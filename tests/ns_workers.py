"""A writer of one namespace, in a loop: ``python -m tests.ns_workers AGENT NS TAG START
[--pause POINT] [--interval SECONDS]``. NS is one of :data:`NAMESPACES`: main (a set of key
``k-TAG``), a run (an event on run ``TAG-<n // RUN_EVENTS>``, started when new), a LangGraph
thread (a checkpoint on thread TAG) or the refusal journal (one record).

It prints ``ready`` once open, then ``<n> <ref> <token>`` after each acknowledged write:
the token is what that write leaves in the message of a commit reachable from ``<ref>`` (for
the journal, from it or its previous generation: :func:`refs_to_search`). A failed write
prints ``ERROR <kind>: <message>`` and exits 1: a live writer never fails. SIGTERM ends
the loop after the write in flight.

With ``--pause POINT`` (a point of gitstate.system.faults, e.g. ``ref.locked``) the first write
stops there, prints ``paused`` and goes on once a line arrives on stdin, then the process
exits: a writer of that namespace alive inside its write, its kernel lock and its
``<ref>.lock`` held. Used by tests/store/test_recovery.py and bench/kill_matrix.py; a new kind
of writer (a push, a pull) is one more branch of :func:`_writer`.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from typing import Any

NAMESPACES = ("main", "run", "thread", "journal")
RUN_EVENTS = 500  # events per run: a run's state grows with each, so runs roll over
JOURNAL_REFS = ("refs/gitstate/refusals", "refs/gitstate/refusals-previous")

Write = Callable[[int], tuple[str, str]]  # n -> (ref, token)


def refs_to_search(ref: str) -> tuple[str, ...]:
    """The refs whose history holds a token printed with ``ref``."""
    return JOURNAL_REFS if ref in JOURNAL_REFS else (ref,)


def _pause_at(point: str) -> None:
    from gitstate.system import faults

    armed = [True]
    real = faults.hit

    def hit(name: str) -> None:
        if name == point and armed[0]:
            armed[0] = False
            print("paused", flush=True)
            sys.stdin.readline()
        real(name)

    setattr(faults, "hit", hit)  # noqa: B010  # the writer's own calls go through it


def _thread_writer(agent: str, tag: str) -> tuple[Write, Any]:
    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.langgraph import GitCheckpointSaver

    saver = GitCheckpointSaver(agent)
    ref = f"refs/gitstate/threads/{tag}/%/checkpoints"
    latest = saver.get_tuple({"configurable": {"thread_id": tag, "checkpoint_ns": ""}})
    parent = [latest.config["configurable"]["checkpoint_id"]] if latest else []

    def put(n: int) -> tuple[str, str]:
        cp = empty_checkpoint()
        cp["channel_values"] = {"k": f"{tag}-{n}"}
        cp["channel_versions"] = {"k": n}
        conf: dict[str, Any] = {"configurable": {"thread_id": tag, "checkpoint_ns": ""}}
        if parent:
            conf["configurable"]["checkpoint_id"] = parent[0]
        stored = saver.put(conf, cp, {"source": "loop", "step": n}, {"k": n})  # type: ignore[arg-type]
        parent[:] = [stored["configurable"]["checkpoint_id"]]
        return ref, parent[0]

    return put, saver


def _writer(agent: str, ns: str, tag: str) -> tuple[Write, Any]:
    """A function doing write ``n``, and what to close at the end."""
    from gitstate.api.repo import StateRepo

    if ns == "thread":
        return _thread_writer(agent, tag)
    repo = StateRepo(agent, actor=f"ns-{tag}")
    if ns == "main":
        def set_key(n: int) -> tuple[str, str]:
            repo.set(f"k-{tag}", n, f"{tag} {n}")
            return "refs/heads/main", f"{tag} {n}"

        return set_key, repo
    if ns == "run":
        def event(n: int) -> tuple[str, str]:
            run = f"{tag}-{n // RUN_EVENTS}"
            if repo.store.ref(f"refs/heads/runs/{run}") is None:
                repo.runs.start(run, description="a run beside kills",
                                criteria=["none lost"], reason=f"{tag} start {n}",
                                request_id=f"{run}-start")
            repo.runs.event(run, {"type": "tool_result_recorded", "tool_call_id": f"c{n}",
                                  "evidence_ref": "e:1", "observed_at": "2026-12-01T00:00:00Z"},
                            f"{tag} {n}", request_id=f"{run}-{n}")
            return f"refs/heads/runs/{run}", f"{tag} {n}"

        return event, repo
    if ns != "journal":
        raise SystemExit(f"unknown namespace {ns}")
    from gitstate.history import refusals
    from gitstate.write.engine import identity

    def record(n: int) -> tuple[str, str]:
        commit = refusals.record(repo.store, identity(repo.config), rule="kill.matrix",
                                 op="set", key=f"k-{tag}", reason=f"{tag} {n}",
                                 message=f"record {tag} {n}", request_id=f"{tag}-{n}")
        if commit is None:
            raise RuntimeError("the refusal could not be recorded")
        return JOURNAL_REFS[0], f"{tag}-{n}"

    return record, repo


def main(argv: list[str]) -> None:
    agent, ns, tag, start = argv[0], argv[1], argv[2], int(argv[3])
    options = dict(zip(argv[4::2], argv[5::2], strict=True))
    pause, interval = options.get("--pause"), float(options.get("--interval", "0"))
    stopped: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    write, closing = _writer(agent, ns, tag)
    if pause:
        _pause_at(pause)
    print("ready", flush=True)
    n = start
    try:
        while not stopped:
            try:
                ref, token = write(n)
            except Exception as exc:  # a live write must never fail: report it and stop
                print(f"ERROR {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
                raise SystemExit(1) from exc
            print(f"{n} {ref} {token}", flush=True)
            n += 1
            if pause:
                return  # a paused writer writes once
            if interval:
                time.sleep(interval)
    finally:
        closing.close()


if __name__ == "__main__":
    main(sys.argv[1:])
