"""The six MCP tools: their arguments, descriptions and annotations, and the one call path.

SDK-free (pydantic only), so both lines of the ``mcp`` SDK serve the same tools
(:mod:`.sdk`). Each tool's arguments are one pydantic model: its JSON schema is the tool's
input schema and the same model validates every call, before gitstate's own rules run.

Input schemas are strict-clean (docs/mcp.md, "Schemas"): every object closes with
``additionalProperties: false`` and no schema accepts "anything", so OpenAI's strict mode
converts each tool without falling back and MCP Inspector's ``--strict`` lint has nothing to
say. An open JSON value cannot be written that way, so a structured value (an array or an
object) travels as JSON text in ``value_json`` / ``expected_json`` — the CLI's
``--json-value`` rule — and a run's ``criteria_evidence`` map as a list of pairs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..api.repo import StateRepo
from ..core import textsafe
from ..core.errors import GitStateError, UsageError
from ..core.localtime import local_times_in
from ..core.results import refusal, to_json
from ..core.timebase import tzinfo
from ..system.config import resolve_tz
from ..write.planners import UNSET, Expected
from . import refusal as mcp_refusal
from .schema import RunOut, StateOut, WriteOut, clean_schema, inline_schema, output_schema

if TYPE_CHECKING:
    from ..system.config import Config

log = logging.getLogger("gitstate.mcp")

Scalar = str | int | float | bool
MAX_JSON_TEXT = 1 << 20


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _text(description: str, max_length: int | None = None) -> Any:
    return Field(description=description, max_length=max_length)


Key = Annotated[str, _text("Dotted name, e.g. stop_loss.2317 (ASCII letters, digits, '.', "
                           "'_', '-').", 128)]
Reason = Annotated[str, _text("Why; becomes the commit message.", 4000)]
RequestId = Annotated[str | None, Field(
    None, max_length=128, description="Idempotency key: a retry with the same id and "
    "arguments returns the first result and makes no second commit.")]
ExpectedValue = Annotated[Scalar | None, Field(
    None, description="Compare-and-swap: refuse unless the key currently holds this value "
    "(262 and \"262\" compare equal). For an array or object use expected_json.")]
ExpectedJson = Annotated[str | None, Field(
    None, description="Compare-and-swap on a structured value: the value you read, as JSON "
    "text (compared by structure: object key order never matters).")]


def parse_json(text: str, name: str) -> Any:
    """A JSON argument: refused when malformed, over 1 MiB, NaN/Infinity, with a key twice or
    null (the CLI's --json-value rule)."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [k for k, _ in items]
        twins = sorted({k for k in names if names.count(k) > 1})
        if twins:
            raise UsageError(f"{name}: the object has the key {twins[0]!r} twice",
                             rule="input.invalid")
        return dict(items)

    def constant(word: str) -> Any:
        raise UsageError(f"{name}: {word} is not a JSON number", rule="input.invalid")

    if len(text) > MAX_JSON_TEXT:
        raise UsageError(f"{name}: over 1 MiB of JSON", rule="input.invalid")
    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{name} is not valid JSON: {exc.msg} at line {exc.lineno} column "
                         f"{exc.colno}", rule="input.invalid") from None
    except RecursionError:
        raise UsageError(f"{name}: the JSON nests too deeply", rule="input.invalid") from None
    if value is None:
        raise UsageError(f"{name}: null is not a value", rule="input.invalid")
    return value


def _one(value: Any, text: str | None, name: str) -> Any:
    return value if text is None else parse_json(text, name)


class SetArgs(Args):
    key: Key
    value: Annotated[Scalar | None, Field(None, description=(
        "The value: a string, number or boolean. For an array or object use value_json "
        "instead (exactly one of the two)."))]
    value_json: Annotated[str | None, Field(None, description=(
        "A structured value (array or object) as JSON text, e.g. \"[\\\"AAPL\\\", "
        "\\\"MSFT\\\"]\" - within gitstate's limits: depth 8, 256 elements, 4 KiB as JSON; "
        "object keys of A-Z a-z 0-9 _ . -."))]
    reason: Reason
    ttl_hours: Annotated[float | None, Field(None, gt=0, le=8784, description=(
        "Expire after this many hours (stays readable, no longer injected)."))]
    expected_value: ExpectedValue
    expected_json: ExpectedJson
    expect_absent: Annotated[bool | None, Field(None, description=(
        "Compare-and-swap: true refuses the write unless the key is absent."))]
    request_id: RequestId

    @model_validator(mode="after")
    def _exactly_one(self) -> SetArgs:
        if (self.value is None) == (self.value_json is None):
            raise ValueError("give exactly one of value (a string, number or boolean) and "
                             "value_json (an array or object as JSON text)")
        if self.expect_absent and (self.expected_value is not None
                                   or self.expected_json is not None):
            raise ValueError("expect_absent=true cannot be combined with an expected value")
        if self.expected_value is not None and self.expected_json is not None:
            raise ValueError("give at most one of expected_value and expected_json")
        return self


