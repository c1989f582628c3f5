"""The ``gitstate`` command's entry point: a tiny dispatcher.

``gitstate render`` and ``gitstate hook ...`` run on every agent wake-up, so their plain
forms are served by ``fastpath`` without importing click (about 50 ms) or dulwich.
Anything else, including ``--help`` and every option the fast path does not know, goes to
the click CLI.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    from .wakeup.fastpath import parse_fast, run_fast

    fast = parse_fast(args)
    if fast is not None:
        return run_fast(*fast)
    from .cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
