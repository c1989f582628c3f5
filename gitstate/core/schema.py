"""Typed state: what schema.yaml declares (the allowed keys and values, writers, phases and
tool allowlists) and how a write is checked against it.

The schema lives in the state repository next to working_state.json and changes only by an
audited commit (``gitstate schema set``); ``gitstate/core/schemafile.py`` reads its YAML into
a :class:`Schema` and writes it back.

Policies (docs/typed-state.md):

* unknown keys: ``unknown_keys: reject`` (the default when a schema exists) or ``allow``;
* coercion: none unless a key says ``coerce: true`` ("4" never silently becomes 4);
* older schemas: values are validated when written, not when read. ``schema set`` refuses a
  schema the live state breaks, so live entries always satisfy the current schema; expired
  entries written under an older schema stay readable and ``schema check`` lists them;
* versions: ``version`` must increase with every ``schema set``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from . import layout, shapes
from .errors import InvalidInput
from .errors import SchemaError as SchemaError  # re-exported: where callers look for it
from .model import Scalar, State, Value
from .policy import ApprovalPolicy

SCHEMA_FILE = layout.SCHEMA_FILE
TYPES = ("string", "integer", "number", "boolean", "enum", "percent", *shapes.STRUCTURED)
WRITERS = ("agent", "runtime", "human")
_PERCENT = re.compile(r"(-?[0-9]+(?:\.[0-9]+)?)%")


@dataclass(frozen=True)
class KeySpec:
    """One declared key or key pattern."""

    name: str
    type: str
    description: str = ""
    values: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    gt: float | None = None
    lt: float | None = None
    pattern: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    nullable: bool = True
    ttl_hours: float | None = None
    writers: tuple[str, ...] = WRITERS
    coerce: bool = False
    shape: shapes.Shape | None = None  # list, object and json keys
    secrets: str = "scan"  # allow: values of this key are not scanned for secrets
    sensitive: str | None = None  # redact: stored as a keyed hash; refuse: never stored

    def matches(self, key: str) -> bool:
        return fnmatchcase(key, self.name) if "*" in self.name else key == self.name

    def summary(self) -> str:
        """One line for tool descriptions and `schema show`."""
        kind = ("one of " + " | ".join(self.values)) if self.type == "enum" else (
            self.shape.summary() if self.shape is not None else self.type)
        bounds = [f"{op} {v:g}" for op, v in ((">=", self.min), ("<=", self.max),
                                              (">", self.gt), ("<", self.lt)) if v is not None]
        parts = [f"{self.name}: {kind}" + (f" ({', '.join(bounds)})" if bounds else "")]
        if self.ttl_hours:
            parts.append(f"default ttl {self.ttl_hours:g} h")
        if tuple(self.writers) != WRITERS:
            parts.append("set by " + "/".join(self.writers) + " only")
        return "; ".join(parts)


APPROVAL_PREFIX = "approval."  # keys written only through gitstate/approvals/steps.py


@dataclass(frozen=True)
class Schema:
    version: int
    keys: tuple[KeySpec, ...]
    unknown_keys: str = "reject"
    phase_key: str | None = None
    tools: dict[str, tuple[str, ...]] = field(default_factory=dict)
    approvals: dict[str, ApprovalPolicy] = field(default_factory=dict)
    run_writers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    promotable: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def promoters(self, key: str) -> tuple[str, ...]:
        """Who may promote a run's finding to ``key`` (empty: the key is not promotable);
        the exact name wins over a pattern, the longest pattern over a shorter one."""
        if key in self.promotable:
            return self.promotable[key]
        hits = sorted((p for p in self.promotable if "*" in p and fnmatchcase(key, p)),
                      key=len, reverse=True)
        return self.promotable[hits[0]] if hits else ()

    def spec(self, key: str) -> KeySpec | None:
        """The exact declaration wins over a pattern; among patterns, the longest."""
        exact = [s for s in self.keys if s.name == key]
        if exact:
            return exact[0]
        patterns = sorted((s for s in self.keys if "*" in s.name and s.matches(key)),
                          key=lambda s: -len(s.name))
        return patterns[0] if patterns else None

    # -- validation ---------------------------------------------------------------------

    def check_write(self, key: str, value: Value, writer: str | None) -> Value:
        """Validate one set; returns the value to store (coerced only where allowed).
        ``writer`` None checks the value only (a commit that arrived from elsewhere)."""
        if key.startswith(APPROVAL_PREFIX):
            return value  # the approval planners own these keys and their shape
        spec = self.spec(key)
        if spec is None:
            if self.unknown_keys == "reject":
                raise InvalidInput(f"key {key!r} is not declared in schema.yaml (version "
                                   f"{self.version}); declared: {self.declared()}",
                                   rule="schema.unknown_key", key=key)
            return value
        if writer is not None and writer not in spec.writers:
            raise InvalidInput(f"{key} may be set only by {'/'.join(spec.writers)}, not by "
                               f"{writer}", rule="schema.writer", key=key, writer=writer)
        return check_value(spec, key, value)

    def check_clear(self, key: str, writer: str | None) -> None:
        """``writer`` None: only whether the key may be cleared at all."""
        if key.startswith(APPROVAL_PREFIX):
            return
        spec = self.spec(key)
        if spec is None:
            return
        if writer is not None and writer not in spec.writers:
            raise InvalidInput(f"{key} may be changed only by {'/'.join(spec.writers)}",
                               rule="schema.writer", key=key, writer=writer)
        if not spec.nullable:
            raise InvalidInput(f"{key} is declared nullable: false and cannot be cleared",
                               rule="schema.not_nullable", key=key)

    def default_ttl(self, key: str) -> float | None:
        spec = self.spec(key)
        return spec.ttl_hours if spec else None

    def violations(self, state: State, live: set[str]) -> list[str]:
        """What in ``state`` this schema refuses; live keys only unless ``live`` is empty."""
        out = []
        for key, entry in sorted(state.keys.items()):
            if (live and key not in live) or key.startswith(APPROVAL_PREFIX):
                continue
            try:
                spec = self.spec(key)
                if spec is None and self.unknown_keys == "reject":
                    raise InvalidInput(f"{key} is not declared", rule="schema.unknown_key")
                if spec is not None:
                    checked = check_value(spec, key, entry.value)
                    if checked != entry.value or type(checked) is not type(entry.value):
                        raise InvalidInput(f"{key} would need coercion", rule="schema.type")
            except InvalidInput as exc:
                out.append(f"{key}: {exc.message}")
        return out

    def declared(self) -> str:
        return ", ".join(s.name for s in self.keys)

    # -- phases -------------------------------------------------------------------------

    def allowed_tools(self, state: State, now: datetime) -> list[str] | None:
        """The tools the current phase allows; None when no phases are declared."""
        if self.phase_key is None or not self.tools:
            return None
        return list(self.tools.get(self.phase(state, state.live(now)) or "", ()))

    def phase(self, state: State, live: dict[str, Any]) -> str | None:
        """The current phase: the phase key's live value, else its enum's first value."""
        if self.phase_key is None:
            return None
        entry = live.get(self.phase_key)
        if entry is not None:
            return str(entry.value)
        spec = self.spec(self.phase_key)
        return spec.values[0] if spec and spec.values else None

    def compiled(self) -> dict[str, Any]:
        """What the render fast path needs, as plain JSON (cached beside the repo)."""
        spec = self.spec(self.phase_key) if self.phase_key else None
        return {"phase_key": self.phase_key,
                "initial_phase": spec.values[0] if spec and spec.values else None,
                "tools": {k: list(v) for k, v in self.tools.items()}}


def check_value(spec: KeySpec, key: str, value: Value) -> Value:
    """Check a value against one declaration; never coerce unless ``coerce: true``."""
    t = spec.type
    if spec.shape is not None:
        shapes.check(spec.shape, value, key, key)
        return value
    if isinstance(value, list | dict):
        raise InvalidInput(f"{key} must be a {t} (schema type {t}); got a structure",
                           rule="schema.type", key=key, expected=t)

    def fail(what: str) -> InvalidInput:
        return InvalidInput(f"{key} must be {what} (schema type {t}); got {value!r}",
                            rule="schema.type", key=key, expected=t)

    if spec.coerce and isinstance(value, str):
        value = _coerce(t, value)
    if t == "string":
        if not isinstance(value, str):
            raise fail("a string")
        if spec.min_length is not None and len(value) < spec.min_length:
            raise fail(f"at least {spec.min_length} characters")
        if spec.max_length is not None and len(value) > spec.max_length:
            raise fail(f"at most {spec.max_length} characters")
        if spec.pattern is not None and not re.fullmatch(spec.pattern, value):
            raise InvalidInput(f"{key} must match {spec.pattern!r}; got {value!r}",
                               rule="schema.pattern", key=key)
        return value
    if t == "boolean":
        if not isinstance(value, bool):
            raise fail("true or false")
        return value
    if t == "enum":
        if not isinstance(value, str) or value not in spec.values:
            raise InvalidInput(f"{key} must be one of {', '.join(spec.values)}; got {value!r}",
                               rule="schema.enum", key=key, allowed=list(spec.values))
        return value
    if t == "percent":
        if spec.coerce and isinstance(value, int | float) and not isinstance(value, bool):
            value = f"{value:g}%"
        match = _PERCENT.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            raise fail('a percentage such as "96%"')
        _bounds(spec, key, float(match.group(1)), default=(0.0, 100.0))
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail("an integer" if t == "integer" else "a number")
    if t == "integer" and not isinstance(value, int):
        raise fail("an integer")
    _bounds(spec, key, float(value))
    return value


def _coerce(t: str, text: str) -> Scalar:
    if not text.isascii():  # int("２６２") is 262: other scripts' digits stay text
        return text
    try:
        if t == "integer":
            return int(text)
        if t == "number":
            number = float(text)
            return number if math.isfinite(number) else text
    except ValueError:
        return text
    if t == "boolean" and text in ("true", "false"):
        return text == "true"
    return text


def _bounds(spec: KeySpec, key: str, number: float,
            default: tuple[float | None, float | None] = (None, None)) -> None:
    low = spec.min if spec.min is not None else default[0]
    high = spec.max if spec.max is not None else default[1]
    for ok, text in ((low is None or number >= low, f">= {low}"),
                     (high is None or number <= high, f"<= {high}"),
                     (spec.gt is None or number > spec.gt, f"> {spec.gt}"),
                     (spec.lt is None or number < spec.lt, f"< {spec.lt}")):
        if not ok:
            raise InvalidInput(f"{key} must be {text}; got {number:g}", rule="schema.range",
                               key=key)


def compiled_json(schema: Schema) -> bytes:
    return json.dumps(schema.compiled(), sort_keys=True).encode()
