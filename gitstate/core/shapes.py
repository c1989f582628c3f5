"""Shapes of structured values in schema.yaml: ``list``, ``object`` and ``json`` keys.

A declared key of type ``list`` has ``items`` (the shape of every element) and optional
``min_items``, ``max_items`` and ``unique``; an ``object`` has ``fields`` (name → shape, each
required unless it says ``required: false``) and refuses undeclared fields unless it says
``open: true``; ``json`` is any value within the limits of gitstate/core/values.py. A shape is a
declaration mapping or, for brevity, a bare type name (``window_ok: boolean``). Inside a
structure the scalar types are ``string`` (``min_length``, ``max_length``, ``pattern``),
``integer`` and ``number`` (``min``, ``max``), ``boolean`` and ``enum`` (``values``); any
shape may say ``nullable: true`` to allow null.

Validation never coerces, and a refusal names the path of the offending element::

    facts.window_ok: expected boolean, got "yes"
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidInput
from .values import canonical, join

STRUCTURED = ("list", "object", "json")
SCALARS = ("string", "integer", "number", "boolean", "enum")
_FIELDS = {"type", "description", "items", "min_items", "max_items", "unique", "fields",
           "open", "required", "nullable", "values", "min", "max", "min_length",
           "max_length", "pattern"}
DEPTH_MAX = 8  # as values.DEPTH_MAX: no shape can describe more than a value may hold


class DeclarationError(ValueError):
    """A malformed shape in schema.yaml (schemafile.py reports it as ``schema.invalid``)."""


@dataclass(frozen=True)
class Shape:
    type: str
    items: Shape | None = None
    fields: dict[str, Shape] = field(default_factory=dict)
    open: bool = False
    required: bool = True
    nullable: bool = False
    min_items: int | None = None
    max_items: int | None = None
    unique: bool = False
    values: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None

    def summary(self) -> str:
        if self.type == "list":
            return f"list of {self.items.summary() if self.items else 'json'}"
        if self.type == "object":
            inner = ", ".join(f"{k}{'' if s.required else '?'}: {s.summary()}"
                              for k, s in self.fields.items())
            return "{" + inner + (", ..." if self.open else "") + "}"
        if self.type == "enum":
            return " | ".join(self.values)
        return self.type


def parse(where: str, decl: Any, depth: int = 0) -> Shape:
    """A shape from its schema.yaml declaration; DeclarationError naming ``where`` when it
    is malformed."""
    if depth > DEPTH_MAX:
        raise DeclarationError(f"{where}: shapes nest deeper than {DEPTH_MAX} levels")
    if isinstance(decl, str):
        decl = {"type": decl}
    if not isinstance(decl, dict):
        raise DeclarationError(f"{where}: a shape is a type name or a mapping with a `type`")
    extra = set(decl) - _FIELDS
    if extra:
        raise DeclarationError(f"{where}: unknown fields {', '.join(sorted(map(str, extra)))}")
    kind = decl.get("type")
    if kind not in STRUCTURED + SCALARS:
        raise DeclarationError(f"{where}: type must be one of {', '.join(STRUCTURED + SCALARS)}")
    ints = {}
    for name in ("min_items", "max_items", "min_length", "max_length"):
        v = decl.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise DeclarationError(f"{where}: {name} must be a whole number >= 0")
        ints[name] = v
    numbers = {}
    for name in ("min", "max"):
        v = decl.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise DeclarationError(f"{where}: {name} must be a number")
        numbers[name] = float(v) if v is not None else None
    pattern = decl.get("pattern")
    if pattern is not None:
        try:
            re.compile(str(pattern))
        except re.error as exc:
            raise DeclarationError(f"{where}: bad pattern: {exc}") from None
    items = None
    if kind == "list":
        items = parse(f"{where}[]", decl.get("items", "json"), depth + 1)
    fields: dict[str, Shape] = {}
    if kind == "object":
        raw = decl.get("fields") or {}
        if not isinstance(raw, dict):
            raise DeclarationError(f"{where}: fields must be a mapping of name to shape")
        fields = {str(k): parse(join(where, str(k)), v, depth + 1) for k, v in raw.items()}
    values = tuple(str(v) for v in decl.get("values") or ())
    if kind == "enum" and not values:
        raise DeclarationError(f"{where}: an enum needs `values`")
    return Shape(type=str(kind), items=items, fields=fields, open=bool(decl.get("open")),
                 required=bool(decl.get("required", True)),
                 nullable=bool(decl.get("nullable", False)), min_items=ints["min_items"],
                 max_items=ints["max_items"], unique=bool(decl.get("unique")),
                 values=values, min=numbers["min"], max=numbers["max"],
                 min_length=ints["min_length"], max_length=ints["max_length"],
                 pattern=str(pattern) if pattern is not None else None)


def check(shape: Shape, value: Any, path: str, key: str) -> None:
    """Refuse ``value`` (at ``path``, for the state key ``key``) unless it has ``shape``."""

    def fail(expected: str, rule: str = "schema.type") -> InvalidInput:
        got = "null" if value is None else _short(value)
        return InvalidInput(f"{path}: expected {expected}, got {got}", rule=rule, key=key,
                            path=path)

    t = shape.type
    if value is None:
        if shape.nullable or t == "json":
            return
        raise fail(shape.summary())
    if t == "json":
        return
    if t == "list":
        if not isinstance(value, list):
            raise fail("a list")
        if shape.min_items is not None and len(value) < shape.min_items:
            raise fail(f"at least {shape.min_items} items", "schema.range")
        if shape.max_items is not None and len(value) > shape.max_items:
            raise fail(f"at most {shape.max_items} items", "schema.range")
        seen: dict[str, int] = {}
        for i, item in enumerate(value):
            assert shape.items is not None
            check(shape.items, item, join(path, i), key)
            if shape.unique:
                form = canonical(item, _scalar_form)
                if form in seen:
                    raise InvalidInput(f"{join(path, i)}: the same as item {seen[form]} "
                                       "(the list is declared unique)", rule="schema.unique",
                                       key=key, path=join(path, i))
                seen[form] = i
        return
    if t == "object":
        if not isinstance(value, dict):
            raise fail("an object")
        for name, inner in shape.fields.items():
            if name in value:
                check(inner, value[name], join(path, name), key)
            elif inner.required:
                raise InvalidInput(f"{join(path, name)}: required field missing",
                                   rule="schema.required", key=key, path=join(path, name))
        if not shape.open:
            extra = sorted(set(value) - set(shape.fields))
            if extra:
                raise InvalidInput(f"{join(path, extra[0])}: field not declared (the object "
                                   f"is closed; declared: {', '.join(shape.fields) or 'none'})",
                                   rule="schema.extra_field", key=key,
                                   path=join(path, extra[0]))
        return
    _check_scalar(shape, value, fail)


def _check_scalar(shape: Shape, value: Any, fail: Any) -> None:
    t = shape.type
    if t in ("string", "enum"):
        if not isinstance(value, str):
            raise fail("a string" if t == "string" else "one of " + ", ".join(shape.values))
        if t == "enum" and value not in shape.values:
            raise fail("one of " + ", ".join(shape.values), "schema.enum")
        if shape.min_length is not None and len(value) < shape.min_length:
            raise fail(f"at least {shape.min_length} characters", "schema.range")
        if shape.max_length is not None and len(value) > shape.max_length:
            raise fail(f"at most {shape.max_length} characters", "schema.range")
        if shape.pattern is not None and not re.fullmatch(shape.pattern, value):
            raise fail(f"text matching {shape.pattern!r}", "schema.pattern")
        return
    if t == "boolean":
        if not isinstance(value, bool):
            raise fail("boolean")
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            (t == "integer" and not isinstance(value, int)):
        raise fail("an integer" if t == "integer" else "a number")
    if shape.min is not None and value < shape.min:
        raise fail(f">= {shape.min:g}", "schema.range")
    if shape.max is not None and value > shape.max:
        raise fail(f"<= {shape.max:g}", "schema.range")


def _scalar_form(value: Any) -> str:
    from .compare import canonical_text

    return canonical_text(value)


def _short(value: Any) -> str:
    from .values import compact

    text = compact(value)
    return text if len(text) <= 60 else text[:57] + "..."
