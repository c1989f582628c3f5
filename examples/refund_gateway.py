"""A gateway for the refund flow: it advertises only the tools the phase allows, and its
parser refuses an illegal call even if the model emits it anyway (defense in depth).

The model proposes; the runtime's observation functions move the phase. Runs offline with a
scripted stand-in model:

    python examples/refund_gateway.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from gitstate import State, StateRepo

SCHEMA = Path(__file__).with_name("schemas") / "refund.yaml"


def on_get_ticket(state: State, payload: dict[str, Any]) -> dict[str, Any]:
    """A ticket observed ready moves gather -> apply; either way the id is held."""
    updates: dict[str, Any] = {"ticket_id": payload["ticket_id"]}
    if payload.get("ready"):
        updates["phase"] = "apply"
    return updates


def on_refund(state: State, payload: dict[str, Any]) -> dict[str, Any]:
    return {"phase": "done"} if payload.get("ok") else {}


class Gateway:
    def __init__(self, repo: StateRepo) -> None:
        self.repo = repo
        repo.register_observation("get_ticket", on_get_ticket)
        repo.register_observation("refund", on_refund)

    def advertised(self) -> list[str]:
        """The assembler: only the tools legal in the current phase."""
        return self.repo.allowed_tools() or []

    def handle(self, tool: str, args: dict[str, Any]) -> str:
        """The parser: refuse what the phase does not allow, then run the tool."""
        if not self.repo.can_run(tool):
            return f"illegal_in_phase: {tool}"
        if tool == "get_ticket":
            self.repo.apply_observation("get_ticket", {"ticket_id": args["id"], "ready": True})
            return f"ticket {args['id']} ready"
        if tool == "refund":
            self.repo.apply_observation("refund", {"ok": True})
            return "refunded"
        return f"{tool} ok"


def run(agent_dir: Path) -> list[str]:
    with StateRepo.init(agent_dir) as repo:
        repo.set_schema(SCHEMA.read_text(encoding="utf-8"), "refund flow schema")
        gateway = Gateway(repo)
        log = []
        # The stand-in model: tries to refund at once, then does it properly, then lingers.
        for tool, args in [("refund", {}), ("get_ticket", {"id": "T1"}), ("refund", {}),
                           ("search", {"q": "anything else?"}), ("finish", {})]:
            offered = gateway.advertised()
            log.append(f"phase={repo.get().phase} offered={offered} call={tool} -> "
                       f"{gateway.handle(tool, args)}")
        return log


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "agent"
    print("\n".join(run(target)))
