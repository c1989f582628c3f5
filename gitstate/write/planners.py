"""Pure planners: each operation as (state at the base commit, inputs, now, config,
schema) -> a :class:`Plan` (the new state, the change record, the result) or a refusal.

No I/O and no git: the write engine reads the base, runs a planner, runs the whole-state
check (``checks.whole_state``) on the plan and commits it. Inputs arrive validated by
``rules`` (the facade does that once, before the lock); what needs the state (the
compare-and-swap, the schema's coercion and writers) happens here. Revert and adopt,
which also need the commit they undo or the edited file, live in ``revert``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from ..core import rules
from ..core.errors import InvalidInput, Refused, did_you_mean
from ..core.layout import SCHEMA_FILE
from ..core.model import Entry, Handoff, State, Value, format_time
from ..core.results import WriteResult
from ..core.schema import APPROVAL_PREFIX, Schema
from ..core.trailers import Change
from . import checks


class Unset(enum.Enum):
    """The type of :data:`UNSET`."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET
"""Default of ``expected``: no compare-and-swap. ``expected=None`` means "must be absent"."""

Expected = Value | None | Literal[Unset.UNSET]
Observation = Callable[[State, dict[str, Any]], Mapping[str, Value | None]]
"""A runtime function: (state at HEAD, payload) -> key updates (None clears the key)."""


@dataclass(frozen=True)
class Base:
    """What a planner plans on: the commit, its state and schema, and the commit's time
    (``clock``: the raw clock when it was behind the parent's time, for the trailer)."""

    commit: str
    state: State
    now: datetime
    schema: Schema | None
    clock: str | None = None


@dataclass
class Plan:
    """A write, ready to commit: ``files`` besides working_state.json, and the schema in
    force after it (a schema change brings its own)."""

    state: State
    change: Change
    result: WriteResult
    files: dict[str, bytes | None] = field(default_factory=dict)
    schema: Schema | None = None
    schema_changed: bool = False


def reserved(key: str) -> None:
    """``approval.*`` keys change only through the approval planners (approvals/steps.py): a set,
    clear, observation or adopted hand edit of one would forge or erase a decision (only an
    expired one may be cleared)."""
    if key.startswith(APPROVAL_PREFIX):
        raise InvalidInput(f"{key} is an approval record; it changes only through request, "
                           "approve, deny and consume (an expired one may be cleared)",
                           rule="approval.reserved", key=key)


def plan_set(base: Base, writer: str | None, *, key: str, value: Value, reason: str,
             ttl: float | None, expected: Expected, actor: str) -> Plan:
    """``writer`` None: the value's rules only (a commit from elsewhere re-derived, whose
    role claim is the trust rule's business)."""
    reserved(key)
    schema, now = base.schema, base.now
    stored = schema.check_write(key, value, writer) if schema else value
    old = base.state.keys.get(key)
    if expected is not UNSET:
        checks.expected(key, old, expected, now)
    hours = ttl if ttl is not None else (schema.default_ttl(key) if schema else None)
    expires = format_time(now + timedelta(hours=hours)) if hours else None
    entry = Entry(value=stored, set_at=format_time(now), reason=reason, actor=actor,
                  expires_at=expires)
    change = Change(op="set", reason=reason, actor=actor, key=key,
                    old=old.value if old else None, new=stored, expires_at=expires)
    return Plan(base.state.with_key(key, entry), change,
                WriteResult("set", "", key=key, old=old, new=entry), schema=schema)


def plan_clear(base: Base, writer: str | None, *, key: str, reason: str, expected: Expected,
               actor: str) -> Plan:
    """An expired approval record may be cleared like any expired key (it can no longer be
    decided or spent: clearing it erases no decision); any other one is reserved."""
    old = base.state.keys.get(key)
    if old is None or not old.is_expired(base.now):
        reserved(key)
    if base.schema:
        base.schema.check_clear(key, writer)
    if expected is not UNSET:
        checks.expected(key, old, expected, base.now)
    if old is None:
        raise InvalidInput(f"key {key!r} is not set; nothing to clear."
                           + did_you_mean(key, base.state.keys), rule="clear.absent", key=key)
    change = Change(op="clear", reason=reason, actor=actor, key=key, old=old.value)
    return Plan(base.state.with_key(key, None), change,
                WriteResult("clear", "", key=key, old=old), schema=base.schema)


