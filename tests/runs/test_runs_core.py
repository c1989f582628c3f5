"""The pure core of run ledgers (gitstate/runs/model.py): strict events, the transition function,
the rules the runtime enforces, and the next action. Seed 003's evals, at the level of the
state machine (storage on refs comes on top of it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gitstate.core.errors import InvalidInput
from gitstate.runs.model import apply_event, new_run, next_action
from gitstate.runs.validate import RunRefused, check_run_id

NOW = datetime(2026, 8, 13, 1, 0, tzinfo=UTC)


def _run(risk: str = "low", **budget: Any) -> dict[str, Any]:
    return new_run("refund-O-104", description="refund order O-104",
                   criteria=["refund issued", "customer notified"],
                   constraints=["at most 120 TWD"], risk=risk, owner="support",
                   now=NOW, budget=budget)


def _apply(run: dict[str, Any], writer: str = "runtime", **event: Any) -> dict[str, Any]:
    return apply_event(run, event, writer, NOW)


def test_a_run_completes_only_with_evidence_for_every_criterion() -> None:
    run = _apply(_run(), type="steps_planned", steps=[{"step_id": "pay"},
                                                       {"step_id": "notify"}])
    run = _apply(run, "agent", type="step_started", step_id="pay", description="pay back")
    run = _apply(run, type="tool_result_recorded", tool_call_id="c1",
                 evidence_ref="payment:P-9", observed_at="2026-08-13T01:01:00Z")
    with pytest.raises(RunRefused) as exc:
        _apply(run, "agent", type="completed", result_ref="payment:P-9",
               criteria_evidence={"refund issued": "payment:P-9"})
    assert exc.value.rule == "run.criteria_unmet"
    assert exc.value.details["unmet"] == ["customer notified"]
    with pytest.raises(RunRefused):  # evidence that was never recorded does not count
        _apply(run, "agent", type="completed", result_ref="x", criteria_evidence={
            "refund issued": "payment:P-9", "customer notified": "mail:M-1"})
    run = _apply(run, type="tool_result_recorded", tool_call_id="c2", evidence_ref="mail:M-1",
                 observed_at="2026-08-13T01:02:00Z")
    done = _apply(run, "agent", type="completed", result_ref="payment:P-9", criteria_evidence={
        "refund issued": "payment:P-9", "customer notified": "mail:M-1"})
    assert done["state"]["stop_reason"] == "success" and done["goal"]["status"] == "completed"
    assert next_action(done, NOW) == {"action": "stop", "reason": "success"}
    assert run["state"]["stop_reason"] is None  # apply_event never changes its input
    with pytest.raises(RunRefused) as exc:
        _apply(done, "agent", type="step_started", step_id="more", description="x")
    assert exc.value.rule == "run.stopped"


def test_events_are_strict() -> None:
    run = _run()
    for event, rule in (({"type": "format_disk"}, "run.unknown_event"),
                        ({"type": "blocked"}, "run.invalid"),
                        ({"type": "blocked", "reason": "x", "extra": 1}, "run.invalid"),
                        ({"type": "budget_spent", "tokens": -1}, "run.invalid"),
                        ({"type": "budget_spent", "tokens": True}, "run.invalid"),
                        ({"type": "blocked", "reason": "two\nlines"}, "value.control"),
                        ({"type": "approval_recorded", "approval_id": "a",
                          "decision": "maybe"}, "run.invalid"),
                        ("not an object", "run.invalid")):
        with pytest.raises((RunRefused, InvalidInput)) as exc:
            apply_event(run, event, "runtime", NOW)  # type: ignore[arg-type]
        assert exc.value.rule == rule, (event, exc.value)


def test_writers_per_event_type() -> None:
    run = _run()
    for kind, event in (("tool_result_recorded", {"tool_call_id": "c", "evidence_ref": "e",
                                                  "observed_at": "2026-08-13T01:00:00Z"}),
                        ("budget_spent", {"tokens": 10}), ("failed", {"reason": "x"}),
                        ("cancelled", {"reason": "x"}),
                        ("approval_recorded", {"approval_id": "a", "decision": "approved"})):
        with pytest.raises(RunRefused) as exc:
            apply_event(run, {"type": kind, **event}, "agent", NOW)
        assert exc.value.rule == "run.writer"
    with pytest.raises(RunRefused):
        apply_event(run, {"type": "budget_spent", "tokens": 1}, "human", NOW)
    assert apply_event(run, {"type": "cancelled", "reason": "x"}, "human",
                       NOW)["state"]["stop_reason"] == "cancelled"


def test_cancellation_stops_the_run() -> None:
    run = _apply(_run(), type="cancelled", reason="customer withdrew")
    assert run["goal"]["status"] == "cancelled"
    for event in ({"type": "step_started", "step_id": "pay", "description": "x"},
                  {"type": "cancelled", "reason": "again"}):
        with pytest.raises(RunRefused) as exc:
            apply_event(run, event, "runtime", NOW)
        assert exc.value.rule == "run.stopped"


def test_a_crossed_budget_records_its_stop_reason_and_event() -> None:
    run = _apply(_run(max_tokens=1000), type="budget_spent", tokens=600)
    assert run["state"]["stop_reason"] is None
    run = _apply(run, type="budget_spent", tokens=600, iterations=1)
    assert run["state"]["stop_reason"] == "budget_exhausted"
    assert run["state"]["stop_event"] == {"type": "budget_spent", "version": 3,
                                          "crossed": ["tokens"]}
    assert next_action(run, NOW)["action"] == "stop"
    late = new_run("r2", description="d", criteria=["c"], constraints=[], risk="low",
                   owner="o", now=NOW, budget={"deadline_at": "2026-08-13T02:00:00Z"})
    after = apply_event(late, {"type": "question_opened", "question": "q?"}, "agent",
                        NOW + timedelta(hours=2))
    assert after["state"]["stop_reason"] == "budget_exhausted"
    assert after["state"]["stop_event"]["crossed"] == ["deadline"]
    # no event since the deadline passed: the next action is to stop all the same
    assert next_action(late, NOW + timedelta(minutes=59))["action"] == "continue"
    passed = next_action(late, NOW + timedelta(hours=2))
    assert passed["action"] == "stop" and "deadline" in passed["reason"]


def test_a_side_effecting_step_at_high_risk_waits_for_an_approval() -> None:
    run = _apply(_run("high"), type="steps_planned", steps=[
        {"step_id": "lookup"}, {"step_id": "pay", "side_effect": True}])
    run = _apply(run, "agent", type="step_started", step_id="lookup", description="read")
    run = _apply(run, type="step_completed", step_id="lookup")
    assert next_action(run, NOW)["action"] == "continue"
    run = _apply(run, "agent", type="step_started", step_id="pay", description="pay 120")
    assert run["goal"]["status"] == "waiting_for_approval"
    assert next_action(run, NOW)["action"] == "ask_approval"
    with pytest.raises(RunRefused) as exc:  # nothing moves while it waits
        _apply(run, type="tool_result_recorded", tool_call_id="c", evidence_ref="e",
               observed_at="2026-08-13T01:00:00Z")
    assert exc.value.rule == "run.awaiting_approval"
    expired = _apply(run, type="approval_recorded", approval_id="a1", decision="expired")
    assert expired["state"]["stop_reason"] == "approval_required"  # ask again
    approved = _apply(expired, "human", type="approval_recorded", approval_id="a2",
                      decision="approved")
    assert approved["goal"]["status"] == "active" and approved["state"]["approval_refs"] == [
        "a1", "a2"]
    denied = _apply(run, type="approval_recorded", approval_id="a3", decision="denied")
    assert denied["goal"]["status"] == "blocked"
    assert next_action(denied, NOW)["action"] == "escalate"
    low = _apply(_run("low"), "agent", type="step_started", step_id="pay",
                 description="x", side_effect=True)
    assert low["state"]["stop_reason"] is None  # low risk: no approval needed


def test_a_stale_tool_result_loses_to_fresher_evidence() -> None:
    run = _apply(_run(), type="tool_result_recorded", tool_call_id="c2",
                 evidence_ref="order:O-104", observed_at="2026-08-13T01:05:00Z")
    with pytest.raises(RunRefused) as exc:
        _apply(run, type="tool_result_recorded", tool_call_id="c1",
               evidence_ref="order:O-104", observed_at="2026-08-13T01:04:00Z")
    assert exc.value.rule == "run.stale"
    fresher = _apply(run, type="tool_result_recorded", tool_call_id="c3",
                     evidence_ref="order:O-104", observed_at="2026-08-13T01:06:00Z")
    assert fresher["state"]["evidence_times"]["order:O-104"] == "2026-08-13T01:06:00Z"


def test_a_blocked_run_keeps_its_questions_and_answers_need_evidence() -> None:
    run = _apply(_run(), "agent", type="question_opened", question="which account?")
    run = _apply(run, "agent", type="blocked", reason="the account is unknown")
    assert run["state"]["open_questions"] == ["which account?", "the account is unknown"]
    assert next_action(run, NOW)["action"] == "escalate"
    with pytest.raises(RunRefused) as exc:
        _apply(run, "agent", type="step_started", step_id="pay", description="x")
    assert exc.value.rule == "run.blocked"
    with pytest.raises(RunRefused):  # an answer carries its evidence
        apply_event(run, {"type": "question_answered", "question": "which account?"},
                    "agent", NOW)
    run = _apply(run, "agent", type="question_answered", question="which account?",
                 evidence_ref="crm:C-7")
    run = _apply(run, "agent", type="question_answered", question="the account is unknown",
                 evidence_ref="crm:C-7")
    assert run["state"]["stop_reason"] is None and run["state"]["open_questions"] == []
    assert "crm:C-7" in run["state"]["evidence_refs"]


def test_replay_is_deterministic() -> None:
    """Folding the same events from goal_created gives the same run, every time."""
    events = [("runtime", {"type": "steps_planned", "steps": [{"step_id": "a"}]}),
              ("agent", {"type": "step_started", "step_id": "a", "description": "A"}),
              ("runtime", {"type": "budget_spent", "iterations": 1, "tokens": 50}),
              ("runtime", {"type": "step_completed", "step_id": "a"})]

    def fold() -> dict[str, Any]:
        run = _run()
        for writer, event in events:
            run = apply_event(run, event, writer, NOW)
        return run

    assert fold() == fold() and fold()["state"]["version"] == 5


def test_run_ids() -> None:
    for bad in ("", "../x", "a..b", "x.lock", "-x", "a b", "x" * 65, "ü"):
        with pytest.raises(RunRefused):
            check_run_id(bad)
    assert check_run_id("refund-O-104") == "refund-O-104"
