"""The auditor's read-only views: log, show, diff, blame, point-in-time state.

All of them read the projection (the log as JSONL) and trailers, never re-diff trees, except
``show --patch``, which asks the store for the raw git diff of one commit. ``verify``, which
re-derives everything from git to compare, is gitstate/audit/integrity.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..core.errors import UsageError
from ..core.localtime import local_text, parse_given_time
from ..core.model import Handoff, State, format_time, parse_time
from ..core.records import ChangeRecord, HistoryEntry
from ..core.trailers import NotAGitstateCommit, parse_message
from ..core.values import changes as value_changes
from ..core.values import is_structured
from ..history.projection import record

if TYPE_CHECKING:
    from ..api.repo import StateRepo

_REL = re.compile(r"(?P<base>HEAD|main|@)?(?P<ops>(?:[~^][0-9]*)*)")
_HEX = re.compile(r"[0-9a-f]{4,40}")


def resolve(repo: StateRepo, rev: str) -> str:
    """A full commit id for ``rev``: a full or abbreviated id, HEAD, main, HEAD~N, HEAD^."""
    rev = rev.strip()
    base, ops = rev, ""
    match = _REL.fullmatch(rev)
    if match and (match.group("base") or match.group("ops")):
        base, ops = match.group("base") or "HEAD", match.group("ops")
    if base in ("HEAD", "main", "@"):
        commit = repo.head()
    elif _HEX.fullmatch(base.lower()):
        commit = _by_prefix(repo, base.lower())
    else:
        raise UsageError(f"cannot read revision {rev!r}: use a commit id, HEAD or HEAD~N",
                         rule="usage.rev")
    for op in re.findall(r"[~^][0-9]*", ops):
        steps = int(op[1:]) if op[1:] else 1
        if op[0] == "^" and steps != 1:
            raise UsageError("only first parents exist in a gitstate history",
                             rule="usage.rev")
        for _ in range(steps):
            parents = repo.store.parents(commit)
            if not parents:
                raise UsageError(f"{rev!r} goes past the first commit", rule="usage.rev")
            commit = parents[0]
    return commit


def _by_prefix(repo: StateRepo, prefix: str) -> str:
    if len(prefix) == 40:
        repo.store.commit_info(prefix)  # raises when missing
        return prefix
    found = {r["commit"] for r in repo.reader.full_history() if r["commit"].startswith(prefix)}
    if len(found) == 1:
        return str(found.pop())
    if not found:
        raise UsageError(f"no commit starts with {prefix!r}", rule="usage.rev")
    raise UsageError(f"{prefix!r} is ambiguous: {', '.join(sorted(found)[:5])}",
                     rule="usage.rev")


def commit_at(repo: StateRepo, moment: datetime) -> str:
    """The commit that was HEAD at ``moment``: the newest in the chain made at or before it."""
    stamp = moment.astimezone(UTC)
    for rec in repo.reader.history_iter():
        if parse_time(rec["time"]) <= stamp:
            return str(rec["commit"])
    from ..system.config import resolve_tz

    raise UsageError(f"no state existed yet at "
                     f"{local_text(format_time(moment), resolve_tz(repo.config.timezone))}",
                     rule="usage.at")


def resolve_at(repo: StateRepo, at: str) -> tuple[str, datetime]:
    """``--at TIME|REV``: the commit and the moment to evaluate expiry at. A time without an
    offset is in the agent's zone (``localtime.parse_given_time``)."""
    from ..system.config import resolve_tz

    try:
        moment = parse_given_time(at, resolve_tz(repo.config.timezone), "--at", "usage.at")
    except UsageError:
        if re.match(r"[0-9]{4}-[0-9]{2}", at.strip()):  # meant as a time, not a revision
            raise
        commit = resolve(repo, at)
        return commit, datetime.fromtimestamp(repo.store.commit_info(commit).time, UTC)
    return commit_at(repo, moment), moment


def log(repo: StateRepo, key: str | None = None, limit: int | None = None,
        since: datetime | None = None) -> Iterator[HistoryEntry]:
    """Changes newest first, optionally for one key and since a time (typed entries)."""
    return map(HistoryEntry.of, changes(repo, key, limit, since))


