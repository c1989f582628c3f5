"""working_state_set through a connected MCP client (stdio) next to the same set in-process.

    python bench/mcp_roundtrip.py          # 500 calls each
    python bench/mcp_roundtrip.py --quick  # smoke run for CI

The client is the official SDK's ``ClientSession`` through tests/mcpclient.py, so the same
script runs on either SDK line (1.x or 2.x); the line is printed with the figures. Run it in
each line's environment to compare them (docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gitstate.api.repo import StateRepo
from tests.mcpclient import LINE, connect


async def over_mcp(agent: Path, n: int) -> list[float]:
    samples = []
    async with connect(agent, env=dict(os.environ), timeout=60) as client:
        for i in range(5):
            await client.call_tool("working_state_set", {"key": "warm", "value": i,
                                                         "reason": "warm-up"})
        for i in range(n):
            start = time.perf_counter()
            result = await client.call_tool("working_state_set", {
                "key": "stop_loss.2317", "value": i, "reason": "bench"})
            samples.append(time.perf_counter() - start)
            assert not result.get("isError"), result
    return samples


def in_process(agent: Path, n: int) -> list[float]:
    samples = []
    with StateRepo(agent, actor="agent") as repo:
        for i in range(n):
            start = time.perf_counter()
            repo.set("stop_loss.2317", i, "bench")
            samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("-n", type=int, default=500)
    args = parser.parse_args()
    n = 10 if args.quick else args.n
    root = Path(tempfile.mkdtemp(prefix="gitstate-mcp-bench-"))
    try:
        StateRepo.init(root / "a").close()
        StateRepo.init(root / "b").close()
        mcp = anyio.run(over_mcp, root / "a", n)
        local = in_process(root / "b", n)
        m, loc = statistics.median(mcp) * 1000, statistics.median(local) * 1000
        print(f"working_state_set, {n} calls each, mcp {version('mcp')} (line {LINE}.x)"
              "        median ms")
        print(f"  in-process StateRepo.set          {loc:>10.3f}   1.00x")
        print(f"  MCP client over stdio             {m:>10.3f}   {m / loc:.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
