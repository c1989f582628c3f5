"""The stdio MCP server's memory over many writes: ``gitstate mcp`` driven by raw JSON-RPC
(initialize, then ``working_state_set`` calls on 20 keys), its RSS read from /proc after
every ``--every`` sets. Shows whether memory grows with the number of writes or levels off.

    python bench/mcp_rss.py [--sets 10000] [--every 1000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp_sessions import rss_mib

from gitstate.api.repo import StateRepo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", type=int, default=10000)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="200 sets (the smoke test)")
    args = parser.parse_args()
    sets, every = (200, 100) if args.quick else (args.sets, args.every)
    root = Path(tempfile.mkdtemp(prefix="gitstate-bench-rss-"))
    agent = root / "agent"
    agent.mkdir()
    (agent / "config.toml").write_text("[gitstate]\nmax_keys = 256\n", encoding="utf-8")
    StateRepo.init(agent).close()
    proc = subprocess.Popen([sys.executable, "-m", "gitstate", "--agent-dir", str(agent),
                             "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            bufsize=1)
    assert proc.stdin is not None and proc.stdout is not None

    def call(message: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        if "id" not in message:
            return {}
        answer: dict[str, Any] = json.loads(proc.stdout.readline())
        return answer

    try:
        call({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}})
        call({"jsonrpc": "2.0", "method": "notifications/initialized"})
        print(f"{'sets':>8}{'RSS MiB':>10}{'seconds':>10}")
        print(f"{0:>8}{rss_mib(proc.pid):>10.1f}{0:>10.1f}")
        start = time.perf_counter()
        for n in range(1, sets + 1):
            answer = call({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                "name": "working_state_set",
                "arguments": {"key": f"k.{n % 20}", "value": n, "reason": "bench"}}})
            if "error" in answer or answer["result"].get("isError"):
                raise SystemExit(f"set {n} failed: {answer}")
            if n % every == 0:
                print(f"{n:>8}{rss_mib(proc.pid):>10.1f}{time.perf_counter() - start:>10.1f}",
                      flush=True)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
