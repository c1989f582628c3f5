"""GitCheckpointSaver beside LangGraph's own savers, interleaved in one run.

    python bench/checkpointer.py               # the full scenarios (a few minutes)
    python bench/checkpointer.py --quick       # a smoke run for CI

Savers: GitCheckpointSaver (the repository's durability mode), SqliteSaver (its setup()
leaves WAL with synchronous=FULL: one fdatasync per transaction), PostgresSaver when
langgraph-checkpoint-postgres is installed and a PostgreSQL server binary is found (a
throwaway cluster under /tmp, fsync and synchronous_commit on, over a Unix socket), and
InMemorySaver as the baseline. Every scenario runs each saver in turn, step by step (or
thread by thread), so that the machine's load falls on all of them alike. Graphs run with
durability="sync". Printed: medians, and each saver's ratio to SqliteSaver.

Scenarios: a 3-node graph (ms per super-step); a chat graph (add_messages, one ~400-byte
message a step) timed around step 10, 100 and 1,000; 100 threads x 50 steps of a one-node
loop; ``list(None, limit=10)`` across those 100 threads; the disk one chat thread takes
at 100 and at 1,000 steps (no manual command: gitstate's own maintenance, waited for),
and its growth between the two.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gitstate.langgraph import GitCheckpointSaver
from gitstate.write import maintenance


class Three(TypedDict):
    n: int
    trail: list[str]


def _node(name: str) -> Callable[[Three], dict[str, Any]]:
    def run(state: Three) -> dict[str, Any]:
        return {"n": state["n"] + 1, "trail": [*state["trail"][-5:], name]}
    return run


def three_node(saver: Any) -> Any:
    graph = StateGraph(Three)
    for name in ("plan", "act", "check"):
        graph.add_node(name, _node(name))
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "act")
    graph.add_edge("act", "check")
    graph.add_edge("check", END)
    return graph.compile(checkpointer=saver)


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int


def chat(saver: Any) -> Any:
    graph = StateGraph(Chat)
    graph.add_node("bot", lambda s: {"turns": s.get("turns", 0) + 1})
    graph.add_edge(START, "bot")
    graph.add_edge("bot", END)
    return graph.compile(checkpointer=saver)


class Loop(TypedDict):
    count: int
    limit: int


def loop(saver: Any) -> Any:
    graph = StateGraph(Loop)
    graph.add_node("step", lambda s: {"count": s["count"] + 1})
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", lambda s: "step" if s["count"] < s["limit"] else END)
    return graph.compile(checkpointer=saver)


WORDS = ["refund", "order", "customer", "ledger", "approve", "check", "amount", "policy",
         "window", "tool", "call", "reply", "thread", "summary", "status", "pending",
         "invoice", "credit", "card", "merchant", "account"]


def message(rng: random.Random, i: int) -> HumanMessage:
    return HumanMessage(content=f"turn {i}: " + " ".join(rng.choice(WORDS)
                                                          for _ in range(60))[:400])


# -- the savers ----------------------------------------------------------------------------

class Pg:
    """A throwaway PostgreSQL cluster under /tmp (as the postgres user when run as root)."""

    def __init__(self, root: Path) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not bins:
            raise RuntimeError("no PostgreSQL server binaries")
        self.bin = Path(bins[-1]).parent
        self.dir = Path(tempfile.mkdtemp(prefix="gitstate-bench-pg-", dir=root.parent))
        self.dir.chmod(0o755)
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres")
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "log"), "-w",
                  "-o", f"-k {self.dir} -p 55439 -c listen_addresses='' -c fsync=on "
                  "-c synchronous_commit=on", "start")
        self.url = f"postgresql://postgres@/postgres?host={self.dir}&port=55439"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_user, str(self.bin / tool), *args], check=True,
                       capture_output=True, cwd="/tmp")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


class Savers:
    """One fresh saver of each kind per scenario, and their disk use."""

    def __init__(self, root: Path, postgres: bool) -> None:
        self.root = root
        self.pg: Pg | None = None
        if postgres:
            try:
                import langgraph.checkpoint.postgres  # noqa: F401
                import psycopg  # noqa: F401

                self.pg = Pg(root)
            except (ImportError, RuntimeError, subprocess.CalledProcessError, KeyError) as exc:
                print(f"(PostgresSaver left out: {exc})")
        self._closers: list[Callable[[], None]] = []
        self._made = 0

    def make_mode(self) -> str:
        probe = GitCheckpointSaver(self.root / "probe")
        try:
            return probe.repo.durability
        finally:
            probe.close()

    def make(self) -> dict[str, Any]:
        self._made += 1
        out: dict[str, Any] = {}
        git = GitCheckpointSaver(self.root / f"git-{self._made}")
        self._closers.append(git.close)
        out["gitstate"] = git
        conn = sqlite3.connect(self.root / f"lg-{self._made}.sqlite", check_same_thread=False)
        sqlite = SqliteSaver(conn)
        sqlite.setup()
        self._closers.append(conn.close)
        out["sqlite"] = sqlite
        if self.pg is not None:
            import psycopg
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.rows import dict_row

            db = f"bench{self._made}"
            with psycopg.connect(self.pg.url, autocommit=True) as admin:
                admin.execute(f"CREATE DATABASE {db}")
            pconn = psycopg.connect(self.pg.url.replace("/postgres?", f"/{db}?"),
                                    autocommit=True, prepare_threshold=0, row_factory=dict_row)
            pg = PostgresSaver(pconn)  # type: ignore[arg-type]
            pg.setup()
            self._closers.append(pconn.close)
            out["postgres"] = pg
        out["memory"] = InMemorySaver()
        return out

    def disk(self, name: str, saver: Any) -> int | None:
        if name == "gitstate":
            git_dir = saver.store.git_dir
            maintenance.wait_idle(git_dir, timeout=600)  # the saver's own, never typed
            return du(git_dir)
        if name == "sqlite":
            path = Path(saver.conn.execute("PRAGMA database_list").fetchone()[2])
            return sum(p.stat().st_size for p in (path, Path(f"{path}-wal"))
                       if p.exists())
        if name == "postgres":
            with saver.conn.cursor() as cur:
                cur.execute("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS n "
                            "FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace "
                            "WHERE s.nspname = 'public' AND c.relkind = 'r'")  # its tables
                return int(cur.fetchone()["n"])
        return None

    def close(self) -> None:
        for close in self._closers:
            with contextlib.suppress(Exception):
                close()
        if self.pg is not None:
            self.pg.stop()


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@contextlib.contextmanager
def clock(into: list[float]) -> Iterator[None]:
    start = time.perf_counter()
    yield
    into.append(time.perf_counter() - start)


def ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


# -- the scenarios -----------------------------------------------------------------------

def three_node_scenario(savers: dict[str, Any], runs: int) -> dict[str, float]:
    apps = {name: three_node(s) for name, s in savers.items()}
    times: dict[str, list[float]] = {name: [] for name in apps}
    for i in range(runs):
        for name, app in apps.items():
            with clock(times[name]):
                app.invoke({"n": 0, "trail": []}, {"configurable": {"thread_id": f"t{i}"}},
                           durability="sync")
    return {name: ms(t) / 3 for name, t in times.items()}  # three super-steps a run


def chat_scenario(savers: dict[str, Any], steps: int, marks: list[int], pool: Savers
                  ) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, int | None]]]:
    apps = {name: chat(s) for name, s in savers.items()}
    rng = random.Random(7)
    times: dict[str, dict[int, float]] = {name: {} for name in apps}
    disk: dict[str, dict[int, int | None]] = {name: {} for name in apps}
    config = {"configurable": {"thread_id": "chat"}}
    for step in range(1, steps + 1):
        msg = message(rng, step)
        for name, app in apps.items():
            start = time.perf_counter()
            app.invoke({"messages": [msg]}, config, durability="sync")
            times[name][step] = time.perf_counter() - start
        if step in (100, steps):
            for name, saver in savers.items():
                disk[name][step] = pool.disk(name, saver)
    around = {}
    for name, by_step in times.items():
        around[name] = {m: ms([by_step[s] for s in range(max(1, m - 5), min(steps, m + 5) + 1)])
                        for m in marks}
    return around, disk


def threads_scenario(savers: dict[str, Any], threads: int, steps: int
                     ) -> tuple[dict[str, tuple[float, float, float]], dict[str, float]]:
    apps = {name: loop(s) for name, s in savers.items()}
    per_thread: dict[str, list[float]] = {name: [] for name in apps}
    for t in range(threads):
        for name, app in apps.items():
            with clock(per_thread[name]):
                app.invoke({"count": 0, "limit": steps},
                           {"configurable": {"thread_id": f"thread-{t}"},
                            "recursion_limit": steps + 10}, durability="sync")
    tenth = max(1, threads // 10)
    out = {name: (ms(v) / steps, ms(v[:tenth]) / steps, ms(v[-tenth:]) / steps)
           for name, v in per_thread.items()}
    lists: dict[str, list[float]] = {name: [] for name in savers}
    for _ in range(20):
        for name, saver in savers.items():
            with clock(lists[name]):
                got = list(saver.list(None, limit=10))
            assert len(got) == 10, (name, len(got))
    return out, {name: ms(v) for name, v in lists.items()}


def row(label: str, values: dict[str, float], unit: str = "ms") -> None:
    base = values.get("sqlite")
    cells = []
    for name, v in values.items():
        ratio = f" ({v / base:.2f}x)" if base and name != "sqlite" else ""
        cells.append(f"{name} {v:.2f} {unit}{ratio}")
    print(f"  {label:<34}" + "   ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--chat-steps", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--thread-steps", type=int, default=50)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--chat-only", action="store_true",
                        help="the chat graph and its disk only")
    parser.add_argument("--dir", help="where every saver's files go (another file system)")
    args = parser.parse_args()
    if args.quick:
        args.chat_steps, args.threads, args.thread_steps, args.runs = 101, 10, 3, 8
    marks = [m for m in (10, 100, 1000) if m <= args.chat_steps]
    root = Path(tempfile.mkdtemp(prefix="gitstate-bench-", dir=args.dir))
    pool = Savers(root, postgres=not args.no_postgres and not args.quick)
    try:
        from gitstate.store.durability import describe

        print(f"{describe(root)}; gitstate's durability {pool.make_mode()}; medians; ratios "
              "to SqliteSaver (WAL, synchronous=FULL); durability='sync'")
        if not args.chat_only:
            row("3-node graph, per super-step", three_node_scenario(pool.make(), args.runs))
        around, disk = chat_scenario(pool.make(), args.chat_steps, marks, pool)
        for m in marks:
            row(f"chat graph, step {m}", {n: v[m] for n, v in around.items()})
        last = marks[-1]
        flat = {n: (v[last] - around["memory"][last] + around["memory"][marks[0]]) / v[marks[0]]
                for n, v in around.items() if n != "memory"}
        print("  chat: step {} / step {} after subtracting InMemorySaver's growth: {}".format(
            last, marks[0], ", ".join(f"{n} {f:.2f}" for n, f in flat.items())))
        if not args.chat_only:
            steps, lists = threads_scenario(pool.make(), args.threads, args.thread_steps)
            row(f"{args.threads} threads x {args.thread_steps} steps, per step",
                {n: v[0] for n, v in steps.items()})
            print("    first / last tenth of the threads: " + ", ".join(
                f"{n} {v[1]:.2f} -> {v[2]:.2f} ms" for n, v in steps.items()))
            row(f"list(None, limit=10), {args.threads} threads", lists)
            if "postgres" in lists:
                print(f"    gitstate / postgres: {lists['gitstate'] / lists['postgres']:.2f}x")
        for step in sorted({s for d in disk.values() for s in d}):
            sizes = {n: d[step] / 1e6 for n, d in disk.items() if d.get(step) is not None}
            row(f"disk, chat thread of {step} steps", sizes, "MB")  # type: ignore[arg-type]
        if 100 in disk["gitstate"] and args.chat_steps > 100:
            print("  growth 100 -> {} steps: {}".format(args.chat_steps, ", ".join(
                f"{n} {d[args.chat_steps] / d[100]:.1f}x" for n, d in disk.items()
                if d.get(100))))
    finally:
        pool.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
