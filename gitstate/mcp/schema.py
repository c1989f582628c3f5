"""The MCP tools' output schemas, generated from the result types in ``results``.

Nothing is declared twice: each output model is built from a result dataclass's fields
(types, defaults, descriptions) and :class:`results.Refusal`'s, so a field added to a
result appears in the MCP schema at once. One object schema carries both shapes (see
docs/mcp.md, "Refusals"): a client that reads only ``properties`` sees every field; a
validating one (the TypeScript SDK, MCP Inspector) checks each shape exactly through
``oneOf``, told apart by ``ok``.

Needs pydantic (the ``mcp`` extra); only the MCP server imports it.
"""

from __future__ import annotations

import dataclasses
import typing
from functools import cache
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..core import model, results
from ..core.model import Entry, Handoff

RECORDS: dict[type, str] = {Entry: "Entry", Handoff: "Handoff"}
"""The model's slot records (no dataclasses on the wake-up path) and their doc strings'
owners: their pydantic form is derived from ``field_names`` and their annotations."""


@cache
def record_model(cls: Any) -> type[BaseModel]:
    hints = typing.get_type_hints(cls, vars(model))
    fields: dict[str, Any] = {}
    for name in cls.field_names:
        tp = hints[name]
        optional = type(None) in get_args(tp)
        fields[name] = (tp, None) if optional else (tp, ...)
    return create_model(RECORDS[cls], __doc__=cls.__doc__, **fields)


def _convert(tp: Any) -> Any:
    """``tp`` with the model's records replaced by their pydantic models."""
    if isinstance(tp, type) and tp in RECORDS:
        return record_model(tp)
    if typing.is_typeddict(tp):  # a history record: pydantic takes only typing_extensions'
        return dict[str, Any]
    args = get_args(tp)
    origin = get_origin(tp)
    if not args or origin is Literal:
        return tp
    converted = tuple(_convert(a) for a in args)
    if origin in (typing.Union, type(int | str)):
        out = converted[0]
        for a in converted[1:]:
            out = out | a
        return out
    return origin[converted] if len(converted) > 1 else origin[converted[0]]


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls, {**vars(model), **vars(results)})
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in ("ok", "details"):
            continue
        tp = _convert(hints[f.name])
        out[f.name] = (tp | None, Field(None, description=f.metadata.get("doc")))
    return out


def _one_of(success: list[str]) -> dict[str, Any]:
    return {"oneOf": [
        {"properties": {"ok": {"const": True}}, "required": ["ok", *success]},
        {"properties": {"ok": {"const": False}}, "required": ["ok", "error", "message"]},
    ]}


def output_model(cls: type, required: list[str]) -> type[BaseModel]:
    """The output model of a tool whose success is ``cls`` and whose refusal is
    :class:`results.Refusal`; ``required``: the fields every success carries."""
    fields = {**_fields(results.Refusal), **_fields(cls)}
    fields["ok"] = (bool, Field(description="true: the call succeeded; false: it was "
                                "refused or failed, and nothing was written."))
    fields["next_step"] = (str | None, Field(None, description="(refusals) What to do now, "
                                        "naming the tool to call."))
    return create_model(
        f"{cls.__name__}Out", __doc__=cls.__doc__,
        __config__=ConfigDict(extra="allow", json_schema_extra=_one_of(required)),
        **fields)


WriteOut = output_model(results.WriteResult, ["op", "commit", "live_keys", "max_keys"])
StateOut = output_model(results.StateView, ["head", "now", "keys", "live_keys", "max_keys"])
RunOut = output_model(results.RunView, ["run_id", "head", "goal", "state", "next"])


JSON_VALUE = {"anyOf": [
    {"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"},
    {"type": "array", "items": {"$ref": "#/$defs/JsonValue"}},
    {"type": "object", "additionalProperties": {"$ref": "#/$defs/JsonValue"}}],
    "description": "Any JSON value."}
_ANNOTATIONS = {"title", "description"}


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every schema that constrains nothing (pydantic's ``{}`` for ``Any``)
    replaced by an explicit JSON value, so portability lints (MCP Inspector ``--strict``) and
    strict converters find no "accepts anything" hole."""
    used = False

    def walk(node: Any, is_schema: bool) -> Any:
        nonlocal used
        if isinstance(node, dict):
            if is_schema and not set(node) - _ANNOTATIONS:
                used = True
                return {"$ref": "#/$defs/JsonValue", **node}
            out: dict[str, Any] = {}
            for key, value in node.items():
                if key in ("properties", "$defs", "patternProperties"):
                    out[key] = {k: walk(v, True) for k, v in value.items()}
                elif key in ("items", "additionalProperties", "not"):
                    out[key] = walk(value, True)
                elif key in ("anyOf", "oneOf", "allOf", "prefixItems"):
                    out[key] = [walk(v, True) for v in value]
                else:
                    out[key] = value
            return out
        return node

    cleaned: dict[str, Any] = walk(schema, False)
    if used:
        cleaned.setdefault("$defs", {})["JsonValue"] = JSON_VALUE
    return cleaned


DRAFT_07 = "http://json-schema.org/draft-07/schema#"


def output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """An output schema that names its dialect, JSON Schema draft-07 (``$schema``): clients
    that validate every result check the schema itself first, and the Python SDK 1.x client
    does so on every call (``jsonschema.validate``): against draft 2020-12's meta-schema that
    costs about 160 ms a call for these schemas, against draft-07's about 3 ms
    (bench/mcp_roundtrip.py on the 1.x line). The schemas use no keyword draft-07 lacks;
    their shared parts stay under ``$defs``, which ``$ref`` reaches as a JSON pointer in any
    dialect and draft-07's meta-schema does not descend into (the MCP specification lets a
    schema name its dialect)."""
    out: dict[str, Any] = {"$schema": DRAFT_07, **clean_schema(schema)}
    return out


def inline_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """An input schema with every ``#/$defs/...`` reference replaced by its target (input
    models do not recurse) and OpenAPI's ``discriminator`` dropped: strict converters
    (OpenAI Agents) refuse references they cannot check, and plain JSON Schema validators
    ignore ``discriminator`` anyway (``oneOf`` over ``const`` tags already decides)."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = walk(defs[ref.removeprefix("#/$defs/")])
                return {**target, **{k: walk(v) for k, v in node.items() if k != "$ref"}}
            return {k: walk(v) for k, v in node.items()
                    if k not in ("$defs", "discriminator")}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out: dict[str, Any] = walk(schema)
    return out
