"""Wiring a host to this gitstate: its MCP configuration and, where the host has them, its
hooks, merged into the files the host reads (``gitstate install HOST``).

Every file is planned before any is written: read (never through a symlink, never
anything but a regular file), merged with what the user has there (their other servers,
settings and hooks are kept), compared with what stands there (equal: not written at
all, so a second run changes no byte): ``settings.py``; then written whole through
:func:`safefile.write_atomic`, after a copy of the old bytes in ``<file>.gitstate-backup``.
A refusal of one file leaves every file as it was.

The server command is this gitstate's own: the absolute ``sys.executable -m gitstate``
with the agent directory absolute, so it holds whichever directory the host starts in.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import Refused
from ..system import safefile
from .settings import SERVER, Plan, json_plan, put_hooks, put_server, read_settings

HOSTS = ("claude-code", "codex", "gemini", "cursor")
BACKUP = ".gitstate-backup"
SESSION_MATCHER = "startup|resume|clear|compact"


@dataclass
class Wiring:
    host: str
    scope: str  # "project" or "user"
    plans: list[Plan] = field(default_factory=list)
    todo: list[str] = field(default_factory=list)


def server_argv(agent_dir: Path) -> list[str]:
    """This gitstate's MCP server for ``agent_dir``: absolute interpreter (not resolved: a
    virtual environment's python is a link that must stay one), absolute agent directory."""
    return [os.path.abspath(sys.executable), "-m", "gitstate", "--agent-dir",
            str(agent_dir.absolute()), "mcp"]


def hook_command(agent_dir: Path, runtime: str = "claude-code") -> str:
    """A host's hook command: ``gitstate hook RUNTIME`` (the fast path) for ``agent_dir``,
    quoted for the shell the host runs it in."""
    argv = [*server_argv(agent_dir)[:-1], "hook", runtime]
    return shlex.join(argv)


def _claude(agent_dir: Path, scope: str, project: Path, home: Path) -> Wiring:
    wiring = Wiring("claude-code", scope)
    argv = server_argv(agent_dir)
    entry: dict[str, Any] = {"type": "stdio", "command": argv[0], "args": argv[1:]}

    def with_env(data: dict[str, Any]) -> dict[str, Any]:
        current = data.get("mcpServers", {}).get(SERVER) if isinstance(
            data.get("mcpServers"), dict) else None
        if not isinstance(current, dict) or "env" not in current:
            entry.setdefault("env", {})  # what `claude mcp add` writes
        return data

    if scope == "project":
        mcp = project / ".mcp.json"
        settings = project / ".claude" / "settings.json"
        wiring.plans.append(json_plan(mcp, "the MCP server",
                                       put_server(mcp, entry, with_env)))
        local = project / ".claude" / "settings.local.json"

        def approve(data: dict[str, Any]) -> None:
            enabled = data.setdefault("enabledMcpjsonServers", [])
            if not isinstance(enabled, list):
                raise Refused(f"{local}: 'enabledMcpjsonServers' is not a list",
                              rule="install.not_mergeable")
            if SERVER not in enabled:
                enabled.append(SERVER)

        wiring.plans.append(json_plan(local, "the server's approval (yours, not shared)",
                                       approve))
        wiring.todo.append(
            f"trust the folder: start `claude` in {project} once and accept its trust "
            "dialog (Claude Code starts a project's .mcp.json servers only in a trusted "
            "folder); teammates who get .mcp.json approve the server when claude asks")
    else:
        state = home / ".claude.json"
        settings = home / ".claude" / "settings.json"
        wiring.plans.append(json_plan(state, "the MCP server (user scope)",
                                       put_server(state, entry, with_env)))
    hooks = put_hooks(settings, "claude-code", hook_command(agent_dir),
                       (("SessionStart", SESSION_MATCHER), ("UserPromptSubmit", None)),
                       {"timeout": 10})  # seconds, in Claude Code
    wiring.plans.append(json_plan(settings, "the SessionStart and UserPromptSubmit hooks",
                                   hooks))
    wiring.todo.append("check it: gitstate install claude-code "
                       f"--{scope} --check (runs `claude mcp list`)")
    return wiring


