"""Run ledgers (seed 003's goals and working memory): the pure core.

A run is a goal record and a run state, changed only by typed events that the runtime
applies; the model only proposes. This module holds the run's shape, the transition
``apply_event(run, event, writer, now) -> run`` and the rules the runtime enforces, and
``next_action(run, now)``: what comes after an event (continue, ask_approval, escalate or
stop, with the reason). An event's strict validation, before any rule, is
gitstate/runs/validate.py. No I/O: where a run is stored (one commit per event on its own
ref) is the caller's business, and folding the events of a ledger from its first reproduces
the run exactly.

Rules (each refusal is a RunRefused naming ``run.<rule>``):

* a stopped run (cancelled, completed, failed, budget exhausted) accepts no further event;
  a blocked run accepts questions, answers, approvals, failure and cancellation only;
* a budget (iterations, tokens, cost, deadline) crossed records ``budget_exhausted`` with the
  event that crossed it;
* with risk high or critical, a step declared side-effecting waits for an approval: the run
  is ``waiting_for_approval`` until ``approval_recorded`` (approved: continue; denied:
  blocked; expired: approval_required again), which cites main's commit holding the
  decision (``main_commit``; the ledger fills it in and checks it, gitstate/runs/ledger.py);
* ``completed`` is refused unless every success criterion maps to a recorded evidence ref;
* a tool result observed before the evidence already recorded for the same ref is stale;
* ``question_answered`` needs an evidence ref and an open question;
* writers: the agent may propose step_started, question_opened, question_answered, blocked
  and completed; tool_result_recorded, budget_spent and failed are the runtime's;
  approval_recorded and cancelled are the runtime's or a human's; the rest the runtime's or
  a human's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..core.model import format_time, parse_time
from ..core.runevents import AGENT_EVENTS, RUNTIME_EVENTS
from .validate import check_run_id, check_text, refused, validate_event

FORMAT = 1
RISKS = ("low", "medium", "high", "critical")
GOAL_STATUSES = ("active", "blocked", "waiting_for_approval", "completed", "cancelled",
                 "failed")
STOP_REASONS = ("success", "blocked", "approval_required", "budget_exhausted", "cancelled",
                "failed")

STOPPED = frozenset({"success", "cancelled", "failed", "budget_exhausted"})


def new_run(run_id: str, *, description: str, criteria: list[str], constraints: list[str],
            risk: str, owner: str, now: datetime, budget: dict[str, Any]) -> dict[str, Any]:
    """The run as ``goal_created`` makes it."""
    from ..core.rules import check_secret

    check_run_id(run_id)
    check_secret(run_id, "the run id")  # it becomes a ref name, pushed with the run
    if risk not in RISKS:
        raise refused("invalid", f"risk must be one of {', '.join(RISKS)}")
    if not criteria:
        raise refused("invalid", "a goal needs at least one observable success criterion")
    for name in ("max_iterations", "max_tokens", "max_cost_cents"):
        v = budget.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise refused("invalid", f"{name} must be a whole number > 0")
    deadline = budget.get("deadline_at")
    if deadline is not None:
        deadline = format_time(parse_time(deadline))
    stamp = format_time(now)
    goal = {"goal_id": f"goal-{run_id}", "run_id": run_id, "owner": check_text(owner, "owner"),
            "description": check_text(description, "the goal"),
            "success_criteria": [check_text(c, "a criterion") for c in criteria],
            "constraints": [check_text(c, "a constraint") for c in constraints],
            "risk_class": risk, "status": "active", "created_at": stamp, "updated_at": stamp}
    state = {"current_step": None, "completed_steps": [], "pending_steps": [],
             "side_effect_steps": [], "open_questions": [], "constraints": list(
                 goal["constraints"]),
             "evidence_refs": [], "evidence_times": {}, "tool_result_refs": [],
             "approval_refs": [], "awaiting_approval": None,
             "budget_state": {"iteration_count": 0, "token_estimate": 0, "cost_cents": 0,
                              "deadline_at": deadline,
                              "max_iterations": budget.get("max_iterations"),
                              "max_tokens": budget.get("max_tokens"),
                              "max_cost_cents": budget.get("max_cost_cents")},
             "criteria_evidence": {}, "result_ref": None, "stop_reason": None,
             "stop_event": None, "version": 1}
    return {"format": FORMAT, "goal": goal, "state": state}


BUDGET_KEYS = ("max_iterations", "max_tokens", "max_cost_cents", "deadline_at")
GOAL_FIELDS = ("description", "criteria", "constraints", "risk", "owner", "budget")


def goal(run_id: str, *, description: str, criteria: list[str], constraints: list[str],
         risk: str, owner: str, now: datetime,
         budget: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the run, its ``goal_created`` event) as a run's first commit records them: what
    ``Ledger.start`` writes and what the replay of a run from elsewhere re-derives its first
    commit with (gitstate/runs/check.py). The goal's lists are lists of texts and the budget
    names only :data:`BUDGET_KEYS`."""
    for name, value in (("criteria", criteria), ("constraints", constraints)):
        if not isinstance(value, list):
            raise refused("invalid", f"goal_created.{name} must be a list of texts")
    if not isinstance(budget, dict) or set(budget) - set(BUDGET_KEYS):
        raise refused("invalid", "goal_created.budget names only "
                      f"{', '.join(BUDGET_KEYS)}")
    run = new_run(run_id, description=description, criteria=list(criteria),
                  constraints=list(constraints), risk=risk, owner=owner, now=now,
                  budget=budget)
    event = {"type": "goal_created", "description": description, "criteria": list(criteria),
             "constraints": list(constraints), "risk": risk, "owner": run["goal"]["owner"],
             "budget": dict(budget)}
    return run, event


