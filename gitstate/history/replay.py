"""Replay: what a commit's trailers do to the state. Pure.

Every commit gitstate makes records its effect completely in its trailers (the entry's set time
is the commit time), so folding :func:`apply_change` over the log from the first commit
reproduces HEAD's working_state.json byte for byte. ``verify`` and the server-side checks use
this to prove that the state and the audit trail tell the same story.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ..core.model import EMPTY, Entry, Handoff, State, format_time
from ..core.trailers import Change
from .approvals import retired, without


class ReplayError(ValueError):
    """A commit's trailers cannot be applied (an unknown op, a missing field)."""


def apply_change(state: State, change: Change, commit_time: int) -> State:
    """The state after a commit with these trailers, made at ``commit_time`` (epoch s);
    the approval records ``Gitstate-Retired`` names leave it (gitstate/history/approvals.py)."""
    after = _apply(state, change, commit_time)
    try:
        gone = retired(change.extra)
    except ValueError as exc:
        raise ReplayError(str(exc)) from exc
    return without(after, gone) if gone else after


def _apply(state: State, change: Change, commit_time: int) -> State:
    when = format_time(datetime.fromtimestamp(commit_time, UTC))
    op = change.op
    if op == "init":
        return EMPTY
    if op == "set":
        if change.key is None or change.new is None:
            raise ReplayError("set without Gitstate-Key or Gitstate-New")
        entry = Entry(change.new, when, change.reason, change.actor, change.expires_at)
        return state.with_key(change.key, entry)
    if op == "clear":
        if change.key is None:
            raise ReplayError("clear without Gitstate-Key")
        return state.with_key(change.key, None)
    if op == "handoff":
        if change.handoff is None:
            return state.with_handoff(None)
        return state.with_handoff(_handoff(change.handoff, when, change.actor))
    if op in ("adopt", "observe"):
        return _adopt(state, change, when)
    if op == "schema":
        return state  # the schema file changed; the state did not
    raise ReplayError(f"unknown Gitstate-Op {op!r}")


def _handoff(fields: dict[str, object], when: str, actor: str) -> Handoff:
    def text(name: str) -> str | None:
        value = fields.get(name)
        return value if isinstance(value, str) else None

    return Handoff(note=text("note") or "", left_at=when, actor=actor, status=text("status"),
                   next_steps=text("next_steps"), evidence=text("evidence"),
                   blocker=text("blocker"))


def _adopt(state: State, change: Change, when: str) -> State:
    """An adopted hand edit: ``Gitstate-Adopt`` lists each changed key (null = removed) and
    the handoff when it changed."""
    data = change.adopt or {}
    keys = data.get("keys", {})
    if not isinstance(keys, dict):
        raise ReplayError("Gitstate-Adopt keys must be an object")
    for key, spec in keys.items():
        if spec is None:
            state = state.with_key(key, None)
        else:
            state = state.with_key(key, Entry(spec["value"], when, change.reason, change.actor,
                                              spec.get("expires_at")))
    if "handoff" in data:
        handoff = data["handoff"]
        state = state.with_handoff(_handoff(handoff, when, change.actor) if handoff else None)
    return state
