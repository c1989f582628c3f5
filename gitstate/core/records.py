"""The typed records the Python API returns for listings: history entries, run summaries,
a run's goal and next action, and a requested approval (docs/python-api.md).

Frozen dataclasses, like the rest of ``gitstate.core.results``. They replaced plain dicts; a
caller that still indexes one (``entry["op"]``, ``view.next["action"]``, ``dict(entry)``)
gets the same answer and a DeprecationWarning naming the attribute to use instead
(:class:`MappingCompat`). ``to_dict()`` is the JSON form, unchanged from the dicts'.

Stdlib only and cheap to import.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Required, TypedDict


class ChangeRecord(TypedDict, total=False):
    """One line of working_state_history.jsonl: one commit (docs/auditing.md). ``op`` is
    init, set, clear, handoff, adopt, observe, schema or foreign (a commit gitstate did not
    make); the last four fields appear only for the operations that have them."""

    commit: Required[str]
    parent: Required[str | None]
    time: Required[str]
    actor: Required[str | None]
    op: Required[str]
    key: Required[str | None]
    old: Required[Any]
    new: Required[Any]
    reason: Required[str]
    expires_at: Required[str | None]
    reverts: Required[str | None]
    request: Required[dict[str, str] | None]
    handoff: dict[str, Any] | None
    adopt: dict[str, Any] | None
    observation: str
    schema_version: int



class MappingCompat:
    """Read-only dict access to a record's ``to_dict()``, deprecated: each use warns once
    per call site and names the attribute."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def _warn(self, what: str) -> None:
        warnings.warn(f"{type(self).__name__} is a typed record, not a dict: {what} "
                      "(dict access is deprecated)", DeprecationWarning, stacklevel=3)

    def __getitem__(self, name: str) -> Any:
        self._warn(f"use .{name}")
        return self.to_dict()[name]

    def get(self, name: str, default: Any = None) -> Any:
        self._warn(f"use .{name}")
        return self.to_dict().get(name, default)

    def __contains__(self, name: object) -> bool:
        self._warn("use its attributes")
        return name in self.to_dict()

    def keys(self) -> Any:
        self._warn("use .to_dict()")
        return self.to_dict().keys()

    def items(self) -> Any:
        self._warn("use .to_dict()")
        return self.to_dict().items()

    def values(self) -> Any:
        self._warn("use .to_dict()")
        return self.to_dict().values()

    def __iter__(self) -> Iterator[str]:
        self._warn("use .to_dict()")
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            self._warn("compare .to_dict()")
            return self.to_dict() == dict(other)
        if type(other) is type(self):
            return self.to_dict() == other.to_dict()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class HistoryEntry(MappingCompat):
    """One change: one commit of the state's history (docs/auditing.md, "The history").
    ``op`` is init, set, clear, handoff, revert, adopt, observe, schema, approval or
    foreign (a commit gitstate did not make)."""

    commit: str
    parent: str | None
    time: str
    actor: str | None
    op: str
    key: str | None
    old: Any
    new: Any
    reason: str
    expires_at: str | None
    reverts: str | None
    request: dict[str, str] | None
    handoff: dict[str, Any] | None = None
    adopt: dict[str, Any] | None = None
    observation: str | None = None
    schema_version: int | None = None

    @classmethod
    def of(cls, rec: ChangeRecord) -> HistoryEntry:
        return cls(rec["commit"], rec["parent"], rec["time"], rec["actor"], rec["op"],
                   rec["key"], rec["old"], rec["new"], rec["reason"], rec["expires_at"],
                   rec["reverts"], rec["request"], rec.get("handoff"), rec.get("adopt"),
                   rec.get("observation"), rec.get("schema_version"))

    def to_dict(self) -> dict[str, Any]:
        """The projection's line for this change (the optional fields only when set)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)[:12]}
        if self.handoff is not None or self.op == "handoff":
            out["handoff"] = self.handoff
        for name in ("adopt", "observation", "schema_version"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


@dataclass(frozen=True, eq=False)
class RunSummary(MappingCompat):
    """One line of ``repo.runs.listing()``: a run's status at its ref's head; ``error``
    instead when its run.json cannot be read."""

    run_id: str
    head: str
    status: str | None = None
    stop_reason: str | None = None
    updated_at: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.error is not None:
            return {"run_id": self.run_id, "head": self.head, "error": self.error}
        return {"run_id": self.run_id, "head": self.head, "status": self.status,
                "stop_reason": self.stop_reason, "updated_at": self.updated_at}


@dataclass(frozen=True, eq=False)
class RunGoal(MappingCompat):
    """A run's goal record (docs/runs.md): what it is for and where it stands."""

    goal_id: str
    run_id: str
    owner: str
    description: str
    success_criteria: list[str]
    constraints: list[str]
    risk_class: str
    status: str = field(metadata={"doc": "active, waiting_for_approval, blocked, completed, "
                                         "failed or cancelled."})
    created_at: str = ""
    updated_at: str = ""

    @classmethod
    def of(cls, goal: dict[str, Any]) -> RunGoal:
        return cls(**{f.name: goal[f.name] for f in fields(cls) if f.name in goal})


@dataclass(frozen=True, eq=False)
class NextAction(MappingCompat):
    """What the runtime does next with a run: ``action`` is continue, ask_approval,
    escalate or stop, and ``reason`` says why."""

    action: str
    reason: str

    @classmethod
    def of(cls, nxt: dict[str, Any]) -> NextAction:
        return cls(nxt["action"], nxt["reason"])


class ApprovalRequest(str):
    """What ``request_approval`` returns: the approval's id, a ``str`` (so it goes
    straight into ``approve``, ``deny`` and ``spend_approval`` as the id did), with the
    request's commit, tool, arguments and reason as read-only attributes."""

    approval_id: str
    commit: str
    tool: str
    args: dict[str, Any]
    reason: str

    def __new__(cls, approval_id: str, *, commit: str, tool: str, args: dict[str, Any],
                reason: str) -> ApprovalRequest:
        self = super().__new__(cls, approval_id)
        for name, value in (("approval_id", approval_id), ("commit", commit),
                            ("tool", tool), ("args", args), ("reason", reason)):
            object.__setattr__(self, name, value)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ApprovalRequest.{name} is read-only")

    def to_dict(self) -> dict[str, Any]:
        return {"approval_id": self.approval_id, "commit": self.commit, "tool": self.tool,
                "args": self.args, "reason": self.reason}
