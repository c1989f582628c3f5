"""Planning the two writes that undo or adopt: revert and adopt.

Both are computed as a new state plus the trailers that record it; ``StateRepo`` then commits
them through the one write path, with every rule (key cap, section size) still applied.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..core import rules
from ..core.errors import InvalidInput, Refused
from ..core.model import Entry, Handoff, State, format_time, parse_time
from ..core.results import Overridden, WriteResult
from ..core.trailers import Change, NotAGitstateCommit, parse_message
from ..system.config import Config
from .planners import Base, Plan, reserved

if TYPE_CHECKING:
    from ..store import CommitInfo


def _same(a: Entry | None, b: Entry | None) -> bool:
    if a is None or b is None:
        return a is b
    return type(a.value) is type(b.value) and a.value == b.value and a.expires_at == b.expires_at


def plan_revert(base: Base, info: CommitInfo, before: State, after: State, *, reason: str,
                actor: str, force: bool) -> Plan:
    """Restore, for every key and the handoff ``info`` changed, the value before it
    (``before`` and ``after``: the states around ``info``)."""
    current, now = base.state, base.now
    try:
        original = parse_message(info.message)
    except NotAGitstateCommit:
        raise InvalidInput(f"{info.id[:12]} was not made by gitstate; it cannot be reverted "
                           "key by key", rule="revert.foreign") from None
    if original.op == "init":
        raise InvalidInput("the first commit cannot be reverted", rule="revert.init")
    if original.op == "schema":
        raise InvalidInput("a schema change is undone by setting the previous schema again as "
                           "a new version: `gitstate schema show --rev <commit>~1 > old.yaml`, "
                           "raise its version, then `gitstate schema set old.yaml`",
                           rule="revert.schema")
    when = format_time(now)
    state = current
    conflicts: list[dict[str, Any]] = []
    touched: dict[str, Entry | None] = {}
    for key in sorted(before.keys.keys() | after.keys.keys()):
        old, new = before.keys.get(key), after.keys.get(key)
        if _same(old, new):
            continue
        reserved(key)  # an approval's step is never undone (a revert of consume would re-arm it)
        cur = current.keys.get(key)
        if not _same(cur, new):
            conflicts.append({"key": key, "reverted_value": new.value if new else None,
                              "current": cur.to_dict() if cur else None})
        restored = None if old is None else Entry(old.value, when, reason, actor,
                                                   old.expires_at)
        touched[key] = restored
        state = state.with_key(key, restored)
    handoff_changed = before.handoff != after.handoff
    restored_handoff: Handoff | None = None
    if handoff_changed:
        if current.handoff != after.handoff:
            conflicts.append({"key": None, "handoff": True,
                              "current": current.handoff.to_dict() if current.handoff else None})
        if before.handoff is not None:
            restored_handoff = Handoff(**{**before.handoff.fields(), "left_at": when,
                                          "actor": actor})  # type: ignore[arg-type]
        state = state.with_handoff(restored_handoff)
    if conflicts and not force:
        names = ", ".join(c["key"] or "the handoff" for c in conflicts)
        raise Refused(f"{info.id[:12]} cannot be reverted cleanly: {names} no longer hold its "
                      "values. Nothing was written; pass --force to override.",
                      rule="revert.conflict", conflicts=conflicts, reverted=info.id)
    if not touched and not handoff_changed:
        raise InvalidInput(f"{info.id[:12]} changed nothing to revert", rule="revert.empty")
    change = _change_for(current, touched, handoff_changed, restored_handoff, reason, actor)
    change = replace(change, reverts=info.id)
    result = WriteResult("revert", "", key=change.key, reverted=info.id,
                         overridden=[Overridden(**c) for c in conflicts])
    return Plan(state, change, result, schema=base.schema)


def _change_for(current: State, touched: dict[str, Entry | None], handoff_changed: bool,
                handoff: Handoff | None, reason: str, actor: str) -> Change:
    """Trailers for a change of any keys and/or the handoff: a single key or the handoff
    alone use the ordinary set / clear / handoff trailers; anything wider uses Adopt."""
    if len(touched) == 1 and not handoff_changed:
        key, entry = next(iter(touched.items()))
        old = current.keys.get(key)
        if entry is None:
            return Change(op="clear", reason=reason, actor=actor, key=key,
                          old=old.value if old else None)
        return Change(op="set", reason=reason, actor=actor, key=key,
                      old=old.value if old else None, new=entry.value,
                      expires_at=entry.expires_at)
    if not touched and handoff_changed:
        return Change(op="handoff", reason=reason, actor=actor,
                      handoff=handoff.fields() if handoff else None)
    adopt: dict[str, Any] = {"keys": {
        k: None if e is None else {"value": e.value, "expires_at": e.expires_at}
        for k, e in touched.items()}}
    if handoff_changed:
        adopt["handoff"] = handoff.fields() if handoff else None
    return Change(op="adopt", reason=reason, actor=actor, adopt=adopt)


def plan_adopt(base: Base, edited: bytes, config: Config, *, reason: str, actor: str) -> Plan:
    """Validate a hand-edited working_state.json and plan committing its differences."""
    current, now = base.state, base.now
    try:
        wanted = State.from_bytes(edited)
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(f"the edited working_state.json is not a valid state: {exc}",
                           rule="adopt.invalid") from exc
    when = format_time(now)
    state = current
    touched: dict[str, Entry | None] = {}
    for key in sorted(current.keys.keys() | wanted.keys.keys()):
        old, new = current.keys.get(key), wanted.keys.get(key)
        if old != new:
            reserved(key)  # a hand edit never forges or erases an approval
        if new is None:
            if old is not None:
                touched[key] = None
            continue
        rules.check_key(key)
        rules.check_value(new.value)
        if new.expires_at is not None:
            try:
                parse_time(new.expires_at)
            except ValueError:
                raise InvalidInput(f"{key}: expires_at {new.expires_at!r} is not a time",
                                   rule="adopt.expires") from None
        if old is not None and _same(old, new):
            continue
        touched[key] = Entry(new.value, when, reason, actor, new.expires_at)
    for key, entry in touched.items():
        state = state.with_key(key, entry)
    handoff_changed = _handoff_fields(current.handoff) != _handoff_fields(wanted.handoff)
    handoff = None
    if handoff_changed and wanted.handoff is not None:
        h = wanted.handoff
        checked = rules.check_handoff(h.note, h.status, h.next_steps, h.evidence, h.blocker,
                                      plain_max_chars=config.handoff_plain_max_chars,
                                      max_bytes=config.handoff_max_bytes)
        handoff = Handoff(checked.note, when, actor, checked.status, checked.next_steps,
                          checked.evidence, checked.blocker)
    if handoff_changed:
        state = state.with_handoff(handoff)
    if not touched and not handoff_changed:
        raise InvalidInput("the hand edit changes no value, expiry or handoff field",
                           rule="adopt.nothing")
    change = _change_for(current, touched, handoff_changed, handoff, reason, actor)
    if change.op != "adopt":  # adopt trailers always, so the log says what happened
        adopt: dict[str, Any] = {"keys": {
            k: None if e is None else {"value": e.value, "expires_at": e.expires_at}
            for k, e in touched.items()}}
        if handoff_changed:
            adopt["handoff"] = handoff.fields() if handoff else None
        change = Change(op="adopt", reason=reason, actor=actor, adopt=adopt)
    return Plan(state, change, WriteResult("adopt", ""), schema=base.schema)


def _handoff_fields(handoff: Handoff | None) -> dict[str, str | None] | None:
    return handoff.fields() if handoff else None
