"""Typed-state operations on a StateRepo: schema changes, observations, idempotent requests,
phases and their tool allowlists (seeds 003 and 004).

The runtime owns transitions: observations are Python functions registered by the runtime
that turn a tool result into key updates, each applied as one commit whose reason names the
observation. The schema's ``writers`` keep the model (writer ``agent``, through MCP) away from
runtime-owned keys such as the phase.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import rules
from .errors import InvalidInput, Refused
from .layout import SCHEMA_CACHE_FILE
from .model import Entry, State, format_time
from .schema import SCHEMA_FILE, Schema, compiled_json, parse_schema
from .store import atomic_write
from .trailers import Change

if TYPE_CHECKING:
    from .repo import StateRepo, WriteResult

REQUEST_WINDOW = 1000  # how many recent commits a request id is remembered for
SCHEMA_CACHE = SCHEMA_CACHE_FILE


def request_fingerprint(request_id: str, args: tuple[Any, ...]) -> dict[str, str]:
    if not isinstance(request_id, str) or not 1 <= len(request_id) <= 128 or any(
            c.isspace() or not c.isprintable() for c in request_id):
        raise InvalidInput("request_id must be 1-128 printable characters without spaces",
                           rule="request.id")
    canonical = json.dumps(args, sort_keys=True, ensure_ascii=True, default=str)
    return {"id": request_id, "args": hashlib.sha256(canonical.encode()).hexdigest()[:16]}


def find_request(repo: StateRepo, request: dict[str, str]) -> WriteResult | None:
    """The first result of an earlier call with this request id (lock held), or None.
    The same id with different arguments is refused."""
    from .repo import WriteResult

    needle = f'"id": "{request["id"]}"'.encode()
    for n, rec in enumerate(repo.history_iter(needle)):
        if n >= REQUEST_WINDOW:
            break
        earlier = rec.get("request")
        if not isinstance(earlier, dict) or earlier.get("id") != request["id"]:
            continue
        if earlier.get("args") != request["args"]:
            raise Refused(f"request id {request['id']!r} was already used for a different call "
                          f"({rec['commit'][:12]}); use a new id", rule="request.conflict",
                          commit=rec["commit"])
        commit = str(rec["commit"])
        after = repo.state_at(commit)
        parent = rec.get("parent")
        before = repo.state_at(str(parent)) if parent else State()
        key = rec.get("key")
        now = repo.now()
        return WriteResult(
            op=str(rec["op"]), commit=commit, key=key,
            old=before.keys.get(key) if key else None,
            new=after.keys.get(key) if key else None,
            handoff=after.handoff if rec["op"] == "handoff" else None,
            live_keys=len(repo.state().live(now)), max_keys=repo.config.max_keys,
            warnings=[f"request {request['id']!r} was already applied in {commit[:12]}; "
                      "returning that result (no new commit)"],
            replayed=True, reverted=rec.get("reverts"))
    return None


def allowed_tools(schema: Schema | None, state: State, now: datetime) -> list[str] | None:
    if schema is None or schema.phase_key is None or not schema.tools:
        return None
    phase = schema.phase(state, state.live(now))
    return list(schema.tools.get(phase or "", ()))


def set_schema(repo: StateRepo, text: str, reason: str, *, request_id: str | None,
               actor: str | None) -> WriteResult:
    from .repo import WriteResult, _request

    schema = parse_schema(text)
    reason = rules.check_reason(reason)
    who = rules.check_actor(actor or repo.actor)

    def mutate(state: State, now: datetime) -> tuple[State, Change, WriteResult]:
        current = repo.schema_at(repo.head())
        if current is not None and schema.version <= current.version:
            raise InvalidInput(f"schema version must increase: HEAD has {current.version}, "
                               f"the new file says {schema.version}",
                               rule="schema.version")
        live = state.live(now)
        problems = schema.violations(state, set(live) or {"\0"})
        if problems:
            raise Refused("the live state does not satisfy the new schema: "
                          + "; ".join(problems), rule="schema.violations", violations=problems)
        change = Change(op="schema", reason=reason, actor=who, schema_version=schema.version)
        return state, change, WriteResult("schema", "")

    return repo._write(mutate, request=_request(request_id, "schema", text, reason),
                       files={SCHEMA_FILE: text.encode("utf-8")})


def check_schema(repo: StateRepo) -> dict[str, Any]:
    """Violations of HEAD's schema: live ones (should never happen) and expired ones."""
    schema = repo.schema()
    if schema is None:
        return {"schema": None, "live": [], "expired": []}
    state = repo.state()
    live = set(state.live(repo.now()))
    everything = schema.violations(state, set())
    live_problems = schema.violations(state, live or {"\0"})
    return {"schema": schema.version, "live": live_problems,
            "expired": [p for p in everything if p not in live_problems]}


def apply_observation(repo: StateRepo, kind: str, payload: dict[str, Any], *,
                      reason: str | None, request_id: str | None) -> WriteResult:
    from .repo import WriteResult, _request

    fn = repo.observations.get(kind)
    if fn is None:
        raise InvalidInput(f"unknown observation {kind!r}; registered: "
                           f"{', '.join(sorted(repo.observations)) or '(none)'}",
                           rule="observation.unknown")
    text = rules.check_reason(reason or f"observation {kind}: "
                              + json.dumps(payload, ensure_ascii=False, sort_keys=True)[:200])
    who = rules.check_actor(repo.actor)

    def mutate(state: State, now: datetime) -> tuple[State, Change, WriteResult]:
        updates = fn(state, payload)
        schema = repo.schema_at(repo.head())
        new_state = state
        changes: dict[str, Any] = {}
        for key, value in sorted(updates.items()):
            rules.check_key(key)
            if value is None:
                if schema:
                    schema.check_clear(key, repo.writer)
                new_state = new_state.with_key(key, None)
                changes[key] = None
                continue
            value = rules.check_value(value)
            stored = schema.check_write(key, value, repo.writer) if schema else value
            ttl = schema.default_ttl(key) if schema else None
            expires = format_time(now + _hours(ttl)) if ttl else None
            repo._check_new_key(new_state, key, now)
            new_state = new_state.with_key(key, Entry(stored, format_time(now), text, who,
                                                      expires))
            changes[key] = {"expires_at": expires, "value": stored}
        if not changes:
            raise InvalidInput(f"observation {kind!r} changed nothing", rule="observation.empty")
        repo._check_section(new_state, now)
        change = Change(op="observe", reason=text, actor=who, adopt={"keys": changes},
                        observation=kind)
        return new_state, change, WriteResult("observe", "")

    return repo._write(mutate, request=_request(request_id, "observe", kind, payload))


def _hours(ttl: float) -> Any:
    from datetime import timedelta

    return timedelta(hours=ttl)


def write_schema_cache(repo: StateRepo, commit: str) -> None:
    """Cache what the render fast path needs from the schema, keyed by its blob id."""
    blob = repo.store.file_ids(commit).get(SCHEMA_FILE)
    path = repo.state_dir / ".git" / SCHEMA_CACHE
    if blob is None:
        path.unlink(missing_ok=True)
        return
    schema = repo.schema_at(commit)
    assert schema is not None
    data = json.dumps({"blob": blob, **json.loads(compiled_json(schema))}).encode()
    atomic_write(path, data, fsync=False)