class ClearArgs(Args):
    key: Annotated[str, _text("The key to retire.", 128)]
    reason: Reason
    expected_value: ExpectedValue
    expected_json: ExpectedJson
    request_id: RequestId


class HandoffArgs(Args):
    note: Annotated[str | None, Field(None, description="The note for your next wake-up.")]
    status: Annotated[Literal["continue", "complete", "blocked"] | None, Field(
        None, description="Structured handoff: continue (with next_steps), complete (with "
        "evidence) or blocked (with blocker).")]
    next_steps: Annotated[str | None, Field(None, description="(continue) What to do next.")]
    evidence: Annotated[str | None, Field(None, description=(
        "(complete) What shows the work is done; done must not be self-declared."))]
    blocker: Annotated[str | None, Field(None, description="(blocked) What stops the work.")]
    request_id: RequestId


class GetArgs(Args):
    pass


RunId = Annotated[str, _text("The run id.", 64)]


class StepStarted(Args):
    type: Literal["step_started"]
    step_id: str
    description: str


class QuestionOpened(Args):
    type: Literal["question_opened"]
    question: str


class QuestionAnswered(Args):
    type: Literal["question_answered"]
    question: str
    evidence_ref: str


class Blocked(Args):
    type: Literal["blocked"]
    reason: str


class CriterionEvidence(Args):
    criterion: str
    evidence_ref: str


class Completed(Args):
    type: Literal["completed"]
    result_ref: str
    criteria_evidence: Annotated[list[CriterionEvidence], Field(description=(
        "One {criterion, evidence_ref} pair for every success criterion of the goal."))]


Event = Annotated[StepStarted | QuestionOpened | QuestionAnswered | Blocked | Completed,
                  Field(discriminator="type", description="The event, told apart by type.")]


class RunGetArgs(Args):
    run_id: RunId


class RunProposeArgs(Args):
    run_id: RunId
    event: Event
    reason: Reason
    request_id: RequestId


def _event(event: BaseModel) -> dict[str, Any]:
    data = event.model_dump()
    if isinstance(event, Completed):
        data["criteria_evidence"] = {p.criterion: p.evidence_ref
                                     for p in event.criteria_evidence}
    return data


WRITE = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False,
         "openWorldHint": False}
READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True,
        "openWorldHint": False}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: type[Args]
    output: type[BaseModel]
    annotations: dict[str, bool]
    run: Callable[[StateRepo, Any], object]

    def wire(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "inputSchema": inline_schema(clean_schema(self.args.model_json_schema())),
                "outputSchema": output_schema(self.output.model_json_schema()),
                "annotations": self.annotations}


def _expected(value: Any, text: str | None, absent: bool | None = None) -> Expected:
    if absent:
        return None
    if value is None and text is None:
        return UNSET
    return _one(value, text, "expected_json")  # type: ignore[no-any-return]


def _set(repo: StateRepo, a: SetArgs) -> object:
    return repo.set(a.key, _one(a.value, a.value_json, "value_json"), a.reason,
                    ttl_hours=a.ttl_hours, request_id=a.request_id,
                    expected=_expected(a.expected_value, a.expected_json, a.expect_absent))


