"""Commands that run something long: the MCP server and the demo."""

from __future__ import annotations

from pathlib import Path

import click

from ..core.errors import UsageError
from ..mcp.http import MAX_SESSIONS, SESSION_IDLE_SECONDS
from ..system.httpguard import REQUEST_SECONDS
from .context import Ctx


class McpCommand(click.Command):
    """`mcp`, whose help lists the tools from the server's own list (gitstate/mcp/tools.py), so
    the help cannot fall behind the server; loaded only when that help is shown."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_help_text(ctx, formatter)
        from ..mcp.tools import tools
        from ..system.config import Config

        with formatter.section("Tools"):
            formatter.write_dl([(t.name, t.description.split(". ")[0].rstrip(".") + ".")
                                for t in tools(Config(), "")])


@click.command(cls=McpCommand)
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
@click.option("--request-timeout", type=click.FloatRange(0.1, 3600),
              default=REQUEST_SECONDS, show_default=True, metavar="SECONDS",
              help="(--http) A request's head and body must arrive within this; a stalled "
              "one gets 408 and its connection closed.")
@click.option("--max-sessions", type=click.IntRange(1, 100_000), default=MAX_SESSIONS,
              show_default=True, help="(--http) MCP sessions open at once; one more is "
              "refused (503, mcp.sessions_full) until one ends or expires.")
@click.option("--session-idle", type=click.FloatRange(1, 86_400),
              default=SESSION_IDLE_SECONDS,
              show_default=True, metavar="SECONDS", help="(--http) A session with no "
              "request in flight for this long is ended (its client then initializes again).")
@click.pass_obj
def mcp(obj: Ctx, http: bool, host: str, port: int, token_env: str, token_file: Path | None,
        allow_host: tuple[str, ...], allow_origin: tuple[str, ...], request_timeout: float,
        max_sessions: int, session_idle: float) -> None:
    """Run the MCP server on stdio, or over Streamable HTTP with --http (needs the extra:
    pip install 'gitstate[mcp]').

    An MCP client (Claude Code, Codex CLI, Gemini CLI, Cursor, ...) starts it and speaks
    JSON-RPC on its stdin and stdout; started by hand on a terminal it says so on stderr
    and waits. Ctrl-C (SIGINT) stops it at once, Ctrl-D (end of input) too.

    \b
    gitstate --agent-dir ~/agents/trader mcp
    gitstate --agent-dir ~/agents/trader mcp --http --port 8765

    \b
    Prompt: working_state_rules.
    Resources: gitstate://section, gitstate://state, gitstate://key/{key} (with completion
    of key names); subscriptions notify on every change, whoever made it.
    See docs/mcp.md and examples/ for client configs.

    Exit status: 0 when the client closed the connection; 130 (killed by SIGINT) after
    Ctrl-C; 2 a usage error (the mcp extra missing, an uninitialised directory, a --port
    already in use: usage.port_in_use).
    """
    try:
        from ..mcp.server import serve
    except ImportError as exc:
        raise UsageError(f"the MCP server needs the mcp extra: pip install 'gitstate[mcp]' "
                         f"({exc})", rule="usage.mcp_missing") from exc
    obj.repo().close()  # fail fast, with the usual message, if not initialised
    if not http:
        serve(obj.agent_dir)
        return
    from ..mcp.http import TOKEN_ENV, Limits, serve_http
    from ..system.httpguard import read_token

    serve_http(obj.agent_dir, host, port, read_token(token_env, token_file, TOKEN_ENV),
               allow_host, allow_origin, token_env,
               Limits(request_timeout, max_sessions, session_idle))


@click.command()
@click.option("--keep/--no-keep", default=True, show_default=True,
              help="Keep the temporary agent directory and its report (--no-keep removes "
              "both at the end; a directory you give is always kept).")
@click.option("--agent-dir", "demo_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Run in this new or empty directory instead of a temporary one (the "
              "same as `gitstate --agent-dir DIR demo`).")
@click.pass_context
def demo(ctx: click.Context, keep: bool, demo_dir: Path | None) -> None:
    """Replay the three-stop-loss day in a new agent directory, which is kept, and end with
    the next commands to try and the report's path.

    \b
    gitstate demo                          # in a new directory under the temporary one
    gitstate --agent-dir ~/try demo        # in ~/try (new or empty)
    gitstate demo --no-keep                # remove it all at the end

    GITSTATE_AGENT_DIR is not used: the demo never writes into an existing agent directory.
    Exit status: 0 done; 2 a usage error (a directory that is not new or empty:
    usage.demo_dir).
    """
    from click.core import ParameterSource

    from .demo import run_demo

    root = ctx.find_root()
    obj = ctx.find_object(Ctx)
    given = obj.agent_dir if obj is not None else Path(".")
    if root.get_parameter_source("agent_dir") == ParameterSource.COMMANDLINE:
        if demo_dir is not None and demo_dir.absolute() != given.absolute():
            raise UsageError(f"two directories given: --agent-dir {given} before demo and "
                             f"--agent-dir {demo_dir} after it; give one",
                             rule="usage.demo_dir")
        demo_dir = given
    elif root.get_parameter_source("agent_dir") == ParameterSource.ENVIRONMENT \
            and demo_dir is None:
        click.echo(f"gitstate: note: GITSTATE_AGENT_DIR ({given}) is not used by the demo, "
                   "which writes a new directory; give --agent-dir DIR to choose it", err=True)
    run_demo(demo_dir, keep=keep)
