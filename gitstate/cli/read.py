"""Commands that read the state: get, render, hook."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from ..core.model import display_value, format_time
from .context import (
    AT_HELP,
    Ctx,
    emit,
    examples,
    json_option,
    jsonl_option,
    limit_options,
    limited,
    listing,
    time_help,
    warn,
)


def _get_text(data: dict[str, Any], when: Callable[[str | None], str]) -> str:
    lines = [f"HEAD {data['head'][:12]}  {data['live_keys']}/{data['max_keys']} live keys, "
             f"section {data['section_bytes']}/{data['section_max_bytes']} bytes"]
    for key, e in data["keys"].items():
        flag = " [expired]" if e["expired"] else ""
        exp = f"  expires {when(e['expires_at'])}" if e["expires_at"] else ""
        lines.append(f"  {key} = {display_value(e['value'])}{flag}  (set {when(e['set_at'])} by "
                     f"{e['actor']}: {e['reason']}){exp}")
    if not data["keys"]:
        lines.append("  (no keys)")
    ho = data["handoff"]
    if ho:
        status = f" [{ho['status']}]" if ho["status"] else ""
        lines.append(f"handoff{status} ({when(ho['left_at'])}): {ho['note']}")
        for name in ("next_steps", "evidence", "blocker"):
            if ho.get(name):
                lines.append(f"  {name}: {ho[name]}")
    if data["history"]:
        lines.append("recent changes:")
        for h in data["history"]:
            what = f"{h['op']} {h['key']}" if h["key"] else h["op"]
            lines.append(f"  {h['commit'][:12]} {when(h['time'])} {what}: "
                         f"{h['reason'].splitlines()[0]}")
    return "\n".join(lines)


@examples("gitstate get", "gitstate get --at 2026-08-13T11:03 --json")
@click.command()
@click.option("--now", help=time_help("Evaluate expiry at this ISO 8601 time."))
@click.option("--at", "at", help=AT_HELP)
@click.option("--history", "history_n", type=click.IntRange(0, 1000), default=20,
              show_default=True, help="How many recent changes to include.")
@json_option
@click.pass_obj
def get(obj: Ctx, now: str | None, at: str | None, history_n: int, as_json: bool) -> None:
    """Show everything: keys (expired ones marked), the handoff, recent history."""
    with obj.repo() as repo:
        commit, moment = None, obj.time(now, "--now")
        if at is not None:
            from ..audit.views import resolve_at

            commit, at_moment = resolve_at(repo, at)
            moment = moment or at_moment
        view = repo.get(now=moment, history=history_n, commit=commit)
    for warning in view.warnings:
        warn(warning)
    emit(view, as_json, lambda d: _get_text(d, obj.when))


@examples(
    "gitstate render",
    "gitstate render --at 2026-08-13T11:03",
    "gitstate render --locale en --now 2026-08-13T14:00",
)
@click.command()
@click.option("--locale", type=click.Choice(["zh-TW", "en", "ja"]),
              help="Section language (default: [gitstate] locale, zh-TW).")
@click.option("--now", help=time_help("Render as a wake-up at this ISO 8601 time would see "
                                       "it."))
@click.option("--at", "at", help=AT_HELP)
@click.option("--run", "run_id", metavar="RUN_ID", help="Append this run's <state> block "
              "(goal, criteria met and unmet, steps, questions, approvals, budget; "
              "docs/runs.md).")
@click.option("--receipt", "receipt_id", metavar="ID", help="Reproduce the exact bytes a "
              "wake-up received (see `gitstate receipts`) and check their sha256.")
@click.pass_obj
def render(obj: Ctx, locale: str | None, now: str | None, at: str | None,
           run_id: str | None, receipt_id: str | None) -> None:
    """Print the section injected into a wake-up, and nothing else.

    Empty state (or [memory] working_state_enabled = false) prints nothing at all. With
    --run, the run's <state> block follows the section (the hooks do the same when
    GITSTATE_RUN names a run).
    """
    from ..wakeup.fastpath import run_fast, section

    if receipt_id is not None:
        if any(v is not None for v in (locale, now, at, run_id)):
            raise click.UsageError("--receipt reproduces the receipt's own locale, time, "
                                   "commit and run: give it alone")
        _reproduce(obj, receipt_id)
        return
    if run_id is not None:
        if at is not None:
            raise click.UsageError("--run shows the run as it is now; see `gitstate run show "
                                   "RUN --at`")
        moment = obj.time(now, "--now")
        opts = {**({"locale": locale} if locale else {}),
                **({"now": format_time(moment)} if moment else {}), "run": run_id}
        code = run_fast("render", str(obj.agent_dir), opts)
        if code:
            raise click.exceptions.Exit(code)
        return
    if at is not None:
        from ..audit.views import resolve_at

        with obj.repo() as repo:
            commit, moment = resolve_at(repo, at)
            sys.stdout.write(repo.render(now=obj.time(now, "--now") or moment, locale=locale,
                                         commit=commit))
        return
    text, warnings = section(obj.agent_dir, locale=locale, now=obj.time(now, "--now"))
    for warning in warnings:
        warn(warning)
    sys.stdout.write(text)


@examples(
    "gitstate hook claude-code --event SessionStart",
    "gitstate hook gemini --event SessionStart",
    "gitstate hook plain --max-chars 4000",
    exits="Exit: 0, also when there is nothing to print; 1 any error while it runs, on stderr "
          "(never 2, which would block a Claude Code or Gemini CLI prompt); 2 only for words "
          "it cannot parse (a RUNTIME that is not claude-code, gemini or plain).",
)
@click.command()
@click.argument("runtime", type=click.Choice(["claude-code", "gemini", "plain"]))
@click.option("--event", help="The hook event's name (default: read from stdin, as Claude "
              "Code and Gemini CLI pass it).")
@click.option("--locale", type=click.Choice(["zh-TW", "en", "ja"]))
@click.option("--run", "run_id", metavar="RUN_ID", envvar="GITSTATE_RUN",
              help="Append this run's <state> block [env: GITSTATE_RUN].")
@click.option("--max-chars", type=click.IntRange(1000), help="This runtime's budget for one "
              "injection (default: [gitstate] injection_max_chars; at most 10,000 for "
              "claude-code). A longer section has its handoff line replaced by a pointer; "
              "key lines are never cut.")
@click.pass_obj
def hook(obj: Ctx, runtime: str, event: str | None, locale: str | None,
         run_id: str | None, max_chars: int | None) -> None:
    """Print the section for an agent runtime's wake-up hook.

    \b
    claude-code  Claude Code's hook JSON (hookSpecificOutput.additionalContext), for
                 SessionStart and UserPromptSubmit command hooks; see hooks/claude-code/.
    gemini       Gemini CLI's hook JSON (the same shape), for its SessionStart and
                 BeforeAgent command hooks (`gitstate install gemini` writes them).
    plain        the section as plain text, for any gateway.

    Prints nothing at all when the state is empty or injection is disabled. Errors go to
    stderr with exit 1 (never 2, which would block the host's prompt).
    """
    from ..wakeup.fastpath import run_fast

    opts = {"runtime": runtime, **({"event": event} if event else {}),
            **({"locale": locale} if locale else {}),
            **({"max-chars": str(max_chars)} if max_chars else {}),
            **({"run": run_id} if run_id else {})}
    code = run_fast("hook", str(obj.agent_dir), opts)
    if code:
        raise click.exceptions.Exit(code)


def _reproduce(obj: Ctx, receipt_id: str) -> None:
    from ..core.errors import Refused
    from ..history import receipts
    from ..wakeup.fastpath import compose
    from ..wakeup.slowpath import rendered_again

    rec = receipts.find(str(obj.agent_dir / "state" / ".git"), receipt_id)
    if rec is None:
        raise Refused(f"no receipt {receipt_id!r} (see `gitstate receipts`)",
                      rule="receipt.unknown")
    text = compose(*rendered_again(obj.agent_dir, rec), str(rec["runtime"]), str(rec["event"]))
    if receipts.digest(text.encode()) != rec["sha256"]:
        raise Refused(f"the bytes rendered again from {str(rec['head'])[:12]} differ from "
                      f"what receipt {receipt_id} records (sha256 {rec['sha256'][:16]}...): "
                      "the history or the run was changed since", rule="receipt.mismatch")
    sys.stdout.write(text)


@examples("gitstate receipts -n 5", "gitstate receipts --since 2026-08-13T09:00 --json")
@click.command()
@click.option("--since", help=time_help("Only wake-ups at or after this ISO 8601 time."))
@limit_options
@json_option
@jsonl_option
@click.pass_obj
def receipts(obj: Ctx, since: str | None, limit: int | None, show_all: bool, as_json: bool,
             as_jsonl: bool) -> None:
    """What each wake-up received, newest first: time, main's commit, the sha256 and size
    of the bytes delivered, the runtime and event, the run.

    Every `gitstate hook ...` records one (state/.git/gitstate-receipts.jsonl, rotated at
    1 MiB). `gitstate render --receipt ID` reproduces those exact bytes.
    """
    from ..history import receipts as store

    items, more = limited(store.entries(str(obj.agent_dir / "state" / ".git"),
                                        obj.time(since, "--since")), limit, show_all)
    listing("receipts", items, more, as_json, as_jsonl, lambda r: (
        f"{obj.when(r['time'])}  {r['id']}  {str(r['head'] or '-')[:12]}  {r['runtime']}"
        f"{'/' + r['event'] if r['event'] else ''}  {r['bytes']} bytes  sha256 "
        f"{r['sha256'][:16]}" + (f"  run {r['run_id']}" if r["run_id"] else "")),
        "receipts", "(no receipts)")
