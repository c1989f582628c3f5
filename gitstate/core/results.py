"""What gitstate's operations return: one set of typed results for every surface.

The style, chosen once (docs/design.md, "Results"): plain dataclasses holding the model's
records (``Entry``, ``Handoff``). The Python API returns them; :func:`to_json` is the only
way they become JSON (the CLI's ``--json``, the MCP server's structured content); the MCP
output schemas are generated from these same classes (``gitstate.mcp.schema``). A field
added here therefore appears everywhere at once, and a test checks the CLI's JSON against
the MCP schema for the same operation.

A refusal is an exception (``errors.Refused`` and its kin) in Python; on the JSON surfaces
it is :class:`Refusal`, built from the exception by :func:`refusal`.

Stdlib only and cheap to import: the CLI loads it for every write.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import GitStateError
from .model import Entry, Handoff, Value
from .records import HistoryEntry, MappingCompat, NextAction, RunGoal


def doc(text: str) -> dict[str, str]:
    """A field's description (field metadata; it becomes the field's JSON-schema text)."""
    return {"doc": text}


@dataclass
class KeyState:
    """One key as read at a moment: its entry, and whether it has expired then."""

    value: Value
    set_at: str = field(metadata=doc("When it was set (UTC ISO 8601)."))
    reason: str = field(metadata=doc("Why it was set: the commit message."))
    actor: str = field(metadata=doc("Who set it."))
    expires_at: str | None = field(default=None, metadata=doc(
        "When it stops being injected (UTC), or null."))
    expired: bool = field(default=False, metadata=doc(
        "True once expires_at has passed (still readable, not injected)."))

    @classmethod
    def of(cls, entry: Entry, expired: bool) -> KeyState:
        return cls(entry.value, entry.set_at, entry.reason, entry.actor, entry.expires_at,
                   expired)


@dataclass
class Overridden:
    """A key (or the handoff) a forced revert overwrote although it had changed since."""

    key: str | None = field(metadata=doc("The key, or null for the handoff."))
    current: dict[str, Any] | None = field(metadata=doc("What it held before the revert."))
    reverted_value: Value | None = None
    handoff: bool = False


@dataclass
class WriteResult:
    """What a successful write returns (set, clear, handoff, revert, adopt, observe,
    schema)."""

    op: str = field(metadata=doc("set, clear, handoff, revert, adopt, observe or schema."))
    commit: str = field(metadata=doc("The git commit that recorded this change."))
    key: str | None = None
    old: Entry | None = field(default=None, metadata=doc("The key's entry before the write."))
    new: Entry | None = field(default=None, metadata=doc("The key's entry after the write."))
    handoff: Handoff | None = None
    truncated: bool = field(default=False, metadata=doc("True when a plain note was cut to fit."))
    live_keys: int = field(default=0, metadata=doc("Live keys after the write."))
    max_keys: int = field(default=0, metadata=doc("The live-key cap."))
    warnings: list[str] = field(default_factory=list)
    replayed: bool = field(
        default=False, metadata=doc(
        "True when this answers a retried request_id (no new commit)."))
    reverted: str | None = field(default=None, metadata=doc(
        "(revert) The commit whose changes were undone."))
    overridden: list[Overridden] = field(default_factory=list, metadata=doc(
        "(revert --force) What was overwritten."))
    ok: Literal[True] = True


@dataclass
class RunView:
    """A run as read at one commit of its ref (refs/heads/runs/<run_id>), and what comes
    next (docs/runs.md)."""

    run_id: str = field(metadata=doc("The run."))
    head: str = field(metadata=doc("The commit of the run's ref this was read at."))
    goal: RunGoal = field(metadata=doc(
        "The goal record: description, success_criteria, constraints, risk_class, status..."))
    state: dict[str, Any] = field(metadata=doc(
        "The run state: current_step, pending_steps, open_questions, evidence_refs, "
        "approval_refs, budget_state, stop_reason, version..."))
    next: NextAction = field(metadata=doc(
        "What the runtime does next: action (continue, ask_approval, escalate, stop) and "
        "reason."))
    replayed: bool = field(default=False, metadata=doc(
        "True when this answers a retried request_id (no new commit)."))
    ok: Literal[True] = True

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "head": self.head, "goal": self.goal.to_dict(),
                "state": self.state, "next": self.next.to_dict(), "replayed": self.replayed}


@dataclass
class DiscardResult:
    """A hand edit moved aside and the file restored to HEAD (``adopt --discard``)."""

    kept: list[str] = field(metadata=doc("Where each discarded edit was kept."))
    op: Literal["discard"] = "discard"
    ok: Literal[True] = True


@dataclass
class StateView:
    """Everything ``get`` reads: keys (expired ones marked), handoff, recent history."""

    head: str = field(metadata=doc("The commit id of the state."))
    now: str = field(metadata=doc("The moment expiry was evaluated at (UTC)."))
    keys: dict[str, KeyState] = field(metadata=doc("Every key; expired ones are marked."))
    handoff: Handoff | None
    history: list[HistoryEntry] = field(metadata=doc(
        "Recent changes, newest first (the projection's records, docs/auditing.md)."))
    live_keys: int
    max_keys: int
    section_bytes: int = field(metadata=doc("Bytes the key lines take in the rendered section."))
    section_max_bytes: int
    schema_version: int | None = None
    phase: str | None = field(default=None, metadata=doc("The current phase (typed state)."))
    allowed_tools: list[str] | None = field(default=None, metadata=doc(
        "Tools the current phase allows; null when no phases are declared."))
    warnings: list[str] = field(default_factory=list)
    ok: Literal[True] = True


@dataclass
class SyncResult:
    """What push and pull did."""

    action: str = field(metadata=doc("up-to-date, ahead, fast-forward, pushed or rebased."))
    head: str
    remote: str | None = field(metadata=doc("The remote's main after the call."))
    pushed: int = field(default=0, metadata=doc("Local commits the push published."))
    pulled: int = field(default=0, metadata=doc("Remote commits the pull fast-forwarded to."))
    rebased: int = 0
    refused: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Local changes that could not be re-applied, with both sides."))
    kept_on: str | None = field(default=None, metadata=doc("The ref that keeps refused changes."))
    runs: dict[str, Any] = field(default_factory=dict, metadata=doc(
        "The run ledgers carried too: pushed / pulled, and those refused, diverged or ahead "
        "(docs/runs.md)."))
    threads: dict[str, Any] = field(default_factory=dict, metadata=doc(
        "The LangGraph threads carried when asked (--threads, --thread): pushed / pulled, "
        "and those refused, diverged, ahead or with pending writes (docs/langgraph.md)."))

    @property
    def ok(self) -> bool:
        return not self.refused


@dataclass
class SyncStatus:
    """Where main stands against the commit last seen on the remote (no network)."""

    head: str
    remote_url: str | None
    remote_seen: str | None = field(metadata=doc("The remote's main when last seen (the "
                                                 "push lease)."))
    ahead: int | None = field(metadata=doc("Local commits not on the remote yet; null when "
                                           "the two have diverged or no remote is set."))
    behind: int
    sync: str = field(metadata=doc("The [gitstate] sync mode."))
    unpushed_refs: list[str] = field(metadata=doc("Refs keeping local changes a push could "
                                                  "not re-apply."))
    hand_edits: list[str]


@dataclass
class SchemaReport:
    """A state checked against a schema: live violations (refused at write time, so never
    for HEAD's own schema) and expired ones (kept, not injected)."""

    schema: int | None = field(metadata=doc("The schema's version; null without one."))
    live: list[str]
    expired: list[str]


@dataclass
class Refusal:
    """A refused or failed call on the JSON surfaces; nothing was written. The rule's own
    fields (what the caller needs to retry) come next to these."""

    error: str = field(metadata=doc(
        "The rule that refused the call, e.g. cas.mismatch, keys.cap, key.charset; internal for a "
        "failure."))
    message: str = field(metadata=doc("What happened and what to do."))
    current: KeyState | None = field(default=None, metadata=doc(
        "(cas.mismatch) The key's current entry in HEAD: value, reason, set time."))
    expected: Value | None = field(default=None, metadata=doc(
        "(cas.mismatch) The value the call expected."))
    live_key_names: list[str] | None = field(default=None, metadata=doc(
        "(keys.cap) The live keys; clear one of them first."))
    details: dict[str, Any] = field(default_factory=dict)
    ok: Literal[False] = False


KNOWN_DETAILS = ("current", "expected", "live_key_names")


def refusal(exc: GitStateError) -> Refusal:
    details = dict(exc.details)
    known = {name: details.pop(name) for name in KNOWN_DETAILS if name in details}
    if isinstance(known.get("current"), dict):
        c = known["current"]
        known["current"] = KeyState(c["value"], c["set_at"], c["reason"], c["actor"],
                                    c.get("expires_at"), bool(c.get("expired")))
    return Refusal(exc.rule, exc.message, details=details, **known)


def to_json(obj: Any) -> Any:
    """The JSON form of any result: dataclasses and model records become objects (a
    Refusal's ``details`` are flattened into it), containers are walked, scalars kept."""
    if isinstance(obj, Refusal):
        out = {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)
               if f.name != "details"}
        return {**to_json(obj.details), **out}
    if isinstance(obj, MappingCompat):
        return to_json(obj.to_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        if isinstance(obj, SyncResult):
            out["ok"] = obj.ok
        return out
    if isinstance(obj, Entry | Handoff):
        return obj.to_dict()
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_json(v) for v in obj]
    return obj
