"""Seed 003's refund case end to end: order O-104, risk high, an approval before paying.

The run ledger (refs/heads/runs/refund-O-104) is the run's working memory: every step, tool
result, question and approval is one commit, applied by the runtime; the model only
proposes (here a scripted stand-in, writing as the agent). The payment is a side-effecting
step of a high-risk goal, so the run waits for the key table's frozen-argument approval,
across a restart of the gateway, and the gateway spends it (``spend_approval``) before it
pays. At the end the outcome is promoted to the durable key table
(schema.yaml allows it for refund.*, by the runtime), citing the run. Runs offline:

    python examples/refund_run.py [AGENT_DIR]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from gitstate import GitStateError, StateRepo

SCHEMA = Path(__file__).with_name("schemas") / "refund_run.yaml"
RUN = "refund-O-104"
ARGS = {"order": "O-104", "amount_cents": 12000}
CRITERIA = ["order O-104 is eligible for a refund", "a refund of 120.00 was issued"]


def say(text: str) -> None:
    print(text, flush=True)


def event(repo: StateRepo, body: dict[str, Any], reason: str, **kw: str) -> None:
    view = repo.runs.event(RUN, body, reason, **kw)
    say(f"  {body['type']:<22} -> {view.goal['status']:<20} next: {view.next['action']}")


def refused(repo: StateRepo, body: dict[str, Any], reason: str, **kw: str) -> None:
    try:
        repo.runs.event(RUN, body, reason, **kw)
    except GitStateError as exc:
        say(f"  {body['type']:<22} refused [{exc.rule}]")
        return
    raise SystemExit(f"{body['type']} should have been refused")


def pay(order: str, amount_cents: int) -> str:
    """The payment provider's stand-in: the refund's reference."""
    return "refund:R-9"


def main(agent_dir: Path) -> int:
    runtime = StateRepo.init(agent_dir, writer="runtime", actor="refund-gateway")
    runtime.set_schema(SCHEMA.read_text(encoding="utf-8"), "refunds: approvals and runs")
    say(f"run {RUN}: start (risk high)")
    runtime.runs.start(RUN, description="refund order O-104", criteria=CRITERIA, risk="high",
                       budget={"max_iterations": 10, "max_cost_cents": 500},
                       reason="the customer asked for a refund of order O-104")
    event(runtime, {"type": "steps_planned", "steps": [
        {"step_id": "lookup"}, {"step_id": "pay", "side_effect": True},
        {"step_id": "notify"}]}, "plan: look the order up, pay, tell the customer")
    event(runtime, {"type": "step_started", "step_id": "lookup",
                    "description": "read order O-104"}, "the model proposes the lookup",
          writer="agent")
    event(runtime, {"type": "tool_result_recorded", "tool_call_id": "call-1",
                    "evidence_ref": "order:O-104", "observed_at": "2026-12-01T09:00:00Z"},
          "get_order returned O-104: delivered, 120.00, within the window")
    refused(runtime, {"type": "tool_result_recorded", "tool_call_id": "call-0",
                      "evidence_ref": "order:O-104", "observed_at": "2026-12-01T08:00:00Z"},
            "a cached read from before")
    event(runtime, {"type": "step_completed", "step_id": "lookup"}, "lookup done")
    event(runtime, {"type": "budget_spent", "iterations": 1, "cost_cents": 40}, "one turn")
    event(runtime, {"type": "step_started", "step_id": "pay",
                    "description": "refund 120.00 to the card"}, "the model proposes paying",
          writer="agent")
    approval = runtime.approvals.request("refund", ARGS, "refund O-104: 120.00")
    say(f"  approval {approval} requested; the gateway restarts while it waits")
    runtime.close()

    gateway = StateRepo(agent_dir, writer="runtime", actor="refund-gateway")
    view = gateway.runs.read(RUN)
    say(f"after the restart: {view.goal['status']}, next {view.next['action']}")
    refused(gateway, {"type": "step_completed", "step_id": "pay"}, "pay without approval")
    with StateRepo(agent_dir, writer="human", actor="supervisor") as human:
        human.approvals.approve(approval, "checked the order and the amount")
    event(gateway, {"type": "approval_recorded", "approval_id": approval,
                    "decision": "approved"}, "the supervisor approved the refund")
    # spent before the provider is called: a second gateway would be refused here, and a
    # provider that raised would leave a tool_result_recorded of the failure in the run
    with gateway.approvals.spend(approval, "refund", ARGS, run_id=RUN,
                                tool_call_id="call-2", reason="refund O-104 runs") as call:
        say(f"  approval {call.approval_id} spent in {call.commit[:12]}; paying once")
        refund_ref = pay(**call.args)
    event(gateway, {"type": "tool_result_recorded", "tool_call_id": "call-2",
                    "evidence_ref": refund_ref, "observed_at": "2026-12-01T09:05:00Z"},
          "refund R-9 issued: 120.00")
    event(gateway, {"type": "step_completed", "step_id": "pay"}, "paid")
    completion: dict[str, Any] = {
        "type": "completed", "result_ref": "refund:R-9",
        "criteria_evidence": {CRITERIA[0]: "order:O-104", CRITERIA[1]: "refund:R-9"}}
    refused(gateway, completion, "the model says it is done", writer="agent")
    event(gateway, completion, "both criteria have evidence")
    promoted = gateway.runs.promote(RUN, "refund.O-104", "refunded", "O-104 refunded by run "
                               + RUN, evidence="refund:R-9")
    say(f"promoted refund.O-104 = refunded at {promoted.commit[:12]}")
    problems = gateway.runs.verify(RUN)
    say("verify: " + ("the ledger replays exactly" if not problems else "; ".join(problems)))
    say("stats: " + json.dumps(gateway.runs.stats(), sort_keys=True))
    gateway.close()
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory() as tmp:
        sys.exit(main(Path(tmp) / "agent"))
