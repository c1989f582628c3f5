"""`gitstate install HOST`: wire an agent host to this gitstate (gitstate/hosts/install.py)."""

from __future__ import annotations

from pathlib import Path

import click

from .context import Ctx, examples

EXITS = ("Exit: 0 written (or nothing to change), and with --check the host reports "
         "Connected; 1 a file refused (install.symlink, install.not_json, ...: nothing "
         "written), or with --check the host reports something else (install.not_connected) "
         "or is not installed (install.host_missing); 2 a usage error or an uninitialised "
         "agent directory; 3 the repository cannot be used.")


@examples(
    "gitstate --agent-dir .agent install claude-code",
    "gitstate --agent-dir ~/agents/trader install claude-code --user --check",
    "gitstate --agent-dir ~/agents/trader install codex",
    "gitstate --agent-dir .agent install gemini --project",
    "gitstate --agent-dir .agent install cursor --check",
    exits=EXITS,
)
@click.command()
@click.argument("host", type=click.Choice(["claude-code", "codex", "gemini", "cursor"]))
@click.option("--project", "scope", flag_value="project",
              help="Write the current directory's files (.mcp.json and .claude/, .gemini/, "
              ".cursor/, .codex/): the default, except for codex (whose project file is "
              "read only in a project Codex trusts).")
@click.option("--user", "scope", flag_value="user",
              help="Write your user files instead (~/.claude.json and ~/.claude/, "
              "~/.gemini/, ~/.cursor/, ~/.codex/ or $CODEX_HOME): every project sees it.")
@click.option("--check", is_flag=True,
              help="Then run the host's own listing (claude mcp list, gemini mcp list, "
              "Codex's app-server, cursor-agent mcp list) and report Connected or why not.")
@click.pass_obj
def install(obj: Ctx, host: str, scope: str | None, check: bool) -> None:
    """Write or merge HOST's MCP configuration (and Claude Code's and Gemini CLI's hooks) so
    it starts this gitstate's server for the agent directory.

    The server command is this gitstate's own (its python -m gitstate, the agent directory
    absolute). Claude Code: .mcp.json, the server's approval in .claude/settings.local.json
    and the SessionStart and UserPromptSubmit hooks in .claude/settings.json (--user:
    ~/.claude.json's mcpServers, as `claude mcp add -s user` writes it, and
    ~/.claude/settings.json). Codex CLI: [mcp_servers.gitstate] in ~/.codex/config.toml
    (the default for codex; --project: .codex/config.toml, read in a trusted project).
    Gemini CLI: mcpServers and the SessionStart and BeforeAgent hooks in
    .gemini/settings.json. Cursor: .cursor/mcp.json.

    Your other servers, settings and hooks are kept; a file that would not change is not
    written (a second run changes nothing); a changed file's old bytes are kept in
    FILE.gitstate-backup; every file is replaced atomically and never through a symlink
    (a symlink there is refused). It prints each file and what you must still do.
    """
    import os

    from ..core.errors import UsageError
    from ..hosts import install as wiring_mod

    obj.repo().close()  # an uninitialised agent directory fails here, with its usual rule
    chosen = scope or ("user" if host == "codex" else "project")
    home = Path(os.path.expanduser("~"))
    if not home.is_absolute():
        raise UsageError("HOME is not set to an absolute directory", rule="usage.home")
    home = Path(os.path.realpath(home))  # a HOME that is a link is yours: write where it points
    project = Path.cwd()
    wiring = wiring_mod.plan(host, obj.agent_dir, chosen, project, home)
    for line in wiring_mod.apply(wiring):
        click.echo(line)
    if check:
        from ..hosts.check import check as host_check

        click.echo(host_check(host, chosen, project, home))
        return
    for step in wiring.todo:
        click.echo(f"next: {step}")
