"""The auditor's and operator's commands: log, show, diff, blame, verify,
history, gc. The audit module (and the repository) load when a command runs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from ..core import textsafe
from ..core.errors import Refused, did_you_mean
from .context import (
    EXITS,
    Ctx,
    emit,
    examples,
    json_option,
    jsonl_option,
    limit_options,
    limited,
    listing,
    shown,
    time_help,
    value_text,
)

When = Callable[[str | None], str]


def _log_line(rec: dict[str, Any], when: When) -> str:
    op, key = rec["op"], rec.get("key")
    if op in ("set", "clear") and key:
        new = value_text(rec["new"]) if op == "set" else "(cleared)"
        change = f"{key}: {value_text(rec['old'])} -> {new}"
        if rec.get("expires_at"):
            change += f" (expires {when(rec['expires_at'])})"
    elif op == "handoff":
        change = "handoff"
    elif op == "adopt":
        change = "adopt " + ", ".join(sorted((rec.get("adopt") or {}).get("keys", {})))
    else:
        change = op
    reverts = f" [reverts {rec['reverts'][:12]}]" if rec.get("reverts") else ""
    first = (rec.get("reason") or "").splitlines()[0] if rec.get("reason") else ""
    return (f"{when(rec['time'])}  {rec['commit'][:12]}  {change}{reverts}  by {rec['actor']}: "
            f"{first}")


@examples(exits=EXITS)
@click.command()
@click.option("--key", help="Only changes of this key.")
@limit_options
@click.option("--since", help=time_help("Only changes at or after this ISO 8601 time."))
@click.option("--thread", help="A LangGraph checkpoint thread's commits instead "
              "(gitstate.langgraph; checkpoints, tombstones).")
@click.option("--ns", default="", help="(--thread) The checkpoint namespace (default: root).")
@click.option("--refused", is_flag=True, help="The refused attempts instead (the refusal "
              "journal, refs/gitstate/refusals): rule, op, key, attempted and expected "
              "value, the value in HEAD, actor, reason, time.")
@json_option
@jsonl_option
@click.pass_obj
def log(obj: Ctx, key: str | None, limit: int | None, show_all: bool, since: str | None,
        thread: str | None, ns: str, refused: bool, as_json: bool, as_jsonl: bool) -> None:
    """The supersession chain, newest first: time, key, old -> new, actor, reason.

    The newest 50 unless --limit N or --all; a cut listing ends with a line on stderr
    saying how many more there are. With --json, one document {"changes": [...], "more":
    N} (the fields of working_state_history.jsonl); --jsonl streams one change per line.
    With --refused, the writes a rule refused, newest first (docs/auditing.md).

    \b
    gitstate log --key stop_loss.2317 -n 20
    gitstate log --all --jsonl
    gitstate log --refused --key stop_loss.2317

    Exit 1 (log.unknown_key, with the nearest key) when --key names a key no change ever
    touched.
    """
    from ..audit.views import changes

    if refused:
        _refused_log(obj, key, (limit, show_all), since, (as_json, as_jsonl))
        return
    if thread is not None:
        from ..langgraph.view import log as thread_log

        rows, more = limited(thread_log(obj.agent_dir, thread, ns), limit, show_all)
        listing("commits", rows, more, as_json, as_jsonl, lambda r: _thread_line(r, obj),
                "commits")
        return
    with obj.repo() as repo:
        recs, more = limited(changes(repo, key=key, since=obj.time(since, "--since")), limit,
                             show_all)
        if key is not None and not recs:
            _known_key(repo, key, set())
    listing("changes", recs, more, as_json, as_jsonl, lambda r: _log_line(r, obj.when),
            "changes")


def _known_key(repo: Any, key: str, refused_keys: set[str]) -> None:
    """A --key that no change and no refused write ever named is refused, naming the
    nearest key; a real key with nothing to show is a quiet, empty answer."""
    from ..audit.views import keys_ever

    known = (keys_ever(repo) | refused_keys) - {""}
    if key not in known:
        raise Refused(f"no change or refused write of the key {key!r} was ever recorded."
                      + did_you_mean(key, known), rule="log.unknown_key", keys=sorted(known))


def _thread_line(r: dict[str, Any], obj: Ctx) -> str:
    when = datetime.fromtimestamp(r["time"], UTC).astimezone(obj.zone).isoformat()
    if "checkpoint" in r:
        return (f"{when}  {r['commit'][:12]}  checkpoint {r['checkpoint']}  step "
                f"{r.get('step')} ({r.get('source')})  parent "
                f"{r.get('parent_checkpoint') or '-'}"
                + (f"  run {r['run_id']}" if r.get("run_id") else ""))
    return f"{when}  {r['commit'][:12]}  {r['summary']}"


def _refused_line(r: dict[str, Any], obj: Ctx) -> str:
    attempted = "" if r["attempted"] is None else f" {textsafe.dumps(r['attempted'])[:80]}"
    held = "" if r["head_value"] is None else f" (HEAD: {textsafe.dumps(r['head_value'])[:40]})"
    return (f"{obj.when(r['time'])}  {r['commit'][:12]}  refused {r['op'] or 'write'} "
            f"{r['key'] or ''}{attempted}{held} [{r['rule']}] by "
            f"{r['actor'] or r['writer']}: {r['reason'] or ''}")


def _refused_log(obj: Ctx, key: str | None, bound: tuple[int | None, bool], since: str | None,
                 formats: tuple[bool, bool]) -> None:
    from ..core.model import parse_time
    from ..history import refusals

    moment = obj.time(since, "--since")

    def wanted(store: Any) -> Any:
        for rec in refusals.entries(store):
            if rec.get("damaged"):  # named, then left out: its fields are not trusted
                click.echo(f"warning: refusal record {rec['commit'][:12]} skipped: "
                           f"{rec.get('problem') or 'not a refusal record'}", err=True)
                continue
            if key is not None and rec.get("key") != key:
                continue
            if moment is not None and parse_time(rec["time"]) < moment:
                break  # newest first
            yield rec

    with obj.repo() as repo:
        recs, more = limited(wanted(repo.store), *bound)
        if key is not None and not recs:
            _known_key(repo, key, {str(r.get("key") or "") for r in
                                   refusals.entries(repo.store) if not r.get("damaged")})
    listing("refused", recs, more, *formats, lambda r: _refused_line(r, obj),
            "refused attempts")


THREAD_HELP = ("A LangGraph checkpoint thread instead of main: REV is a checkpoint id or "
               "an abbreviated commit of that thread (default: its newest checkpoint).")


@examples("gitstate show", "gitstate show HEAD~2 --patch", "gitstate show --thread refund-O-104")
@click.command()
@click.argument("rev", default="HEAD")
@click.option("--patch", is_flag=True, help="Also print the raw git diff.")
@click.option("--thread", help=THREAD_HELP)
@click.option("--ns", default="", help="(--thread) The checkpoint namespace (default: root).")
@json_option
@click.pass_obj
def show(obj: Ctx, rev: str, patch: bool, thread: str | None, ns: str,
         as_json: bool) -> None:
    """The change one commit made, key by key (REV: id, abbreviated id, HEAD~N).

    With --thread: one checkpoint (its metadata, the channels it changed, every channel's
    value, its pending writes)."""
    if thread is not None:
        from ..langgraph.view import show as show_checkpoint

        data = show_checkpoint(obj.agent_dir, thread, None if rev == "HEAD" else rev, ns)
        emit(data, as_json, lambda d: "\n".join([
            f"checkpoint {d['checkpoint']} ({d['commit'][:12]}) of thread {d['thread']}",
            f"parent {d['parent_checkpoint'] or '-'}; step {d['metadata'].get('step')} "
            f"({d['metadata'].get('source')})",
            "changed: " + (", ".join(d["changed_channels"]) or "none"),
            *(f"  {k} = {value_text(v)}" for k, v in d["channels"].items())]))
        return
    from ..audit.views import resolve
    from ..audit.views import show as show_view

    with obj.repo() as repo:
        data = show_view(repo, resolve(repo, rev), patch=patch)
    if as_json:
        emit(data, True, "")
        return
    # the reason is shown line by line, indented as git log does, each line terminal-safe
    reason = ["    " + textsafe.visible(line) for line in data["reason"].split("\n")]
    raw_patch = str(data.get("patch") or "")
    data = shown(data)
    lines = [f"commit {data['commit']}", f"author {data['author']}",
             f"time   {obj.when(data['time'])}", f"actor  {data['actor']}", "", *reason, ""]
    lines += _diff_lines(data["changes"], obj.when)
    lines += [""] + [f"{n}: {v}" for n, v in data["trailers"]]
    if patch:
        lines += ["", *(textsafe.visible(line) for line in raw_patch.rstrip("\n").split("\n"))]
    click.echo("\n".join(lines))


def _diff_lines(d: dict[str, Any], when: When) -> list[str]:
    out = []
    for key, e in d["added"].items():
        out.append(f"+ {key} = {value_text(e['value'])}  ({e['reason'].splitlines()[0]})")
    for key, e in d["removed"].items():
        out.append(f"- {key} (was {value_text(e['value'])})")
    for key, c in d["changed"].items():
        reason = c['new']['reason'].splitlines()[0]
        if "elements" in c:  # a structured value: each element that changed, by its path
            out.append(f"~ {key}: {len(c['elements'])} element(s) changed  ({reason})")
            out += [f"    {e['path']}: {value_text(e['old'])} -> {value_text(e['new'])}"
                    for e in c["elements"]]
            continue
        out.append(f"~ {key}: {value_text(c['old']['value'])} -> {value_text(c['new']['value'])}  "
                   f"({reason})")
    for key, c in d["expiry_changed"].items():
        out.append(f"~ {key}: expiry {when(c['old']) or 'none'} -> {when(c['new']) or 'none'}")
    if d["handoff"]:
        new = d["handoff"]["new"]
        out.append(f"~ handoff: {new['note'] if new else '(removed)'}")
    return out or ["(no key-level change)"]


@examples("gitstate diff HEAD~3", "gitstate diff HEAD~3 HEAD --json")
@click.command()
@click.argument("rev_a")
@click.argument("rev_b", default="HEAD")
@click.option("--thread", help=THREAD_HELP)
@click.option("--ns", default="", help="(--thread) The checkpoint namespace (default: root).")
@json_option
@click.pass_obj
def diff(obj: Ctx, rev_a: str, rev_b: str, thread: str | None, ns: str,
         as_json: bool) -> None:
    """Key-level differences between the states at REV_A and REV_B (default HEAD).

    With --thread: the channels whose values differ between two checkpoints."""
    if thread is not None:
        from ..langgraph.view import diff as diff_checkpoints

        data = diff_checkpoints(obj.agent_dir, thread, rev_a,
                                None if rev_b == "HEAD" else rev_b, ns)
        emit(data, as_json, lambda d: "\n".join(
            f"{k}: {value_text(c['old'])} -> {value_text(c['new'])}"
            for k, c in d["channels"].items()) or "(no channel differs)")
        return
    from ..audit.views import diff_states, resolve

    with obj.repo() as repo:
        a, b = resolve(repo, rev_a), resolve(repo, rev_b)
        d = diff_states(repo.state_at(a), repo.state_at(b)).to_dict()
    emit({"from": a, "to": b, **d}, as_json,
         lambda safe: "\n".join(_diff_lines(safe, obj.when)))


@examples("gitstate blame", "gitstate blame --json")
@click.command()
@json_option
@click.pass_obj
def blame(obj: Ctx, as_json: bool) -> None:
    """For every current key: the commit that set its value, when, who and why."""
    from ..audit.views import blame as blame_view

    with obj.repo() as repo:
        data = blame_view(repo)
    def text(safe: dict[str, Any]) -> str:
        return "\n".join(f"{k}  = {value_text(e['value'])}  {e['commit'][:12]} "
                         f"{obj.when(e['time'])} {e['actor']}: {e['reason']}"
                         for k, e in safe.items()) or "(no keys)"

    emit(data, as_json, text)


@examples(
    "gitstate verify",
    "gitstate verify --no-git --json",
    exits="Exit: 0 every check passed; 1 a check failed (verify.failed; each failure says what "
          "to do); 2 an uninitialised directory; 3 the repository cannot be opened.",
)
@click.command()
@click.option("--no-git", is_flag=True, help="Skip `git fsck` even when git is installed.")
@json_option
@click.pass_obj
def verify(obj: Ctx, no_git: bool, as_json: bool) -> None:
    """Check objects, working tree, projection, trailer replay, reasons, rewritten history.

    Exit 1 when any check fails; each failure says what to do.
    """
    from ..audit.integrity import verify as verify_checks

    with obj.repo() as repo:
        checks = verify_checks(repo, use_git=not no_git)
    ok = all(c.ok for c in checks)
    if as_json:
        emit({"ok": ok, "checks": [c.to_dict() for c in checks]}, True, "")
    else:
        for c in checks:
            mark = "ok  " if c.ok else "FAIL"
            click.echo(f"{mark} {c.name}" + (f": {textsafe.visible(c.detail)}"
                                              if c.detail else ""))
            if not c.ok:
                click.echo(f"     -> {c.remedy}")
    if not ok:
        failed = ", ".join(c.name for c in checks if not c.ok)
        raise Refused(f"verify failed: {failed}", rule="verify.failed")


@examples("gitstate history", "gitstate history --rebuild")
@click.command()
@click.option("--rebuild", is_flag=True, help="Rewrite working_state_history.jsonl from git.")
@json_option
@click.pass_obj
def history(obj: Ctx, rebuild: bool, as_json: bool) -> None:
    """Maintain the JSONL projection of the log (see also `gitstate log`)."""
    with obj.repo() as repo:
        path = str(repo.projection.path)
        if rebuild:
            count = repo.rebuild_history()
            emit({"path": path, "rebuilt": True, "commits": count}, as_json,
                 f"rebuilt {path} from {count} commits")
        else:
            emit({"path": path, "rebuilt": False}, as_json, path)


@examples("gitstate repair-journal", "gitstate repair-journal --json")
@click.command("repair-journal")
@json_option
@click.pass_obj
def repair_journal(obj: Ctx, as_json: bool) -> None:
    """Journal the refused writes whose record could not be written (a full disk, the
    journal's lock unusable), kept meanwhile in state/.git/gitstate-refusals.failed, and
    remove that file: `verify`'s refusals check passes again. A failure of which only the
    count survived (the disk full even for that) is acknowledged and dropped.

    Exit 0 once nothing is left to journal; 3 when the journal still cannot be written
    (what was not journaled stays for the next run).
    """
    from ..history import refusals
    from ..write.engine import identity

    with obj.repo() as repo:
        done, lost = refusals.repair(repo.store, identity(repo.config))
    emit({"journaled": done, "dropped": lost}, as_json, lambda d: (
        f"journaled {d['journaled']} refusal records that had failed"
        + (f"; {d['dropped']} failures kept only as a count were dropped" if d["dropped"]
           else "") if d["journaled"] or d["dropped"] else "nothing to repair"))


@examples("gitstate gc", "gitstate gc --json")
@click.command()
@click.option("--auto", is_flag=True, hidden=True, help="Run as automatic maintenance.")
@json_option
@click.pass_obj
def gc(obj: Ctx, auto: bool, as_json: bool) -> None:
    """Pack loose objects (about 12 KiB per commit loose, well under 1 KiB packed).

    Runs beside writers without taking the write lock; runs by itself in the background when
    [gitstate] gc_loose_objects (3000) is passed, unless auto_gc = false.
    """
    from ..write.maintenance import run_gc

    with obj.repo() as repo:
        figures = run_gc(repo.reader, auto=auto)
    emit(figures, as_json, f"packed: {figures['bytes_before']:,} -> {figures['bytes_after']:,} "
          f"bytes of objects for {figures['commits']:,} commits "
          f"({figures['bytes_per_commit']:,.0f} B/commit) in {figures['seconds']} s")
