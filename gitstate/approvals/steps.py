"""Frozen-argument approvals (seed 004's human in the loop): pure planners and checks.

schema.yaml declares which tools need an approval, who may decide, and an optional TTL::

    approvals:
      refund: {writers: [human], ttl_hours: 24}      # writers default to [human]

An approval is one key of the state, ``approval.<id>``, whose structured value freezes the
call: the tool, its arguments in canonical JSON and their sha256, and a status. It moves only
forward, one audited commit per step, each marked by a ``Gitstate-Approval`` trailer::

    request (runtime or agent)  -> pending
    approve / deny (a writer the policy names; never the agent)  -> approved / denied
    consume (the runtime, spending it before the tool runs)  -> consumed
    outcome (the runtime: the call failed after the spend)  -> consumed, with its outcome

The spend is the compare-and-swap (``repo.approvals.spend`` hands the call over only
once its consume commit is written). ``can_run(tool, args)`` is an advisory read: true for a
tool that needs an approval only when an approved, unexpired, unconsumed approval holds
exactly those arguments at the HEAD it read; otherwise the answer says why (none, pending,
denied, expired, consumed, or which argument differs). The approval key carries the TTL as
its expiry, so an expired approval also leaves the rendered section, and the agent sees its
pending approvals there, never able to decide them: an ``approval.*`` key is written only
through these planners (``rules.check_writable``). A denial, a spend and an outcome retire
their record from the key table, a request every expired one (gitstate/history/approvals.py).
A step that a commit from elsewhere records is re-derived with these same planners
(gitstate/approvals/recorded.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from ..core.compare import canonical_text
from ..core.errors import GitStateError, InvalidInput, Refused
from ..core.model import Entry, State, format_time
from ..core.policy import ApprovalPolicy as Policy
from ..core.results import WriteResult
from ..core.trailers import Change, encode_json
from ..core.values import canonical, changes
from ..history.approvals import FINAL_STEPS, RETIRED, Finished, expired_keys, without
from ..write.planners import Base, Plan

PREFIX = "approval."
TRAILER = "Approval"  # Gitstate-Approval: request | approve | deny | consume | outcome
ERROR_MAX_CHARS = 500  # of a failed call's error, in its outcome record


@dataclass(frozen=True)
class Verdict:
    """The answer of ``can_run``: ``ok``, the approval it rests on, and why not."""

    ok: bool
    tool: str
    needs_approval: bool
    approval_id: str | None = None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "tool": self.tool, "needs_approval": self.needs_approval,
                "approval_id": self.approval_id, "reason": self.reason}


def frozen(args: Any) -> tuple[str, str]:
    """The arguments' canonical JSON (key order never matters) and its sha256."""
    text = json.dumps(args, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text, hashlib.sha256(text.encode("utf-8")).hexdigest()


def is_approval_key(key: str) -> bool:
    return key.startswith(PREFIX)


def _record(state: State, approval_id: str,
            finished: Finished | None = None) -> tuple[str, Entry, dict[str, Any]]:
    """The approval's record: in the state, else (``finished``) the one its final step left
    in the history when it was retired (gitstate/history/approvals.py)."""
    key = approval_id if is_approval_key(approval_id) else PREFIX + approval_id
    entry = state.keys.get(key)
    if entry is None and finished is not None:
        entry = finished(key)
    if entry is None or not isinstance(entry.value, dict):
        raise InvalidInput(f"no approval {approval_id!r}", rule="approval.unknown",
                           approval_id=approval_id)
    return key, entry, entry.value


def plan_request(base: Base, policy: Policy, *, tool: str, args: Any, reason: str,
                 actor: str, retire: bool = True) -> Plan:
    """Freeze ``tool(args)`` as a pending approval; the id derives from the call and the
    base commit, so the same request on the same state is the same approval."""
    text, digest = frozen(args)
    approval_id = hashlib.sha256(f"{base.commit}\0{tool}\0{digest}".encode()).hexdigest()[:12]
    key = PREFIX + approval_id
    expires = format_time(base.now + timedelta(hours=policy.ttl_hours)) \
        if policy.ttl_hours else None
    value = {"tool": tool, "args": json.loads(text), "args_sha256": digest,
             "status": "pending", "requested_by": actor, "decided_by": None}
    return _plan(base, key, value, reason, actor, expires, "request",
                 expired_keys(base.state, base.now) if retire else None)


def plan_request_for(base: Base, *, tool: str, args: Any, reason: str, actor: str,
                     retire: bool = True) -> Plan:
    """A request for ``tool``, under the policy the base's schema gives it (refused when
    schema.yaml's ``approvals`` does not name the tool)."""
    policy = (base.schema.approvals if base.schema else {}).get(tool)
    if policy is None:
        raise InvalidInput(f"{tool} needs no approval (schema.yaml's `approvals` does not "
                           "name it)", rule="approval.not_required", tool=tool)
    return plan_request(base, policy, tool=tool, args=args, reason=reason, actor=actor,
                        retire=retire)


def plan_decide(base: Base, policy_for: dict[str, Policy], writer: str, *, approval_id: str,
                approve: bool, reason: str, actor: str, decided_on: str | None = None,
                record_commit: bool = True, finished: Finished | None = None,
                retire: bool = True) -> Plan:
    """Approve or deny a pending approval; the record keeps ``decided_on``, main's commit
    the decision was made on (the base, unless given: a re-applied decision keeps its own).
    A denial retires the record (gitstate/history/approvals.py)."""
    key, entry, value = _record(base.state, approval_id, finished)
    policy = policy_for.get(str(value.get("tool")))
    allowed = policy.writers if policy else ("human",)
    if writer not in allowed:
        raise Refused(f"only {'/'.join(allowed)} may decide approvals of "
                      f"{value.get('tool')!r}, not {writer}", rule="approval.writer",
                      approval_id=key[len(PREFIX):], writer=writer)
    if value.get("status") != "pending":
        raise Refused(f"approval {key[len(PREFIX):]} is {value.get('status')}, not pending",
                      rule="approval.decided", status=value.get("status"))
    if entry.is_expired(base.now):
        raise Refused(f"approval {key[len(PREFIX):]} expired at {entry.expires_at}",
                      rule="approval.expired")
    # decided_on: main's commit the decider saw, for the policy's void_if_changed
    new = {**value, "status": "approved" if approve else "denied", "decided_by": actor}
    if record_commit:
        new["decided_on"] = decided_on or base.commit
    return _plan(base, key, new, reason, actor, entry.expires_at,
                 "approve" if approve else "deny", [key] if retire and not approve else [],
                 entry)


def plan_consume(base: Base, *, approval_id: str, tool: str | None, args: Any, reason: str,
                 actor: str, state_at: Callable[[str], State] | None = None,
                 finished: Finished | None = None, retire: bool = True,
                 record_consumer: bool = True) -> Plan:
    """Spend an approved, unexpired approval; ``tool`` and ``args`` None: the call it froze.
    The spend retires the record (gitstate/history/approvals.py).
    The record names who spent it (``consumed_by``; ``record_consumer`` False: planned as a
    gitstate from before that field wrote it). Given ``state_at`` (a reader of the
    state at a commit), the policy's ``void_if_changed`` keys are compared between the
    commit the decision was made on and the base: one that changed voids the spend."""
    key, entry, value = _record(base.state, approval_id, finished)
    if tool is None:
        tool = str(value.get("tool"))
    verdict = _verdict_for(key, entry, value, tool, value.get("args") if args is None else args,
                           base.now)
    if not verdict.ok:
        raise Refused(verdict.reason, rule="approval.not_runnable", approval_id=key[len(PREFIX):],
                      status=value.get("status"), consumed_by=value.get("consumed_by"))
    policy = (base.schema.approvals if base.schema else {}).get(tool)
    seen = value.get("decided_on")
    if policy and policy.void_if_changed and state_at is not None:
        if not isinstance(seen, str):
            raise Refused(f"approval {key[len(PREFIX):]} records no commit its decision was "
                          f"made on, and the policy of {tool} voids it when "
                          f"{', '.join(policy.void_if_changed)} changed: decide it again",
                          rule="approval.void", approval_id=key[len(PREFIX):])
        try:
            then = state_at(seen)
        except (GitStateError, KeyError, ValueError):
            raise Refused(f"approval {key[len(PREFIX):]} was decided on {seen[:12]}, which "
                          f"this repository does not hold, and the policy of {tool} voids "
                          "it when a named key changed since: decide it again",
                          rule="approval.void", approval_id=key[len(PREFIX):],
                          decided_on=seen) from None
        changed = _changed(then, base.state, policy.void_if_changed)
        if changed:
            raise Refused(f"approval {key[len(PREFIX):]} is void: {changed} changed since the "
                          f"decision was made on {seen[:12]} (the policy of {tool} names it "
                          "in void_if_changed); request and decide it again",
                          rule="approval.void", approval_id=key[len(PREFIX):], key=changed,
                          decided_on=seen)
    spent = {**value, "status": "consumed", "consumed_by": actor}
    if not record_consumer:
        del spent["consumed_by"]
    return _plan(base, key, spent, reason, actor, entry.expires_at, "consume",
                 [key] if retire else [], entry)


def voiding_key(policy: Policy | None, then: State, now: State) -> str | None:
    """The first key the policy's ``void_if_changed`` names whose value differs between
    the state a decision was made on and ``now`` (None: the decision still holds)."""
    return _changed(then, now, policy.void_if_changed) if policy else None


def _changed(before: State, after: State, names: tuple[str, ...]) -> str | None:
    """The first key matching ``names`` (exact or ``*`` patterns) whose value differs."""
    keys = sorted(k for k in before.keys.keys() | after.keys.keys()
                  if any(fnmatchcase(k, n) for n in names))
    for k in keys:
        old, new = before.keys.get(k), after.keys.get(k)
        if (old is None) != (new is None) or (old is not None and new is not None and canonical(
                old.value, canonical_text) != canonical(new.value, canonical_text)):
            return k
    return None


def plan_outcome(base: Base, *, approval_id: str, error: str, reason: str,
                 actor: str, finished: Finished | None = None, retire: bool = True) -> Plan:
    """Record that the call a consumed approval handed over failed: ``outcome: failed`` and
    the error, once. The approval stays consumed (the call may have had effects); its
    record, retired by the spend, is read back with ``finished``."""
    key, entry, value = _record(base.state, approval_id, finished)
    if value.get("status") != "consumed" or value.get("outcome") is not None:
        raise Refused(f"approval {key[len(PREFIX):]} is {value.get('status')}"
                      + (f" with outcome {value.get('outcome')}" if value.get("outcome") else "")
                      + "; only a consumed approval takes an outcome, once",
                      rule="approval.outcome", approval_id=key[len(PREFIX):])
    new = {**value, "outcome": "failed", "error": error[:ERROR_MAX_CHARS]}
    return _plan(base, key, new, reason, actor, entry.expires_at, "outcome",
                 [key] if retire else [], entry)


@dataclass(frozen=True)
class Spend:
    """The call an approval handed over once its consume commit was written: the tool, the
    approved arguments (``args`` is a fresh copy of the frozen JSON on every read), the
    consume ``commit``, and the run it belongs to, if any."""

    approval_id: str
    tool: str
    args_json: str
    args_sha256: str
    commit: str
    actor: str
    run_id: str | None = None
    tool_call_id: str | None = None

    @property
    def args(self) -> dict[str, Any]:
        args = json.loads(self.args_json)
        assert isinstance(args, dict)
        return args


def _plan(base: Base, key: str, value: dict[str, Any], reason: str, actor: str,
          expires: str | None, step: str, retire: list[str] | None = None,
          old: Entry | None = None) -> Plan:
    """The step's change; the keys in ``retire`` leave the state with it (a final step's
    own, a request's expired ones), named in ``Gitstate-Retired``."""
    old = old or base.state.keys.get(key)
    entry = Entry(value, format_time(base.now), reason, actor, expires)
    assert step in FINAL_STEPS or key not in (retire or ())
    extra = ((TRAILER, step),) + (((RETIRED, encode_json(sorted(retire))),) if retire else ())
    change = Change(op="set", reason=reason, actor=actor, key=key,
                    old=old.value if old else None, new=value, expires_at=expires,
                    extra=extra)
    return Plan(without(base.state.with_key(key, entry), retire or ()), change,
                WriteResult("set", "", key=key, old=old, new=entry), schema=base.schema)


def listing(state: State, now: datetime) -> list[dict[str, Any]]:
    """Every approval, newest first, with whether it has expired."""
    out = []
    for key, entry in state.keys.items():
        if is_approval_key(key) and isinstance(entry.value, dict):
            out.append({"id": key[len(PREFIX):], **entry.value, "set_at": entry.set_at,
                        "reason": entry.reason, "expires_at": entry.expires_at,
                        "expired": entry.is_expired(now)})
    out.sort(key=lambda a: a["set_at"], reverse=True)
    return out


def decisions(state: State, now: datetime) -> dict[str, str]:
    """Where each approval stands, as a run records it: approved (consumed included),
    denied, expired or pending."""
    out = {}
    for a in listing(state, now):
        status = a.get("status")
        out[a["id"]] = "denied" if status == "denied" else "expired" if a["expired"] else \
            "approved" if status in ("approved", "consumed") else "pending"
    return out


def can_run(state: State, policies: dict[str, Policy], tool: str, args: Any,
            now: datetime) -> Verdict:
    """Whether ``tool(args)`` may run now (see the module docstring)."""
    if tool not in policies:
        return Verdict(True, tool, False, reason=f"{tool} needs no approval")
    best: Verdict | None = None
    for key, entry in state.keys.items():
        if not is_approval_key(key) or not isinstance(entry.value, dict) or \
                entry.value.get("tool") != tool:
            continue
        verdict = _verdict_for(key, entry, entry.value, tool, args, now)
        if verdict.ok:
            return verdict
        if best is None or _rank(verdict) > _rank(best):
            best = verdict
    return best or Verdict(False, tool, True, reason=f"no approval exists for {tool}")


def _rank(verdict: Verdict) -> int:
    # the most telling refusal: a changed argument beats "pending" beats the rest
    return 2 if "argument" in verdict.reason else 1 if "pending" in verdict.reason else 0


def _verdict_for(key: str, entry: Entry, value: dict[str, Any], tool: str, args: Any,
                 now: datetime) -> Verdict:
    approval_id = key[len(PREFIX):]

    def no(reason: str) -> Verdict:
        return Verdict(False, tool, True, approval_id, reason)

    if value.get("tool") != tool:
        return no(f"approval {approval_id} is for {value.get('tool')}, not {tool}")
    status = value.get("status")
    if status != "approved":
        return no(f"approval {approval_id} is {status}"
                  + (" (waiting for a decision)" if status == "pending" else ""))
    if entry.is_expired(now):
        return no(f"approval {approval_id} expired at {entry.expires_at}")
    _, digest = frozen(args)
    if digest != value.get("args_sha256"):
        diffs = changes(value.get("args"), json.loads(frozen(args)[0]), "args")
        named = ", ".join(f"{p}: {_text(o)} approved, {_text(n)} asked"
                          for p, o, n in diffs[:3]) or "the arguments"
        return no(f"approval {approval_id} was for other arguments (argument changed: "
                  f"{named})")
    return Verdict(True, tool, True, approval_id, f"approved by {value.get('decided_by')}")


def _text(value: Any) -> str:
    return "(absent)" if value is None else json.dumps(value, ensure_ascii=False)
