"""A host's settings file, read and merged without loss (``gitstate install``'s files).

Every file is read never through a symlink and never anything but a regular file, bounded
(:func:`read_settings`); a JSON file is parsed strictly (a duplicate key, NaN, comments: each
refused with what to do, since a rewrite would lose them), merged with what the user has
there (their other servers, settings and hooks are kept: :func:`put_server`,
:func:`put_hooks`), and compared with what stands there, so that an unchanged file keeps its
bytes (:class:`Plan`). Which file each host gets is ``install.py``'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import Refused
from ..system import safefile

SERVER = "gitstate"  # the entry's name in every host's server table
LIMIT = 64 << 20  # ~/.claude.json holds the history of every project; generous


@dataclass
class Plan:
    """One file: what stands there now (None: absent) and what it is to hold."""

    path: Path
    old: bytes | None
    new: bytes
    what: str  # "the MCP server", "the hooks", ...

    @property
    def changes(self) -> bool:
        return self.old != self.new


def read_settings(path: Path) -> bytes | None:
    """The bytes at ``path`` (None when absent); a symlink or anything but a regular file is
    refused, so nothing is ever written through one."""
    kind = safefile.kind(path)
    if kind is None:
        return None
    if kind == "symlink":
        raise Refused(f"{path} is a symlink; gitstate install never writes through one: "
                      "merge the configuration into the file it points to by hand, or "
                      "replace the link with a regular file", rule="install.symlink")
    if kind != "file":
        raise Refused(f"{path} is not a regular file", rule="install.not_regular")
    try:
        return safefile.read_regular(path, LIMIT)
    except safefile.NotRegular as exc:
        raise Refused(str(exc), rule="install.not_regular") from None
    except safefile.TooLarge as exc:
        raise Refused(str(exc), rule="install.too_large") from None


def json_plan(path: Path, what: str, merge: Callable[[dict[str, Any]], None]) -> Plan:
    """A JSON object file merged by ``merge`` (which edits the parsed object in place)."""
    old = read_settings(path)
    data: Any = {}
    if old is not None and old.strip():
        data = _parse_json(path, old)
        if not isinstance(data, dict):
            raise Refused(f"{path} holds JSON that is not an object", rule="install.not_json")
    before = json.dumps(data, sort_keys=True)
    merge(data)
    if old is not None and json.dumps(data, sort_keys=True) == before:
        return Plan(path, old, old, what)  # nothing to add: the bytes stay as they are
    try:
        new = (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()
    except UnicodeEncodeError:  # a lone surrogate escape (\ud800) has no UTF-8 form
        raise Refused(f"{path} holds a lone surrogate escape (\\ud800...), which cannot be "
                      "written back as UTF-8; fix it, then run again",
                      rule="install.not_json") from None
    return Plan(path, old, new, what)


def _parse_json(path: Path, raw: bytes) -> Any:
    """Strict JSON: a duplicate key (the hosts keep the last; a rewrite would drop the
    first for good) and NaN or Infinity (not JSON) are refused, and so are comments, with
    what to do (Gemini CLI reads JSONC, but a rewrite would lose them)."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise ValueError(f"the key {key!r} appears twice")
            out[key] = value
        return out

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(raw, object_pairs_hook=pairs, parse_constant=constant)
    except (ValueError, RecursionError) as exc:
        text = raw.decode("utf-8", "replace")
        hint = (" it holds comments (JSONC), which a rewrite would lose: remove them, or add "
                "the entry by hand;" if re.search(r"^\s*(//|/\*)", text, re.M) else "")
        raise Refused(f"{path} is not valid JSON ({exc});{hint} fix it or move it aside, "
                      "then run again", rule="install.not_json") from None


def _table(data: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    """``data[name]``, an object (created if absent)."""
    value = data.setdefault(name, {})
    if not isinstance(value, dict):
        raise Refused(f"{path}: {name!r} is not an object; fix it by hand",
                      rule="install.not_mergeable")
    return value


def put_server(path: Path, entry: dict[str, Any],
                container: Callable[[dict[str, Any]], dict[str, Any]] | None = None
                ) -> Callable[[dict[str, Any]], None]:
    """A merge that sets ``mcpServers.gitstate``: our fields over the user's (their other
    fields in the entry, such as env or a timeout, are kept)."""
    def merge(data: dict[str, Any]) -> None:
        where = container(data) if container else data
        servers = _table(where, "mcpServers", path)
        current = servers.get(SERVER)
        kept = current if isinstance(current, dict) else {}
        servers[SERVER] = {**kept, **entry}
    return merge


def put_hooks(settings: Path, runtime: str, command: str,
               events: tuple[tuple[str, str | None], ...], fields: dict[str, Any]
               ) -> Callable[[dict[str, Any]], None]:
    """A merge that puts ``command`` in ``hooks.EVENT`` for each (event, matcher), in the
    group shape Claude Code and Gemini CLI share; a hook that already runs ``gitstate ...
    hook RUNTIME`` (merged by hand, or by an older gitstate) is pointed at this one instead
    of doubled."""
    def merge(data: dict[str, Any]) -> None:
        table = _table(data, "hooks", settings)
        for event, matcher in events:
            groups = table.setdefault(event, [])
            if not isinstance(groups, list):
                raise Refused(f"{settings}: hooks.{event} is not a list",
                              rule="install.not_mergeable")
            found = False
            for group in groups:
                for hook in group.get("hooks", []) if isinstance(group, dict) else []:
                    if isinstance(hook, dict) and _is_ours(hook.get("command"), runtime):
                        hook["command"] = command
                        found = True
            if not found:
                group = {"hooks": [{**fields, "type": "command", "command": command}]}
                groups.append({"matcher": matcher, **group} if matcher else group)
    return merge


def _is_ours(command: object, runtime: str) -> bool:
    return isinstance(command, str) and "gitstate" in command \
        and command.rstrip().endswith(f"hook {runtime}")
