"""The wake-up path: the rendered section, without importing dulwich, click or pydantic.

Every wake-up runs this (``gitstate render`` and the runtime hooks), so it reads plain files:
the stamp ``.git/gitstate-stamp`` (``<commit> <blob id>``, written after each checkout), the
branch ref, and working_state.json, whose git blob id it computes with hashlib. When the ref
equals the stamped commit and the file hashes to the stamped blob, the file *is* HEAD's
state and is rendered directly. Otherwise (a write in flight, a killed write's leftovers, a
hand edit, a packed or missing stamp) it falls back to reading HEAD through the store, so a
hand edit or a half-finished write is never injected (invariants 5 and 9).
"""

from __future__ import annotations

import json
import os
import sys

from ..core.layout import (
    BRANCH,
    SCHEMA_CACHE_FILE,
    SCHEMA_FILE,
    SCHEMA_MAX_BYTES,
    STAMP_FILE,
    STATE_DIR,
    STATE_MAX_BYTES,
    parse_stamp,
)
from ..core.model import STATE_FILE, State
from ..core.render import fit, phase_lines, render, text_chars
from ..core.textsafe import dumps
from ..core.timebase import datetime
from ..system import clock as clockbase
from ..system.config import Config, load_config, resolve_tz
from ..system.safefile import read_regular

TYPE_CHECKING = False  # not `from typing import`: typing costs ~3 ms per wake-up
if TYPE_CHECKING:
    from typing import TypeGuard

    from ..core.errors import GitStateError

try:  # the builtin module imports in microseconds; hashlib loads OpenSSL (~3 ms)
    from _sha1 import sha1  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - other Python implementations
    from hashlib import sha1


def _read(path: str, limit: int = 64 << 10) -> bytes:
    # never through a symlink, never a FIFO or device, never unbounded (safefile)
    return read_regular(path, limit)


def read_ref(git_dir: str, name: str = BRANCH) -> str | None:
    try:
        return _read(os.path.join(git_dir, name), 256).decode("ascii").strip()
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError):
        return None
    try:
        packed = _read(os.path.join(git_dir, "packed-refs"), 1 << 20).decode("ascii")
    except (OSError, UnicodeDecodeError):
        return None
    for line in packed.splitlines():
        sha, _, name_ = line.partition(" ")
        if name_ == name:
            return sha
    return None


def head_state_fast(state_dir: str | os.PathLike[str]) -> State | None:
    """HEAD's state read from the working tree when the stamp proves they are equal."""
    fast = _head_fast(state_dir)
    return fast[0] if fast else None


def head_and_state_fast(state_dir: str | os.PathLike[str]) -> tuple[State, str] | None:
    """HEAD's state and HEAD, when the stamp proves both working files are HEAD's
    (working_state.json, and schema.yaml or its absence)."""
    fast = _head_fast(state_dir)
    if fast is None:
        return None
    state, compiled, head = fast
    try:
        data: bytes | None = _read(os.path.join(state_dir, SCHEMA_FILE), SCHEMA_MAX_BYTES)
    except FileNotFoundError:
        data = None
    except OSError:
        return None
    blob = None if data is None else sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return (state, head) if blob == (None if compiled is None else compiled["blob"]) \
        else None


def _head_fast(state_dir: str | os.PathLike[str]
               ) -> tuple[State, dict[str, object] | None, str] | None:
    """(HEAD's state, the compiled schema or None, HEAD), or None when only the slow path
    can tell."""
    git_dir = os.path.join(state_dir, ".git")
    try:
        stamp = parse_stamp(_read(os.path.join(git_dir, STAMP_FILE), 256))
        data = _read(os.path.join(state_dir, STATE_FILE), STATE_MAX_BYTES)
    except OSError:  # absent, not a regular file, too large: the slow path decides
        return None
    if stamp is None or read_ref(git_dir) != stamp[0]:
        return None
    commit, blob, schema_blob = stamp
    compiled = None
    if schema_blob != "-":
        try:
            compiled = json.loads(_read(os.path.join(git_dir, SCHEMA_CACHE_FILE), 1 << 20))
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(compiled, dict) or compiled.get("blob") != schema_blob:
            return None
    digest = sha1(b"blob %d\0" % len(data) + data).hexdigest()
    if digest != blob or not commit:
        return None
    try:
        return State.from_bytes(data), compiled, commit
    except (ValueError, KeyError, TypeError):
        return None


CLAUDE_CODE_MAX_CHARS = 10_000  # what Claude Code keeps of a hook's additionalContext


def section(
    agent_dir: str | os.PathLike[str], *, locale: str | None = None,
    now: datetime | None = None, max_chars: int | None = None,
    config: Config | None = None, set_tool: str | None = None, get_tool: str | None = None,
) -> tuple[str, list[str]]:
    """The section for a wake-up, and warnings for stderr (hand edits, a withheld handoff).
    ``max_chars`` is the receiving runtime's budget (see ``render.fit``); ``config`` spares
    reading config.toml again when the caller has it; ``set_tool`` / ``get_tool`` are the
    tool names the section cites (default: config.toml's [gitstate] set_tool / get_tool,
    else working_state_set / working_state_get)."""
    text, warnings, _ = section_at_head(agent_dir, locale=locale, now=now,
                                        max_chars=max_chars, config=config,
                                        set_tool=set_tool, get_tool=get_tool)
    return text, warnings


