"""What every command shares: the context object, output, value parsing, exit codes.

Imports only click and light gitstate modules at load time, so ``--help`` stays cheap;
the repository (dulwich) is opened by :meth:`Ctx.repo` when a command runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from ..core import textsafe
from ..core.errors import UsageError
from ..core.localtime import local_text, parse_given_time
from ..core.model import Scalar, Value, display_value

if TYPE_CHECKING:
    from ..api.repo import StateRepo
    from ..core.results import WriteResult

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=click.Command)
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_STORE = 0, 1, 2, 3
"""Exit status: 0 success, 1 a rule refused the call (stderr names the rule), 2 a usage
error (including a directory that was never initialised), 3 the repository cannot be used."""

TIME_NOTE = ("A time without an offset is in the agent's time zone (config.toml [gitstate] "
             "timezone; unset: the machine's).")
AT_HELP = ("The state a wake-up saw at this ISO 8601 time, or at this revision (a commit "
           "id, HEAD~N), with expiry evaluated at that moment. " + TIME_NOTE)


EXITS = ("Exit: 0 ok; 1 a rule refused (stderr names it, nothing written; a bad config.toml "
         "too); 2 a usage error or an uninitialised directory; 3 the repository cannot be "
         "used.")


def examples(*lines: str, exits: str = EXITS) -> Callable[[C], C]:
    """A command's help ends with its examples (none here: its docstring has them) and its
    exit codes; a test holds every command to both."""
    def apply(command: C) -> C:
        block = "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines) if lines else ""
        command.epilog = "\n\n".join(part for part in (block, exits) if part)
        return command
    return apply


def time_help(text: str) -> str:
    """The help of an option that takes a time: ``text``, then how a time is read."""
    return f"{text} {TIME_NOTE}"


class Ctx:
    def __init__(self, agent_dir: Path) -> None:
        self.agent_dir = agent_dir
        self._zone: tzinfo | None = None

    @property
    def zone(self) -> tzinfo:
        """The agent's time zone: every time given is read in it, and shown in it."""
        if self._zone is None:
            from ..system.config import load_config, resolve_tz

            self._zone = resolve_tz(load_config(self.agent_dir).timezone)
        return self._zone

    def time(self, value: str | None, option: str) -> datetime | None:
        """A time option's value (``localtime.parse_given_time`` in the agent's zone)."""
        return None if value is None else parse_given_time(value, self.zone, option)

    def when(self, stamp: str | None) -> str:
        """A stored time as text output shows it: in the agent's zone, with its offset."""
        return local_text(stamp, self.zone)

    def repo(self, writer: str = "human") -> StateRepo:
        from ..api.repo import StateRepo

        return StateRepo(self.agent_dir, writer=writer)


class ValueArgs(click.Command):
    """A command whose arguments may be negative numbers or start with ``-``.

    Click reads every ``-…`` word as an option, so ``set offset -5`` would fail with "No
    such option '-5'". Here a word that is a negative number (``-5``, ``-0.25``) is an
    argument, and so is every word after ``--`` until the command's arguments are all given
    (``set note -- -x``, ``set --reason r -- KEY "- x"``), with options still allowed after
    them (``set offset -- -5 --reason r``). The words are reordered (options, then ``--`` and the
    arguments in their order) before click parses them, so click stays the one parser."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value = {name for p in self.params if isinstance(p, click.Option)
                       and not p.is_flag and not p.count for name in p.opts}
        arguments = [p for p in self.params if isinstance(p, click.Argument)]
        slots = len(args) if any(p.nargs < 0 for p in arguments) else \
            sum(p.nargs for p in arguments)
        options: list[str] = []
        positional: list[str] = []
        words = iter(args)
        for word in words:
            if word == "--":  # arguments until every one is given, at least one
                positional.extend(w for w in [next(words, None)] if w is not None)
                while len(positional) < slots and (w := next(words, None)) is not None:
                    positional.append(w)
            elif word in takes_value:
                options.append(word)
                options.extend(w for w in [next(words, None)] if w is not None)
            elif word.startswith("-") and len(word) > 1 and not _NUMBER.fullmatch(word):
                options.append(word)  # a flag, --opt=value, -rVALUE, or a typo click names
            else:
                positional.append(word)
        try:
            return super().parse_args(ctx, [*options, "--", *positional] if positional
                                      else options)
        except click.NoSuchOption as exc:
            if exc.option_name.startswith("--"):
                raise
            # click names the first letter of a cluster (-abc -> -a): show the whole word
            word = next((w for w in args if w.startswith(exc.option_name)), exc.option_name)
            raise click.UsageError(
                f"{exc.message.rstrip('.')}; a value that starts with - follows --: "
                f"`{ctx.command_path} KEY -- {word} ...`", ctx) from None


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


def parse_json_value(text: str, option: str) -> Value:
    """A value given as JSON on the command line. Refused: malformed JSON (naming where),
    NaN or Infinity, an object with the same key twice (which one would count?), null
    (use `clear`). The value's own limits are checked by the write."""
    import json

    def no_twins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [k for k, _ in pairs]
        twins = sorted({k for k in names if names.count(k) > 1})
        if twins:
            raise UsageError(f"{option}: the object has the key {twins[0]!r} twice",
                             rule="usage.json")
        return dict(pairs)

    def no_constant(name: str) -> Any:
        raise UsageError(f"{option}: {name} is not a JSON number", rule="usage.json")

    if len(text) > 1 << 20:
        raise UsageError(f"{option}: over 1 MiB of JSON", rule="usage.json")
    try:
        value = json.loads(text, object_pairs_hook=no_twins, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{option} is not valid JSON: {exc.msg} at line {exc.lineno} column "
                         f"{exc.colno}", rule="usage.json") from None
    except RecursionError:
        raise UsageError(f"{option}: the JSON nests too deeply", rule="usage.json") from None
    if value is None:
        raise UsageError(f"{option}: null is not a value; use `gitstate clear` to retire a key",
                         rule="usage.json")
    return cast("Value", value)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable output: "
                        "one JSON document (docs/cli.md, \"Output\").")(f)


