"""The run ledger's event vocabulary: each event type and its fields (docs/runs.md).

It sits below the schema, which names who may record each type, while the ledger that
records and replays events lives with the runs (gitstate/runs/model.py).
"""

from __future__ import annotations

# event type -> {field: (type, required)}; anything else is refused
STR, INT, BOOL, LIST = "string", "integer", "boolean", "list"
EVENTS: dict[str, dict[str, tuple[str, bool]]] = {
    "steps_planned": {"steps": (LIST, True)},
    "step_started": {"step_id": (STR, True), "description": (STR, True),
                     "side_effect": (BOOL, False)},
    "step_completed": {"step_id": (STR, True)},
    "tool_result_recorded": {"tool_call_id": (STR, True), "evidence_ref": (STR, True),
                             "observed_at": (STR, True)},
    "approval_recorded": {"approval_id": (STR, True), "decision": (STR, True),
                          "main_commit": ("commit", False)},
    "question_opened": {"question": (STR, True)},
    "question_answered": {"question": (STR, True), "evidence_ref": (STR, True)},
    "blocked": {"reason": (STR, True)},
    "budget_spent": {"iterations": (INT, False), "tokens": (INT, False),
                     "cost_cents": (INT, False)},
    "completed": {"result_ref": (STR, True), "criteria_evidence": ("object", True)},
    "cancelled": {"reason": (STR, True)},
    "failed": {"reason": (STR, True)},
}
AGENT_EVENTS = frozenset({"step_started", "question_opened", "question_answered", "blocked",
                          "completed"})
RUNTIME_EVENTS = frozenset({"tool_result_recorded", "budget_spent", "failed"})