def section_at_head(
    agent_dir: str | os.PathLike[str], *, locale: str | None = None,
    now: datetime | None = None, max_chars: int | None = None,
    config: Config | None = None, set_tool: str | None = None, get_tool: str | None = None,
) -> tuple[str, list[str], str | None]:
    """:func:`section`, and the commit it was rendered from (None: nothing rendered)."""
    config = config or load_config(agent_dir)
    state_dir = os.path.join(agent_dir, STATE_DIR)
    if not os.path.isdir(os.path.join(state_dir, ".git")):
        from ..core.errors import NotInitialized

        raise NotInitialized(f"{agent_dir} has no gitstate repository; run `gitstate init`")
    if not config.enabled:
        return "", [], None
    moment = now or clockbase.read(os.path.join(state_dir, ".git")).time
    locale = locale or config.locale
    fast = _head_fast(state_dir)
    if fast is None:  # the slow, exact path: HEAD read through the store
        from .slowpath import section_from_store

        text, warnings, full, head = section_from_store(agent_dir, config, moment, locale,
                                                        max_chars, set_tool, get_tool)
    else:
        state, compiled, head = fast
        extra = phase_lines(compiled, state, moment, locale)
        tz = resolve_tz(config.timezone)
        set_tool = set_tool or config.set_tool
        full = render(state, moment, locale, tz, extra, set_tool)
        text, warnings = full, []
        # fit renders again only when the handoff must give way (the same test fit makes)
        if max_chars is not None and state.handoff is not None and \
                text_chars(full) > max_chars:
            text = fit(state, moment, locale, tz, extra, max_chars, set_tool,
                       get_tool or config.get_tool)[0]
    if text != full:
        warnings.append(f"the section is {text_chars(full)} characters, over this runtime's "
                        f"budget of {max_chars}: the handoff line was left out (every key line "
                        "is in); shorten the handoff, or lower [gitstate] injection_max_chars")
    return text, warnings, head


def claude_code_output(text: str, event: str) -> str:
    """Claude Code's documented hook output: the section as additionalContext. Gemini CLI's
    hooks read the same shape (``hookSpecificOutput.additionalContext``, its SessionStart
    and BeforeAgent events)."""
    if not text:
        return ""
    payload = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
    return dumps(payload) + "\n"


HOOK_INPUT_MAX_BYTES = 1 << 20
"""The most of a hook's stdin read (Claude Code's input is a few hundred bytes, plus the
prompt for UserPromptSubmit, the default event anyway)."""
HOOK_INPUT_SECONDS = 1.0
"""How long a hook waits for its stdin to be written and closed."""
HOOK_INPUT_MAX_DEPTH = 32
"""The deepest nesting of the hook input's JSON that is parsed (Claude Code's is 2 deep)."""


def read_hook_input(max_bytes: int = HOOK_INPUT_MAX_BYTES,
                    seconds: float = HOOK_INPUT_SECONDS) -> tuple[bytes | None, str]:
    """stdin's bytes, read within ``max_bytes`` and ``seconds``; (None, why) when they pass
    either bound, when stdin is a terminal or when there is none."""
    stdin = sys.stdin
    if stdin is None:
        return None, "there is no stdin"
    try:
        fd = stdin.fileno()
    except (OSError, ValueError):  # an in-memory stream (a test runner's): it cannot block
        try:
            text = stdin.read(max_bytes + 1)
        except (OSError, ValueError) as exc:
            return None, f"stdin cannot be read ({exc})"
        data = text.encode("utf-8", "replace") if isinstance(text, str) else bytes(text)
        return (None, f"it is over {max_bytes} bytes") if len(data) > max_bytes else (data, "")
    import select
    import time

    if os.isatty(fd):
        return None, "stdin is a terminal"
    deadline = time.monotonic() + seconds
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        try:
            ready = left > 0 and select.select([fd], [], [], left)[0]
            chunk = os.read(fd, 1 << 16) if ready else None
        except (OSError, ValueError) as exc:
            return None, f"stdin cannot be read ({exc})"
        if chunk is None:
            return None, f"it was not closed within {seconds:g} s"
        if not chunk:
            return b"".join(chunks), ""
        size += len(chunk)
        if size > max_bytes:
            return None, f"it is over {max_bytes} bytes"
        chunks.append(chunk)


