"""The whole-state check: what every state on main must satisfy, however it got there.

One function, :func:`whole_state`, run by the write engine after every planner, by push's
re-application of local changes on a remote's state, and (through ``accept.main``) on every
commit that arrives from a remote or a pre-receive hook. It compares the state before and
after a change, so a limit already broken before (a cap lowered since) refuses only a
change that makes it worse. Pure: states, a moment, the config and the schema in, an
exception out.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from ..core import rules, secretscan
from ..core.compare import values_match
from ..core.errors import (
    CasMismatch,
    InjectionTooLarge,
    InvalidInput,
    KeyCapReached,
    SectionTooLarge,
)
from ..core.model import Entry, State, Value, display_value
from ..core.render import section_chars, section_chars_bound, section_key_bytes
from ..history.redact import is_redacted
from ..system.config import Config

if TYPE_CHECKING:
    from ..core.schema import Schema


def whole_state(before: State, after: State, now: datetime, config: Config,
                schema: Schema | None, writer: str | None) -> None:
    """Raise the refusal of the first rule ``after`` breaks, in this order: the schema
    (types, and who may write when ``writer`` is given), look-alike keys, the stored-key
    limit, the live-key cap, the key lines' bytes, the whole injection's characters."""
    # an unchanged key keeps its Entry object: identity first spares comparing every field
    changed = sorted(k for k in before.keys.keys() | after.keys.keys()
                     if (old := before.keys.get(k)) is not (new := after.keys.get(k))
                     and old != new)
    if schema is not None:
        _schema(schema, before, after, changed, writer)
    _secrets(after, changed, schema)
    live_before, live = before.live(now), after.live(now)
    added = sorted(set(live) - set(live_before))
    existing = set(before.keys)
    for key in added:
        rules.check_twin(key, existing)
        existing.add(key)
    stored = len(after.keys)
    if stored > config.max_stored_keys and stored > len(before.keys):
        expired = sorted(set(before.keys) - set(live_before))
        raise KeyCapReached(
            f"{len(before.keys)} stored keys (the limit is {config.max_stored_keys}, expired "
            f"ones included); clear expired keys first: {', '.join(expired)}",
            rule="keys.stored_cap", key=added[0] if added else None, expired_keys=expired)
    if len(live) > config.max_keys and len(live) > len(live_before):
        names = sorted(live_before)
        raise KeyCapReached(
            f"{len(live_before)} live keys already (the cap is {config.max_keys}); clear one "
            f"before adding {', '.join(map(repr, added))}. Live keys: {', '.join(names)}",
            key=added[0] if added else None, max_keys=config.max_keys, live_key_names=names)
    size = section_key_bytes(after, now)
    if size > config.section_max_bytes and size > section_key_bytes(before, now):
        raise SectionTooLarge(
            f"the key lines would take {size} bytes of the rendered section; the limit is "
            f"{config.section_max_bytes} ([gitstate] section_max_bytes). Shorten the value or "
            "reason, or clear a key.", size=size, limit=config.section_max_bytes)
    _injection(before, after, now, config, schema)


SPLIT_WINDOW = 1024  # characters on each side of a changed key: longer than any token


def _secrets(after: State, changed: list[str], schema: Schema | None) -> None:
    """No value that looks like a secret is committed (secretscan.find: every string of it,
    the names inside a structure, a secret split across its strings), unless its key's
    schema declaration allows it (``secrets: allow``) or, ``sensitive: refuse``, no value
    of the key may be stored at all; nor one split across adjacent keys' values."""
    scanned: set[str] = set()
    for key in changed:
        entry = after.keys.get(key)
        if entry is None:
            continue
        spec = schema.spec(key) if schema is not None else None
        if spec is not None and spec.sensitive == "refuse":
            raise InvalidInput(f"{key} is declared sensitive: refuse; its value must be kept "
                               "outside gitstate (store a reference instead)",
                               rule="secret.sensitive_key", key=key)
        if spec is not None and spec.sensitive == "redact":
            if not is_redacted(entry.value):  # a raw value, or a commit from elsewhere
                raise InvalidInput(f"{key} is declared sensitive: redact, but the value to "
                                   "store is not its keyed hash", rule="secret.not_redacted",
                                   key=key)
            continue
        if spec is not None and spec.secrets == "allow":
            continue
        found = secretscan.find(entry.value, key)
        if found is not None:
            rules.refuse_secret(found[0], found[1], found[0])
        scanned.add(key)
    if scanned:
        _split_across_keys(after, scanned, schema)