def _gemini(agent_dir: Path, scope: str, project: Path, home: Path) -> Wiring:
    wiring = Wiring("gemini", scope)
    argv = server_argv(agent_dir)
    path = (project if scope == "project" else home) / ".gemini" / "settings.json"
    entry = {"command": argv[0], "args": argv[1:], "timeout": 30000}
    server = put_server(path, entry)
    hooks = put_hooks(path, "gemini", hook_command(agent_dir, "gemini"),
                       (("SessionStart", None), ("BeforeAgent", None)),
                       {"name": "gitstate", "timeout": 10000})  # milliseconds, in Gemini CLI

    def merge(data: dict[str, Any]) -> None:
        server(data)
        hooks(data)

    wiring.plans.append(json_plan(path, "the MCP server and the SessionStart and "
                                   "BeforeAgent hooks", merge))
    wiring.todo.append(f"trust the folder you run gemini in ({project} here): accept "
                       "Gemini CLI's trust prompt, or `/permissions` in gemini; it starts "
                       "MCP servers only in trusted folders")
    return wiring


def _cursor(agent_dir: Path, scope: str, project: Path, home: Path) -> Wiring:
    wiring = Wiring("cursor", scope)
    argv = server_argv(agent_dir)
    path = (project if scope == "project" else home) / ".cursor" / "mcp.json"
    entry = {"command": argv[0], "args": argv[1:]}
    wiring.plans.append(json_plan(path, "the MCP server", put_server(path, entry)))
    wiring.todo.append("enable the server in Cursor: Settings > MCP (Cursor asks before it "
                       "starts a new server)")
    return wiring


_CODEX_HEADER = re.compile(r"^\s*\[\s*mcp_servers\s*\.\s*\"?gitstate\"?\s*\]\s*(#.*)?$")
_ANY_HEADER = re.compile(r"^\s*\[")


def codex_home(home: Path) -> Path:
    given = os.environ.get("CODEX_HOME")
    return Path(given).absolute() if given else home / ".codex"


_CODEX_SUB = re.compile(r"^\s*\[\s*mcp_servers\s*\.\s*\"?gitstate\"?\s*\.\s*\"?([^\]\".]+)")
_CODEX_DEFAULTS = {"startup_timeout_sec": 20, "tool_timeout_sec": 60}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def _toml(value: object) -> str:
    """``value`` as TOML (a JSON string is a TOML basic string); a kind this cannot write
    (a date) refuses the merge rather than drop it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    raise Refused(f"a value in [mcp_servers.{SERVER}] ({value!r}) cannot be rewritten; "
                  "change the entry by hand", rule="install.not_mergeable")


def _codex_text(path: Path, text: str, argv: list[str]) -> str:
    """``text`` with ``[mcp_servers.gitstate]`` running ``argv``: the user's other fields
    in the entry (an env, a timeout, enabled_tools) kept, its sub-tables kept where they
    stand, every other table untouched. The table is found by its header line, so the
    result is parsed again and must hold exactly the file's old contents with only the
    entry changed; anything else (a header inside a multi-line string, an array of tables)
    is refused, never written."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Refused(f"{path} is not valid TOML ({exc}); fix it, then run again",
                      rule="install.not_toml") from None
    servers = data.get("mcp_servers", {})
    current = servers.get(SERVER) if isinstance(servers, dict) else None
    if current is not None and not isinstance(current, dict):
        raise Refused(f"{path}: mcp_servers.{SERVER} is not a table; change it by hand",
                      rule="install.not_mergeable")
    if current and current.get("command") == argv[0] and current.get("args") == argv[1:]:
        return text
    lines = text.splitlines(keepends=True)
    subtables = {m.group(1) for line in lines if (m := _CODEX_SUB.match(line))}
    entry = {k: v for k, v in (current or {}).items() if k not in subtables}
    entry.update(command=argv[0], args=argv[1:])
    for key, default in _CODEX_DEFAULTS.items():
        entry.setdefault(key, default)
    block = f"[mcp_servers.{SERVER}]\n" + "".join(f"{_toml_key(k)} = {_toml(v)}\n"
                                                    for k, v in entry.items())
    if current is None:
        new = text + ("\n" if text and not text.endswith("\n") else "") \
            + ("\n" if text.strip() else "") + block
    else:
        start = next((i for i, line in enumerate(lines) if _CODEX_HEADER.match(line)), None)
        if start is None:
            raise Refused(f"{path} defines mcp_servers.{SERVER} other than as a "
                          f"[mcp_servers.{SERVER}] table; change it by hand",
                          rule="install.not_mergeable")
        end = next((i for i in range(start + 1, len(lines))
                    if _ANY_HEADER.match(lines[i])), len(lines))
        tail = "".join(lines[end:])
        new = "".join(lines[:start]) + block + ("\n" + tail if tail else "")
    expected = {**data, "mcp_servers": {**(servers if isinstance(servers, dict) else {}),
                                        SERVER: {**(current or {}), **entry}}}
    try:
        same = tomllib.loads(new) == expected
    except tomllib.TOMLDecodeError:
        same = False
    if not same:
        raise Refused(f"{path}: rewriting [mcp_servers.{SERVER}] would change more of the "
                      "file than that entry (a table header inside a multi-line string, an "
                      "array of tables?); nothing was written: change the entry by hand",
                      rule="install.not_mergeable")
    return new


