"""A writer of one namespace, in a loop (``python -m tests.ns_workers AGENT NS TAG START
[PAUSE]``): main (a set), a run (an event on run TAG), a LangGraph thread (a checkpoint on
thread TAG) or the refusal journal (one record). After each acknowledged write it prints
``<n> <token>``, the token being what that write leaves in the message of a commit on
:func:`ref_of`'s ref; a failed write prints ``ERROR <kind>: <message>`` and exits 1.

With PAUSE (a point of gitstate.faults, e.g. ``ref.locked``) the first write stops at that
point, prints ``paused`` and goes on once a line arrives on stdin: a live writer of that
namespace holding its kernel lock and its ``<ref>.lock``. Used by tests/test_recovery.py and
bench/kill_matrix.py.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

NAMESPACES = ("main", "run", "thread", "journal")


def ref_of(ns: str, tag: str) -> list[str]:
    """The refs whose history holds the tokens of writer ``tag`` of ``ns``."""
    if ns == "main":
        return ["refs/heads/main"]
    if ns == "run":
        return [f"refs/heads/runs/{tag}"]
    if ns == "thread":
        return [f"refs/gitstate/threads/{tag}/%/checkpoints"]
    return ["refs/gitstate/refusals", "refs/gitstate/refusals-previous"]


def _pause_at(point: str) -> None:
    from gitstate import faults

    armed = [True]
    real = faults.hit

    def hit(name: str) -> None:
        if name == point and armed[0]:
            armed[0] = False
            print("paused", flush=True)
            sys.stdin.readline()
        real(name)

    setattr(faults, "hit", hit)  # noqa: B010  # the writer's own calls go through it


def _writer(agent: str, ns: str, tag: str) -> tuple[Callable[[int], str], Any]:
    """A function doing write ``n`` and returning its token, and what to close."""
    from gitstate.repo import StateRepo

    if ns == "thread":
        from langgraph.checkpoint.base import empty_checkpoint

        from gitstate.langgraph import GitCheckpointSaver

        saver = GitCheckpointSaver(agent)
        parent: list[str] = []

        def put(n: int) -> str:
            cp = empty_checkpoint()
            cp["channel_values"] = {"k": f"{tag}-{n}"}
            cp["channel_versions"] = {"k": n}
            conf: dict[str, Any] = {"configurable": {"thread_id": tag, "checkpoint_ns": ""}}
            if parent:
                conf["configurable"]["checkpoint_id"] = parent[0]
            stored = saver.put(conf, cp, {"source": "loop", "step": n}, {"k": n})  # type: ignore[arg-type]
            parent[:] = [stored["configurable"]["checkpoint_id"]]
            return parent[0]

        return put, saver
    repo = StateRepo(agent, actor=f"ns-{tag}")
    if ns == "main":
        def set_key(n: int) -> str:
            repo.set(f"k-{tag}", n, f"{tag} {n}")
            return f"{tag} {n}"

        return set_key, repo
    if ns == "run":
        if repo.store.ref(f"refs/heads/runs/{tag}") is None:
            repo.runs.start(tag, description="a run beside kills", criteria=["none lost"],
                            reason=f"{tag} start")

        def event(n: int) -> str:
            repo.runs.event(tag, {"type": "tool_result_recorded", "tool_call_id": f"c{n}",
                                  "evidence_ref": f"e:{n}",
                                  "observed_at": "2026-12-01T00:00:00Z"}, f"{tag} {n}")
            return f"{tag} {n}"

        return event, repo
    from gitstate import refusals
    from gitstate.engine import identity

    def record(n: int) -> str:
        commit = refusals.record(repo.store, identity(repo.config), rule="kill.matrix",
                                 op="set", key=f"k-{tag}", reason=f"{tag} {n}",
                                 message=f"record {tag} {n}", request_id=f"{tag}-{n}")
        if commit is None:
            raise RuntimeError("the refusal could not be recorded")
        return f"{tag}-{n}"

    return record, repo


def main(agent: str, ns: str, tag: str, start: int, pause: str | None) -> None:
    write, closing = _writer(agent, ns, tag)
    if pause:
        _pause_at(pause)
    print("ready", flush=True)
    n = start
    try:
        while True:
            try:
                token = write(n)
            except Exception as exc:  # a live write must never fail: report it and stop
                print(f"ERROR {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
                raise SystemExit(1) from exc
            print(f"{n} {token}", flush=True)
            n += 1
            if pause:
                return  # a paused writer writes once
    finally:
        closing.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], args[1], args[2], int(args[3]), args[4] if len(args) > 4 else None)
