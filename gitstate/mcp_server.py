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

import logging
import sys
from pathlib import Path
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from .errors import GitStateError
from .repo import UNSET, StateRepo

log = logging.getLogger("gitstate.mcp")

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

Scalar = Annotated[str | int | float | bool,
                   Field(description="A JSON scalar: string, number or boolean.")]
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


class EntryOut(BaseModel):
    value: str | int | float | bool
    set_at: str = Field(description="UTC ISO 8601")
    reason: str
    actor: str
    expires_at: str | None = None
    expired: bool | None = None


class HandoffOut(BaseModel):
    note: str
    left_at: str
    actor: str
    status: str | None = None
    next_steps: str | None = None
    evidence: str | None = None
    blocker: str | None = None


class WriteOut(BaseModel):
    ok: bool = True
    op: str
    commit: str = Field(description="The git commit that recorded this change.")
    key: str | None = None
    old: EntryOut | None = None
    new: EntryOut | None = None
    handoff: HandoffOut | None = None
    truncated: bool = Field(False, description="True when a plain note was cut to fit.")
    replayed: bool = Field(False, description="True when this answers a retried request_id.")
    live_keys: int
    max_keys: int
    warnings: list[str] = []


class StateOut(BaseModel):
    head: str = Field(description="The commit id of the state.")
    now: str
    keys: dict[str, EntryOut] = Field(description="Every key; expired ones are marked.")
    handoff: HandoffOut | None = None
    history: list[dict[str, Any]] = Field(description="Recent changes, newest first.")
    schema_version: int | None = None
    phase: str | None = Field(None, description="The current phase (typed state).")
    allowed_tools: list[str] | None = Field(
        None, description="Tools the current phase allows; null when no phases are declared.")
    live_keys: int
    max_keys: int
    section_bytes: int
    section_max_bytes: int
    warnings: list[str] = []


WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                        open_world_hint=False)
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=False)


def _refusal(exc: GitStateError) -> CallToolResult:
    hint = {
        "cas.mismatch": " Read the current value above and decide again; do not retry blindly.",
        "keys.cap": " Clear a key that no longer matters (working_state_clear) first.",
    }.get(exc.rule, "")
    return CallToolResult(content=[TextContent(type="text", text=f"[{exc.rule}] {exc.message}"
                                                                   f"{hint}")],
                          structured_content=exc.to_dict(), is_error=True)


def _unexpected(exc: Exception, tool: str) -> CallToolResult:
    log.exception("%s failed", tool)
    return CallToolResult(
        content=[TextContent(type="text", text=f"internal error in {tool}: "
                             f"{type(exc).__name__}. Nothing may have been written; call "
                             "working_state_get to see the current state.")],
        structured_content={"error": "internal", "message": type(exc).__name__},
        is_error=True)


def _ok(model: BaseModel) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=model.model_dump_json())],
                          structured_content=model.model_dump(mode="json"))


def build_server(agent_dir: str | Path) -> MCPServer:
    """An MCP server bound to one agent directory (which must be initialised)."""
    repo = StateRepo(agent_dir, writer="agent")
    server = MCPServer("gitstate", instructions=INSTRUCTIONS)
    declared = _declared_keys(repo)

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
        "equal. At most 32 live keys. Pass a `request_id` to make a retry safe."
        + declared))
    def working_state_set(
        key: Annotated[str, Field(description="Dotted name, e.g. stop_loss.2317", max_length=128)],
        value: Scalar,
        reason: Annotated[str, Field(description="Why; becomes the commit message.",
                                     max_length=4000)],
        ttl_hours: Annotated[float | None, Field(gt=0, description="Expire after this many "
                                                 "hours (stays readable, no longer injected).")]
        = None,
        expected_value: Annotated[str | int | float | bool | None, Field(
            description="Compare-and-swap: refuse unless the key currently holds this.")] = None,
        expect_absent: Annotated[bool, Field(
            description="Compare-and-swap: refuse unless the key is absent.")] = False,
        request_id: RequestId = None,
    ) -> Annotated[CallToolResult, WriteOut]:
        expected: Any = None if expect_absent else (
            UNSET if expected_value is None else expected_value)
        return call("working_state_set", lambda: WriteOut.model_validate(repo.set(
            key, value, reason, ttl_hours=ttl_hours, expected=expected,
            request_id=request_id).to_dict()))

    @server.tool(name="working_state_clear", annotations=WRITE, description=(
        "Retire one key (one audited commit); its history stays in the log. `reason` is "
        "required; `expected_value` refuses the clear if the key changed meanwhile."))
    def working_state_clear(
        key: Annotated[str, Field(max_length=128)],
        reason: Annotated[str, Field(max_length=4000)],
        expected_value: Annotated[str | int | float | bool | None, Field(
            description="Compare-and-swap: refuse unless the key currently holds this.")] = None,
        request_id: RequestId = None,
    ) -> Annotated[CallToolResult, WriteOut]:
        expected: Any = UNSET if expected_value is None else expected_value
        return call("working_state_clear", lambda: WriteOut.model_validate(
            repo.clear(key, reason, expected=expected, request_id=request_id).to_dict()))

    @server.tool(name="working_state_handoff", annotations=WRITE, description=(
        "Overwrite the one handoff note: what your next wake-up needs to know. Leave one before "
        "wrapping up any run. Plain: pass only `note` (whitespace collapsed, cut near 1,200 "
        "characters). Structured: any of next_steps / evidence / blocker makes `status` "
        "required - continue needs next_steps and no blocker; complete needs evidence and "
        "neither blocker nor next_steps; blocked needs blocker. A structured handoff over "
        "16,384 UTF-8 bytes in total is refused whole."))
    def working_state_handoff(
        note: str | None = None,
        status: Annotated[str | None, Field(
            description="continue | complete | blocked")] = None,
        next_steps: str | None = None,
        evidence: str | None = None,
        blocker: str | None = None,
        request_id: RequestId = None,
    ) -> Annotated[CallToolResult, WriteOut]:
        return call("working_state_handoff", lambda: WriteOut.model_validate(repo.handoff(
            note, status=status, next_steps=next_steps, evidence=evidence,
            blocker=blocker, request_id=request_id).to_dict()))

    @server.tool(name="working_state_get", annotations=READ, description=(
        "Read everything: all keys (expired ones included and marked), the handoff note, "
        "recent history of changes, the commit id, the live-key count and the cap."))
    def working_state_get() -> Annotated[CallToolResult, StateOut]:
        return call("working_state_get", lambda: StateOut.model_validate(repo.get()))

    @server.resource("gitstate://section", name="working-state-section", mime_type="text/plain",
                     description="The section injected at the tail of every wake-up's prompt.")
    def section_resource() -> str:
        return repo.render()

    @server.resource("gitstate://state", name="working-state", mime_type="application/json",
                     description="The whole working state as JSON (as working_state_get).")
    def state_resource() -> str:
        return StateOut.model_validate(repo.get()).model_dump_json(indent=2)

    return server


def serve(agent_dir: str | Path) -> None:
    """Run the server on stdio until the client closes it."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    build_server(agent_dir).run("stdio")
