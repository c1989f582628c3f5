"""An approval step recorded by a commit from elsewhere, planned again by this machine.

The acceptance rule for foreign commits (gitstate/accept/main.py, gitstate/accept/rederive.py)
accepts a commit carrying a ``Gitstate-Approval`` step only when the plan made here, by the
very planners a local step goes through (gitstate/approvals/steps.py), at the commit's
parent and time, makes the change the commit records. What this module owns is reading the
recorded value back into those planners' arguments: which step, which call, the decider's
``decided_on``, and the fields an older gitstate did not write.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.errors import InvalidInput
from ..core.layout import is_commit_id
from ..core.model import State
from ..history.approvals import Finished
from ..write.planners import Base, Plan
from .steps import plan_consume, plan_decide, plan_outcome, plan_request_for


def replan(base: Base, key: str, step: str, recorded: Any, *, reason: str,
           actor: str, state_at: Callable[[str], State] | None = None,
           finished: Finished | None = None, retire: bool = True) -> Plan:
    """The plan this machine's own planners make for an approval step a commit from
    elsewhere records (``Gitstate-Approval: step`` on ``key``, its value ``recorded``), at
    the commit's parent and time. The one rule (gitstate/accept/main.py) accepts the commit only
    when this plan's change is the commit's; a step no planner would make here is refused
    with the planner's own rule (expired, decided, not runnable, not required).

    The writer role is not part of a commit on main: a decision is re-derived as by a writer
    its policy names, and who may claim that role is the trust rules' business. A spend
    goes through the same ``void_if_changed`` check as a local one (``state_at``: the
    reader of main's state at a commit); a consume record without ``consumed_by`` (written
    by a gitstate from before that field) is planned without it. ``finished`` reads a
    retired record back from the history; ``retire`` False plans a step as a gitstate from
    before retirement wrote it (the record stays in the state)."""
    if not isinstance(recorded, dict):
        raise InvalidInput(f"{key}: not an approval record", rule="approval.invalid")
    policies = dict(base.schema.approvals) if base.schema else {}
    if step == "request":
        if not isinstance(recorded.get("tool"), str) or not isinstance(recorded.get("args"),
                                                                       dict):
            raise InvalidInput(f"{key}: a request freezes a tool and its arguments",
                               rule="approval.invalid")
        return plan_request_for(base, tool=recorded["tool"], args=recorded["args"],
                                reason=reason, actor=actor, retire=retire)
    if step in ("approve", "deny"):
        policy = policies.get(str(recorded.get("tool")))
        writer = policy.writers[0] if policy and policy.writers else "human"
        # the commit the decider saw stays what it was when a push re-applies the decision
        # on a newer parent; a record without one (an older gitstate's) is planned without
        seen = recorded.get("decided_on")
        if seen is not None and not is_commit_id(seen):
            raise InvalidInput(f"{key}: decided_on must be a commit id",
                               rule="approval.invalid")
        return plan_decide(base, policies, writer, approval_id=key, approve=step == "approve",
                           reason=reason, actor=actor, decided_on=seen,
                           record_commit="decided_on" in recorded, finished=finished,
                           retire=retire)
    if step == "consume":
        return plan_consume(base, approval_id=key, tool=None, args=None, reason=reason,
                            actor=actor, state_at=state_at, finished=finished, retire=retire,
                            record_consumer="consumed_by" in recorded)
    if step == "outcome":
        error = recorded.get("error")
        if not isinstance(error, str):
            raise InvalidInput(f"{key}: an outcome records the call's error",
                               rule="approval.invalid")
        return plan_outcome(base, approval_id=key, error=error, reason=reason, actor=actor,
                            finished=finished, retire=retire)
    raise InvalidInput(f"{key}: {step!r} is not an approval step", rule="approval.invalid")
