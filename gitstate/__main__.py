"""The ``gitstate`` command's entry point: a tiny dispatcher.

``gitstate render`` and ``gitstate hook ...`` run on every agent wake-up, so their plain
forms are served here without importing click (about 50 ms) or dulwich. Anything else,
including ``--help`` and every option the fast path does not know, goes to the click CLI.
"""

from __future__ import annotations

import os
import sys

HOOK_EVENTS = {"claude-code": "UserPromptSubmit", "plain": ""}


def _parse_fast(args: list[str]) -> tuple[str, str, dict[str, str]] | None:
    """Recognise the fast forms; None sends the call to the full CLI."""
    agent_dir = os.environ.get("GITSTATE_AGENT_DIR") or "."
    rest = list(args)
    if rest[:1] == ["--agent-dir"] and len(rest) >= 2:
        agent_dir, rest = rest[1], rest[2:]
    elif rest and rest[0].startswith("--agent-dir="):
        agent_dir, rest = rest[0].split("=", 1)[1], rest[1:]
    if not rest or rest[0] not in ("render", "hook"):
        return None
    command, rest = rest[0], rest[1:]
    opts: dict[str, str] = {}
    if command == "hook":
        if not rest or rest[0] not in HOOK_EVENTS:
            return None
        opts["runtime"], rest = rest[0], rest[1:]
    allowed = {"render": ("--locale", "--now"),
               "hook": ("--event", "--locale", "--max-chars")}[command]
    while rest:
        if rest[0] in allowed and len(rest) >= 2 and not rest[1].startswith("-"):
            opts[rest[0][2:]] = rest[1]
            rest = rest[2:]
        else:
            return None
    if opts.get("locale", "zh-TW") not in ("zh-TW", "en", "ja"):
        return None  # let click report the bad choice
    if not opts.get("max-chars", "1000").isdigit() or int(opts.get("max-chars", "1000")) < 1000:
        return None  # let click report it
    return command, agent_dir, opts


def _fast(command: str, agent_dir: str, opts: dict[str, str]) -> int:
    from .errors import GitStateError
    from .fastpath import claude_code_output, hook_event_from_stdin, section

    now = None
    if "now" in opts:
        try:
            from .model import parse_time

            now = parse_time(opts["now"])
        except ValueError:
            sys.stderr.write(f"gitstate: error: --now {opts['now']!r} is not an ISO 8601 time\n")
            return 2
    budget = config = None
    if command == "hook":
        from .config import load_config

        try:  # a hook's budget: the runtime's own limit, never more than config.toml's
            config = load_config(agent_dir)
            budget = config.injection_max_chars
        except GitStateError:
            pass  # section() reads it again and reports the error
        if "max-chars" in opts:
            budget = int(opts["max-chars"])
        if opts["runtime"] == "claude-code":
            from .fastpath import CLAUDE_CODE_MAX_CHARS

            budget = min(budget or CLAUDE_CODE_MAX_CHARS, CLAUDE_CODE_MAX_CHARS)
    try:
        text, warnings = section(agent_dir, locale=opts.get("locale"), now=now,
                                 max_chars=budget, config=config)
    except GitStateError as exc:
        sys.stderr.write(f"gitstate: error [{exc.rule}]: {exc.message}\n")
        # A hook must never block the agent's prompt (exit 2 does in Claude Code).
        return 1 if command == "hook" else exc.exit_code
    for warning in warnings:
        sys.stderr.write(f"gitstate: warning: {warning}\n")
    if command == "hook" and opts["runtime"] == "claude-code":
        event = opts.get("event") or hook_event_from_stdin(HOOK_EVENTS["claude-code"])
        text = claude_code_output(text, event)
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    fast = _parse_fast(args)
    if fast is not None:
        return _fast(*fast)
    from .cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
