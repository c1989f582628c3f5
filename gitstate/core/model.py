"""The state model: entries, the handoff, and their one JSON form on disk.

Pure and dependency-free (no pydantic, no dulwich): the render hook imports it on every
wake-up. ``State.to_bytes`` is the only serializer of working_state.json, so the same state
always produces the same bytes, and therefore the same git blob id. Stored times are read and
written here (``format_time``, ``parse_time``); how values compare lives in ``compare``, times
as a person gives and reads them in ``localtime``.
"""

from __future__ import annotations

import functools
import json

from .layout import HISTORY_FILE as HISTORY_FILE  # re-exported for callers
from .layout import STATE_FILE as STATE_FILE
from .timebase import UTC, datetime

TYPE_CHECKING = False  # not `from typing import`: typing costs ~3 ms per wake-up

if TYPE_CHECKING:  # typing and dataclasses are kept off the wake-up path
    from typing import Any

Scalar = str | int | float | bool
# a scalar, or a JSON array or object of values (gitstate/core/values.py: limits and comparison)
if TYPE_CHECKING:
    Value = str | int | float | bool | list[Any] | dict[str, Any]
else:  # the same, evaluable at run time without importing typing (get_type_hints reads it)
    Value = str | int | float | bool | list | dict
FORMAT_VERSION = 1

HANDOFF_STATUSES = ("continue", "complete", "blocked")


def format_time(moment: datetime) -> str:
    """UTC ISO 8601 with seconds and a ``Z``: the one time format stored anywhere."""
    return moment.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


YEAR_MIN, YEAR_MAX = 1970, 9000  # far from datetime's edges, where arithmetic overflows


def parse_time(text: str) -> datetime:
    """Parse a stored or user-given ISO 8601 time; naive input is taken as UTC. Any text
    that is not such a time, or a year outside 1970-9000, raises ValueError. (A render
    reads each stored time three times; datetimes are immutable, so each text is parsed
    once.)"""
    if not isinstance(text, str) or len(text) > 64:
        raise ValueError("not an ISO 8601 time")
    known = _PARSED.get(text)
    if known is not None:
        return known
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        moment = moment.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError(f"{text!r} is out of range") from exc
    if not YEAR_MIN <= moment.year < YEAR_MAX:
        raise ValueError(f"{text!r}: only years {YEAR_MIN} to {YEAR_MAX - 1} are accepted")
    if len(_PARSED) >= 4096:
        _PARSED.clear()
    _PARSED[text] = moment
    return moment


_PARSED: dict[str, datetime] = {}


def display_value(value: Value) -> str:
    """How a value is shown in the rendered section and in text output: a structure as
    its compact one-line JSON."""
    if isinstance(value, list | dict):
        from .values import compact

        return compact(value)
    if isinstance(value, str) and value.startswith("redacted:hmac-sha256:"):
        return "[redacted]"  # a sensitive key's keyed hash (redact.py): never shown
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return str(value)


class _Record:
    """A small immutable record (dataclasses would cost 7 ms of imports per wake-up)."""

    __slots__ = ()
    field_names: tuple[str, ...] = ()

    def astuple(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.field_names)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.astuple() == other.astuple()

    def __hash__(self) -> int:
        return hash(self.astuple())

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.field_names)
        return f"{type(self).__name__}({args})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _init(self, **values: object) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)