def _codex(agent_dir: Path, scope: str, project: Path, home: Path) -> Wiring:
    """``[mcp_servers.gitstate]`` in $CODEX_HOME/config.toml, or (``--project``) in the
    project's .codex/config.toml, which Codex reads only in a project it trusts."""
    wiring = Wiring("codex", scope)
    path = (project / ".codex" if scope == "project" else codex_home(home)) / "config.toml"
    old = read_settings(path)
    try:
        text = "" if old is None else old.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Refused(f"{path} is not UTF-8, so not TOML; fix it, then run again",
                      rule="install.not_toml") from None
    new = _codex_text(path, text, server_argv(agent_dir))
    wiring.plans.append(Plan(path, old, new.encode("utf-8") if new != text or old is None
                             else old, "the MCP server"))
    if scope == "project":
        wiring.todo.append(
            f"trust the project: Codex reads {path} only in a trusted project (accept the "
            f"trust prompt at the first `codex` in {project}, or put [projects.\"{project}\"] "
            f"trust_level = \"trusted\" in {codex_home(home) / 'config.toml'})")
    wiring.todo.append(f"check it: gitstate install codex --{scope} --check (starts Codex's "
                       "app-server, which starts the server; `codex mcp list` only reads "
                       "the file)")
    return wiring


PLANNERS: dict[str, Callable[[Path, str, Path, Path], Wiring]] = {
    "claude-code": _claude, "codex": _codex, "gemini": _gemini, "cursor": _cursor,
}


def plan(host: str, agent_dir: Path, scope: str, project: Path, home: Path) -> Wiring:
    """What ``gitstate install HOST`` would write; nothing is written. A file's directory
    that is a symlink (``.claude`` linked into a dotfiles checkout) is refused here, before
    any file is written, as the write itself would refuse it."""
    if host in ("claude-code", "gemini") and "$" in f"{agent_dir.absolute()}{sys.executable}":
        raise Refused(f"the agent directory {agent_dir.absolute()} or the interpreter "
                      f"{sys.executable} holds a '$', which {host} expands in its "
                      "configuration (${VAR}, $VAR), so it would start the server for "
                      "another directory: use a path without '$'", rule="install.path_expands")
    project = project.absolute()
    wiring = PLANNERS[host](agent_dir, scope, project, home)
    for p in wiring.plans:
        base = home if p.path.is_relative_to(home) else project
        below = [d for d in p.path.parents if d.is_relative_to(base) and d != base]
        link = next((d for d in below if safefile.kind(d) == "symlink"), None)
        if link is not None:  # HOME or the project itself may be a link: they are yours
            raise Refused(f"{p.path.parent} is a symlink; gitstate install never writes "
                          f"through one: merge the configuration into {p.path.name} where it "
                          "points by hand, or replace the link with a directory",
                          rule="install.symlink")
    return wiring


def apply(wiring: Wiring) -> list[str]:
    """Write every changed file (its backup first); one line per file saying what was done."""
    done = []
    for p in wiring.plans:
        if not p.changes:
            done.append(f"unchanged {p.path} ({p.what})")
            continue
        try:
            os.makedirs(p.path.parent, exist_ok=True)
            if p.old is not None:
                safefile.write_atomic(f"{p.path}{BACKUP}", p.old, 0o600)
            safefile.write_atomic(p.path, p.new, _mode(p))
        except safefile.NotRegular as exc:
            raise Refused(f"{exc}; nothing was written there", rule="install.not_regular"
                          ) from None
        if p.old is None:
            done.append(f"created {p.path} ({p.what})")
        else:
            done.append(f"updated {p.path} ({p.what}; the old file is "
                        f"{p.path.name}{BACKUP})")
    return done


def _mode(p: Plan) -> int:
    """The mode the file had (a private ~/.claude.json stays private), else 0600 for the
    files that hold a user's state and secrets, 0644 for a project's."""
    if p.old is not None:
        try:
            return stat.S_IMODE(os.lstat(p.path).st_mode)
        except FileNotFoundError:
            pass
    return 0o600 if p.path.name in (".claude.json", "config.toml") else 0o644
