"""A gateway loop: render the section at each wake-up and put it at the tail of the prompt.

Runs offline with a stand-in model, replaying a patrol day: the strategy wake-up sets the
stop-loss through the tools, later patrols read it from the injected section (not from the
stale note), and one patrol that tries to replace it with a stale expected value is refused.

    python examples/gateway_loop.py [AGENT_DIR]
"""

from __future__ import annotations

import re
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gitstate import UNSET, GitStateError, StateRepo, section

BASE_PROMPT = "You are the trading employee. Patrol the 2317 position."
STALE_NOTE = "journal 08-12: stop-loss 250 (-5% per strategy document)"


@dataclass
class ToolCall:
    tool: str
    args: dict[str, object]


def stand_in_model(prompt: str, wake: int) -> list[ToolCall]:
    """A deterministic stand-in for the model: it trusts the section's line when present."""
    match = re.search(r"^- stop_loss\.2317 = (\d+)", prompt, re.MULTILINE)
    if wake == 0:
        return [ToolCall("working_state_set", {"key": "stop_loss.2317", "value": 262,
                                               "reason": "跌破即出場不猶豫", "ttl_hours": 4.5})]
    if wake == 2:  # a confused patrol acting on the stale journal
        return [ToolCall("working_state_set", {"key": "stop_loss.2317", "value": 254,
                                               "reason": "-5%", "expected_value": 250})]
    if match:
        return [ToolCall("working_state_handoff", {"note": f"patrol {wake}: stop {match[1]} "
                                                           "holds"})]
    return []


def build_prompt(agent_dir: Path, now: datetime) -> str:
    """Notes first, the authoritative section last (the dynamic tail of the prompt)."""
    text, _ = section(agent_dir, now=now)
    return "\n\n".join(part for part in (BASE_PROMPT, STALE_NOTE, text) if part)


def run(agent_dir: Path, wakes: int = 4) -> list[str]:
    """Run the loop; returns a log of what happened at each wake-up."""
    start = datetime(2026, 8, 13, 1, 4, tzinfo=UTC)
    clock = {"now": start}
    log = []
    with StateRepo.init(agent_dir, actor="agent", clock=lambda: clock["now"]) as repo:
        for wake in range(wakes):
            clock["now"] = start + timedelta(minutes=30 * wake)
            prompt = build_prompt(agent_dir, clock["now"])
            for call in stand_in_model(prompt, wake):
                try:
                    a = call.args
                    if call.tool == "working_state_set":
                        repo.set(str(a["key"]), a["value"], str(a["reason"]),  # type: ignore[arg-type]
                                 ttl_hours=a.get("ttl_hours"),  # type: ignore[arg-type]
                                 expected=a.get("expected_value", UNSET))
                    else:
                        repo.handoff(str(a["note"]))
                    log.append(f"wake {wake}: {call.tool} ok")
                except GitStateError as exc:
                    log.append(f"wake {wake}: {call.tool} refused [{exc.rule}]")
    return log


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "agent"
    for line in run(target):
        print(line)
    print(build_prompt(target, datetime(2026, 8, 13, 3, 3, tzinfo=UTC)))
