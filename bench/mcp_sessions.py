"""Memory of ``gitstate mcp --http`` at its session cap: the server's RSS after start, after
one session, and with --max-sessions sessions open (each initialized, notified and having
listed the tools), then the refusal of one more.

    python bench/mcp_sessions.py                    # the default cap (64)
    python bench/mcp_sessions.py --max-sessions 200
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from gitstate.api.repo import StateRepo
from gitstate.mcp.http import MAX_SESSIONS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from remote import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"}}})


def post(port: int, body: str, session: str | None = None) -> tuple[int, str | None, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/mcp", body=body.encode(), headers={
            **HEADERS, **({"mcp-session-id": session} if session else {})})
        resp = conn.getresponse()
        return resp.status, resp.getheader("mcp-session-id"), resp.read().decode()
    finally:
        conn.close()


def session(port: int) -> str:
    status, sid, text = post(port, INIT)
    assert status == 200 and sid, (status, text)
    post(port, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), sid)
    assert post(port, json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
                sid)[0] == 200
    return sid


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit("no VmRSS")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-sessions", type=int, default=MAX_SESSIONS)
    cap = parser.parse_args().max_sessions
    with tempfile.TemporaryDirectory() as tmp:
        with StateRepo.init(Path(tmp) / "agent") as repo:
            for i in range(21):
                repo.set(f"k.{i}", i, "bench")
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "gitstate", "--agent-dir",
                                 str(Path(tmp) / "agent"), "mcp", "--http", "--port",
                                 str(port), "--max-sessions", str(cap)], cwd=ROOT,
                                stderr=subprocess.DEVNULL)
        try:
            wait_for_port(port, "the server", 60)
            base = rss_mib(proc.pid)
            session(port)
            one = rss_mib(proc.pid)
            for _ in range(cap - 1):
                session(port)
            full = rss_mib(proc.pid)
            refused = post(port, INIT)[0]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    per = (full - one) / max(cap - 1, 1) * 1024
    print(json.dumps({"max_sessions": cap, "rss_started_mib": round(base, 1),
                      "rss_one_session_mib": round(one, 1),
                      "rss_at_cap_mib": round(full, 1), "kib_per_session": round(per),
                      "one_more": refused}))


if __name__ == "__main__":
    main()
