"""MCP Inspector's load test (``--load``) against gitstate's server, over stdio and over
Streamable HTTP side by side: latency p50 / p99 and throughput of working_state_get and
working_state_set at 8 calls in flight.

    python bench/mcp_load.py            # 300 requests each, 8 concurrent
    python bench/mcp_load.py --quick    # smoke run (4 requests)

Needs tests/js installed (``npm ci`` in tests/js; the test suite does it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gitstate.api.repo import StateRepo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from remote import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
INSPECTOR = ROOT / "tests" / "js" / "node_modules" / ".bin" / "mcp-inspector"
CALLS = {
    "working_state_get": [],
    "working_state_set": ["--tool-arg", "key=load.counter", "--tool-arg", "value=1",
                          "--tool-arg", "reason=load test"],
}


def load(target: list[str], tool: str, requests: int, concurrency: int) -> dict[str, object]:
    out = subprocess.run([str(INSPECTOR), "--cli", *target, "--method", "tools/call",
                          "--tool-name", tool, *CALLS[tool], "--load", "--load-concurrency",
                          str(concurrency), "--load-requests", str(requests), "--format",
                          "json"], capture_output=True, text=True, timeout=900, check=False)
    if out.returncode not in (0, 5):
        raise SystemExit(f"inspector failed ({out.returncode}): {out.stderr[-1000:]}")
    result: dict[str, object] = json.loads(out.stdout)["result"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    requests = 4 if args.quick else args.requests
    if not INSPECTOR.exists():
        raise SystemExit("tests/js is not installed: run `npm ci` in tests/js")
    with tempfile.TemporaryDirectory() as tmp:
        agent = Path(tmp) / "agent"
        with StateRepo.init(agent) as repo:
            repo.set("stop_loss.2317", 262, "the rule")
            for i in range(20):
                repo.set(f"k{i:02d}", i, f"filler {i}")
        stdio = [sys.executable, "-m", "gitstate", "--agent-dir", str(agent), "mcp"]
        port = free_port()
        server = subprocess.Popen([*stdio, "--http", "--port", str(port)],
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_for_port(port, "the HTTP server", 30)
            http = [f"http://127.0.0.1:{port}/mcp"]
            print(f"MCP Inspector --load: {requests} requests, {args.concurrency} in flight, "
                  f"a 21-key state ({os.cpu_count()} cores)")
            print(f"{'tool':<20} {'transport':<10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
                  f"{'calls/s':>8} {'errors':>7}")
            for tool in CALLS:
                rows = {}
                for name, target in (("stdio", stdio), ("http", http)):
                    r = load(target, tool, requests, args.concurrency)
                    lat = r["latencyMs"]
                    assert isinstance(lat, dict)
                    rows[name] = lat
                    failed = int(str(r["errors"])) + int(str(r["toolErrors"]))
                    print(f"{tool:<20} {name:<10} {lat['p50']:>8.2f} {lat['p99']:>8.2f} "
                          f"{lat['max']:>8.2f} {r['throughput']:>8.1f} {failed:>7}")
                p50 = rows["http"]["p50"] / rows["stdio"]["p50"]
                p99 = rows["http"]["p99"] / rows["stdio"]["p99"]
                print(f"{'':<20} {'http/stdio':<10} {p50:>7.2f}x {p99:>7.2f}x")
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
