"""The click command line: thin adapters over ``StateRepo``, loaded lazily.

The root group knows each command by name and module; a command's module is imported
only when that command (or its ``--help``) runs, and command modules import the
repository (dulwich) only inside their functions, so ``gitstate --help`` and each
command's help load click and little else. There is one ``except GitStateError``, in
:func:`main`: the one place where errors become exit codes (``context.EXIT_*``).

May import: every package (it is the top one).
"""

from __future__ import annotations

import errno
import importlib
from pathlib import Path

import click

from ..core import textsafe
from ..core.errors import DISK_FULL_HINT, GitStateError
from ..core.localtime import local_times_in
from .context import EXIT_STORE, Ctx

COMMANDS: dict[str, str] = {
    # name: module (in this package) and attribute
    "init": "write:init",
    "set": "write:set_",
    "clear": "write:clear",
    "handoff": "write:handoff",
    "revert": "write:revert",
    "adopt": "write:adopt",
    "get": "read:get",
    "render": "read:render",
    "hook": "read:hook",
    "receipts": "read:receipts",
    "log": "audit:log",
    "show": "audit:show",
    "diff": "audit:diff",
    "blame": "audit:blame",
    "verify": "audit:verify",
    "history": "audit:history",
    "repair-journal": "audit:repair_journal",
    "gc": "audit:gc",
    "schema": "typed:schema",
    "tools": "typed:tools",
    "approvals": "approvals:approvals",
    "approve": "approvals:approve",
    "deny": "approvals:deny",
    "spend": "approvals:spend",
    "run": "runs:run",
    "remote": "remote:remote",
    "clone": "remote:clone",
    "push": "remote:push",
    "pull": "remote:pull",
    "status": "remote:status",
    "verify-push": "remote:verify_push",
    "fleet": "remote:fleet",
    "report": "report:report",
    "serve": "report:serve",
    "mcp": "serve:mcp",
    "install": "install:install",
    "demo": "serve:demo",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use (click's documented pattern
    for large applications)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        command = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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

    \b
    Examples:
      gitstate demo
      gitstate init
      gitstate set stop_loss.2317 262 --reason "break = exit" --ttl-hours 4.5
      gitstate render
      gitstate log --key stop_loss.2317

    Exit status: 0 success; 1 a rule refused the call (stderr names the rule, nothing was
    written); 2 a usage error or an uninitialised directory; 3 the repository cannot be used.
    """
    ctx.obj = Ctx(agent_dir)
    _CONTEXTS[:] = [ctx.obj]


_CONTEXTS: list[Ctx] = []
"""The command's context, for the error printer (which runs after click's context ends)."""


def _local(message: str) -> str:
    """A message's stored times in the agent's zone, as every other output shows them;
    as they are when the zone cannot be read (the error may be that very config)."""
    try:
        return local_times_in(message, _CONTEXTS[-1].zone) if _CONTEXTS else message
    except GitStateError:
        return message


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; the one place where gitstate errors become exit codes."""
    try:
        # click returns an Exit's status (raised by a command) when not standalone
        status = cli.main(args=argv, prog_name="gitstate", standalone_mode=False)
    except GitStateError as exc:
        if argv is not None and "--json" in argv:
            from ..core.results import refusal, to_json

            click.echo(textsafe.dumps(to_json(refusal(exc)), indent=2))
        message = textsafe.visible(_local(exc.message))  # it may quote a value or a reason
        click.echo(f"gitstate: refused [{exc.rule}]: {message}"
                   if exc.exit_code == 1 else f"gitstate: error [{exc.rule}]: {message}",
                   err=True)
        return exc.exit_code
    except OSError as exc:  # the last net: a file-system failure no rule anticipated
        full = exc.errno == errno.ENOSPC
        rule = "store.disk_full" if full else getattr(exc, "rule", None) or "store.io"
        click.echo(f"gitstate: error [{rule}]: "
                   f"{textsafe.visible(str(exc))}"
                   + (f"; {DISK_FULL_HINT}" if full else ""), err=True)
        return EXIT_STORE
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    return status if isinstance(status, int) and not isinstance(status, bool) else 0
