"""Mixed load on one agent with maintenance forced on: an MCP HTTP server with 4 sessions
doing compare-and-swap sets, 2 CLI writers, a LangGraph graph, a run writer (one event every
20 ms), a reader, and maintenance running nearly all the time (``gc_loose_objects = 50``
and a loop of `gitstate gc` beside the automatic runs). At the end: ops, errors by kind,
p50 / p99 per op, lost updates (every acknowledged request id must be in `git log` of its
ref, every finished graph in a fresh checkpointer), `git fsck --strict` and
`gitstate verify`.

    python bench/mixed_load.py                  # 3 minutes
    nice -n 19 python bench/mixed_load.py --seconds 3600    # the soak

Exits 1 when an update was lost, fsck or verify failed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from remote import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
GITSTATE = [sys.executable, "-m", "gitstate"]


class Log:
    """One worker's records, a JSON line each: an acknowledged op or an error's kind."""

    def __init__(self, path: Path) -> None:
        self.out = path.open("a", encoding="utf-8")
        self.guard = threading.Lock()

    def op(self, op: str, start: float, **fields: Any) -> None:
        self.write({"op": op, "ms": round((time.perf_counter() - start) * 1000, 2), **fields})

    def error(self, op: str, kind: str) -> None:
        self.write({"op": op, "error": kind})

    def write(self, record: dict[str, Any]) -> None:
        with self.guard:
            self.out.write(json.dumps(record) + "\n")
            self.out.flush()


def _rule(exc: BaseException) -> str:
    return str(getattr(exc, "rule", None) or type(exc).__name__)


# -- workers (each its own process) ----------------------------------------------------------

def _mcp_post(port: int, body: dict[str, Any], sid: str | None) -> tuple[str | None, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", "/mcp", body=json.dumps(body).encode(),
                     headers={**HEADERS, **({"mcp-session-id": sid} if sid else {})})
        resp = conn.getresponse()
        text = resp.read().decode()
        if resp.status not in (200, 202):
            raise RuntimeError(f"http {resp.status}")
        for line in text.splitlines():  # an SSE stream or plain JSON
            if line.startswith("data:"):
                text = line[5:]
        return resp.getheader("mcp-session-id"), json.loads(text) if text.strip() else None
    finally:
        conn.close()


def _mcp_session(port: int, n: int, deadline: float, log: Log) -> None:
    sid, _ = _mcp_post(port, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "mixed-load", "version": "1"}}}, None)
    _mcp_post(port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    key, value, i = f"mcp.s{n}", None, 0
    while time.time() < deadline:
        i += 1
        rid = f"mcp-{n}-{i}"
        args: dict[str, Any] = {"key": key, "value": i, "reason": "mixed load",
                                "request_id": rid}
        args.update({"expect_absent": True} if value is None else {"expected_value": value})
        start = time.perf_counter()
        try:
            _, reply = _mcp_post(port, {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                                        "params": {"name": "working_state_set",
                                                   "arguments": args}}, sid)
        except (OSError, RuntimeError, ValueError) as exc:
            log.error("mcp_set", type(exc).__name__)
            continue
        result = (reply or {}).get("result", {})
        if result.get("isError") or "result" not in (reply or {}):
            log.error("mcp_set", str((result.get("structuredContent") or {}).get("error")
                                     or (reply or {}).get("error") or "unknown"))
            continue  # the next set compares against the last value acknowledged
        value = i
        log.op("mcp_set", start, ref="refs/heads/main", id=rid)


def mcp(agent: str, deadline: float, log: Log, port: int) -> None:
    threads = [threading.Thread(target=_mcp_session, args=(port, n, deadline, log))
               for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def cli(agent: str, deadline: float, log: Log, name: str) -> None:
    i = 0
    while time.time() < deadline:
        i += 1
        rid = f"{name}-{i}"
        start = time.perf_counter()
        out = subprocess.run([*GITSTATE, "--agent-dir", agent, "set", f"cli.{name}", str(i),
                              "--reason", "mixed load", "--request-id", rid, "--json"],
                             capture_output=True, text=True, check=False)
        if out.returncode == 0:
            log.op("cli_set", start, ref="refs/heads/main", id=rid)
        else:
            try:
                kind = json.loads(out.stderr or out.stdout).get("error", "exit")
            except ValueError:
                kind = f"exit {out.returncode}: {(out.stderr.strip().splitlines() or [''])[-1]}"
            log.error("cli_set", str(kind)[:120])


def graph(agent: str, deadline: float, log: Log) -> None:
    from langgraph.types import Command

    from gitstate.langgraph import GitCheckpointSaver
    from tests.lg_graph import build

    n = 0
    with GitCheckpointSaver(agent) as saver:
        app = build(saver)
        while time.time() < deadline:
            n += 1
            thread = f"g{os.getpid()}-{n}"
            config = {"configurable": {"thread_id": thread}}
            start = time.perf_counter()
            try:
                app.invoke({"order": "O-104", "log": []}, config)
                out = app.invoke(Command(resume="approve"), config)
            except Exception as exc:  # counted by kind, the run goes on
                log.error("graph", _rule(exc))
                continue
            if out.get("log") != ["looked up", "human: approve", "paid"]:
                log.error("graph", "wrong result")
                continue
            log.op("graph", start, thread=thread)


def runs(agent: str, deadline: float, log: Log) -> None:
    from gitstate.api.repo import StateRepo

    n, run_id = 0, ""
    with StateRepo(agent, actor="runner") as repo:
        ledger = repo.runs
        while time.time() < deadline:
            tick = time.perf_counter()
            if n % 200 == 0:
                run_id = f"r{os.getpid()}-{n}"
                try:
                    ledger.start(run_id, description="mixed load", criteria=["events kept"],
                                 reason="start", request_id=f"{run_id}-start")
                except Exception as exc:
                    log.error("run_start", _rule(exc))
                    continue
                log.op("run_start", tick, ref=f"refs/heads/runs/{run_id}", id=f"{run_id}-start")
            n += 1
            rid = f"{run_id}-{n}"
            kind = "question_opened" if n % 2 else "question_answered"
            event = {"type": kind, "question": f"q{n - 1 + n % 2}"}
            if kind == "question_answered":
                event["evidence_ref"] = "mixed"
            start = time.perf_counter()
            try:
                ledger.event(run_id, event, "mixed load", request_id=rid)
            except Exception as exc:
                log.error("run_event", _rule(exc))
            else:
                log.op("run_event", start, ref=f"refs/heads/runs/{run_id}", id=rid)
            time.sleep(max(0.0, 0.02 - (time.perf_counter() - tick)))


def reader(agent: str, deadline: float, log: Log) -> None:
    from datetime import UTC, datetime

    from gitstate.api.repo import StateRepo
    from gitstate.wakeup.fastpath import section

    with StateRepo(agent) as repo:
        while time.time() < deadline:
            start = time.perf_counter()
            try:
                section(agent, locale="en", now=datetime.now(UTC))
                log.op("section", start)
                start = time.perf_counter()
                repo.state()
                log.op("state", start)
            except Exception as exc:
                log.error("read", _rule(exc))
            time.sleep(0.01)


def maintenance(agent: str, deadline: float, log: Log) -> None:
    from gitstate.api.repo import StateRepo
    from gitstate.core.errors import Refused
    from gitstate.write.maintenance import run_gc

    while time.time() < deadline:
        start = time.perf_counter()
        with StateRepo(agent) as repo:
            try:
                run_gc(repo.reader)
            except Refused as exc:  # an automatic run holds the repository
                if exc.rule != "gc.running":
                    log.error("gc", exc.rule)
                else:
                    log.op("gc_busy", start)
                time.sleep(0.05)
                continue
            except Exception as exc:
                log.error("gc", _rule(exc))
                time.sleep(0.5)
                continue
        log.op("gc", start)


WORKERS: dict[str, Callable[..., None]] = {
    "mcp": mcp, "cli1": cli, "cli2": cli, "graph": graph, "runs": runs, "reader": reader,
    "gc": maintenance}


def worker(name: str, agent: str, seconds: float, out: Path, port: int) -> None:
    """One worker for ``seconds`` from the moment its imports are done (a slow start on a
    loaded machine shortens no worker's run)."""
    import gitstate.api.repo  # noqa: F401
    if name == "graph":
        import langgraph.graph  # noqa: F401
    deadline = time.time() + seconds
    log = Log(out / f"{name}.jsonl")
    extra: tuple[Any, ...] = (port,) if name == "mcp" else (name,) if name.startswith(
        "cli") else ()
    WORKERS[name](agent, deadline, log, *extra)


# -- the run and its checks -------------------------------------------------------------------

def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=False)