def plan_handoff(base: Base, checked: rules.HandoffInput, *, reason: str,
                 actor: str) -> Plan:
    ho = Handoff(note=checked.note, left_at=format_time(base.now), actor=actor,
                 status=checked.status, next_steps=checked.next_steps,
                 evidence=checked.evidence, blocker=checked.blocker)
    change = Change(op="handoff", reason=reason, actor=actor, handoff=ho.fields())
    return Plan(base.state.with_handoff(ho), change,
                WriteResult("handoff", "", handoff=ho, truncated=checked.truncated),
                schema=base.schema)


def handoff_reason(checked: rules.HandoffInput) -> str:
    """The default commit message of a handoff: its status and the note's start."""
    summary = " ".join(checked.note.split())[:72] or checked.status or ""
    label = f"Handoff ({checked.status})" if checked.status else "Handoff"
    return f"{label}: {summary}" if summary else label


def plan_observe(base: Base, writer: str | None, *, kind: str,
                 updates: Mapping[str, Value | None], reason: str, actor: str) -> Plan:
    """A runtime observation's key updates as one change (the model never sets a phase)."""
    schema, now = base.schema, base.now
    state = base.state
    changes: dict[str, Any] = {}
    for key, value in sorted(updates.items()):
        rules.check_key(key)
        reserved(key)
        if value is None:
            if schema:
                schema.check_clear(key, writer)
            state = state.with_key(key, None)
            changes[key] = None
            continue
        value = rules.check_value(value, key)
        stored = schema.check_write(key, value, writer) if schema else value
        ttl = schema.default_ttl(key) if schema else None
        expires = format_time(now + timedelta(hours=ttl)) if ttl else None
        state = state.with_key(key, Entry(stored, format_time(now), reason, actor, expires))
        changes[key] = {"expires_at": expires, "value": stored}
    if not changes:
        raise InvalidInput(f"observation {kind!r} changed nothing", rule="observation.empty")
    change = Change(op="observe", reason=reason, actor=actor, adopt={"keys": changes},
                    observation=kind)
    return Plan(state, change, WriteResult("observe", ""), schema=schema)


def observation_reason(kind: str, payload: dict[str, Any]) -> str:
    return f"observation {kind}: " + json.dumps(payload, ensure_ascii=False,
                                                 sort_keys=True)[:200]


def _schema_secrets(text: str) -> None:
    """Every name and value of schema.yaml (descriptions, defaults, enum members) and
    every comment is scanned: they are committed like a value. Not the raw text, whose
    YAML (``token: {type: string}``) reads as an assignment."""
    from ..core import secretscan
    from ..core.schemafile import load_yaml

    found = secretscan.find(load_yaml(text), "schema.yaml")
    if found is not None:
        rules.refuse_secret(found[0], found[1], found[0])
    for n, line in enumerate(text.splitlines(), 1):
        mark = line.find("#")
        while mark > 0 and not line[mark - 1].isspace():
            mark = line.find("#", mark + 1)
        if mark >= 0:
            rules.check_secret(line[mark + 1:], f"schema.yaml's comment on line {n}")


def plan_schema(base: Base, schema: Schema, text: str, *, reason: str, actor: str) -> Plan:
    """A new schema.yaml: its version must grow, it holds no secret (a description, a
    default or a comment is committed like a value), and the live state must satisfy it."""
    _schema_secrets(text)
    current = base.schema
    if current is not None and schema.version <= current.version:
        raise InvalidInput(f"schema version must increase: HEAD has {current.version}, "
                           f"the new file says {schema.version}", rule="schema.version")
    live = base.state.live(base.now)
    problems = schema.violations(base.state, set(live) or {"\0"})
    if problems:
        raise Refused("the live state does not satisfy the new schema: "
                      + "; ".join(problems), rule="schema.violations", violations=problems)

    change = Change(op="schema", reason=reason, actor=actor, schema_version=schema.version)
    return Plan(base.state, change, WriteResult("schema", ""),
                files={SCHEMA_FILE: text.encode("utf-8")}, schema=schema, schema_changed=True)
