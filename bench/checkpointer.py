"""GitCheckpointSaver beside LangGraph's SqliteSaver on the same graph.

    python bench/checkpointer.py               # 300 super-steps per saver
    python bench/checkpointer.py --quick       # a smoke run for CI

The graph loops one node: each super-step changes a counter and appends to a short log,
while a 4 KB policy channel never changes (what an unchanged channel costs). Both savers
get the same run; their ``put`` and ``get_tuple`` are timed per call (medians), then the
disk use after each one's compaction (``gitstate gc`` / sqlite VACUUM). SQLite runs with
its defaults (rollback journal, synchronous=FULL: an fsync per commit), gitstate with its
durability default.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from gitstate.langgraph import GitCheckpointSaver


class Loop(TypedDict):
    count: int
    log: list[str]
    policy: dict[str, str]
    limit: int


def step(state: Loop) -> dict[str, Any]:
    return {"count": state["count"] + 1, "log": [*state["log"][-9:], f"step {state['count']}"]}


def route(state: Loop) -> str:
    return "step" if state["count"] < state["limit"] else END


def timed(saver: Any) -> dict[str, list[float]]:
    """Wrap the saver's put and get_tuple with timers (the graph calls them)."""
    samples: dict[str, list[float]] = {"put": [], "get_tuple": []}
    for name in samples:
        inner = getattr(saver, name)

        def wrapper(*args: Any, _inner: Any = inner, _name: str = name, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return _inner(*args, **kw)
            finally:
                samples[_name].append(time.perf_counter() - start)

        setattr(saver, name, wrapper)
    return samples


def run(saver: Any, steps: int) -> tuple[dict[str, list[float]], float]:
    samples = timed(saver)
    graph = StateGraph(Loop)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", route)
    app = graph.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}
    start = time.perf_counter()
    app.invoke({"count": 0, "log": [], "policy": {f"rule-{i}": "x" * 60 for i in range(64)},
                "limit": steps}, config)
    took = time.perf_counter() - start
    for _ in range(50):  # reads as a resuming process makes them
        saver.get_tuple({"configurable": {"thread_id": "bench"}})
    return samples, took


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    steps = 20 if args.quick else args.steps
    root = Path(tempfile.mkdtemp(prefix="gitstate-bench-"))
    try:
        rows = {}
        git_saver = GitCheckpointSaver(root / "agent")
        rows["gitstate"] = run(git_saver, steps)
        git_saver.repo.store.gc(prune_hours=0)
        git_bytes = du(root / "agent" / "state" / ".git")
        git_saver.close()
        conn = sqlite3.connect(root / "lg.sqlite", check_same_thread=False)
        rows["sqlite"] = run(SqliteSaver(conn), steps)
        conn.execute("VACUUM")
        conn.close()
        sqlite_bytes = (root / "lg.sqlite").stat().st_size
        print(f"{steps} super-steps, one thread (medians, ms per call)")
        print(f"  {'saver':<26}{'put':>8}{'get_tuple':>11}{'ms/step':>10}{'disk after gc':>15}")
        for name, size in (("gitstate", git_bytes), ("sqlite", sqlite_bytes)):
            samples, took = rows[name]
            print(f"  {name:<26}{statistics.median(samples['put']) * 1000:>8.2f}"
                  f"{statistics.median(samples['get_tuple']) * 1000:>11.2f}"
                  f"{took / steps * 1000:>10.2f}{size / 1024:>12.0f} kB")
        g, s = rows["gitstate"][0], rows["sqlite"][0]
        print(f"  ratio gitstate / sqlite: put "
              f"{statistics.median(g['put']) / statistics.median(s['put']):.2f}x, get_tuple "
              f"{statistics.median(g['get_tuple']) / statistics.median(s['get_tuple']):.2f}x, "
              f"disk {git_bytes / sqlite_bytes:.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