def json_depth(text: str) -> int:
    """The deepest nesting of brackets in ``text`` outside its strings (no recursion)."""
    import re

    depth = deepest = 0
    for char in re.findall(r"[\[\]{}]", re.sub(r'"(?:[^"\\]|\\.)*"', "", text)):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def hook_event_from_stdin(default: str) -> str:
    """Claude Code passes the hook input as JSON on stdin; read its event name. Whatever
    stdin holds (nothing, a terminal, a stream never closed, more than the bound, JSON nested
    deeper than the bound, not JSON), the answer comes within HOOK_INPUT_SECONDS: ``default``
    when the input cannot be read, with a warning on stderr when it was there but unusable."""
    raw, why = read_hook_input()
    if raw is None:
        if why != "stdin is a terminal":
            sys.stderr.write(f"gitstate: warning [hook.input]: the hook input on stdin was "
                             f"not read: {why}; the event is {default}\n")
        return default
    text = raw.decode("utf-8", "replace").strip() or "{}"
    if json_depth(text) > HOOK_INPUT_MAX_DEPTH:
        sys.stderr.write(f"gitstate: warning [hook.input]: the hook input on stdin is nested "
                         f"deeper than {HOOK_INPUT_MAX_DEPTH}; the event is {default}\n")
        return default
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return default
    event = data.get("hook_event_name") if isinstance(data, dict) else None
    return event if isinstance(event, str) and event.isalnum() else default


# -- the `gitstate render` and `gitstate hook` commands, without click --------------------

HOOK_EVENTS = {"claude-code": "UserPromptSubmit", "gemini": "BeforeAgent", "plain": ""}
"""Each runtime's default event, when its stdin names none."""
JSON_RUNTIMES = ("claude-code", "gemini")
"""The runtimes whose hooks answer with the hook JSON (the rest: the section as text)."""


def parse_fast(args: list[str]) -> tuple[str, str, dict[str, str]] | None:
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
    allowed = {"render": ("--locale", "--now", "--run"),
               "hook": ("--event", "--locale", "--max-chars", "--run")}[command]
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


def _ours(exc: Exception) -> TypeGuard[GitStateError]:
    """Whether ``exc`` is one of gitstate's errors. The error tree is imported here, when
    something went wrong, not on every wake-up (a raised one was imported by its raiser)."""
    from ..core.errors import GitStateError

    return isinstance(exc, GitStateError)


def run_fast(command: str, agent_dir: str, opts: dict[str, str]) -> int:
    budget = config = None
    if command == "hook":
        try:  # a hook's budget: the runtime's own limit, never more than config.toml's
            config = load_config(agent_dir)
            budget = config.injection_max_chars
        except Exception as exc:  # only ours (see _ours); anything else goes on
            if not _ours(exc):
                raise
            # section() reads it again and reports the error
        if "max-chars" in opts:
            budget = int(opts["max-chars"])
        if opts["runtime"] == "claude-code":
            budget = min(budget or CLAUDE_CODE_MAX_CHARS, CLAUDE_CODE_MAX_CHARS)
    run_id = opts.get("run") or (os.environ.get("GITSTATE_RUN") if command == "hook" else None)
    try:
        config = config or load_config(agent_dir)
        moment = clockbase.read(os.path.join(agent_dir, STATE_DIR, ".git")).time
        if "now" in opts:  # a time without an offset is in the agent's zone
            from ..core.localtime import parse_given_time

            moment = parse_given_time(opts["now"], resolve_tz(config.timezone), "--now")
        locale = opts.get("locale") or config.locale
        block, run_head = "", None
        if run_id:
            from .slowpath import run_block

            block, run_head = run_block(agent_dir, run_id, locale=locale, now=moment,
                                        config=config)
        limit = budget
        if budget is not None and block:  # the block is never cut: the section fits the rest
            budget = max(budget - text_chars(block), 1000)
        text, warnings, head = section_at_head(agent_dir, locale=locale, now=moment,
                                               max_chars=budget, config=config)
        if limit is not None and block and text_chars(block) + text_chars(text) > limit:
            warnings.append(f"the run's <state> block ({text_chars(block)} characters) and "
                            f"the section pass this runtime's budget of {limit}: raise "
                            "--max-chars, or keep the run's texts shorter")
    except Exception as exc:  # only ours (see _ours); anything else goes on
        if not _ours(exc):
            raise
        sys.stderr.write(f"gitstate: error [{exc.rule}]: {exc.message}\n")
        # A hook must never block the agent's prompt (exit 2 does in Claude Code).
        return 1 if command == "hook" else exc.exit_code
    for warning in warnings:
        sys.stderr.write(f"gitstate: warning: {warning}\n")
    event = ""
    if command == "hook" and opts["runtime"] in JSON_RUNTIMES:
        event = opts.get("event") or hook_event_from_stdin(HOOK_EVENTS[opts["runtime"]])
    text = compose(text, block, opts.get("runtime", "render"), event)
    if command == "hook":
        from ..history.receipts import record

        record(os.path.join(agent_dir, STATE_DIR, ".git"), text.encode(), now=moment,
               head=head, runtime=opts["runtime"], event=event, locale=locale,
               tz=config.timezone, max_chars=budget, run_id=run_id, run_head=run_head)
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0


def compose(section_text: str, block: str, runtime: str, event: str) -> str:
    """What a wake-up receives: the section, then the run's block, wrapped as the runtime
    expects (Claude Code and Gemini CLI: their hook JSON)."""
    text = section_text + ("\n" if section_text and block else "") + block
    return claude_code_output(text, event) if runtime in JSON_RUNTIMES else text
