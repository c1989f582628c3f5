"""Commands that write: init, set, clear, handoff, revert, adopt (one audited commit
each, or a refusal that names its rule)."""

from __future__ import annotations

import click

from ..core.errors import Refused, UsageError
from .context import (
    EXITS,
    Ctx,
    ValueArgs,
    emit,
    examples,
    finish,
    json_option,
    parse_json_value,
    parse_value,
    value_text,
    warn,
)


@examples("gitstate init", "gitstate --agent-dir ~/agents/trader init --json")
@click.command()
@json_option
@click.pass_obj
def init(obj: Ctx, as_json: bool) -> None:
    """Create <agent dir>/state as a git repository on branch main (idempotent)."""
    from ..api.repo import StateRepo

    with StateRepo.init(obj.agent_dir, writer="human") as repo:
        head = repo.head()
        emit({"ok": True, "state_dir": str(repo.state_dir), "head": head}, as_json,
              f"initialised {repo.state_dir} (main at {head[:12]})")


@examples(exits=EXITS)
@click.command("set", cls=ValueArgs)
@click.argument("key")
@click.argument("value", required=False)
@click.option("--reason", "-r", required=True, help="Why: becomes the commit message.")
@click.option("--ttl-hours", type=float, help="Expire after H hours (day-scoped rules).")
@click.option("--expect", help="Compare-and-swap: refuse unless HEAD holds this value.")
@click.option("--expect-absent", is_flag=True, help="Refuse unless the key is absent.")
@click.option("--string", "as_string", is_flag=True,
              help="Store VALUE as text even if it looks like a number or boolean.")
@click.option("--json-value", metavar="JSON",
              help="The value as JSON instead of VALUE: an array or object (or a scalar).")
@click.option("--expect-json", metavar="JSON",
              help="Compare-and-swap against a JSON value; structures compare by structure "
              "(object key order never matters).")
@click.option("--request-id", help="Idempotency key: a retry with the same id and arguments "
              "returns the first result without a second commit.")
@json_option
@click.pass_obj
def set_(obj: Ctx, key: str, value: str | None, reason: str, ttl_hours: float | None,
         expect: str | None, expect_absent: bool, as_string: bool, json_value: str | None,
         expect_json: str | None, request_id: str | None, as_json: bool) -> None:
    """Set KEY to VALUE, with a reason (one commit).

    \b
    gitstate set stop_loss.2317 262 --reason "break = exit" --ttl-hours 4.5
    gitstate set stop_loss.2317 257 --reason "review" --expect 262
    gitstate set facts --json-value '{"window_ok": true}' --reason "checked"
    gitstate set offset -5 --reason "a negative number is a value, as it is"
    gitstate set note -- -x --reason "any other VALUE starting with - follows --"
    """
    if (value is None) == (json_value is None):
        raise UsageError("give VALUE or --json-value JSON (one of them)", rule="usage.value")
    if json_value is not None and as_string:
        raise UsageError("--string applies to VALUE, not to --json-value", rule="usage.value")
    if sum(x is not None and x is not False for x in (expect, expect_json, expect_absent)) > 1:
        raise UsageError("--expect, --expect-json and --expect-absent exclude each other",
                         rule="usage.expect")
    from ..write.planners import UNSET, Expected

    expected: Expected = None if expect_absent else (
        parse_value(expect) if expect is not None else
        parse_json_value(expect_json, "--expect-json") if expect_json is not None else UNSET)
    new = parse_json_value(json_value, "--json-value") if json_value is not None else \
        parse_value(value or "", as_string)
    with obj.repo() as repo:
        result = repo.set(key, new, reason, ttl_hours=ttl_hours, expected=expected,
                          request_id=request_id)
        finish(obj, result, as_json)


@examples(
    "gitstate clear stop_loss.2317 --reason \"rule retired\"",
    "gitstate clear stop_loss.2317 --reason \"retired\" --expect 262",
)
@click.command()
@click.argument("key")
@click.option("--reason", "-r", required=True, help="Why: becomes the commit message.")
@click.option("--expect", help="Compare-and-swap: refuse unless HEAD holds this value.")
@click.option("--request-id", help="Idempotency key (see `gitstate set --help`).")
@json_option
@click.pass_obj
def clear(obj: Ctx, key: str, reason: str, expect: str | None, request_id: str | None,
          as_json: bool) -> None:
    """Retire KEY (its history stays in the log)."""
    from ..write.planners import UNSET

    with obj.repo() as repo:
        result = repo.clear(key, reason,
                            expected=parse_value(expect) if expect is not None else UNSET,
                            request_id=request_id)
        finish(obj, result, as_json)


@examples(
    "gitstate handoff \"books checked\" --reason \"end of shift\"",
    "gitstate handoff \"mid-patrol\" --status continue --next-steps \"report the total\"",
)
@click.command()
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
        finish(obj, result, as_json)


@examples(
    "gitstate revert HEAD --reason \"the 14:20 line was a typo\"",
    "gitstate revert --key stop_loss.2317 --reason \"back to the last value\"",
)
@click.command()
@click.argument("rev", required=False)
@click.option("--key", help="Revert the latest change of this key instead of REV.")
@click.option("--reason", "-r", required=True, help="Why: becomes the commit message.")
@click.option("--force", is_flag=True, help="Revert even where keys changed since REV.")
@json_option
@click.pass_obj
def revert(obj: Ctx, rev: str | None, key: str | None, reason: str, force: bool,
           as_json: bool) -> None:
    """Undo what one commit changed, as a new commit (history is never rewritten).

    Refused (exit 1, listing the conflicts) where keys no longer hold REV's values.
    """
    if (rev is None) == (key is None):
        raise UsageError("give either REV or --key KEY", rule="usage.revert")
    with obj.repo() as repo:
        if key is not None:
            from ..audit.views import changes as log_view

            latest = next(log_view(repo, key=key, limit=1), None)
            if latest is None:
                raise Refused(f"{key!r} has no change to revert", rule="revert.no_change")
            commit = str(latest["commit"])
        else:
            from ..audit.views import resolve

            commit = resolve(repo, rev or "HEAD")
        result = repo.revert(commit, reason, force=force)
    for c in result.overridden:
        held = (c.current or {}).get("value", c.current)
        warn(f"--force overrode {c.key or 'the handoff'} "
             f"(it held {value_text(held) if not isinstance(held, dict) else held})")
    emit(result, as_json, f"{result.commit[:12]} reverted {commit[:12]}")


@examples(exits=EXITS)
@click.command()
@click.option("--reason", "-r", help="Why the hand edit is right (required unless --discard).")
@click.option("--discard", is_flag=True, help="Move the hand edit aside and restore HEAD.")
@json_option
@click.pass_obj
def adopt(obj: Ctx, reason: str | None, discard: bool, as_json: bool) -> None:
    """Commit a hand edit of working_state.json as one audited, validated change.

    \b
    gitstate adopt --reason "raised the cap by hand after the call"
    gitstate adopt --discard      # keep the edit under .git/gitstate-hand-edits, restore HEAD

    Exit 1 with adopt.invalid when the edit is no valid state (fix it, or --discard), and
    with adopt.nothing when there is no hand edit to adopt or to discard.
    """
    if not discard and not reason:
        raise UsageError("--reason is required to adopt a hand edit", rule="usage.reason")
    with obj.repo() as repo:
        if discard:
            kept = repo.discard()
            emit(kept, as_json, "hand edit moved aside to " + ", ".join(kept.kept))
            return
        assert reason is not None
        result = repo.adopt(reason)
    finish(obj, result, as_json)