def changes(repo: StateRepo, key: str | None = None, limit: int | None = None,
            since: datetime | None = None) -> Iterator[ChangeRecord]:
    """:func:`log` as the projection's records (what the CLI's ``log --json`` prints)."""
    needle = None if key is None else f'"key": "{key}"'.encode()
    count = 0
    for rec in repo.reader.history_iter(needle):
        if key is not None and rec.get("key") != key and key not in (rec.get("adopt") or {}).get(
                "keys", {}):
            continue
        if since is not None and parse_time(rec["time"]) < since:
            break
        yield rec
        count += 1
        if limit is not None and count >= limit:
            break


def keys_ever(repo: StateRepo) -> set[str]:
    """Every key any change touched (for telling a mistyped key from a quiet one)."""
    keys: set[str] = set()
    for rec in repo.reader.history_iter():
        keys.update([rec["key"]] if rec["key"] else (rec.get("adopt") or {}).get("keys", {}))
    return keys


def blame(repo: StateRepo) -> dict[str, dict[str, Any]]:
    """For every current key, the newest change that touched it (which set its value)."""
    state = repo.state()
    wanted = set(state.keys)
    found: dict[str, ChangeRecord] = {}
    for rec in repo.reader.history_iter():
        key = rec["key"]
        touched = {key} if key else set((rec.get("adopt") or {}).get("keys", {}))
        for key in touched & (wanted - found.keys()):
            found[key] = rec
        if found.keys() == wanted:
            break
    return {k: {**state.keys[k].to_dict(), "commit": found[k]["commit"],
                "time": found[k]["time"], "actor": found[k]["actor"],
                "reason": found[k]["reason"], "op": found[k]["op"]}
            for k in sorted(found)}


@dataclass
class StateDiff:
    """Key-level differences between two states."""

    added: dict[str, Any] = field(default_factory=dict)
    removed: dict[str, Any] = field(default_factory=dict)
    changed: dict[str, dict[str, Any]] = field(default_factory=dict)
    expiry_changed: dict[str, dict[str, Any]] = field(default_factory=dict)
    handoff: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"added": self.added, "removed": self.removed, "changed": self.changed,
                "expiry_changed": self.expiry_changed, "handoff": self.handoff}

    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.expiry_changed
                    or self.handoff)


def diff_states(a: State, b: State) -> StateDiff:
    """What changed from ``a`` to ``b``, key by key, and the handoff."""
    out = StateDiff()
    for key in sorted(a.keys.keys() | b.keys.keys()):
        old, new = a.keys.get(key), b.keys.get(key)
        if old is None and new is not None:
            out.added[key] = new.to_dict()
        elif new is None and old is not None:
            out.removed[key] = old.to_dict()
        elif old is not None and new is not None:
            if type(old.value) is not type(new.value) or old.value != new.value:
                out.changed[key] = {"old": old.to_dict(), "new": new.to_dict()}
                if is_structured(old.value) and type(old.value) is type(new.value):
                    # name what changed inside: facts.window_ok, plan[2].done ...
                    out.changed[key]["elements"] = [
                        {"path": path, "old": o, "new": n}
                        for path, o, n in value_changes(old.value, new.value, key)]
            elif old.expires_at != new.expires_at:
                out.expiry_changed[key] = {"old": old.expires_at, "new": new.expires_at}
    if a.handoff != b.handoff:
        out.handoff = {"old": _ho(a.handoff), "new": _ho(b.handoff)}
    return out


def _ho(handoff: Handoff | None) -> dict[str, Any] | None:
    return handoff.to_dict() if handoff else None


def show(repo: StateRepo, commit: str, patch: bool = False) -> dict[str, Any]:
    """One commit: its record, its trailers, the key-level change, optionally the diff."""
    info = repo.store.commit_info(commit)
    rec = record(info)
    before = repo.state_at(info.parents[0]) if info.parents else State()
    after = repo.state_at(commit)
    out = {**rec, "author": info.author, "changes": diff_states(before, after).to_dict(),
           "trailers": _trailers(info.message)}
    if patch:
        out["patch"] = repo.store.patch(commit)
    return out


def _trailers(message: bytes) -> list[list[str]]:
    try:
        return [[f"Gitstate-{n}", v] for n, v in parse_message(message).trailers()]
    except NotAGitstateCommit:
        return []
