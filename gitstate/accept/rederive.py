"""The one rule's re-derivation of a main commit (docs/security.md): the change gitstate's
own planner makes, at the parent's state and schema and at the commit's time, for what the
commit records — a set by ``planners.plan_set``, a schema change by ``plan_schema``, a revert
by ``revert.plan_revert``, an approval step by ``recorded.replan``, and so on — and the
comparison of the commit's message with that change's message, byte for byte, each
difference refused by a named rule. ``main.check_range`` calls it for every commit."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..approvals import steps as approvals
from ..approvals.recorded import replan
from ..core import rules
from ..core.errors import InvalidInput, Refused
from ..core.layout import SCHEMA_FILE, STATE_FILE, is_commit_id
from ..core.model import EMPTY, State, format_time, parse_time
from ..core.schema import Schema
from ..core.schemafile import parse_schema
from ..core.trailers import PREFIX, Change
from ..history import approvals as approval_life
from ..system.config import Config
from ..write.planners import (
    UNSET,
    Base,
    plan_clear,
    plan_handoff,
    plan_observe,
    plan_schema,
    plan_set,
)
from ..write.promote import plan_promote
from ..write.revert import plan_revert

if TYPE_CHECKING:
    from ..store import GitStore

_ARGS = re.compile(r"[0-9a-f]{16}")
_PROMOTED = re.compile(r"runs/([^@\s]+)@([0-9a-f]{40})")


def committed_state(store: GitStore, commit: str) -> State:
    """The state a commit holds (EMPTY without working_state.json)."""
    data = store.read_file(commit, STATE_FILE)
    if data is None:
        return EMPTY
    try:
        return State.from_bytes(data)
    except ValueError as exc:
        raise InvalidInput(f"{STATE_FILE} is not a valid state: {exc}",
                           rule="state.invalid") from exc


def schema_at(store: GitStore, commit: str) -> Schema:
    """The schema.yaml a commit holds, parsed (an empty text when it has none)."""
    text = store.read_file(commit, SCHEMA_FILE) or b""
    try:
        return parse_schema(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidInput("schema.yaml is not UTF-8", rule="schema.encoding") from exc


def rederive(store: GitStore, commit: str, parent: str | None, before: State,
              commit_time: int, change: Change, ids: dict[str, str],
              config: Config) -> Change:
    """The change gitstate's own planner makes for what ``change`` records, at the parent's
    state and schema and at the commit's time; the commit's message must be that change's
    message byte for byte (:func:`same_message`)."""
    parent_ids = store.file_ids(parent) if parent is not None else {}
    if change.op != "schema" and ids.get(SCHEMA_FILE) != parent_ids.get(SCHEMA_FILE):
        raise InvalidInput(f"a {change.op} commit that also changes {SCHEMA_FILE}: only a "
                           "schema commit changes it, through the schema planner",
                           rule="schema.unaudited")
    _check_request(change.request)
    _check_clock(change.clock, commit_time)
    schema = schema_at(store, parent) if SCHEMA_FILE in parent_ids and parent else None
    base = Base(parent or "", before, datetime.fromtimestamp(commit_time, UTC), schema)
    try:
        plan = _replan(store, commit, base, change, config)
    except Refused as exc:
        raise InvalidInput(exc.message, rule=exc.rule) from exc
    return dataclasses.replace(plan, request=change.request, clock=change.clock)


def _replan(store: GitStore, commit: str, base: Base, change: Change,
            config: Config) -> Change:
    op, reason, actor = change.op, change.reason, change.actor
    if change.reverts is not None:
        return _replan_revert(store, base, change)
    if op == "init":
        if base.commit:
            raise InvalidInput("an init that is not the root", rule="commit.init_not_root")
        return Change(op="init", reason=reason, actor=actor)
    if op == "set" and change.key is not None and approvals.is_approval_key(change.key):
        if not base.commit:
            raise InvalidInput("an approval step in a root commit", rule="approval.reserved")
        return _rederive_approval(store, base, change)
    if op == "set" and change.key is not None:
        names = dict(change.extra)
        if "Promoted-From" in names:
            return _replan_promote(base, change, names)
        ttl = None
        if change.expires_at is not None:
            expires = trailer_time(change.expires_at, "Gitstate-Expires")
            ttl = (expires - base.now).total_seconds() / 3600
        return plan_set(base, None, key=change.key, value=change.new, reason=reason,
                        ttl=ttl, expected=UNSET, actor=actor).change
    if op == "clear" and change.key is not None:
        return plan_clear(base, None, key=change.key, reason=reason, expected=UNSET,
                          actor=actor).change
    if op == "handoff" and isinstance(change.handoff, dict):
        h = change.handoff
        checked = rules.check_handoff(h.get("note"), h.get("status"), h.get("next_steps"),
                                      h.get("evidence"), h.get("blocker"),
                                      plain_max_chars=config.handoff_plain_max_chars,
                                      max_bytes=config.handoff_max_bytes)
        return plan_handoff(base, checked, reason=reason, actor=actor).change
    if op == "observe" and isinstance(change.adopt, dict) and change.observation:
        keys = change.adopt.get("keys")
        if not isinstance(keys, dict):
            raise InvalidInput("Gitstate-Adopt keys must be an object", rule="trailer.adopt")
        updates = {str(k): None if v is None else v.get("value") for k, v in keys.items()}
        return plan_observe(base, None, kind=change.observation, updates=updates,
                            reason=reason, actor=actor).change
    if op == "adopt" and change.adopt is not None:
        # a hand edit's planner reads the edited file, which the commit is: its entries
        # pass the input rules (_check_adopt) and their replay must give the tree
        return Change(op="adopt", reason=reason, actor=actor, adopt=change.adopt)
    if op == "schema":
        text = store.read_file(commit, SCHEMA_FILE)
        if text is None:
            raise InvalidInput(f"a schema commit without {SCHEMA_FILE}", rule="schema.missing")
        try:
            decoded = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{SCHEMA_FILE} is not UTF-8", rule="schema.encoding") from exc
        return plan_schema(base, parse_schema(decoded), decoded, reason=reason,
                           actor=actor).change
    if op not in ("set", "clear", "handoff", "observe"):
        raise InvalidInput(f"Gitstate-Op {op[:40]!r} is not an operation gitstate writes",
                           rule="replay.invalid")
    raise InvalidInput(f"a {op} commit without the trailers gitstate writes for it",
                       rule="commit.rederive")


def _replan_revert(store: GitStore, base: Base, change: Change) -> Change:
    """A revert names a commit on main's history before it, and is exactly what the revert
    planner makes of that commit at the parent."""
    target = change.reverts or ""
    if not base.commit or not is_commit_id(target) or \
            not store.is_ancestor(target, base.commit):
        raise InvalidInput(f"Gitstate-Reverts {target[:40]!r} names no commit of main's "
                           "history before this one", rule="trailer.reverts")
    info = store.commit_info(target)
    parents = store.parents(target)
    before = committed_state(store, parents[0]) if parents else EMPTY
    return plan_revert(base, info, before, committed_state(store, target),
                       reason=change.reason, actor=change.actor, force=True).change


def _replan_promote(base: Base, change: Change, names: dict[str, str]) -> Change:
    """A run's finding promoted to a key: the promote planner's set, its two trailers well
    formed (the run ledger itself is checked by the runs' own rule)."""
    source = _PROMOTED.fullmatch(names.get("Promoted-From", ""))
    evidence = names.get("Evidence")
    try:
        found = json.loads(evidence) if evidence is not None else None
    except (ValueError, RecursionError):
        found = None
    if source is None or not isinstance(found, str) or base.schema is None:
        raise InvalidInput("a promote's Gitstate-Promoted-From must be runs/<id>@<commit> and "
                           "its Gitstate-Evidence a JSON string, under a schema",
                           rule="trailer.promote")
    assert change.key is not None
    who = base.schema.promoters(change.key)
    return plan_promote(base, who[0] if who else "", key=change.key, value=change.new,
                        reason=change.reason, actor=change.actor, run_id=source[1],
                        run_commit=source[2], evidence=found).change


def _check_request(request: object) -> None:
    """Gitstate-Request as ``requests.fingerprint`` makes it: the caller's id and 16 hex."""
    if request is None:
        return
    if not isinstance(request, dict) or set(request) != {"id", "args"} or \
            not isinstance(request["args"], str) or not _ARGS.fullmatch(request["args"]):
        raise InvalidInput("Gitstate-Request must be a request id and the 16-hex fingerprint "
                           "of the call", rule="trailer.request")
    try:
        rules.check_request_id(request["id"])
    except InvalidInput as exc:
        raise InvalidInput(f"Gitstate-Request: {exc.message}", rule="trailer.request") from exc


def _check_clock(clock: str | None, commit_time: int) -> None:
    """Gitstate-Clock is the writer's raw wall clock when the commit is dated otherwise: a
    time in gitstate's format other than the commit's, earlier (the clock was behind the
    parent) or later by at most a year (a step ahead the clock model did not believe,
    gitstate/system/clock.py)."""
    if clock is None:
        return
    moment = trailer_time(clock, "Gitstate-Clock")
    if format_time(moment) != clock or moment.timestamp() == commit_time or \
            moment.timestamp() > commit_time + rules.TTL_MAX_HOURS * 3600:
        raise InvalidInput(f"Gitstate-Clock {clock[:40]!r} is not a time other than the "
                           "commit's, in gitstate's format and at most a year after it (it "
                           "is written only when the writer's wall clock was not the "
                           "commit's time)", rule="trailer.clock")


def _trailer_lines(message: bytes) -> list[tuple[str, str]]:
    block = message.decode("utf-8", "replace").rstrip("\n").rpartition("\n\n")[2]
    return [(name[len(PREFIX):], value) for name, _, value in
            (line.partition(": ") for line in block.split("\n"))]


def same_message(wanted: Change, message: bytes) -> None:
    """The commit's message is the one gitstate writes for the re-derived change, byte for
    byte; the refusal names the first trailer that differs."""
    if wanted.message() == message:
        return
    got, want = _trailer_lines(message), wanted.trailers()
    names = [n for n, _ in want]
    unknown = [n for n, _ in got if n not in names]
    if unknown:
        raise InvalidInput(f"Gitstate-{unknown[0][:40]} is not a trailer gitstate writes on "
                           f"this {wanted.op} commit (it writes {', '.join(names)})",
                           rule="trailer.unexpected")
    have, should = dict(got), dict(want)
    if "Old" in should and have.get("Old") != should["Old"]:
        raise InvalidInput(f"Gitstate-Old is not {wanted.key}'s value at the parent "
                           f"({should['Old'][:80]})", rule="trailer.old")
    if have.get("Expires") != should.get("Expires"):
        raise InvalidInput(f"{wanted.key}: the expiry differs from what gitstate's planner "
                           f"gives at the commit's time (planned {should.get('Expires')}, "
                           f"recorded {(have.get('Expires') or 'nothing')[:40]})",
                           rule="ttl.rederive")
    differs = [n for n in names if have.get(n) != should[n]]
    raise InvalidInput("the commit message is not the one gitstate writes for this change"
                       + (f" (differs in Gitstate-{', Gitstate-'.join(differs)})" if differs
                          else " (trailer order or layout)"), rule="commit.rederive")


def _rederive_approval(store: GitStore, base: Base, change: Change) -> Change:
    """An approval step is accepted only when this machine's planner, at the parent's state
    and schema and at the commit's time, makes exactly the change the commit records: the
    key (derived from the parent and the call), the value, the expiry (a request's is its
    policy's TTL from its own time; a decision or a spend never changes it), the actor and
    the reason. A step no planner would make here (a decision at or after the expiry, a
    second decision, a spend of what is not approved or void) is refused with the planner's
    rule; a decision's ``decided_on`` must be a commit it could have been made on."""
    assert change.key is not None
    step = dict(change.extra).get(approvals.TRAILER, "")

    def state_at(commit: str) -> State:
        try:
            return committed_state(store, commit)
        except InvalidInput as exc:
            raise ValueError(exc.message) from exc

    plan = replan(base, change.key, step, change.new, reason=change.reason,
                  actor=change.actor, state_at=state_at,
                  finished=approval_life.finished_in(store, base.commit),
                  retire=approval_life.RETIRED in dict(change.extra))
    if step in ("approve", "deny") and isinstance(change.new, dict):
        _check_decided_on(store, base.commit, change.key, change.new)
    wanted = plan.change
    differs = [f for f in ("key", "old", "new", "expires_at", "actor", "reason")
               if getattr(wanted, f) != getattr(change, f)]
    if differs:
        raise InvalidInput(f"{change.key}: the {step} step differs from what gitstate's "
                           f"planner makes at its parent and time in {', '.join(differs)} "
                           f"(planned expiry {wanted.expires_at or 'none'}, recorded "
                           f"{change.expires_at or 'none'})", rule="approval.rederive")
    return wanted


def _check_decided_on(store: GitStore, parent: str, key: str, value: dict[str, Any]) -> None:
    """gitstate records as ``decided_on`` the decision's parent; a decision push re-applied
    on a newer main keeps the commit it was made on, which is then on main's history after
    the request's own base (the commit its id derives from) and before the parent."""
    seen = value.get("decided_on")
    if seen is None or seen == parent:
        return
    _text, digest = approvals.frozen(value.get("args"))
    approval_id = key[len(approvals.PREFIX):]
    for info in store.walk(parent):
        if info.id == seen:
            return
        if hashlib.sha256(f"{info.id}\0{value.get('tool')}\0{digest}".encode()) \
                .hexdigest()[:12] == approval_id:
            break  # the request's base: a decision saw at least the request
    raise InvalidInput(f"{key}: decided_on {str(seen)[:40]} is neither the decision's parent "
                       "nor a commit of main's history since the request",
                       rule="approval.decided_on")


def trailer_time(text: object, what: str) -> datetime:
    if not isinstance(text, str):
        raise InvalidInput(f"{what} is not a time", rule="trailer.time")
    try:
        return parse_time(text)
    except ValueError as exc:
        raise InvalidInput(f"{what} {text[:40]!r} is not an ISO 8601 time",
                           rule="trailer.time") from exc
