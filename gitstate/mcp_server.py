"""The MCP server: the agent's four tools and two resources, over stdio.

A thin adapter over ``StateRepo`` (actor ``agent``). Inputs are validated by the pydantic
model the SDK derives from each tool's signature (the same model that produces the input
schema); outputs are pydantic models, so every tool has an output schema and returns
structured content. A refusal is a tool error (``isError``) whose structured content carries
the rule and what the model needs to act (the current value on a compare-and-swap mismatch,
the live keys at the cap). Any other failure is reported without a traceback, and the server
stays up.

Importing this module costs about a second (the ``mcp`` SDK); the CLI and the hooks never
import it except for ``gitstate mcp``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.types import (
    CallToolResult,
    Completion,
    EmptyResult,
    ResourceTemplateReference,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    ToolAnnotations,
    UnsubscribeRequestParams,
)
from pydantic import Field

from . import textsafe
from .errors import GitStateError
from .mcp_schema import RunOut, StateOut, WriteOut
from .planners import UNSET, Expected
from .repo import StateRepo
from .results import refusal, to_json

log = logging.getLogger("gitstate.mcp")
SECTION_URI = "gitstate://section"
STATE_URI = "gitstate://state"
KEY_URI = "gitstate://key/{key}"
KEY_CHAIN = 10

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

JsonValue = str | int | float | bool | list[Any] | dict[str, Any]
Scalar = Annotated[JsonValue, Field(
    description="A string, number or boolean; or an array or object (a structured value, "
    "within gitstate's limits: depth 8, 256 elements, 4 KiB as JSON; object keys of A-Z a-z "
    "0-9 _ . -).")]
RequestId = Annotated[str | None, Field(
    max_length=128, description="Idempotency key: a retry with the same id and arguments "
    "returns the first result and makes no second commit.")]


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


WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                        open_world_hint=False)
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=False)


def _refusal(exc: GitStateError) -> CallToolResult:
    """A refusal as a tool error whose structured content fits the tool's output schema
    (the same JSON the CLI prints with --json)."""
    hint = {"keys.cap": " Clear a key that no longer matters (working_state_clear) first."
            }.get(exc.rule, "")
    content = to_json(refusal(exc))
    message = exc.message if exc.message.endswith(".") else exc.message + "."
    return CallToolResult(content=[TextContent(type="text", text=textsafe.visible(
        f"[{exc.rule}] {message}{hint}"))], structured_content=content, is_error=True)


def _unexpected(exc: Exception, tool: str) -> CallToolResult:
    log.exception("%s failed", tool)
    message = (f"internal error in {tool}: {type(exc).__name__}. Nothing may have been "
               "written; call working_state_get to see the current state.")
    return CallToolResult(content=[TextContent(type="text", text=message)],
                          structured_content={"ok": False, "error": "internal",
                                              "message": message},
                          is_error=True)


def _ok(result: object) -> CallToolResult:
    content = to_json(result)
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(
        content, ensure_ascii=False))], structured_content=content)


def build_server(agent_dir: str | Path) -> MCPServer:
    """An MCP server bound to one agent directory (which must be initialised)."""
    repo = StateRepo(agent_dir, writer="agent")
    watcher = Watcher(repo)

    @contextlib.asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watcher.run)
            try:
                yield {}
            finally:
                tasks.cancel_scope.cancel()

    server = MCPServer("gitstate", version=_version(), instructions=INSTRUCTIONS,
                       lifespan=lifespan)
    declared = _declared_keys(repo)
    config = repo.config

    def call(tool: str, action: Any) -> CallToolResult:
        try:
            return _ok(action())
        except GitStateError as exc:
            return _refusal(exc)
        except Exception as exc:  # the server must stay up; the log keeps the traceback
            return _unexpected(exc, tool)

    @server.tool(name="working_state_set", annotations=WRITE, description=(
        "Set or update one key of your working state (one audited commit). Call it the moment "
        "a decision parameter is decided (stop-loss, take-profit, position cap, phase). "
        "`reason` is required. Give day-scoped rules `ttl_hours` so they expire on their own. "
        "Pass `expected_value` (the value you read) to refuse the write if another wake-up "
        "changed it; `expect_absent` to refuse if the key exists. 262 and \"262\" compare "
        f"equal. At most {config.max_keys} live keys. Pass a `request_id` to make a retry "
        "safe. A refusal returns ok=false with the rule and, for a stale expected_value, the "
        "current value with its reason and set time." + declared))
    def working_state_set(
        key: Annotated[str, Field(description="Dotted name, e.g. stop_loss.2317 (ASCII "
                                  "letters, digits, '.', '_', '-').", max_length=128)],
        value: Scalar,
        reason: Annotated[str, Field(description="Why; becomes the commit message.",
                                     max_length=4000)],
        ttl_hours: Annotated[float | None, Field(gt=0, le=8784, description="Expire after this "
                                                 "many hours (stays readable, no longer "
                                                 "injected).")] = None,
        expected_value: Annotated[JsonValue | None, Field(
            description="Compare-and-swap: refuse unless the key currently holds this (a "
            "structure compares by structure: object key order never matters).")] = None,
        expect_absent: Annotated[bool, Field(
            description="Compare-and-swap: refuse unless the key is absent.")] = False,
        request_id: RequestId = None,
    ) -> Annotated[CallToolResult, WriteOut]:
        expected: Expected = None if expect_absent else (
            UNSET if expected_value is None else expected_value)
        return call("working_state_set", lambda: repo.set(
            key, value, reason, ttl_hours=ttl_hours, expected=expected,
            request_id=request_id))

    @server.tool(name="working_state_clear", annotations=WRITE, description=(
        "Retire one key (one audited commit); its history stays in the log. `reason` is "
        "required; `expected_value` refuses the clear if the key changed meanwhile."))
    def working_state_clear(
        key: Annotated[str, Field(max_length=128, description="The key to retire.")],
        reason: Annotated[str, Field(max_length=4000, description="Why; becomes the commit "
                                     "message.")],
        expected_value: Annotated[JsonValue | None, Field(
            description="Compare-and-swap: refuse unless the key currently holds this.")] = None,
        request_id: RequestId = None,
    ) -> Annotated[CallToolResult, WriteOut]:
        expected: Expected = UNSET if expected_value is None else expected_value
        return call("working_state_clear", lambda: repo.clear(
            key, reason, expected=expected, request_id=request_id))

    @server.tool(name="working_state_handoff", annotations=WRITE, description=(
        "Overwrite the one handoff note: what your next wake-up needs to know. Leave one before "
        "wrapping up any run. Plain: pass only `note` (whitespace collapsed, cut near "
        f"{config.handoff_plain_max_chars:,} characters). Structured: any of next_steps / "
        "evidence / blocker makes `status` required - continue needs next_steps and no "
        "blocker; complete needs evidence and neither blocker nor next_steps; blocked needs "
        f"blocker. A structured handoff over {config.handoff_max_bytes:,} UTF-8 bytes in total "
        "is refused whole."))
    def working_state_handoff(
        note: Annotated[str | None, Field(description="The note for your next wake-up.")]
        = None,
        status: Annotated[Literal["continue", "complete", "blocked"] | None, Field(
            description="Structured handoff: continue (with next_steps), complete (with "
            "evidence) or blocked (with blocker).")] = None,
        next_steps: Annotated[str | None, Field(description="(continue) What to do next.")]
        = None,
        evidence: Annotated[str | None, Field(description="(complete) What shows the work is "
                                              "done; done must not be self-declared.")] = None,
        blocker: Annotated[str | None, Field(description="(blocked) What stops the work.")]
        = None,
        request_id: RequestId = None,
    ) -> Annotated[CallToolResult, WriteOut]:
        return call("working_state_handoff", lambda: repo.handoff(
            note, status=status, next_steps=next_steps, evidence=evidence,
            blocker=blocker, request_id=request_id))

    @server.tool(name="working_state_get", annotations=READ, description=(
        "Read everything: all keys (expired ones included and marked), the handoff note, "
        "recent history of changes, the commit id, the live-key count and the cap."))
    def working_state_get() -> Annotated[CallToolResult, StateOut]:
        return call("working_state_get", repo.get)

    @server.tool(name="run_get", annotations=READ, description=(
        "Read a run (refs/heads/runs/<run_id>): its goal and success criteria, its state "
        "(current and pending steps, open questions, evidence, approvals, budget, stop "
        "reason) and what the runtime does next."))
    def run_get(run_id: Annotated[str, Field(max_length=64, description="The run id.")]
                ) -> Annotated[CallToolResult, RunOut]:
        return call("run_get", lambda: repo.runs.read(run_id))

    @server.tool(name="run_propose", annotations=WRITE, description=(
        "Propose one event for a run (one audited commit when the runtime's rules accept "
        "it). You may propose step_started {step_id, description}, question_opened "
        "{question}, question_answered {question, evidence_ref}, blocked {reason} and "
        "completed {result_ref, criteria_evidence: {criterion: evidence_ref}}; tool results, "
        "budgets, approvals and cancellation are the runtime's. A refusal names its rule "
        "(run.criteria_unmet, run.awaiting_approval, run.stopped ...). Pass a request_id to "
        "make a retry safe."))
    def run_propose(
        run_id: Annotated[str, Field(max_length=64, description="The run id.")],
        event: Annotated[dict[str, Any], Field(description='The event: {"type": ..., '
                                               "fields}.")],
        reason: Annotated[str, Field(max_length=4000, description="Why; becomes the commit "
                                     "message.")],
        request_id: RequestId = None,
    ) -> Annotated[CallToolResult, RunOut]:
        return call("run_propose", lambda: repo.runs.event(
            run_id, event, reason, writer="agent", request_id=request_id))

    @server.resource(SECTION_URI, name="working-state-section", mime_type="text/plain",
                     description="The section injected at the tail of every wake-up's prompt.")
    def section_resource() -> str:
        return repo.render()

    @server.resource(KEY_URI, name="working-state-key", mime_type="application/json",
                     description="One key: its value, reason, set time and expiry, and its "
                     "recent chain of changes (newest first).")
    def key_resource(key: str) -> str:
        return json.dumps(key_view(repo, key), ensure_ascii=False, indent=2)

    @server.completion()  # type: ignore[no-untyped-call, untyped-decorator]  # SDK untyped
    async def complete(ref: Any, argument: Any, context: Any) -> Completion | None:
        if not (isinstance(ref, ResourceTemplateReference) and ref.uri == KEY_URI
                and argument.name == "key"):
            return None
        names = sorted(k for k in repo.state().keys if k.startswith(argument.value or ""))
        return Completion(values=names[:100], total=len(names), has_more=len(names) > 100)

    _legacy_methods(server, watcher)

    @server.resource(STATE_URI, name="working-state", mime_type="application/json",
                     description="The whole working state as JSON (as working_state_get).")
    def state_resource() -> str:
        return json.dumps(to_json(repo.get()), ensure_ascii=False, indent=2)

    return server


def key_view(repo: StateRepo, key: str) -> dict[str, Any]:
    """The key resource: the entry (or null) and the key's newest changes."""
    from . import audit, rules

    rules.check_key(key)
    entry = repo.state().keys.get(key)
    chain = list(audit.log(repo, key=key, limit=KEY_CHAIN))
    return {"key": key, "entry": {**entry.to_dict(), "expired": entry.is_expired(repo.now())}
            if entry else None, "history": chain}