def may_write(kind: str, writer: str,
              overrides: Mapping[str, tuple[str, ...]] | None = None) -> bool:
    """Who may record an event of this type: schema.yaml's ``runs: writers:`` when it names
    the type, else the defaults above. The agent never records an approval."""
    if overrides and kind in overrides:
        return writer in overrides[kind] and not (writer == "agent" and
                                                  kind == "approval_recorded")
    if writer == "agent":
        return kind in AGENT_EVENTS
    if kind in RUNTIME_EVENTS:
        return writer == "runtime"
    return writer in ("runtime", "human")


def apply_event(run: dict[str, Any], event: dict[str, Any], writer: str, now: datetime, *,
                writers: Mapping[str, tuple[str, ...]] | None = None,
                approvals: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The run after ``event`` (validated), or RunRefused. Pure: ``run`` is not changed.

    ``writers``: schema.yaml's per-event writers. ``approvals``: the decision each
    frozen-argument approval of the key table stands at (approved, denied, expired,
    pending; consumed: spent, which releases no further run); given, an
    ``approval_recorded`` must name one and agree with it."""
    event = validate_event(event)
    kind = event["type"]
    if not may_write(kind, writer, writers):
        raise refused("writer", f"{kind} may not be recorded by {writer}", writer=writer)
    if kind == "approval_recorded" and approvals is not None:
        _check_link(event, approvals)
    out = copy.deepcopy(run)
    goal, state = out["goal"], out["state"]
    stop = state["stop_reason"]
    if stop in STOPPED:
        raise refused("stopped", f"the run stopped ({stop}); it accepts no {kind}",
                      stop_reason=stop)
    if stop == "blocked" and kind not in ("question_answered", "approval_recorded",
                                          "cancelled", "failed", "question_opened"):
        raise refused("blocked", f"the run is blocked; answer its open questions or record "
                      f"an approval before {kind}", open_questions=state["open_questions"])
    waiting = state["awaiting_approval"]
    if waiting is not None and kind not in ("approval_recorded", "cancelled", "failed",
                                            "question_opened", "budget_spent"):
        raise refused("awaiting_approval", f"step {waiting} waits for an approval; {kind} "
                      "is not accepted meanwhile", step_id=waiting)
    _APPLY[kind](goal, state, event, now)
    state["version"] += 1
    goal["updated_at"] = format_time(now)
    _budget(state, kind, now)
    goal["status"] = _status(state)
    return out


def _check_link(event: dict[str, Any], approvals: Mapping[str, str]) -> None:
    """An approval recorded in a run is a decision of the key table, never a claim."""
    known = approvals.get(event["approval_id"])
    if known == "consumed" and event["decision"] == "approved":
        raise refused("approval_spent", f"approval {event['approval_id']} was spent already: "
                      "an approval releases the run that records it before it is spent, and "
                      "no other; request a new one for this run")
    if known is None:
        raise refused("approval_unknown", f"no approval {event['approval_id']!r} in the key "
                      "table: request it (`gitstate approvals`) and record its decision")
    if known != event["decision"]:
        raise refused("approval_mismatch", f"approval {event['approval_id']} stands at "
                      f"{known}, not {event['decision']}", decision=known)


def _steps_planned(goal: dict[str, Any], state: dict[str, Any], e: dict[str, Any],
                   now: datetime) -> None:
    for step in e["steps"]:
        if step["step_id"] not in state["pending_steps"] and \
                step["step_id"] not in state["completed_steps"]:
            state["pending_steps"].append(step["step_id"])
        if step["side_effect"] and step["step_id"] not in state["side_effect_steps"]:
            state["side_effect_steps"].append(step["step_id"])


def _step_started(goal: dict[str, Any], state: dict[str, Any], e: dict[str, Any],
                  now: datetime) -> None:
    step = e["step_id"]
    if step in state["completed_steps"]:
        raise refused("step_done", f"step {step} is completed already")
    state["current_step"] = step
    if step in state["pending_steps"]:
        state["pending_steps"].remove(step)
    side = e.get("side_effect", False) or step in state["side_effect_steps"]
    if side and goal["risk_class"] in ("high", "critical"):
        state["awaiting_approval"] = step
        state["stop_reason"] = "approval_required"


def _step_completed(goal: dict[str, Any], state: dict[str, Any], e: dict[str, Any],
                    now: datetime) -> None:
    step = e["step_id"]
    if state["current_step"] != step:
        raise refused("not_current", f"step {step} is not the current step "
                      f"({state['current_step']})")
    state["completed_steps"].append(step)
    state["current_step"] = None


def _tool_result(goal: dict[str, Any], state: dict[str, Any], e: dict[str, Any],
                 now: datetime) -> None:
    ref, observed = e["evidence_ref"], format_time(parse_time(e["observed_at"]))
    known = state["evidence_times"].get(ref)
    if known is not None and parse_time(observed) < parse_time(known):
        raise refused("stale", f"a result for {ref} observed at {observed} is older than the "
                      f"evidence recorded for it ({known})", evidence_ref=ref)
    if e["tool_call_id"] in state["tool_result_refs"]:
        raise refused("duplicate", f"tool call {e['tool_call_id']} is recorded already")
    state["tool_result_refs"].append(e["tool_call_id"])
    if ref not in state["evidence_refs"]:
        state["evidence_refs"].append(ref)
    state["evidence_times"][ref] = observed


def _approval(goal: dict[str, Any], state: dict[str, Any], e: dict[str, Any],
              now: datetime) -> None:
    decision = e["decision"]
    if decision not in ("approved", "denied", "expired"):
        raise refused("invalid", "approval_recorded.decision must be approved, denied or "
                      "expired")
    state["approval_refs"].append(e["approval_id"])
    if decision == "approved":
        state["awaiting_approval"] = None
        state["stop_reason"] = None
    elif decision == "denied":
        state["awaiting_approval"] = None
        state["stop_reason"] = "blocked"
    else:  # expired: ask again
        state["stop_reason"] = "approval_required"


def _question_opened(goal: dict[str, Any], state: dict[str, Any], e: dict[str, Any],
                     now: datetime) -> None:
    if e["question"] not in state["open_questions"]:
        state["open_questions"].append(e["question"])


def _question_answered(goal: dict[str, Any], state: dict[str, Any], e: dict[str, Any],
                       now: datetime) -> None:
    if e["question"] not in state["open_questions"]:
        raise refused("no_question", "that question is not open")
    state["open_questions"].remove(e["question"])
    if e["evidence_ref"] not in state["evidence_refs"]:
        state["evidence_refs"].append(e["evidence_ref"])
    if state["stop_reason"] == "blocked" and not state["open_questions"] and \
            state["awaiting_approval"] is None:
        state["stop_reason"] = None


def _blocked(goal: dict[str, Any], state: dict[str, Any], e: dict[str, Any],
             now: datetime) -> None:
    state["stop_reason"] = "blocked"
    if e["reason"] not in state["open_questions"]:
        state["open_questions"].append(e["reason"])


def _budget_spent(goal: dict[str, Any], state: dict[str, Any], e: dict[str, Any],
                  now: datetime) -> None:
    budget = state["budget_state"]
    budget["iteration_count"] += e.get("iterations", 0)
    budget["token_estimate"] += e.get("tokens", 0)
    budget["cost_cents"] += e.get("cost_cents", 0)


def _completed(goal: dict[str, Any], state: dict[str, Any], e: dict[str, Any],
               now: datetime) -> None:
    given = e["criteria_evidence"]
    missing = [c for c in goal["success_criteria"]
               if c not in given or given[c] not in state["evidence_refs"]]
    if missing:
        raise refused("criteria_unmet", f"{len(missing)} success criteria have no recorded "
                      f"evidence: {'; '.join(missing)}", unmet=missing)
    state["criteria_evidence"] = dict(given)
    state["result_ref"] = e["result_ref"]
    state["stop_reason"] = "success"


def _cancelled(goal: dict[str, Any], state: dict[str, Any], e: dict[str, Any],
               now: datetime) -> None:
    state["stop_reason"] = "cancelled"


def _failed(goal: dict[str, Any], state: dict[str, Any], e: dict[str, Any],
            now: datetime) -> None:
    state["stop_reason"] = "failed"


_APPLY = {"steps_planned": _steps_planned, "step_started": _step_started,
          "step_completed": _step_completed, "tool_result_recorded": _tool_result,
          "approval_recorded": _approval, "question_opened": _question_opened,
          "question_answered": _question_answered, "blocked": _blocked,
          "budget_spent": _budget_spent, "completed": _completed, "cancelled": _cancelled,
          "failed": _failed}


def _budget(state: dict[str, Any], kind: str, now: datetime) -> None:
    """A budget crossed stops the run, naming the event that crossed it."""
    if state["stop_reason"] in STOPPED:
        return
    b = state["budget_state"]
    crossed = [name for name, used, cap in (
        ("iterations", b["iteration_count"], b["max_iterations"]),
        ("tokens", b["token_estimate"], b["max_tokens"]),
        ("cost", b["cost_cents"], b["max_cost_cents"])) if cap is not None and used > cap]
    if b["deadline_at"] is not None and now > parse_time(b["deadline_at"]):
        crossed.append("deadline")
    if crossed:
        state["stop_reason"] = "budget_exhausted"
        state["stop_event"] = {"type": kind, "version": state["version"], "crossed": crossed}


def _status(state: dict[str, Any]) -> str:
    return {"success": "completed", "cancelled": "cancelled", "failed": "failed",
            "budget_exhausted": "failed", "blocked": "blocked",
            "approval_required": "waiting_for_approval"}.get(state["stop_reason"] or "",
                                                              "active")


def next_action(run: dict[str, Any], now: datetime) -> dict[str, Any]:
    """What the runtime does next: continue, retry, ask_approval, escalate or stop."""
    state, goal = run["state"], run["goal"]
    stop = state["stop_reason"]
    if stop in STOPPED:
        return {"action": "stop", "reason": stop}
    deadline = state["budget_state"]["deadline_at"]
    if deadline is not None and now > parse_time(deadline):  # stopped by the next event
        return {"action": "stop", "reason": f"the deadline {deadline} has passed"}
    if stop == "approval_required":
        return {"action": "ask_approval", "reason": f"step {state['awaiting_approval']} has a "
                "side effect and the goal's risk is " + goal["risk_class"]}
    if stop == "blocked":
        return {"action": "escalate", "reason": "blocked: " + "; ".join(
            state["open_questions"]) if state["open_questions"] else "blocked"}
    if state["current_step"] is not None:
        return {"action": "continue", "reason": f"step {state['current_step']} is running"}
    if state["pending_steps"]:
        return {"action": "continue", "reason": f"next step: {state['pending_steps'][0]}"}
    unmet = [c for c in goal["success_criteria"] if c not in state["criteria_evidence"]]
    return {"action": "continue", "reason": "no steps planned; criteria unmet: "
            + "; ".join(unmet)}
