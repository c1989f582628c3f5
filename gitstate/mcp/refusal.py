"""The text of a refused tool call: what a model sees when its host keeps only the text.

Many hosts drop a tool error's structured content: fastmcp's client raises ``ToolError`` with
the text, pydantic-ai raises on direct calls and hands the model the text as a retry prompt,
langchain-mcp-adapters drops the artifact of an error result, the OpenAI Agents wrapper passes
text only. So the text carries everything the structured refusal does (docs/mcp.md,
"Refusals"), in lines a model can follow::

    [cas.mismatch] expected stop_loss.2317 to be 250, but HEAD holds 262 (set ... : the rule).
    Nothing was written; ...
    current: stop_loss.2317 = 262 (set 2026-08-13T01:04:00Z by agent; reason: the 09:04 rule;
    no expiry)
    next: decide again from the current value; to change it, call working_state_set with
    expected_value=262.
    result: {"ok": false, "error": "cas.mismatch", "key": "stop_loss.2317", ...}

1. the rule in brackets and the message (which says that nothing was written);
2. ``current:`` the value in HEAD with its reason, set time, writer and expiry, when the rule
   compared against it; ``live keys:`` at the key cap;
3. ``next:`` what to do now, naming the tool to call;
4. ``result:`` the structured refusal as one line of JSON (without the message and the next
   step, which are lines 1 and 3), so a program behind a text-only host still gets every
   field.

The structured refusal carries the next step too (``next``), for hosts that keep only the
structured content (pydantic-ai hands the model the JSON when there is one).

Pure: no SDK, no repository.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..core import textsafe

NEXT: dict[str, str] = {
    "cas.mismatch": "decide again from the current value; to change it anyway, call {tool} "
                    "again with expected_value set to the current value ({expect}).",
    "keys.cap": "retire a key that no longer matters with working_state_clear (the live keys "
                "are listed above), then call {tool} again.",
    "keys.stored_cap": "retire keys with working_state_clear, then call {tool} again.",
    "clear.absent": "nothing to clear; call working_state_get to see the live keys.",
    "section.max_bytes": "shorten the value or the reason (or clear a key), then call {tool} "
                         "again.",
    "injection.max_chars": "shorten the value, the reason or the handoff, then call {tool} "
                           "again.",
    "handoff.max_bytes": "shorten the handoff's fields, then call working_state_handoff again.",
    "schema.writer": "this key is not yours to write (the runtime or a person sets it); read "
                     "it with working_state_get and act on it instead.",
    "approval.required": "wait for the pending approval to be decided (working_state_get "
                         "shows it under approval.*); you cannot decide it.",
    "input.invalid": "fix the arguments as listed and call {tool} again.",
    "request.conflict": "use a new request_id for a call with different arguments.",
    "internal": "nothing may have been written; call working_state_get before trying again.",
}
PREFIXES: dict[str, str] = {
    "schema.": "give a value of the key's declared type and bounds (see {tool}'s "
               "description), then call {tool} again.",
    "handoff.": "fix the handoff's fields as the message says, then call "
                "working_state_handoff again.",
    "run.": "call run_get to see the run's state and what the runtime does next.",
    "approval.": "call working_state_get to see the approvals; the runtime or a person "
                 "decides them.",
    "store.": "nothing was written; call working_state_get, then try again.",
    "remote.": "nothing was written; call working_state_get, then try again.",
}
DEFAULT_NEXT = "change what the message names, then call {tool} again."
MAX_JSON = 8192  # a refusal's JSON line; a structured value is at most 4 KiB


def next_step(rule: str, tool: str, refusal: dict[str, Any]) -> str:
    template = NEXT.get(rule) or next(
        (text for prefix, text in PREFIXES.items() if rule.startswith(prefix)), DEFAULT_NEXT)
    current = refusal.get("current")
    expect = _value(current["value"]) if isinstance(current, dict) and "value" in current \
        else "absent: pass expect_absent=true"
    return template.format(tool=tool, expect=expect)


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _entry_line(key: str | None, entry: dict[str, Any]) -> str:
    expiry = entry.get("expires_at")
    facts = [f"set {entry.get('set_at')} by {entry.get('actor')}",
             f"reason: {entry.get('reason')}",
             ("expired " if entry.get("expired") else "expires ") + str(expiry) if expiry
             else "no expiry"]
    name = f"{key} = " if key else ""
    return f"current: {name}{_value(entry.get('value'))} ({'; '.join(facts)})"


def text(refusal: dict[str, Any], tool: str,
         local: Callable[[str], str] | None = None) -> str:
    """The text of ``refusal`` (the structured refusal, as returned) for a call of ``tool``;
    ``local`` shows the stored times of the lines a model reads (not of ``result:``, which
    is the structured refusal as it is) in the agent's zone."""
    rule = str(refusal.get("error", "refused"))
    message = str(refusal.get("message", "")).strip()
    if message and not message.endswith("."):
        message += "."
    lines = [f"[{rule}] {message}"]
    current = refusal.get("current")
    if isinstance(current, dict):
        lines.append(_entry_line(refusal.get("key"), current))
    elif rule == "cas.mismatch":
        lines.append(f"current: {refusal.get('key')} is absent")
    names = refusal.get("live_key_names")
    if isinstance(names, list) and names and not all(str(n) in message for n in names):
        lines.append("live keys: " + ", ".join(str(n) for n in names))
    lines.append("next: " + (refusal.get("next_step") or next_step(rule, tool, refusal)))
    if local is not None:
        lines = [local(line) for line in lines]
    data = _value({k: v for k, v in refusal.items()
                   if k not in ("message", "next_step") and v is not None})
    if len(data) <= MAX_JSON:
        lines.append("result: " + data)
    return "\n".join(textsafe.visible(line) for line in lines)