class Watcher:
    """Subscriptions to resources, and the task that tells subscribers when the state
    changed: it polls the branch ref (a file read every ``interval`` seconds), so a change
    made by any process — the CLI, another server, a pull — is seen, not only this server's
    own writes."""

    def __init__(self, repo: StateRepo, interval: float = 0.25) -> None:
        self.repo = repo
        self.interval = interval
        self.subscribers: dict[Any, set[str]] = {}  # connection -> subscribed URIs

    def add(self, session: Any, uri: str) -> None:
        self.subscribers.setdefault(session, set()).add(uri)

    def remove(self, session: Any, uri: str) -> None:
        self.subscribers.get(session, set()).discard(uri)

    async def run(self) -> None:
        from .fastpath import read_ref

        git_dir = str(self.repo.state_dir / ".git")
        last = read_ref(git_dir)
        while True:
            await anyio.sleep(self.interval)
            head = read_ref(git_dir)
            if head == last or head is None:
                continue
            before, last = last, head
            if self.subscribers:
                await self._notify(before, head)

    async def _notify(self, before: str | None, head: str) -> None:
        changed = self._changed_keys(before, head)
        for session, uris in list(self.subscribers.items()):
            for uri in sorted(uris):
                if uri.startswith("gitstate://key/") and \
                        uri.removeprefix("gitstate://key/") not in changed:
                    continue
                try:
                    await session.send_resource_updated(uri)
                except Exception:  # the client went away: forget its subscriptions
                    self.subscribers.pop(session, None)
                    break

    def _changed_keys(self, before: str | None, head: str) -> set[str]:
        try:
            old = self.repo.state_at(before).keys if before else {}
            new = self.repo.state_at(head).keys
        except GitStateError:
            return set()
        return {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}