class Entry(_Record):
    """One key's current value and where it came from."""

    __slots__ = ("_hash", "_pretty", "actor", "expires_at", "reason", "set_at", "value")
    field_names = ("value", "set_at", "reason", "actor", "expires_at")
    value: Value
    set_at: str
    reason: str
    actor: str
    expires_at: str | None
    _pretty: str | None
    _hash: int | None

    def __hash__(self) -> int:
        # Computed once: the render's size caches look every live entry up on every write.
        # A structured value is a list or dict: its JSON is hashed.
        known = self._hash
        if known is None:
            value = self.value
            if isinstance(value, list | dict):
                value = display_value(value)
            known = hash((type(self.value), value, self.set_at, self.reason, self.actor,
                          self.expires_at))
            object.__setattr__(self, "_hash", known)
        return known

    def __init__(self, value: Value, set_at: str, reason: str, actor: str,
                 expires_at: str | None = None) -> None:
        self._init(value=value, set_at=set_at, reason=reason, actor=actor,
                   expires_at=expires_at, _pretty=None, _hash=None)

    def pretty(self) -> str:
        """This entry as it appears in working_state.json (indented to its depth there).
        Entries are immutable and an unchanged key keeps its Entry from write to write, so
        each entry is serialized once, not on every write (the pretty form needs json's
        pure-Python encoder)."""
        text: str | None = self._pretty
        if text is None:
            text = json.dumps(self.to_dict(), ensure_ascii=False, indent=2,
                              sort_keys=True).replace("\n", "\n    ")
            object.__setattr__(self, "_pretty", text)
        return text

    def is_expired(self, now: datetime) -> bool:
        return self.expires_at is not None and parse_time(self.expires_at) <= now

    def to_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor,
            "expires_at": self.expires_at,
            "reason": self.reason,
            "set_at": self.set_at,
            "value": self.value,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entry:
        """An entry from its stored form; any other shape raises ValueError."""
        if not isinstance(data, dict):
            raise ValueError("an entry must be an object")
        value = data.get("value")
        if isinstance(value, list | dict):
            from .values import check

            value = check(value, "value", _stored_leaf)
        elif not isinstance(value, str | int | float) or (
            isinstance(value, float) and not _finite(value)
        ):
            raise ValueError("entry value must be a JSON scalar, array or object")
        set_at, reason = data.get("set_at", ""), data.get("reason")
        actor, expires = data.get("actor", ""), data.get("expires_at")
        if not isinstance(reason, str) or not isinstance(actor, str):
            raise ValueError("entry reason and actor must be strings")
        parse_time(set_at)  # raises unless a valid time
        if expires is not None:
            parse_time(expires)
        return cls(value=value, set_at=set_at, reason=reason, actor=actor,
                   expires_at=expires)


def _finite(x: float) -> bool:
    """math.isfinite without the math module (a shared library to load on every wake-up):
    inf - inf and nan - nan are nan, any finite x - x is 0."""
    return x - x == 0.0


def _stored_leaf(value: object, path: str) -> object:
    """A scalar inside a stored structure: its type only (rules.check_value checked the
    text when it was written; a file from elsewhere goes through the acceptance rule's checks,
    gitstate/accept/main.py)."""
    if value is None or isinstance(value, str | int | bool) or (
            isinstance(value, float) and _finite(value)):
        return value
    raise ValueError(f"{path}: not a JSON value")


class Handoff(_Record):
    """The one handoff note, plain or structured."""

    __slots__ = ("actor", "blocker", "evidence", "left_at", "next_steps", "note", "status")
    field_names = ("note", "left_at", "actor", "status", "next_steps", "evidence", "blocker")
    note: str
    left_at: str
    actor: str
    status: str | None
    next_steps: str | None
    evidence: str | None
    blocker: str | None

    def __init__(self, note: str, left_at: str, actor: str, status: str | None = None,
                 next_steps: str | None = None, evidence: str | None = None,
                 blocker: str | None = None) -> None:
        self._init(note=note, left_at=left_at, actor=actor, status=status,
                   next_steps=next_steps, evidence=evidence, blocker=blocker)

    def fields(self) -> dict[str, str | None]:
        """The caller-given part (what a handoff commit's trailer carries)."""
        return {
            "blocker": self.blocker,
            "evidence": self.evidence,
            "next_steps": self.next_steps,
            "note": self.note,
            "status": self.status,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.fields(), "actor": self.actor, "left_at": self.left_at}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Handoff:
        """A handoff from its stored form; any other shape raises ValueError."""
        if not isinstance(data, dict):
            raise ValueError("the handoff must be an object")
        texts = {name: data.get(name) for name in
                 ("note", "actor", "status", "next_steps", "evidence", "blocker")}
        for name, text in texts.items():
            if text is not None and not isinstance(text, str):
                raise ValueError(f"handoff {name} must be a string")
        if texts["status"] is not None and texts["status"] not in HANDOFF_STATUSES:
            raise ValueError("handoff status must be continue, complete or blocked")
        left_at = data.get("left_at", "")
        parse_time(left_at)  # raises unless a valid time
        return cls(
            note=texts["note"] or "",
            left_at=left_at,
            actor=texts["actor"] or "",
            status=texts["status"],
            next_steps=texts["next_steps"],
            evidence=texts["evidence"],
            blocker=texts["blocker"],
        )


