"""The click command line: a thin adapter over ``StateRepo``.

Exit status: 0 success, 1 a rule refused the call (stderr names the rule), 2 a usage error
(including a directory that was never initialised), 3 the repository cannot be used.
There is one ``except GitStateError``, in :func:`main`.
"""

from __future__ import annotations

import errno
import re
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from . import textsafe
from .errors import GitStateError, UsageError
from .model import Scalar, display_value, parse_time
from .repo import UNSET, StateRepo

F = TypeVar("F", bound=Callable[..., Any])
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")


def parse_value(text: str, as_string: bool = False) -> Scalar:
    """CLI values: ``true``/``false`` are booleans, plain decimals (no leading zeros) are
    numbers, everything else is a string. ``--string`` keeps the text as it is."""
    if as_string:
        return text
    if text in ("true", "false"):
        return text == "true"
    match = _NUMBER.fullmatch(text)
    if match:
        return float(text) if match.group(2) else int(text)
    return text


def _now(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError:
        raise UsageError(f"--now {value!r} is not an ISO 8601 time (e.g. 2026-08-13T09:04+08:00)",
                         rule="usage.now") from None


def _emit(data: Any, as_json: bool, text: str | Callable[[Any], str]) -> None:
    """Print ``data`` as JSON, or as text: a ``text`` callable is given the data with every
    string made terminal-safe (``shown``), so no field can forge a line or hide characters."""
    if as_json:
        click.echo(textsafe.dumps(data, indent=2))
    else:
        click.echo(text(shown(data)) if callable(text) else text)


def shown(data: Any) -> Any:
    """``data`` with every string passed through :func:`textsafe.visible` (line breaks,
    controls, bidi and invisible characters appear as ``\\uXXXX``)."""
    if isinstance(data, str):
        return textsafe.visible(data)
    if isinstance(data, dict):
        return {shown(k): shown(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [shown(v) for v in data]
    return data


def warn(message: str) -> None:
    click.echo(f"gitstate: warning: {textsafe.visible(message)}", err=True)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")(f)


class Ctx:
    def __init__(self, agent_dir: Path, as_json: bool = False) -> None:
        self.agent_dir = agent_dir
        self.as_json = as_json

    def repo(self) -> StateRepo:
        return StateRepo(self.agent_dir, writer="human")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--agent-dir", type=click.Path(file_okay=False, path_type=Path),
    envvar="GITSTATE_AGENT_DIR", default=".", show_default="$GITSTATE_AGENT_DIR or .",
    help="The agent directory; its state/ subdirectory is the git repository.",
)
@click.version_option(package_name="gitstate")
@click.pass_context
def cli(ctx: click.Context, agent_dir: Path) -> None:
    """gitstate: one authoritative, versioned table of an agent's current rules.

    Each agent directory holds state/, a git repository whose every commit is one audited
    change (the message is the reason). Start with `gitstate init`, then `gitstate set`,
    and inject `gitstate render` into every wake-up. Try `gitstate demo`.

    Exit status: 0 success; 1 a rule refused the call (stderr names the rule, nothing was
    written); 2 a usage error or an uninitialised directory; 3 the repository cannot be used.
    """
    ctx.obj = Ctx(agent_dir)


@cli.command()
@json_option
@click.pass_obj
def init(obj: Ctx, as_json: bool) -> None:
    """Create <agent dir>/state as a git repository on branch main (idempotent)."""
    with StateRepo.init(obj.agent_dir, writer="human") as repo:
        head = repo.head()
        _emit({"ok": True, "state_dir": str(repo.state_dir), "head": head}, as_json,
              f"initialised {repo.state_dir} (main at {head[:12]})")


def _result_text(result: dict[str, Any]) -> str:
    op, commit = result["op"], result["commit"][:12]
    if op == "set":
        new, old = result["new"], result["old"]
        before = display_value(old["value"]) if old else "(absent)"
        exp = f", expires {new['expires_at']}" if new["expires_at"] else ""
        return (f"{commit} set {result['key']}: {before} -> {display_value(new['value'])}{exp} "
                f"({result['live_keys']}/{result['max_keys']} live keys)")
    if op == "clear":
        return f"{commit} cleared {result['key']} (was {display_value(result['old']['value'])})"
    if op == "handoff":
        cut = " (the note was cut to fit; see --json)" if result["truncated"] else ""
        return f"{commit} handoff left{cut}"
    return f"{commit} {op} committed"


def _finish(result: dict[str, Any], as_json: bool) -> None:
    for warning in result.get("warnings", []):
        warn(warning)
    if result.get("truncated"):
        click.echo("gitstate: note: the plain handoff note was collapsed and cut to fit",
                   err=True)
    _emit(result, as_json, _result_text)


@cli.command("set")
@click.argument("key")
@click.argument("value")
@click.option("--reason", "-r", required=True, help="Why: becomes the commit message.")
@click.option("--ttl-hours", type=float, help="Expire after H hours (day-scoped rules).")
@click.option("--expect", help="Compare-and-swap: refuse unless HEAD holds this value.")
@click.option("--expect-absent", is_flag=True, help="Refuse unless the key is absent.")
@click.option("--string", "as_string", is_flag=True,
              help="Store VALUE as text even if it looks like a number or boolean.")
@click.option("--request-id", help="Idempotency key: a retry with the same id and arguments "
              "returns the first result without a second commit.")
@json_option
@click.pass_obj
def set_(obj: Ctx, key: str, value: str, reason: str, ttl_hours: float | None,
         expect: str | None, expect_absent: bool, as_string: bool, request_id: str | None,
         as_json: bool) -> None:
    """Set KEY to VALUE, with a reason (one commit).

    \b
    gitstate set stop_loss.2317 262 --reason "break = exit" --ttl-hours 4.5
    gitstate set stop_loss.2317 257 --reason "review" --expect 262
    """
    if expect is not None and expect_absent:
        raise UsageError("--expect and --expect-absent exclude each other", rule="usage.expect")
    expected: Any = None if expect_absent else (parse_value(expect) if expect is not None
                                                 else UNSET)
    with obj.repo() as repo:
        result = repo.set(key, parse_value(value, as_string), reason, ttl_hours=ttl_hours,
                          expected=expected, request_id=request_id)
        _finish(result.to_dict(), as_json)


@cli.command()
@click.argument("key")
@click.option("--reason", "-r", required=True, help="Why: becomes the commit message.")
@click.option("--expect", help="Compare-and-swap: refuse unless HEAD holds this value.")
@click.option("--request-id", help="Idempotency key (see `gitstate set --help`).")
@json_option
@click.pass_obj
def clear(obj: Ctx, key: str, reason: str, expect: str | None, request_id: str | None,
          as_json: bool) -> None:
    """Retire KEY (its history stays in the log)."""
    with obj.repo() as repo:
        result = repo.clear(key, reason,
                            expected=parse_value(expect) if expect is not None else UNSET,
                            request_id=request_id)
        _finish(result.to_dict(), as_json)


@cli.command()
@click.argument("note", required=False)
@click.option("--status", type=click.Choice(["continue", "complete", "blocked"]))
@click.option("--next-steps", help="Required with --status continue.")
@click.option("--evidence", help="Required with --status complete.")
@click.option("--blocker", help="Required with --status blocked.")
@click.option("--reason", "-r", help="Commit message (default: derived from the note).")
@click.option("--request-id", help="Idempotency key (see `gitstate set --help`).")
@json_option
@click.pass_obj
def handoff(obj: Ctx, note: str | None, status: str | None, next_steps: str | None,
            evidence: str | None, blocker: str | None, reason: str | None,
            request_id: str | None, as_json: bool) -> None:
    """Overwrite the handoff note for the next wake-up.

    A plain NOTE is whitespace-collapsed and cut near 1,200 characters. With --status it is
    structured: continue needs --next-steps, complete needs --evidence, blocked needs
    --blocker; an oversized structured handoff is refused whole.
    """
    with obj.repo() as repo:
        result = repo.handoff(note, status=status, next_steps=next_steps, evidence=evidence,
                              blocker=blocker, reason=reason, request_id=request_id)
        _finish(result.to_dict(), as_json)


def _get_text(data: dict[str, Any]) -> str:
    lines = [f"HEAD {data['head'][:12]}  {data['live_keys']}/{data['max_keys']} live keys, "
             f"section {data['section_bytes']}/{data['section_max_bytes']} bytes"]
    for key, e in data["keys"].items():
        flag = " [expired]" if e["expired"] else ""
        exp = f"  expires {e['expires_at']}" if e["expires_at"] else ""
        lines.append(f"  {key} = {display_value(e['value'])}{flag}  (set {e['set_at']} by "
                     f"{e['actor']}: {e['reason']}){exp}")
    if not data["keys"]:
        lines.append("  (no keys)")
    ho = data["handoff"]
    if ho:
        status = f" [{ho['status']}]" if ho["status"] else ""
        lines.append(f"handoff{status} ({ho['left_at']}): {ho['note']}")
        for name in ("next_steps", "evidence", "blocker"):
            if ho.get(name):
                lines.append(f"  {name}: {ho[name]}")
    if data["history"]:
        lines.append("recent changes:")
        for h in data["history"]:
            what = f"{h['op']} {h['key']}" if h["key"] else h["op"]
            lines.append(f"  {h['commit'][:12]} {h['time']} {what}: {h['reason'].splitlines()[0]}")
    return "\n".join(lines)


AT_HELP = ("The state a wake-up saw at this ISO 8601 time, or at this revision (a commit "
           "id, HEAD~N), with expiry evaluated at that moment.")


@cli.command()
@click.option("--now", help="Evaluate expiry at this ISO 8601 time.")
@click.option("--at", "at", help=AT_HELP)
@click.option("--history", "history_n", type=click.IntRange(0, 1000), default=20,
              show_default=True, help="How many recent changes to include.")
@json_option
@click.pass_obj
def get(obj: Ctx, now: str | None, at: str | None, history_n: int, as_json: bool) -> None:
    """Show everything: keys (expired ones marked), the handoff, recent history."""
    with obj.repo() as repo:
        commit, moment = None, _now(now)
        if at is not None:
            from .audit import resolve_at

            commit, at_moment = resolve_at(repo, at)
            moment = moment or at_moment
        data = repo.get(now=moment, history=history_n, commit=commit)
    for warning in data["warnings"]:
        warn(warning)
    _emit(data, as_json, _get_text)


@cli.command()
@click.option("--locale", type=click.Choice(["zh-TW", "en", "ja"]),
              help="Section language (default: [gitstate] locale, zh-TW).")
@click.option("--now", help="Render as a wake-up at this ISO 8601 time would see it.")
@click.option("--at", "at", help=AT_HELP)
@click.pass_obj
def render(obj: Ctx, locale: str | None, now: str | None, at: str | None) -> None:
    """Print the section injected into a wake-up, and nothing else.

    Empty state (or [memory] working_state_enabled = false) prints nothing at all.
    """
    from .fastpath import section

    if at is not None:
        from .audit import resolve_at

        with obj.repo() as repo:
            commit, moment = resolve_at(repo, at)
            sys.stdout.write(repo.render(now=_now(now) or moment, locale=locale, commit=commit))
        return
    text, warnings = section(obj.agent_dir, locale=locale, now=_now(now))
    for warning in warnings:
        warn(warning)
    sys.stdout.write(text)


@cli.command()
@click.argument("runtime", type=click.Choice(["claude-code", "plain"]))
@click.option("--event", help="Claude Code hook event name (default: read from stdin).")
@click.option("--locale", type=click.Choice(["zh-TW", "en", "ja"]))
@click.option("--max-chars", type=click.IntRange(1000), help="This runtime's budget for one "
              "injection (default: [gitstate] injection_max_chars; at most 10,000 for "
              "claude-code). A longer section has its handoff line replaced by a pointer; "
              "key lines are never cut.")
@click.pass_obj
def hook(obj: Ctx, runtime: str, event: str | None, locale: str | None,
         max_chars: int | None) -> None:
    """Print the section for an agent runtime's wake-up hook.

    \b
    claude-code  Claude Code's hook JSON (hookSpecificOutput.additionalContext), for
                 SessionStart and UserPromptSubmit command hooks; see hooks/claude-code/.
    plain        the section as plain text, for any gateway.

    Prints nothing at all when the state is empty or injection is disabled. Errors go to
    stderr with exit 1 (never 2, which would block a Claude Code prompt).
    """
    from .__main__ import _fast

    opts = {"runtime": runtime, **({"event": event} if event else {}),
            **({"locale": locale} if locale else {}),
            **({"max-chars": str(max_chars)} if max_chars else {})}
    code = _fast("hook", str(obj.agent_dir), opts)
    if code:
        raise click.exceptions.Exit(code)


@cli.command()
@click.option("--http", "http", is_flag=True, help="Serve MCP over Streamable HTTP at "
              "http://HOST:PORT/mcp instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="(--http) Address to bind. Anything but loopback needs a bearer token.")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True,
              help="(--http) Port to bind.")
@click.option("--token-env", default="GITSTATE_MCP_TOKEN", show_default=True,
              help="(--http) Environment variable holding the bearer token clients must send.")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
              help="(--http) File holding the bearer token (first line); wins over "
              "--token-env. Never pass a token itself on the command line.")
@click.option("--allow-host", multiple=True, help="(--http) Another Host header to accept, "
              "e.g. the name clients use behind a proxy (repeatable).")
@click.option("--allow-origin", multiple=True, help="(--http) A browser Origin to accept, "
              "e.g. https://console.example (repeatable).")
@click.pass_obj
def mcp(obj: Ctx, http: bool, host: str, port: int, token_env: str, token_file: Path | None,
        allow_host: tuple[str, ...], allow_origin: tuple[str, ...]) -> None:
    """Run the MCP server on stdio, or over Streamable HTTP with --http (needs the extra:
    pip install 'gitstate[mcp]').

    \b
    Tools: working_state_set, working_state_clear, working_state_handoff, working_state_get.
    Resources: gitstate://section, gitstate://state, gitstate://key/{key} (with completion
    of key names); subscriptions notify on every change, whoever made it.
    See docs/mcp.md and examples/ for client configs.
    """
    try:
        from .mcp_server import serve
    except ImportError as exc:
        raise UsageError(f"the MCP server needs the mcp extra: pip install 'gitstate[mcp]' "
                         f"({exc})", rule="usage.mcp_missing") from exc
    StateRepo(obj.agent_dir).close()  # fail fast, with the usual message, if not initialised
    if not http:
        serve(obj.agent_dir)
        return
    from .mcp_http import read_token, serve_http

    serve_http(obj.agent_dir, host, port, read_token(token_env, token_file), allow_host,
               allow_origin)


@cli.command()
@click.option("--keep", is_flag=True, help="Keep the temporary agent directory.")
@click.option("--agent-dir", "demo_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Run in this (new) directory instead of a temporary one.")
def demo(keep: bool, demo_dir: Path | None) -> None:
    """Replay the three-stop-loss day in a temporary agent directory."""
    from .demo import run_demo

    run_demo(demo_dir, keep=keep)


from . import cli_audit, cli_remote, cli_typed  # noqa: E402  (they register commands)

_ = (cli_audit, cli_remote, cli_typed)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; the one place where gitstate errors become exit codes."""
    try:
        cli.main(args=argv, prog_name="gitstate", standalone_mode=False)
    except GitStateError as exc:
        as_json = argv is not None and "--json" in argv
        if as_json:
            click.echo(textsafe.dumps(exc.to_dict(), indent=2))
        message = textsafe.visible(exc.message)  # it may quote a value or a reason
        click.echo(f"gitstate: refused [{exc.rule}]: {message}"
                   if exc.exit_code == 1 else f"gitstate: error [{exc.rule}]: {message}",
                   err=True)
        return exc.exit_code
    except OSError as exc:  # the last net: a file-system failure no rule anticipated
        full = exc.errno == errno.ENOSPC
        click.echo(f"gitstate: error [{'store.disk_full' if full else 'store.io'}]: "
                   f"{textsafe.visible(str(exc))}"
                   + ("; free some disk space and try again" if full else ""), err=True)
        return 3
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    return 0