def _legacy_methods(server: MCPServer, watcher: Watcher) -> None:
    """resources/subscribe, resources/unsubscribe and logging/setLevel: spec methods of the
    protocol versions hosts speak today, which the SDK's high-level server no longer
    registers. The SDK's documented way to serve them is its low-level server's
    ``add_request_handler``."""
    lowlevel = server._lowlevel_server

    def connection(ctx: Any) -> Any:
        # A handler's session lives for one request (on HTTP, its response stream); the
        # connection it belongs to outlives it and can notify later. The SDK keeps it on
        # the session without a public accessor.
        return getattr(ctx.session, "_connection", ctx.session)

    async def subscribe(ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        watcher.add(connection(ctx), str(params.uri))
        return EmptyResult()

    async def unsubscribe(ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        watcher.remove(connection(ctx), str(params.uri))
        return EmptyResult()

    async def set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
        level = _LEVELS.get(str(params.level), logging.WARNING)
        logging.getLogger("gitstate").setLevel(level)
        return EmptyResult()

    with warnings.catch_warnings():  # the SDK marks these as legacy; hosts still use them
        warnings.simplefilter("ignore")
        lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
        lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams,
                                     unsubscribe)
        lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
           "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL,
           "alert": logging.CRITICAL, "emergency": logging.CRITICAL}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gitstate")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from .layout import VERSION

        return VERSION


def serve(agent_dir: str | Path) -> None:
    """Run the server on stdio until the client closes it."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    build_server(agent_dir).run("stdio")
