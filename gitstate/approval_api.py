"""The approval methods of the Python API (``StateRepo`` inherits them): request, decide,
list, check and consume frozen-argument approvals (gitstate/approvals.py holds the rules).

A thin layer: it validates inputs with ``rules``, picks the policy from HEAD's schema, and
hands a pure planner to the write engine, like every other write of the facade.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import approvals, requests, rules
from .approvals import Verdict
from .errors import InvalidInput

if TYPE_CHECKING:
    from .engine import WriteEngine
    from .planners import Base
    from .reader import StateReader
    from .results import WriteResult
    from .schema import ApprovalPolicy


class ApprovalMethods:
    """Mixed into StateRepo, whose engine, reader, writer and actor these use."""

    engine: WriteEngine
    reader: StateReader
    writer: str
    actor: str

    def now(self) -> datetime:
        raise NotImplementedError

    def _policies(self, commit: str | None = None) -> dict[str, ApprovalPolicy]:
        schema = self.reader.schema_at(commit or self.reader.head())
        return dict(schema.approvals) if schema else {}

    def request_approval(self, tool: str, args: Any, reason: str, *,
                         actor: str | None = None, request_id: str | None = None) -> str:
        """Freeze ``tool(args)`` as a pending approval (one commit); returns its id. Only a
        tool the schema's ``approvals`` names can be requested."""
        tool = rules.check_key(tool)
        if not isinstance(args, dict):
            raise InvalidInput("a tool's arguments are a JSON object", rule="approval.args")
        args = rules.check_value(args, "args")
        reason = rules.check_reason(reason)
        who = rules.check_actor(actor or self.actor)
        request = requests.fingerprint(request_id, "approval.request", tool, args, reason)

        def plan(base: Base) -> Any:
            return approvals.plan_request_for(base, tool=tool, args=args, reason=reason,
                                              actor=who)

        result = self.engine.write(plan, request)
        assert result.key is not None
        return result.key[len(approvals.PREFIX):]

    def approve(self, approval_id: str, reason: str, *, actor: str | None = None,
                request_id: str | None = None) -> WriteResult:
        """Approve a pending approval (only a writer its policy names)."""
        return self._decide(approval_id, True, reason, actor, request_id)

    def deny(self, approval_id: str, reason: str, *, actor: str | None = None,
             request_id: str | None = None) -> WriteResult:
        """Deny a pending approval: the call it froze never runs."""
        return self._decide(approval_id, False, reason, actor, request_id)

    def _decide(self, approval_id: str, approve: bool, reason: str, actor: str | None,
                request_id: str | None) -> WriteResult:
        reason = rules.check_reason(reason)
        who = rules.check_actor(actor or self.actor)
        request = requests.fingerprint(request_id, "approval.decide", approval_id, approve,
                                       reason)
        writer = self.writer
        return self.engine.write(lambda base: approvals.plan_decide(
            base, dict(base.schema.approvals) if base.schema else {}, writer,
            approval_id=approval_id, approve=approve, reason=reason, actor=who), request)

    def approvals(self) -> list[dict[str, Any]]:
        """Every approval record, newest first (pending, decided and consumed)."""
        head = self.reader.head()
        return approvals.listing(self.reader.state_at(head), self.now())

    def approval_verdict(self, tool: str, args: Any) -> Verdict:
        """Whether ``tool(args)`` may run now as far as approvals go, and why not."""
        head = self.reader.head()
        return approvals.can_run(self.reader.state_at(head), self._policies(head), tool, args,
                                 self.now())

    def consume_approval(self, approval_id: str, tool: str | None = None, args: Any = None, *,
                         reason: str | None = None, actor: str | None = None,
                         request_id: str | None = None) -> WriteResult:
        """Spend an approval as its call runs (one commit); given ``tool`` and ``args``, they
        must be exactly the approved call. A retry with the same ``request_id`` returns the
        first result; any other second consume is refused."""
        who = rules.check_actor(actor or self.actor)
        text = rules.check_reason(reason or f"run {tool or 'the approved call'} with approval "
                                  f"{approval_id}")
        request = requests.fingerprint(request_id, "approval.consume", approval_id, tool,
                                       args)
        return self.engine.write(lambda base: approvals.plan_consume(
            base, approval_id=approval_id, tool=tool, args=args, reason=text, actor=who),
            request)