@functools.lru_cache(maxsize=4096)
def _key_json(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


class State(_Record):
    """Everything working_state.json holds: the key table and the handoff."""

    __slots__ = ("_live", "handoff", "keys")
    field_names = ("keys", "handoff")
    keys: dict[str, Entry]
    handoff: Handoff | None
    _live: tuple[datetime, dict[str, Entry]] | None
    __hash__ = None  # type: ignore[assignment]  # holds a dict

    def __init__(self, keys: dict[str, Entry] | None = None,
                 handoff: Handoff | None = None) -> None:
        self._init(keys=dict(keys or {}), handoff=handoff, _live=None)

    def live(self, now: datetime) -> dict[str, Entry]:
        """Entries that have not expired at ``now``: the ones a wake-up sees. (A write asks
        this of the same state several times at one ``now``: the answer is kept, and each
        caller gets its own copy.)"""
        known = self._live
        if known is not None and known[0] == now:
            return dict(known[1])
        live = {k: e for k, e in self.keys.items() if not e.is_expired(now)}
        object.__setattr__(self, "_live", (now, live))
        return dict(live)

    def with_key(self, key: str, entry: Entry | None) -> State:
        keys = dict(self.keys)
        if entry is None:
            keys.pop(key, None)
        else:
            keys[key] = entry
        return State(keys, self.handoff)

    def with_handoff(self, handoff: Handoff | None) -> State:
        return State(self.keys, handoff)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "handoff": self.handoff.to_dict() if self.handoff else None,
            "keys": {k: self.keys[k].to_dict() for k in sorted(self.keys)},
        }

    def to_bytes(self) -> bytes:
        """Pretty, sorted, UTF-8 (CJK unescaped): a change diffs as a few readable lines.
        Byte for byte ``json.dumps(self.to_dict(), ensure_ascii=False, indent=2,
        sort_keys=True)`` and a newline, assembled from each entry's cached form."""
        handoff = "null" if self.handoff is None else json.dumps(
            self.handoff.to_dict(), ensure_ascii=False, indent=2,
            sort_keys=True).replace("\n", "\n  ")
        if self.keys:
            keys = "{\n" + ",\n".join(
                f"    {_key_json(k)}: {self.keys[k].pretty()}"
                for k in sorted(self.keys)) + "\n  }"
        else:
            keys = "{}"
        text = f'{{\n  "format": {FORMAT_VERSION},\n  "handoff": {handoff},\n  "keys": {keys}\n}}\n'
        return text.encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> State:
        """Parse working_state.json; anything that is not a gitstate state (bad JSON, deep
        nesting, wrong shapes, bad times) raises ValueError."""
        try:
            raw = json.loads(data.decode("utf-8"))
        except RecursionError as exc:
            raise ValueError("working_state.json nests too deeply") from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("keys"), dict):
            raise ValueError("working_state.json is not a gitstate state object")
        keys = {str(k): Entry.from_dict(v) for k, v in raw["keys"].items()}
        handoff = raw.get("handoff")
        return cls(keys=keys, handoff=Handoff.from_dict(handoff) if handoff is not None
                   else None)


EMPTY = State()
