"""Typed state: schema.yaml, the allowed keys and values, writers, phases and tool allowlists.

The schema lives in the state repository next to working_state.json and changes only by an
audited commit (``gitstate schema set``). It is read with ruamel.yaml in round-trip mode, so
comments and key order survive ``schema show`` / ``schema set``; untrusted YAML is refused
before it is built when it uses anchors or aliases (the "billion laughs" family) or is large.

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
MAX_FLOW_DEPTH = 64
MAX_SCHEMA_BYTES = layout.SCHEMA_MAX_BYTES
TYPES = ("string", "integer", "number", "boolean", "enum", "percent", *shapes.STRUCTURED)
WRITERS = ("agent", "runtime", "human")
_PERCENT = re.compile(r"(-?[0-9]+(?:\.[0-9]+)?)%")
_KEY_FIELDS = {"type", "description", "values", "min", "max", "gt", "lt", "pattern",
               "min_length", "max_length", "nullable", "ttl_hours", "writers", "coerce",
               "items", "min_items", "max_items", "unique", "fields", "open", "secrets",
               "sensitive"}
_SHAPE_ONLY = {"items", "min_items", "max_items", "unique", "fields", "open"}


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


# -- reading and writing schema.yaml ------------------------------------------------------

def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML()  # round-trip: comments and order survive
    yaml.preserve_quotes = True
    return yaml


def load_yaml(text: str) -> Any:
    """Parse untrusted schema YAML: no anchors or aliases, bounded size."""
    if len(text.encode("utf-8")) > MAX_SCHEMA_BYTES:
        raise SchemaError(f"schema.yaml is over {MAX_SCHEMA_BYTES} bytes")
    if _flow_depth(text) > MAX_FLOW_DEPTH:  # ruamel's scanner is quadratic in this depth
        raise SchemaError(f"schema.yaml nests [ and {{ more than {MAX_FLOW_DEPTH} deep")
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.events import AliasEvent

    yaml = _yaml()
    try:
        for event in yaml.parse(text):
            if isinstance(event, AliasEvent) or getattr(event, "anchor", None):
                raise SchemaError("schema.yaml must not use anchors or aliases (&, *)")
        return yaml.load(text)
    except YAMLError as exc:
        raise SchemaError(f"schema.yaml is not valid YAML: {_yaml_problem(exc)}") from exc
    except RecursionError:  # ruamel's parser recurses once per level of nesting
        raise SchemaError("schema.yaml nests too deep to read") from None


def _yaml_problem(exc: Exception) -> str:
    """ruamel's error as one line: what is wrong and where (its own text spans several
    lines with a caret drawing, which a one-line refusal would show as escapes)."""
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    text = str(problem) if problem else " ".join(str(exc).split())
    return f"{text}{where}"


def _flow_depth(text: str) -> int:
    """How deep ``[`` and ``{`` nest, counting them anywhere (in a string too: never less
    than YAML's own nesting)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}" and depth:
            depth -= 1
    return deepest


def dump_yaml(data: Any) -> str:
    import io

    out = io.StringIO()
    _yaml().dump(data, out)
    return out.getvalue()


def parse_schema(text: str) -> Schema:
    """Validate schema.yaml text into a Schema."""
    raw = load_yaml(text)
    if not isinstance(raw, dict):
        raise SchemaError("schema.yaml must be a mapping with `version` and `keys`")
    unknown = set(raw) - {"version", "keys", "unknown_keys", "phase_key", "tools", "approvals",
                          "runs"}
    if unknown:
        raise SchemaError(f"unknown top-level fields: {', '.join(sorted(unknown))}")
    version = raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SchemaError("`version` must be a positive integer")
    policy = raw.get("unknown_keys", "reject")
    if policy not in ("reject", "allow"):
        raise SchemaError("`unknown_keys` must be reject or allow")
    keys_raw = raw.get("keys") or {}
    if not isinstance(keys_raw, dict):
        raise SchemaError("`keys` must be a mapping of key (or pattern) to declaration")
    specs = tuple(_spec(str(name), decl) for name, decl in keys_raw.items())
    phase_key = raw.get("phase_key")
    tools_raw = raw.get("tools") or {}
    schema = Schema(version, specs, policy, phase_key,
                    {str(p): tuple(str(t) for t in ts) for p, ts in dict(tools_raw).items()}
                    if isinstance(tools_raw, dict) else {}, _approvals(raw.get("approvals")),
                    *_runs(raw.get("runs")))
    if phase_key is not None:
        spec = schema.spec(str(phase_key))
        if spec is None or spec.type != "enum":
            raise SchemaError("`phase_key` must name a declared enum key")
        for phase, tools in tools_raw.items():
            if phase not in spec.values:
                raise SchemaError(f"tools: {phase!r} is not a value of {phase_key}")
            if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
                raise SchemaError(f"tools: {phase} must be a list of tool names")
    elif tools_raw:
        raise SchemaError("`tools` needs a `phase_key`")
    return schema


def _approvals(raw: Any) -> dict[str, ApprovalPolicy]:
    from .policy import parse_policies

    return parse_policies(raw)


def _writer_list(where: str, raw: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(w, str) for w in raw) \
            or not set(raw) <= set(allowed):
        raise SchemaError(f"{where} must be a non-empty list among {', '.join(allowed)}")
    return tuple(raw)


def _runs(raw: Any) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """``runs: {writers: {event_type: [writers]}, promotable: {key: [writers]}}``
    (docs/runs.md): who records each event type, and which keys a run may be promoted to,
    by whom. The agent never records an approval."""
    from .rules import check_key
    from .runevents import EVENTS

    if raw is None:
        return {}, {}
    if not isinstance(raw, dict) or set(raw) - {"writers", "promotable"}:
        raise SchemaError("`runs` takes `writers` and `promotable` only")
    writers, promotable = {}, {}
    for kind, who in dict(raw.get("writers") or {}).items():
        if kind not in EVENTS:
            raise SchemaError(f"runs.writers: unknown event type {kind!r}; known: "
                              f"{', '.join(sorted(EVENTS))}")
        writers[str(kind)] = _writer_list(f"runs.writers.{kind}", who, WRITERS)
        if kind == "approval_recorded" and "agent" in who:
            raise SchemaError("runs.writers.approval_recorded: the agent never records its "
                              "own approvals")
    for key, who in dict(raw.get("promotable") or {}).items():
        try:
            check_key(str(key).replace("*", "x"))
        except InvalidInput as exc:
            raise SchemaError(f"runs.promotable: {key!r}: {exc.message}") from None
        promotable[str(key)] = _writer_list(f"runs.promotable.{key}", who, WRITERS)
    return writers, promotable


def _spec(name: str, decl: Any) -> KeySpec:
    from .rules import check_key

    pattern_name = name.replace("*", "x")
    try:
        check_key(pattern_name)
    except InvalidInput as exc:
        raise SchemaError(f"declared key {name!r}: {exc.message}") from None
    if not isinstance(decl, dict):
        raise SchemaError(f"{name}: the declaration must be a mapping with a `type`")
    extra = set(decl) - _KEY_FIELDS
    if extra:
        raise SchemaError(f"{name}: unknown fields {', '.join(sorted(extra))}")
    kind = decl.get("type")
    if kind not in TYPES:
        raise SchemaError(f"{name}: type must be one of {', '.join(TYPES)}")
    values = tuple(str(v) for v in decl.get("values") or ())
    if kind == "enum" and not values:
        raise SchemaError(f"{name}: an enum needs `values`")
    writers = tuple(decl.get("writers") or WRITERS)
    if not set(writers) <= set(WRITERS):
        raise SchemaError(f"{name}: writers must be among {', '.join(WRITERS)}")
    pattern = decl.get("pattern")
    if pattern is not None:
        try:
            re.compile(str(pattern))
        except re.error as exc:
            raise SchemaError(f"{name}: bad pattern: {exc}") from None
    numbers = {}
    for bound in ("min", "max", "gt", "lt", "ttl_hours"):
        v = decl.get(bound)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise SchemaError(f"{name}: {bound} must be a number")
        numbers[bound] = float(v) if v is not None else None
    if numbers["ttl_hours"] is not None and numbers["ttl_hours"] <= 0:
        raise SchemaError(f"{name}: ttl_hours must be > 0")
    shape = None
    if kind in shapes.STRUCTURED:
        try:
            shape = shapes.parse(name, {k: v for k, v in decl.items()
                                        if k in _SHAPE_ONLY or k in ("type", "values")})
        except shapes.DeclarationError as exc:
            raise SchemaError(str(exc)) from None
    elif set(decl) & _SHAPE_ONLY:
        raise SchemaError(f"{name}: {', '.join(sorted(set(decl) & _SHAPE_ONLY))} apply to "
                          "list and object keys only")
    secrets = decl.get("secrets", "scan")
    if secrets not in ("scan", "allow"):
        raise SchemaError(f"{name}: secrets must be scan or allow")
    sensitive = decl.get("sensitive")
    if sensitive not in (None, "refuse", "redact"):
        raise SchemaError(f"{name}: sensitive must be redact or refuse")
    return KeySpec(
        shape=shape, secrets=str(secrets), sensitive=sensitive,
        name=name, type=str(kind), description=str(decl.get("description") or ""),
        values=values, min=numbers["min"], max=numbers["max"], gt=numbers["gt"],
        lt=numbers["lt"], pattern=str(pattern) if pattern is not None else None,
        min_length=decl.get("min_length"), max_length=decl.get("max_length"),
        nullable=bool(decl.get("nullable", True)), ttl_hours=numbers["ttl_hours"],
        writers=writers, coerce=bool(decl.get("coerce", False)))


def compiled_json(schema: Schema) -> bytes:
    return json.dumps(schema.compiled(), sort_keys=True).encode()
