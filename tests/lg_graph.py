"""A small LangGraph graph with a human approval (an interrupt), run by the checkpointer
tests in separate processes: ``python -m tests.lg_graph AGENT_DIR THREAD start|resume``."""

from __future__ import annotations

import json
import sys
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from gitstate.langgraph import GitCheckpointSaver


class Refund(TypedDict, total=False):
    order: str
    amount_cents: int
    approved: bool
    log: list[str]


def look_up(state: Refund) -> Refund:
    return {"amount_cents": 12000, "log": [*state.get("log", []), "looked up"]}


def ask_human(state: Refund) -> Refund:
    answer = interrupt({"question": f"refund {state['amount_cents']} cents?"})
    return {"approved": answer == "approve", "log": [*state.get("log", []), f"human: {answer}"]}


def pay(state: Refund) -> Refund:
    done = "paid" if state.get("approved") else "not paid"
    return {"log": [*state.get("log", []), done]}


def build(saver: GitCheckpointSaver):  # type: ignore[no-untyped-def]
    graph = StateGraph(Refund)
    graph.add_node("look_up", look_up)
    graph.add_node("ask_human", ask_human)
    graph.add_node("pay", pay)
    graph.add_edge(START, "look_up")
    graph.add_edge("look_up", "ask_human")
    graph.add_edge("ask_human", "pay")
    graph.add_edge("pay", END)
    return graph.compile(checkpointer=saver)


def main() -> None:
    agent, thread, phase = sys.argv[1], sys.argv[2], sys.argv[3]
    with GitCheckpointSaver(agent) as saver:
        app = build(saver)
        config = {"configurable": {"thread_id": thread}}
        if phase == "start":
            out = app.invoke({"order": "O-104", "log": []}, config)
        else:
            out = app.invoke(Command(resume=phase), config)
        print(json.dumps({"result": {k: v for k, v in out.items() if k != "__interrupt__"},
                          "interrupted": "__interrupt__" in out}))


if __name__ == "__main__":
    main()
