"""A 2 KB structured value next to a scalar: the durable set and the render, side by side.

    python bench/structured.py            # 1,000 writes and 300 renders each
    python bench/structured.py --quick    # a smoke run for CI

The structure is a seed-004 style plan of step objects whose compact JSON is about 2 KB
(the section cap, 3,072 bytes of key lines by default, leaves room for it and a few scalars).
Writes are interleaved in blocks, so both values see the same machine noise; the plain JSON
store (rewrite + fsync, JSONL append + fsync) writes the same structure for the ratio.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench import PlainJsonStore, median_ms, time_writes
from gitstate.api.repo import StateRepo
from gitstate.wakeup.fastpath import section


def plan(i: int) -> list[dict[str, object]]:
    """About 2 KB of compact JSON: 16 steps, one of them changed by each write."""
    return [{"step": f"step-{n:02d}", "done": n < i % 16, "owner": "runtime",
             "evidence": [f"ticket T-{2300 + n}", f"check {n}"], "note": "x" * 48}
            for n in range(16)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, renders = (30, 10) if args.quick else (1000, 300)
    size = len(json.dumps(plan(0), separators=(",", ":")).encode())
    root = Path(tempfile.mkdtemp(prefix="gitstate-bench-"))
    try:
        (root / "agent").mkdir()
        (root / "agent" / "config.toml").write_text("[gitstate]\nauto_gc = false\n")
        repo = StateRepo.init(root / "agent")
        plain = PlainJsonStore(root)
        for i in range(8):
            repo.set(f"rule.{i}", i, "warm-up")
        samples: dict[str, list[float]] = {"scalar": [], "structured": [], "plain": []}
        block = max(n // 10, 1)
        for start in range(0, n, block):
            samples["scalar"] += time_writes(
                lambda i, s=start: repo.set("stop_loss.2317", s + i, "bench"), block)
            samples["structured"] += time_writes(
                lambda i, s=start: repo.set("plan", plan(s + i), "bench"), block)
            samples["plain"] += time_writes(
                lambda i, s=start: plain.set("plan", plan(s + i), "bench"), block)
        w = {k: median_ms(v) for k, v in samples.items()}
        print(f"durable set, median ms of {n} writes (the structure: {size:,} bytes as JSON)")
        print(f"  {'value':<34}{'ms':>8}{'vs scalar':>11}{'vs plain':>10}")
        for name, label in (("scalar", "scalar (stop_loss.2317 = 262)"),
                            ("structured", "2 KB structure (plan)"),
                            ("plain", "plain JSON store, same structure")):
            print(f"  {label:<34}{w[name]:>8.3f}{w[name] / w['scalar']:>10.2f}x"
                  f"{w[name] / w['plain']:>9.2f}x")
        repo.close()
        scalar_dir, struct_dir = root / "scalar", root / "structured"
        with StateRepo.init(scalar_dir) as a, StateRepo.init(struct_dir) as b:
            for i in range(8):
                a.set(f"rule.{i}", i, "r")
                b.set(f"rule.{i}", i, "r")
            a.set("plan", 262, "r")
            b.set("plan", plan(7), "r")
            out = {}
            for name, target, api in (("scalar", scalar_dir, a), ("structured", struct_dir, b)):
                out[f"{name} api"] = _timed(lambda r=api: r.render(), renders)
                out[f"{name} wake-up"] = _timed(lambda t=target: section(t), renders)
        print(f"render, median ms of {renders} (9 keys, one of them the value)")
        for kind in ("api", "wake-up"):
            s, t = out[f"scalar {kind}"], out[f"structured {kind}"]
            print(f"  {kind:<10} scalar {s:.3f}  structure {t:.3f}  ({t / s:.2f}x)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _timed(fn: object, n: int) -> float:
    assert callable(fn)
    values = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        values.append(time.perf_counter() - start)
    return median_ms(values)


if __name__ == "__main__":
    main()