def _split_across_keys(after: State, changed: set[str], schema: Schema | None) -> None:
    """A token cut in two and stored under two adjacent keys (in working_state.json's
    order) is refused like the whole token, when one of the keys is being changed."""
    names: list[str] = []
    parts: list[str] = []
    for key in sorted(after.keys):
        spec = schema.spec(key) if schema is not None else None
        if spec is not None and (spec.secrets == "allow" or spec.sensitive is not None):
            names.append(key)
            parts.append("\0")  # a key the scan skips still separates its neighbours
            continue
        for _, text in secretscan.value_strings(after.keys[key].value, key):
            names.append(key)
            parts.append(text)
    near = [False] * len(parts)  # the changed keys' texts and SPLIT_WINDOW around them
    for i, name in enumerate(names):
        if name in changed:
            near[i] = True
            for step in (-1, 1):
                j, seen = i + step, 0
                while 0 <= j < len(parts) and seen < SPLIT_WINDOW:
                    near[j] = True
                    seen += len(parts[j])
                    j += step
    i = 0
    while i < len(parts):
        if not near[i]:
            i += 1
            continue
        j = i
        while j < len(parts) and near[j]:
            j += 1
        split = secretscan.scan_parts(parts[i:j])
        if split is not None:
            first, last, found = split
            keys = sorted(set(names[i + first:i + last + 1]))
            if not changed.isdisjoint(keys):  # else stored before this rule
                rules.refuse_secret(f"the values of {', '.join(keys)} together", found,
                                    keys[-1])
        i = j


def _schema(schema: Schema, before: State, after: State, changed: list[str],
            writer: str | None) -> None:
    for key in changed:
        old, new = before.keys.get(key), after.keys.get(key)
        if new is None:
            if old is not None and writer is not None:
                schema.check_clear(key, writer)
        elif schema.check_write(key, new.value, writer) != new.value:
            raise InvalidInput(f"{key} would need coercion", rule="schema.type", key=key)


def _injection(before: State, after: State, now: datetime, config: Config,
               schema: Schema | None) -> None:
    """The whole section (keys, phase line, handoff; longest locale) must fit what the
    runtime keeps, so no wake-up ever gets a cut injection."""
    limit = config.injection_max_chars
    compiled = schema.compiled() if schema else None
    tool = config.set_tool
    if section_chars_bound(after, now, compiled, tool) <= limit:
        return  # far from the limit: the exact count is not needed
    size = section_chars(after, now, compiled, tool)
    if size <= limit or size <= section_chars(before, now, compiled, tool):
        return
    if after.handoff != before.handoff:
        advice = f"Shorten the handoff by at least {size - limit} characters."
    else:
        advice = "Shorten the value or reason, clear a key, or shorten the handoff."
    raise InjectionTooLarge(
        f"the injected section would be {size} characters; the limit is {limit} "
        "([gitstate] injection_max_chars: what the agent's runtime keeps of one "
        f"injection, 10,000 for Claude Code). {advice} Nothing was written.",
        size=size, limit=limit)


def _shown(value: Value) -> str:
    """A value in a message: text quoted (so " 262" and 262 differ), a structure as JSON."""
    if isinstance(value, list | dict) or is_redacted(value):
        return display_value(value)
    return repr(value)


def expected(key: str, old: Entry | None, wanted: Value | None, now: datetime) -> None:
    """Compare-and-swap against HEAD: ``wanted`` None means "must be absent" (an expired
    entry counts as absent); a value must match the stored one (docs/design.md, "How
    values compare")."""
    current = None if old is None or old.is_expired(now) else old
    ok = current is None if wanted is None else \
        old is not None and values_match(wanted, old.value)
    if ok:
        return
    shown = "absent" if old is None else _shown(old.value)
    raise CasMismatch(
        f"expected {key} to be {'absent' if wanted is None else _shown(wanted)}, but HEAD holds "
        f"{shown}" + (f" (set {old.set_at} by {old.actor}: {old.reason})" if old else "")
        + ". Nothing was written; re-read the value and decide again.",
        key=key, expected=wanted,
        current=({**old.to_dict(), "expired": old.is_expired(now)} if old else None))
