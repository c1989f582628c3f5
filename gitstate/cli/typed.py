"""Typed-state commands: ``schema show | check | set`` and ``tools``. Registered on the main
click group by importing this module."""

from __future__ import annotations

from pathlib import Path

import click

from ..core.errors import Refused, UsageError
from ..core.layout import SCHEMA_FILE
from .context import Ctx, emit, examples, finish, json_option, parse_json_value


@examples(
    "gitstate schema show",
    "gitstate schema check schema.yaml",
    "gitstate schema set schema.yaml --reason \"v2: stop losses are numbers\"",
)
@click.group()
def schema() -> None:
    """The typed-state schema (schema.yaml in the state repository)."""


@examples("gitstate schema show", "gitstate schema show --rev HEAD~1")
@schema.command("show")
@click.option("--rev", default=None, help="Show the schema at this revision.")
@json_option
@click.pass_obj
def schema_show(obj: Ctx, rev: str | None, as_json: bool) -> None:
    """Print schema.yaml exactly as committed (comments included)."""
    from ..audit.views import resolve

    with obj.repo() as repo:
        commit = resolve(repo, rev) if rev else repo.head()
        data = repo.store.read_file(commit, SCHEMA_FILE)
    if data is None:
        raise Refused("no schema: keys are untyped (see docs/typed-state.md)",
                      rule="schema.none")
    if as_json:
        emit({"commit": commit, "schema": data.decode("utf-8")}, True, "")
        return
    click.echo(data.decode("utf-8"), nl=False)


@examples("gitstate schema check", "gitstate schema check new-schema.yaml --json")
@schema.command("check")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.pass_obj
def schema_check(obj: Ctx, file: Path | None, as_json: bool) -> None:
    """Check the state against HEAD's schema, or against FILE before setting it.

    Exit 1 when a live key breaks the schema. Expired keys written under an older schema
    are listed but do not fail the check.
    """
    from ..core.schemafile import parse_schema

    candidate = parse_schema(_read(file)) if file is not None else None
    with obj.repo() as repo:
        report = repo.check_schema(candidate)
    emit(report, as_json, lambda data: "\n".join(
        [f"schema version {data['schema']}"] + [f"live: {p}" for p in data["live"]]
        + [f"expired (kept, not injected): {p}" for p in data["expired"]]))
    if report.live:
        raise Refused(f"{len(report.live)} live key(s) break the schema",
                      rule="schema.violations")


@examples("gitstate schema set schema.yaml --reason \"v2: stop losses are numbers\"")
@schema.command("set")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--reason", "-r", required=True, help="Why: becomes the commit message.")
@json_option
@click.pass_obj
def schema_set(obj: Ctx, file: Path, reason: str, as_json: bool) -> None:
    """Commit FILE as schema.yaml (one audited commit; its version must increase).

    Refused, listing the violations, when the live state would not satisfy it.
    """
    with obj.repo() as repo:
        result = repo.set_schema(_read(file), reason)
    finish(obj, result, as_json)


def _read(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {file}: {exc}", rule="usage.file") from exc


@examples(
    "gitstate tools",
    "gitstate tools --can-run place_order",
    "gitstate tools --can-run refund --args-json '{\"ticket\": \"T-1\", \"amount\": 120}'",
    exits="Exit: 0 ok (with --can-run: the tool may run); 1 with --can-run: it may not "
          "(tools.not_allowed, approval.required), or a bad config.toml; 2 a usage error or an "
          "uninitialised directory; 3 the repository cannot be used.",
)
@click.command()
@click.option("--can-run", "tool", help="Exit 0 if TOOL is allowed in the current phase "
              "(and, for a tool that needs an approval, approved for --args-json), else 1. "
              "Advisory: another process may spend the approval next; run the call with "
              "`gitstate spend`.")
@click.option("--args-json", metavar="JSON", help="The call's arguments (a JSON object): a "
              "tool schema.yaml's `approvals` names runs only with an approval of exactly these.")
@json_option
@click.pass_obj
def tools(obj: Ctx, tool: str | None, args_json: str | None, as_json: bool) -> None:
    """The tools the current phase allows (from the schema's phase key and tool lists)."""
    args = parse_json_value(args_json, "--args-json") if args_json is not None else None
    with obj.repo() as repo:
        allowed = repo.allowed_tools()
        schema = repo.schema()
        phase = schema.phase(repo.state(), repo.state().live(repo.now())) if schema else None
        verdict = repo.approvals.verdict(tool, args) if tool is not None and \
            schema is not None and tool in schema.approvals else None
    if tool is not None:
        ok = allowed is None or tool in allowed
        if ok and verdict is not None and (args is None or not verdict.ok):
            why = "--args-json is needed" if args is None else verdict.reason
            emit({"tool": tool, "allowed": False, "phase": phase, "approval": why}, as_json,
                 f"{tool}: not allowed: it needs an approval ({why})")
            raise Refused(f"{tool} needs an approval of its exact arguments: {why}",
                          rule="approval.required")
        emit({"tool": tool, "allowed": ok, "phase": phase,
              "approval": verdict.approval_id if verdict else None}, as_json,
             f"{tool}: {'allowed' if ok else 'not allowed'} in phase {phase}"
             + (f" (approval {verdict.approval_id})" if verdict and ok else ""))
        if not ok:
            raise Refused(f"{tool} is not allowed in phase {phase}; allowed: "
                          f"{', '.join(allowed or [])}", rule="tools.not_allowed")
        return
    emit({"phase": phase, "allowed_tools": allowed}, as_json,
          "no phases declared: every tool is allowed" if allowed is None else
          f"phase {phase}: {', '.join(allowed) or '(none)'}")