def tools(config: Config, declared: str) -> list[Tool]:
    """The server's tools (descriptions name the config's limits and the schema's keys);
    `gitstate mcp --help` lists them from here too."""
    return [
        Tool("working_state_set", (
            "Set or update one key of your working state (one audited commit). Call it the "
            "moment a decision parameter is decided (stop-loss, take-profit, position cap, "
            "phase). `reason` is required. Give day-scoped rules `ttl_hours` so they expire "
            "on their own. Pass `expected_value` (the value you read) to refuse the write if "
            "another wake-up changed it; `expect_absent` to refuse if the key exists. 262 and "
            f"\"262\" compare equal. At most {config.max_keys} live keys. A structured value "
            "(array or object) goes in `value_json` as JSON text. Pass a `request_id` to make "
            "a retry safe. A refusal names its rule and, for a stale expected_value, gives the "
            "current value with its reason and set time, and what to do next." + declared),
            SetArgs, WriteOut, WRITE, _set),
        Tool("working_state_clear", (
            "Retire one key (one audited commit); its history stays in the log. `reason` is "
            "required; `expected_value` (or `expected_json`) refuses the clear if the key "
            "changed meanwhile."), ClearArgs, WriteOut, WRITE,
            lambda r, a: r.clear(a.key, a.reason, request_id=a.request_id,
                                 expected=_expected(a.expected_value, a.expected_json))),
        Tool("working_state_handoff", (
            "Overwrite the one handoff note: what your next wake-up needs to know. Leave one "
            "before wrapping up any run. Plain: pass only `note` (whitespace collapsed, cut "
            f"near {config.handoff_plain_max_chars:,} characters). Structured: any of "
            "next_steps / evidence / blocker makes `status` required - continue needs "
            "next_steps and no blocker; complete needs evidence and neither blocker nor "
            "next_steps; blocked needs blocker. A structured handoff over "
            f"{config.handoff_max_bytes:,} UTF-8 bytes in total is refused whole."),
            HandoffArgs, WriteOut, WRITE,
            lambda r, a: r.handoff(a.note, status=a.status, next_steps=a.next_steps,
                                   evidence=a.evidence, blocker=a.blocker,
                                   request_id=a.request_id)),
        Tool("working_state_get", (
            "Read everything: all keys (expired ones included and marked), the handoff "
            "note, recent history of changes, the commit id, the live-key count and the "
            "cap."), GetArgs, StateOut, READ, lambda r, a: r.get()),
        Tool("run_get", (
            "Read a run (refs/heads/runs/<run_id>): its goal and success criteria, its state "
            "(current and pending steps, open questions, evidence, approvals, budget, stop "
            "reason) and what the runtime does next."), RunGetArgs, RunOut, READ,
            lambda r, a: r.runs.read(a.run_id)),
        Tool("run_propose", (
            "Propose one event for a run (one audited commit when the runtime's rules accept "
            "it). You may propose step_started {step_id, description}, question_opened "
            "{question}, question_answered {question, evidence_ref}, blocked {reason} and "
            "completed {result_ref, criteria_evidence: [{criterion, evidence_ref}, ...]}; "
            "tool results, budgets, approvals and cancellation are the runtime's. A refusal "
            "names its rule (run.criteria_unmet, run.awaiting_approval, run.stopped ...). "
            "Pass a request_id to make a retry safe."), RunProposeArgs, RunOut, WRITE,
            lambda r, a: r.runs.event(a.run_id, _event(a.event), a.reason, writer="agent",
                                      request_id=a.request_id)),
    ]


def _invalid(exc: ValidationError, tool: str) -> GitStateError:
    problems = []
    for err in exc.errors(include_url=False, include_input=False)[:8]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        problems.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
    return UsageError(f"the arguments of {tool} are invalid: " + "; ".join(problems)
                      + ". Nothing was written.", rule="input.invalid")


def result(content: dict[str, Any], text: str, error: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"content": [{"type": "text", "text": text}],
                           "structuredContent": content}
    if error:
        out["isError"] = True
    return out


def refused(exc: GitStateError, tool: str, zone: tzinfo | None = None) -> dict[str, Any]:
    return _refusal(to_json(refusal(exc)), tool, zone)


def _refusal(content: dict[str, Any], tool: str,
             zone: tzinfo | None = None) -> dict[str, Any]:
    """A refusal's result: the structured refusal with its next step (for hosts that keep
    only the structured content, as pydantic-ai does), and the text (for hosts that keep
    only the text), its times in the agent's ``zone`` as every text output shows them."""
    content["next_step"] = mcp_refusal.next_step(content["error"], tool, content)
    local = None if zone is None else (lambda line: local_times_in(line, zone))
    return result(content, mcp_refusal.text(content, tool, local), error=True)


def _zone(repo: StateRepo) -> tzinfo | None:
    try:
        return resolve_tz(repo.config.timezone)
    except GitStateError:
        return None  # the refusal may be that very config: its times stay UTC


def call(repo: StateRepo, tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
    """One call of ``tool``: the structured result with its text, a refusal, or an internal
    failure (logged with its traceback; the server stays up)."""
    try:
        try:
            args = tool.args.model_validate(arguments)
        except ValidationError as exc:
            raise _invalid(exc, tool.name) from None
        content = to_json(tool.run(repo, args))
        return result(content, textsafe.visible(json.dumps(content, ensure_ascii=False)))
    except GitStateError as exc:
        return refused(exc, tool.name, _zone(repo))
    except Exception as exc:  # the log keeps the traceback; the model gets the type only
        log.exception("%s failed", tool.name)
        message = (f"internal error in {tool.name}: {type(exc).__name__}. Nothing may have "
                   "been written")
        return _refusal({"ok": False, "error": "internal", "message": message + "."},
                        tool.name)
