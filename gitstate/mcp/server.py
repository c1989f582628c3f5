"""The MCP server: the agent's six tools, its resources, one prompt, subscriptions.

A thin adapter over ``StateRepo`` (actor ``agent``): the tools are :mod:`.tools` (their
arguments validated by the pydantic models that produce their input schemas; every result,
refusals included, fits the tool's output schema), served through :mod:`.sdk` on either
line of the official SDK. A refusal is a tool result with ``isError`` whose structured
content carries the rule and what the model needs to act, and whose text carries the same
(:mod:`.refusal`). Protocol mistakes (an unknown prompt or resource) are JSON-RPC errors
with their proper codes.

Importing this module costs about a second (the ``mcp`` SDK); the CLI and the hooks never
import it except for ``gitstate mcp``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio

from ..api.repo import StateRepo
from ..core.errors import GitStateError
from ..core.results import to_json
from . import sdk as mcp_sdk
from . import tools as mcp_tools
from .sdk import INVALID_PARAMS, RESOURCE_NOT_FOUND, ProtocolError, Sender

log = logging.getLogger("gitstate.mcp")
SECTION_URI = "gitstate://section"
STATE_URI = "gitstate://state"
KEY_PREFIX = "gitstate://key/"
KEY_URI = KEY_PREFIX + "{key}"
KEY_CHAIN = 10
PROMPT = "working_state_rules"

INSTRUCTIONS = """\
gitstate keeps your working state: the one authoritative table of the rules and commitments
you set for yourself (stop-loss lines, position caps, the current phase), plus one handoff
note for your next wake-up. It is injected at the tail of every wake-up's prompt.
Conventions:
- The moment a decision parameter is decided, call working_state_set with a reason; give
  day-scoped rules a ttl_hours so they expire on their own.
- During patrols the injected working-state section is the authority: never re-derive a value
  on the spot; a number in notes or journals that conflicts with it is superseded history.
- When you change a value you read earlier, pass expected_value: if another wake-up changed it
  meanwhile, the write is refused and the current value is returned.
