"""What a LangGraph store query matches (gitstate/langgraph/store.py): a search ``filter`` on an
item's value, with the semantics of LangGraph's in-memory store (``$eq``, ``$ne``, ``$gt``,
``$gte``, ``$lt``, ``$lte``, nested objects, exact lists; a filter key is a member of the
value, else a dotted path into it), and a ``list_namespaces`` match condition (a prefix or
suffix of labels, ``*`` standing for any one label). Pure, stdlib only: a filter is data
compared with data, never a query language, so no value can escape into one.
"""

from __future__ import annotations

from typing import Any, Protocol


class Condition(Protocol):
    """LangGraph's ``MatchCondition``: ``match_type`` prefix or suffix, and a path."""

    @property
    def match_type(self) -> str: ...
    @property
    def path(self) -> tuple[str, ...]: ...


def _at_path(value: Any, path: str) -> tuple[bool, Any]:
    """A filter key: a member of the value, else a dotted path into it."""
    if isinstance(value, dict) and path in value:
        return True, value[path]
    node = value
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _compare(item_value: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics (its in-memory store's, JSONB-like): a dict of ``$``
    operators, a nested dict, an exact list, or equality."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(item_value, op, v) for op, v in wanted.items())
        return isinstance(item_value, dict) and all(
            _compare(item_value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return isinstance(item_value, list | tuple) and len(item_value) == len(wanted) \
            and all(_compare(a, b) for a, b in zip(item_value, wanted, strict=True))
    return bool(item_value == wanted)


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValueError(f"unsupported filter operator {op!r} ($eq, $ne, $gt, $gte, $lt, "
                         "$lte)")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False  # a comparison of a missing or non-numeric field matches nothing
    try:
        a, b = float(value), float(operand)
    except (TypeError, ValueError, OverflowError):
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def matches(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    for path, wanted in (filter or {}).items():
        found, got = _at_path(value, path)
        if not _compare(got if found else None, wanted):
            return False
    return True


def namespace_matches(condition: Condition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"unsupported match type {condition.match_type!r}")
    return all(p == "*" or n == p for n, p in pairs)
