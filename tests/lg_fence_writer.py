"""Writers of one LangGraph thread for the fencing tests, each a real process.

``python -m tests.lg_fence_writer AGENT THREAD NAME N PAUSE``: N checkpoints on the
thread, each child of the latest, printing a JSON line per put (``put``, then ``idle``
before pausing PAUSE seconds); a refused put prints ``refused`` with the rule and ends.

``python -m tests.lg_fence_writer AGENT THREAD graph``: the refund graph (tests/lg_graph.py)
driven by lines on stdin (``start``, or a resume answer), one JSON line out per line in.
"""

from __future__ import annotations

import json
import sys
import time

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.types import Command

from gitstate.core.errors import GitStateError
from gitstate.langgraph import GitCheckpointSaver
from tests.lg_graph import build


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def puts(saver: GitCheckpointSaver, thread: str, name: str, n: int, pause: float) -> None:
    conf = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    latest = saver.get_tuple(conf)  # type: ignore[arg-type]
    parent = latest.config["configurable"]["checkpoint_id"] if latest else None
    for i in range(n):
        cp = empty_checkpoint()
        cp["channel_values"] = {"k": f"{name}-{i}"}
        cp["channel_versions"] = {"k": i + 1}
        config = {"configurable": {**conf["configurable"], "checkpoint_id": parent}}
        try:
            stored = saver.put(config, cp, {"source": "loop", "step": i,  # type: ignore[arg-type]
                                            "writer": name}, {"k": i + 1})
        except GitStateError as exc:
            say(refused=exc.rule, i=i, id=cp["id"], message=exc.message)
            return
        parent = stored["configurable"]["checkpoint_id"]
        say(put=i, id=parent)
        if i + 1 < n and pause:
            say(idle=i)
            time.sleep(pause)
    say(done=True)


def graph(saver: GitCheckpointSaver, thread: str) -> None:
    app = build(saver)
    config = {"configurable": {"thread_id": thread}}
    for line in sys.stdin:
        answer = line.strip()
        try:
            out = app.invoke({"order": "O-104", "log": []} if answer == "start"
                             else Command(resume=answer), config)  # type: ignore[arg-type]
        except GitStateError as exc:
            say(refused=exc.rule, message=exc.message)
            continue
        say(log=out.get("log"), interrupted="__interrupt__" in out)


def main() -> None:
    agent, thread = sys.argv[1], sys.argv[2]
    with GitCheckpointSaver(agent) as saver:
        if sys.argv[3] == "graph":
            graph(saver, thread)
        else:
            puts(saver, thread, sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))


if __name__ == "__main__":
    main()
