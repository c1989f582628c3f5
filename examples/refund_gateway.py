"""A gateway for seed 004's refund flow: phases with tool allowlists, checked facts as one
structured value, and a refund that runs only with a human's approval of its exact
arguments (frozen-argument approval).

The model proposes; the runtime owns every transition: observation functions move the
phase, the gateway requests approvals, a human decides, and the gateway spends the approval
before the refund runs: ``with repo.approvals.spend(...) as call:`` hands the frozen call
over only once the spend is committed, so a second gateway that read the same approval is
refused before it pays. The approval lives in the state repository, so it survives a
restart of the gateway between the approval and the run. Runs offline with a scripted
stand-in model:

    python examples/refund_gateway.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from gitstate import Refused, State, StateRepo

SCHEMA = Path(__file__).with_name("schemas") / "refund.yaml"


def on_get_ticket(state: State, payload: dict[str, Any]) -> dict[str, Any]:
    """A ticket observed ready moves gather -> apply, with the facts policy code checked."""
    updates: dict[str, Any] = {"ticket_id": payload["ticket_id"]}
    if payload.get("ready"):
        updates["phase"] = "apply"
        updates["facts"] = {"window_ok": True, "customer_verified": True,
                            "max_refund": payload["max_refund"]}
    return updates


def on_refund(state: State, payload: dict[str, Any]) -> dict[str, Any]:
    return {"phase": "done"} if payload.get("ok") else {}


class Gateway:
    """The assembler (what the model is offered) and the parser (what it may run)."""

    def __init__(self, repo: StateRepo) -> None:
        self.repo = repo
        repo.observations.register("get_ticket", on_get_ticket)
        repo.observations.register("refund", on_refund)

    def advertised(self) -> list[str]:
        return self.repo.allowed_tools() or []

    def handle(self, tool: str, args: dict[str, Any]) -> str:
        if tool not in (self.repo.allowed_tools() or [tool]):
            return f"illegal_in_phase: {tool}"
        if tool == "get_ticket":
            self.repo.observations.apply("get_ticket", {"ticket_id": args["id"], "ready": True,
                                                       "max_refund": 200})
            return f"ticket {args['id']} ready"
        if tool == "refund":
            return self.refund(args)
        return f"{tool} ok"

    def refund(self, args: dict[str, Any]) -> str:
        # advisory: which approval to spend, or what to tell the model; it decides nothing
        verdict = self.repo.approvals.verdict("refund", args)
        if verdict.ok:
            assert verdict.approval_id is not None
            return self.spend(verdict.approval_id, args)
        if "argument changed" in verdict.reason or "pending" in verdict.reason:
            return f"refused: {verdict.reason}"
        approval = self.repo.approvals.request("refund", args, "the model asked for a refund")
        return f"waiting_for_approval: {approval}"

    def spend(self, approval_id: str, args: dict[str, Any]) -> str:
        try:
            with self.repo.approvals.spend(approval_id, "refund", args) as call:
                receipt = pay(**call.args)  # the payment provider, with the frozen arguments
        except Refused as exc:  # another gateway spent it first: this one never paid
            return f"refused [{exc.rule}]: {exc.message}"
        self.repo.observations.apply("refund", {"ok": True})
        return f"refunded {call.args['amount']} (approval {call.approval_id}, {receipt})"


def pay(ticket: str, amount: int) -> str:
    """The payment provider's stand-in. If it raised, spend_approval would record the
    failure as the approval's outcome, and the approval would stay spent."""
    return f"receipt R-{ticket}-{amount}"


def run(agent_dir: Path) -> list[str]:
    log: list[str] = []

    def step(gateway: Gateway, tool: str, args: dict[str, Any]) -> None:
        offered = gateway.advertised()
        log.append(f"phase={gateway.repo.get().phase} offered={offered} call={tool} -> "
                   f"{gateway.handle(tool, args)}")

    refund = {"ticket": "T1", "amount": 120}
    with StateRepo.init(agent_dir) as repo:
        repo.set_schema(SCHEMA.read_text(encoding="utf-8"), "refund flow schema")
        gateway = Gateway(repo)
        step(gateway, "refund", refund)  # too early: gather has no refund tool
        step(gateway, "get_ticket", {"id": "T1"})
        step(gateway, "refund", refund)  # needs a human: an approval is requested
        approval = repo.approvals.list()[0]["id"]
    # the gateway restarts; meanwhile a human approves (gitstate approve ID --reason ...)
    with StateRepo(agent_dir, writer="human") as human:
        human.approvals.approve(approval, "ticket T1 checked; 120 is within policy")
    with StateRepo(agent_dir) as repo, StateRepo(agent_dir) as twin_repo:
        gateway, twin = Gateway(repo), Gateway(twin_repo)  # two gateways on one agent
        step(gateway, "refund", {**refund, "amount": 150})  # not what was approved
        seen = twin.repo.approvals.verdict("refund", refund)  # the twin reads: approved
        step(gateway, "refund", refund)  # exactly what was approved: spent, then paid once
        assert seen.approval_id is not None
        log.append(f"twin gateway (it read: {seen.reason}) -> "
                   f"{twin.spend(seen.approval_id, refund)}")
        step(gateway, "search", {"q": "anything else?"})
        step(gateway, "finish", {})
    return log


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "agent"
    print("\n".join(run(target)))
