"""Install what the suite drives besides Python: the npm trees of the MCP clients and hosts
(tests/js, tests/js/hosts, tests/js/conformance), in parallel, from their lock files.

    .venv/bin/python -m tests.prepare

Part of the README's test command, before pytest, so that installing them is not counted as
the suite's time; the tests install anything still missing themselves (helpers.npm_ci) and
skip cleanly without node, npm or a registry.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.helpers import npm_ci

JS = Path(__file__).resolve().parent / "js"


def main() -> int:
    trees = [JS, JS / "hosts", JS / "conformance"]
    with ThreadPoolExecutor(max_workers=len(trees)) as pool:
        problems = list(pool.map(npm_ci, trees))
    for tree, problem in zip(trees, problems, strict=True):
        if problem:  # not fatal: those tests skip and say why
            print(f"{tree.relative_to(JS.parent.parent)}: {problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
