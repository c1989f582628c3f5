"""Every command's --help teaches: at least one example, and its exit codes. Each example
is parsed by the very command it names (its options exist, required ones are given, choices
and types hold), so the examples stay true as options change."""

from __future__ import annotations

import re
import shlex

import click

from gitstate.cli import cli

EXIT = re.compile(r"\bExit(?: status)?:? (?:\d|COMMAND's)")


def _commands() -> list[tuple[click.Command, click.Context]]:
    root = click.Context(cli, info_name="gitstate")
    found = [(cli, root)]

    def walk(group: click.Group, ctx: click.Context) -> None:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None
            sub = click.Context(command, info_name=name, parent=ctx)
            found.append((command, sub))
            if isinstance(command, click.Group):
                walk(command, sub)

    walk(cli, root)
    return found


def _examples(text: str) -> list[str]:
    """The help's lines that start with `gitstate `, continuation lines joined."""
    out, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if pending:
            pending += " " + line
        elif line.startswith("gitstate "):
            pending = line
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        out.append(pending)
        pending = ""
    return out


def _parse(example: str) -> None:
    """Parse ``example`` down to the command it names, as click would run it (nothing
    runs: make_context only parses)."""
    words = shlex.split(example, comments=True)[1:]
    if "--" in words and words[0] == "spend":  # the spent command's own words
        words = words[:words.index("--") + 2]
    ctx = cli.make_context("gitstate", words)
    command: click.Command = cli
    while isinstance(command, click.Group):
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            return
        _, sub, args = command.resolve_command(ctx, rest)
        assert sub is not None, example
        command, ctx = sub, sub.make_context(sub.name or "", args, parent=ctx)


def test_every_help_page_has_an_example_and_its_exit_codes() -> None:
    """All 51 pages: the root, every command, every subcommand of run, remote and schema."""
    pages = _commands()
    assert len(pages) >= 51
    for command, ctx in pages:
        text = command.get_help(ctx)
        examples = _examples(text)
        assert examples, f"{ctx.command_path}: no example"
        assert EXIT.search(text), f"{ctx.command_path}: no exit codes"
        for example in examples:
            try:
                _parse(example)
            except click.BadParameter as exc:
                if "does not exist" not in exc.message:  # a path of the reader's machine
                    raise AssertionError(f"{ctx.command_path}: {example!r}: {exc}") from None
            except click.UsageError as exc:
                raise AssertionError(f"{ctx.command_path}: {example!r}: {exc}") from None
