"""schema.yaml as text: read from untrusted YAML into a Schema, and written back.

It is read with ruamel.yaml in round-trip mode, so comments and key order survive ``schema
show`` / ``schema set``; untrusted YAML is refused before it is built when it uses anchors or
aliases (the "billion laughs" family), nests ``[`` and ``{`` deeper than
:data:`MAX_FLOW_DEPTH` or is larger than :data:`MAX_SCHEMA_BYTES`. :func:`parse_schema` then
validates every field of every declaration (``gitstate/core/schema.py`` holds what the
result means: the key types, writers, phases and how a write is checked).
"""

from __future__ import annotations

import re
from typing import Any

from . import layout, shapes
from .errors import InvalidInput, SchemaError
from .policy import ApprovalPolicy
from .schema import TYPES, WRITERS, KeySpec, Schema

MAX_FLOW_DEPTH = 64
MAX_SCHEMA_BYTES = layout.SCHEMA_MAX_BYTES
_KEY_FIELDS = {"type", "description", "values", "min", "max", "gt", "lt", "pattern",
               "min_length", "max_length", "nullable", "ttl_hours", "writers", "coerce",
               "items", "min_items", "max_items", "unique", "fields", "open", "secrets",
               "sensitive"}
_SHAPE_ONLY = {"items", "min_items", "max_items", "unique", "fields", "open"}


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
