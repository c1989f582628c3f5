"""Structured values: JSON arrays and objects kept under one key, and their limits.

A value is a scalar (one line of text, a finite number, a boolean) or an array or object of
values. Structures are bounded so that one key can never outweigh the section it is
rendered into or take a reader's stack (docs/design.md, "Structured values"):

* depth at most ``DEPTH_MAX`` (a flat list is depth 1), at most ``NODES_MAX`` elements in
  all (every array item and object member counts), at most ``BYTES_MAX`` bytes as compact
  JSON;
* object keys: 1 to ``OBJECT_KEY_MAX`` characters of ``A-Z a-z 0-9 _ . -``, starting with a
  letter, digit or underscore (a key is printed in paths like ``facts.window_ok`` and in the
  rendered line, so it must be plain);
* every string inside follows the scalar rules (``rules.check_value``: one line, no control,
  invisible or bidirectional characters), checked by the caller through ``leaf``.

Comparison (compare-and-swap, "unchanged?") uses ``canonical``: object key order never
matters, and each scalar inside compares as a scalar does (``compare.canonical_text``: 262,
262.0 and "262" are equal). Rendering uses ``compact``: sorted keys, no spaces, non-ASCII
kept readable. Pure and stdlib-only: the wake-up path renders structures too.
"""

from __future__ import annotations

import json
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DEPTH_MAX = 8
NODES_MAX = 256
BYTES_MAX = 4096
OBJECT_KEY_MAX = 64
_OBJECT_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class ShapeError(ValueError):
    """A structure outside the limits; ``path`` names the offending element."""

    def __init__(self, path: str, message: str, rule: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.rule = rule


def is_structured(value: object) -> bool:
    return isinstance(value, list | dict)


def join(path: str, part: str | int) -> str:
    """``facts`` + ``window_ok`` = ``facts.window_ok``; ``plan`` + 2 = ``plan[2]``."""
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else part


def check(value: Any, path: str, leaf: Callable[[Any, str], Any]) -> Any:
    """``value`` checked against the limits, each scalar inside through ``leaf(scalar,
    path)`` (which raises or returns it); returns the structure rebuilt from plain lists
    and dicts. Raises ShapeError naming the path of the first offending element."""
    nodes = [0]
    checked = _check(value, path, leaf, 0, nodes)
    size = len(compact(checked).encode("utf-8"))
    if size > BYTES_MAX:
        raise ShapeError(path, f"{size} bytes as JSON; the limit is {BYTES_MAX}",
                         "value.too_long")
    return checked


def _check(value: Any, path: str, leaf: Callable[[Any, str], Any], depth: int,
           nodes: list[int]) -> Any:
    if not isinstance(value, list | dict):
        return leaf(value, path)
    if depth >= DEPTH_MAX:
        raise ShapeError(path, f"nested deeper than {DEPTH_MAX} levels", "value.depth")
    if isinstance(value, list):
        nodes[0] += len(value)
        _count(path, nodes)
        return [_check(item, join(path, i), leaf, depth + 1, nodes)
                for i, item in enumerate(value)]
    nodes[0] += len(value)
    _count(path, nodes)
    out = {}
    for key, item in value.items():
        if not isinstance(key, str) or len(key) > OBJECT_KEY_MAX or \
                not _OBJECT_KEY.fullmatch(key):
            shown = key if isinstance(key, str) and key.isprintable() and len(key) <= 80 \
                else "(a key)"
            raise ShapeError(path, f"object key {shown!r} must be 1-{OBJECT_KEY_MAX} "
                             "characters of A-Z a-z 0-9 _ . - (starting with a letter, "
                             "digit or _)", "value.object_key")
        out[key] = _check(item, join(path, key), leaf, depth + 1, nodes)
    return out


def _count(path: str, nodes: list[int]) -> None:
    if nodes[0] > NODES_MAX:
        raise ShapeError(path, f"more than {NODES_MAX} elements in all", "value.size")


def compact(value: Any) -> str:
    """The one-line form: sorted keys, no spaces, non-ASCII readable. json escapes every
    control character; U+2028, U+2029 and U+0085 never pass the leaf check."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def canonical(value: Any, scalar: Callable[[Any], str]) -> str:
    """The comparison form: ``scalar`` applied to every scalar inside (so numbers and
    numeric strings compare as scalars do), object members sorted."""
    return json.dumps(_canon(value, scalar), ensure_ascii=False, sort_keys=True,
                      separators=(",", ":"))


def _canon(value: Any, scalar: Callable[[Any], str]) -> Any:
    if isinstance(value, list):
        return ["L", [_canon(v, scalar) for v in value]]
    if isinstance(value, dict):
        return ["O", {k: _canon(v, scalar) for k, v in value.items()}]
    return scalar(value)


def changes(old: Any, new: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """What differs between two values, element by element: ``(path, old, new)`` with
    ``None`` for an element added or removed. Scalars, or a change of kind, are one change
    at ``path``."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(old.keys() | new.keys()):
            if key not in new:
                out.append((join(path, key), old[key], None))
            elif key not in old:
                out.append((join(path, key), None, new[key]))
            else:
                out += changes(old[key], new[key], join(path, key))
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = []
        for i in range(max(len(old), len(new))):
            if i >= len(new):
                out.append((join(path, i), old[i], None))
            elif i >= len(old):
                out.append((join(path, i), None, new[i]))
            else:
                out += changes(old[i], new[i], join(path, i))
        return out
    if type(old) is type(new) and old == new:
        return []
    return [(path, old, new)]