def lost_updates(agent: Path, records: list[dict[str, Any]]) -> list[str]:
    """Acknowledged request ids missing from `git log` of their ref; finished graphs a
    fresh checkpointer does not find finished."""
    repo = agent / "state"
    by_ref: dict[str, list[str]] = {}
    for r in records:
        if "id" in r:
            by_ref.setdefault(r["ref"], []).append(r["id"])
    lost = []
    for ref, ids in by_ref.items():
        out = _git(repo, "log", "--format=%B", ref)
        if out.returncode != 0:
            lost += [f"{ref}: git log failed: {out.stderr.strip()[:200]}"]
            continue
        text = out.stdout
        lost += [f"{ref} {i}" for i in ids if f'"{i}"' not in text]  # Gitstate-Request
    from gitstate.langgraph import GitCheckpointSaver

    with GitCheckpointSaver(agent) as saver:
        for r in records:
            if "thread" in r:
                got = saver.get_tuple({"configurable": {"thread_id": r["thread"]}})
                if got is None or got.checkpoint["channel_values"].get("log", [])[-1:] != \
                        ["paid"]:
                    lost.append(f"graph {r['thread']}")
    return lost


def report(records: list[dict[str, Any]], seconds: float) -> None:
    ops: dict[str, list[float]] = {}
    errors: Counter[str] = Counter()
    for r in records:
        if "error" in r:
            errors[f"{r['op']}: {r['error']}"] += 1
        else:
            ops.setdefault(r["op"], []).append(r["ms"])
    print(f"{'op':<12} {'count':>7} {'per s':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for op, ms in sorted(ops.items()):
        ms.sort()
        print(f"{op:<12} {len(ms):>7} {len(ms) / seconds:>7.1f} {ms[len(ms) // 2]:>8.1f} "
              f"{ms[int(len(ms) * 0.99)]:>8.1f} {ms[-1]:>8.1f}")
    print("errors by kind:" + ("" if errors else " none"))
    for kind, count in errors.most_common():
        print(f"  {count:>6}  {kind}")


def run(seconds: float, keep: Path | None) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        base = keep or Path(tmp)
        agent, out = base / "agent", base / "records"
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([*GITSTATE, "--agent-dir", str(agent), "init"], check=True,
                       capture_output=True)
        (agent / "config.toml").write_text("[gitstate]\ngc_loose_objects = 50\n")
        port = free_port()
        server = subprocess.Popen([*GITSTATE, "--agent-dir", str(agent), "mcp", "--http",
                                   "--port", str(port)], stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        try:
            wait_for_port(port, "the MCP HTTP server", 60)
            procs = [subprocess.Popen([sys.executable, __file__, "--worker", name, "--agent",
                                       str(agent), "--seconds", str(seconds), "--out",
                                       str(out), "--port", str(port)], cwd=ROOT)
                     for name in WORKERS]
            for p in procs:
                p.wait()
        finally:
            server.terminate()
            server.wait(timeout=30)
        from gitstate.write.maintenance import wait_idle

        wait_idle(agent / "state" / ".git")
        records = [json.loads(line) for f in sorted(out.glob("*.jsonl"))
                   for line in f.read_text().splitlines()]
        print(f"mixed load: {seconds:.0f} s on one agent ({os.cpu_count()} cores), "
              "maintenance forced on (gc_loose_objects = 50, a gc loop)")
        report(records, seconds)
        lost = lost_updates(agent, records)
        acked = sum(1 for r in records if "id" in r or "thread" in r)
        print(f"acknowledged: {acked}; lost updates: {len(lost)}")
        for line in lost[:20]:
            print(f"  lost: {line}")
        fsck = _git(agent / "state", "fsck", "--strict")
        print("git fsck --strict: " + ("clean" if fsck.returncode == 0 else
                                      f"FAILED\n{(fsck.stdout + fsck.stderr)[-2000:]}"))
        verify = subprocess.run([*GITSTATE, "--agent-dir", str(agent), "verify"],
                                capture_output=True, text=True, check=False)
        print("gitstate verify: " + ("ok" if verify.returncode == 0 else
                                    f"FAILED\n{(verify.stdout + verify.stderr)[-2000:]}"))
        return 1 if lost or fsck.returncode or verify.returncode else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--quick", action="store_true", help="A 4-second run (the suite's).")
    parser.add_argument("--keep", type=Path, help="Run in this directory and keep it.")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--agent", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        sys.path.insert(0, str(ROOT))
        worker(args.worker, args.agent, args.seconds, args.out, args.port)
        return
    sys.exit(run(4.0 if args.quick else args.seconds, args.keep))


if __name__ == "__main__":
    main()
