"""What may enter a run, checked before any rule of the run is: the run id (it becomes a
ref name), each text field (one line, bounded, no secret) and an event's strict shape (a
known type, exactly its fields, each of its type; the vocabulary is gitstate/core/runevents.py).
Every refusal here and in the run's rules (gitstate/runs/model.py) is a RunRefused naming
``run.<rule>``.
"""

from __future__ import annotations

import re
from typing import Any

from ..core.errors import Refused
from ..core.layout import is_commit_id
from ..core.runevents import BOOL, EVENTS, INT, LIST, STR

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TEXT_MAX = 2000
LIST_MAX = 200


class RunRefused(Refused):
    """An event a rule of the run refuses (rule ``run.<name>``); nothing is recorded."""


def refused(name: str, message: str, **details: Any) -> RunRefused:
    return RunRefused(message, rule=f"run.{name}", **details)


def check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id) or ".." in run_id or \
            run_id.endswith((".", ".lock")):
        raise refused("id", "a run id is 1-64 of A-Z a-z 0-9 . _ - (starting with a letter or "
                      "digit; no '..', not ending in '.' or '.lock')")
    return run_id


def check_text(value: object, where: str) -> str:
    from ..core.rules import check_secret, check_value

    if not isinstance(value, str) or not value.strip():
        raise refused("invalid", f"{where} must be non-empty text")
    if len(value) > TEXT_MAX:
        raise refused("invalid", f"{where} is over {TEXT_MAX} characters")
    check_value(value)  # one line, no control, invisible or bidi characters
    check_secret(value, where)
    return value


def validate_event(event: object) -> dict[str, Any]:
    """An event, strictly: a known type, exactly its fields, each of its type."""
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise refused("invalid", 'an event is an object {"type": ..., fields}')
    kind = event["type"]
    fields = EVENTS.get(kind)
    if fields is None:
        raise refused("unknown_event", f"unknown event type {kind!r}; known: "
                      f"{', '.join(sorted(EVENTS))}")
    extra = sorted(set(event) - set(fields) - {"type"})
    if extra:
        raise refused("invalid", f"{kind}: unknown field {extra[0]!r}")
    out: dict[str, Any] = {"type": kind}
    for name, (kind_of, required) in fields.items():
        if name not in event:
            if required:
                raise refused("invalid", f"{kind}: {name} is required")
            continue
        out[name] = _field(kind, name, kind_of, event[name])
    return out


def _field(kind: str, name: str, kind_of: str, value: Any) -> Any:
    where = f"{kind}.{name}"
    if kind_of == STR:
        return check_text(value, where)
    if kind_of == "commit":
        if not is_commit_id(value):
            raise refused("invalid", f"{where} must be a commit id (40 lowercase hex digits)")
        return value
    if kind_of == BOOL:
        if not isinstance(value, bool):
            raise refused("invalid", f"{where} must be true or false")
        return value
    if kind_of == INT:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
            raise refused("invalid", f"{where} must be a whole number >= 0")
        return value
    if kind_of == LIST:
        if not isinstance(value, list) or not value or len(value) > LIST_MAX:
            raise refused("invalid", f"{where} must be a list of 1-{LIST_MAX} steps")
        steps = []
        for i, step in enumerate(value):
            if not isinstance(step, dict) or set(step) - {"step_id", "description",
                                                         "side_effect"} or \
                    "step_id" not in step:
                raise refused("invalid", f"{where}[{i}] must be {{step_id, description?, "
                              "side_effect?}")
            steps.append({"step_id": check_text(step["step_id"], f"{where}[{i}].step_id"),
                          "side_effect": bool(step.get("side_effect", False))})
        return steps
    if not isinstance(value, dict) or not value or len(value) > LIST_MAX:
        raise refused("invalid", f"{where} must map each criterion to an evidence ref")
    return {check_text(k, f"{where} key"): check_text(v, f"{where}[{k!r}]")
            for k, v in value.items()}