DEFAULT_LIMIT = 50
"""How many items a long listing shows unless told (``--limit N``, ``--all``)."""

T = TypeVar("T")


def limit_options(f: F) -> F:
    """``--limit/-n N`` and ``--all``: a long listing's bound (default :data:`DEFAULT_LIMIT`)."""
    f = click.option("--all", "show_all", is_flag=True, help="Every item, no limit.")(f)
    return click.option("--limit", "-n", "limit", type=click.IntRange(1), help=(
        f"At most N items (default {DEFAULT_LIMIT}; --all for every one)."))(f)


def jsonl_option(f: F) -> F:
    return click.option("--jsonl", "as_jsonl", is_flag=True, help="JSON Lines instead: one "
                        "object per line, for a stream (docs/cli.md, \"Output\").")(f)


def limited(items: Iterable[T], limit: int | None, show_all: bool) -> tuple[list[T], int]:
    """The first ``limit`` items (default :data:`DEFAULT_LIMIT`; all with ``show_all``), and
    how many more there were."""
    if show_all and limit is not None:
        raise click.UsageError("--limit and --all contradict each other: give one")
    cap = None if show_all else limit or DEFAULT_LIMIT
    out: list[T] = []
    more = 0
    for item in items:
        if cap is None or len(out) < cap:
            out.append(item)
        else:
            more += 1
    return out, more


def more_note(more: int, what: str) -> None:
    """The last line of a listing that was cut, on stderr (stdout keeps only the items)."""
    if more:
        click.echo(f"… {more} more {what}; --all to see them (or --limit N)", err=True)


def listing(name: str, items: list[Any], more: int, as_json: bool, as_jsonl: bool,
            line: Callable[[Any], str], what: str, empty: str = "") -> None:
    """Print a long listing: one JSON document ``{name: [...], "more": N}`` with --json,
    one object per line with --jsonl, else one text line per item (``line`` gets the
    terminal-safe JSON form); then, when it was cut, :func:`more_note`."""
    from ..core.results import to_json

    if as_json and as_jsonl:
        raise click.UsageError("--json and --jsonl contradict each other: give one")
    data = to_json(items)
    if as_json:
        click.echo(textsafe.dumps({name: data, "more": more}, indent=2))
    elif as_jsonl:
        for item in data:
            click.echo(textsafe.dumps(item))
    elif data:
        for item in shown(data):
            click.echo(line(item))
    elif empty:
        click.echo(empty)
    more_note(more, what)


def emit(data: Any, as_json: bool, text: str | Callable[[Any], str]) -> None:
    """Print ``data`` (a result, or JSON-ready data) as JSON, or as text: a ``text``
    callable is given the JSON form with every string made terminal-safe (``shown``), so
    no field can forge a line or hide characters."""
    from ..core.results import to_json

    data = to_json(data)
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


def value_text(v: Any) -> str:
    return "(absent)" if v is None else display_value(v)


def result_text(result: dict[str, Any], when: Callable[[str | None], str]) -> str:
    op, commit = result["op"], result["commit"][:12]
    if op == "set":
        new, old = result["new"], result["old"]
        before = display_value(old["value"]) if old else "(absent)"
        exp = f", expires {when(new['expires_at'])}" if new["expires_at"] else ""
        return (f"{commit} set {result['key']}: {before} -> {display_value(new['value'])}{exp} "
                f"({result['live_keys']}/{result['max_keys']} live keys)")
    if op == "clear":
        return f"{commit} cleared {result['key']} (was {display_value(result['old']['value'])})"
    if op == "handoff":
        cut = " (the note was cut to fit; see --json)" if result["truncated"] else ""
        return f"{commit} handoff left{cut}"
    return f"{commit} {op} committed"


def finish(obj: Ctx, result: WriteResult, as_json: bool) -> None:
    """Print a write's result: its warnings on stderr, then the result (times in the
    agent's zone)."""
    for warning in result.warnings:
        warn(warning)
    if result.truncated:
        click.echo("gitstate: note: the plain handoff note was collapsed and cut to fit",
                   err=True)
    emit(result, as_json, lambda d: result_text(d, obj.when))