- Before wrapping up any run, leave a handoff with working_state_handoff."""


def _declared_keys(repo: StateRepo) -> str:
    """The schema's key table for the set tool's description. Every common client shows a
    description; per-key value schemas (oneOf over keys) are not reliably kept by all of them,
    so the value stays a plain scalar and the server validates it."""
    schema = repo.schema()
    if schema is None:
        return ""
    lines = [f"\nDeclared keys (schema v{schema.version}; unknown keys are "
             f"{'refused' if schema.unknown_keys == 'reject' else 'allowed'}):"]
    lines += [f"- {spec.summary()}" + (f" - {spec.description}" if spec.description else "")
              for spec in schema.keys]
    return "\n".join(lines)


class Handlers:
    """What the server answers, as MCP wire JSON (see :class:`.sdk.Handlers`)."""

    def __init__(self, repo: StateRepo, watcher: Watcher) -> None:
        self.repo = repo
        self.watcher = watcher
        self.tool_list = mcp_tools.tools(repo.config, _declared_keys(repo))
        self.by_name = {t.name: t for t in self.tool_list}
        self.wire_tools = [t.wire() for t in self.tool_list]

    def tools(self) -> list[dict[str, Any]]:
        return self.wire_tools

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        tool = self.by_name.get(name)
        if tool is None:
            names = ", ".join(self.by_name)
            return {"content": [{"type": "text", "text": f"unknown tool {name[:64]!r}; this "
                                 f"server's tools are {names}"}], "isError": True}
        return mcp_tools.call(self.repo, tool, arguments)

    def resources(self) -> list[dict[str, Any]]:
        return [{"uri": SECTION_URI, "name": "working-state-section", "mimeType": "text/plain",
                 "description": "The section injected at the tail of every wake-up's prompt."},
                {"uri": STATE_URI, "name": "working-state", "mimeType": "application/json",
                 "description": "The whole working state as JSON (as working_state_get)."}]

    def templates(self) -> list[dict[str, Any]]:
        return [{"uriTemplate": KEY_URI, "name": "working-state-key",
                 "mimeType": "application/json",
                 "description": "One key: its value, reason, set time and expiry, and its "
                 "recent chain of changes (newest first)."}]

    def read(self, uri: str) -> dict[str, Any]:
        try:
            if uri == SECTION_URI:
                return {"uri": uri, "mimeType": "text/plain", "text": self.repo.render()}
            if uri == STATE_URI:
                text = json.dumps(to_json(self.repo.get()), ensure_ascii=False, indent=2)
            elif uri.startswith(KEY_PREFIX):
                text = json.dumps(key_view(self.repo, uri.removeprefix(KEY_PREFIX)),
                                  ensure_ascii=False, indent=2)
            else:
                raise ProtocolError(RESOURCE_NOT_FOUND, f"no resource {uri[:200]!r}")
        except GitStateError as exc:
            raise ProtocolError(INVALID_PARAMS, f"[{exc.rule}] {exc.message}") from None
        return {"uri": uri, "mimeType": "application/json", "text": text}

    def prompts(self) -> list[dict[str, Any]]:
        return [{"name": PROMPT, "title": "Working-state rules",
                 "description": "How to keep your working state with these tools, followed "
                 "by the section as it stands now.", "arguments": []}]

    def prompt(self, name: str, arguments: dict[str, str]) -> dict[str, Any]:
        if name != PROMPT:
            raise ProtocolError(INVALID_PARAMS, f"unknown prompt {name[:64]!r}; this server "
                                f"has one prompt, {PROMPT}")
        if arguments:
            raise ProtocolError(INVALID_PARAMS, f"{PROMPT} takes no arguments")
        section = self.repo.render() or "(empty: no live keys, no handoff)"
        text = (f"{INSTRUCTIONS}\n- A refused call says which rule refused it, the current "
                "value with its reason and set time, and what to do next: follow it.\n\n"
                f"The working state now:\n{section}")
        return {"description": "The working-state rules and the current section.",
                "messages": [{"role": "user", "content": {"type": "text", "text": text}}]}

    def complete(self, ref: dict[str, Any], argument: dict[str, Any]) -> dict[str, Any]:
        if ref.get("type") != "ref/resource" or ref.get("uri") != KEY_URI or \
                argument.get("name") != "key":
            return {"values": []}
        prefix = str(argument.get("value") or "")
        names = sorted(k for k in self.repo.state().keys if k.startswith(prefix))
        return {"values": names[:100], "total": len(names), "hasMore": len(names) > 100}

    def subscribe(self, connection: object, sender: Sender, uri: str) -> None:
        self.watcher.add(connection, sender, uri)

    def unsubscribe(self, connection: object, uri: str) -> None:
        self.watcher.remove(connection, uri)

    def set_level(self, level: str) -> None:
        logging.getLogger("gitstate").setLevel(_LEVELS.get(level, logging.WARNING))


def build_server(agent_dir: str | Path) -> Any:
    """An MCP server (the SDK's low-level ``Server``) bound to one initialised agent
    directory."""
    repo = StateRepo(agent_dir, writer="agent")
    watcher = Watcher(repo)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watcher.run)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()

    return mcp_sdk.build(mcp_sdk.Spec("gitstate", _version(), INSTRUCTIONS,
                                      Handlers(repo, watcher), lifespan))


def key_view(repo: StateRepo, key: str) -> dict[str, Any]:
    """The key resource: the entry (or null) and the key's newest changes."""
    from ..audit import views as audit
    from ..core import rules

    rules.check_key(key)
    entry = repo.state().keys.get(key)
    chain = list(audit.changes(repo, key=key, limit=KEY_CHAIN))
    return {"key": key, "entry": {**entry.to_dict(), "expired": entry.is_expired(repo.now())}
            if entry else None, "history": chain}


class Watcher:
    """Subscriptions to resources, and the task that tells subscribers when the state
    changed: it polls the branch ref (a file read every ``interval`` seconds), so a change
    made by any process — the CLI, another server, a pull — is seen, not only this server's
    own writes. More than one poller may run (the 1.x SDK enters the lifespan per HTTP
    session); they share ``last``, so each change is announced once."""

    def __init__(self, repo: StateRepo, interval: float = 0.25) -> None:
        self.repo = repo
        self.interval = interval
        self.subscribers: dict[object, tuple[Sender, set[str]]] = {}
        self.last: str | None = None
        self.started = False

    def add(self, connection: object, sender: Sender, uri: str) -> None:
        uris = self.subscribers.get(connection, (sender, set()))[1]
        uris.add(uri)
        self.subscribers[connection] = (sender, uris)  # the newest sender of the connection

    def remove(self, connection: object, uri: str) -> None:
        entry = self.subscribers.get(connection)
        if entry is not None:
            entry[1].discard(uri)
            if not entry[1]:
                del self.subscribers[connection]

    async def run(self) -> None:
        from ..wakeup.fastpath import read_ref

        git_dir = str(self.repo.state_dir / ".git")
        if not self.started:
            self.started, self.last = True, read_ref(git_dir)
        while True:
            await anyio.sleep(self.interval)
            head = read_ref(git_dir)
            if head == self.last or head is None:
                continue
            before, self.last = self.last, head
            if self.subscribers:
                await self._notify(before, head)

    async def _notify(self, before: str | None, head: str) -> None:
        changed = self._changed_keys(before, head)
        for connection, (sender, uris) in list(self.subscribers.items()):
            for uri in sorted(uris):
                if uri.startswith(KEY_PREFIX) and uri.removeprefix(KEY_PREFIX) not in changed:
                    continue
                try:
                    await sender.send_resource_updated(uri)
                except Exception:  # the client went away: forget its subscriptions
                    self.subscribers.pop(connection, None)
                    break

    def _changed_keys(self, before: str | None, head: str) -> set[str]:
        try:
            old = self.repo.state_at(before).keys if before else {}
            new = self.repo.state_at(head).keys
        except GitStateError:
            return set()
        return {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
           "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL,
           "alert": logging.CRITICAL, "emergency": logging.CRITICAL}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gitstate")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from ..core.layout import VERSION

        return VERSION


def serve(agent_dir: str | Path) -> None:
    """Run the server on stdio until the client closes it or SIGINT (Ctrl-C) arrives. On
    a terminal, one line on stderr says what it is and how to stop it."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    server = build_server(agent_dir)
    anyio.run(_serve_stdio, server, str(agent_dir))


async def _serve_stdio(server: Any, agent_dir: str) -> None:
    async with anyio.create_task_group() as group:
        if threading.current_thread() is threading.main_thread():
            await group.start(_stop_on_interrupt)
        if sys.stdin.isatty():
            sys.stderr.write(f"gitstate: MCP server for {agent_dir} speaking JSON-RPC on "
                             "stdio (an MCP client starts it); stop it with Ctrl-C or Ctrl-D\n")
            sys.stderr.flush()
        await mcp_sdk.run_stdio(server)
        group.cancel_scope.cancel()  # the client closed stdin


async def _stop_on_interrupt(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
    """SIGINT ends the server at once. The SDK reads stdin in a worker thread that no
    cancellation interrupts (so a cancelled server waited for Ctrl-D), so the process ends
    by the signal itself, as a shell expects (status 130). A write it cuts short is a
    killed write, which the write path survives (repaired on the next open)."""
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            sys.stderr.write("gitstate: MCP server stopped (interrupted)\n")
            sys.stderr.flush()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
